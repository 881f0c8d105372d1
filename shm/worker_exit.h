/*
 * shm/worker_exit.h - what a worker's exit status means.
 *
 * The worker says why it ended through its exit status (and, beside it, a
 * note in its status page); the daemon's supervisor reads the status back.
 * Both sides take the numbers from here, so that neither reaches into the
 * other's private headers.  A status the daemon does not recognise is
 * reported as a crash; a note is believed only where the status agrees.
 */
#ifndef MXOP_SHM_WORKER_EXIT_H
#define MXOP_SHM_WORKER_EXIT_H

/* Bad command line: the daemon started the worker wrongly (server/worker/main.c). */
#define MXOP__W_EXIT_USAGE 2

/*
 * An op closed or replaced one of the worker's channels or its status page
 * (server/worker/transport.c): the worker cannot answer and is replaced.
 */
#define MXOP__W_EXIT_TRANSPORT 3

/*
 * The worker's CUDA context became unusable (a "sticky" CUDA error,
 * server/worker/cuda.c): the note in the status page says which; the
 * daemon answers MXOP_ECUDA and starts a replacement.
 */
#define MXOP__W_EXIT_CUDA 70

/*
 * The worker's data channel lost its framing (bad magic, a frame over the
 * maximum, a frame that never completed): the daemon then reports
 * MXOP_EPROTOCOL and starts a replacement.
 */
#define MXOP__W_EXIT_DATA_FRAMING 71

/*
 * A worker that is pid 1 of its pid namespace (server/daemon/worker/spawn.c)
 * exits with this plus N to say "signal N killed me": the kernel ignores
 * the signals pid 1 sends itself with the default action (abort(),
 * raise()), so server/worker/fault.c cannot die by them.  The daemon maps
 * the status back to the signal.
 */
#define MXOP__W_EXIT_SIGNAL 192

#endif /* MXOP_SHM_WORKER_EXIT_H */
