"""The PyTorch side of //nn:resnet_interchange_test: torchvision's resnet18 and our resnet18 exchanging
weights through safetensors and torch.save files, both directions, with strict names (nn/resnet.h).

    resnet_interchange.py DIR --expect_batches=N
      1. ours -> torchvision: load_file(DIR/ours_weights.safetensors), then
         torch.load(DIR/ours_weights.pt, weights_only=True), each + load_state_dict(strict=True); every
         num_batches_tracked is N; the eval-mode logits on DIR/ours_io.safetensors' input equal the
         logits stored there.
      2. torchvision -> ours: a fresh torchvision model's weights (BatchNorm statistics and
         num_batches_tracked set to non-initial values) -> DIR/torch_weights.safetensors and (torch.save)
         DIR/torch_weights.pt; a fixed input and its eval-mode logits -> DIR/torch_io.safetensors, for
         our side to check.

Runs under any PyTorch with torchvision (2.x from PyPI, or Debian's python3-torch 1.13 with
python3-torchvision 0.14) and Hugging Face's safetensors. Exit status 0 on success, 1 on a failure (it
prints what differed), and 77 when torch, torchvision or safetensors cannot be imported (missing or broken) (the test then
tries another Python): one process, because importing torch and torchvision takes seconds.
"""

import argparse
import os
import sys

try:
    import torch
    import torchvision
    from safetensors.torch import load_file, save_file
except Exception as error:  # a missing or broken install is the environment's, not this test's, failure
    print("cannot import: %s: %s" % (type(error).__name__, error))
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import reference_models  # noqa: E402

TOLERANCE = 1e-4  # max |ours - torch| <= TOLERANCE * max(1, max |torch|), as nn/pytorch_fixture_test.cc


def torchvision_resnet18():
    """torchvision's resnet18(num_classes=10) with the replacements of nn/resnet.h."""
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = torch.nn.Identity()
    return model


def check_twin_matches(model):
    """tools/reference_models.py's resnet18 (the fixtures' and benchmarks' twin) has torchvision's keys,
    order, shapes and dtypes."""
    ours = [(k, tuple(v.shape), v.dtype) for k, v in reference_models.make_model("resnet18").state_dict().items()]
    theirs = [(k, tuple(v.shape), v.dtype) for k, v in model.state_dict().items()]
    if ours != theirs:
        diff = [(a, b) for a, b in zip(ours, theirs) if a != b][:3]
        sys.exit("FAIL: reference_models.ResNet18's state dict differs from torchvision's (%d vs %d keys; "
                 "first differences %s)" % (len(ours), len(theirs), diff))


def compare(what, actual, expected):
    scale = max(1.0, float(expected.abs().max()))
    worst = float((actual - expected).abs().max())
    if not worst <= TOLERANCE * scale:
        sys.exit("FAIL: %s: max |difference| %.3g exceeds %.3g" % (what, worst, TOLERANCE * scale))
    if not torch.equal(actual.argmax(1), expected.argmax(1)):
        sys.exit("FAIL: %s: predicted classes differ" % what)
    print("ok: %s: max |difference| %.3g" % (what, worst))


def torch_save(args):
    torch.manual_seed(0)
    model = torchvision_resnet18()
    check_twin_matches(model)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for bn in (m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)):
            c = bn.num_features
            bn.weight.copy_(torch.rand(c, generator=gen) + 0.5)
            bn.bias.copy_(torch.randn(c, generator=gen) * 0.1)
            bn.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
            bn.running_var.copy_(torch.rand(c, generator=gen) + 0.5)
            bn.num_batches_tracked.fill_(7)
    model.eval()
    x = torch.rand(4, 1, 28, 28, generator=gen)
    with torch.no_grad():
        logits = model(x)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(args.dir, "torch_weights.safetensors"))
    torch.save(model.state_dict(), os.path.join(args.dir, "torch_weights.pt"))
    save_file({"input": x, "logits": logits}, os.path.join(args.dir, "torch_io.safetensors"))
    print("torchvision saved %d tensors" % len(model.state_dict()))


def torch_check(args):
    for file in ("ours_weights.safetensors", "ours_weights.pt"):
        path = os.path.join(args.dir, file)
        model = torchvision_resnet18()
        state = torch.load(path, weights_only=True) if file.endswith(".pt") else load_file(path)
        model.load_state_dict(state, strict=True)  # every parameter and buffer, nothing extra
        for name, bn in ((n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.BatchNorm2d)):
            if int(bn.num_batches_tracked) != args.expect_batches:
                sys.exit("FAIL: %s: %s.num_batches_tracked is %d, expected %d" % (
                    file, name, int(bn.num_batches_tracked), args.expect_batches))
        io = load_file(os.path.join(args.dir, "ours_io.safetensors"))
        model.eval()
        with torch.no_grad():
            logits = model(io["input"])
        compare("ours %s -> torchvision load_state_dict(strict=True), eval logits" % file, logits, io["logits"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--expect_batches", type=int, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("torch %s, torchvision %s" % (torch.__version__, torchvision.__version__))
    torch_check(args)
    torch_save(args)


if __name__ == "__main__":
    main()
