"""Normalisation functions of ``torch.nn.functional``, re-exported by
:mod:`modulekit.nn.functional`: ``group_norm`` and ``instance_norm`` on the group
normalisation kernel (:mod:`modulekit._ext._norm`), ``layer_norm`` on the fused row kernel,
``batch_norm`` on the per-channel affine kernel, ``rms_norm``, ``local_response_norm`` and
``normalize`` in NumPy.

They compute in float64 when the input (or, for ``layer_norm``/``batch_norm``, the weight) is
float64, else in float32; every other real dtype is widened to float32.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from modulekit._ext import _conv, _norm, _ops
from modulekit.compile.tracer import traceable
from modulekit.nn._input import as_input
from modulekit.nn.functional import compute_dtype

__all__ = [
    "batch_norm",
    "group_norm",
    "instance_norm",
    "layer_norm",
    "local_response_norm",
    "normalize",
    "rms_norm",
]


def _public(fn):
    """``@traceable`` under the public name ``modulekit.nn.functional.<name>`` (what a
    captured graph records, and what a saved module's closed function table knows)."""
    return traceable(fn, f"modulekit.nn.functional.{fn.__name__}")


_F64 = np.dtype(np.float64)


def _dtype_of(x: np.ndarray, *params) -> np.dtype:
    """float64 when ``x`` or any given parameter is float64, else float32."""
    if x.dtype == _F64 or any(p is not None and np.asarray(p).dtype == _F64 for p in params):
        return _F64
    return np.dtype(np.float32)


def _vec(v, c: int, dt, what: str, op: str):
    if v is None:
        return None
    a = as_input(v, f"{op}({what})").astype(dt, copy=False).reshape(-1)
    if a.shape[0] != c:
        raise ValueError(f"{op}: {what} must have {c} elements (one per channel), got "
                         f"{a.shape[0]}")
    return a


def check_group_values(x: np.ndarray, num_groups: int, op: str) -> None:
    """torch's ``_verify_batch_size`` for group norm: refuse an input whose
    ``(N * C / num_groups) * prod(spatial)`` is 1 (torch raises there, as batch norm does for
    a single value per channel)."""
    if x.ndim >= 2 and num_groups > 0 and x.shape[1] % num_groups == 0:
        if x.shape[0] * x.shape[1] // num_groups * math.prod(x.shape[2:]) == 1:
            raise ValueError(f"{op}: expected more than 1 value per channel when training, got "
                             f"input size {x.shape} (torch refuses it too)")


@_public
def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5) -> np.ndarray:
    """Group normalisation of an (N, C, *) input: the C channels split into ``num_groups``
    groups, each normalised by its own mean and biased variance, then ``* weight[c] +
    bias[c]`` (as ``torch.nn.functional.group_norm``)."""
    x = as_input(input, "group_norm")
    x = x.astype(_dtype_of(x), copy=False)
    check_group_values(x, int(num_groups), "group_norm")
    return _norm.group_norm(x, int(num_groups), weight, bias, float(eps), op="group_norm")


def _batch_norm_apply(x: np.ndarray, mean, var, weight, bias, eps: float) -> np.ndarray:
    """``(x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c]`` on the per-channel affine
    kernel (any rank from 2: the trailing dimensions are flattened)."""
    scale = 1.0 / np.sqrt(np.asarray(var, np.float64) + eps)
    if weight is not None:
        scale = scale * np.asarray(weight, np.float64)
    shift = -np.asarray(mean, np.float64) * scale
    if bias is not None:
        shift = shift + np.asarray(bias, np.float64)
    shape = x.shape
    x3 = x.reshape(shape[0], shape[1], -1) if x.ndim > 4 else x
    return _conv.batch_norm_inference(x3, scale.astype(x.dtype), shift.astype(x.dtype)) \
        .reshape(shape)


def _update_running(buf, value: np.ndarray, momentum, what: str, op: str) -> None:
    """``buf = (1 - momentum) * buf + momentum * value`` in place (torch updates the running
    statistics it is given)."""
    arr = as_input(buf, f"{op}({what})")
    if not (isinstance(buf, np.ndarray) or hasattr(buf, "copy_")) or \
            (isinstance(buf, np.ndarray) and not buf.flags.writeable):
        raise ValueError(f"{op}: {what} must be a writable ndarray or Tensor to be updated in "
                         f"training mode")
    m = 0.1 if momentum is None else float(momentum)
    new = (1 - m) * arr.astype(np.float64) + m * value
    if hasattr(buf, "copy_"):
        buf.copy_(new.astype(arr.dtype))
    else:
        buf[...] = new


@_public
def batch_norm(input, running_mean, running_var, weight=None, bias=None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> np.ndarray:
    """Batch normalisation of an (N, C, *) input, as ``torch.nn.functional.batch_norm``: with
    the running statistics when not ``training``; with the batch's statistics in training,
    updating ``running_mean`` / ``running_var`` (unbiased) in place when given."""
    op = "batch_norm"
    x = as_input(input, op)
    if x.ndim < 2:
        raise ValueError(f"{op}: expected an input of at least 2 dimensions (N, C, *), got "
                         f"shape {x.shape}")
    x = x.astype(_dtype_of(x, weight), copy=False)
    c = x.shape[1]
    rm = _vec(running_mean, c, np.float64, "running_mean", op)
    rv = _vec(running_var, c, np.float64, "running_var", op)
    w = _vec(weight, c, np.float64, "weight", op)
    b = _vec(bias, c, np.float64, "bias", op)
    if not training:
        if rm is None or rv is None:
            raise ValueError(f"{op}: running_mean and running_var are required when not "
                             f"training")
        return _batch_norm_apply(x, rm, rv, w, b, eps)
    axes = (0,) + tuple(range(2, x.ndim))
    count = x.size // c if c else 0
    if count <= 1:
        raise ValueError(f"{op}: expected more than 1 value per channel when training, got "
                         f"input size {x.shape}")
    x64 = x.astype(np.float64)
    mean, var = x64.mean(axis=axes), x64.var(axis=axes)
    if rm is not None:
        _update_running(running_mean, mean, momentum, "running_mean", op)
    if rv is not None:
        _update_running(running_var, var * count / (count - 1), momentum, "running_var", op)
    return _batch_norm_apply(x, mean, var, w, b, eps)


@_public
def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats: bool = True, momentum: float = 0.1,
                  eps: float = 1e-5) -> np.ndarray:
    """Instance normalisation of an (N, C, *) input: each (sample, channel) normalised by its
    own statistics (``use_input_stats``, updating the running statistics when given, with the
    batch average of the instances' unbiased variances), or by the running statistics."""
    op = "instance_norm"
    x = as_input(input, op)
    if x.ndim < 2:
        raise ValueError(f"{op}: expected an input of at least 2 dimensions (N, C, *), got "
                         f"shape {x.shape}")
    x = x.astype(_dtype_of(x, weight), copy=False)
    n, c = x.shape[:2]
    w = _vec(weight, c, x.dtype, "weight", op)
    b = _vec(bias, c, x.dtype, "bias", op)
    if not use_input_stats:
        rm = _vec(running_mean, c, np.float64, "running_mean", op)
        rv = _vec(running_var, c, np.float64, "running_var", op)
        if rm is None or rv is None:
            raise ValueError(f"{op}: running_mean and running_var are required when "
                             f"use_input_stats=False")
        return _batch_norm_apply(x, rm, rv, w, b, eps)
    count = x.size // (n * c) if n * c else 0
    if count <= 1 and x.size:
        raise ValueError(f"{op}: expected more than 1 spatial element when training, got "
                         f"input size {x.shape}")
    if c == 0:
        return np.empty(x.shape, x.dtype)
    y, mean, rstd = _norm.group_norm(x, c, w, b, float(eps), return_stats=True, op=op)
    if running_mean is not None or running_var is not None:
        var = 1.0 / (rstd * rstd) - eps  # each instance's biased variance
        if running_mean is not None:
            _vec(running_mean, c, np.float64, "running_mean", op)
            _update_running(running_mean, mean.mean(axis=0), momentum, "running_mean", op)
        if running_var is not None:
            _vec(running_var, c, np.float64, "running_var", op)
            unbiased = var * count / (count - 1)
            _update_running(running_var, unbiased.mean(axis=0), momentum, "running_var", op)
    return y


def _normalized_shape(normalized_shape) -> tuple[int, ...]:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(int(d) for d in normalized_shape)


def _check_trailing(x: np.ndarray, shape: tuple[int, ...], op: str) -> None:
    k = len(shape)
    if x.ndim < k or x.shape[x.ndim - k:] != shape:
        raise ValueError(f"{op}: input of shape {x.shape} does not end with normalized_shape "
                         f"{shape}")


@_public
def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> np.ndarray:
    """Layer normalisation over the trailing ``normalized_shape`` dimensions (biased
    variance), then ``* weight + bias``, as ``torch.nn.functional.layer_norm``."""
    op = "layer_norm"
    shape = _normalized_shape(normalized_shape)
    x = as_input(input, op)
    _check_trailing(x, shape, op)
    x = x.astype(_dtype_of(x, weight), copy=False)
    for what, p in (("weight", weight), ("bias", bias)):
        if p is not None and as_input(p, f"{op}({what})").shape != shape:
            raise ValueError(f"{op}: {what} must have shape {shape}, got "
                             f"{as_input(p, op).shape}")
    n = math.prod(shape)
    if x.size == 0:
        return np.empty(x.shape, x.dtype)
    return _ops.layer_norm(x, n, weight, bias, float(eps))


@_public
def rms_norm(input, normalized_shape, weight=None, eps: float | None = None) -> np.ndarray:
    """``x / sqrt(mean(x**2) + eps) * weight`` over the trailing ``normalized_shape``
    dimensions; ``eps`` None means the compute dtype's machine epsilon (as torch)."""
    op = "rms_norm"
    shape = _normalized_shape(normalized_shape)
    x = as_input(input, op)
    _check_trailing(x, shape, op)
    dt = _dtype_of(x, weight)
    x = x.astype(dt, copy=False)
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    e = np.finfo(dt).eps if eps is None else eps
    ms = np.mean(np.square(x, dtype=np.float64), axis=axes, keepdims=True)
    y = (x * (1.0 / np.sqrt(ms + e))).astype(dt, copy=False)
    if weight is not None:
        w = as_input(weight, f"{op}(weight)")
        if w.shape != shape:
            raise ValueError(f"{op}: weight must have shape {shape}, got {w.shape}")
        y = y * w.astype(dt, copy=False)
    return y


@_public
def local_response_norm(input, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0) -> np.ndarray:
    """``x / (k + alpha * mean(x**2 over `size` neighbouring channels))**beta`` for an
    (N, C, *) input of at least 3 dimensions (the window is zero-padded, ``size // 2``
    channels before and ``(size - 1) // 2`` after, as torch)."""
    op = "local_response_norm"
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
        raise ValueError(f"{op}: size must be a positive int, got {size!r}")
    x = as_input(input, op)
    if x.ndim < 3:
        raise ValueError(f"{op}: expected an input of 3 or more dimensions (N, C, *), got "
                         f"shape {x.shape}")
    dt = compute_dtype(x.dtype)
    x = x.astype(dt, copy=False)
    if x.size == 0:
        return np.empty(x.shape, dt)
    sq = np.square(x, dtype=np.float64)
    pad = [(0, 0)] * x.ndim
    pad[1] = (size // 2, (size - 1) // 2)
    padded = np.pad(sq, pad)
    c = x.shape[1]
    window = padded[:, 0:c].copy()
    for j in range(1, size):  # a sliding sum (a NaN stays in the windows that hold it)
        window += padded[:, j:j + c]
    div = (window / size * alpha + k) ** beta
    return (x / div).astype(dt, copy=False)


@_public
def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None) -> np.ndarray:
    """``x / max(||x||_p, eps)`` along ``dim``, as ``torch.nn.functional.normalize``; ``out``
    (a float ndarray of the input's shape) receives the result when given."""
    op = "normalize"
    x = as_input(input, op)
    dt = compute_dtype(x.dtype)
    x = x.astype(dt, copy=False)
    nd = max(x.ndim, 1)
    if not -nd <= dim < nd:
        raise IndexError(f"{op}: dim {dim} is out of range for an input with {x.ndim} "
                         f"dimension(s)")
    xv = x.reshape(1) if x.ndim == 0 else x
    a = np.abs(xv.astype(np.float64))
    if p == 2:
        norm = np.sqrt(np.sum(a * a, axis=dim, keepdims=True))
    elif p == 1:
        norm = np.sum(a, axis=dim, keepdims=True)
    elif math.isinf(p):
        norm = (np.max if p > 0 else np.min)(a, axis=dim, keepdims=True)
    elif p == 0:
        norm = np.sum(a != 0, axis=dim, keepdims=True).astype(np.float64)
    else:
        norm = np.sum(a ** p, axis=dim, keepdims=True) ** (1.0 / p)
    y = (xv / np.maximum(norm, eps)).astype(dt, copy=False).reshape(x.shape)
    if out is not None:
        if not isinstance(out, np.ndarray) or out.shape != x.shape:
            raise ValueError(f"{op}: out must be an ndarray of shape {x.shape}")
        np.copyto(out, y)
        return out
    return y
