/* A fixture of mxop verify's tests with one flaw: see flaw_base.h (FLAW_INFER). */
#define FLAW_INFER 1
#define FLAW_NAME "flaw_infer"
#include "flaw_base.h"
