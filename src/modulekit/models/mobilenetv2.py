"""MobileNetV2 (Sandler et al. 2018) with torchvision's module names: ``mobilenet_v2``.

Plain code, as torchvision writes it; the speed comes from ``Module.compile()`` (the model
compiles itself when built): in eval mode the planner folds each BatchNorm2d into its
convolution, runs the ReLU6s and residual adds in the kernels' epilogues, each inverted
residual block as one depthwise-chain call in row bands and the global average pool inside
the last convolution (``modulekit.compile.rules.conv``).
"""

from __future__ import annotations

from modulekit import nn
from modulekit.module import Module
from modulekit.nn import functional as F

__all__ = ["Conv2dNormActivation", "InvertedResidual", "MobileNetV2", "mobilenet_v2"]


def _make_divisible(v: float, divisor: int, min_value: int | None = None) -> int:
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class Conv2dNormActivation(nn.Sequential):
    """Conv2d, BatchNorm2d and ReLU6 (keys ``0``, ``1``, ``2``)."""

    def __init__(
        self,
        in_planes: int,
        out_planes: int,
        kernel_size: int = 3,
        stride: int = 1,
        groups: int = 1,
        activation: bool = True,
    ) -> None:
        padding = (kernel_size - 1) // 2
        layers = [
            nn.Conv2d(in_planes, out_planes, kernel_size, stride, padding, groups=groups,
                      bias=False),
            nn.BatchNorm2d(out_planes),
        ]
        if activation:
            layers.append(nn.ReLU6(inplace=True))
        super().__init__(*layers)
        self.out_channels = out_planes


class InvertedResidual(Module):
    """1x1 expand (ReLU6), 3x3 depthwise (ReLU6), 1x1 project (linear); residual when the
    stride is 1 and the channel count is unchanged."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"InvertedResidual: stride should be 1 or 2, got {stride}")
        self.stride = stride
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = []
        if expand_ratio != 1:
            layers.append(Conv2dNormActivation(inp, hidden_dim, kernel_size=1))
        layers += [
            Conv2dNormActivation(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim),
            nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(Module):
    """torchvision's MobileNetV2 (width 1.0): ``features``, then ``classifier``.

    Compiled when built (and when unpickled): the first call with a new input signature
    captures ``forward`` and later calls run the planned kernels (``Module.compile``;
    ``model.compile(disable=True)`` runs the layers one by one instead). In eval mode the
    plan folds every BatchNorm2d into its convolution and averages in a fixed order, so its
    results differ from the layer-by-layer run by float32 rounding (about 1e-6 relative).
    """

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, dropout: float = 0.2):
        super().__init__()
        setting = [
            [1, 16, 1, 1],
            [6, 24, 2, 2],
            [6, 32, 3, 2],
            [6, 64, 4, 2],
            [6, 96, 3, 1],
            [6, 160, 3, 2],
            [6, 320, 1, 1],
        ]
        input_channel = _make_divisible(32 * width_mult, 8)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult), 8)
        features = [Conv2dNormActivation(3, input_channel, stride=2)]
        for t, c, n, s in setting:
            output_channel = _make_divisible(c * width_mult, 8)
            for i in range(n):
                features.append(
                    InvertedResidual(input_channel, output_channel, s if i == 0 else 1, t)
                )
                input_channel = output_channel
        features.append(Conv2dNormActivation(input_channel, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout), nn.Linear(self.last_channel, num_classes)
        )
        self.compile()

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self.compile()  # a compiled plan is not pickled: an unpickled copy compiles again

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, (1, 1))
        x = x.reshape(x.shape[0], -1)
        return self.classifier(x)


def mobilenet_v2(num_classes: int = 1000) -> MobileNetV2:
    """MobileNetV2 (width 1.0), torchvision's module names."""
    return MobileNetV2(num_classes)
