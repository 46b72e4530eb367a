#!/usr/bin/python3
"""Writes the torch.save files that //nn:torch_save_test reads (nn/torch_save.h).

    /usr/bin/python3 tools/gen_torch_save_fixtures.py             # PyTorch 1.13: torch_save_views_1.13*.pt
    /opt/torch2/bin/python tools/gen_torch_save_fixtures.py       # PyTorch 2.x: every other file

Files (in tests/fixtures, or --out):
  torch_save_views_<major.minor>.pt   a state_dict whose tensors are views, dtypes and parameters with
                                      values the C++ test knows (see views_state_dict below)
  torch_save_views_<major.minor>_legacy.pt   the same in the legacy format (_use_new_zipfile_serialization=False)
  with PyTorch 2.x only:
  torch_save_views_<major.minor>_protocol5.pt   the same state_dict at pickle protocol 5 (framed, memoized)
  torch_save_cnn_bn.pt                reference_models' cnn_bn for 1x4x4 images, seeded, after three
                                      training steps (so its BatchNorm statistics are not the defaults)
  torch_save_cnn_bn_io.pt             {"input": 5 images, "logits": its eval-mode output on them}
  torch_save_checkpoint.pt            a training checkpoint: epoch, a DDP module's state_dict ("module."
                                      names), an optimizer state_dict, argparse arguments, a float
  torch_save_two_models.pt            {"model": state_dict, "ema": state_dict}
  torch_save_module.pt                torch.save(nn.Linear(2, 2)): a whole module
  torch_save_script.pt                torch.jit.save of a scripted nn.Linear(2, 2)
"""

import argparse
import collections
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_models  # noqa: E402  (beside this script)


def views_state_dict():
    """Every value is exact in its dtype; nn/torch_save_test.cc computes the same numbers."""
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)  # 0..11
    sd = collections.OrderedDict()
    sd["f32"] = torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.5
    sd["transposed"] = base.t()  # [4, 3], stride (1, 4)
    sd["rows_1_2"] = base[1:]  # offset 4 in the same storage
    sd["column_2"] = base[:, 2]  # [3], offset 2, stride 4
    sd["f64"] = torch.arange(4, dtype=torch.float64) / 4
    sd["f16"] = torch.tensor([1.5, -2.25, 65504.0], dtype=torch.float16)
    sd["bf16"] = torch.tensor([[1.0, -3.0], [0.5, 256.0]], dtype=torch.bfloat16)
    sd["i32"] = torch.tensor([-5, 7, 2147483647], dtype=torch.int32)
    sd["i64"] = torch.tensor([-(2 ** 40), 3], dtype=torch.int64)
    sd["i8"] = torch.tensor([-128, 127], dtype=torch.int8)
    sd["u8"] = torch.tensor([255, 0], dtype=torch.uint8)
    sd["bool"] = torch.tensor([True, False, True])
    sd["scalar"] = torch.tensor(3.25)
    sd["empty"] = torch.zeros(0, 3)
    sd["parameter"] = nn.Parameter(torch.tensor([[2.0, 4.0]]))
    return sd


def cnn_bn_files(out):
    torch.manual_seed(5)
    model = reference_models.make_model("cnn_bn", (1, 4, 4), 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(8, 1, 4, 4)
        loss = nn.functional.cross_entropy(model(x), torch.randint(0, 10, (8,)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    x = torch.randn(5, 1, 4, 4)
    with torch.no_grad():
        logits = model(x)
    torch.save(model.state_dict(), os.path.join(out, "torch_save_cnn_bn.pt"))
    torch.save({"input": x, "logits": logits}, os.path.join(out, "torch_save_cnn_bn_io.pt"))


def refused_and_checkpoint_files(out):
    torch.manual_seed(6)
    net = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    wrapped = collections.OrderedDict(("module." + k, v) for k, v in net.state_dict().items())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    torch.save({"epoch": 3, "model": wrapped, "optimizer": optimizer.state_dict(),
                "args": argparse.Namespace(lr=0.1, batch_size=64), "best_acc": 0.875},
               os.path.join(out, "torch_save_checkpoint.pt"))
    torch.save({"model": net.state_dict(), "ema": net.state_dict()}, os.path.join(out, "torch_save_two_models.pt"))
    torch.save(nn.Linear(2, 2), os.path.join(out, "torch_save_module.pt"))
    torch.jit.save(torch.jit.script(nn.Linear(2, 2)), os.path.join(out, "torch_save_script.pt"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures"))
    args = parser.parse_args()
    version = ".".join(torch.__version__.split(".")[:2])
    torch.save(views_state_dict(), os.path.join(args.out, "torch_save_views_%s.pt" % version))
    torch.save(views_state_dict(), os.path.join(args.out, "torch_save_views_%s_legacy.pt" % version),
               _use_new_zipfile_serialization=False)
    if int(version.split(".")[0]) >= 2:
        torch.save(views_state_dict(), os.path.join(args.out, "torch_save_views_%s_protocol5.pt" % version),
                   pickle_protocol=5)
        cnn_bn_files(args.out)
        refused_and_checkpoint_files(args.out)


if __name__ == "__main__":
    main()
