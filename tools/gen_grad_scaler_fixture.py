#!/opt/torch2/bin/python
"""Writes the torch.amp.GradScaler transitions that //nn:grad_scaler_test replays.

torch.amp.GradScaler on the CPU needs PyTorch 2.x (1.13's scaler is CUDA-only), so run it with the
PyTorch 2 virtual environment (FACTS.md):

    /opt/torch2/bin/python tools/gen_grad_scaler_fixture.py [--out tests/fixtures]

Each case feeds a scaler (its options in "__metadata__") one gradient of 3 elements per step, through
scaler.step(SGD) and scaler.update(), and records per step (tensors [steps] or [steps, 3]):
  input       the .grad handed to the scaler: base[step] * scale, with an inf or NaN where `kind` says
  kind        0 finite; 1: +inf at [0]; 2: NaN at [1]; 3: -inf at [2]
  unscaled    .grad after scaler.step (unscale_ multiplied it by float32(1 / scale))
  found_inf   1 if the scaler found a non-finite value (and skipped the SGD step)
  stepped     1 if SGD changed the parameter
  scale       scaler.get_scale() after update()
  tracker     the growth tracker after update()
Files: tests/fixtures/grad_scaler_<case>.safetensors, written with gen_fixtures.py's writer.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_fixtures import save_safetensors  # noqa: E402  (the same hand-written safetensors format)


def kinds_for(case, steps):
    """Which steps carry a non-finite gradient, per case."""
    kinds = [0] * steps
    if case == "short":  # growth_interval 3: growth, backoff in the middle of an interval, runs of bad steps
        for step, kind in {4: 1, 5: 2, 9: 3, 13: 1, 14: 1, 15: 1, 21: 2}.items():
            kinds[step] = kind
    elif case == "default":  # torch's defaults: a backoff at step 10, a growth 2000 clean steps later, a NaN after it
        kinds[10] = 1
        kinds[2100] = 2
    elif case == "odd_factors":  # factors that are not powers of two: products rounded to float32
        for step in range(0, steps, 5):
            kinds[step] = 1 + step % 3
    # "overflow": no bad steps; the scale stops growing where growth would make it infinite
    return kinds


CASES = {
    "short": (dict(init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=3), 30),
    "default": (dict(init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000), 2110),
    "odd_factors": (dict(init_scale=1000.0, growth_factor=1.7, backoff_factor=0.3, growth_interval=2), 40),
    "overflow": (dict(init_scale=2.0 ** 125, growth_factor=2.0, backoff_factor=0.5, growth_interval=1), 6),
}


def run_case(case, options, steps):
    scaler = torch.amp.GradScaler("cpu", **options)
    param = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.SGD([param], lr=0.1)
    base = torch.tensor([0.5, -0.25, 0.125], dtype=torch.float32)
    kinds = kinds_for(case, steps)
    rec = {k: [] for k in ("input", "kind", "unscaled", "found_inf", "stepped", "scale", "tracker")}
    for step in range(steps):
        scaler.scale(torch.ones(()))  # a scaled "loss": the scaler creates its state lazily here
        grad = base * (1.0 + step % 7) * torch.tensor(scaler.get_scale(), dtype=torch.float32)
        if kinds[step] == 1:
            grad[0] = float("inf")
        elif kinds[step] == 2:
            grad[1] = float("nan")
        elif kinds[step] == 3:
            grad[2] = float("-inf")
        param.grad = grad.clone()
        before = param.detach().clone()
        scaler.step(optimizer)
        found = sum(v.item() for v in scaler._found_inf_per_device(optimizer).values())
        scaler.update()
        rec["input"].append(grad)
        rec["kind"].append(kinds[step])
        rec["unscaled"].append(param.grad.detach().clone())
        rec["found_inf"].append(int(found > 0))
        rec["stepped"].append(int(not torch.equal(before, param.detach())))
        rec["scale"].append(scaler.get_scale())
        rec["tracker"].append(scaler._get_growth_tracker())
    return {
        "input": torch.stack(rec["input"]),
        "kind": torch.tensor(rec["kind"], dtype=torch.int64),
        "unscaled": torch.stack(rec["unscaled"]),
        "found_inf": torch.tensor(rec["found_inf"], dtype=torch.int64),
        "stepped": torch.tensor(rec["stepped"], dtype=torch.int64),
        "scale": torch.tensor(rec["scale"], dtype=torch.float32),
        "tracker": torch.tensor(rec["tracker"], dtype=torch.int64),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                      "tests", "fixtures"))
    args = parser.parse_args()
    for case, (options, steps) in CASES.items():
        tensors = run_case(case, options, steps)
        metadata = {k: repr(v) for k, v in options.items()}
        metadata["torch"] = torch.__version__
        path = os.path.join(args.out, f"grad_scaler_{case}.safetensors")
        save_safetensors(path, tensors, metadata)
        print(f"wrote {path}: {steps} steps, {int(tensors['found_inf'].sum())} skipped, "
              f"final scale {tensors['scale'][-1].item()}")


if __name__ == "__main__":
    main()
