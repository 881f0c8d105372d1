"""mxop.jax: ops under jax.jit, vmap and grad through the XLA FFI handler
(_jaxffi.c), crashes and bad inputs, and one op library from C, NumPy,
PyTorch and JAX.  Runs in the JAX environment (make check-jax); skipped
where jax is not importable."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import mxop  # noqa: E402
import mxop.jax as mj  # noqa: E402
from conftest import BUILD, SOURCE  # noqa: E402

X = np.array([-1.5, 2.0, -3.0, 4.0, 0.5, -0.25, 7.0, -8.0], np.float32)


@pytest.fixture
def J(client):
    for lib in ("relu.so", "gemm.so", "crash.so", "running_mean.so", "masked_select.so",
                "softmax.so"):
        client.load(lib)

    def wrap(name, **kw):
        return mj.wrap(client.op(name), **kw)

    wrap.client = client
    return wrap


def test_jit_runs_the_op_through_ffi(J):
    relu = J("relu")
    f = jax.jit(relu)
    np.testing.assert_array_equal(f(jnp.asarray(X)), np.maximum(X, 0))
    # The compiled program holds an XLA custom call to mxop's handler.
    hlo = f.lower(jnp.asarray(X)).as_text()
    assert "mxop_call" in hlo and "pure_callback" not in hlo


def test_jit_with_attributes_and_inference(J):
    gemm = J("gemm")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.arange(20, dtype=np.float32).reshape(5, 4)
    y = jax.jit(lambda a, b: gemm(a, b, transpose_b=True, alpha=2.0))(a, b)
    assert y.shape == (3, 5) and y.dtype == jnp.float32
    np.testing.assert_allclose(y, 2.0 * a @ b.T, rtol=1e-5)
    # Abstract evaluation: the shape comes from the op's inference, without running it.
    out = jax.eval_shape(lambda a, b: gemm(a, b, transpose_b=True), a, b)
    assert out.shape == (3, 5)


def test_vmap_sequential(J):
    relu, gemm = J("relu"), J("gemm")
    xs = np.stack([X, -X, 2 * X])
    np.testing.assert_array_equal(jax.jit(jax.vmap(relu))(xs), np.maximum(xs, 0))
    a = np.random.default_rng(0).standard_normal((4, 2, 3)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    y = jax.vmap(lambda a: gemm(a, b))(a)
    np.testing.assert_allclose(y, a @ b, rtol=1e-5, atol=1e-5)
    assert relu.vmap_method == "sequential"


def test_vmap_method_is_checked(client):
    client.load("relu.so")
    with pytest.raises(mxop.InvalidArgument, match="relu.*vmap_method"):
        mj.wrap(client.op("relu"), vmap_method="magic")
    r = mj.wrap(client.op("relu"), vmap_method="broadcast_all")  # elementwise: one call
    xs = np.stack([X, -X])
    np.testing.assert_array_equal(jax.vmap(r)(xs), np.maximum(xs, 0))


def test_grad_from_the_ops_backward(J):
    relu, gemm = J("relu"), J("gemm")
    g = jax.jit(jax.grad(lambda x: (relu(x) * jnp.arange(8.0)).sum()))(jnp.asarray(X))
    np.testing.assert_array_equal(g, np.where(X > 0, np.arange(8.0), 0))
    a = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    b = np.random.default_rng(3).standard_normal((4, 2)).astype(np.float32)
    da, db = jax.grad(lambda a, b: gemm(a, b).sum(), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(da, np.ones((3, 2)) @ b.T, rtol=1e-5)
    np.testing.assert_allclose(db, a.T @ np.ones((3, 2)), rtol=1e-5)
    # grad of vmap goes through the backward call batched sequentially.
    gv = jax.grad(lambda xs: jax.vmap(relu)(xs).sum())(np.stack([X, -X]))
    np.testing.assert_array_equal(gv, np.stack([X > 0, -X > 0]).astype(np.float32))


def test_grad_of_an_op_without_backward_names_it(J):
    sleep = J("sleep")
    with pytest.raises(mxop.NotSupported, match="op 'sleep'.*no backward"):
        jax.grad(lambda x: sleep(x, ms=1).sum())(jnp.asarray(X))


def test_crash_under_jit_names_the_op_and_the_next_call_works(J, client):
    segv, ident = jax.jit(J("segv")), jax.jit(J("identity"))
    pid = client.stats().worker_pid
    with pytest.raises(Exception) as ei:
        jax.block_until_ready(segv(jnp.asarray(X)))
    msg = str(ei.value)
    assert "op 'segv' (crash.so)" in msg and "MXOP_EWORKER_CRASHED" in msg and "SIGSEGV" in msg
    e = mj.error_of(ei.value)
    assert type(e) is mxop.WorkerCrashed and e.code == -1025 and "segv" in e.message
    assert mj.error_of(ValueError("unrelated")) is None
    np.testing.assert_array_equal(ident(jnp.asarray(X)), X)
    assert client.stats().worker_pid != pid
    # The same compiled program again: it crashes again, cleanly, and the session goes on.
    with pytest.raises(Exception, match="op 'segv'"):
        jax.block_until_ready(segv(jnp.asarray(X)))
    np.testing.assert_array_equal(ident(jnp.asarray(X + 1)), X + 1)


def test_op_error_and_timeout_under_jit(J):
    with pytest.raises(Exception) as ei:
        jax.block_until_ready(jax.jit(J("fail"))(jnp.asarray(X)))
    assert "op 'fail' (crash.so)" in str(ei.value) and "MXOP_EOP_FAILED" in str(ei.value)
    hang = J("hang")
    with pytest.raises(Exception) as ei:
        jax.block_until_ready(jax.jit(lambda x: hang(x, timeout=0.3))(jnp.asarray(X)))
    assert "op 'hang' (crash.so)" in str(ei.value) and "MXOP_ETIMEOUT" in str(ei.value)
    assert isinstance(mj.error_of(ei.value), mxop.Timeout)
    np.testing.assert_array_equal(jax.jit(J("relu"))(jnp.asarray(X)), np.maximum(X, 0))


def test_unsupported_dtype_names_the_op(J):
    relu = J("relu")
    with pytest.raises(mxop.InvalidArgument, match="op 'relu'.*input 0.*complex64"):
        jax.jit(relu)(jnp.zeros(4, jnp.complex64))
    with pytest.raises(mxop.InvalidArgument, match="op 'relu'.*uint32"):
        relu(jnp.zeros(4, jnp.uint32))


def test_wrong_rank_names_the_op(J):
    gemm = J("gemm")
    with pytest.raises(mxop.MxopError, match="gemm") as ei:
        jax.jit(gemm)(jnp.zeros(4), jnp.zeros((4, 2)))
    assert ei.value.code == -1016  # MXOP_ESHAPE, from the op's inference
    with pytest.raises(mxop.InvalidArgument, match="op 'relu'.*rank 9"):
        J("relu")(jnp.zeros((1,) * 9))
    with pytest.raises(mxop.InvalidArgument, match="op 'gemm'.*takes 2 inputs, got 1"):
        gemm(jnp.zeros((2, 2)))


def test_traced_attribute_names_the_op(J):
    gemm = J("gemm")
    a = jnp.ones((2, 3))
    b = jnp.ones((3, 2))
    with pytest.raises(mxop.InvalidAttribute, match="op 'gemm'.*attribute 'alpha'.*static"):
        jax.jit(lambda a, b, s: gemm(a, b, alpha=s))(a, b, 2.0)
    # Marked static, it is a Python value: fine.
    f = jax.jit(lambda a, b, s: gemm(a, b, alpha=s), static_argnames="s")
    np.testing.assert_allclose(f(a, b, s=2.0), 6.0)


def test_stateful_and_in_place_ops_are_refused(J):
    with pytest.raises(mxop.NotSupported, match="op 'running_mean_norm'.*stateful"):
        J("running_mean_norm")(jnp.ones((2, 3)))
    J.client.load("opkit_inplace.so")
    with pytest.raises(mxop.NotSupported, match="op 'double_inplace'.*in place"):
        J("double_inplace")(jnp.ones(4))


def test_dynamic_output_shape(J):
    ms = J("masked_select")
    x = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    m = np.array([1, 0, 1, 1], np.uint8)
    with pytest.raises(mxop.NotSupported, match="op 'masked_select'.*static shapes"):
        jax.jit(ms)(x, m)
    y = ms(jnp.asarray(x), jnp.asarray(m))  # eagerly, outside jit
    assert isinstance(y, jax.Array)
    np.testing.assert_array_equal(y, [1.0, 3.0, 4.0])


def test_one_library_from_c_numpy_torch_and_jax(client, daemon, tmp_path):
    """relu.so from the C command (libmxop), NumPy, PyTorch (when importable)
    and JAX, on one daemon: the same bytes out of each."""
    client.load("relu.so")
    x = np.random.default_rng(7).standard_normal(64).astype(np.float32)
    want = np.maximum(x, 0)
    np.save(tmp_path / "x.npy", x)
    cli = os.path.join(BUILD, "bin", "mxop")
    r = subprocess.run([cli, "run", "relu.so", "relu", "--input", "64:f32=%s" % (tmp_path / "x.npy"),
                        "--socket", daemon.socket, "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    results = {"c": np.load(tmp_path / "output0.npy"), "numpy": np.array(client.op("relu")(x)),
               "jax": np.asarray(jax.jit(mj.wrap(client.op("relu")))(x))}
    try:
        import torch
        import mxop.torch
    except Exception:  # torch absent (or unusable) in this environment
        torch = None
    if torch is not None:
        results["torch"] = mxop.torch.load(client, "relu.so").relu(torch.from_numpy(x)).numpy()
    for name, y in results.items():
        assert y.dtype == np.float32 and y.shape == (64,), name
        np.testing.assert_array_equal(y, want, err_msg=name)


def test_the_readme_jax_block_runs_as_written(tmp_path):
    readme = os.path.join(SOURCE, "python", "README.md")
    if not os.path.exists(readme):
        pytest.skip("not in the source tree (a copy of the tests run against a wheel)")
    code = [b for b in re.findall(r"^```py\n(.*?)^```", open(readme).read(), re.S | re.M)
            if "mxop.jax" in b]
    assert len(code) == 1
    env = {k: v for k, v in os.environ.items()
           if k not in ("MXOP_SOCKET", "MXOP_PLUGIN_DIR", "MXOP_EMBEDDED_SOCKET")}
    env.update(PYTHONPATH=os.path.join(SOURCE, "python"), MXOP_BUILD_DIR=BUILD,
               TMPDIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", code[0]], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "(7, 3, 5)" in p.stdout


def test_a_program_compiled_before_its_client_closed_raises(daemon):
    c = mxop.connect(daemon, timeout=20)
    c.load("relu.so")
    f = jax.jit(mj.wrap(c.op("relu")))
    np.testing.assert_array_equal(f(jnp.asarray(X)), np.maximum(X, 0))
    c.close()
    with pytest.raises(Exception) as ei:
        jax.block_until_ready(f(jnp.asarray(X)))
    assert "op 'relu' (relu.so)" in str(ei.value) and "client is closed" in str(ei.value)
    with pytest.raises(mxop.Disconnected):
        mj.wrap(c.op("relu"))(jnp.asarray(X))
