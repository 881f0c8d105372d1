/* A fixture of mxop verify's tests with one flaw: see flaw_base.h (FLAW_NONDET). */
#define FLAW_NONDET 1
#define FLAW_NAME "flaw_nondet"
#include "flaw_base.h"
