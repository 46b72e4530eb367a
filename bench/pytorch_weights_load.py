"""PyTorch's side of bench/weights_load_compare.sh: the time to load each weights file into a fresh
tools/reference_models.py model with load_state_dict(strict=True), the way a user does it, one line per
file and way:
    torch_load FILE (torch.load weights_only): median 38.0 ms, best 36.9 ms over 20 loads
For .pt files both torch.load(weights_only=True) and torch.load(weights_only=True, mmap=True) are timed;
for .safetensors files safetensors.torch.load_file when it can be imported.

    python bench/pytorch_weights_load.py --model=resnet18 --loads=20 FILE...
"""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import reference_models  # noqa: E402


def ways(path):
    if path.endswith(".pt") or path.endswith(".pth"):
        yield "torch.load weights_only", lambda: torch.load(path, weights_only=True)
        yield "torch.load weights_only mmap", lambda: torch.load(path, weights_only=True, mmap=True)
    else:
        try:
            from safetensors.torch import load_file
        except ImportError:
            return
        yield "safetensors load_file", lambda: load_file(path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--loads", type=int, default=20)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = reference_models.make_model(args.model)
    for path in args.files:
        for name, load in ways(path):
            times = []
            for _ in range(args.loads):
                start = time.perf_counter()
                model.load_state_dict(load(), strict=True)
                times.append((time.perf_counter() - start) * 1e3)
            print("torch_load %s (%s): median %.1f ms, best %.1f ms over %d loads" % (
                path, name, statistics.median(times), min(times), len(times)))


if __name__ == "__main__":
    main()
