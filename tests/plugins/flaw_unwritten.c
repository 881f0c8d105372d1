/* A fixture of mxop verify's tests with one flaw: see flaw_base.h (FLAW_UNWRITTEN). */
#define FLAW_UNWRITTEN 1
#define FLAW_NAME "flaw_unwritten"
#include "flaw_base.h"
