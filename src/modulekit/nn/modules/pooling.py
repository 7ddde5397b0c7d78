"""Pooling layers: ``MaxPool2d``, ``AvgPool2d``, ``AdaptiveAvgPool2d``."""

from __future__ import annotations

import numpy as np

from modulekit._ext import _conv
from modulekit.module import Module

__all__ = ["AdaptiveAvgPool2d", "AvgPool2d", "MaxPool2d"]


def _checked(layer: Module, fn, *args):
    try:
        return fn(*args)
    except ValueError as exc:
        raise ValueError(f"{layer._get_name()}({layer.extra_repr()}): {exc}") from None


class MaxPool2d(Module):
    """2-D max pooling as ``torch.nn.MaxPool2d`` (NaN propagates; ``ceil_mode``'s last window
    must start inside the input or its left padding). ``return_indices`` is not supported."""

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        dilation=1,
        return_indices=False,
        ceil_mode=False,
    ) -> None:
        super().__init__()
        if return_indices:
            raise NotImplementedError("MaxPool2d: return_indices=True is not supported")
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = False
        self.ceil_mode = bool(ceil_mode)

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )

    def forward(self, input) -> np.ndarray:
        return _checked(
            self,
            _conv.max_pool2d,
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            self.ceil_mode,
        )


class AvgPool2d(Module):
    """2-D average pooling as ``torch.nn.AvgPool2d``."""

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        ceil_mode=False,
        count_include_pad=True,
        divisor_override=None,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = bool(ceil_mode)
        self.count_include_pad = bool(count_include_pad)
        self.divisor_override = divisor_override

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"

    def forward(self, input) -> np.ndarray:
        return _checked(
            self,
            _conv.avg_pool2d,
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )


class AdaptiveAvgPool2d(Module):
    """2-D adaptive average pooling to ``output_size`` (int, or pair with None = keep)."""

    def __init__(self, output_size) -> None:
        super().__init__()
        self.output_size = output_size

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"

    def forward(self, input) -> np.ndarray:
        return _checked(self, _conv.adaptive_avg_pool2d, input, self.output_size)
