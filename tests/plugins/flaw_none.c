/* The control for mxop verify's flaw fixtures: flaw_base.h with no flaw; it must pass. */
#define FLAW_NAME "flaw_none"
#include "flaw_base.h"
