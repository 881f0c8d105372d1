/*
 * tests/test_supervision.c - supervision that an op or a client cannot
 * defeat: a worker's note about its own death does not change
 * the verdict, a failed spawn is retried until it works, the spare is
 * re-armed, and control requests with NUL bytes in strings or with
 * floods of fields are refused with the field or limit named.  Also: a
 * hang in each kind of callback is killed and named, an idle worker
 * stopped or deadlocked is replaced after a liveness probe, garbage on the
 * data channel (either way) replaces the worker with the reason named,
 * NULs inside call attributes are refused naming the key, and a crash's
 * message carries the faulting function.
 *
 * Each test checks the named error, a generous bound in seconds, that the
 * daemon lives, that another session's results stay right, and that the
 * daemon's descriptors come back to their baseline.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "data.pb-c.h"
#include "harness.h"
#include "mxop/errors.h"
#include "wire/frame.h"

static mxt_daemon_t daemon_;

/*
 * Arrays made once per client (at most 4 clients), so that calls made
 * while the daemon cannot accept descriptors need no new region.
 */
static struct {
    mxop_client_t *c;
    mxop_array_t x, y;
} arrays[4];

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
}

static void setup_no_spare(void)
{
    const char *args[] = {"--warm-spare", "off", NULL};
    mxt_daemon_start(&daemon_, args);
}

static void teardown(void)
{
    memset(arrays, 0, sizeof(arrays));
    mxt_daemon_stop(&daemon_);
}

TestSuite(supervision, .init = setup, .fini = teardown, .timeout = 90);
TestSuite(respawn, .init = setup_no_spare, .fini = teardown, .timeout = 90);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* relu on the client's arrays: 0 and the right values, or the error. */
static int relu_ok(mxop_client_t *c)
{
    int k = 0;
    while (k < 4 && arrays[k].c != NULL && arrays[k].c != c)
        k++;
    cr_assert(k < 4);
    if (arrays[k].c == NULL) {
        int64_t s[] = {64};
        arrays[k].c = c;
        mxt_array(c, MXOP_F32, 1, s, 7 + (unsigned)k, &arrays[k].x);
        mxt_array(c, MXOP_F32, 1, s, 8 + (unsigned)k, &arrays[k].y);
    }
    mxop_array_t *x = &arrays[k].x, *y = &arrays[k].y;
    for (int i = 0; i < 64; i++)
        mxt_set(y, i, -99);
    int rc = mxop_forward(c, mxt_op(c, "relu"), NULL, x, 1, y, 1);
    for (int i = 0; rc == 0 && i < 64; i++)
        cr_assert_eq(mxt_get(y, i), mxt_get(x, i) > 0 ? mxt_get(x, i) : 0, "wrong result");
    return rc;
}

/* Waits (at most timeout_ms) for the daemon's descriptor count to be back at `want`. */
static void fds_back_to(int want, int timeout_ms)
{
    int n = -1;
    for (int waited = 0; waited <= timeout_ms; waited += 50) {
        n = mxt_fd_count(daemon_.pid);
        if (n <= want) /* back at the baseline (or below it: nothing leaked) */
            return;
        mxt_sleep_ms(50);
    }
    cr_assert_fail("the daemon holds %d descriptors, %d before", n, want);
}

/* ---- a worker's note about its own death is only an annotation ---- */

static void forged_note(const char *op, const char *needle)
{
    const char *libs[] = {"relu.so", "forge_note.so", NULL};
    mxop_client_t *other = mxt_connect_with(&daemon_, libs);
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(c), 0);
    cr_assert_eq(relu_ok(other), 0);
    mxt_sleep_ms(1000); /* both spares started */
    int base = mxt_fd_count(daemon_.pid);
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    double t0 = now_s();
    int rc = mxop_forward(c, mxt_op(c, op), NULL, &x, 1, &y, 1);
    const char *msg = mxop_last_error(c);
    cr_assert_eq(rc, MXOP_EWORKER_CRASHED, "op %s: got %s (%s)", op, mxop_err_name(rc), msg);
    cr_assert(strstr(msg, needle) != NULL, "message '%s' lacks '%s'", msg, needle);
    cr_assert(now_s() - t0 < 10, "the call took %.1f s", now_s() - t0);
    cr_assert(mxt_daemon_alive(&daemon_));
    cr_assert_eq(relu_ok(other), 0, "the other session: %s", mxop_last_error(other));
    cr_assert_eq(relu_ok(c), 0, "after the crash: %s", mxop_last_error(c));
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    /* The replacement and its spare hold what the old ones held. */
    mxt_sleep_ms(500);
    fds_back_to(base, 10000);
    mxop_close(c);
    mxop_close(other);
}

Test(supervision, forged_note_does_not_turn_a_segfault_into_disconnected)
{
    forged_note("forge_segv", "SIGSEGV");
}

Test(supervision, forged_oom_note_without_a_fault_is_not_believed)
{
    forged_note("forge_oom_exit", "status 5");
}

/* ---- a failed spawn is retried until it works ---- */

static void set_nofile(pid_t pid, rlim_t cur, struct rlimit *old)
{
    struct rlimit now;
    cr_assert_eq(prlimit(pid, RLIMIT_NOFILE, NULL, &now), 0, "%s", strerror(errno));
    if (old != NULL)
        *old = now;
    now.rlim_cur = cur;
    cr_assert_eq(prlimit(pid, RLIMIT_NOFILE, &now, NULL), 0, "%s", strerror(errno));
}

Test(respawn, failed_spawn_is_retried_and_the_session_works_again)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *other = mxt_connect_with(&daemon_, libs);
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(c), 0);
    cr_assert_eq(relu_ok(other), 0);
    int base = mxt_fd_count(daemon_.pid);

    /* No descriptor can be made: the replacement's sockets cannot be created. */
    struct rlimit old;
    set_nofile(daemon_.pid, 3, &old);
    pid_t w = mxt_worker_pid(c);
    cr_assert(w > 0);
    kill(w, SIGKILL);
    double t0 = now_s();
    int rc = relu_ok(c);
    cr_assert_eq(rc, MXOP_EWORKER_CRASHED, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "no replacement worker could be started") != NULL, "%s",
              mxop_last_error(c));
    cr_assert(now_s() - t0 < 10, "the call took %.1f s", now_s() - t0);
    /* Still failing while the cause lasts; the other session is unaffected. */
    mxt_sleep_ms(300);
    cr_assert_eq(relu_ok(other), 0, "the other session: %s", mxop_last_error(other));
    cr_assert(mxt_daemon_alive(&daemon_));

    /* The cause clears: within the longest backoff (2 s) and some, the session serves again. */
    set_nofile(daemon_.pid, old.rlim_cur, NULL);
    double t1 = now_s();
    while ((rc = relu_ok(c)) != 0 && now_s() - t1 < 15)
        mxt_sleep_ms(100);
    cr_assert_eq(rc, 0, "the session did not recover: %s", mxop_last_error(c));
    for (int i = 0; i < 20; i++)
        cr_assert_eq(relu_ok(c), 0, "call %d after recovery: %s", i, mxop_last_error(c));
    cr_assert_eq(relu_ok(other), 0);
    fds_back_to(base, 10000);
    mxop_close(c);
    mxop_close(other);
}

/* ---- the spare is re-armed after its failures ---- */

static int workers_of_daemon(void)
{
    pid_t kids[64];
    return mxt_children(daemon_.pid, kids, 64);
}

Test(supervision, spare_is_rearmed_after_many_failures)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(c), 0);
    /* Wait for the spare: two workers. */
    double t0 = now_s();
    while (workers_of_daemon() < 2 && now_s() - t0 < 10)
        mxt_sleep_ms(50);
    cr_assert_eq(workers_of_daemon(), 2, "no spare at the start");
    int base = mxt_fd_count(daemon_.pid);

    /* Every spare start fails for a while: more than the ten failures that once ended it. */
    struct rlimit old;
    set_nofile(daemon_.pid, 3, &old);
    pid_t kids[8];
    int n = mxt_children(daemon_.pid, kids, 8);
    pid_t live = mxt_worker_pid(c);
    for (int i = 0; i < n; i++)
        if (kids[i] != live)
            kill(kids[i], SIGKILL);
    mxt_sleep_ms(6000);
    cr_assert_eq(relu_ok(c), 0, "the live worker: %s", mxop_last_error(c));
    set_nofile(daemon_.pid, old.rlim_cur, NULL);

    /* Backoff is capped at 2 s (+ 0.1 s start delay): the spare is back soon after. */
    t0 = now_s();
    while (workers_of_daemon() < 2 && now_s() - t0 < 15)
        mxt_sleep_ms(50);
    cr_assert_eq(workers_of_daemon(), 2, "the spare was not re-armed");
    cr_assert(mxt_daemon_alive(&daemon_));
    fds_back_to(base, 10000);
    mxop_close(c);
}

/* ---- control requests: NUL bytes in strings, floods of fields ---- */

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

static void raw_send(int s, const uint8_t *payload, uint32_t len)
{
    uint8_t hdr[MXOP__FRAME_HDR];
    mxop__frame_hdr_encode(hdr, MXOP__KIND_CTL_REQUEST, len);
    cr_assert_eq(write(s, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(s, payload + off, len - off);
        cr_assert(n > 0, "%s", strerror(errno));
        off += (size_t)n;
    }
}

/* Receives one reply: its status, message (copied) and whether the connection then closed. */
static int raw_reply(int s, char *msg, size_t msglen)
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
    return status;
}

/* Hello (id 1, versions 1..1, name "t"), hand-encoded. */
static const uint8_t hello[] = {0x08, 0x01, 0x52, 0x07, 0x08, 0x01, 0x10, 0x01, 0x1a, 0x01, 't'};

Test(supervision, nul_in_client_name_is_refused)
{
    int base = mxt_fd_count(daemon_.pid);
    int s = raw_connect();
    /* Hello with client_name "ab\0cd". */
    const uint8_t req[] = {0x08, 0x01, 0x52, 0x0b, 0x08, 0x01, 0x10, 0x01,
                           0x1a, 0x05, 'a',  'b',  0x00, 'c',  'd'};
    raw_send(s, req, sizeof(req));
    char msg[512];
    int rc = raw_reply(s, msg, sizeof(msg));
    cr_assert_eq(rc, MXOP_EINVAL, "got %s (%s)", mxop_err_name(rc), msg);
    cr_assert(strstr(msg, "client_name") != NULL && strstr(msg, "NUL") != NULL, "%s", msg);
    close(s);
    cr_assert(mxt_daemon_alive(&daemon_));
    fds_back_to(base, 5000);
}

Test(supervision, nul_in_library_path_is_refused_and_the_connection_stays)
{
    int s = raw_connect();
    raw_send(s, hello, sizeof(hello));
    char msg[512];
    cr_assert_eq(raw_reply(s, msg, sizeof(msg)), 0, "%s", msg);
    /* LoadLibrary (id 2) of "relu.so\0x". */
    const uint8_t req[] = {0x08, 0x02, 0x62, 0x0b, 0x0a, 0x09, 'r', 'e',
                           'l',  'u',  '.',  's',  'o',  0x00, 'x'};
    raw_send(s, req, sizeof(req));
    int rc = raw_reply(s, msg, sizeof(msg));
    cr_assert_eq(rc, MXOP_EINVAL, "got %s (%s)", mxop_err_name(rc), msg);
    cr_assert(strstr(msg, "load_library.path") != NULL, "%s", msg);
    /* The connection still serves: Stats (id 3). */
    const uint8_t stats[] = {0x08, 0x03, 0x82, 0x01, 0x00};
    raw_send(s, stats, sizeof(stats));
    cr_assert_eq(raw_reply(s, msg, sizeof(msg)), 0, "%s", msg);
    close(s);
}

Test(supervision, flood_of_unknown_fields_is_refused_quickly)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *other = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(other), 0);
    mxt_sleep_ms(1000); /* its spare started */
    int base = mxt_fd_count(daemon_.pid);
    int s = raw_connect();
    /* 333 000 unknown varint fields (number 100: key 0xa0 0x06, value 0). */
    static uint8_t flood[MXOP__FRAME_MAX];
    uint32_t len = 0;
    while (len + 3 <= sizeof(flood)) {
        flood[len++] = 0xa0;
        flood[len++] = 0x06;
        flood[len++] = 0x00;
    }
    double t0 = now_s();
    raw_send(s, flood, len);
    char msg[512];
    int rc = raw_reply(s, msg, sizeof(msg));
    cr_assert_eq(rc, MXOP_ELIMIT, "got %s (%s)", mxop_err_name(rc), msg);
    cr_assert(strstr(msg, "fields") != NULL, "%s", msg);
    char byte;
    cr_assert_eq(read(s, &byte, 1), 0, "the connection was not closed");
    cr_assert(now_s() - t0 < 5, "took %.1f s", now_s() - t0);
    close(s);
    cr_assert_eq(relu_ok(other), 0);
    cr_assert(mxt_daemon_alive(&daemon_));
    fds_back_to(base, 5000);
    mxop_close(other);
}

/* ---- every callback runs under a deadline the worker cannot move ---- */

static void setup_deadlines(void)
{
    const char *args[] = {"--init-timeout-ms", "1500", NULL};
    mxt_daemon_start(&daemon_, args);
}

TestSuite(deadlines, .init = setup_deadlines, .fini = teardown, .timeout = 90);

/* After a hang: the named error, the client's bound, the daemon alive, both sessions serving. */
static void after_hang(mxop_client_t *c, mxop_client_t *other, int rc, double t0, double bound_s,
                       const char *n1, const char *n2)
{
    double took = now_s() - t0;
    const char *msg = mxop_last_error(c);
    cr_assert_eq(rc, MXOP_ETIMEOUT, "got %s (%s)", mxop_err_name(rc), msg);
    if (n1 != NULL)
        cr_assert(strstr(msg, n1) != NULL, "message '%s' lacks '%s'", msg, n1);
    if (n2 != NULL)
        cr_assert(strstr(msg, n2) != NULL, "message '%s' lacks '%s'", msg, n2);
    cr_assert(took < bound_s, "returned after %.1f s, bound %.1f s", took, bound_s);
    cr_assert(mxt_daemon_alive(&daemon_));
    cr_assert_eq(relu_ok(other), 0, "the other session: %s", mxop_last_error(other));
    cr_assert_eq(relu_ok(c), 0, "the session after the hang: %s", mxop_last_error(c));
}

/* A call with a 500 ms deadline: it returns within deadline + 5 s grace (+ 3 s for a loaded host).
 */
#define CALL_MS 500
#define BOUND_S (CALL_MS / 1000.0 + 5 + 3)

static void hang_forward(const char *op)
{
    const char *libs[] = {"relu.so", "forge_note.so", NULL};
    mxop_client_t *other = mxt_connect_with(&daemon_, libs);
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(c), 0);
    cr_assert_eq(relu_ok(other), 0);
    mxt_sleep_ms(1000);
    int base = mxt_fd_count(daemon_.pid);
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .timeout_ms = CALL_MS};
    double t0 = now_s();
    int rc = mxop_forward(c, mxt_op(c, op), &call, &x, 1, &y, 1);
    after_hang(c, other, rc, t0, BOUND_S, op, "forge_note");
    /* A second call of the session is not stuck behind the hung worker. */
    cr_assert_eq(relu_ok(c), 0);
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    mxt_sleep_ms(500);
    fds_back_to(base, 10000);
    mxop_close(c);
    mxop_close(other);
}

Test(deadlines, status_page_saying_no_call_in_flight_does_not_save_a_hang)
{
    hang_forward("forge_idle_hang");
}

Test(deadlines, status_page_seqlock_left_odd_does_not_save_a_hang)
{
    hang_forward("forge_odd_hang");
}

Test(deadlines, status_page_deadline_zero_start_in_future_does_not_save_a_hang)
{
    hang_forward("forge_future_hang");
}

Test(deadlines, hang_in_init_is_killed_and_names_the_library)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *other = mxt_connect_with(&daemon_, libs);
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(other), 0);
    double t0 = now_s();
    int rc = mxop_load_library(c, "hang_init.so");
    after_hang(c, other, rc, t0, 1.5 + 8, "hang_init", "mxop_plugin_init");
    /* The session loads and runs other libraries afterwards. */
    cr_assert_eq(mxop_load_library(c, "crash.so"), 0, "%s", mxop_last_error(c));
    mxop_close(c);
    mxop_close(other);
}

static mxop_client_t *hang_client(mxop_client_t **other)
{
    const char *libs[] = {"relu.so", "hang_cb.so", NULL};
    *other = mxt_connect_with(&daemon_, libs);
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(c), 0);
    cr_assert_eq(relu_ok(*other), 0);
    cr_assert_eq(mxop_set_timeout(c, CALL_MS), 0);
    return c;
}

Test(deadlines, hang_in_infer_shape)
{
    mxop_client_t *other;
    mxop_client_t *c = hang_client(&other);
    int32_t dt = MXOP_F32, odt;
    mxop_shape_t sh = {.ndim = 1, .dims = {8}}, osh;
    double t0 = now_s();
    int rc = mxop_infer(c, mxt_op(c, "hang_infer"), NULL, 1, &dt, &sh, 1, &odt, &osh);
    after_hang(c, other, rc, t0, BOUND_S, "hang_infer", "infer");
    mxop_close(c);
    mxop_close(other);
}

Test(deadlines, hang_in_infer_type)
{
    mxop_client_t *other;
    mxop_client_t *c = hang_client(&other);
    int32_t dt = MXOP_F32, odt;
    mxop_shape_t sh = {.ndim = 1, .dims = {8}}, osh;
    double t0 = now_s();
    int rc = mxop_infer(c, mxt_op(c, "hang_infer_type"), NULL, 1, &dt, &sh, 1, &odt, &osh);
    after_hang(c, other, rc, t0, BOUND_S, "hang_infer_type", "infer_type");
    cr_assert(strstr(mxop_last_error(c), "hang_cb") != NULL, "%s", mxop_last_error(c));
    mxop_close(c);
    mxop_close(other);
}

Test(deadlines, hang_in_check_attrs)
{
    mxop_client_t *other;
    mxop_client_t *c = hang_client(&other);
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    double t0 = now_s();
    int rc = mxop_forward(c, mxt_op(c, "hang_attrs"), NULL, &x, 1, &y, 1);
    after_hang(c, other, rc, t0, BOUND_S, "hang_attrs", "check_attrs");
    cr_assert(strstr(mxop_last_error(c), "hang_cb") != NULL, "%s", mxop_last_error(c));
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    mxop_close(c);
    mxop_close(other);
}

Test(deadlines, hang_in_state_create)
{
    mxop_client_t *other;
    mxop_client_t *c = hang_client(&other);
    int32_t dt = MXOP_F32;
    mxop_shape_t sh = {.ndim = 1, .dims = {8}};
    uint64_t state = 0;
    double t0 = now_s();
    int rc = mxop_state_create(c, mxt_op(c, "hang_create"), NULL, 1, &dt, &sh, &state);
    after_hang(c, other, rc, t0, BOUND_S, "hang_create", "state_create");
    mxop_close(c);
    mxop_close(other);
}

Test(deadlines, hang_in_state_destroy)
{
    mxop_client_t *other;
    mxop_client_t *c = hang_client(&other);
    int32_t dt = MXOP_F32;
    mxop_shape_t sh = {.ndim = 1, .dims = {8}};
    uint64_t state = 0;
    cr_assert_eq(mxop_state_create(c, mxt_op(c, "hang_destroy"), NULL, 1, &dt, &sh, &state), 0,
                 "%s", mxop_last_error(c));
    double t0 = now_s();
    int rc = mxop_state_destroy(c, state);
    after_hang(c, other, rc, t0, BOUND_S, "state_destroy", "hang_destroy");
    cr_assert(strstr(mxop_last_error(c), "hang_cb") != NULL, "%s", mxop_last_error(c));
    mxop_close(c);
    mxop_close(other);
}

Test(deadlines, hang_in_backward)
{
    mxop_client_t *other;
    mxop_client_t *c = hang_client(&other);
    int64_t s[] = {16};
    mxop_array_t in[3], dx;
    for (int i = 0; i < 3; i++)
        mxt_array(c, MXOP_F32, 1, s, 1 + (unsigned)i, &in[i]);
    mxt_array(c, MXOP_F32, 1, s, 9, &dx);
    double t0 = now_s();
    /* The output gradient, the input, the output; the input gradient. */
    int rc = mxop_backward(c, mxt_op(c, "hang_backward"), NULL, in, 3, &dx, 1);
    after_hang(c, other, rc, t0, BOUND_S, "hang_backward", "backward");
    for (int i = 0; i < 3; i++)
        mxop_array_free(c, &in[i]);
    mxop_array_free(c, &dx);
    mxop_close(c);
    mxop_close(other);
}

/* ---- stopped workers: the client's bound holds ---- */

/* The daemon's child that is neither c's live worker nor one of `known` (n of them), or -1. */
static pid_t spare_of(mxop_client_t *c, const pid_t *known, int n_known)
{
    pid_t kids[16];
    int n = mxt_children(daemon_.pid, kids, 16);
    pid_t live = mxt_worker_pid(c);
    for (int i = 0; i < n; i++) {
        bool old = kids[i] == live;
        for (int k = 0; k < n_known; k++)
            old = old || kids[i] == known[k];
        if (!old)
            return kids[i];
    }
    return -1;
}

Test(deadlines, worker_stopped_while_idle_is_replaced_before_a_call_waits_on_it)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *other = mxt_connect_with(&daemon_, libs);
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(c), 0);
    cr_assert_eq(relu_ok(other), 0);
    cr_assert_eq(mxop_set_timeout(c, CALL_MS), 0);
    pid_t stopped = mxt_worker_pid(c);
    kill(stopped, SIGSTOP);
    double t0 = now_s();
    /* The stopped worker is replaced before the call waits on it: the call runs, on the new one. */
    int rc = relu_ok(c);
    cr_assert_eq(rc, 0, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(now_s() - t0 < BOUND_S, "returned after %.1f s", now_s() - t0);
    cr_assert_neq(mxt_worker_pid(c), stopped, "the stopped worker still serves");
    /* The next calls run too. */
    cr_assert_eq(relu_ok(c), 0, "%s", mxop_last_error(c));
    cr_assert_eq(relu_ok(other), 0);
    cr_assert(mxt_daemon_alive(&daemon_));
    mxop_close(c);
    mxop_close(other);
}

Test(deadlines, stopped_replacement_worker_does_not_hold_a_call_past_its_bound)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *other = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(other), 0);
    mxt_sleep_ms(1000); /* the other session's spare has started */
    pid_t known[16];
    int n_known = mxt_children(daemon_.pid, known, 16);
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(c), 0);
    double t0 = now_s();
    pid_t spare = -1;
    while ((spare = spare_of(c, known, n_known)) < 0 && now_s() - t0 < 10)
        mxt_sleep_ms(50);
    cr_assert(spare > 0, "no spare");
    mxt_sleep_ms(500); /* it has its libraries */
    cr_assert_eq(mxop_set_timeout(c, CALL_MS), 0);
    /* The replacement (the warm spare) is stopped; then the live worker dies. */
    kill(spare, SIGSTOP);
    kill(mxt_worker_pid(c), SIGKILL);
    t0 = now_s();
    int rc = relu_ok(c);
    /* It may even succeed, on the worker started after the stopped one was killed. */
    cr_assert(rc == 0 || rc == MXOP_ETIMEOUT || rc == MXOP_EWORKER_CRASHED, "got %s (%s)",
              mxop_err_name(rc), mxop_last_error(c));
    cr_assert(now_s() - t0 < BOUND_S, "returned after %.1f s (%s)", now_s() - t0,
              mxop_last_error(c));
    /* Within a few calls the session is served by a running worker again. */
    double t1 = now_s();
    while ((rc = relu_ok(c)) != 0 && now_s() - t1 < 20)
        mxt_sleep_ms(100);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(c));
    cr_assert_eq(relu_ok(other), 0);
    cr_assert(mxt_daemon_alive(&daemon_));
    mxop_close(c);
    mxop_close(other);
}

/* ---- garbage on the data channel ---- */

/* The client's data channel: its only unix socket connected to an unnamed peer (a socketpair). */
static int data_channel_fd(void)
{
    for (int fd = 3; fd < 1024; fd++) {
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
            continue;
        struct sockaddr_un sa;
        socklen_t len = sizeof(sa);
        if (getpeername(fd, (struct sockaddr *)&sa, &len) != 0 || sa.sun_family != AF_UNIX)
            continue;
        if (len <= sizeof(sa_family_t))
            return fd;
    }
    return -1;
}

Test(supervision, garbage_on_the_data_channel_replaces_the_worker_and_tells_the_client)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(c), 0);
    mxt_sleep_ms(500);
    mxop_stats_t before, after;
    cr_assert_eq(mxop_stats(c, &before), 0);
    int base = mxt_fd_count(daemon_.pid);
    int fd = data_channel_fd();
    cr_assert(fd >= 0, "no data channel found");
    const char junk[] = "GET / HTTP/1.1\r\n\r\n";
    cr_assert(send(fd, junk, sizeof(junk) - 1, MSG_NOSIGNAL) > 0);
    /* The next call reaches the replacement; the session keeps its results right. */
    double t0 = now_s();
    int rc;
    while ((rc = relu_ok(c)) != 0 && now_s() - t0 < 10)
        mxt_sleep_ms(50);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_stats(c, &after), 0);
    cr_assert_eq(after.worker_restarts, before.worker_restarts + 1, "the worker was not replaced");
    cr_assert_neq(after.worker_pid, before.worker_pid);
    cr_assert(mxt_daemon_alive(&daemon_));
    mxt_sleep_ms(500);
    fds_back_to(base, 10000);
    mxop_close(c);
}

/*
 * On the socket data path (with the mailbox, results come through shared
 * memory and garbage on the socket is seen only when the socket is next
 * read: a result too large for a slot, or a wait that sleeps).
 */
Test(supervision, garbage_from_the_worker_is_named_and_the_worker_replaced)
{
    setenv("MXOP_DATA_PATH", "socket", 1);
    const char *libs[] = {"relu.so", "garbage_chan.so", NULL};
    mxop_client_t *other = mxt_connect_with(&daemon_, libs);
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(c), 0);
    cr_assert_eq(relu_ok(other), 0);
    mxt_sleep_ms(1000); /* both spares started */
    int base = mxt_fd_count(daemon_.pid);
    mxop_stats_t before, after;
    cr_assert_eq(mxop_stats(c, &before), 0);
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    int rc = mxop_forward(c, mxt_op(c, "garbage_after"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(c));
    mxt_sleep_ms(500); /* the garbage is on the channel, between calls */
    double t0 = now_s();
    rc = relu_ok(c);
    cr_assert_eq(rc, MXOP_EPROTOCOL, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "garbage on its data channel") != NULL &&
                  strstr(mxop_last_error(c), "replaced") != NULL,
              "%s", mxop_last_error(c));
    cr_assert(now_s() - t0 < 15, "took %.1f s", now_s() - t0);
    /* The call after runs on the replacement. */
    cr_assert_eq(relu_ok(c), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_stats(c, &after), 0);
    cr_assert_eq(after.worker_restarts, before.worker_restarts + 1);
    cr_assert_neq(after.worker_pid, before.worker_pid);
    cr_assert_eq(relu_ok(other), 0);
    cr_assert(mxt_daemon_alive(&daemon_));
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    mxt_sleep_ms(500);
    fds_back_to(base, 10000);
    mxop_close(c);
    mxop_close(other);
}

/* ---- a crash's note carries the faulting thread's backtrace ---- */

Test(supervision, crash_note_names_the_faulting_function)
{
    const char *libs[] = {"relu.so", "crash_bt.so", NULL};
    mxop_client_t *other = mxt_connect_with(&daemon_, libs);
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(c), 0);
    cr_assert_eq(relu_ok(other), 0);
    mxt_sleep_ms(1000); /* both spares started */
    int base = mxt_fd_count(daemon_.pid);
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    double t0 = now_s();
    int rc = mxop_forward(c, mxt_op(c, "crash_bt"), NULL, &x, 1, &y, 1);
    const char *msg = mxop_last_error(c);
    cr_assert_eq(rc, MXOP_EWORKER_CRASHED, "got %s (%s)", mxop_err_name(rc), msg);
    cr_assert(strstr(msg, "SIGSEGV") != NULL, "%s", msg);
    cr_assert(strstr(msg, "backtrace") != NULL && strstr(msg, "crash_bt_deref_null+0x") != NULL &&
                  strstr(msg, "crash_bt.so") != NULL,
              "the note does not name the faulting function: %s", msg);
    cr_assert(now_s() - t0 < 10, "the call took %.1f s", now_s() - t0);
    cr_assert(mxt_daemon_alive(&daemon_));
    cr_assert_eq(relu_ok(other), 0, "the other session: %s", mxop_last_error(other));
    cr_assert_eq(relu_ok(c), 0, "after the crash: %s", mxop_last_error(c));
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    mxt_sleep_ms(500);
    fds_back_to(base, 10000);
    mxop_close(c);
    mxop_close(other);
}

/* ---- NUL bytes inside attributes on the data channel ---- */

/* The kinds of call nul_attr_call sends. */
enum { NUL_INVOKE, NUL_INFER, NUL_STATE_CREATE };

/*
 * Sends on the data channel a call of op 0 with `extra` plain attributes
 * ("a0" = "1", ...), then one whose key or value has its '#' turned into a
 * NUL (keys and values are bytes on the wire, as a client other than
 * libmxop may send them), and returns the worker's result.  An Infer or a
 * StateCreate carries one f32 input of shape [2,3], so that only the
 * attributes are wrong with it.
 */
static int nul_attr_call(int fd, int kind, int extra, const char *key, const char *value, char *msg,
                         size_t msglen)
{
    char k[64], v[64];
    cr_assert(strlen(key) < sizeof(k) && strlen(value) < sizeof(v));
    strcpy(k, key);
    strcpy(v, value);
    for (char *h = strchr(k, '#'); h != NULL; h = strchr(h + 1, '#'))
        *h = '\0';
    for (char *h = strchr(v, '#'); h != NULL; h = strchr(h + 1, '#'))
        *h = '\0';
    Mxop__Attr a = MXOP__ATTR__INIT;
    a.key.data = (uint8_t *)k;
    a.key.len = strlen(key);
    a.value.data = (uint8_t *)v;
    a.value.len = strlen(value);
    Mxop__Attr plain[80], *attrs[81];
    char names[80][8];
    cr_assert(extra >= 0 && extra <= 80);
    for (int i = 0; i < extra; i++) {
        snprintf(names[i], sizeof(names[i]), "a%d", i);
        mxop__attr__init(&plain[i]);
        plain[i].key.data = (uint8_t *)names[i];
        plain[i].key.len = strlen(names[i]);
        plain[i].value.data = (uint8_t *)"1";
        plain[i].value.len = 1;
        attrs[i] = &plain[i];
    }
    attrs[extra] = &a;
    size_t n_attrs = (size_t)extra + 1;
    int32_t dtype = MXOP_F32;
    int64_t dims[] = {2, 3};
    Mxop__Shape shape = MXOP__SHAPE__INIT;
    shape.dims = dims;
    shape.n_dims = 2;
    Mxop__Shape *shapes[] = {&shape};
    Mxop__Invoke iv = MXOP__INVOKE__INIT;
    Mxop__Infer inf = MXOP__INFER__INIT;
    Mxop__StateCreate sc = MXOP__STATE_CREATE__INIT;
    Mxop__Call call = MXOP__CALL__INIT;
    call.id = 1ull << 40; /* far from the client's own ids */
    switch (kind) {
    case NUL_INVOKE:
        iv.attrs = attrs;
        iv.n_attrs = n_attrs;
        call.body_case = MXOP__CALL__BODY_INVOKE;
        call.invoke = &iv;
        break;
    case NUL_INFER:
        inf.attrs = attrs;
        inf.n_attrs = n_attrs;
        inf.in_dtypes = &dtype;
        inf.n_in_dtypes = 1;
        inf.in_shapes = shapes;
        inf.n_in_shapes = 1;
        call.body_case = MXOP__CALL__BODY_INFER;
        call.infer = &inf;
        break;
    default:
        sc.attrs = attrs;
        sc.n_attrs = n_attrs;
        sc.in_dtypes = &dtype;
        sc.n_in_dtypes = 1;
        sc.in_shapes = shapes;
        sc.n_in_shapes = 1;
        call.body_case = MXOP__CALL__BODY_STATE_CREATE;
        call.state_create = &sc;
        break;
    }
    uint8_t buf[MXOP__FRAME_HDR + 2048];
    size_t n = protobuf_c_message_get_packed_size(&call.base);
    cr_assert(n <= 2048);
    protobuf_c_message_pack(&call.base, buf + MXOP__FRAME_HDR);
    mxop__frame_hdr_encode(buf, MXOP__KIND_CALL, (uint32_t)n);
    cr_assert_eq(send(fd, buf, MXOP__FRAME_HDR + n, MSG_NOSIGNAL), (ssize_t)(MXOP__FRAME_HDR + n));
    mxop__framebuf_t fb = {0};
    uint16_t rkind;
    uint32_t len;
    int fds[MXOP__FRAME_MAX_FDS], nfds = 0;
    int rc = mxop__frame_recv(fd, &fb, &rkind, &len, fds, MXOP__FRAME_MAX_FDS, &nfds, 10000);
    cr_assert_eq(rc, 0, "no result from the worker: %s", mxop_err_name(rc));
    cr_assert_eq(rkind, MXOP__KIND_CALL_RESULT);
    Mxop__CallResult *res = mxop__call_result__unpack(NULL, len, fb.data);
    cr_assert(res != NULL);
    cr_assert_eq(res->id, call.id);
    int status = res->status;
    snprintf(msg, msglen, "%s", res->message != NULL ? res->message : "");
    mxop__call_result__free_unpacked(res, NULL);
    mxop__framebuf_free(&fb);
    return status;
}

/*
 * A call of `kind` to running_mean_norm whose momentum "0.5#junk" would
 * read as a valid 0.5 with the rest lost is refused naming the attribute
 * and the byte; the same worker then serves the session's next calls.
 */
static void nul_refused_in(int kind)
{
    const char *libs[] = {"running_mean.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    const mxop_op_t *op = mxt_op(c, "running_mean_norm");
    mxop_stats_t before, after;
    cr_assert_eq(mxop_stats(c, &before), 0);
    int fd = data_channel_fd();
    cr_assert(fd >= 0, "no data channel found");
    char msg[512];
    int rc = nul_attr_call(fd, kind, 0, "momentum", "0.5#junk", msg, sizeof(msg));
    cr_assert_eq(rc, MXOP_EATTR, "got %s (%s)", mxop_err_name(rc), msg);
    cr_assert(strstr(msg, "op 'running_mean_norm'") != NULL && strstr(msg, "'momentum'") != NULL &&
                  strstr(msg, "NUL byte in its value, at byte 3 of 8") != NULL,
              "%s", msg);
    const char *attrs[] = {"momentum", "0.5", NULL};
    int32_t dt = MXOP_F32, odt = -1;
    mxop_shape_t sh = {.ndim = 2, .dims = {2, 3}}, osh;
    uint64_t state = 0;
    if (kind == NUL_INFER) {
        cr_assert_eq(mxop_infer(c, op, attrs, 1, &dt, &sh, 1, &odt, &osh), 0, "%s",
                     mxop_last_error(c));
        cr_assert_eq(odt, MXOP_F32);
    } else {
        cr_assert_eq(mxop_state_create(c, op, attrs, 1, &dt, &sh, &state), 0, "%s",
                     mxop_last_error(c));
        cr_assert_eq(mxop_state_destroy(c, state), 0, "%s", mxop_last_error(c));
    }
    cr_assert_eq(mxop_stats(c, &after), 0);
    cr_assert_eq(after.worker_restarts, before.worker_restarts);
    cr_assert_eq(after.worker_pid, before.worker_pid);
    cr_assert(mxt_daemon_alive(&daemon_));
    mxop_close(c);
}

Test(supervision, nul_in_an_infer_attribute_is_refused_naming_it)
{
    nul_refused_in(NUL_INFER);
}

Test(supervision, nul_in_a_state_create_attribute_is_refused_naming_it)
{
    nul_refused_in(NUL_STATE_CREATE);
}

Test(supervision, nul_in_attribute_key_or_value_is_refused_naming_the_key)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *other = mxt_connect_with(&daemon_, libs);
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(c), 0);
    cr_assert_eq(relu_ok(other), 0);
    mxt_sleep_ms(500);
    int base = mxt_fd_count(daemon_.pid);
    mxop_stats_t before, after;
    cr_assert_eq(mxop_stats(c, &before), 0);
    int fd = data_channel_fd();
    cr_assert(fd >= 0, "no data channel found");
    char msg[512];
    int rc = nul_attr_call(fd, NUL_INVOKE, 0, "alpha", "1.5#junk", msg, sizeof(msg));
    cr_assert_eq(rc, MXOP_EATTR, "got %s (%s)", mxop_err_name(rc), msg);
    cr_assert(strstr(msg, "'alpha'") != NULL && strstr(msg, "NUL") != NULL &&
                  strstr(msg, "value") != NULL && strstr(msg, "relu") != NULL,
              "%s", msg);
    rc = nul_attr_call(fd, NUL_INVOKE, 0, "be#ta", "2", msg, sizeof(msg));
    cr_assert_eq(rc, MXOP_EATTR, "got %s (%s)", mxop_err_name(rc), msg);
    cr_assert(strstr(msg, "'be'") != NULL && strstr(msg, "key") != NULL, "%s", msg);
    /* Refused, not fatal: the same worker serves the session's next calls. */
    cr_assert_eq(relu_ok(c), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_stats(c, &after), 0);
    cr_assert_eq(after.worker_restarts, before.worker_restarts);
    cr_assert_eq(relu_ok(other), 0);
    cr_assert(mxt_daemon_alive(&daemon_));
    fds_back_to(base, 10000);
    mxop_close(c);
    mxop_close(other);
}

/*
 * A NUL is named even in an attribute past the most a call may carry: it is
 * looked for before the count is checked, as before any other check.
 */
Test(supervision, nul_past_the_attribute_limit_is_named_before_the_count)
{
    const char *libs[] = {"running_mean.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int fd = data_channel_fd();
    cr_assert(fd >= 0, "no data channel found");
    char msg[512];
    int rc = nul_attr_call(fd, NUL_INFER, 70, "late", "x#y", msg, sizeof(msg));
    cr_assert_eq(rc, MXOP_EATTR, "got %s (%s)", mxop_err_name(rc), msg);
    cr_assert(strstr(msg, "'late' (attribute 70 of the call) holds a NUL byte in its value") !=
                  NULL,
              "%s", msg);
    rc = nul_attr_call(fd, NUL_INFER, 70, "late", "xy", msg, sizeof(msg));
    cr_assert_eq(rc, MXOP_EATTR, "got %s (%s)", mxop_err_name(rc), msg);
    cr_assert(strstr(msg, "71 attributes, at most 64") != NULL, "%s", msg);
    const char *attrs[] = {"momentum", "0.5", NULL};
    int32_t dt = MXOP_F32, odt = -1;
    mxop_shape_t sh = {.ndim = 2, .dims = {2, 3}}, osh;
    cr_assert_eq(mxop_infer(c, mxt_op(c, "running_mean_norm"), attrs, 1, &dt, &sh, 1, &odt, &osh),
                 0, "%s", mxop_last_error(c));
    mxop_close(c);
}

/* ---- no process descended from a worker becomes a client ---- */

static void setup_no_sandbox(void)
{
    const char *args[] = {"--sandbox", "none", NULL};
    mxt_daemon_start(&daemon_, args);
}

TestSuite(ancestry, .init = setup_no_sandbox, .fini = teardown, .timeout = 60);

Test(ancestry, a_worker_descendant_in_a_session_of_its_own_is_refused)
{
    const char *libs[] = {"hang_escape.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {2};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F64, 1, s, 1, &x);
    mxt_array(c, MXOP_F64, 1, s, 2, &y);
    const char *attrs[] = {"socket", daemon_.sock, NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs, .timeout_ms = 10000};
    int rc = mxop_forward(c, mxt_op(c, "escape_connect"), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(c));
    cr_assert_neq(mxt_get(&y, 0), 0, "the escape could not be attempted");
    cr_assert_eq(mxt_get(&y, 0), -(double)ECONNRESET, "the daemon served a worker's descendant");
    cr_assert(mxt_daemon_alive(&daemon_));
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    mxop_close(c);
}

/* ---- liveness probes: an idle worker whose loop cannot run is replaced ---- */

static void setup_probe(void)
{
    const char *args[] = {"--probe-interval-ms", "500", "--probe-timeout-ms", "1500", NULL};
    mxt_daemon_start(&daemon_, args);
}

TestSuite(probe, .init = setup_probe, .fini = teardown, .timeout = 90);

/* True while `pid` is still a child of the daemon. */
static bool daemon_child(pid_t pid)
{
    pid_t kids[32];
    int n = mxt_children(daemon_.pid, kids, 32);
    for (int i = 0; i < n; i++)
        if (kids[i] == pid)
            return true;
    return false;
}

/* c's worker runs deadlock_after: the call succeeds, then the worker's loop deadlocks. */
static pid_t deadlock_worker(mxop_client_t *c)
{
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    pid_t pid = mxt_worker_pid(c);
    int rc = mxop_forward(c, mxt_op(c, "deadlock_after"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxt_get(&y, 3), mxt_get(&x, 3), "wrong result");
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    return pid;
}

Test(probe, deadlocked_idle_worker_is_replaced_before_a_call_waits_on_it)
{
    const char *libs[] = {"relu.so", "deadlock_loop.so", NULL};
    mxop_client_t *other = mxt_connect_with(&daemon_, libs);
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(c), 0);
    cr_assert_eq(relu_ok(other), 0);
    mxt_sleep_ms(1000); /* both spares started */
    int base = mxt_fd_count(daemon_.pid);
    mxop_stats_t before, after;
    cr_assert_eq(mxop_stats(c, &before), 0);
    pid_t stuck = deadlock_worker(c);
    /* Probed 500 ms after its last sign of life, no answer in 1500 ms: gone well within 15 s. */
    double t0 = now_s();
    while (daemon_child(stuck) && now_s() - t0 < 15)
        mxt_sleep_ms(100);
    cr_assert(!daemon_child(stuck), "the deadlocked worker %d still runs after %.1f s", (int)stuck,
              now_s() - t0);
    /* The call after runs at once on the replacement. */
    cr_assert_eq(mxop_set_timeout(c, CALL_MS), 0);
    t0 = now_s();
    int rc = relu_ok(c);
    cr_assert_eq(rc, 0, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(now_s() - t0 < BOUND_S, "returned after %.1f s", now_s() - t0);
    cr_assert_neq(mxt_worker_pid(c), stuck, "the deadlocked worker still serves");
    cr_assert_eq(mxop_stats(c, &after), 0);
    cr_assert_eq(after.worker_restarts, before.worker_restarts + 1);
    cr_assert_eq(relu_ok(other), 0, "the other session: %s", mxop_last_error(other));
    cr_assert(mxt_daemon_alive(&daemon_));
    /* An idle worker that answers its probes is left alone. */
    mxt_sleep_ms(3000);
    cr_assert_eq(relu_ok(c), 0);
    cr_assert_eq(mxop_stats(c, &after), 0);
    cr_assert_eq(after.worker_restarts, before.worker_restarts + 1, "a live worker was replaced");
    mxt_sleep_ms(500);
    fds_back_to(base, 10000);
    mxop_close(c);
    mxop_close(other);
}

Test(probe, call_right_after_a_deadlock_gets_a_named_error_or_a_fresh_worker)
{
    const char *libs[] = {"relu.so", "deadlock_loop.so", NULL};
    mxop_client_t *other = mxt_connect_with(&daemon_, libs);
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(c), 0);
    cr_assert_eq(relu_ok(other), 0);
    cr_assert_eq(mxop_set_timeout(c, CALL_MS), 0);
    pid_t stuck = deadlock_worker(c);
    mxt_sleep_ms(400); /* the loop is deadlocked; the probe has not yet given up */
    double t0 = now_s();
    int rc = relu_ok(c);
    cr_assert(rc == 0 || rc == MXOP_ETIMEOUT, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    if (rc == MXOP_ETIMEOUT)
        cr_assert(strstr(mxop_last_error(c), "relu") != NULL, "%s", mxop_last_error(c));
    cr_assert(now_s() - t0 < BOUND_S, "returned after %.1f s", now_s() - t0);
    /* The session is served by a fresh worker from then on. */
    cr_assert_eq(relu_ok(c), 0, "%s", mxop_last_error(c));
    cr_assert_neq(mxt_worker_pid(c), stuck);
    cr_assert_eq(relu_ok(other), 0);
    cr_assert(mxt_daemon_alive(&daemon_));
    mxop_close(c);
    mxop_close(other);
}
