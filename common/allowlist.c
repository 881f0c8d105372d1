/*
 * common/allowlist.c - reading and searching the library allowlist (see
 * allowlist.h).  The file is small and read whole; no state is kept.
 */
#include "common/allowlist.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"

int mxop__allowlist_read(const char *path, char **text, char *err, size_t errlen)
{
    *text = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        mxop__fmt(err, errlen, "allowlist %s: %s", path, strerror(errno));
        return MXOP_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        mxop__fmt(err, errlen, "allowlist %s is not a regular file", path);
        close(fd);
        return MXOP_EIO;
    }
    if (st.st_size > MXOP__ALLOWLIST_MAX_BYTES) {
        mxop__fmt(err, errlen, "allowlist %s has %lld bytes, more than the %d allowed", path,
                  (long long)st.st_size, MXOP__ALLOWLIST_MAX_BYTES);
        close(fd);
        return MXOP_ELIMIT;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        close(fd);
        mxop__fmt(err, errlen, "out of memory reading allowlist %s", path);
        return MXOP_ENOMEM;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    *text = buf;
    return 0;
}

/* One field of a line: [*p, end) of non-blanks; *p moves past it. */
static size_t field(const char **p, const char *eol, const char **start)
{
    while (*p < eol && (**p == ' ' || **p == '\t' || **p == '\r'))
        (*p)++;
    *start = *p;
    while (*p < eol && **p != ' ' && **p != '\t' && **p != '\r')
        (*p)++;
    return (size_t)(*p - *start);
}

int mxop__allowlist_find(const char *text, const char *name, char expected[65], int *line,
                         int *trusted, char *err, size_t errlen)
{
    if (trusted != NULL)
        *trusted = 0;
    int found = 0;
    int n = 0;
    size_t name_len = name != NULL ? strlen(name) : 0;
    for (const char *p = text; *p != '\0';) {
        const char *eol = strchr(p, '\n');
        if (eol == NULL)
            eol = p + strlen(p);
        n++;
        const char *a, *b, *c;
        size_t la = field(&p, eol, &a);
        if (la == 0 || a[0] == '#') {
            p = *eol ? eol + 1 : eol;
            continue;
        }
        size_t lb = field(&p, eol, &b);
        size_t lc = field(&p, eol, &c);
        const char *d;
        size_t ld = field(&p, eol, &d);
        int hex_ok = lb == 64;
        for (size_t i = 0; hex_ok && i < 64; i++)
            hex_ok = isxdigit((unsigned char)b[i]);
        /* The optional third field: only `trusted` is known; a typo must not pass silently. */
        if (hex_ok && lc != 0 && (ld != 0 || lc != 7 || memcmp(c, "trusted", 7) != 0)) {
            mxop__fmt(err, errlen,
                      "allowlist line %d: after the name and the SHA-256 only 'trusted' may "
                      "follow, got '%.*s'",
                      n, (int)(eol - c > 120 ? 120 : eol - c), c);
            return MXOP_EINVAL;
        }
        if (!hex_ok) {
            mxop__fmt(err, errlen,
                      "allowlist line %d: expected a library name and a SHA-256 of 64 hex "
                      "digits, got '%.*s'",
                      n, (int)(eol - a > 120 ? 120 : eol - a), a);
            return MXOP_EINVAL;
        }
        if (name != NULL && la == name_len && memcmp(a, name, la) == 0) {
            if (found) {
                mxop__fmt(err, errlen, "allowlist line %d: '%s' is listed twice (also line %d)", n,
                          name, *line);
                return MXOP_EINVAL;
            }
            found = 1;
            *line = n;
            if (trusted != NULL)
                *trusted = lc != 0;
            for (size_t i = 0; i < 64; i++)
                expected[i] = (char)tolower((unsigned char)b[i]);
            expected[64] = '\0';
        }
        p = *eol ? eol + 1 : eol;
    }
    return found;
}
