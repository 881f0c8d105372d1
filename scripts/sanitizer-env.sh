# Sourced (with B set to the build tree) by the scripts that run Python or
# link clients against a build: a SANITIZE= build's libmxop needs the
# sanitizers' runtimes loaded first into an interpreter that is not built
# with them, and clients linked against its static libraries need the same
# -fsanitize flags.  Sets SAN_RT (the runtimes' paths, or empty) and
# SANFLAGS (the flags, or empty); with runtimes, exports ASAN_OPTIONS with
# leak detection off (Python's own allocations at exit are not ours to
# report) and the interpreter's signals left to it.  LD_PRELOAD is the
# caller's to set, for the commands that need it.
SAN_RT=$(ldd "$B/lib/libmxop.so" 2>/dev/null |
    sed -n 's/^[[:space:]]*\(lib[a-z]*san\.so[.0-9]*\) => \([^ ]*\).*/\2/p' | tr '\n' ' ')
SANFLAGS=
if [ -n "$SAN_RT" ]; then
    SANFLAGS="-fsanitize=$(basename "$B" | sed 's/^sanitize-//; s/-/,/g')"
    export ASAN_OPTIONS="detect_leaks=0:handle_segv=0:handle_sigbus=0:handle_abort=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
fi
