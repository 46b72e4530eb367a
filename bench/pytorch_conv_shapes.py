"""PyTorch's CPU convolutions at ResNet-18's shapes (batch 64, the engine's 28x28 one-channel input), float32
and bf16 operands, one thread: forward and forward + backward (input and weight gradients), minimum of 10
runs after 3, in ms; then each dtype's step total, every shape times its uses in a step. The PyTorch side of
tensor/conv_bench's "resnet" lines (BENCHMARKS.md "Convolution kernels").

  source bench/pytorch_env.sh && taskset -c 1 "$TORCH_PY" bench/pytorch_conv_shapes.py
"""
import time

import torch

# name, in channels, out channels, input size, stride, kernel, uses per step
SHAPES = [("conv1", 1, 64, 28, 1, 3, 1), ("l1", 64, 64, 28, 1, 3, 4), ("l2a", 64, 128, 28, 2, 3, 1),
          ("l2", 128, 128, 14, 1, 3, 3), ("l2ds", 64, 128, 28, 2, 1, 1), ("l3a", 128, 256, 14, 2, 3, 1),
          ("l3", 256, 256, 7, 1, 3, 3), ("l3ds", 128, 256, 14, 2, 1, 1), ("l4a", 256, 512, 7, 2, 3, 1),
          ("l4", 512, 512, 4, 1, 3, 3), ("l4ds", 256, 512, 7, 2, 1, 1)]


def best_ms(fn):
    for _ in range(3):
        fn()
    times = []
    for _ in range(10):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def main():
    torch.set_num_threads(1)
    totals = {}
    for name, cin, cout, size, stride, k, uses in SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(64, cin, size, size, dtype=dtype, requires_grad=True)
            w = torch.randn(cout, cin, k, k, dtype=dtype, requires_grad=True)
            forward = lambda: torch.nn.functional.conv2d(x, w, stride=stride, padding=k // 2)
            grad = torch.randn_like(forward())
            fwd = best_ms(forward)
            both = best_ms(lambda: forward().backward(grad))
            label = str(dtype).replace("torch.", "")
            print(f"{name:5s} {label:9s} fwd {fwd:8.2f} ms  fwd+bwd {both:8.2f} ms")
            total = totals.setdefault(label, [0.0, 0.0])
            total[0] += uses * fwd
            total[1] += uses * both
    for label, (fwd, both) in totals.items():
        print(f"step total {label:9s} fwd {fwd:8.1f} ms  fwd+bwd {both:8.1f} ms")


if __name__ == "__main__":
    main()
