#!/usr/bin/python3
"""Writes the PyTorch reference results that //nn:pytorch_fixture_test compares against.

Run with the interpreter that has torch 1.13 (not necessarily the first python3 on PATH):

    /usr/bin/python3 tools/gen_fixtures.py [--out tests/fixtures]

Every fixture is a safetensors file written by hand below (struct + json; the `safetensors` package
is not needed) in exactly the format nn/safetensors.h reads. Tensor names are documented per fixture;
configuration (stride, learning rate, ...) is in the "__metadata__" block. The models are
tools/reference_models.py's (shared with bench/pytorch_reference.py).

Model fixtures (model_<name>.safetensors) would exceed the repository budget if they held the models'
full weights and gradients (fc1 alone has 401k weights), so:
  * the weights come from fixture_weight() below, a formula that nn/pytorch_fixture_test.cc evaluates
    bit-identically (small integers times powers of two: exact in float32); the file still holds every
    parameter with at most LARGE elements as "state.<name>" so the C++ test checks that both sides
    agree on the formula;
  * gradients with at most LARGE elements are stored whole ("grad.<name>"); larger ones as a strided
    sample of the flattened gradient ("grad_sample.<name>", stride "grad_sample_stride.<name>") plus,
    for matrices, their sums over dim 0 and dim 1 ("grad_sum0.<name>", "grad_sum1.<name>"), and for
    convolution kernels [out, in, kh, kw] their sums per output and per input channel
    ("grad_sum_out.<name>" [out], "grad_sum_in.<name>" [in]; a kernel's sum over dim 0 alone would be
    as large as a small layer).
The total stays under 2 MB (resnet18's file, 62 parameters and 11.2M values, is about 0.6 MB of it).
"""

import argparse
import collections
import json
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import reference_models  # beside this script: the models, shared with bench/pytorch_reference.py

LARGE = 20000  # parameters with more elements get sampled gradients
SAMPLE_TARGET = 4096  # about this many sampled gradient elements

DTYPES = {
    torch.float32: ("F32", np.float32),
    torch.int64: ("I64", np.int64),
}


def save_safetensors(path, tensors, metadata):
    """Writes an ordered {name: torch.Tensor} dict as a safetensors file (little-endian)."""
    header = collections.OrderedDict()
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name, tensor in tensors.items():
        tensor = tensor.detach().contiguous().cpu()
        if tensor.dtype == torch.bfloat16:  # autocast outputs: stored as float32 (exact)
            tensor = tensor.float()
        code, np_dtype = DTYPES[tensor.dtype]
        data = tensor.numpy().astype(np_dtype).astype(np.dtype(np_dtype).newbyteorder("<")).tobytes()
        header[name] = {"dtype": code, "shape": list(tensor.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def fixture_weight(shape, salt):
    """Deterministic weights: v * 2**-e with v in [-127, 127] from an integer hash of the element
    index and `salt`; e = 7 + k, k the smallest integer with 4**k >= fan_in (fan_in = prod(shape[1:]))
    for matrices and kernels, e = 9 for vectors. Mirrored by FixtureWeight() in
    nn/pytorch_fixture_test.cc."""
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(salt * 97531)) % np.uint64(1 << 32)
    v = ((h >> np.uint64(8)) % np.uint64(255)).astype(np.int64) - 127
    if len(shape) >= 2:
        fan_in = int(np.prod(shape[1:]))
        k = 0
        while 4 ** k < fan_in:
            k += 1
        e = 7 + k
    else:
        e = 9
    return torch.from_numpy((v.astype(np.float32) * np.float32(2.0 ** -e)).reshape(shape))


def grad_entries(name, grad, out):
    if grad.numel() <= LARGE:
        out["grad." + name] = grad
        return
    stride = max(1, grad.numel() // SAMPLE_TARGET)
    out["grad_sample." + name] = grad.flatten()[::stride].clone()
    out["grad_sample_stride." + name] = torch.tensor(stride, dtype=torch.int64)
    if grad.dim() == 2:
        out["grad_sum0." + name] = grad.sum(0)
        out["grad_sum1." + name] = grad.sum(1)
    else:
        out["grad_sum_out." + name] = grad.sum(dim=(1, 2, 3))
        out["grad_sum_in." + name] = grad.sum(dim=(0, 2, 3))


def model_fixture(name, model, out_dir, image_shape=(1, 28, 28), num_classes=10, tag=""):
    """input, target, state.* (small parameters), logits, loss, grad*.*; for BatchNorm models also the
    buffers after the training forward (after.*) and eval-mode logits after it (logits_eval). The model
    takes images of `image_shape` in `num_classes` classes; the file is model_<tag><name>.safetensors."""
    with torch.no_grad():
        for salt, (pname, p) in enumerate(model.named_parameters()):
            p.copy_(fixture_weight(tuple(p.shape), salt))
    gen = torch.Generator().manual_seed(1000)
    x = torch.rand(4, *image_shape, generator=gen)
    target = torch.randint(0, num_classes, (4,), generator=gen)
    out = collections.OrderedDict()
    out["input"] = x
    out["target"] = target
    for pname, p in model.named_parameters():
        if p.numel() <= LARGE:
            out["state." + pname] = p.detach().clone()
    model.train()
    logits = model(x)
    loss = F.cross_entropy(logits, target)
    loss.backward()
    out["logits"] = logits
    out["loss"] = loss.reshape(())
    for pname, p in model.named_parameters():
        grad_entries(pname, p.grad, out)
    buffers = list(model.named_buffers())
    if buffers:
        for bname, b in buffers:
            out["after." + bname] = b.clone()
        model.eval()
        with torch.no_grad():
            out["logits_eval"] = model(x)
    save_safetensors(os.path.join(out_dir, "model_%s%s.safetensors" % (tag, name)), out,
                     {"model": name, "loss": "cross_entropy(mean)", "mode": "train",
                      "image_shape": "x".join(str(d) for d in image_shape), "classes": str(num_classes)})


def layer_fixture(path, module, x, metadata, buffers_after=()):
    """input, weight/bias (and other state), output, grad_output, grad.input, grad.<param>."""
    gen = torch.Generator().manual_seed(7)
    x = x.clone().requires_grad_(True)
    out = collections.OrderedDict()
    out["input"] = x.detach().clone()
    for pname, t in module.state_dict().items():
        out["state." + pname] = t.clone()
    y = module(x)
    grad_output = torch.randn(y.shape, generator=gen)
    y.backward(grad_output)
    out["output"] = y
    out["grad_output"] = grad_output
    out["grad.input"] = x.grad
    for pname, p in module.named_parameters():
        out["grad." + pname] = p.grad
    for bname in buffers_after:
        out["after." + bname] = module.state_dict()[bname].clone()
    save_safetensors(path, out, metadata)


def layer_fixtures(out_dir):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    layer_fixture(os.path.join(out_dir, "linear.safetensors"), nn.Linear(5, 3),
                  torch.randn(4, 5, generator=gen), {"in_features": 5, "out_features": 3})
    for stride in (1, 2):
        for padding in (0, 1):
            conv = nn.Conv2d(3, 4, 3, stride=stride, padding=padding)
            layer_fixture(os.path.join(out_dir, "conv2d_s%d_p%d.safetensors" % (stride, padding)), conv,
                          torch.randn(2, 3, 7, 7, generator=gen),
                          {"in_channels": 3, "out_channels": 4, "kernel_size": 3, "stride": stride,
                           "padding": padding})
    for kernel, stride in ((2, 2), (3, 2)):
        layer_fixture(os.path.join(out_dir, "maxpool2d_k%d_s%d.safetensors" % (kernel, stride)),
                      nn.MaxPool2d(kernel, stride), torch.randn(2, 3, 7, 7, generator=gen),
                      {"kernel_size": kernel, "stride": stride})
    for mode in ("train", "eval"):
        bn = nn.BatchNorm2d(3)
        with torch.no_grad():
            bn.weight.copy_(torch.rand(3, generator=gen) + 0.5)
            bn.bias.copy_(torch.randn(3, generator=gen))
            bn.running_mean.copy_(torch.randn(3, generator=gen))
            bn.running_var.copy_(torch.rand(3, generator=gen) + 0.5)
            bn.num_batches_tracked.fill_(5)
        bn.train(mode == "train")
        layer_fixture(os.path.join(out_dir, "batchnorm2d_%s.safetensors" % mode), bn,
                      torch.randn(4, 3, 5, 5, generator=gen) * 2 + 1,
                      {"num_features": 3, "eps": bn.eps, "momentum": bn.momentum, "mode": mode},
                      buffers_after=("running_mean", "running_var", "num_batches_tracked"))


def resnet_layer_fixtures(out_dir):
    """The pieces of resnet18 the other layer fixtures do not cover: a 1x1, stride 2 convolution without
    bias (downsample.0), global average pooling, and a BasicBlock with a downsample (3 -> 4 channels,
    stride 2) in training mode (batch statistics; the running ones updated: after.*) and in eval mode
    (random running statistics)."""
    torch.manual_seed(10)
    gen = torch.Generator().manual_seed(11)
    conv = nn.Conv2d(6, 5, 1, stride=2, bias=False)
    layer_fixture(os.path.join(out_dir, "conv2d_k1_s2_nobias.safetensors"), conv,
                  torch.randn(2, 6, 7, 7, generator=gen),
                  {"in_channels": 6, "out_channels": 5, "kernel_size": 1, "stride": 2, "padding": 0,
                   "bias": 0})
    layer_fixture(os.path.join(out_dir, "adaptive_avgpool2d.safetensors"), nn.AdaptiveAvgPool2d(1),
                  torch.randn(3, 4, 5, 6, generator=gen), {"output_size": 1})
    for mode in ("train", "eval"):
        block = reference_models.BasicBlock(3, 4, 2)
        with torch.no_grad():
            for name, bn in block.named_modules():
                if isinstance(bn, nn.BatchNorm2d):
                    bn.weight.copy_(torch.rand(4, generator=gen) + 0.5)
                    bn.bias.copy_(torch.randn(4, generator=gen))
                    bn.running_mean.copy_(torch.randn(4, generator=gen))
                    bn.running_var.copy_(torch.rand(4, generator=gen) + 0.5)
        block.train(mode == "train")
        buffers = [name for name, _ in block.named_buffers()]
        layer_fixture(os.path.join(out_dir, "basic_block_%s.safetensors" % mode), block,
                      torch.randn(2, 3, 7, 7, generator=gen),
                      {"in_channels": 3, "out_channels": 4, "stride": 2, "mode": mode}, buffers_after=buffers)


def loss_fixture(out_dir):
    gen = torch.Generator().manual_seed(2)
    out = collections.OrderedDict()
    x = (torch.randn(4, 10, generator=gen) * 3).requires_grad_(True)
    y = F.log_softmax(x, dim=1)
    grad_output = torch.randn(y.shape, generator=gen)
    y.backward(grad_output)
    out["log_softmax.input"] = x.detach()
    out["log_softmax.output"] = y
    out["log_softmax.grad_output"] = grad_output
    out["log_softmax.grad_input"] = x.grad
    logits = (torch.randn(6, 10, generator=gen) * 3).requires_grad_(True)
    target = torch.randint(0, 10, (6,), generator=gen)
    loss = F.cross_entropy(logits, target)
    loss.backward()
    out["cross_entropy.logits"] = logits.detach()
    out["cross_entropy.target"] = target
    out["cross_entropy.loss"] = loss.reshape(())
    out["cross_entropy.grad_logits"] = logits.grad
    save_safetensors(os.path.join(out_dir, "losses.safetensors"), out, {"reduction": "mean"})


def optimizer_fixture(out_dir, name, make, metadata):
    """param.<i> (initial), then per step s: grad.<s>.<i> and after.<s>.<i>."""
    gen = torch.Generator().manual_seed(3)
    params = [torch.randn(3, 4, generator=gen).requires_grad_(True),
              torch.randn(5, generator=gen).requires_grad_(True)]
    out = collections.OrderedDict()
    for i, p in enumerate(params):
        out["param.%d" % i] = p.detach().clone()
    opt = make(params)
    for step in range(3):
        for i, p in enumerate(params):
            p.grad = torch.randn(p.shape, generator=gen)
            out["grad.%d.%d" % (step, i)] = p.grad.clone()
        opt.step()
        for i, p in enumerate(params):
            out["after.%d.%d" % (step, i)] = p.detach().clone()
    save_safetensors(os.path.join(out_dir, "optim_%s.safetensors" % name), out, metadata)


def optimizer_fixtures(out_dir):
    optimizer_fixture(out_dir, "sgd_momentum",
                      lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01),
                      {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01, "nesterov": 0})
    optimizer_fixture(out_dir, "sgd_nesterov",
                      lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8, weight_decay=0.02, nesterov=True),
                      {"lr": 0.05, "momentum": 0.8, "dampening": 0.0, "weight_decay": 0.02, "nesterov": 1})
    optimizer_fixture(out_dir, "adam",
                      lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1),
                      {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1})
    optimizer_fixture(out_dir, "adamw",
                      lambda ps: torch.optim.AdamW(ps, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
                      {"lr": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.1})


def autocast_fixtures(out_dir):
    """bf16 autocast (torch.autocast("cpu", dtype=torch.bfloat16)) references for //nn:autocast_fixture_test,
    in layer_fixture's format with the forward and backward run under autocast: autocast_linear (a 64 -> 48
    Linear on [16, 64]), autocast_conv2d (Conv2d 3 -> 8, 3x3, padding 1, on [4, 3, 10, 10]) and
    autocast_small_cnn: conv (1 -> 4, 3x3, padding 1) -> ReLU -> MaxPool2d(2) -> flatten -> fc (64 -> 10)
    on [8, 1, 8, 8] with cross-entropy against "target", storing "loss" and "logits". PyTorch's autocast
    outputs are bf16; they are stored as float32. Gradients of the float32 parameters are float32."""
    torch.manual_seed(20)
    gen = torch.Generator().manual_seed(21)

    def under_autocast(path, module, x, metadata):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            layer_fixture(path, module, x, metadata)

    under_autocast(os.path.join(out_dir, "autocast_linear.safetensors"), nn.Linear(64, 48),
                   torch.randn(16, 64, generator=gen), {"in_features": 64, "out_features": 48})
    under_autocast(os.path.join(out_dir, "autocast_conv2d.safetensors"), nn.Conv2d(3, 8, 3, padding=1),
                   torch.randn(4, 3, 10, 10, generator=gen),
                   {"in_channels": 3, "out_channels": 8, "kernel_size": 3, "stride": 1, "padding": 1})
    conv, fc = nn.Conv2d(1, 4, 3, padding=1), nn.Linear(64, 10)
    x = torch.randn(8, 1, 8, 8, generator=gen)
    target = torch.randint(0, 10, (8,), generator=gen)
    out = collections.OrderedDict(input=x, target=target)
    for pname, t in conv.state_dict().items():
        out["state.conv." + pname] = t.clone()
    for pname, t in fc.state_dict().items():
        out["state.fc." + pname] = t.clone()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = fc(torch.flatten(F.max_pool2d(F.relu(conv(x)), 2), 1))
        loss = F.cross_entropy(logits, target)
    loss.backward()
    out["logits"] = logits.float()
    out["loss"] = loss.float()
    for prefix, module in (("conv.", conv), ("fc.", fc)):
        for pname, p in module.named_parameters():
            out["grad." + prefix + pname] = p.grad
    save_safetensors(os.path.join(out_dir, "autocast_small_cnn.safetensors"), out,
                     {"torch": torch.__version__, "logits_dtype": str(logits.dtype)})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                      "tests", "fixtures"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    layer_fixtures(args.out)
    resnet_layer_fixtures(args.out)
    loss_fixture(args.out)
    torch.manual_seed(0)
    for name in reference_models.MODELS:
        model_fixture(name, reference_models.make_model(name), args.out)
    # CIFAR's input: 3 channels, 32x32, 10 or 100 classes (--dataset=cifar10 / cifar100).
    model_fixture("mlp", reference_models.make_model("mlp", (3, 32, 32), 10), args.out, (3, 32, 32), 10, "cifar10_")
    model_fixture("cnn_bn", reference_models.make_model("cnn_bn", (3, 32, 32), 100), args.out, (3, 32, 32), 100,
                  "cifar100_")
    optimizer_fixtures(args.out)
    autocast_fixtures(args.out)
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out)
                if f.endswith(".safetensors"))
    print("wrote %s (%d bytes of fixtures)" % (os.path.abspath(args.out), total))


if __name__ == "__main__":
    main()
