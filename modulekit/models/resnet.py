"""ResNet (He et al. 2015) with torchvision's module names: ``resnet18``, ``resnet50``."""

from __future__ import annotations

import numpy as np

from modulekit import nn
from modulekit.module import Module
from modulekit.nn.modules.batchnorm import BatchNorm2d
from modulekit.nn.modules.conv import (
    Conv2d,
    _plain_maxpool,
    conv_bn_act,
    conv_bn_act_maxpool,
    prefold,
)
from modulekit.nn.modules.pooling import AdaptiveAvgPool2d, MaxPool2d

__all__ = ["BasicBlock", "Bottleneck", "ResNet", "resnet18", "resnet50"]


def conv3x3(in_planes: int, out_planes: int, stride: int = 1, groups: int = 1, dilation: int = 1):
    return Conv2d(in_planes, out_planes, 3, stride, dilation, dilation, groups, bias=False)


def conv1x1(in_planes: int, out_planes: int, stride: int = 1):
    return Conv2d(in_planes, out_planes, 1, stride, bias=False)


class BasicBlock(Module):
    """Two 3x3 convolutions with a residual connection (ResNet-18/34)."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample=None) -> None:
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def _fusions(self):
        yield self.conv1, self.bn1, "relu"
        yield self.conv2, self.bn2, "relu"
        if self.downsample is not None:
            yield self.downsample[0], self.downsample[1], None

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = conv_bn_act(self.conv1, self.bn1, self.relu, x)
        return conv_bn_act(self.conv2, self.bn2, self.relu, out, residual=identity)


class Bottleneck(Module):
    """1x1 reduce, 3x3 (stride here, as torchvision's V1.5), 1x1 expand; residual."""

    expansion = 4

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int = 1,
        downsample=None,
        groups: int = 1,
        base_width: int = 64,
    ) -> None:
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = BatchNorm2d(width)
        self.conv2 = conv3x3(width, width, stride, groups)
        self.bn2 = BatchNorm2d(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def _fusions(self):
        yield self.conv1, self.bn1, "relu"
        yield self.conv2, self.bn2, "relu"
        yield self.conv3, self.bn3, "relu"
        if self.downsample is not None:
            yield self.downsample[0], self.downsample[1], None

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = conv_bn_act(self.conv1, self.bn1, self.relu, x)
        out = conv_bn_act(self.conv2, self.bn2, self.relu, out)
        return conv_bn_act(self.conv3, self.bn3, self.relu, out, residual=identity)


class ResNet(Module):
    """torchvision's ResNet: stem, four stages of ``block``, global average pool, ``fc``."""

    def __init__(self, block, layers, num_classes: int = 1000) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block, planes: int, blocks: int, stride: int = 1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    #: (conv1, bn1, relu, maxpool) when initialize() planned the stem's conv -> max pool as
    #: one fused call (the modules it was planned for), else None
    _stem_plan = None

    def _fusions(self):
        yield self.conv1, self.bn1, "relu"

    def _fuse(self) -> None:
        """Plan the stem: Conv2d + BatchNorm2d + ReLU + MaxPool2d as one fused call (the
        max pool reads the convolution's row bands from per-thread buffers), used while those
        modules are unchanged, in eval mode and none of them has hooks."""
        stem = (self.conv1, self.bn1, self.relu, self.maxpool)
        ok = (isinstance(self.conv1, Conv2d) and isinstance(self.bn1, BatchNorm2d) and
              _plain_maxpool(self.maxpool))
        self.__dict__["_stem_plan"] = stem if ok else None

    def _stem_fused(self) -> bool:
        plan = self._stem_plan
        return (plan is not None and plan[0] is self.conv1 and plan[1] is self.bn1 and
                plan[2] is self.relu and plan[3] is self.maxpool and not self.bn1.training and
                not any(m._has_hooks for m in plan))

    def initialize(self):
        """Pack every layer, plan the stem's fused conv -> max pool and, in eval mode, fold
        each Conv2d + BatchNorm2d pair now."""
        super().initialize()
        return prefold(self)

    def forward(self, x):
        if self._stem_fused():
            x = conv_bn_act_maxpool(self.conv1, self.bn1, "relu", self.maxpool, x)
        else:
            x = self.maxpool(conv_bn_act(self.conv1, self.bn1, self.relu, x))
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.avgpool(x)
        return self.fc(np.reshape(x, (x.shape[0], -1)))


def resnet18(num_classes: int = 1000) -> ResNet:
    """ResNet-18 (BasicBlock, [2, 2, 2, 2]), torchvision's module names."""
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes)


def resnet50(num_classes: int = 1000) -> ResNet:
    """ResNet-50 (Bottleneck, [3, 4, 6, 3]), torchvision's module names."""
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes)
