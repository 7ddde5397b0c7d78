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

from modulekit._ext import _conv, _gemm
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


@traceable
def relu(input, inplace: bool = False) -> np.ndarray:
    """``max(x, 0)``. With ``inplace=True`` a writable float32/float64 ndarray input is
    overwritten and returned."""
    arr = as_input(input, "relu")
    if inplace and _inplace_target(input, arr):
        return np.maximum(arr, 0, out=arr)
    arr = arr.astype(compute_dtype(arr.dtype), copy=False)
    return np.maximum(arr, arr.dtype.type(0))


@traceable
def relu6(input, inplace: bool = False) -> np.ndarray:
    """``min(max(x, 0), 6)``."""
    arr = as_input(input, "relu6")
    if inplace and _inplace_target(input, arr):
        return np.clip(arr, 0, 6, out=arr)
    arr = arr.astype(compute_dtype(arr.dtype), copy=False)
    return np.clip(arr, arr.dtype.type(0), arr.dtype.type(6))


# Numerical Recipes' erfc (Chebyshev fit): fractional error < 1.2e-7 for every x, so
# gelu = 0.5 * x * erfc(-x / sqrt(2)) keeps ~1e-7 relative accuracy, negative tail included.
_ERFC_COEFFS = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)


def _erfc_f64(x: np.ndarray) -> np.ndarray:
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = np.full_like(z, _ERFC_COEFFS[-1])
    for c in _ERFC_COEFFS[-2::-1]:
        poly = poly * t + c
    r = t * np.exp(-z * z + poly)
    return np.where(x >= 0, r, 2.0 - r)


_erfc_exact = np.frompyfunc(math.erfc, 1, 1)


@traceable
def gelu(input, approximate: str = "none") -> np.ndarray:
    """GELU: ``0.5 x (1 + erf(x / sqrt(2)))``, or with ``approximate='tanh'``
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

    float32 results are computed in float64 with a rational erfc (relative error ~1e-7);
    float64 results use the exact ``math.erfc`` element by element (slow, exact).
    """
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    arr = as_input(input, "gelu")
    dt = compute_dtype(arr.dtype)
    x = arr.astype(_F64, copy=False)
    with np.errstate(invalid="ignore", over="ignore"):  # -inf gives NaN, as in torch
        if approximate == "tanh":
            inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
            y = 0.5 * x * (1.0 + np.tanh(inner))
        elif dt == _F64:
            y = 0.5 * x * _erfc_exact(-x / math.sqrt(2.0)).astype(_F64)
        else:
            y = 0.5 * x * _erfc_f64(-x / math.sqrt(2.0))
    return y.astype(dt, copy=False)


@traceable
def sigmoid(input) -> np.ndarray:
    """``1 / (1 + exp(-x))``, without overflow for large ``|x|``."""
    x = as_float_array(input, "sigmoid")
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


@traceable
def silu(input, inplace: bool = False) -> np.ndarray:
    """``x * sigmoid(x)``. With ``inplace=True`` a writable float32/float64 ndarray input is
    overwritten and returned."""
    arr = as_input(input, "silu")
    y = sigmoid(arr)
    if inplace and _inplace_target(input, arr):
        return np.multiply(arr, y, out=arr)
    return np.multiply(arr.astype(y.dtype, copy=False), y, out=y)


@traceable
def tanh(input) -> np.ndarray:
    """Hyperbolic tangent."""
    return np.tanh(as_float_array(input, "tanh"))


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
    """``x * relu6(x + 3) / 6`` element-wise."""
    x = as_float_array(input, "hardswish")
    return x * np.clip(x + 3, 0, 6) / 6


# ---- transformers (attention)
__all__ += ["scaled_dot_product_attention"]


@traceable
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None,
                                 enable_gqa: bool = False) -> np.ndarray:
    """``softmax(query @ key^T * scale + mask) @ value``, as
    ``torch.nn.functional.scaled_dot_product_attention``, on the fused attention kernel.

    Parameters
    ----------
    query : array (..., L, E)
    key : array (..., S, E)
    value : array (..., S, Ev)
        The same leading dimensions (with ``enable_gqa``, key/value may have fewer heads,
        dimension -3, a divisor of query's: each serves consecutive query heads, as torch).
    attn_mask : array or None
        Broadcastable to ``(..., L, S)``: bool (True = the position takes part) or floating
        (added to the scaled scores).
    dropout_p : float
        Must be 0: inference applies no dropout (torch would drop even in eval mode).
    is_causal : bool
        Query ``i`` attends to keys ``0..i`` (the top-left aligned lower triangle); cannot be
        combined with ``attn_mask``.
    scale : float, optional
        Defaults to ``1 / sqrt(E)``.

    Returns
    -------
    ndarray (..., L, Ev): float64 when any input is float64, else float32.
    """
    q = as_float_array(query, "scaled_dot_product_attention(query)")
    k = as_float_array(key, "scaled_dot_product_attention(key)")
    v = as_float_array(value, "scaled_dot_product_attention(value)")
    if dropout_p:
        raise ValueError(
            f"scaled_dot_product_attention: dropout_p must be 0 for inference, got {dropout_p}"
        )
    if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise ValueError(
            "scaled_dot_product_attention: query, key and value must have the same number of "
            f"dimensions (at least 2), got shapes {q.shape}, {k.shape}, {v.shape}"
        )
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        hq, hk = q.shape[-3], k.shape[-3]
        if hk == 0 or hq % hk or v.shape[-3] != hk:
            raise ValueError(
                f"scaled_dot_product_attention: with enable_gqa, key/value heads ({hk}, "
                f"{v.shape[-3]}) must be equal and divide query heads ({hq})"
            )
        k = np.repeat(k, hq // hk, axis=-3)
        v = np.repeat(v, hq // hk, axis=-3)
    lead, (L, E), S, Ev = q.shape[:-2], q.shape[-2:], k.shape[-2], v.shape[-1]
    if k.shape[:-2] != lead or v.shape[:-2] != lead or k.shape[-1] != E or v.shape[-2] != S:
        raise ValueError(
            "scaled_dot_product_attention: expected query (..., L, E), key (..., S, E), value "
            f"(..., S, Ev) with the same leading dimensions, got {q.shape}, {k.shape}, {v.shape}"
        )
    dt = _F64 if _F64 in (q.dtype, k.dtype, v.dtype) else _F32
    n = math.prod(lead)
    mask = None
    if is_causal:
        if attn_mask is not None:
            raise ValueError("scaled_dot_product_attention: is_causal=True cannot be combined "
                             "with attn_mask")
        mask = np.triu(np.full((L, S), -np.inf, dtype=dt), 1)
    elif attn_mask is not None:
        m = as_input(attn_mask, "scaled_dot_product_attention(attn_mask)")
        if m.dtype == np.bool_:
            mask = np.where(m, dt.type(0), dt.type(-np.inf))
        elif m.dtype.kind == "f":
            mask = m.astype(dt, copy=False)
        else:
            raise TypeError("scaled_dot_product_attention: attn_mask must be bool or floating, "
                            f"got dtype {m.dtype}")
    if mask is not None:
        try:
            mask = np.broadcast_to(mask, lead + (L, S))
        except ValueError:
            raise ValueError(
                f"scaled_dot_product_attention: attn_mask of shape {np.shape(mask)} cannot be "
                f"broadcast to {lead + (L, S)}"
            ) from None
        mask = mask.reshape(n, 1, L, S)
    from modulekit._ext import _ops

    out = _ops.attention(
        q.astype(dt, copy=False).reshape(n, L, E), k.astype(dt, copy=False).reshape(n, S, E),
        v.astype(dt, copy=False).reshape(n, S, Ev), 1, mask,
        1.0 / math.sqrt(E) if scale is None and E else (1.0 if scale is None else float(scale)),
    )[0]
    return out.reshape(lead + (L, Ev))
