"""ResNet (He et al. 2015) with torchvision's module names: ``resnet18``, ``resnet50``."""

from __future__ import annotations

import numpy as np

from modulekit import module as _module
from modulekit import nn
from modulekit.module import Module
from modulekit.nn._input import as_input
from modulekit.nn.modules.batchnorm import BatchNorm2d
from modulekit.nn.modules.conv import (
    Conv2d,
    _folded_activation,
    _maxpool_args,
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

    def _fusions(self):
        yield self.conv1, self.bn1, "relu"

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("_forward_plan", None)  # kernel objects, re-planned on demand
        return state

    def _fuse(self) -> None:
        """(``initialize()``) In eval mode, fold each Conv2d + BatchNorm2d pair now."""
        prefold(self)

    def _plan_forward(self):
        """Check every layer now and plan the forward as the folded kernels' calls:
        ``(stem, pool, blocks, avgpool, fc)`` with ``stem`` the stem's folded kernel and
        ``pool`` its max pool's arguments (``PackedConv2d.forward_maxpool``), ``blocks`` one
        ``(downsample kernel or None, block kernels)`` per residual block, and the head's
        ``forward`` methods. None (run the layers as modules) when a module inside the model
        has hooks, trains or is not the type built here, or a norm has no running statistics,
        where :func:`conv_bn_act` would not fold."""
        m = self._modules
        for module in self.modules():
            if module is not self and (module._has_hooks or module.training):
                return None
        pool, avgpool, fc = m["maxpool"], m["avgpool"], m["fc"]
        if (_folded_activation(m["conv1"], m["bn1"], m["relu"]) != "relu"
                or not _plain_maxpool(pool) or type(avgpool) is not AdaptiveAvgPool2d
                or type(fc) is not nn.Linear):
            return None
        blocks = []
        for name in ("layer1", "layer2", "layer3", "layer4"):
            layer = m[name]
            if type(layer) is not nn.Sequential:
                return None
            for block in layer._modules.values():
                if type(block) not in (BasicBlock, Bottleneck):
                    return None
                bm = block._modules
                ds = block.downsample
                if ds is not None:
                    pair = tuple(ds._modules.values())
                    if type(ds) is not nn.Sequential or len(pair) != 2 or \
                            _folded_activation(pair[0], pair[1], None) is not None:
                        return None
                    ds = pair[0]._fused_packed(pair[1], None)
                kernels = []
                for i in range(1, 4 if type(block) is Bottleneck else 3):
                    conv, bn = bm[f"conv{i}"], bm[f"bn{i}"]
                    if _folded_activation(conv, bn, bm["relu"]) != "relu":
                        return None
                    kernels.append(conv._fused_packed(bn, "relu"))
                blocks.append((ds, tuple(kernels)))
        stem = m["conv1"]._fused_packed(m["bn1"], "relu")
        return stem, _maxpool_args(pool), tuple(blocks), avgpool.forward, fc.forward

    def forward(self, x):
        """The stem (convolution, norm, ReLU and max pool as one fused call where
        ``PackedConv2d.forward_maxpool`` can), the four stages, the pool and ``fc``.

        In eval mode the layers are checked once and the folded kernels' calls kept
        (``_plan_forward``) while the structure epoch (``modulekit.module._epoch``) is the
        one they were planned at, so a call compares one integer instead of looking up and
        checking each block's modules (about 3 us per block). The plan runs the kernels the
        blocks run themselves, so the result is the same bit for bit. A hook or the training
        flag anywhere inside, or input that is not a 4-D ndarray, runs the layers as modules.
        """
        x = as_input(x, type(self).__name__)
        if x.ndim == 4:
            d = self.__dict__
            plan = d.get("_forward_plan")
            if plan is None or plan[0] != _module._epoch:
                plan = (_module._epoch, self._plan_forward())
                d["_forward_plan"] = plan
            if plan[1] is not None:
                try:
                    return _run_plan(plan[1], x)
                except ValueError:
                    pass  # bad input: the layers below raise the error, naming the layer
        x = conv_bn_act_maxpool(self.conv1, self.bn1, self.relu, self.maxpool, x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.avgpool(x)
        return self.fc(np.reshape(x, (x.shape[0], -1)))


def _run_plan(plan, x):
    """ResNet's forward as ``ResNet._plan_forward`` planned it."""
    stem, pool, blocks, avgpool, fc = plan
    x = stem.forward_maxpool(x, "relu", *pool)
    for ds, kernels in blocks:
        identity = x if ds is None else ds.forward(x)
        for k in kernels[:-1]:
            x = k.forward(x, "relu")
        x = kernels[-1].forward(x, "relu", identity)
    x = avgpool(x)
    return fc(np.reshape(x, (x.shape[0], -1)))


def resnet18(num_classes: int = 1000) -> ResNet:
    """ResNet-18 (BasicBlock, [2, 2, 2, 2]), torchvision's module names."""
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes)


def resnet50(num_classes: int = 1000) -> ResNet:
    """ResNet-50 (Bottleneck, [3, 4, 6, 3]), torchvision's module names."""
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes)
