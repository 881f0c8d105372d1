#!/usr/bin/python3
"""Train a small MLP whose hidden layer is mxop's gemm op, surviving a crash.

    /usr/bin/python3 examples/train_mlp.py [--crash-step N] [--steps N] [--json]

The data set is the classic three-arm spiral (generated with NumPy from a
fixed seed: 3 classes x 200 points for training, a separate 3 x 100 for
testing), which a linear model cannot separate.  The model is

    x[2] -> mxop gemm (mxop.torch.Linear, 2 -> 64) -> mxop relu
         -> torch nn.Linear (64 -> 3) -> cross-entropy

so the hidden layer's forward and backward both run in the mxop worker.

With --crash-step N, step N also sends the hidden activations through the
crash fixture's "segv" op: the worker dies, the step raises WorkerCrashed,
and the loop catches it, notes it, and runs the step again on the worker
the daemon has already restarted.  No parameter was updated by the failed
attempt, so the run ends with exactly the accuracy of a run without the
crash (tests/test_examples.py runs both and compares).

Connection: --socket or $MXOP_SOCKET; else a private daemon whose plugin
directory holds the example plugins and the crash fixture.
"""

import argparse
import atexit
import json
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))  # mxop from the source tree

import mxop  # noqa: E402
import mxop.torch as mt  # noqa: E402


def spirals(n_per_class, classes=3, seed=0, noise=0.2):
    """Points on `classes` interleaved spiral arms, labels 0..classes-1."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for k in range(classes):
        r = np.linspace(0.05, 1.0, n_per_class)
        t = np.linspace(k * 4.0, (k + 1) * 4.0, n_per_class) + rng.standard_normal(n_per_class) * noise
        xs.append(np.stack([r * np.sin(t), r * np.cos(t)], axis=1))
        ys.append(np.full(n_per_class, k))
    x = np.concatenate(xs).astype(np.float32)
    y = np.concatenate(ys).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


class MLP(torch.nn.Module):
    """The hidden layer is mxop: gemm (a custom op) and relu, out of process."""

    def __init__(self, ops, hidden=64, classes=3):
        super().__init__()
        self.fc1 = mt.Linear(2, hidden, ops.gemm)
        self.relu = ops.relu
        self.fc2 = torch.nn.Linear(hidden, classes)
        self.crash_op = None  # set for the one step that crashes

    def forward(self, x):
        h = self.relu(self.fc1(x))
        if self.crash_op is not None:
            h = self.crash_op(h)
        return self.fc2(h)


def connect(socket):
    if socket or os.environ.get("MXOP_SOCKET"):
        return mxop.connect(socket)
    build = mxop.build_dir()
    d = mxop.Daemon(plugin_sources=[os.path.join(build, "plugins"),
                                    os.path.join(build, "tests", "plugins")])
    atexit.register(d.stop)
    return mxop.connect(d)


def train(client, steps=400, crash_step=None, lr=0.02, seed=0, log=None):
    torch.manual_seed(seed)
    ops = mt.load(client, "gemm.so")
    ops.relu = mt.load(client, "relu.so").relu
    segv = mt.load(client, "crash.so").segv if crash_step is not None else None
    x, y = spirals(200, seed=seed)
    xt, yt = spirals(100, seed=seed + 1)
    model = MLP(ops)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    crashes = []
    step = 0
    while step < steps:
        model.crash_op = segv if step == crash_step and not crashes else None
        try:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
        except mxop.WorkerCrashed as e:
            # The worker is gone, the daemon has started a new one: the
            # step is run again, the parameters untouched by the failure.
            crashes.append({"step": step, "error": str(e)})
            if log:
                log("step %d: %s -- retrying the step" % (step, e))
            continue
        opt.step()
        if log and (step % 100 == 0 or step == steps - 1):
            log("step %4d  loss %.4f" % (step, loss.item()))
        step += 1
    with torch.no_grad():
        acc = (model(xt).argmax(1) == yt).float().mean().item()
        train_acc = (model(x).argmax(1) == y).float().mean().item()
    checksum = float(sum(p.double().sum() for p in model.parameters()))
    st = client.stats()
    return {"accuracy": acc, "train_accuracy": train_acc, "final_loss": loss.item(),
            "steps": steps, "crashes": crashes, "worker_restarts": st.worker_restarts,
            "param_checksum": checksum}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--crash-step", type=int, default=None,
                    help="make the op crash at this step (the loop carries on)")
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--socket", default=None)
    ap.add_argument("--json", action="store_true", help="print the result as one JSON line")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)  # same results run to run
    client = connect(a.socket)
    t0 = time.monotonic()
    log = None if a.json else print
    res = train(client, a.steps, a.crash_step, a.lr, a.seed, log)
    res["seconds"] = round(time.monotonic() - t0, 3)
    client.close()
    if a.json:
        print(json.dumps(res))
    else:
        print("test accuracy %.3f (train %.3f), %d crash(es) survived, %.1f s"
              % (res["accuracy"], res["train_accuracy"], len(res["crashes"]), res["seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
