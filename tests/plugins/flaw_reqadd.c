/* A fixture of mxop verify's tests with one flaw: see flaw_base.h (FLAW_REQADD). */
#define FLAW_REQADD 1
#define FLAW_NAME "flaw_reqadd"
#include "flaw_base.h"
