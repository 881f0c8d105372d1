"""One rank of the two-node DDP check (scripts/test-multinode.sh runs it
under torchrun --nnodes 2 --nproc-per-node 2, each node a network
namespace with its own mxop-serverd).

Every rank is a client of its own node's daemon ($MXOP_SOCKET, one per
node): the model's hidden layer is mxop's gemm and relu (mxop.torch), the
model is wrapped in DistributedDataParallel over gloo, and one step's
gradients (after DDP's all-reduce across the nodes) are gathered.  Rank 0
checks that they are equal on every rank and equal to a reference computed
in-process with PyTorch's own ops on the whole batch, and that each node's
ranks were served by one daemon (the same daemon within a node, another
one on the other node); it prints one JSON line and exits 0 only if all
holds.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import mxop  # noqa: E402
import mxop.torch as mt  # noqa: E402
from train_mlp import MLP, spirals  # noqa: E402


def daemon_of(worker_pid):
    """The daemon that started a worker: its parent process."""
    with open("/proc/%d/status" % worker_pid) as f:
        for line in f:
            if line.startswith("PPid:"):
                return int(line.split()[1])
    return -1


def reference_grads(model, x, y):
    """The same model's gradients with PyTorch's ops on the whole batch."""
    w1 = model.fc1.weight.detach().clone().requires_grad_(True)
    b1 = model.fc1.bias.detach().clone().requires_grad_(True)
    w2 = model.fc2.weight.detach().clone().requires_grad_(True)
    b2 = model.fc2.bias.detach().clone().requires_grad_(True)
    h = torch.relu(x @ w1.t() + b1)
    loss = torch.nn.functional.cross_entropy(h @ w2.t() + b2, y)
    loss.backward()
    return torch.cat([g.reshape(-1) for g in (w1.grad, b1.grad, w2.grad, b2.grad)])


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    node = int(os.environ["GROUP_RANK"])
    sock = os.environ["MXOP_SOCKET"]

    client = mxop.connect(sock, name="rank%d" % rank)
    ops = mt.load(client, "gemm.so")
    ops.relu = mt.load(client, "relu.so").relu
    torch.manual_seed(0)  # the same initial parameters on every rank
    model = MLP(ops, hidden=16)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    x, y = spirals(32, seed=0)  # 96 points: 24 per rank
    loss = torch.nn.functional.cross_entropy(ddp(x[rank::world]), y[rank::world])
    loss.backward()  # DDP all-reduces (averages) the gradients across both nodes
    grads = torch.cat([p.grad.reshape(-1) for p in (model.fc1.weight, model.fc1.bias,
                                                     model.fc2.weight, model.fc2.bias)])
    gathered = [torch.zeros_like(grads) for _ in range(world)]
    dist.all_gather(gathered, grads)
    st = client.stats()
    info = [None] * world
    dist.all_gather_object(info, {"rank": rank, "node": node, "socket": sock,
                                  "daemon_pid": daemon_of(st.worker_pid),
                                  "worker_pid": st.worker_pid})
    ref = reference_grads(model, x, y)
    del ddp
    client.close()
    dist.barrier()
    ok = True
    if rank == 0:
        equal = all(torch.equal(gathered[0], g) for g in gathered[1:])
        diff = max(float((g - ref).abs().max()) for g in gathered)
        daemons = {}
        for i in info:
            daemons.setdefault(i["node"], set()).add((i["daemon_pid"], i["socket"]))
        one_per_node = (len(daemons) == 2 and all(len(v) == 1 for v in daemons.values())
                        and len({next(iter(v)) for v in daemons.values()}) == 2)
        ok = equal and diff < 1e-5 and one_per_node
        print(json.dumps({"world": world, "grads_equal_across_ranks": equal,
                          "max_abs_diff_to_reference": diff,
                          "one_daemon_per_node": one_per_node,
                          "ranks": sorted(info, key=lambda i: i["rank"])}), flush=True)
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
