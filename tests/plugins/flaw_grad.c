/* A fixture of mxop verify's tests with one flaw: see flaw_base.h (FLAW_GRAD). */
#define FLAW_GRAD 1
#define FLAW_NAME "flaw_grad"
#include "flaw_base.h"
