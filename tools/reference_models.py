"""The PyTorch twins of nn/models.cc's models (mlp, cnn, cnn_bn), shared by tools/gen_fixtures.py (the
fixtures //nn:pytorch_fixture_test compares against) and bench/pytorch_reference.py (the throughput
reference).

Same layers, in the same order and under the same attribute names (fc1, conv1, bn1, ...) as the C++
models, so state dicts and safetensors files move between the two engines unchanged. Needs torch (run
with /usr/bin/python3, which has Debian's PyTorch 1.13).

    import reference_models              # tools/ on sys.path (bench/pytorch_reference.py adds it)
    model = reference_models.make_model("cnn_bn")
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = ("mlp", "cnn", "cnn_bn")


class Mlp(nn.Module):
    """784 -> 512 -> 256 -> 10 with ReLUs (nn/models.cc "mlp")."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class Cnn(nn.Module):
    """Two 3x3 convolutions (32 and 64 channels, padding 1), each followed by ReLU and 2x2 max pooling,
    then 3136 -> 128 -> 10 (nn/models.cc "cnn"); with batch_norm, a BatchNorm2d after each convolution
    ("cnn_bn")."""

    def __init__(self, batch_norm=False):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32) if batch_norm else None
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64) if batch_norm else None
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        if self.bn1 is not None:
            x = self.bn1(x)
        x = F.max_pool2d(F.relu(x), 2)
        x = self.conv2(x)
        if self.bn2 is not None:
            x = self.bn2(x)
        x = F.max_pool2d(F.relu(x), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return self.fc2(x)


def make_model(name):
    """A freshly initialised model by nn/models.cc's name (one of MODELS); ValueError for another."""
    if name == "mlp":
        return Mlp()
    if name == "cnn":
        return Cnn()
    if name == "cnn_bn":
        return Cnn(batch_norm=True)
    raise ValueError("unknown model %r (expected one of %s)" % (name, ", ".join(MODELS)))
