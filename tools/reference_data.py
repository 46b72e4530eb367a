"""Fashion-MNIST for the PyTorch reference scripts (bench/pytorch_reference.py, bench/pytorch_accuracy.py):
the IDX files of Debian's dataset-fashion-mnist package, normalised with the dataset's mean and standard
deviation (data/fashion_mnist.h) in float32."""
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
