"""Pooling layers beyond the 2-D ones of ``pooling.py``: ``MaxPool1d/3d``, ``AvgPool1d/3d``,
``AdaptiveAvgPool1d/3d``, ``AdaptiveMaxPool1d/2d/3d``, ``LPPool1d/2d/3d``,
``MaxUnpool1d/2d/3d``; ``FractionalMaxPool2d/3d`` refuse (random windows).

They run the separable N-d pooling of :mod:`modulekit.nn._pool` (torch's semantics: NaN
propagates through max pooling, ties take the first maximum, indices are flat positions within
each (sample, channel) plane). Geometry is checked at construction and errors name the layer.
"""

from __future__ import annotations

import numpy as np

from modulekit.module import Module
from modulekit.nn import _pool

__all__ = [
    "AdaptiveAvgPool1d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d", "AvgPool1d", "AvgPool3d", "FractionalMaxPool2d",
    "FractionalMaxPool3d", "LPPool1d", "LPPool2d", "LPPool3d", "MaxPool1d", "MaxPool3d",
    "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d",
]


def _check_window(d, what, kernel_size, stride, padding=0, dilation=1, check_pad=True):
    _pool._window_args(d, kernel_size, stride, padding, dilation, what, check_pad=check_pad)


class _MaxPoolNd(Module):
    _d = 0

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False) -> None:
        super().__init__()
        _check_window(self._d, self._get_name(), kernel_size, stride, padding, dilation)
        self.kernel_size = kernel_size
        self.stride = stride if (stride is not None) else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = bool(return_indices)
        self.ceil_mode = bool(ceil_mode)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")

    def forward(self, input):
        return _pool.max_pool(input, self._d, self.kernel_size, self.stride, self.padding,
                              self.dilation, self.ceil_mode, self.return_indices,
                              what=self._get_name())


class MaxPool1d(_MaxPoolNd):
    """1-D max pooling over ``(N, C, L)`` or ``(C, L)``, as ``torch.nn.MaxPool1d``;
    ``return_indices=True`` returns ``(values, indices)``."""

    _d = 1


class MaxPool3d(_MaxPoolNd):
    """3-D max pooling over ``(N, C, D, H, W)`` or ``(C, D, H, W)``, as
    ``torch.nn.MaxPool3d``; ``return_indices=True`` returns ``(values, indices)``."""

    _d = 3


class AvgPool1d(Module):
    """1-D average pooling, as ``torch.nn.AvgPool1d``."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True) -> None:
        super().__init__()
        _check_window(1, "AvgPool1d", kernel_size, stride, padding)
        self.kernel_size = _pool.ntuple(kernel_size, 1, "kernel_size", "AvgPool1d")
        self.stride = _pool.ntuple(stride if stride is not None else kernel_size, 1, "stride",
                                   "AvgPool1d")
        self.padding = _pool.ntuple(padding, 1, "padding", "AvgPool1d")
        self.ceil_mode = bool(ceil_mode)
        self.count_include_pad = bool(count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"

    def forward(self, input):
        return _pool.avg_pool(input, 1, self.kernel_size, self.stride, self.padding,
                              self.ceil_mode, self.count_include_pad, what="AvgPool1d")


class AvgPool3d(Module):
    """3-D average pooling, as ``torch.nn.AvgPool3d`` (``divisor_override`` replaces the
    window size as divisor)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None) -> None:
        super().__init__()
        _check_window(3, "AvgPool3d", kernel_size, stride, padding)
        if divisor_override is not None and (
                isinstance(divisor_override, bool)
                or not isinstance(divisor_override, (int, np.integer)) or divisor_override == 0):
            raise ValueError(
                f"AvgPool3d: divisor_override must be a non-zero int, got {divisor_override!r}")
        self.kernel_size = kernel_size
        self.stride = stride if (stride is not None) else kernel_size
        self.padding = padding
        self.ceil_mode = bool(ceil_mode)
        self.count_include_pad = bool(count_include_pad)
        self.divisor_override = divisor_override

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"

    def forward(self, input):
        return _pool.avg_pool(input, 3, self.kernel_size, self.stride, self.padding,
                              self.ceil_mode, self.count_include_pad, self.divisor_override,
                              what="AvgPool3d")


class _AdaptivePoolNd(Module):
    _d = 0

    def __init__(self, output_size) -> None:
        super().__init__()
        _pool.ntuple(output_size, self._d, "output_size", self._get_name(), allow_none=True,
                     minimum=1)
        self.output_size = output_size

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptivePoolNd):
    """1-D adaptive average pooling to ``output_size``, as ``torch.nn.AdaptiveAvgPool1d``."""

    _d = 1

    def forward(self, input):
        return _pool.adaptive_avg_pool(input, 1, self.output_size, what="AdaptiveAvgPool1d")


class AdaptiveAvgPool3d(_AdaptivePoolNd):
    """3-D adaptive average pooling to ``output_size`` (None keeps a size)."""

    _d = 3

    def forward(self, input):
        return _pool.adaptive_avg_pool(input, 3, self.output_size, what="AdaptiveAvgPool3d")


class _AdaptiveMaxPoolNd(_AdaptivePoolNd):
    def __init__(self, output_size, return_indices=False) -> None:
        super().__init__(output_size)
        self.return_indices = bool(return_indices)

    def forward(self, input):
        return _pool.adaptive_max_pool(input, self._d, self.output_size, self.return_indices,
                                       what=self._get_name())


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """1-D adaptive max pooling, as ``torch.nn.AdaptiveMaxPool1d``."""

    _d = 1


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """2-D adaptive max pooling (None keeps a size), as ``torch.nn.AdaptiveMaxPool2d``."""

    _d = 2


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """3-D adaptive max pooling (None keeps a size), as ``torch.nn.AdaptiveMaxPool3d``."""

    _d = 3


class _LPPoolNd(Module):
    _d = 0

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False) -> None:
        super().__init__()
        if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float, np.number)):
            raise TypeError(f"{self._get_name()}: norm_type must be a number, got "
                            f"{norm_type!r}")
        _check_window(self._d, self._get_name(), kernel_size, stride)
        self.norm_type = norm_type
        self.kernel_size = kernel_size
        self.stride = stride
        self.ceil_mode = bool(ceil_mode)

    def extra_repr(self) -> str:
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, ceil_mode={self.ceil_mode}")

    def forward(self, input):
        return _pool.lp_pool(input, self._d, self.norm_type, self.kernel_size, self.stride,
                             self.ceil_mode, what=self._get_name())


class LPPool1d(_LPPoolNd):
    """1-D power-average pooling, as ``torch.nn.LPPool1d``."""

    _d = 1


class LPPool2d(_LPPoolNd):
    """2-D power-average pooling, as ``torch.nn.LPPool2d``."""

    _d = 2


class LPPool3d(_LPPoolNd):
    """3-D power-average pooling, as ``torch.nn.LPPool3d``."""

    _d = 3


class _MaxUnpoolNd(Module):
    _d = 0

    def __init__(self, kernel_size, stride=None, padding=0) -> None:
        super().__init__()
        what = self._get_name()
        d = self._d
        self.kernel_size = _pool.ntuple(kernel_size, d, "kernel_size", what, minimum=1)
        self.stride = _pool.ntuple(stride if stride is not None else kernel_size, d, "stride",
                                   what, minimum=1)
        self.padding = _pool.ntuple(padding, d, "padding", what, minimum=0)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"

    def forward(self, input, indices, output_size=None):
        return _pool.max_unpool(input, indices, self._d, self.kernel_size, self.stride,
                                self.padding, output_size, what=self._get_name())


class MaxUnpool1d(_MaxUnpoolNd):
    """Partial inverse of ``MaxPool1d``: ``forward(input, indices, output_size=None)``."""

    _d = 1


class MaxUnpool2d(_MaxUnpoolNd):
    """Partial inverse of ``MaxPool2d``: ``forward(input, indices, output_size=None)``."""

    _d = 2


class MaxUnpool3d(_MaxUnpoolNd):
    """Partial inverse of ``MaxPool3d``: ``forward(input, indices, output_size=None)``."""

    _d = 3


class _FractionalMaxPoolNd(Module):
    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                 _random_samples=None) -> None:
        super().__init__()
        raise NotImplementedError(
            f"{self._get_name()} is not supported: its pooling windows are drawn at random on "
            f"every call (torch's _random_samples), so its inference output is not reproducible;"
            f" use MaxPool or AdaptiveMaxPool for deterministic pooling")


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    """Refused at construction: random pooling windows (see docs/api.md)."""


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    """Refused at construction: random pooling windows (see docs/api.md)."""
