"""``LayerNorm``: one-pass fused kernel over the trailing dimensions."""

from __future__ import annotations

import math
import numbers

import numpy as np

from modulekit._ext import _ops
from modulekit._ext._tensor import Parameter
from modulekit.device import as_device
from modulekit.dtypes import as_dtype, float32
from modulekit.module import Module
from modulekit.nn._input import as_input

__all__ = ["LayerNorm"]

_F64 = np.dtype(np.float64)
_F32_DT = np.dtype(np.float32)


class LayerNorm(Module):
    """Layer normalisation over the trailing ``normalized_shape`` dimensions, as
    ``torch.nn.LayerNorm``: ``(x - mean) / sqrt(var + eps) * weight + bias`` with the biased
    variance.

    Parameters
    ----------
    normalized_shape : int or tuple of int
        Trailing shape normalised together.
    eps : float
        Added to the variance.
    elementwise_affine : bool
        Learn ``weight`` (ones) and, with ``bias=True``, ``bias`` (zeros).
    bias : bool
        Whether the affine transform has a bias.
    device, dtype :
        CPU only; floating storage dtype (default float32).

    Notes
    -----
    Computes in float64 when the layer (or, without parameters, the input) is float64, else in
    float32 (float16/bfloat16 parameters are widened). Mean and variance come from one read of
    each row (sums shifted by the row's first value, so large means do not cancel).
    """

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        normalized_shape = tuple(int(d) for d in normalized_shape)
        if not normalized_shape or any(d <= 0 for d in normalized_shape):
            raise ValueError(
                f"LayerNorm: normalized_shape must be positive sizes, got {normalized_shape}"
            )
        if device is not None:
            as_device(device)
        dtype = float32 if dtype is None else as_dtype(dtype)
        if not dtype.is_floating:
            raise TypeError(f"LayerNorm: dtype must be a floating type, got {dtype.name}")
        self.normalized_shape = normalized_shape
        self.eps = float(eps)
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(np.ones(normalized_shape, dtype=dtype.numpy))
            if bias:
                self.bias = Parameter(np.zeros(normalized_shape, dtype=dtype.numpy))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self._n = math.prod(normalized_shape)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}"
        )

    def forward(self, input, residual=None) -> np.ndarray:
        """Normalise ``input`` (or ``input + residual``, fused, when ``residual`` is given)."""
        w, b = self.weight, self.bias
        if (
            type(input) is np.ndarray
            and input.dtype == _F32_DT
            and input.shape[-1:] == self.normalized_shape
            and w is not None
            and b is not None
            and w.dtype is float32
            and b.dtype is float32
            and (
                residual is None
                or (type(residual) is np.ndarray and residual.dtype == _F32_DT
                    and residual.shape == input.shape)
            )
        ):  # a transformer layer's call: float32 arrays all around, no conversions
            return _ops.layer_norm(input, self._n, w.numpy(), b.numpy(), self.eps, residual)
        x = as_input(input, "LayerNorm")
        k = len(self.normalized_shape)
        if x.ndim < k or x.shape[x.ndim - k :] != self.normalized_shape:
            raise ValueError(
                f"LayerNorm: input of shape {x.shape} does not end with normalized_shape "
                f"{self.normalized_shape}"
            )
        w, b = self.weight, self.bias
        dt = (w.dtype.numpy if w is not None else x.dtype) == _F64
        dt = _F64 if dt else np.dtype(np.float32)
        if x.dtype != dt:
            x = x.astype(dt)
        if residual is not None:
            residual = as_input(residual, "LayerNorm(residual)")
            if residual.shape != x.shape:
                raise ValueError(
                    f"LayerNorm: residual shape {residual.shape} does not match input shape "
                    f"{x.shape}"
                )
        return _ops.layer_norm(
            x,
            self._n,
            None if w is None else w.numpy(),
            None if b is None else b.numpy(),
            self.eps,
            residual,
        )
