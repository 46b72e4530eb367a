#!/usr/bin/env python3
"""PyTorch 2.x eager reference for bench/gpu_bench.cc on the GPU machine (same models, batches, optimizer,
synthetic data), printing lines in gpu_bench's format: "name value unit". With --bf16: the figures of
`gpu_bench --only=bf16` (training under torch.autocast("cuda", dtype=torch.bfloat16), a bf16 GEMM)."""
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def cnn():
    # nn/models.h: conv1 1->32 3x3 pad 1, ReLU, MaxPool 2, conv2 32->64 3x3 pad 1, ReLU, MaxPool 2, Flatten, fc.
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def resnet18():
    # tools/reference_models.py travels beside this script in the GPU bundle; in the repo it is in tools/.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [here, os.path.join(here, "..", "tools")]
    import reference_models
    return reference_models.ResNet18()


def train(name, batch, bf16=False):
    torch.manual_seed(1)
    model = {"mlp": mlp, "cnn": cnn, "resnet18": resnet18}[name]().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.rand(batch, 1, 28, 28, device="cuda")
    y = (torch.arange(batch, device="cuda") % 10)

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    # The same step counts as gpu_bench.cc.
    large = name == "resnet18"
    steps = (10 if large else 50) if batch >= 512 else (30 if large else 200)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    print(f"torch/train{'_bf16' if bf16 else ''}/{name}/b{batch} {steps * batch / (time.perf_counter() - start):.1f} samples/s", flush=True)


def seconds_per_matmul(n, dtype):
    """Seconds per n x n by n x n product on the GPU: 3 untimed, then the mean of 20."""
    a = torch.rand(n, n, device="cuda", dtype=dtype)
    b = torch.rand(n, n, device="cuda", dtype=dtype)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / 20


def sgemm(n, tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    seconds = seconds_per_matmul(n, torch.float32)
    print(f"torch/sgemm{'_tf32' if tf32 else ''}/{n} {2 * n ** 3 / seconds / 1e12:.2f} TFLOP/s", flush=True)


def gemm_bf16(n):
    """bf16 operands, float32 accumulation (cuBLAS), bf16 output: the GEMM autocast runs."""
    seconds = seconds_per_matmul(n, torch.bfloat16)
    print(f"torch/gemm_bf16/{n} {2 * n ** 3 / seconds / 1e12:.2f} TFLOP/s", flush=True)


def bandwidth():
    x = torch.ones(1 << 28, device="cuda")
    for _ in range(3):
        x * 1.5
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(20):
        x * 1.5
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / 20
    print(f"torch/bandwidth/mul {2 * x.numel() * 4 / seconds / 1e9:.1f} GB/s", flush=True)


if __name__ == "__main__":
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    if "--bf16" in sys.argv[1:]:
        for name in ("mlp", "cnn", "resnet18"):
            for batch in (64, 512):
                train(name, batch, bf16=True)
        gemm_bf16(8192)
        sys.exit(0)
    # Check the cnn's shape against nn/models.h before trusting the comparison.
    for name in ("mlp", "cnn", "resnet18"):
        for batch in (64, 512):
            train(name, batch)
    sgemm(8192, False)
    sgemm(8192, True)
    bandwidth()
