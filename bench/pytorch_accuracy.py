#!/usr/bin/python3
"""PyTorch's side of the accuracy comparisons: train/train's recipe (DDP over gloo, SGD with momentum and
weight decay, linear warmup then cosine annealing per step, batch per rank, a DistributedSampler-style
shuffle per epoch) with the models of tools/reference_models.py, fp32 or bf16 autocast on the CPU, then
test accuracy in float32 as train/train evaluates. Run it with PyTorch 2.x from PyPI (bench/pytorch_env.sh).

Prints one JSON object: {"impl": "pytorch", "model", "precision", "seed", "epochs", "world_size",
"train_loss", "test_acc", "test_loss", "samples_per_s", "seconds"}.

  /opt/torch2/bin/python bench/pytorch_accuracy.py --model=resnet18 --precision=bf16 --epochs=1 \
      --lr=0.1 --weight_decay=5e-4 --warmup_steps=50 --seed=0
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import reference_data  # noqa: E402
import reference_models  # noqa: E402

def scheduled_lr(args, step, total_steps):
    """train/train_step.cc ScheduledLr: lr*(s+1)/W over the first W steps, then cosine to 0."""
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    annealed = total_steps - args.warmup_steps
    if annealed <= 0:
        return args.lr
    return args.lr * 0.5 * (1.0 + math.cos(math.pi * (step - args.warmup_steps) / annealed))


def evaluate(model, x, y, batch_size):
    model.eval()
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch_size):
            logits = model(x[i:i + batch_size])
            loss_sum += F.cross_entropy(logits, y[i:i + batch_size], reduction="sum").item()
            correct += (logits.argmax(1) == y[i:i + batch_size]).sum().item()
    model.train()
    return correct / x.shape[0], loss_sum / x.shape[0]


def run(rank, args, port):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.world_size)
    model = nn.parallel.DistributedDataParallel(reference_models.make_model(args.model))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                          weight_decay=args.weight_decay)
    x_train, y_train = reference_data.load_split("train")
    x_test, y_test = reference_data.load_split("t10k")
    per_rank = math.ceil(x_train.shape[0] / args.world_size)
    steps_per_epoch = math.ceil(per_rank / args.batch_size)
    total_steps = steps_per_epoch * args.epochs
    step, loss_sum, loss_count = 0, 0.0, 0
    start = time.perf_counter()
    for epoch in range(args.epochs):
        g = torch.Generator()
        g.manual_seed(args.seed + epoch)
        order = torch.randperm(x_train.shape[0], generator=g)
        order = torch.cat([order, order[:per_rank * args.world_size - order.shape[0]]])
        mine = order[rank::args.world_size]
        for b in range(steps_per_epoch):
            idx = mine[b * args.batch_size:(b + 1) * args.batch_size]
            for group in opt.param_groups:
                group["lr"] = scheduled_lr(args, step, total_steps)
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()
            opt.step()
            loss_sum += loss.item()
            loss_count += 1
            step += 1
            if rank == 0 and step % 100 == 0:
                print(f"step {step}/{total_steps} loss {loss.item():.4f} (mean {loss_sum / loss_count:.4f})",
                      file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    if rank == 0:
        acc, test_loss = evaluate(model.module, x_test, y_test, 1000)
        print(json.dumps({
            "impl": "pytorch", "torch": torch.__version__, "model": args.model, "precision": args.precision,
            "seed": args.seed, "epochs": args.epochs, "world_size": args.world_size,
            "train_loss": loss_sum / loss_count, "test_acc": acc, "test_loss": test_loss,
            "samples_per_s": x_train.shape[0] * args.epochs / seconds, "seconds": seconds,
        }), flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet18", choices=reference_models.MODELS)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight_decay", type=float, default=5e-4)
    parser.add_argument("--warmup_steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="per rank")
    parser.add_argument("--world_size", type=int, default=2)
    parser.add_argument("--master_port", type=int, default=29631)
    args = parser.parse_args()
    mp.spawn(run, args=(args, args.master_port), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
