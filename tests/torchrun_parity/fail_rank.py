# Rank 1 fails with an exception (recorded by torch.distributed.elastic's @record into
# TORCHELASTIC_ERROR_FILE); the other ranks wait in a barrier until the launcher stops them.
import os
import sys

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"OUT rank {rank} started", flush=True)
    if rank == 1:
        raise ValueError("rank 1 gives up")
    dist.barrier()
    print(f"OUT rank {rank} passed the barrier", flush=True)


if __name__ == "__main__":
    main()
