"""Connecting: explicit path, $MXOP_SOCKET, and the embedded private daemon."""
import os
import re
import signal
import subprocess
import textwrap
import threading
import time

import numpy as np
import pytest

import mxop

from conftest import PYTHON, SOURCE, BUILD


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MXOP_SOCKET", "MXOP_PLUGIN_DIR", "MXOP_EMBEDDED_SOCKET")}
    env["PYTHONPATH"] = os.path.join(SOURCE, "python")
    env["MXOP_BUILD_DIR"] = BUILD
    env.update(extra)
    return env


def gone(pid, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True  # a zombie: dead, waiting for its reaper
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


EMBEDDED = textwrap.dedent("""
    import os, sys, numpy as np, mxop
    c = mxop.connect()
    y = c.load("relu.so").relu(np.array([-1.0, 2.0]))
    w = c.stats().worker_pid
    print("DAEMON", c.daemon.pid, c.daemon.dir, w, y.tolist(), flush=True)
    if len(sys.argv) > 1:
        import time; time.sleep(60)
""")


def test_embedded_default_needs_no_setup_and_ends_with_the_process():
    p = subprocess.run([PYTHON, "-c", EMBEDDED], env=clean_env(), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    _, pid, d, worker, y = p.stdout.split(" ", 4)
    assert y.strip() == "[0.0, 2.0]"
    assert gone(int(pid)) and gone(int(worker)), "the private daemon outlived its process"
    assert not os.path.exists(d), "the private directory was left behind"


def test_embedded_daemon_dies_with_a_killed_process():
    p = subprocess.Popen([PYTHON, "-c", EMBEDDED, "sleep"], env=clean_env(),
                         stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        _, pid, d, worker, _ = line.split(" ", 4)
        p.send_signal(signal.SIGKILL)  # no atexit: only PR_SET_PDEATHSIG can act
        p.wait(10)
        assert gone(int(pid)) and gone(int(worker)), "the daemon outlived a killed parent"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
    subprocess.run(["rm", "-rf", d])


def test_mxop_socket_is_honoured(daemon, monkeypatch):
    monkeypatch.setenv("MXOP_SOCKET", daemon.socket)
    c = mxop.connect()
    assert c.path == daemon.socket and c.daemon is None
    c.close()


def test_explicit_path_and_daemon_object(daemon):
    with mxop.connect(daemon.socket, timeout=5, name="explicit") as c:
        assert c.stats().daemon_sessions >= 1
    with mxop.connect(daemon) as c:
        assert c.path == daemon.socket


def test_plugin_dir_is_honoured(tmp_path):
    import shutil

    shutil.copy(os.path.join(BUILD, "plugins", "relu.so"), tmp_path / "relu.so")
    d = mxop.Daemon(plugin_dir=str(tmp_path))
    try:
        with mxop.connect(d) as c:
            c.load("relu.so")
            with pytest.raises(mxop.LibraryNotFound):
                c.load("gemm.so")
    finally:
        assert d.stop() == 0


def test_plugin_dir_with_a_running_daemon_is_an_error(daemon, tmp_path, monkeypatch):
    """plugin_dir means the private daemon's: beside a socket it would be ignored."""
    monkeypatch.setenv("MXOP_SOCKET", daemon.socket)
    with pytest.raises(mxop.InvalidArgument) as ei:
        mxop.connect(plugin_dir=str(tmp_path))
    msg = str(ei.value)
    assert "plugin_dir=%r" % str(tmp_path) in msg and "$MXOP_SOCKET=%r" % daemon.socket in msg
    assert "unset MXOP_SOCKET" in msg
    monkeypatch.delenv("MXOP_SOCKET")
    for path in (daemon, daemon.socket):
        with pytest.raises(mxop.InvalidArgument) as ei:
            mxop.connect(path, plugin_dir=str(tmp_path))
        assert "path=%r" % daemon.socket in str(ei.value)
    # Without plugin_dir the socket is used as before.
    monkeypatch.setenv("MXOP_SOCKET", daemon.socket)
    with mxop.connect(timeout=5) as c:
        assert c.path == daemon.socket


def test_daemon_started_from_a_thread_outlives_the_thread(tmp_path):
    box = []
    t = threading.Thread(target=lambda: box.append(mxop.Daemon()))
    t.start()
    t.join()
    d = box[0]
    try:
        time.sleep(0.3)
        assert d.alive(), "the daemon died with the thread that asked for it"
        with mxop.connect(d) as c:
            np.testing.assert_array_equal(c.load("relu.so").relu(np.array([-1.0])), [0])
    finally:
        assert d.stop() == 0


def test_readme_quick_start_runs():
    text = open(os.path.join(SOURCE, "python", "README.md")).read()
    code = re.search(r"## Quick start\s+```python\n(.*?)```", text, re.S).group(1)
    assert len(code.strip().splitlines()) == 5
    p = subprocess.run([PYTHON, "-c", code], env=clean_env(), capture_output=True, text=True,
                       timeout=90)
    assert p.returncode == 0, p.stderr
    assert "tensor(" in p.stdout


def test_exit_with_arrays_and_tensors_alive_is_clean():
    code = textwrap.dedent("""
        import numpy as np, torch, mxop, mxop.torch as mt
        c = mxop.connect()
        relu = c.load("relu.so").relu
        KEEP = [relu(np.ones(8)), mt.op("relu", c)(torch.ones(4, requires_grad=True))]
        t = torch.ones(16); t.share_memory_(); KEEP.append(mt.op("relu", c)(t))
        st = c.load("running_mean.so").running_mean_norm.create_state(np.zeros((2, 2)))
        print(c.daemon.pid, flush=True)
    """)
    p = subprocess.run([PYTHON, "-c", code], env=clean_env(), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert "Exception ignored" not in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert gone(int(p.stdout.split()[0]))


def _serverd(sock):
    argv = [os.path.join(BUILD, "bin", "mxop-serverd"), "--socket", sock, "--plugin-dir",
            os.path.join(BUILD, "plugins"), "--log-level", "error"]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    end = time.monotonic() + 20
    while not os.path.exists(sock) and time.monotonic() < end and p.poll() is None:
        time.sleep(0.02)
    assert os.path.exists(sock), "mxop-serverd did not start"
    return p


def test_a_client_reconnects_to_a_restarted_daemon_with_its_arrays():
    """libmxop reconnects by itself: the op and the arena arrays (their regions) carry over."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="mxop-reconnect-") as d:
        sock = os.path.join(d, "mxop.sock")
        p = _serverd(sock)
        c = None
        try:
            c = mxop.connect(sock, timeout=20)
            relu = c.load("relu.so").relu
            x = c.empty((64,))
            x[:] = np.linspace(-1.0, 1.0, 64, dtype=np.float32)
            want = np.maximum(x, 0)
            assert np.array_equal(relu(x), want)
            worker = c.stats().worker_pid
            p.kill()
            p.wait()
            p = _serverd(sock)
            assert np.array_equal(relu(x), want)
            assert c.stats().worker_pid != worker
        finally:
            if c is not None:
                c.close()
            p.terminate()
            p.wait(timeout=20)
