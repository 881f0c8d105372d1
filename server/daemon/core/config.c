/*
 * server/daemon/core/config.c - reading --config FILE and merging it with the
 * command line (the format is described in config.h and docs/operations.md).
 *
 * The file is turned into arguments rather than parsed into the
 * configuration here, so that the command line and the file can never
 * disagree about what an option means: main.c's one parser checks both,
 * at start and again at SIGHUP.
 */
#include "server/daemon/core/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/core/integrity.h"

/* The longest line the file may hold. */
#define LINE_MAX_BYTES 4096

/* One option of an argument list: its key ("--name", in buf) and its value. */
typedef struct opt_iter {
    const mxop__cfgargs_t *a;
    int i;
    char key[64];
    const char *val;
} opt_iter_t;

/* Steps to the next option; 0 at the end.  "--k=v" and "--k v" both yield (--k, v). */
static int next_opt(opt_iter_t *it)
{
    while (it->i < it->a->argc) {
        const char *arg = it->a->argv[it->i++];
        if (strncmp(arg, "--", 2) != 0)
            continue;
        const char *eq = strchr(arg, '=');
        size_t n = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
        if (n >= sizeof(it->key))
            n = sizeof(it->key) - 1;
        memcpy(it->key, arg, n);
        it->key[n] = '\0';
        if (eq != NULL)
            it->val = eq + 1;
        else if (strcmp(arg, "--help") == 0 || strcmp(arg, "--version") == 0)
            it->val = "";
        else
            it->val = it->i < it->a->argc ? it->a->argv[it->i++] : "";
        return 1;
    }
    return 0;
}

static int push(mxop__cfgargs_t *a, size_t *cap, const char *arg, const char *origin)
{
    if ((size_t)a->argc + 1 >= *cap) {
        size_t ncap = *cap ? *cap * 2 : 32;
        char **nv = realloc(a->argv, ncap * sizeof(*nv));
        if (nv == NULL)
            return MXOP_ENOMEM;
        a->argv = nv;
        char **no = realloc(a->origin, ncap * sizeof(*no));
        if (no == NULL)
            return MXOP_ENOMEM;
        a->origin = no;
        *cap = ncap;
    }
    char *s = strdup(arg);
    char *o = origin != NULL ? strdup(origin) : NULL;
    if (s == NULL || (origin != NULL && o == NULL)) {
        free(s);
        free(o);
        return MXOP_ENOMEM;
    }
    a->argv[a->argc] = s;
    a->origin[a->argc] = o;
    a->argc++;
    a->argv[a->argc] = NULL;
    a->origin[a->argc] = NULL;
    return 0;
}

/* 1 when the command line (argv without --config) sets option `key` ("--name"). */
static int cmdline_sets(int argc, char **argv, const char *key)
{
    size_t n = strlen(key);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], key, n) == 0 && (argv[i][n] == '\0' || argv[i][n] == '='))
            return 1;
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Appends the file's lines as "--key=value", but keys the command line sets. */
static int read_file(const char *path, int argc, char **argv, mxop__cfgargs_t *out, size_t *cap,
                     char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        mxop__fmt(err, errlen, "config file %s: %s", path, strerror(errno));
        return MXOP_EIO;
    }
    char line[LINE_MAX_BYTES + 2];
    int lineno = 0;
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        size_t len = strlen(line);
        if (len > 0 && line[len - 1] != '\n' && !feof(f)) {
            mxop__fmt(err, errlen, "%s:%d: the line is longer than %d bytes", path, lineno,
                      LINE_MAX_BYTES);
            rc = MXOP_EINVAL;
            break;
        }
        char *s = trim(line);
        if (s[0] == '\0' || s[0] == '#')
            continue;
        char *eq = strchr(s, '=');
        if (eq == NULL) {
            mxop__fmt(err, errlen, "%s:%d: expected 'key = value', not '%.80s'", path, lineno, s);
            rc = MXOP_EINVAL;
            break;
        }
        *eq = '\0';
        char *key = trim(s);
        char *val = trim(eq + 1);
        bool bad_key = key[0] == '\0' || key[0] == '-' || strlen(key) > 40;
        for (char *p = key; !bad_key && *p != '\0'; p++)
            bad_key = !(islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '-');
        if (bad_key) {
            mxop__fmt(err, errlen,
                      "%s:%d: key '%.60s' is not an option name (lower-case letters, digits "
                      "and '-', without the leading --)",
                      path, lineno, key);
            rc = MXOP_EINVAL;
            break;
        }
        char opt[64];
        mxop__fmt(opt, sizeof(opt), "--%s", key);
        if (cmdline_sets(argc, argv, opt))
            continue; /* The command line overrides the file. */
        char arg[LINE_MAX_BYTES + 80];
        char origin[4200];
        mxop__fmt(arg, sizeof(arg), "%s=%s", opt, val);
        mxop__fmt(origin, sizeof(origin), "%s:%d", path, lineno);
        rc = push(out, cap, arg, origin);
        if (rc != 0)
            mxop__fmt(err, errlen, "out of memory reading %s", path);
    }
    if (rc == 0 && ferror(f)) {
        mxop__fmt(err, errlen, "config file %s: read error", path);
        rc = MXOP_EIO;
    }
    fclose(f);
    return rc;
}

int mxop__config_merge(int argc, char **argv, mxop__cfgargs_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    size_t cap = 0;
    /* The command line without --config, so that later checks see only real options. */
    char **rest = calloc((size_t)argc + 1, sizeof(*rest));
    if (rest == NULL) {
        mxop__fmt(err, errlen, "out of memory");
        return MXOP_ENOMEM;
    }
    int nrest = 0;
    const char *path = NULL;
    int rc = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0') {
                mxop__fmt(err, errlen, "option --config needs a file");
                rc = MXOP_EINVAL;
                goto out;
            }
            if (path != NULL) {
                mxop__fmt(err, errlen, "--config given twice");
                rc = MXOP_EINVAL;
                goto out;
            }
            path = argv[++i];
            continue;
        }
        if (i > 0 && strncmp(argv[i], "--config=", 9) == 0) {
            if (path != NULL || argv[i][9] == '\0') {
                mxop__fmt(err, errlen,
                          path != NULL ? "--config given twice" : "option --config needs a file");
                rc = MXOP_EINVAL;
                goto out;
            }
            path = argv[i] + 9;
            continue;
        }
        rest[nrest++] = argv[i];
    }

    rc = push(out, &cap, nrest > 0 ? rest[0] : "mxop-serverd", NULL);
    if (rc == 0 && path != NULL) {
        out->path = strdup(path);
        if (out->path == NULL)
            rc = MXOP_ENOMEM;
        else
            rc = read_file(path, nrest, rest, out, &cap, err, errlen);
        if (rc != 0)
            goto out;
    }
    for (int i = 1; rc == 0 && i < nrest; i++)
        rc = push(out, &cap, rest[i], NULL);
    if (rc == MXOP_ENOMEM)
        mxop__fmt(err, errlen, "out of memory");
out:
    free(rest);
    if (rc != 0)
        mxop__config_free(out);
    return rc;
}

void mxop__config_free(mxop__cfgargs_t *a)
{
    for (int i = 0; i < a->argc; i++) {
        free(a->argv[i]);
        free(a->origin[i]);
    }
    free(a->argv);
    free(a->origin);
    free(a->path);
    memset(a, 0, sizeof(*a));
}

/* The values of `key` in a, in order, joined by newlines (a newline cannot be in a value). */
static void values_of(const mxop__cfgargs_t *a, const char *key, char *out, size_t outlen)
{
    opt_iter_t it = {.a = a, .i = 1};
    size_t n = 0;
    out[0] = '\0';
    while (next_opt(&it)) {
        if (strcmp(it.key, key) != 0)
            continue;
        int k = snprintf(out + n, outlen - n, "%s\n", it.val);
        if (k < 0 || (size_t)k >= outlen - n)
            return;
        n += (size_t)k;
    }
}

int mxop__config_differs(const mxop__cfgargs_t *a, const mxop__cfgargs_t *b, const char *key)
{
    static char va[16384], vb[16384];
    values_of(a, key, va, sizeof(va));
    values_of(b, key, vb, sizeof(vb));
    return strcmp(va, vb) != 0;
}

/* 1 when `key` is the key of an option of a that starts before argument index `before`. */
static int seen_before(const mxop__cfgargs_t *a, const char *key, int before)
{
    opt_iter_t it = {.a = a, .i = 1};
    for (;;) {
        if (it.i >= before || !next_opt(&it))
            return 0;
        if (strcmp(it.key, key) == 0)
            return 1;
    }
}

void mxop__config_each_key(const mxop__cfgargs_t *a, const mxop__cfgargs_t *b,
                           void (*fn)(const char *key, void *arg), void *arg)
{
    const mxop__cfgargs_t *sets[2] = {a, b};
    for (int s = 0; s < 2; s++) {
        opt_iter_t it = {.a = sets[s], .i = 1};
        int start = it.i;
        while (next_opt(&it)) {
            int here = start;
            start = it.i;
            if (seen_before(sets[s], it.key, here))
                continue;
            if (s == 1 && seen_before(a, it.key, a->argc + 1))
                continue;
            fn(it.key, arg);
        }
    }
}

/* The options SIGHUP applies; every other option's change is logged as ignored. */
static const char *const reloadable[] = {"--max-connections",
                                         "--handshake-timeout-ms",
                                         "--idle-timeout-ms",
                                         "--max-buffered-mb",
                                         "--session-max-regions",
                                         "--session-max-region-mb",
                                         "--session-max-libraries",
                                         "--max-timeout-ms",
                                         "--init-timeout-ms",
                                         "--allow-uid",
                                         "--allow-gid",
                                         "--admin-uid",
                                         "--probe-interval-ms",
                                         "--probe-timeout-ms",
                                         "--allowlist",
                                         "--log-level",
                                         "--drain-timeout-ms"};

/* What log_ignored compares. */
typedef struct reload_pair {
    const mxop__cfgargs_t *old;
    const mxop__cfgargs_t *new_args;
} reload_pair_t;

static void log_ignored(const char *key, void *arg)
{
    const reload_pair_t *p = arg;
    for (size_t k = 0; k < sizeof(reloadable) / sizeof(reloadable[0]); k++)
        if (strcmp(key, reloadable[k]) == 0)
            return;
    if (mxop__config_differs(p->old, p->new_args, key))
        MXOP__LOGW(0, NULL,
                   "reload: %s changed, but it cannot change at run time; ignored until the "
                   "daemon restarts",
                   key);
}

void mxop__config_reload(mxop__daemon_t *d, const mxop__cfgargs_t *started, int argc, char **argv,
                         mxop__config_parse_fn parse)
{
    if (d->cfg.config_path == NULL) {
        MXOP__LOGW(0, NULL, "SIGHUP: no --config file to read again; nothing changed");
        return;
    }
    mxop__cfgargs_t na;
    char err[MXOP__MSG_MAX];
    if (mxop__config_merge(argc, argv, &na, err, sizeof(err)) != 0) {
        MXOP__LOGE(0, NULL, "reload failed, the running configuration is kept: %s", err);
        return;
    }
    mxop__config_t nc;
    memset(&nc, 0, sizeof(nc));
    /* The default the daemon started with, unless the file says otherwise. */
    int level = MXOP__LOG_INFO;
    const char *allowlist = NULL;
    int rc = parse(&na, &nc, &level, &allowlist, err, sizeof(err));
    if (rc == 0 && mxop__integrity_reload_allowlist(allowlist, err, sizeof(err)) != 0)
        rc = MXOP_EINVAL;
    if (rc != 0) {
        MXOP__LOGE(0, NULL, "reload of %s failed, the running configuration is kept: %s",
                   d->cfg.config_path, err);
        mxop__config_free(&na);
        return;
    }
    reload_pair_t pair = {started, &na};
    mxop__config_each_key(started, &na, log_ignored, &pair);
    /* The limits are read where they are enforced, so the next check sees the new value. */
    d->cfg.max_conns = nc.max_conns;
    d->cfg.handshake_timeout_ms = nc.handshake_timeout_ms;
    d->cfg.idle_timeout_ms = nc.idle_timeout_ms;
    d->cfg.max_buffered_mb = nc.max_buffered_mb;
    d->cfg.session_max_regions = nc.session_max_regions;
    d->cfg.session_max_region_mb = nc.session_max_region_mb;
    d->cfg.session_max_libs = nc.session_max_libs;
    d->cfg.max_timeout_ms = nc.max_timeout_ms;
    d->cfg.init_timeout_ms = nc.init_timeout_ms;
    d->cfg.drain_timeout_ms = nc.drain_timeout_ms;
    memcpy(d->cfg.allow_uids, nc.allow_uids, sizeof(nc.allow_uids));
    d->cfg.n_allow_uids = nc.n_allow_uids;
    memcpy(d->cfg.allow_gids, nc.allow_gids, sizeof(nc.allow_gids));
    d->cfg.n_allow_gids = nc.n_allow_gids;
    memcpy(d->cfg.admin_uids, nc.admin_uids, sizeof(nc.admin_uids));
    d->cfg.n_admin_uids = nc.n_admin_uids;
    d->cfg.probe_interval_ms = nc.probe_interval_ms;
    d->cfg.probe_timeout_ms = nc.probe_timeout_ms;
    mxop__log_set_level(level);
    const char *al = mxop__integrity_allowlist();
    MXOP__LOGI(0, NULL,
               "reloaded %s: max-connections %llu, session-max-regions %llu, "
               "session-max-libraries %llu, max-timeout-ms %llu, allowlist %s, %d more "
               "allowed uid%s",
               d->cfg.config_path, (unsigned long long)d->cfg.max_conns,
               (unsigned long long)d->cfg.session_max_regions,
               (unsigned long long)d->cfg.session_max_libs,
               (unsigned long long)d->cfg.max_timeout_ms, al[0] ? al : "none", d->cfg.n_allow_uids,
               d->cfg.n_allow_uids == 1 ? "" : "s");
    mxop__config_free(&na);
}
