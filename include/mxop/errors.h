/*
 * mxop/errors.h - the one table of mxop error codes.
 *
 * Every mxop function that can fail returns 0 or one of the negative codes
 * below.  The table is an X-macro so that the enum, the names
 * (mxop_err_name) and the messages (mxop_strerror) can never drift apart.
 * Codes are stable numbers: they travel on the wire and across the plugin
 * ABI, so a code is never renumbered or reused; new codes go at the end.
 *
 * This header includes nothing and compiles on its own.
 */
#ifndef MXOP_ERRORS_H
#define MXOP_ERRORS_H

/* XX(NAME, number, message) */
#define MXOP_ERROR_MAP(XX)                                                                         \
    XX(INVAL, -1001, "invalid argument")                                                           \
    XX(NOMEM, -1002, "out of memory")                                                              \
    XX(IO, -1003, "I/O error")                                                                     \
    XX(PROTOCOL, -1004, "malformed or unexpected protocol frame")                                  \
    XX(VERSION, -1005, "protocol version not supported")                                           \
    XX(FRAME_TOO_LARGE, -1006, "frame exceeds the maximum frame size")                             \
    XX(DISCONNECTED, -1007, "connection to the daemon or worker lost")                             \
    XX(DENIED, -1008, "permission denied")                                                         \
    XX(LIB_NOT_FOUND, -1009, "library not found")                                                  \
    XX(LIB_OUTSIDE, -1010, "library path is outside the plugin directory")                         \
    XX(ABI, -1011, "plugin ABI version mismatch")                                                  \
    XX(LIB_INVALID, -1012, "library cannot be loaded")                                             \
    XX(LIB_INIT, -1013, "library initialisation failed")                                           \
    XX(UNKNOWN_OP, -1014, "unknown op")                                                            \
    XX(ARITY, -1015, "wrong number of inputs or outputs")                                          \
    XX(SHAPE, -1016, "shape mismatch")                                                             \
    XX(DTYPE, -1017, "dtype mismatch")                                                             \
    XX(ATTR, -1018, "invalid attribute")                                                           \
    XX(BOUNDS, -1019, "tensor descriptor outside its region")                                      \
    XX(UNKNOWN_REGION, -1020, "unknown region")                                                    \
    XX(UNKNOWN_STATE, -1021, "unknown op state")                                                   \
    XX(STATE_LOST, -1022, "op state lost with a crashed worker")                                   \
    XX(NOT_SUPPORTED, -1023, "operation not supported by this op")                                 \
    XX(OP_FAILED, -1024, "op reported an error")                                                   \
    XX(WORKER_CRASHED, -1025, "worker crashed")                                                    \
    XX(TIMEOUT, -1026, "deadline exceeded")                                                        \
    XX(NO_DEVICE, -1027, "no GPU device available")                                                \
    XX(SHM, -1028, "shared memory allocation failed")                                              \
    XX(LIMIT, -1029, "a configured limit was reached")                                             \
    XX(INTERNAL, -1030, "internal error")                                                          \
    XX(INPUT_WRITTEN, -1031, "op wrote into a read-only input tensor")                             \
    XX(WORKER_OOM, -1032, "worker ran out of memory")                                              \
    XX(QUARANTINED, -1033, "library quarantined after repeated crashes")                           \
    XX(DUPLICATE, -1034, "name already registered")                                                \
    XX(CUDA, -1035, "CUDA error")                                                                  \
    XX(READ_ONLY, -1040, "memory is read-only to this call")

/** Error codes.  0 is success; every failure is negative. */
enum mxop_error {
    MXOP_OK = 0,
#define MXOP__ERR_ENUM(name, num, msg) MXOP_E##name = (num),
    MXOP_ERROR_MAP(MXOP__ERR_ENUM)
#undef MXOP__ERR_ENUM
};

#endif /* MXOP_ERRORS_H */
