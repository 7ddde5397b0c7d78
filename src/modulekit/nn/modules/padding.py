"""Padding layers: ``ZeroPad1d/2d/3d``, ``ConstantPad1d/2d/3d``, ``ReflectionPad1d/2d/3d``,
``ReplicationPad1d/2d/3d``, ``CircularPad1d/2d/3d`` over :func:`modulekit.nn.functional.pad`
(torch's ``padding`` attribute: a tuple of ``2 * d`` ints, last dimension first; negative values
crop). Each ``d``-D layer takes a ``(C, *spatial)`` or ``(N, C, *spatial)`` input (the constant
ones any input of at least ``d`` dimensions) and keeps floating dtypes (integer and bool
inputs give float32)."""

from __future__ import annotations

import numpy as np

from modulekit.module import Module
from modulekit.nn import _shape
from modulekit.nn._input import as_input

__all__ = [
    "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d",
    "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d",
    "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "ZeroPad1d", "ZeroPad2d",
    "ZeroPad3d",
]


def _padding(value, d: int, what: str) -> tuple[int, ...]:
    n = 2 * d
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),) * n
    try:
        items = tuple(value)
    except TypeError:
        items = None
    if items is None or len(items) != n or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
        raise ValueError(f"{what}: padding must be an int or a tuple of {n} ints, got {value!r}")
    return tuple(int(v) for v in items)


class _PadNd(Module):
    _d = 0
    _mode = "constant"

    def __init__(self, padding) -> None:
        super().__init__()
        self.padding = _padding(padding, self._d, self._get_name())

    def _check_dims(self, x: np.ndarray) -> None:
        d = self._d
        if x.ndim not in (d + 1, d + 2):
            raise ValueError(
                f"{self._get_name()}: expected a {d + 1}-D or {d + 2}-D input, got shape "
                f"{tuple(x.shape)}")

    def extra_repr(self) -> str:
        return f"{self.padding}"

    def forward(self, input):
        x = as_input(input, self._get_name())
        self._check_dims(x)
        return _shape.pad(x, self.padding, self._mode, what=self._get_name())


class _ConstantPadNd(_PadNd):
    def __init__(self, padding, value) -> None:
        super().__init__(padding)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
            raise TypeError(f"{self._get_name()}: value must be a number, got {value!r}")
        self.value = value

    def _check_dims(self, x: np.ndarray) -> None:
        if x.ndim < self._d:
            raise ValueError(
                f"{self._get_name()}: expected an input of at least {self._d} dimension(s), got "
                f"shape {tuple(x.shape)}")

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"

    def forward(self, input):
        x = as_input(input, self._get_name())
        self._check_dims(x)
        return _shape.pad(x, self.padding, "constant", self.value, what=self._get_name())


class ConstantPad1d(_ConstantPadNd):
    """Pad the last dimension with ``value``."""

    _d = 1


class ConstantPad2d(_ConstantPadNd):
    """Pad the last two dimensions with ``value``."""

    _d = 2


class ConstantPad3d(_ConstantPadNd):
    """Pad the last three dimensions with ``value``."""

    _d = 3


class _ZeroPadNd(_ConstantPadNd):
    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad1d(_ZeroPadNd):
    """Pad the last dimension with zeros."""

    _d = 1


class ZeroPad2d(_ZeroPadNd):
    """Pad the last two dimensions with zeros."""

    _d = 2


class ZeroPad3d(_ZeroPadNd):
    """Pad the last three dimensions with zeros."""

    _d = 3


class ReflectionPad1d(_PadNd):
    """Mirror padding (the edge not repeated) of the last dimension; each pad must be smaller
    than the padded dimension."""

    _d, _mode = 1, "reflect"


class ReflectionPad2d(_PadNd):
    """Mirror padding of the last two dimensions."""

    _d, _mode = 2, "reflect"


class ReflectionPad3d(_PadNd):
    """Mirror padding of the last three dimensions."""

    _d, _mode = 3, "reflect"


class ReplicationPad1d(_PadNd):
    """Edge-replicating padding of the last dimension."""

    _d, _mode = 1, "replicate"


class ReplicationPad2d(_PadNd):
    """Edge-replicating padding of the last two dimensions."""

    _d, _mode = 2, "replicate"


class ReplicationPad3d(_PadNd):
    """Edge-replicating padding of the last three dimensions."""

    _d, _mode = 3, "replicate"


class CircularPad1d(_PadNd):
    """Wrap-around padding of the last dimension (each pad at most the dimension's size)."""

    _d, _mode = 1, "circular"


class CircularPad2d(_PadNd):
    """Wrap-around padding of the last two dimensions."""

    _d, _mode = 2, "circular"


class CircularPad3d(_PadNd):
    """Wrap-around padding of the last three dimensions."""

    _d, _mode = 3, "circular"
