#!/usr/bin/python3
"""PyTorch reference for the training-throughput benchmarks (run with PyTorch 2.x from PyPI, as
bench/pytorch_env.sh chooses, or with /usr/bin/python3 and Debian's python3-torch 1.13). Same models, data, batch and thread count as bench/train_throughput.cc.

Prints one JSON object: {"impl": "pytorch", "model", "batch_size", "steps", "samples_per_s",
"step_ms", "peak_rss_mb", "world_size"}.

  /opt/torch2/bin/python bench/pytorch_reference.py --model=cnn --batch_size=64 --steps=200
  /opt/torch2/bin/python bench/pytorch_reference.py --model=mlp --world_size=2   # DDP over gloo, 2 processes
"""
import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# The models live in tools/reference_models.py (shared with tools/gen_fixtures.py), found from this
# file's location whatever the working directory.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import reference_data  # noqa: E402
import reference_models  # noqa: E402

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def make_step(model, opt, x_all, y_all, batch_size, precision, world_size=1, rank=0):
    """The training step of step index i: this rank's pre-made batch, forward and loss (under autocast in
    bf16 or fp16 for those precisions), backward, SGD step; fp16 through torch.amp.GradScaler("cpu") at its
    defaults, as train/train runs it."""
    batches = x_all.shape[0] // batch_size
    scaler = torch.amp.GradScaler("cpu") if precision == "fp16" else None

    def step(i):
        b = (i * world_size + rank) % batches
        x = x_all[b * batch_size:(b + 1) * batch_size]
        y = y_all[b * batch_size:(b + 1) * batch_size]
        opt.zero_grad()
        with torch.autocast("cpu", dtype=AUTOCAST_DTYPES.get(precision, torch.bfloat16),
                            enabled=precision in AUTOCAST_DTYPES):
            loss = F.cross_entropy(model(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

    return step


def run(rank, args, result_queue=None):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.dataset == "cifar10":
        model = reference_models.make_model(args.model, (3, 32, 32), 10)
    else:
        model = reference_models.make_model(args.model)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    use_ddp = args.world_size > 1 or args.ddp
    if use_ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=args.world_size)
        model = nn.parallel.DistributedDataParallel(model,
                                                    gradient_as_bucket_view=args.gradient_as_bucket_view)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if args.dataset == "cifar10":
        x_all, y_all = reference_data.load_cifar10(args.data_dir, "train", args.batch_size * 64)
    else:
        x_all, y_all = reference_data.load_split("train", args.batch_size * 64)
    if args.channels_last and x_all.dim() == 4:
        x_all = x_all.contiguous(memory_format=torch.channels_last)
    step = make_step(model, opt, x_all, y_all, args.batch_size, args.precision, args.world_size, rank)

    for i in range(args.warmup):
        step(i)
    start = time.perf_counter()
    for i in range(args.steps):
        step(i)
    elapsed = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    result = {
        "impl": "pytorch", "model": args.model, "batch_size": args.batch_size, "steps": args.steps,
        "world_size": args.world_size, "ddp": use_ddp,
        "samples_per_s": args.steps * args.batch_size * args.world_size / elapsed,
        "step_ms": 1000.0 * elapsed / args.steps, "peak_rss_mb": peak_mb,
        "gradient_as_bucket_view": args.gradient_as_bucket_view, "precision": args.precision,
        "channels_last": args.channels_last, "dataset": args.dataset,
    }
    if use_ddp:
        import torch.distributed as dist
        dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(result), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="cnn", choices=reference_models.MODELS)
    parser.add_argument("--dataset", default="fashion_mnist", choices=("fashion_mnist", "cifar10"),
                        help="train/train's --dataset: the models' input shape and the batches' source")
    parser.add_argument("--data_dir", default="", help="--dataset=cifar10: the binary version's folder")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--world_size", type=int, default=1)
    parser.add_argument("--master_port", type=int, default=29611)
    parser.add_argument("--ddp", action="store_true", help="wrap in DDP even at world size 1")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"),
                        help="bf16, fp16: forward and loss under torch.autocast('cpu', dtype=torch.bfloat16 or "
                             "torch.float16); fp16 with torch.amp.GradScaler('cpu')")
    parser.add_argument("--gradient_as_bucket_view", action="store_true",
                        help="DDP's gradient_as_bucket_view (.grad tensors are views into the buckets)")
    parser.add_argument("--channels_last", action="store_true",
                        help="model and input in torch.channels_last (NHWC), the layout oneDNN's CPU "
                             "convolutions run natively")
    args = parser.parse_args()
    if args.world_size > 1 or args.ddp:
        import torch.multiprocessing as mp
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(args.master_port)
        mp.spawn(run, args=(args,), nprocs=args.world_size, join=True)
    else:
        run(0, args)


if __name__ == "__main__":
    sys.exit(main())
