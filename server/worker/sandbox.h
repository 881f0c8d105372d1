/*
 * server/worker/sandbox.h - confining a worker before any plugin runs.
 *
 * The daemon passes the sandbox on the worker's command line:
 *
 *     --sandbox none|basic|strict   (default strict)
 *     --memory-mb N                 private writable memory ops may add (0: no limit)
 *     --max-fds N                   RLIMIT_NOFILE
 *     --uid U --gid G               run as this user (the worker must start as root);
 *                                   also gives the worker a network namespace of its own
 *     --own-uid 0|1                 1: no other worker runs as U (neighbours.c)
 *     --plugin-dir DIR              the only directory of libraries strict may read
 *     --allowlist FILE              library names and SHA-256 digests ("" : none)
 *     --ns-profile none|cpu|gpu     strict's namespaces and minimal root (namespaces.h)
 *
 * and main.c calls mxop__sandbox_apply() once its descriptors are in place
 * (fds 3-5 checked, every other descriptor closed, no_new_privs set, the
 * fault handler installed) and before any library is loaded.
 *
 * What each level does (docs/isolation.md has the full table):
 *
 *   none    nothing beyond what every worker gets (no_new_privs, death
 *           with the daemon, inherited descriptors closed).
 *   basic   resource limits (memory through RLIMIT_DATA, open files,
 *           file size through RLIMIT_FSIZE, no core dumps), a seccomp
 *           filter refusing, with EPERM, the kernel's administrative
 *           interfaces and access to other processes: ptrace,
 *           process_vm_readv/writev, mounts, modules, kexec, bpf,
 *           perf_event_open, reboot, swap, keyrings, unshare/setns and
 *           clone with CLONE_NEW*, personality changes, clock changes;
 *           where workers share a uid, priority, scheduling, CPU, I/O and
 *           limit calls on other processes (neighbours.c); and a Landlock
 *           domain (where the kernel has one) that keeps ptrace and
 *           signals inside the worker's own process tree and refuses
 *           device nodes.  As root, a private /dev/shm (namespaces.c).
 *   strict  basic, plus: no new programs (execve/execveat), no new
 *           processes (fork, vfork, clone without CLONE_THREAD), no
 *           sockets but AF_UNIX, no io_uring, no uid/gid/capability
 *           changes, no closing, replacing, write(2)-ing or sending on
 *           the worker's own channels (fds 3 and 4: the worker itself
 *           only sendmsg()s on them with MSG_NOSIGNAL and never closes
 *           them; a stale descriptor number in an op would otherwise
 *           desynchronise the session), no probing of other processes by
 *           pid where the pid namespace is the host's (neighbours.c),
 *           every capability dropped, and a Landlock domain that also
 *           refuses executing any file, socket files, TCP bind/connect and
 *           abstract-socket connections outside the worker's tree.
 *
 * The filter never kills: a refused call returns EPERM (clone3 returns
 * ENOSYS so that glibc falls back to clone, where the flags can be seen).
 *
 * Sanitizer builds keep what LeakSanitizer needs at exit: ptrace (except
 * PTRACE_TRACEME) and clone with CLONE_VM for its tracer; the Landlock
 * domain still confines ptrace to the worker's own process tree.
 */
#ifndef MXOP_SERVER_WORKER_SANDBOX_H
#define MXOP_SERVER_WORKER_SANDBOX_H

#include <stddef.h>
#include <stdint.h>

enum mxop__sandbox_level {
    MXOP__SANDBOX_NONE = 0,
    MXOP__SANDBOX_BASIC = 1,
    MXOP__SANDBOX_STRICT = 2,
};

/**
 * Takes argv[*i] (and its value, advancing *i) if it is a sandbox option.
 * Returns 0 when taken, 1 when argv[*i] is not a sandbox option, or
 * MXOP_EINVAL with a sentence in err for a bad or missing value.
 */
int mxop__sandbox_arg(int argc, char **argv, int *i, char *err, size_t errlen);

/**
 * Applies the configured sandbox to the calling process.  Returns 0, or a
 * negative MXOP_E* code with a sentence in err (the worker then refuses to
 * start: a sandbox asked for and not had is a failure, not a warning).
 * Kernel features that are merely absent (Landlock) are skipped.
 */
int mxop__sandbox_apply(char *err, size_t errlen);

/**
 * Enters the worker's Landlock domain (landlock.c): basic confines ptrace,
 * signals and device-node creation; strict also gives the filesystem view
 * described there (system libraries, /proc, /sys and `plugin_dir` read
 * only, nothing writable but /dev/null and, in the GPU profile, the CUDA
 * driver's nodes).  A kernel without Landlock is not an error.
 */
int mxop__landlock_apply(int strict, const char *plugin_dir, const char *allowlist, char *err,
                         size_t errlen);

/** The plugin directory (--plugin-dir), or NULL. */
const char *mxop__sandbox_plugin_dir(void);

/** The allowlist file (--allowlist), or NULL or "" when there is none. */
const char *mxop__sandbox_allowlist(void);

/** The Landlock ABI of the running kernel, 0 when it has none. */
long mxop__landlock_abi(void);

/** The RLIMIT_DATA the sandbox set, in bytes; 0 when memory is not limited. */
uint64_t mxop__sandbox_memory_limit(void);

/** The budget asked for with --memory-mb, in MiB (0: none); for messages. */
uint64_t mxop__sandbox_memory_mb(void);

#endif /* MXOP_SERVER_WORKER_SANDBOX_H */
