"""The PyTorch side of //tests:weights_interop_test. A PATH ending in .pt is a torch.save file (any
PyTorch from 1.13); any other a safetensors file (Hugging Face's safetensors on PYTHONPATH: tools/setup.sh
installs it for /usr/bin/python3 into /opt/ddpengine-py).

    weights_interop.py save MODEL PATH --steps=N   # seed 0, train N SGD steps, save the state_dict
    weights_interop.py eval MODEL PATH [--expect_batches=N]
        # load + load_state_dict(strict=True); prints "torch test_acc A"; with --expect_batches,
        # checks every BatchNorm's num_batches_tracked is N and its running statistics were trained

The data are the Fashion-MNIST IDX files, normalised as data/fashion_mnist.cc does.
"""

import argparse
import gzip
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import reference_models  # noqa: E402

DATA_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STDDEV = 0.2860, 0.3530  # data/fashion_mnist.h FashionMnistNormalization


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8)
    return data.reshape(dims)


def load_split(prefix):
    def path(stem):
        p = os.path.join(DATA_DIR, stem)
        return p + ".gz" if os.path.exists(p + ".gz") else p
    images = read_idx(path(prefix + "-images-idx3-ubyte")).float()
    labels = read_idx(path(prefix + "-labels-idx1-ubyte")).long()
    scale = 1.0 / (255.0 * STDDEV)
    shift = MEAN / STDDEV
    return (images * scale - shift).unsqueeze(1), labels


def save(args):
    torch.manual_seed(0)
    model = reference_models.make_model(args.model)
    x, y = load_split("train")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    for step in range(args.steps):
        lo = (step * 64) % (x.shape[0] - 64)
        opt.zero_grad()
        loss = F.cross_entropy(model(x[lo:lo + 64]), y[lo:lo + 64])
        loss.backward()
        opt.step()
    if args.path.endswith(".pt"):
        torch.save(model.state_dict(), args.path)
    else:
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, args.path)
    print("torch saved %s after %d steps" % (args.path, args.steps))


def evaluate(args):
    model = reference_models.make_model(args.model)
    if args.path.endswith(".pt"):
        state = torch.load(args.path, weights_only=True)  # only tensors and containers, no code
    else:
        from safetensors.torch import load_file
        state = load_file(args.path)
    model.load_state_dict(state, strict=True)  # every parameter and buffer, nothing extra
    if args.expect_batches is not None:
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                n = int(module.num_batches_tracked)
                if n != args.expect_batches:
                    sys.exit("FAIL: %s.num_batches_tracked is %d, expected %d" % (name, n, args.expect_batches))
                if torch.all(module.running_mean == 0) or torch.all(module.running_var == 1):
                    sys.exit("FAIL: %s running statistics are still the initial ones" % name)
        print("torch buffers ok")
    x, y = load_split("t10k")
    model.eval()
    correct = 0
    with torch.no_grad():
        for lo in range(0, x.shape[0], 1000):
            correct += int((model(x[lo:lo + 1000]).argmax(1) == y[lo:lo + 1000]).sum())
    print("torch test_acc %.4f" % (correct / x.shape[0]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=("save", "eval"))
    parser.add_argument("model", choices=reference_models.MODELS)
    parser.add_argument("path")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--expect_batches", type=int, default=None)
    args = parser.parse_args()
    torch.set_num_threads(2)
    save(args) if args.command == "save" else evaluate(args)


if __name__ == "__main__":
    main()
