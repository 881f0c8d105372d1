/*
 * tests/test_errors.c - every bad input gets its named error, and the daemon
 * serves the next request afterwards.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "harness.h"
#include "wire/frame.h"

static mxt_daemon_t daemon_;
static mxop_client_t *client;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
    const char *libs[] = {"relu.so", "gemm.so", NULL};
    client = mxt_connect_with(&daemon_, libs);
}

static void teardown(void)
{
    mxop_close(client);
    client = NULL;
    mxt_daemon_stop(&daemon_);
}

TestSuite(errors, .init = setup, .fini = teardown, .timeout = 60);

/* The session that saw the error still works, and so does a new one. */
static void assert_still_serves(void)
{
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");
    int64_t shape[] = {8};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, shape, 1, &x);
    mxt_array(client, MXOP_F32, 1, shape, 2, &y);
    int rc = mxop_forward(client, mxt_op(client, "relu"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "next call failed: %s: %s", mxop_err_name(rc), mxop_last_error(client));
    for (int i = 0; i < 8; i++)
        cr_assert_eq(mxt_get(&y, i), mxt_get(&x, i) > 0 ? mxt_get(&x, i) : 0);
    mxop_array_free(client, &x);
    mxop_array_free(client, &y);
    mxop_client_t *other = mxt_connect(&daemon_);
    cr_assert_eq(mxop_load_library(other, "relu.so"), 0);
    mxop_close(other);
}

static void expect_load(const char *lib, int code, const char *needle)
{
    int rc = mxop_load_library(client, lib);
    cr_assert_eq(rc, code, "load %s: got %s (%s), expected %s", lib, mxop_err_name(rc),
                 mxop_last_error(client), mxop_err_name(code));
    if (needle != NULL)
        cr_assert(strstr(mxop_last_error(client), needle) != NULL,
                  "message '%s' does not mention '%s'", mxop_last_error(client), needle);
    assert_still_serves();
}

Test(errors, unknown_library)
{
    expect_load("nosuch.so", MXOP_ELIB_NOT_FOUND, "nosuch.so");
}

Test(errors, library_outside_plugin_dir_by_dotdot)
{
    char src[512], dst[512];
    snprintf(src, sizeof(src), "%s/plugins/relu.so", mxt_build_dir());
    snprintf(dst, sizeof(dst), "%s/outside.so", daemon_.dir);
    char cmd[1100];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", src, dst);
    cr_assert_eq(system(cmd), 0);
    expect_load("../outside.so", MXOP_ELIB_OUTSIDE, "outside");
}

Test(errors, library_outside_plugin_dir_by_symlink)
{
    char link[512], target[512];
    snprintf(target, sizeof(target), "%s/plugins/relu.so", mxt_build_dir());
    snprintf(link, sizeof(link), "%s/escape.so", daemon_.plugins);
    cr_assert_eq(symlink(target, link), 0);
    expect_load("escape.so", MXOP_ELIB_OUTSIDE, NULL);
}

Test(errors, library_by_absolute_path)
{
    char abs[512];
    snprintf(abs, sizeof(abs), "%s/relu.so", daemon_.plugins);
    expect_load(abs, MXOP_ELIB_OUTSIDE, NULL);
}

Test(errors, wrong_abi_version)
{
    expect_load("bad_abi.so", MXOP_EABI, "999");
}

Test(errors, missing_entry_points)
{
    expect_load("no_info.so", MXOP_ELIB_INVALID, "mxop_plugin_info");
    expect_load("no_init.so", MXOP_ELIB_INVALID, "mxop_plugin_init");
}

Test(errors, not_a_library)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/junk.so", daemon_.plugins);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("this is not an ELF file\n", f);
    fclose(f);
    expect_load("junk.so", MXOP_ELIB_INVALID, NULL);
}

Test(errors, failing_init)
{
    expect_load("init_fail.so", MXOP_ELIB_INIT, "refusing to start");
}

Test(errors, duplicate_op_name)
{
    expect_load("dup_op.so", MXOP_EDUPLICATE, "relu");
}

Test(errors, crash_in_library_init)
{
    expect_load("init_crash.so", MXOP_EWORKER_CRASHED, "SIGSEGV");
}

Test(errors, unknown_op)
{
    const mxop_op_t *op = NULL;
    int rc = mxop_op_find(client, "no_such_op", &op);
    cr_assert_eq(rc, MXOP_EUNKNOWN_OP);
    cr_assert(strstr(mxop_last_error(client), "no_such_op") != NULL);
    assert_still_serves();
}

static int call_relu(const mxop_array_t *in, int n_in, mxop_array_t *out, int n_out)
{
    return mxop_forward(client, mxt_op(client, "relu"), NULL, in, n_in, out, n_out);
}

Test(errors, wrong_number_of_inputs)
{
    int64_t shape[] = {4};
    mxop_array_t in[2], out;
    mxt_array(client, MXOP_F32, 1, shape, 1, &in[0]);
    mxt_array(client, MXOP_F32, 1, shape, 2, &in[1]);
    mxt_array(client, MXOP_F32, 1, shape, 3, &out);
    int rc = call_relu(in, 2, &out, 1);
    cr_assert_eq(rc, MXOP_EARITY, "got %s", mxop_err_name(rc));
    cr_assert(strstr(mxop_last_error(client), "relu") != NULL, "%s", mxop_last_error(client));
    assert_still_serves();
}

Test(errors, shape_mismatch)
{
    int64_t s4[] = {4}, s5[] = {5};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, s4, 1, &x);
    mxt_array(client, MXOP_F32, 1, s5, 2, &y);
    int rc = call_relu(&x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_ESHAPE, "got %s", mxop_err_name(rc));

    int64_t as[] = {2, 3}, bs[] = {4, 5}, cs[] = {2, 5};
    mxop_array_t ab[2], c;
    mxt_array(client, MXOP_F64, 2, as, 1, &ab[0]);
    mxt_array(client, MXOP_F64, 2, bs, 2, &ab[1]);
    mxt_array(client, MXOP_F64, 2, cs, 3, &c);
    rc = mxop_forward(client, mxt_op(client, "gemm"), NULL, ab, 2, &c, 1);
    cr_assert_eq(rc, MXOP_ESHAPE, "got %s", mxop_err_name(rc));
    assert_still_serves();
}

Test(errors, dtype_mismatch)
{
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, s, 1, &x);
    mxt_array(client, MXOP_F64, 1, s, 2, &y);
    int rc = call_relu(&x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EDTYPE, "got %s", mxop_err_name(rc));
    assert_still_serves();
}

Test(errors, invalid_attribute)
{
    int64_t s[] = {3, 3};
    mxop_array_t ab[2], c;
    mxt_array(client, MXOP_F64, 2, s, 1, &ab[0]);
    mxt_array(client, MXOP_F64, 2, s, 2, &ab[1]);
    mxt_array(client, MXOP_F64, 2, s, 3, &c);
    const char *attrs[] = {"transpose_a", "maybe", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_forward(client, mxt_op(client, "gemm"), &call, ab, 2, &c, 1);
    cr_assert_eq(rc, MXOP_EATTR, "got %s", mxop_err_name(rc));
    cr_assert(strstr(mxop_last_error(client), "transpose_a") != NULL, "%s",
              mxop_last_error(client));
    assert_still_serves();
}

Test(errors, descriptor_outside_its_region)
{
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, s, 1, &x);
    mxt_array(client, MXOP_F32, 1, s, 2, &y);
    uint64_t before[16];
    memcpy(before, y.data, sizeof(float) * 16);
    /* A hand-made descriptor pointing past the end of its region. */
    mxop_array_t bad = x;
    bad.offset = (uint64_t)1 << 40;
    int rc = call_relu(&bad, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EBOUNDS, "got %s", mxop_err_name(rc));
    /* And one that starts inside but runs past the end. */
    mxop_array_t view;
    uint32_t region;
    void *base;
    cr_assert_eq(mxop_region_create(client, 4096, &region, &base), 0);
    cr_assert_eq(mxop_array_view(client, region, 4096 - 16, MXOP_F32, 1, s, &view), MXOP_EBOUNDS);
    view = x;
    view.region = region;
    view.offset = 4096 - 16;
    rc = call_relu(&view, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EBOUNDS, "got %s", mxop_err_name(rc));
    cr_assert_eq(memcmp(before, y.data, sizeof(float) * 16), 0, "output touched");
    assert_still_serves();
}

Test(errors, unknown_region)
{
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, s, 1, &x);
    mxt_array(client, MXOP_F32, 1, s, 2, &y);
    mxop_array_t bad = x;
    bad.region = 4242;
    bad.offset = 0;
    int rc = call_relu(&bad, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EUNKNOWN_REGION, "got %s", mxop_err_name(rc));
    cr_assert_eq(mxop_region_release(client, 4242), MXOP_EUNKNOWN_REGION);
    assert_still_serves();
}

/* ---- raw frames: the daemon must survive whatever arrives on its socket ---- */

static int raw_connect(void)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(s >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    cr_assert(strlen(daemon_.sock) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, daemon_.sock, strlen(daemon_.sock) + 1);
    cr_assert_eq(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s", strerror(errno));
    return s;
}

/* Reads the daemon's error reply and then EOF; returns the reply's status. */
static int raw_expect_error_and_close(int s)
{
    mxop__framebuf_t fb = {0};
    uint16_t kind;
    uint32_t len;
    int rc = mxop__frame_recv(s, &fb, &kind, &len, NULL, 0, NULL, 5000);
    cr_assert_eq(rc, 0, "no error reply: %s", mxop_err_name(rc));
    cr_assert_eq(kind, MXOP__KIND_CTL_REPLY);
    Mxop__Reply *reply = mxop__reply__unpack(NULL, len, fb.data);
    cr_assert_not_null(reply);
    int status = reply->status;
    cr_assert(reply->message != NULL && reply->message[0] != '\0', "error reply has no message");
    mxop__reply__free_unpacked(reply, NULL);
    char byte;
    cr_assert_eq(read(s, &byte, 1), 0, "the connection was not closed");
    mxop__framebuf_free(&fb);
    close(s);
    return status;
}

Test(errors, frame_over_maximum_size)
{
    int s = raw_connect();
    uint8_t hdr[MXOP__FRAME_HDR];
    mxop__frame_hdr_encode(hdr, MXOP__KIND_CTL_REQUEST, MXOP__FRAME_MAX + 1);
    cr_assert_eq(write(s, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
    cr_assert_eq(raw_expect_error_and_close(s), MXOP_EFRAME_TOO_LARGE);
    assert_still_serves();
}

Test(errors, bad_magic)
{
    int s = raw_connect();
    const char junk[] = "GET / HTTP/1.1\r\n\r\n";
    cr_assert(write(s, junk, sizeof(junk) - 1) > 0);
    cr_assert_eq(raw_expect_error_and_close(s), MXOP_EPROTOCOL);
    assert_still_serves();
}

Test(errors, undecodable_payload)
{
    int s = raw_connect();
    uint8_t frame[MXOP__FRAME_HDR + 4] = {0};
    mxop__frame_hdr_encode(frame, MXOP__KIND_CTL_REQUEST, 4);
    memset(frame + MXOP__FRAME_HDR, 0xff, 4);
    cr_assert_eq(write(s, frame, sizeof(frame)), (ssize_t)sizeof(frame));
    cr_assert_eq(raw_expect_error_and_close(s), MXOP_EPROTOCOL);
    assert_still_serves();
}

Test(errors, unsupported_protocol_version)
{
    int s = raw_connect();
    Mxop__Hello hello = MXOP__HELLO__INIT;
    hello.min_version = 90;
    hello.max_version = 99;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.id = 1;
    req.body_case = MXOP__REQUEST__BODY_HELLO;
    req.hello = &hello;
    mxop__framebuf_t fb = {0};
    cr_assert_eq(mxop__frame_send(s, &fb, MXOP__KIND_CTL_REQUEST, &req.base, NULL, 0), 0);
    mxop__framebuf_free(&fb);
    cr_assert_eq(raw_expect_error_and_close(s), MXOP_EVERSION);
    assert_still_serves();
}

Test(errors, request_before_hello)
{
    int s = raw_connect();
    Mxop__Stats stats = MXOP__STATS__INIT;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.id = 7;
    req.body_case = MXOP__REQUEST__BODY_STATS;
    req.stats = &stats;
    mxop__framebuf_t fb = {0};
    cr_assert_eq(mxop__frame_send(s, &fb, MXOP__KIND_CTL_REQUEST, &req.base, NULL, 0), 0);
    mxop__framebuf_free(&fb);
    cr_assert_eq(raw_expect_error_and_close(s), MXOP_EPROTOCOL);
    assert_still_serves();
}

Test(errors, connect_without_a_path)
{
    unsetenv("MXOP_SOCKET");
    mxop_client_t *c = NULL;
    cr_assert_eq(mxop_connect(NULL, NULL, &c), MXOP_EINVAL);
    cr_assert_null(c);
    char missing[400];
    snprintf(missing, sizeof(missing), "%s/none.sock", daemon_.dir);
    cr_assert_eq(mxop_connect(missing, NULL, &c), MXOP_EDISCONNECTED);
    cr_assert(strstr(mxop_connect_error(), "none.sock") != NULL, "%s", mxop_connect_error());
}
