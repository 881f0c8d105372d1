/*
 * tests/test_admission.c - what one connection or session may hold:
 * a cap on connections, the handshake and idle timeouts, a cap
 * on partial frames buffered, and per-session quotas of regions, region
 * bytes and libraries.  Each refusal is a named error whose message names
 * the limit; the daemon lives, other sessions keep their results, and the
 * daemon's descriptors come back to their baseline.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "harness.h"
#include "mxop/errors.h"
#include "wire/frame.h"

static mxt_daemon_t daemon_;

static void setup(void)
{
    const char *args[] = {"--max-connections",
                          "3",
                          "--handshake-timeout-ms",
                          "400",
                          "--idle-timeout-ms",
                          "800",
                          "--max-buffered-mb",
                          "2",
                          "--session-max-regions",
                          "3",
                          "--session-max-region-mb",
                          "40",
                          "--session-max-libraries",
                          "2",
                          "--session-max-states",
                          "3",
                          NULL};
    mxt_daemon_start(&daemon_, args);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(admission, .init = setup, .fini = teardown, .timeout = 60);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int raw_connect(void)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(s >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, daemon_.sock, strlen(daemon_.sock) + 1);
    cr_assert_eq(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s", strerror(errno));
    return s;
}

/* Reads one reply (status, message) and then expects the close; returns the status. */
static int reply_then_close(int s, char *msg, size_t msglen)
{
    mxop__framebuf_t fb = {0};
    uint16_t kind;
    uint32_t len;
    int rc = mxop__frame_recv(s, &fb, &kind, &len, NULL, 0, NULL, 5000);
    cr_assert_eq(rc, 0, "no reply: %s", mxop_err_name(rc));
    Mxop__Reply *r = mxop__reply__unpack(NULL, len, fb.data);
    cr_assert_not_null(r);
    int status = r->status;
    snprintf(msg, msglen, "%s", r->message != NULL ? r->message : "");
    mxop__reply__free_unpacked(r, NULL);
    mxop__framebuf_free(&fb);
    /* Closed: EOF, or a reset when the daemon closed with our unread bytes. */
    char byte;
    cr_assert(read(s, &byte, 1) <= 0, "the connection was not closed");
    close(s);
    return status;
}

/* relu on fresh arrays in a new region: 0 and right values. */
static void relu_works(mxop_client_t *c)
{
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 3, &x);
    mxt_array(c, MXOP_F32, 1, s, 4, &y);
    int rc = mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(c));
    for (int i = 0; i < 16; i++)
        cr_assert_eq(mxt_get(&y, i), mxt_get(&x, i) > 0 ? mxt_get(&x, i) : 0);
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
}

static void fds_back_to(int want)
{
    int n = -1;
    for (int waited = 0; waited <= 10000; waited += 50) {
        n = mxt_fd_count(daemon_.pid);
        if (n <= want) /* back at the baseline (or below it: nothing leaked) */
            return;
        mxt_sleep_ms(50);
    }
    cr_assert_fail("the daemon holds %d descriptors, %d before", n, want);
}

Test(admission, connections_beyond_the_cap_are_refused_with_the_limit_named)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *a = mxt_connect_with(&daemon_, libs);
    relu_works(a);
    mxt_sleep_ms(500);
    int base = mxt_fd_count(daemon_.pid);
    int s1 = raw_connect();
    int s2 = raw_connect();
    mxt_sleep_ms(100);
    int s3 = raw_connect();
    char msg[512];
    int rc = reply_then_close(s3, msg, sizeof(msg));
    cr_assert_eq(rc, MXOP_ELIMIT, "got %s (%s)", mxop_err_name(rc), msg);
    cr_assert(strstr(msg, "--max-connections") != NULL && strstr(msg, "3") != NULL, "%s", msg);
    close(s1);
    close(s2);
    relu_works(a);
    cr_assert(mxt_daemon_alive(&daemon_));
    fds_back_to(base);
    mxop_close(a);
}

Test(admission, no_hello_within_the_handshake_timeout_is_closed)
{
    int base = mxt_fd_count(daemon_.pid);
    int s = raw_connect();
    double t0 = now_s();
    char msg[512];
    int rc = reply_then_close(s, msg, sizeof(msg));
    cr_assert_eq(rc, MXOP_ETIMEOUT, "got %s (%s)", mxop_err_name(rc), msg);
    cr_assert(strstr(msg, "--handshake-timeout-ms") != NULL, "%s", msg);
    cr_assert(now_s() - t0 < 5, "closed after %.1f s", now_s() - t0);
    fds_back_to(base);
}

Test(admission, no_session_within_the_idle_timeout_is_closed)
{
    int base = mxt_fd_count(daemon_.pid);
    int s = raw_connect();
    const uint8_t hello[] = {0x08, 0x01, 0x52, 0x07, 0x08, 0x01, 0x10, 0x01, 0x1a, 0x01, 't'};
    uint8_t hdr[MXOP__FRAME_HDR];
    mxop__frame_hdr_encode(hdr, MXOP__KIND_CTL_REQUEST, sizeof(hello));
    cr_assert_eq(write(s, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
    cr_assert_eq(write(s, hello, sizeof(hello)), (ssize_t)sizeof(hello));
    /* The Hello reply, then the timeout's error and the close. */
    mxop__framebuf_t fb = {0};
    uint16_t kind;
    uint32_t len;
    cr_assert_eq(mxop__frame_recv(s, &fb, &kind, &len, NULL, 0, NULL, 5000), 0);
    mxop__framebuf_free(&fb);
    double t0 = now_s();
    char msg[512];
    int rc = reply_then_close(s, msg, sizeof(msg));
    cr_assert_eq(rc, MXOP_ETIMEOUT, "got %s (%s)", mxop_err_name(rc), msg);
    cr_assert(strstr(msg, "--idle-timeout-ms") != NULL, "%s", msg);
    cr_assert(now_s() - t0 < 5, "closed after %.1f s", now_s() - t0);
    fds_back_to(base);
}

Test(admission, partial_frames_beyond_the_buffer_cap_are_refused)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *a = mxt_connect_with(&daemon_, libs);
    relu_works(a);
    mxt_sleep_ms(500);
    int base = mxt_fd_count(daemon_.pid);
    /* Two connections each begin a 1 MiB frame; 2 MiB in all is the cap. */
    static uint8_t part[900 * 1024];
    int s[2];
    for (int i = 0; i < 2; i++) {
        s[i] = raw_connect();
        uint8_t hdr[MXOP__FRAME_HDR];
        mxop__frame_hdr_encode(hdr, MXOP__KIND_CTL_REQUEST, MXOP__FRAME_MAX);
        cr_assert_eq(send(s[i], hdr, sizeof(hdr), MSG_NOSIGNAL), (ssize_t)sizeof(hdr));
        size_t off = 0;
        while (off < sizeof(part)) {
            ssize_t n = send(s[i], part + off, sizeof(part) - off, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n > 0)
                off += (size_t)n;
            else if (errno == EAGAIN)
                mxt_sleep_ms(10);
            else
                break; /* refused and closed: that is the point */
        }
        mxt_sleep_ms(200);
    }
    char msg[512];
    int rc = reply_then_close(s[1], msg, sizeof(msg));
    cr_assert_eq(rc, MXOP_ELIMIT, "got %s (%s)", mxop_err_name(rc), msg);
    cr_assert(strstr(msg, "--max-buffered-mb") != NULL, "%s", msg);
    close(s[0]);
    relu_works(a);
    cr_assert(mxt_daemon_alive(&daemon_));
    fds_back_to(base);
    mxop_close(a);
}

Test(admission, session_quotas_of_regions_bytes_and_libraries)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *other = mxt_connect_with(&daemon_, libs);
    mxop_client_t *c = mxt_connect(&daemon_);
    uint32_t r[4];
    void *base_p;
    /* Bytes: 40 MiB in all. */
    int rc = mxop_region_create(c, 64u << 20, &r[0], &base_p);
    cr_assert_eq(rc, MXOP_ELIMIT, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "--session-max-region-mb") != NULL, "%s",
              mxop_last_error(c));
    /* Count: 3 regions. */
    for (int i = 0; i < 3; i++)
        cr_assert_eq(mxop_region_create(c, 4096, &r[i], &base_p), 0, "%s", mxop_last_error(c));
    rc = mxop_region_create(c, 4096, &r[3], &base_p);
    cr_assert_eq(rc, MXOP_ELIMIT, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "--session-max-regions 3") != NULL, "%s",
              mxop_last_error(c));
    /* Libraries: 2. */
    cr_assert_eq(mxop_load_library(c, "relu.so"), 0);
    cr_assert_eq(mxop_load_library(c, "crash.so"), 0);
    rc = mxop_load_library(c, "hang_cb.so");
    cr_assert_eq(rc, MXOP_ELIMIT, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "--session-max-libraries 2") != NULL, "%s",
              mxop_last_error(c));
    /* An already loaded library is not a new one. */
    cr_assert_eq(mxop_load_library(c, "relu.so"), 0);
    relu_works(other);
    cr_assert(mxt_daemon_alive(&daemon_));
    mxop_close(c);
    mxop_close(other);
}

Test(admission, session_quota_of_op_states)
{
    const char *libs[] = {"relu.so", "running_mean.so", NULL};
    mxop_client_t *other = mxt_connect_with(&daemon_, libs);
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    const mxop_op_t *op = mxt_op(c, "running_mean_norm");
    int32_t dt = MXOP_F32;
    mxop_shape_t sh = {.ndim = 2, .dims = {4, 8}};
    uint64_t st[4] = {0};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(mxop_state_create(c, op, NULL, 1, &dt, &sh, &st[i]), 0, "state %d: %s", i,
                     mxop_last_error(c));
    int rc = mxop_state_create(c, op, NULL, 1, &dt, &sh, &st[3]);
    cr_assert_eq(rc, MXOP_ELIMIT, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "--session-max-states 3") != NULL, "%s",
              mxop_last_error(c));
    /* Refused, not fatal: a destroyed state makes room, and the worker was not replaced. */
    cr_assert_eq(mxop_state_destroy(c, st[0]), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_state_create(c, op, NULL, 1, &dt, &sh, &st[3]), 0, "%s", mxop_last_error(c));
    mxop_stats_t stats;
    cr_assert_eq(mxop_stats(c, &stats), 0);
    cr_assert_eq(stats.worker_restarts, 0);
    /* Another session has its own quota. */
    uint64_t o;
    cr_assert_eq(
        mxop_state_create(other, mxt_op(other, "running_mean_norm"), NULL, 1, &dt, &sh, &o), 0,
        "%s", mxop_last_error(other));
    relu_works(other);
    cr_assert(mxt_daemon_alive(&daemon_));
    mxop_close(c);
    mxop_close(other);
}

/* A Shutdown request from the daemon's user ends it cleanly (through main.c's callback). */
Test(admission, shutdown_request_from_the_daemons_user_stops_it)
{
    mxop_client_t *c = mxt_connect(&daemon_);
    cr_assert_eq(mxop_shutdown_daemon(c), 0, "%s", mxop_last_error(c));
    mxop_close(c);
    double t0 = now_s();
    while (mxt_daemon_alive(&daemon_) && now_s() - t0 < 10)
        mxt_sleep_ms(50);
    cr_assert(!mxt_daemon_alive(&daemon_), "the daemon still runs");
    /* mxt_daemon_alive reaped it: there is nothing left for the teardown to stop. */
    daemon_.pid = 0;
}
