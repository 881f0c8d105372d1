/*
 * server/daemon/core/options.c - mxop-serverd's options: the usage text, their
 * defaults, and the one parser the start (main.c) and SIGHUP (config.c) share.
 * Errors name the option and, for a config file's line, the file and line.
 */
#include "server/daemon/core/options.h"

#include <errno.h>
#include <limits.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "server/daemon/worker/worker.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/core/integrity.h"
#include "server/daemon/core/introspect.h"
#include "server/daemon/core/layers.h"
#include "server/daemon/session/session.h"

#define DEFAULT_MAX_TIMEOUT_MS 600000ull
#define DEFAULT_WORKER_MAX_FDS 1024ull
/* Below the client's control timeout (its 30 s call default plus 5 s grace). */
#define DEFAULT_INIT_TIMEOUT_MS 20000ull
/* Supervision: liveness probes of idle workers, and the op states of a session. */
#define DEFAULT_PROBE_INTERVAL_MS 2000ull
#define DEFAULT_PROBE_TIMEOUT_MS 5000ull
#define DEFAULT_SESSION_MAX_STATES 4096ull
/* How long calls in flight may finish after SIGTERM (--drain-timeout-ms). */
#define DEFAULT_DRAIN_TIMEOUT_MS 5000ull

static const char usage_text[] =
    "usage: mxop-serverd --socket PATH --plugin-dir DIR [--log-level debug|info|warn|error]\n"
    "                    [--worker PATH] [--allow-uid UID]... [--max-timeout-ms N]\n"
    "                    [--sandbox none|basic|strict] [--worker-memory-mb N]\n"
    "                    [--worker-max-fds N] [--worker-uid UID] [--worker-uids F:N]\n"
    "                    [--warm-spare on|off]\n"
    "                    [--init-timeout-ms N] [--max-connections N]\n"
    "                    [--handshake-timeout-ms N] [--idle-timeout-ms N] [--max-buffered-mb N]\n"
    "                    [--session-max-regions N] [--session-max-region-mb N]\n"
    "                    [--session-max-libraries N]\n"
    "                    [--probe-interval-ms N] [--probe-timeout-ms N]\n"
    "                    [--session-max-states N]\n"
    "                    [--allowlist FILE] [--strict-plugin-dir on|off]\n"
    "                    [--trusted-library NAME]...\n"
    "                    [--sandbox-fallback on|off] [--worker-cgroup auto|off]\n"
    "                    [--sandbox-profile auto|cpu|gpu]\n"
    "                    [--admin-uid UID]... [--watch on|off]\n"
    "                    [--log-format text|json] [--metrics-file PATH]\n"
    "                    [--metrics-interval-ms N]\n"
    "                    [--config FILE] [--drain-timeout-ms N]\n"
    "                    [--socket-mode OCTAL] [--socket-group GROUP] [--allow-gid GROUP]...\n"
    "                    [--log-file PATH] [--take-over]\n"
    "\n"
    "  --socket PATH        control socket to create (owner-only)\n"
    "  --plugin-dir DIR     the only directory op libraries are loaded from\n"
    "  --log-level LEVEL    debug, info (default), warn or error\n"
    "  --worker PATH        worker executable (default: mxop-worker beside this program,\n"
    "                       else ../libexec/mxop/ from it, else " MXOP_LIBEXECDIR "/mxop-worker)\n"
    "  --allow-uid UID      also accept clients of this user (number or name); repeatable\n"
    "  --max-timeout-ms N   longest any call may run, deadline or not (default 600000)\n"
    "  --init-timeout-ms N  longest a library may take to load (mxop_plugin_init) before\n"
    "                       its worker is killed: MXOP_ETIMEOUT (default 20000)\n"
    "  --max-connections N  client connections at once (default (RLIMIT_NOFILE - 64) / 4)\n"
    "  --handshake-timeout-ms N  from connecting to Hello (default 5000)\n"
    "  --idle-timeout-ms N  from connecting to OpenSession (default 60000; 0: none)\n"
    "  --max-buffered-mb N  partial frames held for all connections together (default 256)\n"
    "  --session-max-regions N    regions per session (default 4096)\n"
    "  --session-max-region-mb N  MiB of regions per session (default 0: no limit)\n"
    "  --session-max-libraries N  libraries per session (default 64)\n"
    "  --probe-interval-ms N  an idle worker is sent a liveness probe this long after its\n"
    "                       last sign of life (default 2000; 0: no probes)\n"
    "  --probe-timeout-ms N an idle worker that does not answer a probe within this is\n"
    "                       stopped or deadlocked and is replaced (default 5000)\n"
    "  --session-max-states N  op states one session may hold at once (default 4096)\n"
    "  --sandbox LEVEL      what workers may not do: none, basic or strict (default strict;\n"
    "                       see docs/isolation.md)\n"
    "  --worker-memory-mb N memory ops may use in a worker, in MiB (basic and strict;\n"
    "                       default half the physical memory, at least 1024; 0: no limit)\n"
    "  --worker-max-fds N   descriptors a worker may open (basic and strict; default 1024)\n"
    "  --worker-uid UID     run every worker as this user, each in a network namespace of\n"
    "                       its own (the daemon must run as root; 0 only with --sandbox\n"
    "                       none); default as root: a uid of its own per worker\n"
    "  --worker-uids FIRST:COUNT  the range of those uids (default 1836580864:4096)\n"
    "  --allowlist FILE     load only the libraries listed with their SHA-256 (a line:\n"
    "                       NAME DIGEST [trusted]; read again at every load;\n"
    "                       docs/security.md)\n"
    "  --strict-plugin-dir on|off  refuse to start when the plugin directory or a library\n"
    "                       in it is writable by others than its owner (default off: warn)\n"
    "  --sandbox-fallback on|off  run strict workers even where the kernel lacks a layer\n"
    "                       strict promises (Landlock's filesystem view; as root, the\n"
    "                       workers' namespaces); default off\n"
    "  --sandbox-profile auto|cpu|gpu  strict workers' minimal root: gpu binds in the CUDA\n"
    "                       driver's /dev/nvidia* nodes and keeps the host pid namespace;\n"
    "                       auto (default): gpu where /dev/nvidiactl exists\n"
    "  --worker-cgroup auto|off  a cgroup per worker where the daemon can make one (auto,\n"
    "                       default), or none (off: the memory limit is then RLIMIT_AS,\n"
    "                       sized with --session-max-region-mb; docs/security.md)\n"
    "  --trusted-library NAME  (repeatable) a library that keeps the zero-copy path under\n"
    "                       strict; a session loading any other runs in scratch mode: its\n"
    "                       worker gets regions read-only (docs/security.md)\n"
    "  --warm-spare on|off  keep one started spare worker per session, so that the call\n"
    "                       after a crash does not wait for a new worker (default on)\n"
    "  --admin-uid UID      this user (number or name) may also send daemon-wide requests\n"
    "                       (Shutdown, Reload) and connect; repeatable (docs/security.md)\n"
    "  --watch on|off       reload a loaded library whose file changed, checked each\n"
    "                       second (default off; docs/operations.md, \"Hot reload\")\n"
    "  --log-format FORMAT  text (default) or json: one JSON object per line\n"
    "  --metrics-file PATH  write the Prometheus text of `mxop stats` to PATH (atomically:\n"
    "                       a temporary file renamed), for node_exporter's textfile collector\n"
    "  --metrics-interval-ms N  how often (default 10000, at least 100)\n"
    "  --config FILE        read options from FILE, one 'key = value' a line (key: the\n"
    "                       option without --; '#' comments); the command line overrides\n"
    "                       it; SIGHUP reads it again (docs/operations.md)\n"
    "  --drain-timeout-ms N after SIGTERM, how long calls in flight may finish before the\n"
    "                       workers are stopped (default 5000; 0: stop at once)\n"
    "  --socket-mode OCTAL  the control socket's mode (default 0600; 0660 with\n"
    "                       --socket-group lets a group's members reach it)\n"
    "  --socket-group GROUP the control socket's group (name or number)\n"
    "  --allow-gid GROUP    also accept clients in this group (primary or supplementary,\n"
    "                       as at connect time); repeatable; reloadable\n"
    "  --log-file PATH      log to PATH (appended) instead of stderr; SIGUSR1 reopens it\n"
    "                       (after logrotate moved it)\n"
    "  --take-over          upgrade: take the listening socket of the daemon running at\n"
    "                       --socket; it stops accepting once this one has started and\n"
    "                       serves its clients until they leave (docs/operations.md)\n";

/*
 * The config file's part of argument parsing: where each argument came
 * from ("FILE:LINE", NULL for the command line), so that an error names
 * it, and whether this is a SIGHUP re-read (then errors are kept in
 * reload_err instead of printed, and nothing outside the cfg is changed).
 */
static char *const *arg_origin;
static const char *cur_origin;
static bool reloading;
static char reload_err[MXOP__MSG_MAX];
static const char *reload_allowlist;
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    char msg[MXOP__MSG_MAX];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (reloading) {
        mxop__fmt(reload_err, sizeof(reload_err), "%s%s%s", cur_origin ? cur_origin : "",
                  cur_origin ? ": " : "", msg);
        return 2;
    }
    if (cur_origin != NULL) {
        /* A config file's error: the file, line and key say it all; no usage text. */
        fprintf(stderr, "mxop-serverd: %s: %s\n", cur_origin, msg);
        return 2;
    }
    fprintf(stderr, "mxop-serverd: %s\n", msg);
    fputs(usage_text, stderr);
    return 2;
}

static int parse_uid(const char *s, uid_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (s[0] != '\0' && s[0] != '-' && *end == '\0' && errno == 0) {
        if (v >= (unsigned long long)(uid_t)-1)
            return MXOP_EINVAL;
        *out = (uid_t)v;
        return 0;
    }
    struct passwd *pw = getpwnam(s);
    if (pw == NULL)
        return MXOP_EINVAL;
    *out = pw->pw_uid;
    return 0;
}

static int parse_gid(const char *s, gid_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (s[0] != '\0' && s[0] != '-' && *end == '\0' && errno == 0) {
        if (v >= (unsigned long long)(gid_t)-1)
            return MXOP_EINVAL;
        *out = (gid_t)v;
        return 0;
    }
    struct group *gr = getgrnam(s);
    if (gr == NULL)
        return MXOP_EINVAL;
    *out = gr->gr_gid;
    return 0;
}

/* Half the physical memory, at least 1 GiB: a runaway op stops there, not at the OOM killer. */
static uint64_t default_memory_mb(void)
{
    long pages = sysconf(_SC_PHYS_PAGES);
    long page = sysconf(_SC_PAGESIZE);
    uint64_t mb = pages > 0 && page > 0 ? ((uint64_t)pages * (uint64_t)page >> 20) / 2 : 0;
    return mb < 1024 ? 1024 : mb;
}

/*
 * The worker beside our own executable, else in ../libexec/mxop beside it
 * (an installed tree, wherever it was unpacked), else the configured one.
 */
static char *default_worker(void)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            char cand[PATH_MAX + 16];
            mxop__fmt(cand, sizeof(cand), "%s/mxop-worker", self);
            if (access(cand, X_OK) == 0)
                return strdup(cand);
            mxop__fmt(cand, sizeof(cand), "%s/../libexec/mxop/mxop-worker", self);
            char real[PATH_MAX];
            if (access(cand, X_OK) == 0 && realpath(cand, real) != NULL)
                return strdup(real);
        }
    }
    return strdup(MXOP_LIBEXECDIR "/mxop-worker");
}

/* The config field of a numeric admission or quota option, or NULL. */
static uint64_t *limit_field(mxop__config_t *cfg, const char *opt)
{
    if (strcmp(opt, "--max-connections") == 0)
        return &cfg->max_conns;
    if (strcmp(opt, "--handshake-timeout-ms") == 0)
        return &cfg->handshake_timeout_ms;
    if (strcmp(opt, "--idle-timeout-ms") == 0)
        return &cfg->idle_timeout_ms;
    if (strcmp(opt, "--max-buffered-mb") == 0)
        return &cfg->max_buffered_mb;
    if (strcmp(opt, "--session-max-regions") == 0)
        return &cfg->session_max_regions;
    if (strcmp(opt, "--session-max-region-mb") == 0)
        return &cfg->session_max_region_mb;
    if (strcmp(opt, "--session-max-libraries") == 0)
        return &cfg->session_max_libs;
    return NULL;
}

/* Supervision: the config field of a probe or state-quota option, or NULL. */
static uint64_t *supervise_field(mxop__config_t *cfg, const char *opt)
{
    if (strcmp(opt, "--probe-interval-ms") == 0)
        return &cfg->probe_interval_ms;
    if (strcmp(opt, "--probe-timeout-ms") == 0)
        return &cfg->probe_timeout_ms;
    if (strcmp(opt, "--session-max-states") == 0)
        return &cfg->session_max_states;
    return NULL;
}
static uint64_t default_max_conns_now(void);

/*
 * Connections the fd limit leaves room for: each client holds its socket
 * and its worker's and spare's supervisor channels, and a spare's data
 * end, besides its regions; 64 are kept for the daemon itself.
 */
static uint64_t default_max_conns(void)
{
    /* Computed once, before main raises the limit, so that SIGHUP keeps the same default. */
    static uint64_t memo;
    if (memo != 0)
        return memo;
    memo = default_max_conns_now();
    return memo;
}

static uint64_t default_max_conns_now(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 1024;
    uint64_t n = rl.rlim_cur > 64 ? (rl.rlim_cur - 64) / 4 : 0;
    return n < 16 ? 16 : n;
}

/* Parses argv into cfg.  Returns 0, or an exit status (2 for bad usage, or 0 after --help). */
static int parse_args(int argc, char **argv, mxop__config_t *cfg, int *log_level, bool *done)
{
    const char *plugin_dir = NULL;
    const char *worker = NULL;
    bool memory_set = false;
    cfg->max_timeout_ms = DEFAULT_MAX_TIMEOUT_MS;
    cfg->init_timeout_ms = DEFAULT_INIT_TIMEOUT_MS;
    cfg->handshake_timeout_ms = 5000;
    cfg->idle_timeout_ms = 60000;
    cfg->max_buffered_mb = 256;
    cfg->session_max_regions = MXOP__SESSION_MAX_REGIONS;
    cfg->session_max_libs = 64;
    cfg->probe_interval_ms = DEFAULT_PROBE_INTERVAL_MS;
    cfg->probe_timeout_ms = DEFAULT_PROBE_TIMEOUT_MS;
    cfg->session_max_states = DEFAULT_SESSION_MAX_STATES;
    cfg->sandbox = "strict";
    cfg->worker_max_fds = DEFAULT_WORKER_MAX_FDS;
    cfg->warm_spare = true;
    cfg->drain_timeout_ms = DEFAULT_DRAIN_TIMEOUT_MS;
    *done = false;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        cur_origin = arg_origin != NULL ? arg_origin[i] : NULL;
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            fputs(usage_text, stdout);
            *done = true;
            return 0;
        }
        if (strcmp(arg, "--version") == 0) {
            printf("mxop-serverd %s (protocol %u-%u)\n", MXOP_VERSION_STRING,
                   MXOP__DAEMON_PROTO_MIN, MXOP__DAEMON_PROTO_MAX);
            *done = true;
            return 0;
        }
        if (strncmp(arg, "--", 2) != 0)
            return usage_error("unexpected argument '%s'", arg);

        /* Both "--opt value" and "--opt=value". */
        char opt[32];
        const char *val = NULL;
        const char *eq = strchr(arg, '=');
        size_t olen = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
        if (olen >= sizeof(opt))
            return usage_error("unknown option '%s'", arg);
        memcpy(opt, arg, olen);
        opt[olen] = '\0';
        static const char *const known[] = {
            "--socket", "--plugin-dir", "--log-level", "--worker", "--allow-uid",
            "--max-timeout-ms", "--sandbox", "--worker-memory-mb", "--worker-max-fds",
            "--worker-uid", "--warm-spare", "--init-timeout-ms", "--max-connections",
            /* One uid per worker (workeruid.c). */
            "--worker-uids", "--handshake-timeout-ms", "--idle-timeout-ms", "--max-buffered-mb",
            "--session-max-regions", "--session-max-region-mb", "--session-max-libraries",
            "--allowlist", "--strict-plugin-dir", "--sandbox-fallback", "--probe-interval-ms",
            "--probe-timeout-ms", "--session-max-states",
            /* Administrators and hot reload (admin.c, reload.c). */
            "--admin-uid", "--watch",
            /* Observability (cli): log format, metrics file. */
            "--log-format", "--metrics-file", "--metrics-interval-ms",
            "--config", /* the service: config file, drain */
            "--drain-timeout-ms",
            /* Memory integrity (memconfine.c). */
            "--trusted-library",
            /* Namespaces of strict workers (layers.c, server/worker/namespaces.c). */
            "--sandbox-profile",
            /* Memory limits without a cgroup (cgroup.c, the worker's RLIMIT_AS). */
            "--worker-cgroup",
            /* Permissions and logs (listener.c, log.c; docs/operations.md). */
            "--socket-mode", "--socket-group", "--allow-gid", "--log-file"};
        /* The one option without a value: a start that takes the running daemon's place. */
        if (strcmp(opt, "--take-over") == 0 && eq == NULL) {
            if (cur_origin != NULL)
                return usage_error("--take-over belongs on the command line, not in a file");
            cfg->take_over = true;
            continue;
        }
        bool ok = false;
        for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
            ok = ok || strcmp(opt, known[k]) == 0;
        if (!ok)
            return usage_error("unknown option '%s'", opt);
        if (eq != NULL)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else
            return usage_error("option %s needs a value", opt);
        if (val[0] == '\0')
            return usage_error("option %s needs a non-empty value", opt);

        if (strcmp(opt, "--socket") == 0) {
            if (cfg->socket_path != NULL)
                return usage_error("--socket given twice");
            cfg->socket_path = val;
        } else if (strcmp(opt, "--plugin-dir") == 0) {
            if (plugin_dir != NULL)
                return usage_error("--plugin-dir given twice");
            plugin_dir = val;
        } else if (strcmp(opt, "--log-level") == 0) {
            if (mxop__log_parse_level(val, log_level) != 0)
                return usage_error("--log-level must be debug, info, warn or error, not '%s'", val);
        } else if (strcmp(opt, "--worker") == 0) {
            if (worker != NULL)
                return usage_error("--worker given twice");
            worker = val;
        } else if (strcmp(opt, "--allow-uid") == 0) {
            uid_t uid;
            if (parse_uid(val, &uid) != 0)
                return usage_error("--allow-uid '%s' is neither a uid number nor a user name", val);
            if (cfg->n_allow_uids == MXOP__MAX_ALLOW_UIDS)
                return usage_error("at most %d --allow-uid options", MXOP__MAX_ALLOW_UIDS);
            cfg->allow_uids[cfg->n_allow_uids++] = uid;
        } else if (strcmp(opt, "--allow-gid") == 0 || strcmp(opt, "--socket-group") == 0) {
            gid_t gid;
            if (parse_gid(val, &gid) != 0)
                return usage_error("%s '%s' is neither a gid number nor a group name", opt, val);
            if (strcmp(opt, "--socket-group") == 0) {
                cfg->has_socket_gid = true;
                cfg->socket_gid = gid;
            } else {
                if (cfg->n_allow_gids == MXOP__MAX_ALLOW_UIDS)
                    return usage_error("at most %d --allow-gid options", MXOP__MAX_ALLOW_UIDS);
                cfg->allow_gids[cfg->n_allow_gids++] = gid;
            }
        } else if (strcmp(opt, "--socket-mode") == 0) {
            char *end;
            errno = 0;
            unsigned long v = strtoul(val, &end, 8);
            /* Connecting needs write permission; execute and the special bits mean nothing. */
            if (val[0] == '-' || *end != '\0' || errno != 0 || (v & ~0666ul) != 0 ||
                (v & 0600) != 0600)
                return usage_error("--socket-mode must be an octal mode of read/write bits that "
                                   "keeps the owner's 0600 (e.g. 0660), not '%s'",
                                   val);
            cfg->socket_mode = (unsigned)v;
        } else if (strcmp(opt, "--log-file") == 0) {
            if (val[0] != '/')
                return usage_error("--log-file must be an absolute path, not '%s'", val);
            cfg->log_file = val;
        } else if (strcmp(opt, "--sandbox") == 0) {
            if (strcmp(val, "none") != 0 && strcmp(val, "basic") != 0 && strcmp(val, "strict") != 0)
                return usage_error("--sandbox must be none, basic or strict, not '%s'", val);
            cfg->sandbox = val;
        } else if (strcmp(opt, "--worker-memory-mb") == 0 || strcmp(opt, "--worker-max-fds") == 0) {
            bool mem = strcmp(opt, "--worker-memory-mb") == 0;
            char *end;
            errno = 0;
            unsigned long long v = strtoull(val, &end, 10);
            if (val[0] == '-' || *end != '\0' || errno != 0 || v > (1ull << 30) || (!mem && v < 16))
                return usage_error("%s must be a number %s, not '%s'", opt,
                                   mem ? "of MiB (0: no limit)" : "from 16", val);
            if (mem) {
                cfg->worker_memory_mb = v;
                memory_set = true;
            } else {
                cfg->worker_max_fds = v;
            }
        } else if (strcmp(opt, "--worker-uid") == 0) {
            uid_t uid;
            if (parse_uid(val, &uid) != 0)
                return usage_error("--worker-uid '%s' is neither a uid number nor a user name",
                                   val);
            if (geteuid() != 0)
                return usage_error("--worker-uid needs the daemon to run as root");
            struct passwd *pw = getpwuid(uid);
            cfg->has_worker_uid = true;
            cfg->worker_uid = uid;
            cfg->worker_gid = pw != NULL ? pw->pw_gid : (gid_t)uid;
        } else if (strcmp(opt, "--worker-uids") == 0) {
            /* One uid per worker from a range (workeruid.c). */
            char why[256];
            if (mxop__workeruid_range_option(cfg, val, why, sizeof(why)) != 0)
                return usage_error("%s", why);
        } else if (supervise_field(cfg, opt) != NULL) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(val, &end, 10);
            bool zero_ok = strcmp(opt, "--probe-interval-ms") == 0;
            if (val[0] == '-' || *end != '\0' || errno != 0 || v > (1ull << 40) ||
                (v == 0 && !zero_ok))
                return usage_error("%s must be a %snumber, not '%s'", opt,
                                   zero_ok ? "" : "positive ", val);
            *supervise_field(cfg, opt) = v;
        } else if (limit_field(cfg, opt) != NULL) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(val, &end, 10);
            bool zero_ok = strcmp(opt, "--idle-timeout-ms") == 0 ||
                           strcmp(opt, "--session-max-region-mb") == 0;
            if (val[0] == '-' || *end != '\0' || errno != 0 || v > (1ull << 40) ||
                (v == 0 && !zero_ok))
                return usage_error("%s must be a %snumber, not '%s'", opt,
                                   zero_ok ? "" : "positive ", val);
            *limit_field(cfg, opt) = v;
        } else if (strcmp(opt, "--config") == 0) {
            /* config.c takes the command line's --config: this one is in a file. */
            return usage_error("--config cannot be given in a config file");
        } else if (strcmp(opt, "--drain-timeout-ms") == 0) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(val, &end, 10);
            if (val[0] == '-' || *end != '\0' || errno != 0 || v > (1ull << 40))
                return usage_error("--drain-timeout-ms must be a number of milliseconds, not '%s'",
                                   val);
            cfg->drain_timeout_ms = v;
        } else if (reloading &&
                   (strcmp(opt, "--allowlist") == 0 || strcmp(opt, "--strict-plugin-dir") == 0 ||
                    strcmp(opt, "--sandbox-fallback") == 0 ||
                    strcmp(opt, "--sandbox-profile") == 0 || strcmp(opt, "--worker-cgroup") == 0)) {
            /* At SIGHUP only the allowlist changes; main applies it once all else is read. */
            if (strcmp(opt, "--allowlist") == 0)
                reload_allowlist = val;
        } else if (strcmp(opt, "--allowlist") == 0 || strcmp(opt, "--strict-plugin-dir") == 0) {
            char why[512];
            if (mxop__integrity_option(opt, val, why, sizeof(why)) != 0)
                return usage_error("%s", why);
        } else if (strcmp(opt, "--trusted-library") == 0) {
            /* Memory integrity (memconfine.c): libraries that keep the zero-copy path. */
            /* Fixed at start: SIGHUP logs a change as ignored (config.c). */
            char why[256];
            if (!reloading && mxop__memconfine_option(opt, val, why, sizeof(why)) != 0)
                return usage_error("%s", why);
        } else if (strcmp(opt, "--sandbox-fallback") == 0 ||
                   strcmp(opt, "--sandbox-profile") == 0) {
            char why[256];
            if (mxop__layers_option(opt, val, why, sizeof(why)) != 0)
                return usage_error("%s", why);
        } else if (strcmp(opt, "--worker-cgroup") == 0) {
            /* Memory limits without a cgroup (cgroup.c): fixed at start. */
            char why[256];
            if (mxop__cgroup_option(val, why, sizeof(why)) != 0)
                return usage_error("%s", why);
        } else if (strcmp(opt, "--admin-uid") == 0) {
            /* Administrators and hot reload (admin.c, reload.c). */
            uid_t uid;
            if (parse_uid(val, &uid) != 0)
                return usage_error("--admin-uid '%s' is neither a uid number nor a user name", val);
            if (cfg->n_admin_uids == MXOP__MAX_ALLOW_UIDS ||
                cfg->n_allow_uids == MXOP__MAX_ALLOW_UIDS)
                return usage_error("at most %d --admin-uid and --allow-uid options",
                                   MXOP__MAX_ALLOW_UIDS);
            cfg->admin_uids[cfg->n_admin_uids++] = uid;
            /* An administrator may connect, too. */
            cfg->allow_uids[cfg->n_allow_uids++] = uid;
        } else if (strcmp(opt, "--watch") == 0) {
            if (strcmp(val, "on") == 0 || strcmp(val, "yes") == 0 || strcmp(val, "1") == 0)
                cfg->watch = true;
            else if (strcmp(val, "off") == 0 || strcmp(val, "no") == 0 || strcmp(val, "0") == 0)
                cfg->watch = false;
            else
                return usage_error("--watch must be on or off, not '%s'", val);
        } else if (strcmp(opt, "--log-format") == 0 || strncmp(opt, "--metrics-", 10) == 0) {
            /* Observability (cli): the log's format, the metrics file (metrics.c). */
            char why[256];
            int fmt;
            if (strcmp(opt, "--log-format") == 0) {
                if (mxop__log_parse_format(val, &fmt) != 0)
                    return usage_error("--log-format must be text or json, not '%s'", val);
                if (!reloading) /* the format is the start's (SIGHUP changes the cfg only) */
                    mxop__log_set_format(fmt);
            } else if (mxop__metrics_option(cfg, opt, val, why, sizeof(why)) != 0) {
                return usage_error("%s", why);
            }
        } else if (strcmp(opt, "--warm-spare") == 0) {
            if (strcmp(val, "on") == 0 || strcmp(val, "yes") == 0 || strcmp(val, "1") == 0)
                cfg->warm_spare = true;
            else if (strcmp(val, "off") == 0 || strcmp(val, "no") == 0 || strcmp(val, "0") == 0)
                cfg->warm_spare = false;
            else
                return usage_error("--warm-spare must be on or off, not '%s'", val);
        } else {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(val, &end, 10);
            /* The bound keeps the limit in nanoseconds inside an int64_t. */
            if (val[0] == '-' || *end != '\0' || errno != 0 || v == 0 || v > (1ull << 40))
                return usage_error("%s must be a positive number of milliseconds, not '%s'", opt,
                                   val);
            if (strcmp(opt, "--init-timeout-ms") == 0)
                cfg->init_timeout_ms = v;
            else
                cfg->max_timeout_ms = v;
        }
    }

    cur_origin = NULL;
    if (cfg->socket_mode == 0)
        cfg->socket_mode = 0600;
    if (!memory_set)
        cfg->worker_memory_mb = default_memory_mb();
    if (cfg->max_conns == 0)
        cfg->max_conns = default_max_conns();
    if (cfg->socket_path == NULL)
        return usage_error("--socket PATH is required");
    if (plugin_dir == NULL)
        return usage_error("--plugin-dir DIR is required");
    if (reloading)
        return 0; /* What follows looks at files only the start may use. */

    char real[PATH_MAX];
    struct stat st;
    if (realpath(plugin_dir, real) == NULL)
        return usage_error("plugin directory '%s': %s", plugin_dir, strerror(errno));
    if (stat(real, &st) != 0 || !S_ISDIR(st.st_mode))
        return usage_error("plugin directory '%s' is not a directory", plugin_dir);
    cfg->plugin_dir = strdup(real);
    char why[PATH_MAX + 256];
    if (mxop__integrity_check_plugin_dir(real, why, sizeof(why)) != 0)
        return usage_error("%s", why);

    if (worker != NULL) {
        if (realpath(worker, real) == NULL)
            return usage_error("worker '%s': %s", worker, strerror(errno));
        if (stat(real, &st) != 0 || !S_ISREG(st.st_mode) || access(real, X_OK) != 0)
            return usage_error("worker '%s' is not an executable file", worker);
        cfg->worker_path = strdup(real);
    } else {
        cfg->worker_path = default_worker();
    }
    if (cfg->plugin_dir == NULL || cfg->worker_path == NULL) {
        fputs("mxop-serverd: out of memory\n", stderr);
        return 1;
    }
    return 0;
}

/*
 * SIGHUP's parse (config.c calls it): the merged arguments into a fresh
 * cfg, with no effect outside it; the allowlist's value is handed back.
 */
int mxop__options_reparse(const mxop__cfgargs_t *na, mxop__config_t *nc, int *level,
                          const char **allowlist, char *err, size_t errlen)
{
    bool done;
    reloading = true;
    reload_allowlist = NULL;
    reload_err[0] = '\0';
    arg_origin = na->origin;
    int rc = parse_args(na->argc, na->argv, nc, level, &done);
    reloading = false;
    arg_origin = NULL;
    cur_origin = NULL;
    *allowlist = reload_allowlist;
    mxop__fmt(err, errlen, "%s", reload_err);
    return rc;
}

int mxop__options_parse(int argc, char **argv, char *const *origin, mxop__config_t *cfg,
                        int *log_level, bool *done)
{
    arg_origin = origin;
    int rc = parse_args(argc, argv, cfg, log_level, done);
    arg_origin = NULL;
    cur_origin = NULL;
    return rc;
}

void mxop__options_fix_defaults(void)
{
    (void)default_max_conns();
}
