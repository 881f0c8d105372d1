/*
 * server/daemon/supervisor.c - spawning, watching and reaping workers.
 *
 * Each session's worker is a separate executable started by spawn.c (clone3,
 * in a pid namespace of its own where the sandbox promises one) in its own
 * session and process group, so that one
 * kill(-pid, SIGKILL) ends it with everything its ops started.  The daemon
 * is also a child subreaper: descendants that escape the group (setsid,
 * double fork) are reparented here when their worker dies and are swept.
 *
 * The worker's call in flight is read from the status page it shares with
 * the daemon (a seqlock); the watchdog timer uses it to enforce deadlines
 * even when the client is gone, and the exit callback to name the op that
 * was running when the worker died.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/test_stop.h"
#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "server/daemon/cgroup.h"
#include "server/daemon/daemon.h"
#include "server/daemon/idle_cpu.h"
#include "server/daemon/integrity.h"
#include "server/daemon/layers.h"
#include "server/daemon/log.h"
#include "server/daemon/procstat.h"
#include "shm/worker_exit.h"
#include "server/daemon/worker_output.h"
#include "server/daemon/workeruid.h"

/* Sweep for escaped descendants every this many watchdog ticks (about 1 s). */
#define SWEEP_TICKS 50

/* A consistent copy of the status page. */
typedef struct page_snap {
    bool busy;
    uint64_t call_id;
    int64_t start_ns;
    int64_t deadline_ns;
    char op[MXOP__STATUS_OP_MAX];
    int32_t fault_code;
    char fault_msg[MXOP__STATUS_MSG_MAX];
} page_snap_t;

/*
 * Reads the page under its seqlock.  A live worker is retried a bounded
 * number of times (false: no consistent copy now, try at the next tick); a
 * dead worker may have died mid-update, so its last copy is taken as is.
 */
static bool read_page(const mxop__status_page_t *p, page_snap_t *s, bool live)
{
    bool ok = false;
    memset(s, 0, sizeof(*s));
    if (p == NULL)
        return false;
    for (int tries = 0; tries < 100 && !ok; tries++) {
        uint32_t s1 = atomic_load_explicit(&p->seq, memory_order_acquire);
        if (s1 & 1u)
            continue;
        s->busy = atomic_load_explicit(&p->busy, memory_order_relaxed) != 0;
        s->call_id = *(const volatile uint64_t *)&p->call_id;
        s->start_ns = *(const volatile int64_t *)&p->start_ns;
        s->deadline_ns = *(const volatile int64_t *)&p->deadline_ns;
        memcpy(s->op, (const void *)p->op, sizeof(s->op));
        atomic_thread_fence(memory_order_acquire);
        uint32_t s2 = atomic_load_explicit(&p->seq, memory_order_relaxed);
        ok = s1 == s2;
    }
    if (!ok && !live) {
        s->busy = atomic_load_explicit(&p->busy, memory_order_relaxed) != 0;
        s->call_id = p->call_id;
        s->start_ns = p->start_ns;
        s->deadline_ns = p->deadline_ns;
        memcpy(s->op, (const void *)p->op, sizeof(s->op));
        ok = true;
    }
    s->op[sizeof(s->op) - 1] = '\0';
    s->fault_code = atomic_load_explicit(&p->fault_code, memory_order_acquire);
    if (s->fault_code != 0) {
        memcpy(s->fault_msg, (const void *)p->fault_msg, sizeof(s->fault_msg));
        s->fault_msg[sizeof(s->fault_msg) - 1] = '\0';
    }
    return ok;
}

/* "worker 1234 running op 'segv' (call 7)" or "worker 1234". */
static void describe(char *buf, size_t len, pid_t pid, const page_snap_t *s)
{
    if (s->busy && s->op[0] != '\0')
        mxop__fmt(buf, len, "worker %d running op '%s' (call %llu)", (int)pid, s->op,
                  (unsigned long long)s->call_id);
    else if (s->busy)
        mxop__fmt(buf, len, "worker %d running call %llu", (int)pid,
                  (unsigned long long)s->call_id);
    else
        mxop__fmt(buf, len, "worker %d", (int)pid);
}

static void kill_group(mxop__worker_t *w)
{
    /* The group first: it holds whatever the op started; then the worker itself. */
    kill(-w->pid, SIGKILL);
    if (!w->exited)
        kill(w->pid, SIGKILL);
}

static void worker_maybe_free(mxop__worker_t *w)
{
    if (w->open_handles > 0)
        return;
    if (w->client_fd >= 0)
        close(w->client_fd);
    mxop__list_remove(&w->link);
    if (w->page != NULL)
        munmap(w->page, sizeof(*w->page));
    free(w);
}

static void proc_closed_cb(uv_handle_t *h)
{
    mxop__worker_t *w = MXOP__CONTAINER_OF((uv_poll_t *)h, mxop__worker_t, proc.poll);
    w->open_handles--;
    worker_maybe_free(w);
}

static void sup_closed_cb(mxop__conn_t *c)
{
    mxop__worker_t *w = c->data;
    w->open_handles--;
    worker_maybe_free(w);
}

static void close_sup(mxop__worker_t *w)
{
    if (!w->sup_open)
        return;
    w->sup_open = false;
    mxop__conn_close(&w->sup);
}

static void sup_frame_cb(mxop__conn_t *c, uint16_t kind, const uint8_t *payload, uint32_t len)
{
    mxop__worker_t *w = c->data;
    (void)kind;
    mxop__pbarena_reset(&c->arena);
    Mxop__SupReply *r = mxop__sup_reply__unpack(&c->arena.allocator, len, payload);
    if (r == NULL) {
        /* A worker that speaks garbage cannot be trusted with the session. */
        MXOP__LOGE(w->session_id, NULL,
                   "worker %d sent an undecodable SupReply (%u bytes); killing it", (int)w->pid,
                   (unsigned)len);
        mxop__fmt(w->kill_msg, sizeof(w->kill_msg),
                  "it wrote an undecodable message (%u bytes) into its supervisor channel and "
                  "was killed",
                  (unsigned)len);
        kill_group(w);
        close_sup(w);
        return;
    }
    if (w->owner != NULL)
        w->cbs->on_reply(w->owner, w, r);
    mxop__pbarena_reset(&c->arena);
}

/*
 * True if `pid` is dying or dead: a zombie, or a task already in exit
 * (PF_EXITING, the 9th field of /proc/PID/stat), whose descriptors the
 * kernel closes before it becomes a zombie.
 */
static bool is_exiting(pid_t pid)
{
    char buf[512];
    const char *fields = mxop__proc_stat(pid, buf, sizeof(buf));
    if (fields == NULL)
        return true;
    char state;
    int ppid, pgrp, sess, tty, tpgid;
    unsigned flags;
    if (sscanf(fields, "%c %d %d %d %d %d %u", &state, &ppid, &pgrp, &sess, &tty, &tpgid, &flags) !=
        7)
        return true;
    return state == 'Z' || state == 'X' || (flags & 0x4u) != 0;
}

static void sup_error_cb(mxop__conn_t *c, int code, const char *msg)
{
    mxop__worker_t *w = c->data;
    if (code == 0 || code == MXOP_EDISCONNECTED)
        MXOP__LOGD(w->session_id, NULL, "worker %d supervisor channel: %s", (int)w->pid, msg);
    else
        MXOP__LOGW(w->session_id, NULL, "worker %d supervisor channel: %s", (int)w->pid, msg);
    /*
     * Without its supervisor channel a worker can be neither loaded nor
     * mapped: end it, and let the exit callback report and respawn.  Say
     * why, unless it was dying anyway (the kernel closed the channel).
     */
    if (!w->exited && w->kill_msg[0] == '\0') {
        if (code != 0 && code != MXOP_EDISCONNECTED)
            mxop__fmt(w->kill_msg, sizeof(w->kill_msg),
                      "its supervisor channel broke (%s) and it was killed", msg);
        else if (!is_exiting(w->pid))
            mxop__fmt(w->kill_msg, sizeof(w->kill_msg),
                      "it closed its supervisor channel (fd 3) while running and was killed");
    }
    if (!w->exited)
        kill_group(w);
    close_sup(w);
}

/* True if `pid` has exited and waits only to be reaped. */
static bool is_zombie(long pid)
{
    char buf[256];
    const char *fields = mxop__proc_stat((pid_t)pid, buf, sizeof(buf));
    return fields != NULL && fields[0] == 'Z';
}

/*
 * Kills and reaps the daemon's children that are not workers: processes an
 * op started that escaped their worker's group and were reparented to us,
 * the subreaper, when it died.  Children are listed by /proc (needs
 * CONFIG_PROC_CHILDREN; without it nothing is swept).
 */
static void sweep_escaped(mxop__daemon_t *d)
{
    char path[64];
    mxop__fmt(path, sizeof(path), "/proc/self/task/%d/children", (int)d->pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return;
    long pid;
    while (fscanf(f, "%ld", &pid) == 1) {
        bool is_worker = false;
        pid_t sid = getsid((pid_t)pid);
        for (mxop__list_t *n = d->workers.next; n != &d->workers; n = n->next) {
            mxop__worker_t *w = MXOP__CONTAINER_OF(n, mxop__worker_t, link);
            if (w->pid == (pid_t)pid) {
                is_worker = true;
                break;
            }
            /* An orphan still in a live worker's session belongs to a running call. */
            if (!w->exited && sid == w->pid) {
                is_worker = true;
                break;
            }
        }
        if (is_worker)
            continue;
        if (!is_zombie(pid)) {
            MXOP__LOGW(0, NULL, "killing process %ld: it escaped from a dead worker", pid);
            kill((pid_t)pid, SIGKILL);
        }
        /* Reap it (now or at a later sweep): libuv only waits for the pids it spawned. */
        waitpid((pid_t)pid, NULL, WNOHANG);
    }
    fclose(f);
}

/*
 * True when what the worker wrote about its death agrees with how it
 * ended: a fault note needs a synchronous fault signal, a CUDA note the
 * CUDA exit status.  Anything else is not believed.
 */
static bool note_agrees(int note, int term_signal, int64_t exit_status)
{
    bool fault = term_signal == SIGSEGV || term_signal == SIGBUS || term_signal == SIGILL ||
                 term_signal == SIGFPE || term_signal == SIGABRT;
    switch (note) {
    case MXOP_EWORKER_CRASHED: return true;
    case MXOP_EINPUT_WRITTEN: return term_signal == SIGSEGV || term_signal == SIGBUS;
    case MXOP_EWORKER_OOM: return fault;
    case MXOP_ECUDA: return term_signal == 0 && exit_status == MXOP__W_EXIT_CUDA;
    default: return false;
    }
}

static void exit_cb(mxop__spawn_t *p, int64_t exit_status, int term_signal)
{
    mxop__worker_t *w = MXOP__CONTAINER_OF(p, mxop__worker_t, proc);
    mxop__daemon_t *d = w->d;
    w->exited = true;

    /* What it wrote before dying goes into the log before its death does (worker_output.c). */
    char last_err[160] = "";
    mxop__worker_output_drain(w->output, last_err, sizeof(last_err));
    mxop__worker_output_release(w->output);
    w->output = NULL;

    /* Replies it wrote before dying are still in the socket: hear them first. */
    if (w->sup_open)
        mxop__conn_drain(&w->sup);

    bool unasked = term_signal == SIGKILL && w->kill_msg[0] == '\0' && !w->killed_timeout;
    bool oom_seen = mxop__cgroup_release(w->pid, w->page, unasked);
    page_snap_t s;
    read_page(w->page, &s, false);
    kill(-w->pid, SIGKILL); /* whatever the op started */
    sweep_escaped(d);
    mxop__workeruid_release(&d->cfg, w->uid); /* its own uid, for a later worker */
    close_sup(w);

    void *owner = w->owner;
    if (owner == NULL) {
        MXOP__LOGD(w->session_id, NULL, "worker %d (generation %u) reaped", (int)w->pid,
                   (unsigned)w->generation);
        mxop__spawn_close(&w->proc, proc_closed_cb);
        return;
    }

    char what[160];
    char how[96 + MXOP__WORKER_OUTPUT_LAST_MAX];
    char msg[MXOP__MSG_MAX];
    describe(what, sizeof(what), w->pid, &s);
    if (term_signal != 0)
        mxop__fmt(how, sizeof(how), "was killed by signal %d (%s)", term_signal,
                  mxop__signal_name(term_signal));
    else if (last_err[0] != '\0' && s.call_id == 0)
        /* It died before serving a call: its last stderr line is most likely why. */
        mxop__fmt(how, sizeof(how), "exited with status %lld (stderr: %s)", (long long)exit_status,
                  last_err);
    else
        mxop__fmt(how, sizeof(how), "exited with status %lld", (long long)exit_status);
    /*
     * The verdict comes from what the daemon observed: its own kill (the
     * watchdog's clock, a broken channel) or how the process ended.  The
     * worker's note is memory the worker (and so any op) can write: it may
     * only refine the verdict where the observation agrees with it.
     */
    int code = MXOP_EWORKER_CRASHED;
    bool note = s.fault_code < 0;
    if (w->killed_timeout) {
        code = MXOP_ETIMEOUT;
        mxop__fmt(msg, sizeof(msg), "%s", w->timeout_msg);
    } else if (note && (note_agrees(s.fault_code, term_signal, exit_status) ||
                        (oom_seen && s.fault_code == MXOP_EWORKER_OOM))) {
        code = s.fault_code;
        mxop__fmt(msg, sizeof(msg), "%s %s: %s", what, how, s.fault_msg);
    } else if (w->kill_msg[0] != '\0') {
        mxop__fmt(msg, sizeof(msg), "%s: %s", what, w->kill_msg);
    } else if (term_signal == 0 && exit_status == MXOP__W_EXIT_DATA_FRAMING) {
        code = MXOP_EPROTOCOL;
        mxop__fmt(msg, sizeof(msg),
                  "%s exited: its data channel received a malformed frame from the client, so "
                  "the channel was lost and the worker is replaced",
                  what);
    } else if (note) {
        mxop__fmt(msg, sizeof(msg),
                  "%s %s (its own note, which does not match how it ended, "
                  "claims %s: %s)",
                  what, how, mxop_err_name(s.fault_code), s.fault_msg);
    } else {
        mxop__fmt(msg, sizeof(msg), "%s %s", what, how);
    }
    if (!w->killed_timeout &&
        (term_signal == SIGSEGV || term_signal == SIGBUS || term_signal == SIGABRT))
        mxop__note_add_backtrace(w->page, msg, sizeof(msg));

    mxop__worker_exit_t e = {
        .code = code,
        .term_signal = term_signal,
        .exit_status = term_signal != 0 ? -1 : (int)exit_status,
        /* A timeout names what the daemon enforced; otherwise the page is the only witness. */
        .call_id = w->killed_timeout ? w->timeout_call_id
                   : s.busy          ? s.call_id
                                     : 0,
        /* The page keeps the id of the last call begun: 0 means this worker never served one. */
        .served = s.call_id != 0 || w->timeout_call_id != 0,
        .op = w->killed_timeout ? w->timeout_op
              : s.busy          ? s.op
                                : "",
        .message = msg,
        .how = how,
        .kill_msg = w->kill_msg,
        .started = w->started,
        .daemon_killed = w->killed_timeout || w->kill_msg[0] != '\0',
    };
    w->owner = NULL;
    w->cbs->on_exit(owner, w, &e);
    mxop__spawn_close(&w->proc, proc_closed_cb);
}

/*
 * The exec's outcome (spawn.c).  A failed exec is the start's failure:
 * the child exits 127 and its exit callback reports it with the errno.
 */
static void started_cb(mxop__spawn_t *p, int status)
{
    mxop__worker_t *w = MXOP__CONTAINER_OF(p, mxop__worker_t, proc);
    if (status == 0) {
        w->started = true;
        return;
    }
    if (status == -EINTR)
        return; /* killed before its exec: the killer said why */
    if (w->kill_msg[0] == '\0')
        mxop__fmt(w->kill_msg, sizeof(w->kill_msg), "cannot start worker %s: %s",
                  w->d->cfg.worker_path, strerror(-status));
    MXOP__LOGD(w->session_id, NULL, "worker %d: exec failed: %s", (int)w->pid, strerror(-status));
    if (!w->exited)
        kill_group(w);
}

int mxop__worker_spawn(mxop__daemon_t *d, uint64_t session_id, uint32_t generation,
                       const mxop__worker_cbs_t *cbs, void *owner, mxop__worker_t **out,
                       int *client_fd, char *err, size_t errlen)
{
    int sup[2] = {-1, -1};
    int data[2] = {-1, -1};
    int memfd = -1;
    int rc = MXOP_EINTERNAL;

    mxop__worker_t *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        mxop__fmt(err, errlen, "out of memory for a worker");
        return MXOP_ENOMEM;
    }
    /* Its uid (workeruid.c): one of its own from the daemon's range, or --worker-uid's. */
    uid_t run_uid = 0;
    gid_t run_gid = 0;
    bool own_uid = false;
    int urc = mxop__workeruid_acquire(&d->cfg, &run_uid, &run_gid, &own_uid, err, errlen);
    if (urc < 0) {
        free(w);
        return urc;
    }
    w->uid = run_uid;
    w->d = d;
    w->session_id = session_id;
    w->cbs = cbs;
    w->generation = generation;
    w->client_fd = -1;
    mxop__list_init(&w->link);

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sup) != 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, data) != 0) {
        mxop__fmt(err, errlen, "cannot create the worker's sockets: %s", strerror(errno));
        goto err_fds;
    }
    memfd = memfd_create("mxop-status", MFD_CLOEXEC);
    if (memfd < 0 || ftruncate(memfd, sizeof(mxop__status_page_t)) != 0) {
        mxop__fmt(err, errlen, "cannot create the worker's status page: %s", strerror(errno));
        goto err_fds;
    }
    void *page =
        mmap(NULL, sizeof(mxop__status_page_t), PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (page == MAP_FAILED) {
        mxop__fmt(err, errlen, "cannot map the worker's status page: %s", strerror(errno));
        goto err_fds;
    }
    w->page = page;
    w->page->magic = MXOP__STATUS_MAGIC;

    rc = mxop__conn_init(d, &w->sup, sup[0], MXOP__KIND_SUP_REPLY, sup_frame_cb, sup_error_cb,
                         sup_closed_cb, w);
    if (rc != 0) {
        mxop__fmt(err, errlen, "cannot watch the worker's supervisor channel");
        goto err_fds;
    }
    sup[0] = -1; /* the connection owns it now */
    w->sup_open = true;
    w->open_handles = 1;
    mxop__list_push(&d->workers, &w->link);

    char sess_arg[24];
    char gen_arg[16];
    char mem_arg[24];
    char fds_arg[24];
    char uid_arg[16];
    char gid_arg[16];
    char states_arg[24];
    char as_arg[24];
    /* Without a cgroup of its own the worker's memory limit is RLIMIT_AS (cgroup.c). */
    uint64_t as_mb =
        strcmp(d->cfg.sandbox, "none") == 0
            ? 0
            : mxop__cgroup_address_space_mb(d->cfg.worker_memory_mb, d->cfg.session_max_region_mb);
    mxop__fmt(as_arg, sizeof(as_arg), "%llu", (unsigned long long)as_mb);
    mxop__fmt(states_arg, sizeof(states_arg), "%llu",
              (unsigned long long)d->cfg.session_max_states);
    mxop__fmt(sess_arg, sizeof(sess_arg), "%llu", (unsigned long long)session_id);
    mxop__fmt(gen_arg, sizeof(gen_arg), "%u", (unsigned)generation);
    mxop__fmt(mem_arg, sizeof(mem_arg), "%llu", (unsigned long long)d->cfg.worker_memory_mb);
    mxop__fmt(fds_arg, sizeof(fds_arg), "%llu", (unsigned long long)d->cfg.worker_max_fds);
    mxop__fmt(uid_arg, sizeof(uid_arg), "%u", (unsigned)run_uid);
    mxop__fmt(gid_arg, sizeof(gid_arg), "%u", (unsigned)run_gid);
    char *args[] = {d->cfg.worker_path,
                    "--session",
                    sess_arg,
                    "--generation",
                    gen_arg,
                    "--sandbox",
                    (char *)d->cfg.sandbox,
                    "--memory-mb",
                    mem_arg,
                    "--max-fds",
                    fds_arg,
                    "--plugin-dir",
                    d->cfg.plugin_dir,
                    "--allowlist",
                    (char *)mxop__integrity_allowlist(),
                    "--ns-profile", /* namespaces (layers.c, server/worker/namespaces.c) */
                    (char *)mxop__layers_ns_profile(),
                    "--max-states",
                    states_arg,
                    "--address-space-mb",
                    as_arg,
                    "--own-uid", /* no other worker has it (server/worker/neighbours.c) */
                    own_uid ? "1" : "0",
                    urc == 0 ? "--uid" : NULL,
                    uid_arg,
                    "--gid",
                    gid_arg,
                    NULL};
    /* The worker's stdout and stderr are pipes the daemon reads (worker_output.c). */
    int out_fds[2] = {-1, -1};
    mxop__worker_output_t *output = NULL;
    bool piped = mxop__worker_output_start(d->loop, session_id, out_fds, &output) == 0;
    /* fd 0 /dev/null, 1 and 2 the pipes, 3 supervisor, 4 data, 5 status page. */
    int fds[6] = {-1, piped ? out_fds[0] : 1, piped ? out_fds[1] : 2, sup[1], data[1], memfd};
    int sprc = mxop__spawn_start(d->loop, &w->proc, d->cfg.worker_path, args, fds, 6,
                                 mxop__layers_pid_ns(), exit_cb);
    /* The worker holds its ends alone, so each side sees EOF when the other dies. */
    close(sup[1]);
    close(data[1]);
    close(memfd);
    if (piped) {
        close(out_fds[0]);
        close(out_fds[1]);
        mxop__worker_output_set_pid(output, sprc == 0 ? w->proc.pid : 0);
    }
    w->output = output;
    sup[1] = data[1] = memfd = -1;
    if (sprc != 0) {
        mxop__workeruid_release(&d->cfg, w->uid);
        mxop__fmt(err, errlen, "cannot start worker %s: %s", d->cfg.worker_path, strerror(-sprc));
        mxop__worker_output_release(w->output);
        w->output = NULL;
        w->exited = true;
        if (w->proc.handles > 0) {
            /* Handles spawn.c began are still closing: the worker's memory outlives them. */
            w->open_handles++;
            w->proc.close_cb = proc_closed_cb;
        }
        close_sup(w);
        close(data[0]);
        return MXOP_EINTERNAL;
    }
    w->open_handles++;
    w->pid = w->proc.pid;
    w->start_deadline_ns = mxop__now_ns() + (int64_t)MXOP__START_TIMEOUT_MS * 1000000LL;
    /* Tests only (common/test_stop.h): a child stopped between its clone and its exec. */
    if (mxop__test_stop_wanted("exec", session_id, generation))
        kill(w->pid, SIGSTOP);
    /* In its cgroup before it runs a single instruction of the worker (spawn.c's gate). */
    mxop__cgroup_enter(w->pid, d->cfg.sandbox, d->cfg.worker_memory_mb);
    /*
     * The exec's outcome comes later, from the loop (started_cb): a failed
     * exec is a death at start-up, reported through the exit callback as
     * any other; the session retries with its backoff.
     */
    int xrc = mxop__spawn_release(&w->proc, started_cb);
    if (xrc != 0) {
        mxop__fmt(w->kill_msg, sizeof(w->kill_msg), "cannot start worker %s: %s",
                  d->cfg.worker_path, strerror(-xrc));
        kill_group(w);
    }
    w->owner = owner;
    *out = w;
    *client_fd = data[0];
    MXOP__LOGD(session_id, NULL, "spawned worker %d (generation %u)", (int)w->pid,
               (unsigned)generation);
    return 0;

err_fds:
    mxop__workeruid_release(&d->cfg, w->uid);
    if (w->page != NULL)
        munmap(w->page, sizeof(*w->page));
    if (memfd >= 0)
        close(memfd);
    for (int i = 0; i < 2; i++) {
        if (sup[i] >= 0)
            close(sup[i]);
        if (data[i] >= 0)
            close(data[i]);
    }
    free(w);
    return rc == 0 ? MXOP_EINTERNAL : rc;
}

int mxop__worker_send(mxop__worker_t *w, const Mxop__SupRequest *req, int fd)
{
    if (w == NULL || w->exited || !w->sup_open)
        return MXOP_EWORKER_CRASHED;
    int rc = mxop__conn_send(&w->sup, MXOP__KIND_SUP_REQUEST, &req->base, fd >= 0 ? &fd : NULL,
                             fd >= 0 ? 1 : 0);
    /* The worker is gone but not yet reaped: that is its death, not the client's connection. */
    return rc == MXOP_EDISCONNECTED ? MXOP_EWORKER_CRASHED : rc;
}

void mxop__worker_kill(mxop__worker_t *w, const char *why)
{
    if (w->exited)
        return;
    if (w->kill_msg[0] == '\0')
        mxop__fmt(w->kill_msg, sizeof(w->kill_msg), "%s", why);
    kill_group(w);
}

void mxop__worker_kill_timeout(mxop__worker_t *w, uint64_t call_id, const char *op, const char *why)
{
    if (w->exited || w->killed_timeout)
        return;
    w->killed_timeout = true;
    w->timeout_call_id = call_id;
    mxop__fmt(w->timeout_op, sizeof(w->timeout_op), "%s", op != NULL ? op : "");
    mxop__fmt(w->timeout_msg, sizeof(w->timeout_msg), "%s", why);
    mxop__log_ctx_t ctx = {.session = w->session_id, .op = op, .worker_pid = (int)w->pid};
    mxop__log_ev(MXOP__LOG_WARN, &ctx, "watchdog: %s", why);
    kill_group(w);
}

void mxop__worker_detach_kill(mxop__worker_t *w)
{
    w->owner = NULL;
    /* A spare's client end goes now: nobody will be given it. */
    if (w->client_fd >= 0) {
        close(w->client_fd);
        w->client_fd = -1;
    }
    if (!w->exited)
        kill_group(w);
    close_sup(w);
}

/*
 * A stopped worker (SIGSTOP, a debugger that went away) cannot serve: it
 * is replaced before a call waits on it.  Checked about once a second for
 * every worker, live or spare, idle or not: one read of /proc each.
 */
static void kill_stopped(mxop__daemon_t *d)
{
    for (mxop__list_t *n = d->workers.next; n != &d->workers; n = n->next) {
        mxop__worker_t *w = MXOP__CONTAINER_OF(n, mxop__worker_t, link);
        if (w->owner == NULL || w->exited || w->kill_msg[0] != '\0' || w->killed_timeout)
            continue;
        if (mxop__worker_is_stopped(w)) {
            MXOP__LOGW(w->session_id, NULL, "worker %d is stopped%s; replacing it", (int)w->pid,
                       w->started ? "" : " before its exec");
            mxop__worker_kill(w, w->started
                                     ? "it was stopped (SIGSTOP or a tracer) and could not serve"
                                     : "it was stopped (SIGSTOP or a tracer) between its clone "
                                       "and its exec, and could not start");
        }
    }
}

/*
 * A worker that has not exec'd MXOP__START_TIMEOUT_MS after its clone
 * (stopped, or starved) is killed: its exit then reports a failed start,
 * which the session and the spare retry with their backoff.
 */
static void kill_unstarted(mxop__daemon_t *d, int64_t now)
{
    for (mxop__list_t *n = d->workers.next; n != &d->workers; n = n->next) {
        mxop__worker_t *w = MXOP__CONTAINER_OF(n, mxop__worker_t, link);
        if (w->owner == NULL || w->started || w->exited || w->kill_msg[0] != '\0' ||
            w->killed_timeout || now < w->start_deadline_ns)
            continue;
        char why[MXOP__MSG_MAX];
        mxop__fmt(why, sizeof(why),
                  "it did not start (exec %s) within %d ms of its clone, and was killed",
                  d->cfg.worker_path, MXOP__START_TIMEOUT_MS);
        MXOP__LOGW(w->session_id, NULL, "worker %d: %s", (int)w->pid, why);
        mxop__worker_kill(w, why);
    }
}

static void watchdog_cb(uv_timer_t *t)
{
    mxop__daemon_t *d = MXOP__CONTAINER_OF(t, mxop__daemon_t, watchdog);
    static unsigned ticks;
    /*
     * Deadlines come from what the daemon trusts: the calls the client
     * published, the daemon's own clock (d->tick_cb).  The worker's status
     * page, which any op can write, is never read here.
     */
    if (d->tick_cb != NULL)
        d->tick_cb(d);
    kill_unstarted(d, mxop__now_ns());
    if (++ticks % SWEEP_TICKS == 0) {
        sweep_escaped(d);
        kill_stopped(d);
    }
}

int mxop__watchdog_start(mxop__daemon_t *d)
{
    /* Orphans of dead workers come to us instead of init, so they can be swept. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
        MXOP__LOGW(0, NULL,
                   "cannot become a child subreaper (%s): processes that escape a "
                   "worker's group will not be swept",
                   strerror(errno));
    if (uv_timer_init(d->loop, &d->watchdog) != 0)
        return MXOP_EINTERNAL;
    uv_timer_start(&d->watchdog, watchdog_cb, MXOP__WATCHDOG_MS, MXOP__WATCHDOG_MS);
    return 0;
}

void mxop__watchdog_stop(mxop__daemon_t *d)
{
    if (uv_is_closing((uv_handle_t *)&d->watchdog))
        return;
    uv_timer_stop(&d->watchdog);
    uv_close((uv_handle_t *)&d->watchdog, NULL);
}
