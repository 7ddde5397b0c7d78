"""``GroupNorm``, ``InstanceNorm1d/2d/3d``, ``RMSNorm``, ``LocalResponseNorm`` and
``BatchNorm3d``: torch names, constructor signatures and state-dict keys."""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from modulekit._ext._tensor import Parameter
from modulekit.device import as_device
from modulekit.dtypes import as_dtype, float32
from modulekit.module import Module
from modulekit.nn import _functional_norm as FN
from modulekit.nn._input import as_input
from modulekit.nn.modules.batchnorm import _BatchNorm, _NormBase

__all__ = [
    "BatchNorm3d",
    "GroupNorm",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "LocalResponseNorm",
    "RMSNorm",
]


def _float_dtype(dtype, name: str):
    dtype = float32 if dtype is None else as_dtype(dtype)
    if not dtype.is_floating:
        raise TypeError(f"{name}: dtype must be a floating type, got {dtype.name}")
    return dtype


def _positive_int(value, what: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}: {what} must be a positive int, got {value!r}")
    return int(value)


def _np(t):
    return None if t is None else t.numpy()


def _compute_input(input, name: str, *params) -> np.ndarray:
    """The input in the layer's compute dtype: float64 when the layer (a parameter) or the
    input is float64, else float32."""
    x = as_input(input, name)
    f64 = x.dtype == np.float64 or any(p is not None and p.dtype.name == "float64"
                                       for p in params)
    return x.astype(np.float64 if f64 else np.float32, copy=False)


class GroupNorm(Module):
    """Group normalisation of an (N, C, *) input, as ``torch.nn.GroupNorm``: the C channels in
    ``num_groups`` groups, each normalised by its own mean and biased variance, then
    ``* weight[c] + bias[c]`` (``affine``; ``bias=False`` learns the weight only).

    Runs on the vectorised group normalisation kernel (:mod:`modulekit._ext._norm`): each
    group's moments in one read, then its channels normalised while it is still in cache,
    groups spread over the library's threads. float64 layers or inputs compute in float64.
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, device=None, dtype=None, *, bias: bool = True) -> None:
        super().__init__()
        num_groups = _positive_int(num_groups, "num_groups", "GroupNorm")
        num_channels = _positive_int(num_channels, "num_channels", "GroupNorm")
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by "
                             f"num_groups ({num_groups})")
        if device is not None:
            as_device(device)
        dtype = _float_dtype(dtype, "GroupNorm")
        self.num_groups, self.num_channels = num_groups, num_channels
        self.eps, self.affine = float(eps), bool(affine)
        if self.affine:
            self.weight = Parameter(np.ones(num_channels, dtype.numpy))
            if bias:
                self.bias = Parameter(np.zeros(num_channels, dtype.numpy))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, "
                f"affine={self.affine}, bias={self.bias is not None}")

    def forward(self, input) -> np.ndarray:
        x = _compute_input(input, "GroupNorm", self.weight)
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ValueError(f"GroupNorm({self.num_groups}, {self.num_channels}): expected an "
                             f"(N, {self.num_channels}, *) input, got shape {x.shape}")
        FN.check_group_values(x, self.num_groups, f"GroupNorm({self.num_groups}, "
                                                  f"{self.num_channels})")
        return FN._norm.group_norm(x, self.num_groups, _np(self.weight), _np(self.bias),
                                   self.eps, op="GroupNorm")


class _InstanceNorm(_NormBase):
    _spatial = 0

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = False, track_running_stats: bool = False, device=None,
                 dtype=None, *, bias: bool = True) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)

    def forward(self, input) -> np.ndarray:
        name = type(self).__name__
        x = _compute_input(input, name, self.weight, self.running_mean)
        batched = x.ndim == self._spatial + 2
        if not batched and x.ndim != self._spatial + 1:
            raise ValueError(f"{name}: expected a {self._spatial + 1}-D (unbatched) or "
                             f"{self._spatial + 2}-D (batched) input, got shape {x.shape}")
        if not batched:
            x = x[None]
        if x.shape[1] != self.num_features:
            if self.affine:
                raise ValueError(f"{name}({self.num_features}): expected input with "
                                 f"{self.num_features} channels, got {x.shape[1]} (input "
                                 f"shape {x.shape})")
            warnings.warn(f"{name}: input has {x.shape[1]} channels but num_features is "
                          f"{self.num_features}; affine=False, so num_features is unused",
                          stacklevel=2)
        use_input_stats = self.training or not self.track_running_stats
        rm, rv = self.running_mean, self.running_var
        if not self.training and use_input_stats:
            rm = rv = None  # evaluation without running statistics: nothing to update
        # as torch's _InstanceNorm: momentum None means 0 and num_batches_tracked stays
        momentum = 0.0 if self.momentum is None else self.momentum
        y = FN.instance_norm(x, rm, rv, _np(self.weight), _np(self.bias), use_input_stats,
                             momentum, self.eps)
        return y if batched else y[0]


class InstanceNorm1d(_InstanceNorm):
    """Instance normalisation of an (N, C, L) or (C, L) input, as ``torch.nn.InstanceNorm1d``:
    each (sample, channel) normalised by its own statistics; with ``track_running_stats``,
    training updates ``running_mean`` / ``running_var`` and evaluation uses them."""

    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance normalisation of an (N, C, H, W) or (C, H, W) input, as
    ``torch.nn.InstanceNorm2d`` (see :class:`InstanceNorm1d`)."""

    _spatial = 2


class InstanceNorm3d(_InstanceNorm):
    """Instance normalisation of an (N, C, D, H, W) or (C, D, H, W) input, as
    ``torch.nn.InstanceNorm3d`` (see :class:`InstanceNorm1d`)."""

    _spatial = 3


class RMSNorm(Module):
    """Root-mean-square normalisation over the trailing ``normalized_shape`` dimensions, as
    ``torch.nn.RMSNorm``: ``x / sqrt(mean(x**2) + eps) * weight`` (``eps`` None: the compute
    dtype's machine epsilon)."""

    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        normalized_shape = tuple(int(d) for d in normalized_shape)
        if any(d < 0 for d in normalized_shape):
            raise ValueError(f"RMSNorm: normalized_shape must hold non-negative sizes, got "
                             f"{normalized_shape}")
        if device is not None:
            as_device(device)
        dtype = _float_dtype(dtype, "RMSNorm")
        self.normalized_shape, self.eps = normalized_shape, eps
        self.elementwise_affine = bool(elementwise_affine)
        if self.elementwise_affine:
            self.weight = Parameter(np.ones(normalized_shape, dtype.numpy))
        else:
            self.register_parameter("weight", None)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")

    def forward(self, input) -> np.ndarray:
        x = _compute_input(input, "RMSNorm", self.weight)
        try:
            return FN.rms_norm(x, self.normalized_shape, _np(self.weight), self.eps)
        except ValueError as exc:
            raise ValueError(f"RMSNorm: {exc}") from None


class LocalResponseNorm(Module):
    """Local response normalisation across channels, as ``torch.nn.LocalResponseNorm``:
    ``x / (k + alpha * mean(x**2 over size channels))**beta``."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75,
                 k: float = 1.0) -> None:
        super().__init__()
        self.size = _positive_int(size, "size", "LocalResponseNorm")
        self.alpha, self.beta, self.k = alpha, beta, k

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"

    def forward(self, input) -> np.ndarray:
        x = as_input(input, "LocalResponseNorm")
        try:
            return FN.local_response_norm(x, self.size, self.alpha, self.beta, self.k)
        except ValueError as exc:
            raise ValueError(f"LocalResponseNorm: {exc}") from None


class BatchNorm3d(_BatchNorm):
    """Batch normalisation over an (N, C, D, H, W) input, as ``torch.nn.BatchNorm3d`` (see
    :class:`BatchNorm1d` for the training and evaluation modes). The depth, height and width
    are flattened into one axis for the per-channel kernel."""

    _dims = (5,)

    def forward(self, input) -> np.ndarray:
        x = as_input(input, "BatchNorm3d").astype(self._compute_dtype(), copy=False)
        self._check_input(x)
        shape = x.shape
        flat = x.reshape(shape[0], shape[1], math.prod(shape[2:]))
        if self.training or self.running_mean is None:
            mean, var = self._batch_stats(flat)
        else:
            mean, var = self.running_mean.numpy(), self.running_var.numpy()
        return FN._batch_norm_apply(flat, mean, var, _np(self.weight), _np(self.bias),
                                    self.eps).reshape(shape)
