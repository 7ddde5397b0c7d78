"""Stateless operations on NumPy arrays (the ``torch.nn.functional`` names).

Every function accepts any array-like (ndarray, :class:`~modulekit.Tensor`, an object with the
buffer protocol or ``__array__``) and returns an ``np.ndarray``. Floating inputs compute in
float32 (float16 and bfloat16 are widened) or float64 (float64 inputs); integer and bool inputs
compute in float32; complex, object and string inputs raise ``TypeError``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from modulekit._ext import _conv, _gemm, _ops
from modulekit.compile.tracer import traceable
from modulekit.nn._input import as_input
from modulekit.nn._random import default_generator

__all__ = [
    "linear",
    "relu",
    "relu6",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "softmax",
    "dropout",
    "flatten",
    "conv2d",
    "max_pool2d",
    "avg_pool2d",
    "adaptive_avg_pool2d",
    "hardswish",
]


_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype an op computes in for inputs of ``dtype``: float64 stays, the rest float32."""
    return _F64 if dtype == _F64 else _F32


def as_float_array(x, op: str) -> np.ndarray:
    """``x`` as an ndarray of its compute dtype (float32 or float64)."""
    arr = as_input(x, op)
    return arr.astype(compute_dtype(arr.dtype), copy=False)


def _inplace_target(x, arr: np.ndarray) -> bool:
    return arr is x and arr.dtype in (_F32, _F64) and arr.flags.writeable


@traceable
def linear(input, weight, bias=None) -> np.ndarray:
    """``input @ weight.T + bias`` for ``input`` of shape ``(*, in_features)`` and ``weight``
    of shape ``(out_features, in_features)``. Computes in float64 when ``weight`` is float64,
    else in float32."""
    x = as_input(input, "linear")
    w = as_input(weight, "linear")
    if w.ndim != 2:
        raise ValueError(f"linear: weight must be 2-D (out_features, in_features), got {w.shape}")
    if x.ndim == 0 or x.shape[-1] != w.shape[1]:
        raise ValueError(
            f"linear: input's last dimension {x.shape[-1] if x.ndim else '(scalar)'} does not "
            f"match in_features={w.shape[1]} of weight {w.shape}"
        )
    dt = compute_dtype(w.dtype)
    b = None
    if bias is not None:
        b = as_input(bias, "linear")
        if b.shape != (w.shape[0],):
            raise ValueError(f"linear: bias must have shape ({w.shape[0]},), got {b.shape}")
        b = b.astype(dt, copy=False)
    lead = x.shape[:-1]
    x2 = x.astype(dt, copy=False).reshape(-1, w.shape[1])
    y = _gemm.linear(x2, w.astype(dt, copy=False), b)  # packs the weight for this one call
    return y.reshape(lead + (w.shape[0],))


def _activation(input, name: str, op: str, inplace: bool = False, alpha: float = 0.0,
                beta: float = 0.0) -> np.ndarray:
    """``name(input)`` by the kernels' one activation math (``_ops.activation``): the bits the
    GEMM and convolution epilogues give for the same activation. With ``inplace`` a writable
    float32/float64 ndarray input is overwritten and returned."""
    arr = as_input(input, op)
    if inplace and _inplace_target(input, arr):
        if arr.flags.c_contiguous and arr.flags.aligned:
            return _ops.activation(arr, name, alpha, beta, out=arr)
        arr[...] = _ops.activation(arr, name, alpha, beta)
        return arr
    return _ops.activation(arr, name, alpha, beta)


@traceable
def relu(input, inplace: bool = False) -> np.ndarray:
    """``max(x, 0)`` (NaN kept). With ``inplace=True`` a writable float32/float64 ndarray input
    is overwritten and returned."""
    return _activation(input, "relu", "relu", inplace)


@traceable
def relu6(input, inplace: bool = False) -> np.ndarray:
    """``min(max(x, 0), 6)`` (NaN kept)."""
    return _activation(input, "relu6", "relu6", inplace)


@traceable
def gelu(input, approximate: str = "none") -> np.ndarray:
    """GELU: ``0.5 x (1 + erf(x / sqrt(2)))``, or with ``approximate='tanh'``
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

    float32 results come from the kernels' float32 math, with relative accuracy in the negative
    tail (docs/api.md, "Activation numerics"); float64 results from libm's ``erfc``.
    """
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _activation(input, "gelu" if approximate == "none" else "gelu_tanh", "gelu")


@traceable
def sigmoid(input) -> np.ndarray:
    """``1 / (1 + exp(-x))``, without overflow for large ``|x|``."""
    return _activation(input, "sigmoid", "sigmoid")


@traceable
def silu(input, inplace: bool = False) -> np.ndarray:
    """``x * sigmoid(x)``. With ``inplace=True`` a writable float32/float64 ndarray input is
    overwritten and returned."""
    return _activation(input, "silu", "silu", inplace)


@traceable
def tanh(input) -> np.ndarray:
    """Hyperbolic tangent."""
    return _activation(input, "tanh", "tanh")


def _softmax_dim(ndim: int) -> int:
    warnings.warn(
        "Implicit dimension choice for softmax has been deprecated. Change the call to "
        "include dim=X as an argument.",
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


@traceable
def softmax(input, dim: int | None = None) -> np.ndarray:
    """``exp(x) / sum(exp(x))`` along ``dim`` (torch's legacy choice with a warning when
    ``dim`` is None)."""
    x = as_float_array(input, "softmax")
    if dim is None:
        dim = _softmax_dim(x.ndim)
    ndim = max(x.ndim, 1)
    if not -ndim <= dim < ndim:
        raise IndexError(
            f"softmax: dim {dim} is out of range for an input with {x.ndim} dimension(s)"
        )
    if x.ndim == 0:
        return np.ones_like(x)
    if x.size == 0:  # torch: an empty input gives an empty result, whichever dim
        return np.empty_like(x)
    e = np.exp(x - np.max(x, axis=dim, keepdims=True))
    e /= np.sum(e, axis=dim, keepdims=True)
    return e


@traceable
def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False) -> np.ndarray:
    """Inverted dropout: in training, zero each element with probability ``p`` (NumPy's
    generator, seeded by :func:`modulekit.nn.manual_seed`) and scale the rest by
    ``1 / (1 - p)``; identity (the input array itself) when not training."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    arr = as_input(input, "dropout")
    if not training or p == 0.0:
        return arr
    x = arr.astype(compute_dtype(arr.dtype), copy=False)
    if p == 1.0:
        scale, keep = 0.0, np.zeros(x.shape, dtype=bool)
    else:
        scale, keep = 1.0 / (1.0 - p), default_generator().random(x.shape) >= p
    out = x if inplace and _inplace_target(input, arr) else None
    return np.multiply(x, keep * x.dtype.type(scale), out=out)


@traceable
def flatten(input, start_dim: int = 0, end_dim: int = -1) -> np.ndarray:
    """Merge dimensions ``start_dim..end_dim`` into one (a view when possible)."""
    x = as_input(input, "flatten")
    ndim = max(x.ndim, 1)
    for name, d in (("start_dim", start_dim), ("end_dim", end_dim)):
        if not -ndim <= d < ndim:
            raise IndexError(
                f"flatten: {name}={d} is out of range for an input with {x.ndim} dimension(s)"
            )
    if x.ndim == 0:
        return x.reshape(1)
    start, end = start_dim % ndim, end_dim % ndim
    if start > end:
        raise ValueError("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = x.shape[:start] + (math.prod(x.shape[start : end + 1]),) + x.shape[end + 1 :]
    return x.reshape(shape)


@traceable
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> np.ndarray:
    """``torch.nn.functional.conv2d``: packs ``weight`` for this one call (a layer packs once).

    float64 weights compute in float64, any other floating type in float32.
    """
    x = as_input(input, "conv2d")
    w = as_input(weight, "conv2d(weight)")
    storage = "float64" if w.dtype == _F64 else "float32"
    packed = _conv.pack_conv2d(w, bias, stride, padding, dilation, groups, storage)
    return packed.forward(x)


@traceable
def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False) -> np.ndarray:
    """2-D max pooling over an (N, C, H, W) or (C, H, W) input (NaN propagates), as
    ``torch.nn.functional.max_pool2d``; ``return_indices=True`` is not supported."""
    if return_indices:
        raise NotImplementedError("max_pool2d: return_indices=True is not supported")
    return _conv.max_pool2d(as_input(input, "max_pool2d"), kernel_size, stride, padding,
                            dilation, ceil_mode)


@traceable
def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None) -> np.ndarray:
    """2-D average pooling, as ``torch.nn.functional.avg_pool2d``."""
    return _conv.avg_pool2d(as_input(input, "avg_pool2d"), kernel_size, stride, padding,
                            ceil_mode, count_include_pad, divisor_override)


@traceable
def adaptive_avg_pool2d(input, output_size) -> np.ndarray:
    """2-D adaptive average pooling to ``output_size`` (an int, or a pair with None = keep)."""
    return _conv.adaptive_avg_pool2d(as_input(input, "adaptive_avg_pool2d"), output_size)


def matmul(a, b) -> np.ndarray:
    """``a @ b`` on the packed GEMM kernels: 2-D ``(M, K) @ (K, N)`` or batched 3-D (a 2-D
    operand broadcast), any strides; float64 when either operand is float64, else float32
    (float16/bfloat16/integer/bool operands are widened; byte-swapped ones are read in native
    order). ``modulekit.matmul`` is this function (not in ``__all__``: torch.nn.functional has
    no matmul)."""
    x = as_input(a, "matmul(a)")
    y = as_input(b, "matmul(b)")
    if x.dtype.kind in "iub" or y.dtype.kind in "iub":
        dt = _F64 if _F64 in (x.dtype, y.dtype) else _F32
        x, y = x.astype(dt, copy=False), y.astype(dt, copy=False)
    return _gemm.matmul(x, y)


@traceable
def hardswish(input) -> np.ndarray:
    """``x * relu6(x + 3) / 6`` element-wise (torch's operations in torch's order)."""
    return _activation(input, "hardswish", "hardswish")
