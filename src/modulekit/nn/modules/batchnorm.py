"""``BatchNorm1d`` and ``BatchNorm2d`` with torch's training / evaluation semantics."""

from __future__ import annotations

import numpy as np

from modulekit._ext import _conv
from modulekit._ext._tensor import Parameter, Tensor
from modulekit.device import as_device
from modulekit.dtypes import as_dtype, float32, int64
from modulekit.module import Module
from modulekit.nn._input import as_input

__all__ = ["BatchNorm1d", "BatchNorm2d"]


class _NormBase(Module):
    """What the batch and instance norms share (torch's ``_NormBase``): ``num_features``,
    ``eps``, ``momentum``, the affine ``weight``/``bias`` and the running statistics."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        if (
            isinstance(num_features, bool)
            or not isinstance(num_features, (int, np.integer))
            or num_features < 1
        ):
            raise ValueError(f"{name}: num_features must be a positive int, got {num_features!r}")
        if device is not None:
            as_device(device)
        dtype = float32 if dtype is None else as_dtype(dtype)
        if not dtype.is_floating:
            raise TypeError(f"{name}: dtype must be a floating type, got {dtype.name}")
        self.num_features = int(num_features)
        self.eps = float(eps)
        self.momentum = momentum
        self.affine = bool(affine)
        self.track_running_stats = bool(track_running_stats)
        n, npdt = self.num_features, dtype.numpy
        if self.affine:
            self.weight = Parameter(np.ones(n, npdt))
            if bias:
                self.bias = Parameter(np.zeros(n, npdt))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if self.track_running_stats:
            self.register_buffer("running_mean", Tensor(np.zeros(n, npdt)))
            self.register_buffer("running_var", Tensor(np.ones(n, npdt)))
            self.register_buffer("num_batches_tracked", Tensor(np.zeros((), int64.numpy)))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.bias is not None}, "
            f"track_running_stats={self.track_running_stats}"
        )

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.copy_(np.zeros(self.num_features))
            self.running_var.copy_(np.ones(self.num_features))
            self.num_batches_tracked.copy_(np.zeros((), np.int64))


class _BatchNorm(_NormBase):
    _dims: tuple[int, ...] = ()

    def _check_input(self, x: np.ndarray) -> None:
        name = type(self).__name__
        if x.ndim not in self._dims:
            dims = " or ".join(f"{d}D" for d in self._dims)
            raise ValueError(f"{name}: expected {dims} input (got {x.ndim}D input)")
        if x.shape[1] != self.num_features:
            raise ValueError(
                f"{name}({self.num_features}): expected input with {self.num_features} "
                f"channels, got {x.shape[1]} (input shape {x.shape})"
            )

    def _compute_dtype(self):
        ref = self.weight if self.weight is not None else self.running_mean
        return np.float64 if ref is not None and ref.dtype.name == "float64" else np.float32

    def forward(self, input) -> np.ndarray:
        dt = self._compute_dtype()
        x = as_input(input, type(self).__name__)
        if x.dtype != dt:
            x = x.astype(dt)
        self._check_input(x)
        use_batch = self.training or self.running_mean is None
        if use_batch:
            mean, var = self._batch_stats(x)
        else:
            mean = self.running_mean.numpy().astype(np.float64)
            var = self.running_var.numpy().astype(np.float64)
        scale = 1.0 / np.sqrt(var + self.eps)
        if self.weight is not None:
            scale = scale * self.weight.numpy().astype(np.float64)
        shift = -mean * scale
        if self.bias is not None:
            shift = shift + self.bias.numpy().astype(np.float64)
        return _conv.batch_norm_inference(x, scale.astype(dt), shift.astype(dt))

    def _batch_stats(self, x: np.ndarray):
        axes = (0,) + tuple(range(2, x.ndim))
        count = x.size // x.shape[1]
        if count <= 1:
            raise ValueError(
                f"{type(self).__name__}: expected more than 1 value per channel when "
                f"training, got input size {x.shape}"
            )
        x64 = x.astype(np.float64)
        mean = x64.mean(axis=axes)
        var = x64.var(axis=axes)  # biased: what normalises
        if self.training and self.track_running_stats:
            factor = 0.0 if self.momentum is None else float(self.momentum)
            if self.num_batches_tracked is not None:
                tracked = int(self.num_batches_tracked.numpy()) + 1
                self.num_batches_tracked.copy_(np.asarray(tracked, np.int64))
                if self.momentum is None:  # cumulative moving average
                    factor = 1.0 / tracked
            unbiased = var * (count / (count - 1))
            rm = self.running_mean.numpy().astype(np.float64)
            rv = self.running_var.numpy().astype(np.float64)
            self.running_mean.copy_((1 - factor) * rm + factor * mean)
            self.running_var.copy_((1 - factor) * rv + factor * unbiased)
        return mean, var


class BatchNorm1d(_BatchNorm):
    """Batch normalisation over an (N, C) or (N, C, L) input, as ``torch.nn.BatchNorm1d``.

    Training mode normalises with the batch's statistics and updates ``running_mean``,
    ``running_var`` (unbiased) with ``momentum`` (a cumulative average when ``momentum`` is
    None) and ``num_batches_tracked``; evaluation mode uses the running statistics.
    """

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation over an (N, C, H, W) input, as ``torch.nn.BatchNorm2d``.

    See :class:`BatchNorm1d` for the modes. In evaluation mode a ``Conv2d`` followed by this
    norm is folded into the convolution before it by a compiled module's plan (the
    ``conv_bn_fold`` rule) and by a Sequential's fused call.
    """

    _dims = (4,)
