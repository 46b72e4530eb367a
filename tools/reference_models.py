"""The PyTorch twins of nn/models.cc's models (mlp, cnn, cnn_bn, resnet18), shared by tools/gen_fixtures.py
(the fixtures //nn:pytorch_fixture_test compares against) and bench/pytorch_reference.py (the throughput
reference).

Same layers, in the same order and under the same attribute names (fc1, conv1, bn1, ...) as the C++
models, so state dicts and safetensors files move between the two engines unchanged. resnet18 is written
in plain torch (no torchvision needed) with torchvision's module tree: its state dict has the keys, order
and shapes of torchvision.models.resnet18(num_classes=10) after conv1 -> Conv2d(1, 64, 3, 1, 1,
bias=False) and maxpool -> Identity (nn/resnet_interchange.py checks this against torchvision when it is
installed). Needs torch (run with /usr/bin/python3, which has Debian's PyTorch 1.13, or PyTorch 2.x).

    import reference_models              # tools/ on sys.path (bench/pytorch_reference.py adds it)
    model = reference_models.make_model("cnn_bn")
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = ("mlp", "cnn", "cnn_bn", "resnet18")


class Mlp(nn.Module):
    """C*H*W (784) -> 512 -> 256 -> classes (10) with ReLUs (nn/models.cc "mlp")."""

    def __init__(self, image_shape=(1, 28, 28), num_classes=10):
        super().__init__()
        self.fc1 = nn.Linear(image_shape[0] * image_shape[1] * image_shape[2], 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, num_classes)

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class Cnn(nn.Module):
    """Two 3x3 convolutions (32 and 64 channels, padding 1), each followed by ReLU and 2x2 max pooling,
    then 64*(H/4)*(W/4) (3136) -> 128 -> classes (10) (nn/models.cc "cnn"); with batch_norm, a BatchNorm2d
    after each convolution ("cnn_bn")."""

    def __init__(self, batch_norm=False, image_shape=(1, 28, 28), num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(image_shape[0], 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32) if batch_norm else None
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64) if batch_norm else None
        self.fc1 = nn.Linear(64 * (image_shape[1] // 4) * (image_shape[2] // 4), 128)
        self.fc2 = nn.Linear(128, num_classes)

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


class BasicBlock(nn.Module):
    """torchvision's BasicBlock (nn/resnet.h): two 3x3 convolutions with BatchNorm, a residual add, and a
    1x1 convolution + BatchNorm "downsample" when the stride or the channel count changes."""

    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                                            nn.BatchNorm2d(out_channels))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """ResNet-18 for 28x28 one-channel images (nn/models.cc "resnet18"): 3x3 stem without max pool, four
    stages of two BasicBlocks (64, 128, 256, 512 channels; stride 2 from the second), global average
    pooling, fc 512 -> 10. Initialised as torchvision's ResNet (kaiming_normal_ fan_out for every
    convolution)."""

    def __init__(self, in_channels=1, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.Identity()
        channels = 64
        for stage, width in enumerate((64, 128, 256, 512)):
            stride = 1 if stage == 0 else 2
            blocks = [BasicBlock(channels, width, stride), BasicBlock(width, width, 1)]
            setattr(self, "layer%d" % (stage + 1), nn.Sequential(*blocks))
            channels = width
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def make_model(name, image_shape=(1, 28, 28), num_classes=10):
    """A freshly initialised model by nn/models.cc's name (one of MODELS) for images of `image_shape`
    (channels, height, width) in `num_classes` classes, as MakeModel's ModelInput; ValueError for another
    name."""
    if name == "mlp":
        return Mlp(image_shape, num_classes)
    if name == "cnn":
        return Cnn(False, image_shape, num_classes)
    if name == "cnn_bn":
        return Cnn(True, image_shape, num_classes)
    if name == "resnet18":
        return ResNet18(image_shape[0], num_classes)
    raise ValueError("unknown model %r (expected one of %s)" % (name, ", ".join(MODELS)))
