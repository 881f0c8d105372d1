/* A fixture of mxop verify's tests with one flaw: see flaw_base.h (FLAW_OVERRUN). */
#define FLAW_OVERRUN 1
#define FLAW_NAME "flaw_overrun"
#include "flaw_base.h"
