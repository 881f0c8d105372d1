/*
 * tools/mxop/reload_conn.c - the control connection of `mxop load` and
 * `mxop reload` (see reload_conn.h).
 */
#include "tools/mxop/reload_conn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"

int mxop__rconn_open(mxop__rconn_t *c, const char *socket_path, int timeout_ms, char *err,
                     size_t errlen)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->next_id = 1;
    const char *path = socket_path != NULL ? socket_path : getenv("MXOP_SOCKET");
    if (path == NULL || path[0] == '\0') {
        mxop__fmt(err, errlen, "no control socket: pass --socket PATH or set MXOP_SOCKET");
        return MXOP_EINVAL;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path)) {
        mxop__fmt(err, errlen, "socket path %s is too long", path);
        return MXOP_EINVAL;
    }
    strcpy(sa.sun_path, path);
    if (mxop__pbarena_init(&c->arena, 65536) != 0) {
        mxop__fmt(err, errlen, "out of memory");
        return MXOP_ENOMEM;
    }
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        mxop__fmt(err, errlen, "cannot connect to mxop-serverd at %s: %s", path, strerror(errno));
        mxop__rconn_close(c);
        return MXOP_EDISCONNECTED;
    }
    Mxop__Hello h = MXOP__HELLO__INIT;
    h.min_version = 1;
    h.max_version = 1;
    h.client_name = "mxop";
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_HELLO;
    req.hello = &h;
    Mxop__Reply *r;
    int rc = mxop__rconn_request(c, &req, timeout_ms, &r, err, errlen);
    if (rc != 0)
        mxop__rconn_close(c);
    return rc;
}

int mxop__rconn_request(mxop__rconn_t *c, Mxop__Request *req, int timeout_ms, Mxop__Reply **out,
                        char *err, size_t errlen)
{
    *out = NULL;
    req->id = c->next_id++;
    int rc = mxop__frame_send(c->fd, &c->fb, MXOP__KIND_CTL_REQUEST, &req->base, NULL, 0);
    if (rc != 0) {
        mxop__fmt(err, errlen, "cannot send to mxop-serverd: %s", mxop_strerror(rc));
        return rc;
    }
    for (;;) {
        int fds[MXOP__FRAME_MAX_FDS];
        int nfds = 0;
        uint16_t kind;
        uint32_t len;
        rc = mxop__frame_recv(c->fd, &c->fb, &kind, &len, fds, MXOP__FRAME_MAX_FDS, &nfds,
                              timeout_ms);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        if (rc != 0) {
            mxop__fmt(err, errlen, "%s waiting for mxop-serverd's reply",
                      rc == MXOP_ETIMEOUT ? "timed out" : mxop_strerror(rc));
            return rc;
        }
        if (kind != MXOP__KIND_CTL_REPLY) {
            mxop__fmt(err, errlen, "mxop-serverd sent a frame of kind %u", kind);
            return MXOP_EPROTOCOL;
        }
        mxop__pbarena_reset(&c->arena);
        Mxop__Reply *r = mxop__reply__unpack(&c->arena.allocator, len, c->fb.data);
        if (r == NULL) {
            mxop__fmt(err, errlen, "mxop-serverd sent a reply that does not decode");
            return MXOP_EPROTOCOL;
        }
        if (r->id == 0 && r->body_case == MXOP__REPLY__BODY_EVENT)
            continue; /* news of a worker; not what was asked */
        if (r->id != req->id) {
            const char *m = r->message != NULL && r->message[0] ? r->message : "";
            mxop__fmt(err, errlen, "mxop-serverd: %s", m[0] ? m : mxop_strerror(r->status));
            return r->status < 0 ? r->status : MXOP_EPROTOCOL;
        }
        if (r->status != 0) {
            mxop__fmt(err, errlen, "%s",
                      r->message != NULL && r->message[0] ? r->message : mxop_strerror(r->status));
            return r->status < 0 ? r->status : MXOP_EPROTOCOL;
        }
        *out = r;
        return 0;
    }
}

void mxop__rconn_close(mxop__rconn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    mxop__framebuf_free(&c->fb);
    mxop__pbarena_destroy(&c->arena);
}

void mxop__json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s != NULL ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void fmt_time(char *out, size_t n, int64_t ns)
{
    time_t t = (time_t)(ns / 1000000000LL);
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
        mxop__fmt(out, n, "%lld", (long long)t);
    else
        mxop__fmt(out + strlen(out), n - strlen(out), ".%03lldZ",
                  (long long)(ns % 1000000000LL / 1000000));
}

void mxop__print_libver(FILE *f, const Mxop__LibraryVersion *v, bool json, const char *indent)
{
    const char *sha = v->sha256 != NULL && v->sha256[0] ? v->sha256 : "";
    if (json) {
        fprintf(f, "{\"name\": ");
        mxop__json_str(f, v->name);
        fprintf(f, ", \"path\": ");
        mxop__json_str(f, v->path);
        fprintf(f,
                ", \"dev\": %llu, \"ino\": %llu, \"size\": %llu, \"mtime_ns\": %lld, "
                "\"sha256\": ",
                (unsigned long long)v->dev, (unsigned long long)v->ino, (unsigned long long)v->size,
                (long long)v->mtime_ns);
        mxop__json_str(f, sha);
        fprintf(f, ", \"loaded_at_ms\": %lld}", (long long)v->loaded_at_ms);
        return;
    }
    char mt[48], la[48];
    fmt_time(mt, sizeof(mt), v->mtime_ns);
    fmt_time(la, sizeof(la), v->loaded_at_ms * 1000000LL);
    fprintf(f, "%slibrary: %s\n", indent, v->name != NULL ? v->name : "");
    fprintf(f, "%spath:    %s\n", indent, v->path != NULL ? v->path : "");
    if (sha[0] == '\0') {
        fprintf(f, "%sversion: unknown (the daemon could not read the file)\n", indent);
        return;
    }
    fprintf(f, "%sdevice:  %llu\n%sinode:   %llu\n", indent, (unsigned long long)v->dev, indent,
            (unsigned long long)v->ino);
    fprintf(f, "%ssize:    %llu\n", indent, (unsigned long long)v->size);
    fprintf(f, "%smtime:   %s\n", indent, mt);
    fprintf(f, "%ssha256:  %s\n", indent, sha);
    fprintf(f, "%sloaded:  %s\n", indent, la);
}
