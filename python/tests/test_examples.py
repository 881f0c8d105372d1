"""The examples: crash-and-continue training, and a 2-rank torch.distributed run."""
import json
import os
import socket
import subprocess

import pytest

from conftest import PYTHON, SOURCE

EXAMPLES = os.path.join(SOURCE, "examples")


def env_for(daemon):
    env = dict(os.environ)
    env["MXOP_SOCKET"] = daemon.socket
    env["PYTHONPATH"] = os.path.join(SOURCE, "python") + (
        ":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_training(daemon, *args):
    p = subprocess.run([PYTHON, os.path.join(EXAMPLES, "train_mlp.py"), "--json", *args],
                       env=env_for(daemon), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_training_survives_a_crashing_op_with_the_same_accuracy(daemon):
    plain = run_training(daemon, "--steps", "300")
    crashed = run_training(daemon, "--steps", "300", "--crash-step", "40")
    assert plain["crashes"] == [] and plain["worker_restarts"] == 0
    assert len(crashed["crashes"]) == 1 and crashed["crashes"][0]["step"] == 40
    assert "MXOP_EWORKER_CRASHED" in crashed["crashes"][0]["error"]
    assert "SIGSEGV" in crashed["crashes"][0]["error"]
    assert crashed["worker_restarts"] == 1
    assert plain["accuracy"] >= 0.9, plain
    assert crashed["accuracy"] == plain["accuracy"]
    assert crashed["param_checksum"] == plain["param_checksum"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_rank_distributed_run_with_one_daemon(daemon, tmp_path):
    cmd = [PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           "--redirects", "2", "--tee", "2", "--log_dir", str(tmp_path / "logs"),
           os.path.join(EXAMPLES, "distributed.py"), "--json", "--steps", "150"]
    try:
        p = subprocess.run(cmd, env=env_for(daemon), capture_output=True, text=True,
                           timeout=150)
    except subprocess.TimeoutExpired as e:
        pytest.fail("torchrun did not finish within 150 s: %s" % (e.stdout or ""))
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, p.stdout + p.stderr
    res = json.loads(lines[0][len("RESULT "):])
    assert res["world"] == 2
    assert res["params_equal"], "DDP left the ranks with different parameters"
    assert res["one_daemon"] and res["ranks"][0]["socket"] == daemon.socket
    assert res["distinct_workers"] == 2  # one session (worker) per rank
    assert res["max_daemon_sessions"] >= 2
    assert all(r["calls"] > 0 for r in res["ranks"])
    assert res["loss_last"] < 0.5 * res["loss_first"]


def test_bench_runs(daemon, tmp_path):
    out = tmp_path / "python.json"
    p = subprocess.run([PYTHON, "-m", "mxop.bench", "--socket", daemon.socket, "--n", "300",
                        "--gemm-n", "64", "--out", str(out)], env=env_for(daemon),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = json.loads(out.read_text())["rows"]
    for k in ("c_forward", "numpy_relu", "torch_relu_grad", "stub_numpy_op_call",
              "gemm_mxop_64x64", "gemm_torch_64x64", "stub_torch_ops_fwd_bwd",
              "torch_ops_fwd_bwd_vs_pyfunction_ratio", "threads_relu_4MiB_2_vs_1_ratio",
              "threads_softmax_64x160_2_vs_1_ratio"):
        assert rows[k] > 0, k
