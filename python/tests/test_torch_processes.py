"""Processes: fork and spawn DataLoaders, pickling (deepcopy, torch.save),
one embedded daemon per process tree, no directory left behind."""
import copy
import glob
import io
import os
import signal
import subprocess
import tempfile
import textwrap
import time

import pytest
import torch

import mxop
import mxop.torch as mt

from conftest import PYTHON, SOURCE, BUILD


def clean_env(tmp, **extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MXOP_SOCKET", "MXOP_PLUGIN_DIR", "MXOP_EMBEDDED_SOCKET")}
    env["PYTHONPATH"] = os.path.join(SOURCE, "python")
    env["MXOP_BUILD_DIR"] = BUILD
    env["TMPDIR"] = tmp
    env.update(extra)
    return env


def leftovers(tmp, timeout=15.0):
    """The mxop-* directories in `tmp`, waiting up to `timeout` for them to go."""
    end = time.monotonic() + timeout
    while True:
        left = glob.glob(os.path.join(tmp, "mxop-*"))
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.1)


LOADER = textwrap.dedent("""
    import glob, os, sys, torch, mxop, mxop.torch as mt
    from torch.utils.data import Dataset, DataLoader

    class DS(Dataset):
        def __init__(self, relu, gemm):
            self.relu, self.gemm = relu, gemm
        def __len__(self):
            return 8
        def __getitem__(self, i):
            x = torch.arange(4, dtype=torch.float32) - i
            return self.relu(x), self.gemm(x.view(2, 2), x.view(2, 2)), x, os.getpid()

    if __name__ == "__main__":
        ctx = sys.argv[1]
        relu = mt.load(None, "relu.so").relu
        gemm = mt.load(None, "gemm.so").gemm
        relu(torch.ones(2))  # the parent's session exists before the workers
        n, pids = 0, set()
        for epoch in range(2):
            dl = DataLoader(DS(relu, gemm), batch_size=2, num_workers=2,
                            multiprocessing_context=ctx)
            for y, g, x, pid in dl:
                assert torch.equal(y, torch.relu(x)), (y, x)
                assert torch.allclose(g, x.view(-1, 2, 2) @ x.view(-1, 2, 2)), (g, x)
                n += len(x)
                pids.update(pid.tolist())
        dirs = glob.glob(os.path.join(os.environ["TMPDIR"], "mxop-*"))
        print("OK", n, len(pids - {os.getpid()}), len(dirs), flush=True)
""")


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_dataloader_workers_two_epochs(ctx, tmp_path):
    tmp = str(tmp_path)
    script = os.path.join(tmp, "loader.py")
    with open(script, "w") as f:
        f.write(LOADER)
    p = subprocess.run([PYTHON, script, ctx], env=clean_env(tmp), capture_output=True,
                       text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    ok, n, workers, dirs = p.stdout.split()[-4:]
    assert ok == "OK" and int(n) == 16 and int(workers) >= 2
    assert int(dirs) == 1, "one embedded daemon per process tree, not one per worker"
    assert leftovers(tmp) == []


def test_forked_numpy_client_names_the_fork(ops):
    relu = ops.op("relu")
    import numpy as np
    relu(np.ones(2, dtype=np.float32))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running anything else
        try:
            relu(np.ones(2, dtype=np.float32))
            msg = b"no error"
        except mxop.Disconnected as e:
            msg = str(e).encode()
        except BaseException as e:  # noqa: B902 - reported to the parent
            msg = repr(e).encode()
        os.write(w, msg[:4000])
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        msg = f.read().decode()
    os.waitpid(pid, 0)
    assert "os.fork()" in msg and "mxop.connect()" in msg, msg


def test_forked_torch_op_reconnects_to_the_same_daemon(ops):
    relu = mt.op("relu", ops)
    relu(torch.ones(2))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            y = relu(torch.tensor([-1.0, 5.0]))
            msg = "%s %s" % (y.tolist(), relu.op.client.path)
        except BaseException as e:  # noqa: B902 - reported to the parent
            msg = repr(e)
        os.write(w, msg.encode()[:4000])
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        msg = f.read().decode()
    os.waitpid(pid, 0)
    assert msg == "[0.0, 5.0] %s" % ops.path
    torch.testing.assert_close(relu(torch.tensor([-2.0])), torch.tensor([0.0]))


class Net(torch.nn.Module):
    def __init__(self, gemm, relu):
        super().__init__()
        self.fc = mt.Linear(4, 3, gemm)
        self.act = mt.OpModule(relu)

    def forward(self, x):
        return self.act(self.fc(x))


def test_deepcopy_and_torch_save_of_a_model(ops):
    gemm, relu = mt.op("gemm", ops), mt.op("relu", ops)
    m = Net(gemm, relu)
    x = torch.randn(5, 4)
    ref = m(x)
    m2 = copy.deepcopy(m)
    torch.testing.assert_close(m2(x), ref)
    assert m2.fc.weight is not m.fc.weight
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    m3 = torch.load(buf, weights_only=False)
    torch.testing.assert_close(m3(x), ref)
    assert m3.fc.gemm.op.client.path == ops.path
    # Attributes travel with the op.
    assert m3.fc.gemm.attrs == {"transpose_b": True}
    st = mt.op("running_mean_norm", ops).create_state(torch.zeros(2, 2))
    with pytest.raises(mxop.NotSupported, match="cannot be pickled"):
        copy.deepcopy(st)
    st.close()


SPAWN_CONNECT = textwrap.dedent("""
    import multiprocessing as mp, os, sys, mxop

    def child(q):
        q.put(mxop.connect().path)

    if __name__ == "__main__":
        c = mxop.connect()
        q = mp.get_context("spawn").Queue()
        p = mp.get_context("spawn").Process(target=child, args=(q,))
        p.start()
        print(c.path == q.get(timeout=120), flush=True)
        p.join()
""")


def test_spawned_child_shares_the_embedded_daemon(tmp_path):
    tmp = str(tmp_path)
    script = os.path.join(tmp, "spawn.py")
    with open(script, "w") as f:
        f.write(SPAWN_CONNECT)
    p = subprocess.run([PYTHON, script], env=clean_env(tmp), capture_output=True, text=True,
                       timeout=180)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[-1] == "True"
    assert leftovers(tmp) == []


DIES = textwrap.dedent("""
    import os, signal, sys, torch, mxop.torch as mt
    relu = mt.load(None, "relu.so").relu
    print(relu(torch.tensor([-1.0, 2.0])).tolist(), flush=True)
    how = sys.argv[1]
    if how == "exit":
        os._exit(0)
    os.kill(os.getpid(), getattr(signal, how))
""")


@pytest.mark.parametrize("how", ["exit", "SIGTERM", "SIGKILL"])
def test_no_directory_left_when_the_owner_dies(how, tmp_path):
    tmp = str(tmp_path)
    p = subprocess.run([PYTHON, "-c", DIES, how], env=clean_env(tmp), capture_output=True,
                       text=True, timeout=120)
    assert p.stdout.strip() == "[0.0, 2.0]", p.stderr
    assert p.returncode in (0, -signal.SIGTERM, -signal.SIGKILL)
    assert leftovers(tmp) == []


WARNS = textwrap.dedent("""
    import logging, sys, time, torch, mxop, mxop.torch as mt
    if sys.argv[1] == "logging":
        logging.basicConfig(stream=sys.stdout, format="LOG %(name)s %(message)s")
    c = mxop.connect()
    c.load("crash.so")
    try:
        mt.op("segv", c)(torch.ones(4))
    except RuntimeError as e:
        print("CAUGHT", e, flush=True)
    c.close()
    time.sleep(0.5)  # the log line reaches the logger from a thread
""")


@pytest.mark.parametrize("mode", ["plain", "logging"])
def test_daemon_warnings_reach_the_user_once(mode, tmp_path):
    tmp = str(tmp_path)
    plugins = os.path.join(BUILD, "tests", "plugins")
    p = subprocess.run([PYTHON, "-c", WARNS, mode], env=clean_env(tmp, MXOP_PLUGIN_DIR=plugins),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "CAUGHT MXOP_EWORKER_CRASHED" in p.stdout
    assert "killed by signal 11" not in p.stderr, "the daemon's warning was printed to stderr"
    logged = [ln for ln in p.stdout.splitlines() if ln.startswith("LOG mxop.daemon")]
    if mode == "logging":
        assert len([ln for ln in logged if "signal 11" in ln]) == 1, p.stdout
    else:
        assert logged == []
    assert leftovers(tmp) == []


CTRL_C = textwrap.dedent("""
    import signal
    # Ctrl-C as in a terminal, even where the runner's shell ignores SIGINT (a
    # background job's does, and its children inherit that); before mxop
    # looks at the handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import os, sys, threading, time, torch, mxop, mxop.torch as mt
    c = mxop.connect(timeout=120)
    c.load("crash.so")
    op = mt.op(sys.argv[1], c)
    ident = mt.op("identity", c)
    ident(torch.ones(4))
    sent = []
    def interrupt():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)
    threading.Timer(1.0, interrupt).start()
    try:
        op(torch.ones(4), ms=60000)
        print("NO-INTERRUPT", flush=True)
    except KeyboardInterrupt:
        print("INTERRUPTED %.3f" % (time.monotonic() - sent[0]), flush=True)
    # The session works afterwards.
    print("AFTER", ident(torch.tensor([1.0, 2.0, 3.0, 4.0])).tolist(), flush=True)
""")


@pytest.mark.parametrize("opname", ["sleep", "hang"])
def test_ctrl_c_abandons_a_slow_call(opname, tmp_path):
    tmp = str(tmp_path)
    plugins = os.path.join(BUILD, "tests", "plugins")
    p = subprocess.run([PYTHON, "-c", CTRL_C, opname],
                       env=clean_env(tmp, MXOP_PLUGIN_DIR=plugins), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = dict(ln.split(" ", 1) for ln in p.stdout.splitlines())
    assert "INTERRUPTED" in lines, p.stdout
    # The op would take 60 s; the bound is generous for a loaded machine
    # (measured about 0.002 s when idle).
    assert float(lines["INTERRUPTED"]) < 5.0
    assert lines["AFTER"] == "[1.0, 2.0, 3.0, 4.0]"
