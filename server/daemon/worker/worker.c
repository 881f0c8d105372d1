/*
 * server/daemon/worker/worker.c - one worker process as a handle: spawning it,
 * its supervisor channel, its queue of requests, killing it, reaping it
 * and the report of its death.
 *
 * Each session's worker is a separate executable started by spawn.c (clone3,
 * in a pid namespace of its own where the sandbox promises one) in its own
 * session and process group, so that one kill(-pid, SIGKILL) ends it with
 * everything its ops started.  The daemon is also a child subreaper:
 * descendants that escape the group (setsid, double fork) are reparented
 * here when their worker dies and are swept (mxop__workers_sweep, here:
 * at each reap, and about once a second from worker_proc.c).
 *
 * The state (mxop__worker_t.state) and the fields that go with it (the
 * kill reason, the channel, the owner, the client's fd) change only in
 * transition() below:
 *
 *   state      event          new state  action
 *   ---------  -------------  ---------  ---------------------------------------------
 *   (none)     spawn          SPAWNING   cloned; the client's data channel held for the
 *                                        session; killed if not exec'd in time
 *   SPAWNING   EXECED         SERVING    the exec succeeded (spawn.c's start callback)
 *   SERVING    RETIRE         RETIRING   a Retire was sent: it exits between calls
 *   any alive  KILL(reason)   KILLING    kill the group; the first reason stays, a
 *                                        timeout replaces any other
 *   any alive  CHANNEL_LOST   KILLING    its supervisor channel broke or spoke garbage:
 *                                        kill the group, close the channel
 *   any alive  CHANNEL_LOST   (same)     the kernel closed it (the worker is exiting):
 *                                        kill the group, close the channel, no reason
 *   any alive  DETACH         KILLING    the owner lets it go: kill, close the channel,
 *                                        the client's fd; its queue to the owner
 *   any        REAPED         EXITED     hear what it still wrote, close the channel,
 *                                        sweep what its ops left
 *   EXITED     REPORT         EXITED     the report of its death to the owner, forgotten
 *   EXITED     (both handles closed)     freed
 *
 * Beside the state, the same function keeps the worker's queue of
 * requests sent and not yet answered (QUEUED, ANSWERED, QUEUE_TAKEN: it
 * travels with the worker, a promoted spare's included) and hands out the
 * client's end of its data channel once (GIVE_FD).
 *
 * "Any alive" is every state but EXITED; a KILLING worker killed again
 * keeps its reason (or takes a timeout's).  The exec's outcome may arrive
 * after a kill: it marks the worker started, the state stays KILLING.
 *
 * The worker's call in flight is read from the status page it shares with
 * the daemon (a seqlock), when it is reaped, to name the op that was
 * running; deadlines are enforced from what the daemon trusts (deadline.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/test_stop.h"
#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "server/daemon/worker/cgroup.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/worker/worker.h"
#include "server/daemon/worker/procstat.h"
#include "shm/worker_exit.h"
#include "server/daemon/worker/worker_output.h"
#include "server/daemon/worker/workeruid.h"

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
    if (w->state != MXOP__WORKER_EXITED)
        kill(w->pid, SIGKILL);
}

static void close_sup(mxop__worker_t *w)
{
    if (!w->sup_open)
        return;
    w->sup_open = false;
    mxop__conn_close(&w->sup);
}

/* ------------------------------------------------------------------------ */
/* The transition function: the only writer of a worker's state and of its fields after spawn. */

typedef enum worker_event {
    EV_EXECED,        /* the exec succeeded */
    EV_RETIRE,        /* a Retire was sent */
    EV_KILL,          /* arg: the reason (code MXOP_ETIMEOUT or MXOP_EWORKER_CRASHED) */
    EV_CHANNEL_LOST,  /* arg: the reason, or NULL when the kernel closed it (it is exiting) */
    EV_DETACH,        /* the owner lets it go */
    EV_REAPED,        /* the process was reaped */
    EV_REPORT,        /* arg: the report of its death, for the owner (forgotten then) */
    EV_HANDLE_CLOSED, /* the process handle or the channel is closed */
    EV_GIVE_FD,       /* arg (int *): the client's end of its data channel is taken */
    EV_QUEUED,        /* arg: a request sent, now awaiting its answer */
    EV_ANSWERED,      /* arg (struct take_one *): the request answered, out of the queue */
    EV_QUEUE_TAKEN    /* arg (mxop__pending_t **): the whole queue, to the owner */
} worker_event_t;

struct take_one {
    uint64_t sup_id;
    mxop__pending_t *p;
};

static mxop__pending_t *unlink_request(mxop__worker_t *w, uint64_t sup_id)
{
    mxop__pending_t *prev = NULL;
    for (mxop__pending_t *p = w->q_head; p != NULL; prev = p, p = p->next) {
        if (p->sup_id != sup_id)
            continue;
        if (prev != NULL)
            prev->next = p->next;
        else
            w->q_head = p->next;
        if (w->q_tail == p)
            w->q_tail = prev;
        p->next = NULL;
        return p;
    }
    return NULL;
}

/* The first reason stays, except that a timeout (the daemon's own deadline) replaces any other. */
static void take_reason(mxop__worker_t *w, const mxop__kill_reason_t *why)
{
    if (why == NULL || why->code == 0)
        return;
    if (w->kill.code == 0 || (why->code == MXOP_ETIMEOUT && w->kill.code != MXOP_ETIMEOUT))
        w->kill = *why;
}

static void worker_free(mxop__worker_t *w)
{
    if (w->client_fd >= 0)
        close(w->client_fd);
    mxop__list_remove(&w->link);
    if (w->page != NULL)
        munmap(w->page, sizeof(*w->page));
    free(w);
}

static void transition(mxop__worker_t *w, worker_event_t ev, const void *arg)
{
    bool alive = w->state != MXOP__WORKER_EXITED;
    switch (ev) {
    case EV_EXECED:
        w->started = true;
        if (w->state == MXOP__WORKER_SPAWNING)
            w->state = MXOP__WORKER_SERVING;
        break;
    case EV_RETIRE:
        if (w->state == MXOP__WORKER_SERVING)
            w->state = MXOP__WORKER_RETIRING;
        break;
    case EV_KILL:
        if (!alive)
            break;
        take_reason(w, arg);
        w->state = MXOP__WORKER_KILLING;
        kill_group(w);
        break;
    case EV_CHANNEL_LOST:
        if (alive && arg != NULL) {
            take_reason(w, arg);
            w->state = MXOP__WORKER_KILLING;
        }
        if (alive)
            kill_group(w);
        close_sup(w);
        break;
    case EV_DETACH:
        w->owner = NULL;
        /* Its client end goes now: nobody will be given it. */
        if (w->client_fd >= 0) {
            close(w->client_fd);
            w->client_fd = -1;
        }
        if (alive) {
            w->state = MXOP__WORKER_KILLING;
            kill_group(w);
        }
        close_sup(w);
        break;
    case EV_REAPED: w->state = MXOP__WORKER_EXITED; break;
    case EV_REPORT: {
        void *owner = w->owner;
        w->owner = NULL;
        if (owner != NULL)
            w->cbs->on_exit(owner, w, arg);
        break;
    }
    case EV_HANDLE_CLOSED:
        if (--w->open_handles == 0)
            worker_free(w);
        break;
    case EV_GIVE_FD:
        *(int *)arg = w->client_fd;
        w->client_fd = -1;
        break;
    case EV_QUEUED: {
        mxop__pending_t *p = (mxop__pending_t *)arg;
        p->next = NULL;
        if (w->q_tail != NULL)
            w->q_tail->next = p;
        else
            w->q_head = p;
        w->q_tail = p;
        break;
    }
    case EV_ANSWERED: {
        struct take_one *t = (struct take_one *)arg;
        t->p = unlink_request(w, t->sup_id);
        break;
    }
    case EV_QUEUE_TAKEN:
        *(mxop__pending_t **)arg = w->q_head;
        w->q_head = w->q_tail = NULL;
        break;
    }
}

static void proc_closed_cb(uv_handle_t *h)
{
    transition(MXOP__CONTAINER_OF((uv_poll_t *)h, mxop__worker_t, proc.poll), EV_HANDLE_CLOSED,
               NULL);
}

static void sup_closed_cb(mxop__conn_t *c)
{
    transition(c->data, EV_HANDLE_CLOSED, NULL);
}

/* A reason of the daemon's own (MXOP_EWORKER_CRASHED) with a formatted message. */
static mxop__kill_reason_t reason(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static mxop__kill_reason_t reason(const char *fmt, ...)
{
    mxop__kill_reason_t r = {.code = MXOP_EWORKER_CRASHED};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r.msg, sizeof(r.msg), fmt, ap);
    va_end(ap);
    return r;
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
        mxop__kill_reason_t why = reason("it wrote an undecodable message (%u bytes) into its "
                                         "supervisor channel and was killed",
                                         (unsigned)len);
        transition(w, EV_CHANNEL_LOST, &why);
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
    mxop__kill_reason_t why = {0};
    if (code != 0 && code != MXOP_EDISCONNECTED)
        why = reason("its supervisor channel broke (%s) and it was killed", msg);
    else if (w->state != MXOP__WORKER_EXITED && !is_exiting(w->pid))
        why = reason("it closed its supervisor channel (fd 3) while running and was killed");
    transition(w, EV_CHANNEL_LOST, why.code != 0 ? &why : NULL);
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
void mxop__workers_sweep(mxop__daemon_t *d)
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
            if (mxop__worker_alive(w) && sid == w->pid) {
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

static void exit_cb(mxop__spawn_t *p, int64_t exit_status, int term_signal)
{
    mxop__worker_t *w = MXOP__CONTAINER_OF(p, mxop__worker_t, proc);
    mxop__daemon_t *d = w->d;
    mxop__worker_state_t was = w->state;
    transition(w, EV_REAPED, NULL);

    /* What it wrote before dying goes into the log before its death does (worker_output.c). */
    char last_err[160] = "";
    mxop__worker_output_drain(w->output, last_err, sizeof(last_err));
    mxop__worker_output_release(w->output);
    w->output = NULL;

    /* Replies it wrote before dying are still in the socket: hear them first. */
    if (w->sup_open)
        mxop__conn_drain(&w->sup);

    const mxop__kill_reason_t *k = &w->kill;
    bool timeout = k->code == MXOP_ETIMEOUT;
    bool unasked = term_signal == SIGKILL && k->code == 0;
    bool oom_seen = mxop__cgroup_release(w->pid, w->page, unasked);
    page_snap_t s;
    read_page(w->page, &s, false);
    kill(-w->pid, SIGKILL); /* whatever the op started */
    mxop__workers_sweep(d);
    mxop__workeruid_release(&d->cfg, w->uid); /* its own uid, for a later worker */
    transition(w, EV_CHANNEL_LOST, NULL);

    if (w->owner == NULL) {
        MXOP__LOGD(w->session_id, NULL, "worker %d (generation %u) reaped", (int)w->pid,
                   (unsigned)w->generation);
        mxop__spawn_close(&w->proc, proc_closed_cb);
        return;
    }

    mxop__worker_exit_t e = {
        .term_signal = term_signal,
        .exit_status = term_signal != 0 ? -1 : (int)exit_status,
        /* A timeout names what the daemon enforced; otherwise the page is the only witness. */
        .call_id = timeout  ? k->call_id
                   : s.busy ? s.call_id
                            : 0,
        /* The page keeps the id of the last call begun: 0 means this worker never served one. */
        .served = s.call_id != 0 || (timeout && k->call_id != 0),
        .started = w->started,
        .daemon_killed = k->code != 0,
        .retiring = was == MXOP__WORKER_RETIRING,
    };
    mxop__fmt(e.op, sizeof(e.op), "%s", timeout ? k->op : s.busy ? s.op : "");
    mxop__fmt(e.kill_msg, sizeof(e.kill_msg), "%s", k->msg);
    char what[160];
    describe(what, sizeof(what), w->pid, &s);
    if (term_signal != 0)
        mxop__fmt(e.how, sizeof(e.how), "was killed by signal %d (%s)", term_signal,
                  mxop__signal_name(term_signal));
    else if (last_err[0] != '\0' && s.call_id == 0)
        /* It died before serving a call: its last stderr line is most likely why. */
        mxop__fmt(e.how, sizeof(e.how), "exited with status %lld (stderr: %s)",
                  (long long)exit_status, last_err);
    else
        mxop__fmt(e.how, sizeof(e.how), "exited with status %lld", (long long)exit_status);
    /*
     * The verdict comes from what the daemon observed: its own kill (the
     * watchdog's clock, a broken channel) or how the process ended.  The
     * worker's note is memory the worker (and so any op) can write: it may
     * only refine the verdict where the observation agrees with it.
     */
    e.code = MXOP_EWORKER_CRASHED;
    bool note = s.fault_code < 0;
    if (timeout) {
        e.code = MXOP_ETIMEOUT;
        mxop__fmt(e.message, sizeof(e.message), "%s", k->msg);
    } else if (note && (note_agrees(s.fault_code, term_signal, exit_status) ||
                        (oom_seen && s.fault_code == MXOP_EWORKER_OOM))) {
        e.code = s.fault_code;
        mxop__fmt(e.message, sizeof(e.message), "%s %s: %s", what, e.how, s.fault_msg);
    } else if (k->code != 0) {
        mxop__fmt(e.message, sizeof(e.message), "%s: %s", what, k->msg);
    } else if (term_signal == 0 && exit_status == MXOP__W_EXIT_DATA_FRAMING) {
        e.code = MXOP_EPROTOCOL;
        mxop__fmt(e.message, sizeof(e.message),
                  "%s exited: its data channel received a malformed frame from the client, so "
                  "the channel was lost and the worker is replaced",
                  what);
    } else if (note) {
        mxop__fmt(e.message, sizeof(e.message),
                  "%s %s (its own note, which does not match how it ended, "
                  "claims %s: %s)",
                  what, e.how, mxop_err_name(s.fault_code), s.fault_msg);
    } else {
        mxop__fmt(e.message, sizeof(e.message), "%s %s", what, e.how);
    }
    if (!timeout && (term_signal == SIGSEGV || term_signal == SIGBUS || term_signal == SIGABRT))
        mxop__note_add_backtrace(w->page, e.message, sizeof(e.message));

    transition(w, EV_REPORT, &e);
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
        transition(w, EV_EXECED, NULL);
        return;
    }
    if (status == -EINTR)
        return; /* killed before its exec: the killer said why */
    MXOP__LOGD(w->session_id, NULL, "worker %d: exec failed: %s", (int)w->pid, strerror(-status));
    mxop__kill_reason_t why =
        reason("cannot start worker %s: %s", w->d->cfg.worker_path, strerror(-status));
    transition(w, EV_KILL, &why);
}

int mxop__worker_spawn(mxop__daemon_t *d, uint64_t session_id, uint32_t generation,
                       const mxop__worker_cbs_t *cbs, void *owner, mxop__worker_t **out, char *err,
                       size_t errlen)
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
    w->state = MXOP__WORKER_SPAWNING;
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
        if (w->proc.handles > 0) {
            /* Handles spawn.c began are still closing: the worker's memory outlives them. */
            w->open_handles++;
            w->proc.close_cb = proc_closed_cb;
        }
        /* Never started, never reported (owner unset): its handles close, then it is freed. */
        transition(w, EV_REAPED, NULL);
        transition(w, EV_CHANNEL_LOST, NULL);
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
        mxop__kill_reason_t why =
            reason("cannot start worker %s: %s", d->cfg.worker_path, strerror(-xrc));
        transition(w, EV_KILL, &why);
    }
    w->owner = owner;
    w->client_fd = data[0];
    *out = w;
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

int mxop__worker_take_client_fd(mxop__worker_t *w)
{
    int fd = -1;
    transition(w, EV_GIVE_FD, &fd);
    return fd;
}

bool mxop__worker_reachable(const mxop__worker_t *w)
{
    return w != NULL && w->state != MXOP__WORKER_EXITED && w->sup_open;
}

bool mxop__worker_alive(const mxop__worker_t *w)
{
    return w->state != MXOP__WORKER_EXITED;
}

bool mxop__worker_dying(const mxop__worker_t *w)
{
    return w->state == MXOP__WORKER_KILLING || w->state == MXOP__WORKER_EXITED;
}

int mxop__worker_send(mxop__worker_t *w, const Mxop__SupRequest *req, int fd, mxop__pending_t *p)
{
    if (!mxop__worker_reachable(w))
        return MXOP_EWORKER_CRASHED;
    int rc = mxop__conn_send(&w->sup, MXOP__KIND_SUP_REQUEST, &req->base, fd >= 0 ? &fd : NULL,
                             fd >= 0 ? 1 : 0);
    /* The worker is gone but not yet reaped: that is its death, not the client's connection. */
    if (rc == MXOP_EDISCONNECTED)
        return MXOP_EWORKER_CRASHED;
    if (rc == 0 && p != NULL)
        transition(w, EV_QUEUED, p);
    return rc;
}

int mxop__worker_retire(mxop__worker_t *w, const Mxop__SupRequest *req)
{
    int rc = mxop__worker_send(w, req, -1, NULL);
    if (rc == 0)
        transition(w, EV_RETIRE, NULL);
    return rc;
}

const mxop__pending_t *mxop__worker_queue(const mxop__worker_t *w)
{
    return w != NULL ? w->q_head : NULL;
}

mxop__pending_t *mxop__worker_queue_take(mxop__worker_t *w, uint64_t sup_id)
{
    if (w == NULL)
        return NULL;
    struct take_one t = {.sup_id = sup_id};
    transition(w, EV_ANSWERED, &t);
    return t.p;
}

mxop__pending_t *mxop__worker_queue_take_all(mxop__worker_t *w)
{
    if (w == NULL)
        return NULL;
    mxop__pending_t *all = NULL;
    transition(w, EV_QUEUE_TAKEN, &all);
    return all;
}

void mxop__worker_kill(mxop__worker_t *w, const char *why)
{
    mxop__kill_reason_t r = reason("%s", why);
    transition(w, EV_KILL, &r);
}

void mxop__worker_kill_timeout(mxop__worker_t *w, uint64_t call_id, const char *op, const char *why)
{
    if (!mxop__worker_alive(w) || w->kill.code == MXOP_ETIMEOUT)
        return;
    mxop__kill_reason_t r = {.code = MXOP_ETIMEOUT, .call_id = call_id};
    mxop__fmt(r.op, sizeof(r.op), "%s", op != NULL ? op : "");
    mxop__fmt(r.msg, sizeof(r.msg), "%s", why);
    mxop__log_ctx_t ctx = {.session = w->session_id, .op = op, .worker_pid = (int)w->pid};
    mxop__log_ev(MXOP__LOG_WARN, &ctx, "watchdog: %s", why);
    transition(w, EV_KILL, &r);
}

mxop__pending_t *mxop__worker_detach_kill(mxop__worker_t *w)
{
    mxop__pending_t *all = mxop__worker_queue_take_all(w);
    transition(w, EV_DETACH, NULL);
    return all;
}
