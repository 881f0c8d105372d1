#!/usr/bin/python3
"""mxop ops in a torch.distributed job: every rank a client of one daemon.

    /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 \\
        --redirects 2 --tee 2 --log_dir /tmp/mxop-torchrun-logs \\
        examples/distributed.py [--steps N] [--json]

Each rank opens its own session (its own worker) with the node's one
mxop-serverd: $MXOP_SOCKET or --socket if given, else a daemon that local
rank 0 starts and whose socket path it broadcasts to the other ranks.  The
model's hidden layer is mxop's gemm (mxop.torch.Linear); the model is
wrapped in DistributedDataParallel over gloo, so PyTorch all-reduces the
gradients that mxop's backward produced, and every rank trains on its own
shard of the spiral data set.  At the end the ranks compare their
parameters (they must be identical) and rank 0 prints a summary.

torch 1.13's launcher under Python 3.11 fails with "'NoneType' object has
no attribute 'get'" unless --redirects and --tee name a single stream (its
Std enum lookup misses the zero and multi-bit members there), hence
"--redirects 2 --tee 2" (stderr to a log file and to the console) and a
--log_dir in the command above (python/tests/test_docs.py runs it as
python/README.md documents it).
"""

import argparse
import gc
import json
import os
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

import mxop  # noqa: E402
import mxop.torch as mt  # noqa: E402
from train_mlp import MLP, spirals  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--socket", default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", rank))

    # One daemon for the node: given, or started by local rank 0.
    daemon = None
    sock = a.socket or os.environ.get("MXOP_SOCKET")
    if not sock:
        box = [None]
        if local_rank == 0:
            daemon = mxop.Daemon()
            box[0] = daemon.socket
        dist.broadcast_object_list(box, src=0)
        sock = box[0]

    client = mxop.connect(sock, name="rank%d" % rank)
    ops = mt.load(client, "gemm.so")
    ops.relu = mt.load(client, "relu.so").relu

    torch.manual_seed(0)  # the same initial parameters on every rank
    model = torch.nn.parallel.DistributedDataParallel(MLP(ops))
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    x, y = spirals(200, seed=0)
    xs, ys = x[rank::world], y[rank::world]

    t0 = time.monotonic()
    losses = []
    for _ in range(a.steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xs), ys)
        loss.backward()  # DDP all-reduces the gradients over gloo
        opt.step()
        losses.append(loss.item())
    seconds = time.monotonic() - t0

    # Every client is still connected here: the daemon serves `world` sessions.
    st = client.stats()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    info = [None] * world
    dist.all_gather_object(info, {"rank": rank, "worker_pid": st.worker_pid,
                                  "daemon_sessions": st.daemon_sessions,
                                  "calls": st.calls, "socket": sock})
    with torch.no_grad():
        xt, yt = spirals(100, seed=1)
        acc = (model.module(xt).argmax(1) == yt).float().mean().item()

    # The DDP model goes while the process group is still registered.  If
    # its Reducer dropped the group's last reference, torch 1.13 would
    # destroy the group holding the GIL, and a gloo thread that is freeing a
    # tensor Python let go of waits for that GIL: the rank hangs at exit
    # (seen about once in 25 runs).  destroy_process_group() below drops the
    # group through Python's handle, which lets go of the GIL first.
    del opt, model
    gc.collect()
    client.close()
    dist.barrier()  # every session closed before the daemon goes
    if daemon is not None:
        daemon.stop()
    if rank == 0:
        res = {
            "world": world,
            "params_equal": all(torch.equal(gathered[0], g) for g in gathered[1:]),
            "loss_first": losses[0],
            "loss_last": losses[-1],
            "accuracy": acc,
            "seconds": round(seconds, 3),
            "ranks": info,
            "one_daemon": len({i["socket"] for i in info}) == 1,
            "distinct_workers": len({i["worker_pid"] for i in info}),
            "max_daemon_sessions": max(i["daemon_sessions"] for i in info),
        }
        if a.json:
            print("RESULT " + json.dumps(res), flush=True)
        else:
            print("world %d: loss %.4f -> %.4f, accuracy %.3f, parameters equal: %s, "
                  "%d workers of one daemon" % (world, res["loss_first"], res["loss_last"],
                                                acc, res["params_equal"],
                                                res["distinct_workers"]))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
