/*
 * tests/fuzz/fuzz_control.c - libFuzzer target: control request validation.
 *
 * The input is one control-request payload as any local client could send
 * it.  It goes through the daemon's own checks in the daemon's order: the
 * wire-form checks before decoding (field count, nesting: the bound on the
 * work one frame can cause), then decoding into the connection's arena,
 * then the checks of the decoded request (NUL inside strings, id 0, the
 * form of each body).  Every input must end in 0 or a named code with a
 * message, never in a crash, an overflow or a leak.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control.pb-c.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "wire/frame.h"
#include "server/daemon/session/session.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static mxop__pbarena_t arena;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return mxop__pbarena_init(&arena, 16384) == 0 ? 0 : 1;
}

static void expect_named(int rc, const char *msg)
{
    /* A refusal is a known code with a sentence saying why. */
    if (rc != 0 && (strcmp(mxop_err_name(rc), "MXOP_E?") == 0 || msg[0] == '\0'))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MXOP__FRAME_MAX)
        return 0; /* the framing refuses it first */
    char msg[512] = "";
    int rc = mxop__ctl_validate(data, size, NULL, NULL, msg, sizeof(msg));
    expect_named(rc, msg);
    if (rc != 0)
        return 0;
    mxop__pbarena_reset(&arena);
    Mxop__Request *req = mxop__request__unpack(&arena.allocator, size, data);
    if (req == NULL)
        return 0;
    msg[0] = '\0';
    rc = mxop__ctl_validate(data, size, NULL, req, msg, sizeof(msg));
    expect_named(rc, msg);
    return 0;
}
