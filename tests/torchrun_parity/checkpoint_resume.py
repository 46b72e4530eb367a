# Trains the ToyModel for 8 steps, saving a checkpoint (rank 0) after every step into $PARITY_CKPT_DIR.
# In the first attempt (TORCHELASTIC_RESTART_COUNT=0) rank 1 dies after step 4; the launcher restarts the
# group (--max_restarts=1), which resumes from the last checkpoint and finishes. "OUT" lines are compared.
# PARITY_NO_FAIL=1: nobody dies (the uninterrupted reference run).
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 8


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    path = os.path.join(os.environ["PARITY_CKPT_DIR"], "ckpt.pt")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 5))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    if os.path.exists(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
    print(f"OUT attempt {attempt} rank {rank} starts at step {start}", flush=True)
    ddp = DDP(model)
    for step in range(start, STEPS):
        gen = torch.Generator().manual_seed(1000 * step + rank)
        optimizer.zero_grad()
        nn.functional.mse_loss(ddp(torch.randn(16, 10, generator=gen)), torch.randn(16, 5, generator=gen)).backward()
        optimizer.step()
        dist.barrier()
        if rank == 0:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step + 1},
                       path + ".tmp")
            os.replace(path + ".tmp", path)
        dist.barrier()
        if attempt == 0 and rank == 1 and step + 1 == 4 and not os.environ.get("PARITY_NO_FAIL"):
            print(f"OUT attempt {attempt} rank {rank} dies after step {step + 1}", flush=True)
            os._exit(7)
    checksum = sum(float(p.double().sum()) for p in model.parameters())
    print(f"OUT attempt {attempt} rank {rank} finished checksum {checksum:.10f}", flush=True)
    dist.destroy_process_group()
    # PyTorch 2.15's interpreter teardown after a gloo process group aborts now and then ("terminate called
    # without an active exception": 1 run in 8 under torchrun alone); the launchers' parity is what is
    # compared here, so the process ends without it.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
