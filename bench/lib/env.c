/*
 * bench/lib/env.c - see env.h.
 */
#include "bench/lib/env.h"

#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

int mxb_build_dir(int argc, char **argv, char *buf, size_t len)
{
    if (argc > 1) {
        return snprintf(buf, len, "%s", argv[1]) < (int)len ? 0 : -1;
    }
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    for (int i = 0; i < 2; i++) {
        char *slash = strrchr(buf, '/');
        if (slash == NULL)
            return -1;
        *slash = '\0';
    }
    return 0;
}

void mxb_machine_line(char *buf, size_t len)
{
    char model[128] = "unknown CPU", line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon != NULL) {
            snprintf(model, sizeof(model), "%s", colon + 2);
            model[strcspn(model, "\n")] = '\0';
            break;
        }
    }
    if (f != NULL)
        fclose(f);
    struct utsname u;
    if (uname(&u) != 0)
        snprintf(u.release, sizeof(u.release), "?");
    snprintf(buf, len, "%ld CPUs online, %s, Linux %s", sysconf(_SC_NPROCESSORS_ONLN), model,
             u.release);
}
