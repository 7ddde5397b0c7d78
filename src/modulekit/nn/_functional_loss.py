"""Loss functions of ``torch.nn.functional``, evaluated forward; re-exported by
:mod:`modulekit.nn.functional`.

Each takes array-likes and returns an ndarray: the per-element (or per-sample) losses with
``reduction='none'``, else a 0-d array (``'mean'`` or ``'sum'``). They compute in float64 when
the input is float64, else in float32; reductions accumulate in float64 and round once.
``size_average`` and ``reduce`` are torch's deprecated spellings of ``reduction`` and are
honoured the same way. Class-index targets are checked against the number of classes before
anything is computed (``IndexError`` naming the loss and the bad index).
"""

from __future__ import annotations

import math

import numpy as np

from modulekit.compile.tracer import traceable
from modulekit.nn._input import as_indices, as_input
from modulekit.nn.functional import compute_dtype

__all__ = [
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cosine_embedding_loss",
    "cross_entropy",
    "ctc_loss",
    "gaussian_nll_loss",
    "hinge_embedding_loss",
    "huber_loss",
    "kl_div",
    "l1_loss",
    "margin_ranking_loss",
    "mse_loss",
    "multi_margin_loss",
    "multilabel_margin_loss",
    "multilabel_soft_margin_loss",
    "nll_loss",
    "poisson_nll_loss",
    "smooth_l1_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
    "triplet_margin_with_distance_loss",
]


def _public(fn):
    """``@traceable`` under the public name ``modulekit.nn.functional.<name>`` (what a
    captured graph records, and what a saved module's closed function table knows)."""
    return traceable(fn, f"modulekit.nn.functional.{fn.__name__}")


_REDUCTIONS = ("none", "mean", "sum")


def legacy_reduction(size_average, reduce, reduction: str) -> str:
    """torch's ``_Reduction.legacy_get_string``: the deprecated ``size_average`` / ``reduce``
    flags, when either is given, override ``reduction``."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"


def _check_reduction(reduction: str, op: str, extra=()) -> str:
    if reduction not in _REDUCTIONS + tuple(extra):
        allowed = ", ".join(repr(r) for r in _REDUCTIONS + tuple(extra))
        raise ValueError(f"{op}: {reduction!r} is not a valid value for reduction; expected "
                         f"one of {allowed}")
    return reduction


def _reduce(loss: np.ndarray, reduction: str, dt: np.dtype) -> np.ndarray:
    if reduction == "none":
        return loss.astype(dt, copy=False)
    if reduction == "sum":
        return np.asarray(np.sum(loss, dtype=np.float64), dtype=dt)
    if loss.size == 0:
        return np.asarray(np.nan, dtype=dt)
    return np.asarray(np.mean(loss, dtype=np.float64), dtype=dt)


def _dtype(*arrays) -> np.dtype:
    return np.dtype(np.float64) if any(a.dtype == np.float64 for a in arrays) else \
        np.dtype(np.float32)


def _pair(input, target, op: str, broadcast: bool = True):
    x = as_input(input, f"{op}(input)")
    t = as_input(target, f"{op}(target)")
    dt = compute_dtype(x.dtype)
    x, t = x.astype(dt, copy=False), t.astype(dt, copy=False)
    if x.shape != t.shape:
        if not broadcast:
            raise ValueError(f"{op}: target size {t.shape} must be the same as input size "
                             f"{x.shape}")
        try:
            np.broadcast_shapes(x.shape, t.shape)
        except ValueError:
            raise ValueError(f"{op}: target of shape {t.shape} does not broadcast with input "
                             f"of shape {x.shape}") from None
    return x, t, dt


def _weighted(loss: np.ndarray, weight, op: str) -> np.ndarray:
    if weight is None:
        return loss
    w = as_input(weight, f"{op}(weight)").astype(loss.dtype, copy=False)
    try:
        return loss * w
    except ValueError:
        raise ValueError(f"{op}: weight of shape {w.shape} does not broadcast with the loss of "
                         f"shape {loss.shape}") from None


@_public
def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean",
            weight=None) -> np.ndarray:
    """Mean (or sum, or each) absolute error ``|input - target|`` (broadcast), optionally
    scaled element-wise by ``weight``."""
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), "l1_loss")
    x, t, dt = _pair(input, target, "l1_loss")
    return _reduce(_weighted(np.abs(x - t), weight, "l1_loss"), reduction, dt)


@_public
def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean",
             weight=None) -> np.ndarray:
    """Mean (or sum, or each) squared error ``(input - target)**2`` (broadcast)."""
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), "mse_loss")
    x, t, dt = _pair(input, target, "mse_loss")
    d = x - t
    return _reduce(_weighted(d * d, weight, "mse_loss"), reduction, dt)


@_public
def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0,
               weight=None) -> np.ndarray:
    """``0.5 d**2`` where ``|d| < delta``, else ``delta * (|d| - 0.5 delta)``, ``d = input -
    target``."""
    reduction = _check_reduction(reduction, "huber_loss")
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    x, t, dt = _pair(input, target, "huber_loss")
    a = np.abs(x - t)
    loss = np.where(a < delta, 0.5 * a * a, delta * (a - 0.5 * delta))
    return _reduce(_weighted(loss, weight, "huber_loss"), reduction, dt)


@_public
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0) -> np.ndarray:
    """``0.5 d**2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta`` (L1 when beta = 0)."""
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction),
                                 "smooth_l1_loss")
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    x, t, dt = _pair(input, target, "smooth_l1_loss")
    a = np.abs(x - t)
    if beta == 0:
        loss = a
    else:
        loss = np.where(a < beta, 0.5 * a * a / dt.type(beta), a - dt.type(0.5 * beta))
    return _reduce(loss, reduction, dt)


def _class_dim(x: np.ndarray) -> int:
    return 1 if x.ndim >= 2 else 0


def _check_targets(x: np.ndarray, y: np.ndarray, op: str, ignore_index: int) -> np.ndarray:
    """Class-index targets ``y`` for scores ``x`` (N, C, d1, ...) or (C,): shape and range
    checked; returns the mask of targets that count (not ``ignore_index``)."""
    if x.ndim == 0:
        raise ValueError(f"{op}: input must have at least 1 dimension (the classes), got a "
                         f"0-d array")
    want = x.shape[:1] + x.shape[2:] if x.ndim >= 2 else ()
    if y.shape != want:
        raise ValueError(f"{op}: expected target of shape {want} for input of shape {x.shape}, "
                         f"got {y.shape}")
    valid = y != ignore_index
    c = x.shape[_class_dim(x)]
    bad = valid & ((y < 0) | (y >= c))
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        raise IndexError(f"{op}: target {int(y[pos] if y.ndim else y)} at position {pos} is "
                         f"out of bounds for {c} classes")
    return valid


def _pick(x: np.ndarray, y: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``x[n, y[n, ...], ...]`` along the class dimension (0 where not valid)."""
    idx = np.where(valid, y, 0)
    cd = _class_dim(x)
    return np.take_along_axis(x, np.expand_dims(idx, cd), axis=cd).squeeze(cd)


def _nll(logp: np.ndarray, y: np.ndarray, weight, ignore_index: int, reduction: str,
         op: str, dt: np.dtype) -> np.ndarray:
    valid = _check_targets(logp, y, op, ignore_index)
    c = logp.shape[_class_dim(logp)]
    if weight is None:
        w = np.ones(c, dtype=np.float64)
    else:
        w = as_input(weight, f"{op}(weight)").astype(np.float64).reshape(-1)
        if w.size != c:
            raise ValueError(f"{op}: weight must have {c} elements (one per class), got "
                             f"{w.size}")
    wy = np.where(valid, w[np.where(valid, y, 0)], 0.0)
    loss = -wy * _pick(logp, y, valid)
    if reduction == "none":
        return loss.astype(dt)
    if reduction == "sum":
        return np.asarray(loss.sum(), dtype=dt)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(loss.sum() / wy.sum(), dtype=dt)  # all ignored: NaN, as torch


@_public
def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100,
             reduce=None, reduction: str = "mean") -> np.ndarray:
    """Negative log-likelihood ``-weight[y] * input[n, y]`` of log-probabilities ``input``
    ((N, C), (C,) or (N, C, d1, ...)) at class indices ``target``; ``'mean'`` divides by the
    summed weights of the targets that count."""
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), "nll_loss")
    x = as_input(input, "nll_loss(input)")
    dt = compute_dtype(x.dtype)
    y = as_indices(target, "nll_loss(target)").astype(np.int64, copy=False)
    return _nll(x.astype(np.float64), y, weight, ignore_index, reduction, "nll_loss", dt)


def _log_softmax64(x: np.ndarray, dim: int) -> np.ndarray:
    m = np.max(x, axis=dim, keepdims=True)
    m = np.where(np.isneginf(m), 0, m)  # a row of -inf: NaN, as torch; +inf: NaN too
    s = x - m
    with np.errstate(divide="ignore"):
        return s - np.log(np.sum(np.exp(s), axis=dim, keepdims=True))


@_public
def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100,
                  reduce=None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> np.ndarray:
    """Cross entropy of logits ``input`` ((N, C), (C,) or (N, C, d1, ...)) against class
    indices (integer ``target``) or class probabilities (floating ``target`` of the input's
    shape), with torch's ``weight``, ``ignore_index`` and ``label_smoothing`` semantics."""
    op = "cross_entropy"
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), op)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing}")
    x = as_input(input, f"{op}(input)")
    dt = compute_dtype(x.dtype)
    if x.ndim == 0:
        raise ValueError(f"{op}: input must have at least 1 dimension (the classes)")
    cd = _class_dim(x)
    c = x.shape[cd]
    logp = _log_softmax64(x.astype(np.float64), cd)
    t = as_input(target, f"{op}(target)")
    wshape = [1] * x.ndim
    wshape[cd] = c
    w = None
    if weight is not None:
        w = as_input(weight, f"{op}(weight)").astype(np.float64).reshape(-1)
        if w.size != c:
            raise ValueError(f"{op}: weight must have {c} elements (one per class), got "
                             f"{w.size}")
    if t.dtype.kind == "f" or t.dtype.name == "bfloat16":  # class probabilities
        if t.shape != x.shape:
            raise ValueError(f"{op}: probability targets must have the input's shape "
                             f"{x.shape}, got {t.shape}")
        p = t.astype(np.float64)
        if label_smoothing > 0:
            p = p * (1 - label_smoothing) + label_smoothing / c
        prod = logp * p
        if w is not None:
            prod = prod * w.reshape(wshape)
        loss = -prod.sum(axis=cd)
        if reduction == "none":
            return loss.astype(dt)
        if reduction == "sum":
            return np.asarray(loss.sum(), dtype=dt)
        if x.size == 0:
            return np.asarray(np.nan, dtype=dt)
        return np.asarray(loss.sum() / (x.size / c), dtype=dt)
    y = as_indices(t, f"{op}(target)").astype(np.int64, copy=False)
    nll = _nll(logp, y, w, ignore_index, reduction, op, np.dtype(np.float64))
    if label_smoothing == 0:
        return nll.astype(dt)
    valid = y != ignore_index
    smooth = -(logp * (w.reshape(wshape) if w is not None else 1.0)).sum(axis=cd)
    smooth = np.where(valid, smooth, 0.0)
    if reduction == "none":
        ret = smooth
    elif reduction == "sum":
        ret = smooth.sum()
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            if w is not None:
                ret = smooth.sum() / w[y[valid]].sum()
            else:
                ret = smooth.sum() / valid.sum()
    out = (1 - label_smoothing) * nll + ret * (label_smoothing / c)
    return np.asarray(out, dtype=dt)


_LOG_CLAMP = -100.0  # torch clamps BCE's logarithms at -100


@_public
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction: str = "mean") -> np.ndarray:
    """``-weight * (t log(x) + (1 - t) log(1 - x))`` for probabilities ``x`` in [0, 1] (the
    logarithms clamped at -100, as torch)."""
    op = "binary_cross_entropy"
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), op)
    x, t, dt = _pair(input, target, op, broadcast=False)
    x64 = x.astype(np.float64)
    if ((x64 < 0) | (x64 > 1)).any():
        raise ValueError(f"{op}: all elements of input should be between 0 and 1")
    with np.errstate(divide="ignore"):
        lx = np.maximum(np.log(x64), _LOG_CLAMP)
        l1x = np.maximum(np.log1p(-x64), _LOG_CLAMP)
    loss = -(t * lx + (1 - t.astype(np.float64)) * l1x)
    return _reduce(_weighted(loss, weight, op), reduction, dt)


def _log_sigmoid64(x: np.ndarray) -> np.ndarray:
    return np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x)))


@_public
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction: str = "mean",
                                     pos_weight=None) -> np.ndarray:
    """Binary cross entropy of ``sigmoid(input)`` computed from the logits stably:
    ``(1 - t) x - (1 + (pos_weight - 1) t) log(sigmoid(x))``, times ``weight``."""
    op = "binary_cross_entropy_with_logits"
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), op)
    x, t, dt = _pair(input, target, op, broadcast=False)
    x64, t64 = x.astype(np.float64), t.astype(np.float64)
    ls = _log_sigmoid64(x64)
    if pos_weight is not None:
        pw = as_input(pos_weight, f"{op}(pos_weight)").astype(np.float64)
        try:
            lw = (pw - 1) * t64 + 1
        except ValueError:
            raise ValueError(f"{op}: pos_weight of shape {pw.shape} does not broadcast with "
                             f"the target of shape {t.shape}") from None
        loss = (1 - t64) * x64 - lw * ls
    else:
        loss = (1 - t64) * x64 - ls
    return _reduce(_weighted(loss, weight, op), reduction, dt)


@_public
def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False) -> np.ndarray:
    """Kullback-Leibler divergence of log-probabilities ``input`` from ``target``
    (probabilities, or log-probabilities with ``log_target=True``): ``t (log t - x)``
    (0 where ``t == 0``); ``'batchmean'`` divides the sum by the batch size."""
    op = "kl_div"
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), op,
                                 ("batchmean",))
    x, t, dt = _pair(input, target, op)
    x64, t64 = x.astype(np.float64), t.astype(np.float64)
    if log_target:
        loss = np.exp(t64) * (t64 - x64)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            xlogy = np.where(t64 == 0, 0.0, t64 * np.log(t64))
        xlogy = np.where(np.isnan(t64), np.nan, xlogy)
        loss = xlogy - t64 * x64
    if reduction == "batchmean":
        s = loss.sum()
        return np.asarray(s / x.shape[0] if x.ndim else s, dtype=dt)
    return _reduce(loss, reduction, dt)


@_public
def poisson_nll_loss(input, target, log_input: bool = True, full: bool = False,
                     size_average=None, eps: float = 1e-8, reduce=None,
                     reduction: str = "mean") -> np.ndarray:
    """Poisson negative log-likelihood: ``exp(x) - t x`` (``log_input``) or
    ``x - t log(x + eps)``, plus Stirling's ``t log t - t + 0.5 log(2 pi t)`` where ``t > 1``
    when ``full``."""
    op = "poisson_nll_loss"
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), op)
    x, t, dt = _pair(input, target, op)
    x64, t64 = x.astype(np.float64), t.astype(np.float64)
    if log_input:
        loss = np.exp(x64) - t64 * x64
    else:
        loss = x64 - t64 * np.log(x64 + eps)
    if full:
        with np.errstate(divide="ignore", invalid="ignore"):
            st = t64 * np.log(t64) - t64 + 0.5 * np.log(2 * np.pi * t64)
        loss = loss + np.where(t64 > 1, st, 0.0)
    return _reduce(loss, reduction, dt)


@_public
def gaussian_nll_loss(input, target, var, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean") -> np.ndarray:
    """Gaussian negative log-likelihood ``0.5 (log(var) + (x - t)**2 / var)`` (+ ``0.5
    log(2 pi)`` when ``full``), ``var`` clamped at ``eps``; ``var`` may be a float, the
    input's shape, or one dimension short / of size 1 in one dimension (homoscedastic)."""
    op = "gaussian_nll_loss"
    reduction = _check_reduction(reduction, op)
    x, t, dt = _pair(input, target, op)
    if isinstance(var, (int, float)) and not isinstance(var, bool):
        if var < 0:
            raise ValueError(f"{op}: var has negative entry/entries")
        v = np.full(x.shape, float(var))
    else:
        v = as_input(var, f"{op}(var)").astype(np.float64)
        if (v < 0).any():
            raise ValueError(f"{op}: var has negative entry/entries")
        if v.shape != x.shape:
            if x.shape[:-1] == v.shape:
                v = v[..., None]
            elif not (v.ndim == x.ndim
                      and sum(b for a, b in zip(x.shape, v.shape) if a != b) == 1):
                raise ValueError(f"{op}: var of shape {v.shape} is of incorrect size for "
                                 f"input of shape {x.shape}")
    v = np.maximum(v, eps)
    d = x.astype(np.float64) - t
    loss = 0.5 * (np.log(v) + d * d / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction, dt)


def _three(input1, input2, target, op: str):
    a = as_input(input1, f"{op}(input1)")
    b = as_input(input2, f"{op}(input2)")
    y = as_input(target, f"{op}(target)")
    dt = compute_dtype(_dtype(a, b))
    return a.astype(np.float64), b.astype(np.float64), y.astype(np.float64), dt


@_public
def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, size_average=None,
                          reduce=None, reduction: str = "mean") -> np.ndarray:
    """``1 - cos(x1, x2)`` where ``target == 1``, ``max(0, cos(x1, x2) - margin)`` where
    ``target == -1`` (rows of (N, D) inputs, or two (D,) vectors with a 0-d target)."""
    op = "cosine_embedding_loss"
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), op)
    a, b, y, dt = _three(input1, input2, target, op)
    if y.ndim not in (0, 1) or a.shape != b.shape or a.ndim != y.ndim + 1 \
            or (y.ndim == 1 and y.shape[0] != a.shape[0]):
        raise ValueError(f"{op}: expected inputs of shape (N, D) with a target of shape (N,) "
                         f"or (D,) with a 0-d target, got {a.shape}, {b.shape} and target "
                         f"{y.shape}")
    d = y.ndim
    eps = 1e-12
    prod = (a * b).sum(axis=d)
    denom = np.sqrt(((a * a).sum(axis=d) + eps) * ((b * b).sum(axis=d) + eps))
    cos = prod / denom
    loss = np.where(y == 1, 1 - cos, 0.0) + np.where(y == -1, np.maximum(cos - margin, 0), 0.0)
    return _reduce(loss, reduction, dt)


@_public
def margin_ranking_loss(input1, input2, target, margin: float = 0.0, size_average=None,
                        reduce=None, reduction: str = "mean") -> np.ndarray:
    """``max(0, -target * (input1 - input2) + margin)``."""
    op = "margin_ranking_loss"
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), op)
    a, b, y, dt = _three(input1, input2, target, op)
    if not (a.shape == b.shape == y.shape):
        raise ValueError(f"{op}: input1, input2 and target must have the same shape, got "
                         f"{a.shape}, {b.shape} and {y.shape}")
    return _reduce(np.maximum(-y * (a - b) + margin, 0), reduction, dt)


@_public
def hinge_embedding_loss(input, target, margin: float = 1.0, size_average=None, reduce=None,
                         reduction: str = "mean") -> np.ndarray:
    """``x`` where ``target == 1``, ``max(0, margin - x)`` where ``target == -1``."""
    op = "hinge_embedding_loss"
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), op)
    x, t, dt = _pair(input, target, op)
    x64 = x.astype(np.float64)
    loss = np.where(t != 1, np.maximum(margin - x64, 0), 0.0) + np.where(t != -1, x64, 0.0)
    return _reduce(loss, reduction, dt)


@_public
def soft_margin_loss(input, target, size_average=None, reduce=None,
                     reduction: str = "mean") -> np.ndarray:
    """``log(1 + exp(-target * input))`` (computed without overflow)."""
    op = "soft_margin_loss"
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), op)
    x, t, dt = _pair(input, target, op)
    return _reduce(-_log_sigmoid64(t.astype(np.float64) * x), reduction, dt)


@_public
def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction: str = "mean") -> np.ndarray:
    """Per sample, the mean over classes of ``-(t log sigmoid(x) + (1 - t) log sigmoid(-x))``
    (times ``weight``)."""
    op = "multilabel_soft_margin_loss"
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), op)
    x, t, dt = _pair(input, target, op)
    if x.ndim == 0:
        raise ValueError(f"{op}: input must have at least 1 dimension (the classes)")
    x64, t64 = x.astype(np.float64), t.astype(np.float64)
    loss = -(t64 * _log_sigmoid64(x64) + (1 - t64) * _log_sigmoid64(-x64))
    loss = _weighted(loss, weight, op)
    loss = loss.sum(axis=-1) / x.shape[-1]
    return _reduce(loss, reduction, dt)


def _margin_inputs(input, target, op: str):
    x = as_input(input, f"{op}(input)")
    dt = compute_dtype(x.dtype)
    if x.ndim not in (1, 2):
        raise ValueError(f"{op}: expected a 1-D (C,) or 2-D (N, C) input, got shape {x.shape}")
    y = as_indices(target, f"{op}(target)").astype(np.int64, copy=False)
    return x.astype(np.float64), y, dt


@_public
def multi_margin_loss(input, target, p: int = 1, margin: float = 1.0, weight=None,
                      size_average=None, reduce=None, reduction: str = "mean") -> np.ndarray:
    """Multi-class hinge loss: per sample, ``sum_{i != y} max(0, margin - x[y] + x[i])**p / C``
    (times ``weight[y]``), ``p`` 1 or 2."""
    op = "multi_margin_loss"
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), op)
    if p not in (1, 2):
        raise ValueError(f"{op}: only p == 1 and p == 2 are supported, got {p}")
    x, y, dt = _margin_inputs(input, target, op)
    x2 = x.reshape(-1, x.shape[-1])
    y1 = y.reshape(-1)
    n, c = x2.shape
    if y1.shape[0] != n or (x.ndim == 1 and y.ndim > 1) or (x.ndim == 2 and y.ndim != 1):
        raise ValueError(f"{op}: expected a target of {n} class indices for input of shape "
                         f"{x.shape}, got target shape {y.shape}")
    if ((y1 < 0) | (y1 >= c)).any():
        bad = int(y1[(y1 < 0) | (y1 >= c)][0])
        raise IndexError(f"{op}: target {bad} is out of bounds for {c} classes")
    xy = x2[np.arange(n), y1][:, None]
    z = np.maximum(margin - xy + x2, 0) ** p
    if weight is not None:
        w = as_input(weight, f"{op}(weight)").astype(np.float64).reshape(-1)
        if w.size != c:
            raise ValueError(f"{op}: weight must have {c} elements, got {w.size}")
        z = z * w[y1][:, None]
    z[np.arange(n), y1] = 0
    loss = z.sum(axis=1) / c
    if x.ndim == 1:
        loss = loss.reshape(())
    return _reduce(loss, reduction, dt)


@_public
def multilabel_margin_loss(input, target, size_average=None, reduce=None,
                           reduction: str = "mean") -> np.ndarray:
    """Multi-label hinge loss: ``target`` holds each sample's class indices, ended by the first
    -1; per sample ``sum_{j in targets, i not in targets} max(0, 1 - (x[j] - x[i])) / C``."""
    op = "multilabel_margin_loss"
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), op)
    x, y, dt = _margin_inputs(input, target, op)
    if y.shape != x.shape:
        raise ValueError(f"{op}: target must have the input's shape {x.shape}, got {y.shape}")
    x2, y2 = x.reshape(-1, x.shape[-1]), y.reshape(-1, x.shape[-1])
    n, c = x2.shape
    # a target row counts up to its first -1
    stop = np.where((y2 == -1).any(axis=1), np.argmax(y2 == -1, axis=1), c)
    live = np.arange(c)[None, :] < stop[:, None]
    if (live & ((y2 < 0) | (y2 >= c))).any():
        bad = int(y2[live & ((y2 < 0) | (y2 >= c))][0])
        raise IndexError(f"{op}: target {bad} is out of bounds for {c} classes")
    is_target = np.zeros((n, c), dtype=bool)
    rows = np.repeat(np.arange(n), c)[live.reshape(-1)]
    is_target[rows, y2[live]] = True
    xj = np.where(live, np.take_along_axis(x2, np.where(live, y2, 0), axis=1), 0.0)  # (n, c)
    hinge = np.maximum(1 - (xj[:, :, None] - x2[:, None, :]), 0)  # (n, j, i)
    hinge = hinge * live[:, :, None] * ~is_target[:, None, :]
    loss = hinge.sum(axis=(1, 2)) / c
    if x.ndim == 1:
        loss = loss.reshape(())
    return _reduce(loss, reduction, dt)


def _pdist(a: np.ndarray, b: np.ndarray, p: float, eps: float, keepdim: bool) -> np.ndarray:
    d = np.abs(a - b + eps)
    axis = max(a.ndim, b.ndim) - 1
    if axis < 0:
        return d
    if p == 0:
        return (d != 0).sum(axis=axis, keepdims=keepdim).astype(d.dtype)
    if math.isinf(p):
        return (d.max if p > 0 else d.min)(axis=axis, keepdims=keepdim)
    if p == 1:
        return d.sum(axis=axis, keepdims=keepdim)
    if p == 2:
        return np.sqrt((d * d).sum(axis=axis, keepdims=keepdim))
    return (d ** p).sum(axis=axis, keepdims=keepdim) ** (1.0 / p)


@_public
def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, size_average=None,
                        reduce=None, reduction: str = "mean") -> np.ndarray:
    """``max(d(a, p) - d(a, n) + margin, 0)`` with ``d`` the pairwise ``p``-norm distance
    (``swap``: ``d(a, n)`` replaced by ``min(d(a, n), d(p, n))``)."""
    op = "triplet_margin_loss"
    reduction = _check_reduction(legacy_reduction(size_average, reduce, reduction), op)
    arrs = [as_input(v, f"{op}({n})") for v, n in
            ((anchor, "anchor"), (positive, "positive"), (negative, "negative"))]
    dims = {a.ndim for a in arrs}
    if not dims <= {1, 2} or len(dims) != 1:
        raise ValueError(f"{op}: anchor, positive and negative must all be 1-D or all 2-D, got "
                         f"shapes {[a.shape for a in arrs]}")
    dt = compute_dtype(_dtype(*arrs))
    a, pos, neg = (v.astype(np.float64) for v in arrs)
    d_ap = _pdist(a, pos, p, eps, False)
    d_an = _pdist(a, neg, p, eps, False)
    if swap:
        d_an = np.minimum(d_an, _pdist(pos, neg, p, eps, False))
    return _reduce(np.maximum(margin + d_ap - d_an, 0), reduction, dt)


@_public
def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin: float = 1.0, swap: bool = False,
                                      reduction: str = "mean") -> np.ndarray:
    """``max(d(a, p) - d(a, n) + margin, 0)`` with any ``distance_function`` (default: the
    pairwise Euclidean distance), ``swap`` as :func:`triplet_margin_loss`."""
    op = "triplet_margin_with_distance_loss"
    reduction = _check_reduction(reduction, op)
    if margin <= 0:
        raise ValueError(f"{op}: margin must be greater than 0, got {margin}")
    arrs = [as_input(v, f"{op}({n})") for v, n in
            ((anchor, "anchor"), (positive, "positive"), (negative, "negative"))]
    dt = compute_dtype(_dtype(*arrs))
    a, pos, neg = (v.astype(dt, copy=False) for v in arrs)
    if distance_function is None:
        def distance_function(x, y):
            return _pdist(x.astype(np.float64), y.astype(np.float64), 2, 1e-6, False)
    d_ap = np.asarray(distance_function(a, pos), dtype=np.float64)
    d_an = np.asarray(distance_function(a, neg), dtype=np.float64)
    if swap:
        d_an = np.minimum(d_an, np.asarray(distance_function(pos, neg), dtype=np.float64))
    return _reduce(np.maximum(margin + d_ap - d_an, 0), reduction, dt)


@_public
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank: int = 0,
             reduction: str = "mean", zero_infinity: bool = False) -> np.ndarray:
    """Connectionist temporal classification loss, the forward (alpha) recursion in log space.

    ``log_probs`` is (T, N, C) or (T, C) log-probabilities; ``targets`` (N, S) padded or the
    concatenated 1-D targets; ``input_lengths`` and ``target_lengths`` (N,) (or scalars for an
    unbatched input). ``'mean'`` divides each sample's loss by its target length (at least 1),
    then averages over the batch; ``zero_infinity`` turns impossible alignments' infinite
    losses into 0.
    """
    op = "ctc_loss"
    reduction = _check_reduction(reduction, op)
    lp = as_input(log_probs, f"{op}(log_probs)")
    dt = compute_dtype(lp.dtype)
    unbatched = lp.ndim == 2
    if lp.ndim not in (2, 3):
        raise ValueError(f"{op}: log_probs must be (T, N, C) or (T, C), got shape {lp.shape}")
    lp = lp.astype(np.float64)
    if unbatched:
        lp = lp[:, None, :]
    t_max, n, c = lp.shape
    if not 0 <= blank < c:
        raise ValueError(f"{op}: blank {blank} must be a class index in [0, {c})")
    tg = as_indices(targets, f"{op}(targets)").astype(np.int64)
    il = as_indices(input_lengths, f"{op}(input_lengths)").astype(np.int64).reshape(-1)
    tl = as_indices(target_lengths, f"{op}(target_lengths)").astype(np.int64).reshape(-1)
    if il.shape != (n,) or tl.shape != (n,):
        raise ValueError(f"{op}: input_lengths and target_lengths must hold {n} values, got "
                         f"{il.size} and {tl.size}")
    if ((il < 0) | (il > t_max)).any():
        raise ValueError(f"{op}: input_lengths must be in [0, {t_max}], got {il.tolist()}")
    if (tl < 0).any():
        raise ValueError(f"{op}: target_lengths must be non-negative, got {tl.tolist()}")
    if unbatched and tg.ndim == 1:
        tg = tg[None, :]
    if tg.ndim == 2:
        if tg.shape[0] != n or (tl > tg.shape[1]).any():
            raise ValueError(f"{op}: padded targets of shape {tg.shape} do not fit batch {n} "
                             f"with target_lengths {tl.tolist()}")
        seqs = [tg[i, : tl[i]] for i in range(n)]
    elif tg.ndim == 1:
        if tg.size != tl.sum():
            raise ValueError(f"{op}: concatenated targets hold {tg.size} labels, "
                             f"target_lengths sum to {int(tl.sum())}")
        ends = np.cumsum(tl)
        seqs = [tg[e - k: e] for e, k in zip(ends, tl)]
    else:
        raise ValueError(f"{op}: targets must be 1-D or 2-D, got shape {tg.shape}")
    losses = np.empty(n)
    for i, seq in enumerate(seqs):
        if ((seq < 0) | (seq >= c) | (seq == blank)).any():
            raise ValueError(f"{op}: targets of sample {i} must be class indices in [0, {c}) "
                             f"other than blank {blank}, got {seq.tolist()}")
        losses[i] = _ctc_one(lp[: il[i], i, :], seq, blank)
    if zero_infinity:
        losses = np.where(np.isinf(losses), 0.0, losses)
    if unbatched:
        losses = losses.reshape(())
    if reduction == "mean":
        return np.asarray(np.mean(losses / np.maximum(tl, 1)), dtype=dt)
    if reduction == "sum":
        return np.asarray(losses.sum(), dtype=dt)
    return losses.astype(dt)


def _ctc_one(lp: np.ndarray, seq: np.ndarray, blank: int) -> float:
    """``-log p(seq | lp)`` for one sample: lp (T, C) log-probabilities."""
    s = 2 * len(seq) + 1
    ext = np.full(s, blank, dtype=np.int64)
    ext[1::2] = seq
    # a label may be reached from two back when it differs from the label two back
    skip = np.zeros(s, dtype=bool)
    skip[3::2] = seq[1:] != seq[:-1]
    t_len = lp.shape[0]
    if t_len == 0:
        return 0.0 if len(seq) == 0 else math.inf
    alpha = np.full(s, -np.inf)
    alpha[0] = lp[0, blank]
    if s > 1:
        alpha[1] = lp[0, ext[1]]
    for t in range(1, t_len):
        prev1 = np.concatenate(([-np.inf], alpha[:-1]))
        prev2 = np.concatenate(([-np.inf, -np.inf], alpha[:-2]))
        prev2 = np.where(skip, prev2, -np.inf)
        alpha = np.logaddexp(np.logaddexp(alpha, prev1), prev2) + lp[t, ext]
    tail = alpha[-1] if s == 1 else np.logaddexp(alpha[-1], alpha[-2])
    return float(-tail)
