"""mxop.allocator: PyTorch's and NumPy's allocations in mxop shared memory,
op outputs in warm shared-heap blocks (against a real daemon)."""
import gc
import os
import subprocess
import textwrap

import numpy as np
import pytest
import torch

import mxop.allocator as al
import mxop.torch as mt

from conftest import PYTHON, SOURCE, BUILD, staged

BIG = 1 << 18  # f32 elements: 1 MiB, far above the 64 KiB minimum


@pytest.fixture(autouse=True)
def off_after():
    """Every test leaves the allocator off (it is process-wide)."""
    yield
    al.disable()
    gc.collect()


@pytest.fixture
def relu(ops):
    """mxop's relu as an autograd op (mxop.torch; it also registers torch.ops.mxop.relu)."""
    return mt.op("relu", ops)


def shared(t):
    """True when tensor or array t's data lies in a shared-heap block."""
    if isinstance(t, torch.Tensor):
        return al.contains(t.data_ptr(), t.nbytes)
    return al.contains(t.ctypes.data, t.nbytes)


def train(relu, steps=6):
    """A small MLP trained with SGD (mxop's relu between two linear layers):
    its losses and final parameters."""
    torch.manual_seed(1234)
    l1, l2 = torch.nn.Linear(256, 512), torch.nn.Linear(512, 10)
    params = list(l1.parameters()) + list(l2.parameters())
    opt = torch.optim.SGD(params, lr=0.05)
    x = torch.randn(64, 256)
    target = torch.randint(0, 10, (64,))
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        h = l1(x)
        y = l2(relu(h) if _ % 2 else torch.ops.mxop.relu(h))
        loss = torch.nn.functional.cross_entropy(y, target)
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
    return losses, [p.detach().clone() for p in params]


def test_training_loop_is_bit_identical_with_the_allocator_on(ops, relu):
    s0 = staged(ops)
    losses_off, params_off = train(relu)
    staged_off = staged(ops) - s0
    assert staged_off > 0  # ordinary tensors: staged
    al.enable()
    before = al.stats()
    s0 = staged(ops)
    losses_on, params_on = train(relu)
    after = al.stats()
    al.disable()
    # The loop's activations and gradients came from the shared heap, and no
    # call of the loop staged a byte.
    assert after["torch_allocs"] > before["torch_allocs"]
    assert after["outputs"] > before["outputs"]
    assert staged(ops) - s0 == 0
    assert len(losses_on) == len(losses_off)
    for a, b in zip(losses_on, losses_off):
        assert torch.equal(a, b), (a, b)
    for a, b in zip(params_on, params_off):
        assert torch.equal(a, b)


def test_tensors_from_before_during_and_after_work_and_free(ops, relu):
    x0 = torch.randn(BIG)  # before enabling: ordinary heap
    assert not shared(x0)
    al.enable()
    x1 = torch.randn(BIG)
    small = torch.randn(16)
    assert shared(x1) and not shared(small)
    y0, y1 = relu(x0), torch.ops.mxop.relu(x1)
    assert shared(y0) and shared(y1)  # outputs: shared-heap blocks
    grown = torch.randn(BIG)
    al.disable()
    x2 = torch.randn(BIG)
    assert not shared(x2)
    # A storage made while on grows through the allocator it was made with:
    # off, that one sends it to the ordinary heap too.
    grown.resize_(2 * BIG)
    assert not shared(grown)
    for x in (x0, x1, x2, small):
        assert torch.equal(relu(x), torch.relu(x))
        assert torch.equal(torch.ops.mxop.relu(x), torch.relu(x))
    assert torch.equal(y0, torch.relu(x0)) and torch.equal(y1, torch.relu(x1))
    live = al.stats()["blocks_live"]
    del x1, y0, y1
    gc.collect()
    assert al.stats()["blocks_live"] <= live - 3  # freed through their own deleters


def test_enable_twice_then_disable_once(ops, relu):
    al.enable()
    al.enable()
    assert al.enabled()
    st = al.stats()
    assert st["torch_enabled"] and st["numpy_enabled"]
    assert shared(torch.empty(BIG)) and shared(np.empty(BIG, np.float32))
    al.disable()
    assert not al.enabled()
    assert not shared(torch.empty(BIG)) and not shared(np.empty(BIG, np.float32))
    al.disable()  # off twice: a no-op too
    x = torch.randn(BIG)
    assert torch.equal(relu(x), torch.relu(x))


def test_calls_on_allocator_tensors_stage_nothing_and_reuse_warm_outputs(ops, relu):
    x = torch.randn(BIG)
    s0 = staged(ops)
    relu(x)
    assert staged(ops) - s0 >= x.nbytes  # the ordinary tensor was staged
    al.enable()
    x = torch.randn(BIG)
    s0 = staged(ops)
    warm0 = al.stats()["reused_warm"]
    for _ in range(4):
        y = relu(x)
        assert torch.equal(y, torch.relu(x))
        del y  # its block goes back, warm, for the next call's output
    assert staged(ops) - s0 == 0
    assert al.stats()["reused_warm"] >= warm0 + 3


def test_numpy_arrays_after_enable_are_shared_and_pass_by_reference(ops):
    relu = ops.op("relu")
    before = np.random.rand(BIG).astype(np.float32) - 0.5
    al.enable(torch=False)
    assert not al.stats()["torch_enabled"]
    a = np.random.rand(BIG).astype(np.float32) - 0.5
    assert shared(a) and not shared(before) and not shared(np.ones(8))
    s0 = staged(ops)
    y = relu(a)
    assert staged(ops) - s0 == 0
    assert np.array_equal(y, np.maximum(a, 0)) and shared(y)
    # calloc: a reused block comes back zeroed.
    junk = np.full(BIG, 7, np.float32)
    del junk
    z = np.zeros(BIG, np.float32)
    assert shared(z) and not z.any()
    # realloc keeps the data, growing and shrinking.
    r = np.arange(BIG, dtype=np.float32)
    r.resize(2 * BIG, refcheck=False)
    assert np.array_equal(r[:BIG], np.arange(BIG, dtype=np.float32))
    r.resize(BIG // 2, refcheck=False)
    assert np.array_equal(r, np.arange(BIG // 2, dtype=np.float32))
    assert np.array_equal(relu(before), np.maximum(before, 0))


def test_numpy_handler_is_per_context(ops):
    import threading

    al.enable(torch=False)
    seen = []
    t = threading.Thread(target=lambda: seen.append(shared(np.empty(BIG, np.float32))))
    t.start()
    t.join()
    assert shared(np.empty(BIG, np.float32)) and seen == [False]


def run_script(daemon, tmp_path, body, **env):
    script = os.path.join(str(tmp_path), "s.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(body))
    e = dict(os.environ, PYTHONPATH=os.path.join(SOURCE, "python"), MXOP_BUILD_DIR=BUILD,
             MXOP_SOCKET=daemon.socket, **env)
    p = subprocess.run([PYTHON, script], env=e, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_environment_variable_turns_it_on_at_import(daemon, tmp_path):
    out = run_script(daemon, tmp_path, """
        import mxop, torch, numpy as np
        import mxop.allocator as al
        x, a = torch.empty(1 << 18), np.empty(1 << 18)
        print(al.enabled(), al.contains(x.data_ptr(), x.nbytes), al.contains(a.ctypes.data, a.nbytes))
    """, MXOP_ALLOCATOR="1")
    assert out.split() == ["True", "True", "True"]


def test_forked_child_uses_old_and_new_tensors_copy_on_write(daemon, tmp_path):
    out = run_script(daemon, tmp_path, """
        import os, numpy as np, torch, mxop, mxop.torch as mt
        import mxop.allocator as al
        torch.set_num_threads(1)  # OpenMP's pool does not survive fork (a hang in the child)
        c = mxop.connect(os.environ["MXOP_SOCKET"])
        c.load("relu.so")
        relu = mt.op("relu", c)
        al.enable()
        x = torch.linspace(-1, 1, 1 << 18)
        y = relu(x)
        assert al.contains(x.data_ptr(), x.nbytes) and al.contains(y.data_ptr(), y.nbytes)
        keep = x.clone()
        pid = os.fork()
        if pid == 0:
            ok = torch.equal(relu(x), torch.relu(x)) and torch.equal(y, torch.relu(x))
            x.fill_(-5.0)  # the child's write: copy-on-write, never the parent's
            z = torch.randn(1 << 18)
            ok = ok and al.contains(z.data_ptr(), z.nbytes)
            ok = ok and torch.equal(torch.ops.mxop.relu(z), torch.relu(z))
            ok = ok and torch.equal(relu(x), torch.zeros_like(x))
            al.enable()  # on again in the child: a no-op
            a = np.full(1 << 16, -1.0, np.float32)
            ok = ok and al.enabled() and al.contains(a.ctypes.data, a.nbytes)
            c2 = mxop.connect(os.environ["MXOP_SOCKET"])  # the child's own session
            c2.load("relu.so")
            ok = ok and not c2.op("relu")(a).any()
            c2.close()
            del z, a
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), torch.equal(x, keep),
              torch.equal(relu(x), torch.relu(keep)))
    """)
    assert out.split() == ["0", "True", "True"]


def test_hostile_op_finds_no_secret_outside_what_its_session_was_given(ops):
    ops.load("hostile_scan.so")
    scan = ops.op("scan")
    secret = os.urandom(32)
    hexed = secret.hex()
    pattern = torch.frombuffer(bytearray(secret), dtype=torch.uint8)

    def plant(t):
        b = t.view(torch.uint8)
        for off in (0, 3 * 4096 + 8, b.numel() - 4096):
            b[off:off + 32] = pattern

    def count(x):
        return scan(x.numpy(), secret=hexed)[0]

    al.enable()
    probe = torch.zeros(BIG)
    # A torch tensor never passed to the session.
    hidden = torch.zeros(BIG)
    plant(hidden)
    assert shared(hidden)
    # A block the session saw, freed: the framework's next tensor of that
    # size must not be it.
    seen = torch.ones(BIG)
    assert count(seen) == 0
    del seen
    reused = torch.zeros(BIG)
    plant(reused)
    assert count(probe) == 0
    # The same scan finds the secret in a tensor the session was given.
    given = torch.zeros(BIG)
    plant(given)
    assert count(given) >= 3
    del hidden, reused
