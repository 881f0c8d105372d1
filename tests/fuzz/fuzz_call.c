/*
 * tests/fuzz/fuzz_call.c - libFuzzer target: the worker's call validation.
 *
 * The input is one data-channel payload (an mxop.Call, and the same bytes
 * as a mailbox call record) as a hostile or broken client could send it.
 * It is unpacked (decoded) and served by the worker's
 * own call handler (mxop__run_call), against the example op libraries
 * loaded by the worker's own loader and two real shared-memory regions:
 * every descriptor, shape, dtype, arity and attribute check runs as in a
 * worker, and a call that passes them runs the op on mapped memory.  Any
 * input must end in a result with a status, never in a crash, an access
 * outside a region, or a leak.
 *
 * The example libraries are the ones in build/plugins (MXOP_FUZZ_PLUGINS);
 * op indices follow the load order below, which tests/fuzz/seeds.c uses to
 * write the seed corpus.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data.pb-c.h"
#include "shm/call_record.h"
#include "wire/frame.h"
#include "server/worker/worker.h"

#ifndef MXOP_FUZZ_PLUGINS
#error "MXOP_FUZZ_PLUGINS must name the directory of the example op libraries"
#endif

/* The load order fixes the op indices the seeds use (see seeds.c). */
static const char *const libraries[] = {"relu.so",  "gemm.so",         "softmax.so",
                                        "sum_n.so", "running_mean.so", "noop.so"};
/* Regions 1 and 2, as a client would register them. */
static const struct {
    uint32_t id;
    uint64_t size;
} regions[] = {{1, 1u << 20}, {2, 1u << 16}};

static mxop__pbarena_t arena;

/*
 * The same bytes read as a call record (shm/call_record.h), as the worker
 * reads a frame of kind MXOP__KIND_CALL_REC from its mailbox: decoded, then
 * served by the same handler.  The seeds hold records too (seeds.c).
 */
static void serve_record(const uint8_t *data, size_t size)
{
    static mxop__call_rec_view_t view;
    char msg[160];
    Mxop__CallResult res = MXOP__CALL_RESULT__INIT;
    int rc = mxop__call_rec_decode(data, size, &view, msg, sizeof(msg));
    if (rc != 0) {
        if (!mxop__is_known_error(rc))
            abort();
        return;
    }
    mxop__run_call(&view.call, &res);
    if (res.status != 0 && !mxop__is_known_error(res.status))
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char msg[512];
    if (mxop__pbarena_init(&arena, 1u << 16) != 0)
        return 1;
    for (size_t i = 0; i < sizeof(libraries) / sizeof(libraries[0]); i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", MXOP_FUZZ_PLUGINS, libraries[i]);
        uint32_t lib;
        if (mxop__plugin_load(path, libraries[i], -1, NULL, NULL, &lib, msg, sizeof(msg)) != 0) {
            fprintf(stderr, "fuzz_call: %s\n", msg);
            abort();
        }
    }
    for (size_t i = 0; i < sizeof(regions) / sizeof(regions[0]); i++) {
        int fd = memfd_create("fuzz-region", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)regions[i].size) != 0)
            abort();
        /* The worker keeps (and later closes) the descriptor it is given. */
        if (mxop__region_add(regions[i].id, regions[i].size, fd, msg, sizeof(msg)) != 0) {
            fprintf(stderr, "fuzz_call: %s\n", msg);
            abort();
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MXOP__FRAME_MAX)
        return 0; /* the framing refuses it before any unpacking */
    serve_record(data, size);
    mxop__pbarena_reset(&arena);
    Mxop__Call *call = mxop__call__unpack(&arena.allocator, size, data);
    if (call == NULL)
        return 0;
    /* A mailbox attach needs descriptors on the frame: the fuzzer cannot send any. */
    if (call->body_case == MXOP__CALL__BODY_ATTACH_MAILBOX)
        return 0;
    Mxop__CallResult res = MXOP__CALL_RESULT__INIT;
    mxop__run_call(call, &res);
    /* Every answer has a status that is 0 or a named code. */
    if (res.status != 0 && !mxop__is_known_error(res.status))
        abort();
    return 0;
}
