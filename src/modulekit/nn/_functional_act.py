"""Activation functions of ``torch.nn.functional``, re-exported by
:mod:`modulekit.nn.functional`.

Every function takes any array-like of real numbers and returns an ndarray in the compute
dtype (float64 for float64 input, float32 otherwise; see :func:`compute_dtype`). Functions
with ``inplace=True`` overwrite and return a writable float32/float64 ndarray input, as torch
does; any other input (a Tensor, a list, an integer array) gets a new array.
"""

from __future__ import annotations

import numpy as np

from modulekit.compile.tracer import traceable
from modulekit.nn._input import as_input
from modulekit.nn._random import default_generator
from modulekit.nn.functional import (
    _inplace_target,
    _softmax_dim,
    as_float_array,
    compute_dtype,
    softmax,
)

__all__ = [
    "celu",
    "elu",
    "glu",
    "hardshrink",
    "hardsigmoid",
    "hardtanh",
    "leaky_relu",
    "log_softmax",
    "logsigmoid",
    "mish",
    "prelu",
    "rrelu",
    "selu",
    "softmin",
    "softplus",
    "softshrink",
    "softsign",
    "tanhshrink",
    "threshold",
]


def _public(fn):
    """``@traceable`` under the public name ``modulekit.nn.functional.<name>`` (what a
    captured graph records, and what a saved module's closed function table knows)."""
    return traceable(fn, f"modulekit.nn.functional.{fn.__name__}")


# torch's SELU constants (torch/csrc/api/include/torch/nn/functional/activation.h)
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _finish(input, arr: np.ndarray, y: np.ndarray, inplace: bool) -> np.ndarray:
    """``y`` (computed from ``arr``) written back into ``input`` when ``inplace`` applies."""
    if inplace and _inplace_target(input, arr):
        np.copyto(arr, y)
        return arr
    return y


def _float(input, op: str) -> tuple[np.ndarray, np.ndarray]:
    arr = as_input(input, op)
    return arr, arr.astype(compute_dtype(arr.dtype), copy=False)


def _check_dim(dim: int, ndim: int, op: str) -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"{op}: dim {dim} is out of range for an input with {ndim} dimension(s)")
    return dim % n


@_public
def threshold(input, threshold: float, value: float, inplace: bool = False) -> np.ndarray:
    """``x if x > threshold else value`` element-wise (NaN stays NaN)."""
    arr, x = _float(input, "threshold")
    y = np.where(x > threshold, x, x.dtype.type(value))
    y = np.where(np.isnan(x), x, y)
    return _finish(input, arr, y, inplace)


@_public
def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False) -> np.ndarray:
    """``x if x >= 0 else negative_slope * x``."""
    arr, x = _float(input, "leaky_relu")
    y = np.where(x > 0, x, x * x.dtype.type(negative_slope))
    return _finish(input, arr, y, inplace)


@_public
def prelu(input, weight) -> np.ndarray:
    """``x if x >= 0 else weight * x`` with one slope, or one per channel (dimension 1; an
    input of fewer than 2 dimensions has one channel), as ``torch.nn.functional.prelu``."""
    x = as_float_array(input, "prelu")
    w = as_input(weight, "prelu(weight)").astype(x.dtype, copy=False).reshape(-1)
    if w.size != 1:
        # as torch: the channels are dimension 1; an input of fewer dimensions has one
        channels = x.shape[1] if x.ndim >= 2 else 1
        if w.size != channels:
            raise ValueError(
                f"prelu: weight has {w.size} elements but the input of shape {x.shape} has "
                f"{channels} channel(s) (dimension 1); expected 1 or {channels}")
        w = w.reshape((1, channels) + (1,) * (x.ndim - 2))
    else:
        w = w.reshape(())
    return np.where(x > 0, x, w * x)


@_public
def rrelu(
    input,
    lower: float = 1.0 / 8,
    upper: float = 1.0 / 3,
    training: bool = False,
    inplace: bool = False,
) -> np.ndarray:
    """Randomised leaky ReLU: in evaluation the negative slope is ``(lower + upper) / 2``; in
    training each negative element gets its own slope drawn from ``U(lower, upper)`` (the
    library's generator, :func:`modulekit.nn.manual_seed`)."""
    if lower > upper:
        raise ValueError(f"rrelu: lower bound {lower} must not exceed upper bound {upper}")
    arr, x = _float(input, "rrelu")
    if training:
        slope = default_generator().uniform(lower, upper, size=x.shape).astype(x.dtype)
    else:
        slope = x.dtype.type((lower + upper) / 2)
    y = np.where(x >= 0, x, x * slope)
    return _finish(input, arr, y, inplace)


@_public
def elu(input, alpha: float = 1.0, inplace: bool = False) -> np.ndarray:
    """``x if x > 0 else alpha * (exp(x) - 1)``."""
    arr, x = _float(input, "elu")
    with np.errstate(over="ignore"):
        y = np.where(x > 0, x, x.dtype.type(alpha) * np.expm1(np.minimum(x, 0)))
    return _finish(input, arr, y, inplace)


@_public
def selu(input, inplace: bool = False) -> np.ndarray:
    """``scale * (x if x > 0 else alpha * (exp(x) - 1))`` with torch's constants."""
    arr, x = _float(input, "selu")
    t = x.dtype.type
    y = t(_SELU_SCALE) * np.where(x > 0, x, t(_SELU_ALPHA) * np.expm1(np.minimum(x, 0)))
    return _finish(input, arr, y, inplace)


@_public
def celu(input, alpha: float = 1.0, inplace: bool = False) -> np.ndarray:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    if alpha == 0:
        raise ValueError("celu: alpha must not be 0 (it divides the input)")
    arr, x = _float(input, "celu")
    t = x.dtype.type
    y = np.where(x > 0, x, t(alpha) * np.expm1(np.minimum(x, 0) / t(alpha)))
    return _finish(input, arr, y, inplace)


@_public
def hardtanh(
    input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> np.ndarray:
    """``min(max(x, min_val), max_val)``."""
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val {min_val} must not exceed max_val {max_val}")
    arr, x = _float(input, "hardtanh")
    y = np.clip(x, x.dtype.type(min_val), x.dtype.type(max_val))
    return _finish(input, arr, y, inplace)


@_public
def hardsigmoid(input, inplace: bool = False) -> np.ndarray:
    """``relu6(x + 3) / 6``."""
    arr, x = _float(input, "hardsigmoid")
    t = x.dtype.type
    y = np.clip(x + t(3), t(0), t(6)) / t(6)
    return _finish(input, arr, y, inplace)


def _softplus(x: np.ndarray) -> np.ndarray:
    """``log(1 + exp(x))`` without overflow: ``max(x, 0) + log1p(exp(-|x|))``."""
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


@_public
def softplus(input, beta: float = 1.0, threshold: float = 20.0) -> np.ndarray:
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold``."""
    x = as_float_array(input, "softplus")
    t = x.dtype.type
    bx = x * t(beta)
    with np.errstate(over="ignore", invalid="ignore"):
        y = _softplus(bx) / t(beta)
    return np.where(bx > threshold, x, y)


@_public
def mish(input, inplace: bool = False) -> np.ndarray:
    """``x * tanh(softplus(x))``."""
    arr, x = _float(input, "mish")
    with np.errstate(over="ignore", invalid="ignore"):
        y = x * np.tanh(_softplus(x))
    return _finish(input, arr, y, inplace)


@_public
def softsign(input) -> np.ndarray:
    """``x / (1 + |x|)``."""
    x = as_float_array(input, "softsign")
    return x / (x.dtype.type(1) + np.abs(x))


@_public
def logsigmoid(input) -> np.ndarray:
    """``log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))`` (no overflow either side)."""
    x = as_float_array(input, "logsigmoid")
    return np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x)))


@_public
def tanhshrink(input) -> np.ndarray:
    """``x - tanh(x)``."""
    x = as_float_array(input, "tanhshrink")
    return x - np.tanh(x)


@_public
def hardshrink(input, lambd: float = 0.5) -> np.ndarray:
    """``x if |x| > lambd else 0``."""
    x = as_float_array(input, "hardshrink")
    return np.where((x >= -lambd) & (x <= lambd), x.dtype.type(0), x)  # NaN stays NaN


@_public
def softshrink(input, lambd: float = 0.5) -> np.ndarray:
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0."""
    if lambd < 0:
        raise ValueError(f"softshrink: lambd must be non-negative, got {lambd}")
    x = as_float_array(input, "softshrink")
    t = x.dtype.type
    y = np.where(x > lambd, x - t(lambd), np.where(x < -lambd, x + t(lambd), t(0)))
    return np.where(np.isnan(x), x, y)


def _log_softmax(x: np.ndarray, dim: int) -> np.ndarray:
    m = np.max(x, axis=dim, keepdims=True)
    m = np.where(np.isneginf(m), 0, m)  # a row of -inf: NaN, as torch; +inf: NaN too
    shifted = x - m
    with np.errstate(divide="ignore"):
        return shifted - np.log(np.sum(np.exp(shifted), axis=dim, keepdims=True))


def _softmax_args(input, dim, dtype, op: str):
    x = as_input(input, op)
    if dtype is not None:
        from modulekit.dtypes import as_dtype

        x = x.astype(as_dtype(dtype).numpy)
    x = x.astype(compute_dtype(x.dtype), copy=False)
    if dim is None:
        dim = _softmax_dim(x.ndim)
    return x, _check_dim(dim, x.ndim, op)


@_public
def log_softmax(input, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> np.ndarray:
    """``x - log(sum(exp(x)))`` along ``dim``, computed stably (torch's legacy implicit
    ``dim`` with a warning when None); ``dtype`` casts the input first."""
    x, dim = _softmax_args(input, dim, dtype, "log_softmax")
    if x.ndim == 0:
        return np.zeros_like(x)
    if x.size == 0:
        return np.empty_like(x)
    return _log_softmax(x, dim)


@_public
def softmin(input, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> np.ndarray:
    """``softmax(-x)`` along ``dim``."""
    x, dim = _softmax_args(input, dim, dtype, "softmin")
    return softmax(-x, dim)


@_public
def glu(input, dim: int = -1) -> np.ndarray:
    """Gated linear unit: ``a * sigmoid(b)`` for the two halves ``a``, ``b`` of ``dim``."""
    x = as_float_array(input, "glu")
    if x.ndim == 0:
        raise ValueError("glu: does not support scalars (0-d inputs)")
    d = _check_dim(dim, x.ndim, "glu")
    if x.shape[d] % 2:
        raise ValueError(
            f"glu: halving dimension {dim} must be even, got size {x.shape[d]} (input shape "
            f"{x.shape})"
        )
    a, b = np.split(x, 2, axis=d)
    e = np.exp(-np.abs(b))
    gate = np.where(b >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)
    return a * gate
