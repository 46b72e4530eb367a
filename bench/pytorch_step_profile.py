#!/usr/bin/python3
"""Where PyTorch's training step goes, op by op: bench/pytorch_reference.py's single-process step (same
model, data, batch and optimizer) under torch.profiler, printed as key_averages sorted by self CPU time
(summed over the profiled steps). For BENCHMARKS.md "bf16 mixed precision".

  source bench/pytorch_env.sh
  chrt -f 5 taskset -c 1 $TORCH_PY bench/pytorch_step_profile.py --model=resnet18 --precision=bf16 --channels_last
"""
import argparse
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import reference_data  # noqa: E402
import reference_models  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_reference  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet18", choices=reference_models.MODELS)
    parser.add_argument("--precision", default="bf16", choices=("fp32", "bf16"))
    parser.add_argument("--channels_last", action="store_true")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = reference_models.make_model(args.model)
    x_all, y_all = reference_data.load_split("train", args.batch_size * 8)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        if x_all.dim() == 4:
            x_all = x_all.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    step = pytorch_reference.make_step(model, opt, x_all, y_all, args.batch_size, args.precision)

    for i in range(args.warmup):
        step(i)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(args.steps):
            step(i)
    print("# %s %s%s, batch %d, %d thread(s), %d profiled steps after %d (times summed over them)" %
          (args.model, args.precision, " channels_last" if args.channels_last else "", args.batch_size,
           args.threads, args.steps, args.warmup))
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=45))


if __name__ == "__main__":
    sys.exit(main())
