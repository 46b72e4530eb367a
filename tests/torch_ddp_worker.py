"""A plain PyTorch DDP script, as a user would write it for torchrun: ddprun must run it unchanged.

Each rank trains a Linear layer for a few steps on rank-dependent data under DistributedDataParallel
(gloo, env://). After every backward, each rank checks that its gradient equals the mean of every rank's
local gradient (which each rank recomputes itself, since the data is a function of the rank), and that an
all_reduce of rank-dependent tensors gives the known sum. It also checks the variables torchrun sets.
Prints "rank R ok" and exits 0, or raises.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn

TORCHRUN_VARIABLES = ["RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
                      "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                      "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID"]


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(8, 5, generator=g), torch.randn(8, 3, generator=g)


def local_grads(model, x, y):
    model.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


def main():
    missing = [v for v in TORCHRUN_VARIABLES if v not in os.environ]
    assert not missing, f"unset: {missing}"
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == int(os.environ["WORLD_SIZE"]) == 3, world
    assert os.environ.get("OMP_NUM_THREADS") is not None, "ddprun sets OMP_NUM_THREADS=1 with 3 workers"
    torch.manual_seed(0)
    model = nn.Linear(5, 3)
    reference = nn.Linear(5, 3)  # a plain copy, to compute every rank's local gradient
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(4):
        reference.load_state_dict(model.state_dict())
        per_rank = [local_grads(reference, *batch(r, step)) for r in range(world)]
        opt.zero_grad()
        x, y = batch(rank, step)
        nn.functional.mse_loss(ddp(x), y).backward()
        for i, p in enumerate(model.parameters()):
            mean = sum(g[i] for g in per_rank) / world
            assert torch.allclose(p.grad, mean, atol=1e-6), f"step {step}: DDP gradient is not the mean"
        opt.step()
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(sum(range(1, world + 1))))), t
    dist.barrier()
    print(f"rank {rank} ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
