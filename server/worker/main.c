/*
 * server/worker/main.c - mxop-worker: start-up, sandbox basics, the serving loop.
 *
 *     mxop-worker --session N --generation G
 *
 * started by mxop-serverd with fd 3 = supervisor socket, fd 4 = the data
 * channel to the client, fd 5 = the status page memfd.  The worker never
 * logs: a start-up problem is one line on stderr and exit status 2; after
 * that, every problem is an answer on the channel it came from.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/test_stop.h"
#include "common/util.h"
#include "mxop/client.h"
#include "wire/frame.h"
#include "server/worker/pid1.h"
#include "server/worker/worker.h"
#include "server/worker/sandbox.h"
#include "shm/worker_exit.h"

#define SUP_FD 3
#define DATA_FD 4
#define STATUS_FD 5

/* Bytes of unpacked messages served without malloc. */
#define ARENA_BYTES (256 * 1024)

static mxop__framebuf_t rx;
static mxop__framebuf_t tx;
static mxop__pbarena_t arena;

_Noreturn __attribute__((format(printf, 1, 2))) static void die(const char *fmt, ...)
{
    va_list ap;
    fputs("mxop-worker: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(MXOP__W_EXIT_USAGE);
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end = NULL;
    if (s == NULL || s[0] < '0' || s[0] > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

static void parse_args(int argc, char **argv, uint64_t *session, uint32_t *generation)
{
    int have_s = 0, have_g = 0;
    int sb;
    char sb_err[160];
    for (int i = 1; i < argc; i++) {
        uint64_t v;
        if (strcmp(argv[i], "--session") == 0 && i + 1 < argc) {
            if (parse_u64(argv[++i], &v) != 0)
                die("--session '%s' is not a number", argv[i]);
            *session = v;
            have_s = 1;
        } else if (strcmp(argv[i], "--generation") == 0 && i + 1 < argc) {
            if (parse_u64(argv[++i], &v) != 0 || v == 0 || v > UINT32_MAX)
                die("--generation '%s' is not a number in [1, %u]", argv[i], UINT32_MAX);
            *generation = (uint32_t)v;
            have_g = 1;
        } else if (strcmp(argv[i], "--max-states") == 0 && i + 1 < argc) {
            /* The session's quota of op states (mxop-serverd --session-max-states). */
            if (parse_u64(argv[++i], &v) != 0 || v == 0 || v > UINT32_MAX)
                die("--max-states '%s' is not a number in [1, %u]", argv[i], UINT32_MAX);
            mxop__states_set_max((uint32_t)v);
        } else if ((sb = mxop__sandbox_arg(argc, argv, &i, sb_err, sizeof(sb_err))) <= 0) {
            /* A sandbox option (sandbox.c), taken with its value. */
            if (sb < 0)
                die("%s", sb_err);
        } else {
            die("unexpected argument '%s' (usage: mxop-worker --session N --generation G; "
                "started by mxop-serverd)",
                argv[i]);
        }
    }
    if (!have_s || !have_g)
        die("usage: mxop-worker --session N --generation G (started by mxop-serverd)");
}

/* Closes every descriptor above the three the worker was given. */
static void close_other_fds(void)
{
    if (close_range(STATUS_FD + 1, ~0u, 0) == 0)
        return;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        die("cannot close inherited descriptors: %s", strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end == '\0' && e->d_name[0] != '\0' && fd > STATUS_FD && fd != dirfd(d))
            close((int)fd);
    }
    closedir(d);
}

static mxop__status_page_t *map_status_page(void)
{
    struct stat st;
    if (fstat(STATUS_FD, &st) != 0)
        die("fd %d (the status page): %s", STATUS_FD, strerror(errno));
    if (st.st_size < (off_t)sizeof(mxop__status_page_t))
        die("fd %d (the status page) has %lld bytes, needs %zu", STATUS_FD, (long long)st.st_size,
            sizeof(mxop__status_page_t));
    void *p =
        mmap(NULL, sizeof(mxop__status_page_t), PROT_READ | PROT_WRITE, MAP_SHARED, STATUS_FD, 0);
    if (p == MAP_FAILED)
        die("cannot map the status page (fd %d): %s", STATUS_FD, strerror(errno));
    mxop__status_page_t *page = p;
    if (page->magic != MXOP__STATUS_MAGIC)
        die("fd %d is not an initialised status page (magic 0x%08x)", STATUS_FD, page->magic);
    return page;
}

static void start_up(int argc, char **argv)
{
    uint64_t session = 0;
    uint32_t generation = 0;
    parse_args(argc, argv, &session, &generation);
    /* Tests only (common/test_stop.h); a pid 1 of its own namespace cannot stop itself. */
    if (mxop__test_stop_wanted("start", session, generation))
        raise(SIGSTOP);

    for (int fd = SUP_FD; fd <= STATUS_FD; fd++)
        if (fcntl(fd, F_GETFD) == -1)
            die("fd %d is not open: the worker is started by mxop-serverd with fds 3 "
                "(supervisor), 4 (data channel) and 5 (status page)",
                fd);

    /* Die with the daemon; if it is already gone, there is no one to serve. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        die("prctl(PR_SET_PDEATHSIG): %s", strerror(errno));
    if (getppid() == 1)
        exit(0);
    /* Orphans of a library's processes come to the worker, which kills them (children.c). */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
        die("prctl(PR_SET_CHILD_SUBREAPER): %s", strerror(errno));
    /* ... and reaps those that exited on their own, between calls (pid1.c). */
    if (mxop__pid1_install() != 0)
        die("sigaction(SIGCHLD): %s", strerror(errno));
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        die("prctl(PR_SET_NO_NEW_PRIVS): %s", strerror(errno));
    close_other_fds();
    signal(SIGPIPE, SIG_IGN);

    /* Nothing an op runs (system(), exec) inherits the worker's channels. */
    for (int fd = SUP_FD; fd <= STATUS_FD; fd++)
        fcntl(fd, F_SETFD, FD_CLOEXEC);

    mxop__status_page_t *page = map_status_page();
    close(STATUS_FD);
    mxop__status_set(page);
    int rc = mxop__fault_install();
    if (rc != 0)
        die("cannot install the fault handler: %s", strerror(-rc));
    /* Before any library is loaded: nothing a plugin runs is outside the sandbox. */
    char sandbox_err[256];
    if (mxop__test_stop_wanted("sandbox", session, generation))
        raise(SIGSTOP);
    if (mxop__sandbox_apply(sandbox_err, sizeof(sandbox_err)) != 0)
        die("cannot apply the sandbox: %s", sandbox_err);

    mxop__states_init(generation);
    mxop__ctx_seed_session(session, generation);
    if (mxop__pbarena_init(&arena, ARENA_BYTES) != 0)
        die("out of memory");
}

/*
 * The worker's end: what libraries printed goes out (the daemon logs it),
 * then _exit, so that no library's destructor or atexit handler runs: one
 * that hangs would hold the worker, and with it a reload, with no deadline.
 */
_Noreturn static void end_quietly(void)
{
    fflush(stdout);
    fflush(stderr);
    _exit(0);
}

_Noreturn static void finish(void)
{
    /*
     * A channel that failed because a library closed or replaced it is not
     * the daemon's hang-up: say so (and exit non-zero) rather than end as
     * if the session were over, which would leave the daemon to guess.
     */
    mxop__transport_check(MXOP__TRANSPORT_ALL, "by the last call or a thread of an op");
    /* The daemon is gone or ends the session: the states' owners get their destroy. */
    mxop__states_destroy_all();
    mxop__ctx_free();
    mxop__data_free();
    mxop__pbarena_destroy(&arena);
    mxop__framebuf_free(&rx);
    mxop__framebuf_free(&tx);
    end_quietly();
}

/* ------------------------------------------------------------------------ */
/* Supervisor channel */

static void sup_send(Mxop__SupReply *reply)
{
    if (mxop__frame_send(SUP_FD, &tx, MXOP__KIND_SUP_REPLY, &reply->base, NULL, 0) != 0)
        finish();
}

static void sup_fail(uint64_t id, int code, const char *message)
{
    Mxop__SupReply reply = MXOP__SUP_REPLY__INIT;
    reply.id = id;
    reply.status = code;
    reply.message = (char *)message;
    sup_send(&reply);
}

static void serve_sup(void)
{
    int fds[MXOP__FRAME_MAX_FDS];
    int nfds = 0;
    uint16_t kind;
    uint32_t len;
    char m[160];

    /* The daemon is trusted to finish a frame it began; it kills us if it must. */
    int rc = mxop__frame_recv(SUP_FD, &rx, &kind, &len, fds, MXOP__FRAME_MAX_FDS, &nfds, -1);
    if (rc != 0)
        finish();
    if (kind != MXOP__KIND_SUP_REQUEST) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        mxop__fmt(m, sizeof(m), "the supervisor channel carries SUP_REQUEST frames, not kind %u",
                  kind);
        sup_fail(0, MXOP_EPROTOCOL, m);
        return;
    }
    mxop__pbarena_reset(&arena);
    Mxop__SupRequest *req = mxop__sup_request__unpack(&arena.allocator, len, rx.data);
    if (req == NULL) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        mxop__fmt(m, sizeof(m), "a SUP_REQUEST frame of %u bytes does not decode", len);
        sup_fail(0, MXOP_EPROTOCOL, m);
        return;
    }
    /*
     * A hot reload retires the worker.  Supervisor requests are only read
     * between calls, so none is under way: the Retire is its last request,
     * and no library code runs after it (_exit: no state's destroy, no
     * destructor, no atexit handler, any of which may hang and hold the
     * reload); the states are lost, as the reload says.  A call the client
     * sent meanwhile finds the channel closed and goes to the replacement.
     */
    if (req->body_case == MXOP__SUP_REQUEST__BODY_RETIRE)
        end_quietly();
    Mxop__SupReply reply = MXOP__SUP_REPLY__INIT;
    mxop__sup_handle(req, fds, nfds, &reply);
    sup_send(&reply);
    mxop__sup_reply_done(&reply);
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    start_up(argc, argv);
    if (mxop__data_init(SUP_FD, DATA_FD, &arena) != 0)
        die("out of memory");

    /* The data channel (datachan.c) waits on both channels and serves calls;
     * it hands back whenever the supervisor has a request, which comes first. */
    for (;;) {
        if (mxop__data_serve() != MXOP__W_SUP_READY)
            finish();
        serve_sup();
    }
}
