"""Starting and stopping an mxop-serverd: the embedded default and test fixtures.

A Daemon lives in a private temporary directory (mode 0700) holding its
control socket and, unless one is given, a plugin directory populated with
copies of the build tree's plugins (copies, not links: the daemon refuses
a library whose real path leaves its plugin directory).

Nothing outlives the Python process: the daemon is started with
PR_SET_PDEATHSIG (SIGTERM), so it ends when its parent dies however that
happens, and atexit stops it cleanly before that.  The daemon ends its
workers itself.  PR_SET_PDEATHSIG fires when the *thread* that forked the
child exits, so a daemon asked for from any thread but the main one is
forked by a helper thread that lives as long as the process.  A small
cleaner process (see _start_cleaner) removes the private directory when the
owner dies without running atexit (os._exit, SIGTERM, SIGKILL).

The C programs (tests, benchmarks, the `mxop` command) start theirs with
common/daemon_launch.c, in the same layout and with the same command line
and death signal.  Python keeps its own: its child must be a Popen that
Python reaps (a waitpid in C would take its status from subprocess), forked
from the spawner thread, with its stderr forwarded to logging; and the
launcher's names are internal to libmxop, not exported by libmxop.so.

The embedded daemon is one per process tree: its socket is exported as
$MXOP_EMBEDDED_SOCKET, so that spawned children (multiprocessing 'spawn',
DataLoader workers) use it instead of starting their own, and a forked
child keeps using its parent's.
"""

import atexit
import ctypes
import glob
import logging
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref

from . import _lib
from .errors import LibraryNotFound, Timeout, InternalError

_PR_SET_PDEATHSIG = 1


def find_serverd():
    """$MXOP_SERVERD, else bin/mxop-serverd beside the package (a wheel carries
    it there) or in the build tree (_lib.build_dir), else mxop-serverd on PATH."""
    env = os.environ.get("MXOP_SERVERD")
    if env:
        return env
    p = os.path.join(_lib.build_dir(), "bin", "mxop-serverd")
    if os.path.exists(p):
        return p
    p = shutil.which("mxop-serverd")
    if p:
        return p
    raise LibraryNotFound(
        "mxop-serverd not found: set MXOP_SERVERD or MXOP_SOCKET, or build the tree (make)"
    )


def default_plugin_sources(serverd=None):
    """The directories whose *.so the embedded daemon's plugin directory gets:
    plugins/ beside the package (a wheel's example op libraries) or the build
    tree's, else an installed PREFIX/lib/mxop/plugins next to
    PREFIX/bin/mxop-serverd (make install's layout)."""
    d = os.path.join(_lib.build_dir(), "plugins")
    if os.path.isdir(d) or serverd is None:
        return [d]
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(serverd)))
    return [os.path.join(prefix, "lib", "mxop", "plugins")]


def _die_with_parent(parent):
    # Runs in the child between fork and exec: async-signal-safe work only.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


class _Spawner:
    """A thread that lives as long as the process and forks children for others."""

    def __init__(self):
        self._q = queue.Queue()
        t = threading.Thread(target=self._run, name="mxop-spawner", daemon=True)
        t.start()

    def _run(self):
        while True:
            fn, box, done = self._q.get()
            try:
                box.append((True, fn()))
            except BaseException as e:  # handed back to the caller
                box.append((False, e))
            done.set()

    def call(self, fn):
        box, done = [], threading.Event()
        self._q.put((fn, box, done))
        done.wait()
        ok, v = box[0]
        if not ok:
            raise v
        return v


_spawner = None
_spawner_lock = threading.Lock()


def _popen(argv, **kw):
    global _spawner
    parent = os.getpid()
    kw["preexec_fn"] = lambda: _die_with_parent(parent)
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(argv, **kw)
    with _spawner_lock:
        if _spawner is None:
            _spawner = _Spawner()
    return _spawner.call(lambda: subprocess.Popen(argv, **kw))


def _private_dir():
    d = tempfile.mkdtemp(prefix="mxop-")
    # A Unix socket path has at most 107 bytes; a long $TMPDIR would not do.
    if len(d) > 80:
        os.rmdir(d)
        d = tempfile.mkdtemp(prefix="mxop-", dir="/tmp")
    return d


class Daemon:
    """One mxop-serverd in a private directory.

    plugin_dir: the daemon's --plugin-dir; None makes one in the private
    directory with copies of every *.so of `plugin_sources` (default: the
    build tree's plugins/).  extra_args go on the command line as given.
    """

    def __init__(self, plugin_dir=None, plugin_sources=None, serverd=None, log_level=None,
                 extra_args=(), stderr=None, start_timeout=10.0):
        self.serverd = serverd or find_serverd()
        self._owner = os.getpid()
        self.dir = _private_dir()
        self.socket = os.path.join(self.dir, "mxop.sock")
        self.proc = None
        self._watcher = None
        try:
            if plugin_dir is None:
                plugin_dir = os.path.join(self.dir, "plugins")
                os.mkdir(plugin_dir, 0o700)
                srcs = default_plugin_sources(self.serverd) if plugin_sources is None \
                    else plugin_sources
                for src in srcs:
                    for f in sorted(glob.glob(os.path.join(src, "*.so"))):
                        shutil.copy(f, os.path.join(plugin_dir, os.path.basename(f)))
            self.plugin_dir = plugin_dir
            level = log_level or os.environ.get("MXOP_LOG_LEVEL", "warn")
            argv = [self.serverd, "--socket", self.socket, "--plugin-dir", plugin_dir,
                    "--log-level", level]
            if os.environ.get("MXOP_WORKER"):
                argv += ["--worker", os.environ["MXOP_WORKER"]]
            argv += list(extra_args)
            self.argv = argv
            self.proc = _popen(argv, stdin=subprocess.DEVNULL, stderr=stderr, close_fds=True)
            _daemons.add(self)
            self._watcher = _start_cleaner(self._owner, self.proc.pid, self.dir)
            self._wait_socket(start_timeout)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self):
        return self.proc.pid if self.proc is not None else None

    def alive(self):
        if self.proc is None:
            return False
        if os.getpid() != self._owner:
            # A forked child's copy: the daemon is not our child (waitpid
            # would say it ended); it lives while its pid and socket do.
            try:
                os.kill(self.proc.pid, 0)
            except OSError:
                return False
            return os.path.exists(self.socket)
        return self.proc.poll() is None

    def _wait_socket(self, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if os.path.exists(self.socket):
                return
            rc = self.proc.poll()
            if rc is not None:
                raise InternalError("mxop-serverd (%s) exited at start with status %d"
                                    % (self.serverd, rc))
            time.sleep(0.005)
        raise Timeout("mxop-serverd did not create %s within %.0f s"
                      % (self.socket, timeout))

    def stop(self, timeout=10.0):
        """SIGTERM, wait (SIGKILL after `timeout`), remove the directory.

        Returns the daemon's exit status (None if it was not running)."""
        rc = None
        if os.getpid() != self._owner:
            # A forked child's copy: the daemon is its parent's to stop.
            self.proc = None
            self.dir = None
            return None
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    self.proc.send_signal(signal.SIGTERM)
                    rc = self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                    rc = None
            else:
                rc = self.proc.returncode
            self.proc = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        w, self._watcher = self._watcher, None
        if w is not None and w.poll() is None:
            # The cleaner leads its own process group: end its tail too.
            try:
                os.killpg(w.pid, signal.SIGKILL)
            except OSError:
                w.kill()
            w.wait()
        return rc

    def kill(self, sig=signal.SIGKILL):
        """Sends `sig` and reaps the daemon (no clean exit expected)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def __del__(self):
        try:
            self.stop()
        except Exception:
            pass

    def __repr__(self):
        return "<mxop.Daemon pid=%s socket=%r>" % (self.pid, self.socket)


# The cleaner: a tiny shell process per daemon, in its own session (so
# that a terminal's Ctrl-C does not reach it), that waits for the owner
# process to end however it ends (os._exit, SIGTERM, SIGKILL), then for the
# daemon (which PR_SET_PDEATHSIG ends with it), then removes the private
# directory.  A normal stop removes the directory itself and ends the cleaner.
_CLEANER = ('tail -s 0.2 --pid="$1" -f /dev/null 2>/dev/null; i=0; '
            'while kill -0 "$2" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; '
            'rm -rf -- "$3"')


def _start_cleaner(owner, pid, d):
    try:
        return subprocess.Popen(["/bin/sh", "-c", _CLEANER, "mxop-cleaner", str(owner),
                                 str(pid), d], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                close_fds=True, start_new_session=True)
    except OSError:  # no shell: the directory is still removed by a normal stop
        return None


class _Inherited:
    """The embedded daemon of an ancestor process (one daemon per process
    tree): found through $MXOP_EMBEDDED_SOCKET, which the ancestor sets; not
    ours to stop."""

    def __init__(self, socket):
        self.socket = socket
        self.dir = os.path.dirname(socket)
        self.pid = None

    def alive(self):
        return os.path.exists(self.socket)

    def stop(self, timeout=None):
        return None

    def __repr__(self):
        return "<mxop.Daemon (inherited) socket=%r>" % (self.socket,)


_ENV = "MXOP_EMBEDDED_SOCKET"

# The embedded daemon's log goes to the "mxop.daemon" logger, not to the
# user's stderr: what a call's failure logs there is already the message of
# the exception the call raises, so printing it too would say it twice.
# The package's logger has a NullHandler (a library's convention): the log
# shows once logging is configured (logging.basicConfig()).
log = logging.getLogger("mxop.daemon")
logging.getLogger("mxop").addHandler(logging.NullHandler())
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
           "error": logging.ERROR}


def _forward_log(d):
    f = d.proc.stderr

    def run():
        try:
            for line in iter(f.readline, b""):
                text = line.decode(errors="replace").rstrip("\n")
                parts = text.split(" ", 2)
                level = _LEVELS.get(parts[1], logging.WARNING) if len(parts) > 1 \
                    else logging.WARNING
                log.log(level, "%s", text)
        except Exception:  # interpreter shutdown, closed pipe: nothing to forward
            pass
        finally:
            try:
                f.close()
            except Exception:
                pass

    threading.Thread(target=run, name="mxop-daemon-log", daemon=True).start()

# Every Daemon started here, so that atexit can stop those left running.
_daemons = weakref.WeakSet()

# The embedded default: one private daemon per plugin directory per process.
_embedded = {}
_embedded_lock = threading.Lock()


def embedded(plugin_dir=None):
    """The process's private daemon for `plugin_dir` ($MXOP_PLUGIN_DIR, else copies
    of the build tree's plugins), started on first use and ended at exit."""
    if plugin_dir is None:
        plugin_dir = os.environ.get("MXOP_PLUGIN_DIR") or None
    key = os.path.realpath(plugin_dir) if plugin_dir else None
    with _embedded_lock:
        d = _embedded.get(key)
        if d is not None and d.alive():
            return d
        inherited = os.environ.get(_ENV)
        if key is None and inherited and os.path.exists(inherited):
            # A process this one descends from (spawn, or fork before
            # its first connect) has one: the whole tree shares it.
            d = _Inherited(inherited)
        else:
            d = Daemon(plugin_dir=plugin_dir, stderr=subprocess.PIPE)
            _forward_log(d)
            if key is None:
                os.environ[_ENV] = d.socket
        _embedded[key] = d
        return d


def stop_embedded():
    """Stops the embedded daemons, and any other Daemon of this process still running."""
    with _embedded_lock:
        ds = list(_embedded.values())
        _embedded.clear()
        for d in ds:
            if isinstance(d, Daemon) and os.environ.get(_ENV) == d.socket \
                    and os.getpid() == d._owner:
                del os.environ[_ENV]
    for d in ds + list(_daemons):
        try:
            d.stop()
        except Exception:
            pass


# Clients are closed first (mxop/__init__ registers its handler after this
# one, and atexit runs handlers last-in first-out), then the daemons stop.
atexit.register(stop_embedded)
