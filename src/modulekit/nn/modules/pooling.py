"""Pooling layers: ``MaxPool2d``, ``AvgPool2d``, ``AdaptiveAvgPool2d``."""

from __future__ import annotations

import numpy as np

from modulekit._ext import _conv
from modulekit.module import Module
from modulekit.nn import _pool
from modulekit.nn._input import as_input

__all__ = ["AdaptiveAvgPool2d", "AvgPool2d", "MaxPool2d"]


def _checked(layer: Module, fn, input, *args):
    x = as_input(input, layer._get_name())
    try:
        return fn(x, *args)
    except ValueError as exc:
        raise ValueError(f"{layer._get_name()}({layer.extra_repr()}): {exc}") from None


def _check_window(name: str, kernel_size, stride, padding, dilation) -> None:
    """Validate a pooling window at construction (types, signs, ``_conv.MAX_WINDOW``, padding
    at most half the kernel): a ``ValueError`` / ``TypeError`` naming the parameter."""
    _conv._pool_args(name, kernel_size, stride, padding, dilation)


class MaxPool2d(Module):
    """2-D max pooling as ``torch.nn.MaxPool2d`` (NaN propagates; ``ceil_mode``'s last window
    must start inside the input or its left padding). ``return_indices=True`` returns
    ``(values, indices)`` (int64 flat positions within each (sample, channel) plane, as torch)
    from the N-d pooling of ``modulekit.nn._pool``; without it the 2-D C kernel runs."""

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
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = bool(return_indices)
        self.ceil_mode = bool(ceil_mode)
        _check_window("MaxPool2d", kernel_size, stride, padding, dilation)

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )

    def forward(self, input) -> np.ndarray:
        if self.return_indices:
            return _pool.max_pool(input, 2, self.kernel_size, self.stride, self.padding,
                                  self.dilation, self.ceil_mode, True, what="MaxPool2d")
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
        _check_window("AvgPool2d", kernel_size, stride, padding, 1)
        if divisor_override is not None and not 0 < abs(int(divisor_override)) <= _conv.MAX_WINDOW:
            raise ValueError(
                f"AvgPool2d: divisor_override must be non-zero and at most {_conv.MAX_WINDOW} "
                f"(2**20) in magnitude, got {divisor_override!r}"
            )

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
        sizes = (output_size,) * 2 if isinstance(output_size, (int, np.integer)) else output_size
        try:
            sizes = tuple(sizes)
        except TypeError:
            sizes = ()
        if len(sizes) != 2 or not all(
            s is None or (isinstance(s, (int, np.integer)) and not isinstance(s, bool)
                          and 1 <= s <= _conv.MAX_WINDOW)
            for s in sizes
        ):
            raise ValueError(
                f"AdaptiveAvgPool2d: output_size must be an int or a pair of ints (or None) "
                f"between 1 and {_conv.MAX_WINDOW} (2**20), got {output_size!r}"
            )
        self.output_size = output_size

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"

    def forward(self, input) -> np.ndarray:
        return _checked(self, _conv.adaptive_avg_pool2d, input, self.output_size)
