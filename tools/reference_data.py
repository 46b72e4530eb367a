"""The data sets of train/train's --dataset for the PyTorch reference scripts (bench/pytorch_reference.py,
bench/pytorch_accuracy.py), normalised as data/image_dataset_catalog.h does, in float32: Fashion-MNIST from
the IDX files of Debian's dataset-fashion-mnist package (load_split), CIFAR-10 from a folder of its binary
version (load_cifar10)."""
import gzip
import os
import struct

import numpy as np
import torch

DATA_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STDDEV = 0.2860, 0.3530


def load_split(prefix, limit=None):
    """Images [n, 1, 28, 28] float32 and int64 labels of split `prefix` ("train" or "t10k"), the first
    `limit` of them when given."""
    with gzip.open(os.path.join(DATA_DIR, prefix + "-images-idx3-ubyte.gz")) as f:
        _, n, h, w = struct.unpack(">IIII", f.read(16))
        images = np.frombuffer(f.read(), dtype=np.uint8).reshape(n, 1, h, w)[:limit]
    with gzip.open(os.path.join(DATA_DIR, prefix + "-labels-idx1-ubyte.gz")) as f:
        f.read(8)
        labels = np.frombuffer(f.read(), dtype=np.uint8)[:limit]
    x = (images.astype(np.float32) / 255.0 - MEAN) / STDDEV
    return torch.from_numpy(x), torch.from_numpy(labels.astype(np.int64))


CIFAR10_MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32).reshape(1, 3, 1, 1)
CIFAR10_STDDEV = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32).reshape(1, 3, 1, 1)
CIFAR10_FILES = {"train": ["data_batch_%d.bin" % i for i in range(1, 6)], "test": ["test_batch.bin"]}


def load_cifar10(data_dir, split, limit=None):
    """Images [n, 3, 32, 32] float32 and int64 labels of CIFAR-10's `split` ("train" or "test") from the
    binary version's files in `data_dir` (records of a label byte and 3072 pixel bytes, data/cifar.h), the
    first `limit` of them when given."""
    records = b"".join(open(os.path.join(data_dir, name), "rb").read() for name in CIFAR10_FILES[split])
    table = np.frombuffer(records, dtype=np.uint8).reshape(-1, 3073)[:limit]
    images = table[:, 1:].reshape(-1, 3, 32, 32)
    x = (images.astype(np.float32) / 255.0 - CIFAR10_MEAN) / CIFAR10_STDDEV
    return torch.from_numpy(x), torch.from_numpy(table[:, 0].astype(np.int64))
