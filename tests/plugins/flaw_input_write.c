/* A fixture of mxop verify's tests with one flaw: see flaw_base.h (FLAW_INPUT_WRITE). */
#define FLAW_INPUT_WRITE 1
#define FLAW_NAME "flaw_input_write"
#include "flaw_base.h"
