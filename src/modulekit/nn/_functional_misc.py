"""Embeddings, distances, ``bilinear``, ``one_hot`` and the dropout variants of
``torch.nn.functional``, re-exported by :mod:`modulekit.nn.functional`.

Dropout variants are the identity (the input array itself) when not training; in training they
draw their masks from the library's generator (:func:`modulekit.nn.manual_seed`), so the
values differ from torch's RNG while the distribution and scaling are torch's.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from modulekit._ext import _ops
from modulekit.compile.tracer import traceable
from modulekit.nn._input import as_indices, as_input
from modulekit.nn._random import default_generator
from modulekit.nn.functional import _inplace_target, compute_dtype

__all__ = [
    "alpha_dropout",
    "bilinear",
    "cosine_similarity",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "embedding",
    "embedding_bag",
    "feature_alpha_dropout",
    "one_hot",
    "pairwise_distance",
]


def _public(fn):
    """``@traceable`` under the public name ``modulekit.nn.functional.<name>`` (what a
    captured graph records, and what a saved module's closed function table knows)."""
    return traceable(fn, f"modulekit.nn.functional.{fn.__name__}")


# -SELU's alpha * scale: the value alpha dropout gives dropped units
_ALPHA_DROP = 1.7580993408473766


def _vector_norm(d: np.ndarray, p: float, axis, keepdims: bool) -> np.ndarray:
    a = np.abs(d)
    if p == 2:
        return np.sqrt(np.sum(a * a, axis=axis, keepdims=keepdims))
    if p == 1:
        return np.sum(a, axis=axis, keepdims=keepdims)
    if math.isinf(p):
        return (np.max if p > 0 else np.min)(a, axis=axis, keepdims=keepdims)
    if p == 0:
        return np.sum(a != 0, axis=axis, keepdims=keepdims).astype(d.dtype)
    return np.sum(a ** p, axis=axis, keepdims=keepdims) ** (1.0 / p)


def embedding_renorm_(weight: np.ndarray, ids: np.ndarray, max_norm: float,
                      norm_type: float) -> None:
    """torch's ``embedding_renorm_``: every row of ``weight`` that ``ids`` looks up and whose
    ``norm_type``-norm exceeds ``max_norm`` is scaled in place to norm ``max_norm``
    (``max_norm / (norm + 1e-7)``)."""
    rows = np.unique(ids)
    if rows.size == 0:
        return
    norms = _vector_norm(weight[rows].astype(np.float64), norm_type, 1, False)
    over = norms > max_norm
    if over.any():
        scale = max_norm / (norms[over] + 1e-7)
        weight[rows[over]] = (weight[rows[over]] * scale[:, None]).astype(weight.dtype)


def _table(weight, op: str) -> np.ndarray:
    w = as_input(weight, f"{op}(weight)")
    if w.ndim != 2:
        raise ValueError(f"{op}: weight must be a 2-D (num_embeddings, embedding_dim) table, "
                         f"got shape {w.shape}")
    return w


def _check_ids(ids: np.ndarray, rows: int, op: str) -> np.ndarray:
    ids = ids.astype(np.int64, copy=False)
    bad = (ids < 0) | (ids >= rows)
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0]) if ids.ndim else ()
        raise IndexError(f"{op}: index {int(ids[pos])} at position {pos} is out of range for "
                         f"a table of {rows} rows")
    return ids


def _max_norm_target(weight, w: np.ndarray, op: str) -> np.ndarray:
    """The array ``max_norm`` renormalises in place: the weight's own memory."""
    if hasattr(weight, "numpy") and not isinstance(weight, np.ndarray):
        target = weight.numpy()
    else:
        target = weight
    if not isinstance(target, np.ndarray) or not target.flags.writeable \
            or target.dtype.kind != "f":
        raise ValueError(f"{op}: max_norm renormalises the weight in place, so the weight must "
                         f"be a writable floating ndarray or Tensor")
    return target


@_public
def embedding(input, weight, padding_idx: int | None = None, max_norm: float | None = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> np.ndarray:
    """Rows of the 2-D ``weight`` picked by the integer ``input`` (any shape): an array of
    shape ``input.shape + (embedding_dim,)``. ``max_norm`` first rescales, in place, each
    looked-up row whose ``norm_type``-norm exceeds it (as torch); ``padding_idx``,
    ``scale_grad_by_freq`` and ``sparse`` only concern gradients."""
    op = "embedding"
    w = _table(weight, op)
    ids = _check_ids(as_indices(input, op), w.shape[0], op)
    if max_norm is not None:
        embedding_renorm_(_max_norm_target(weight, w, op), ids, max_norm, norm_type)
        w = _table(weight, op)
    return _ops.embedding(ids, w)


@_public
def embedding_bag(input, weight, offsets=None, max_norm: float | None = None,
                  norm_type: float = 2, scale_grad_by_freq: bool = False, mode: str = "mean",
                  sparse: bool = False, per_sample_weights=None,
                  include_last_offset: bool = False,
                  padding_idx: int | None = None) -> np.ndarray:
    """Sums, means or maxima of bags of embedding rows, as
    ``torch.nn.functional.embedding_bag``: a 2-D ``input`` (B, L) holds B bags of L indices;
    a 1-D ``input`` is cut into bags at ``offsets`` (B starts, or B + 1 boundaries with
    ``include_last_offset``). ``per_sample_weights`` (``input``'s shape, ``mode='sum'`` only)
    scales each row; entries equal to ``padding_idx`` are left out (and not counted by the
    mean); an empty bag gives zeros."""
    op = "embedding_bag"
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"{op}: mode must be 'sum', 'mean' or 'max', got {mode!r}")
    w = _table(weight, op)
    rows, dim = w.shape
    ids = as_indices(input, f"{op}(input)").astype(np.int64, copy=False)
    if ids.ndim == 2:
        if offsets is not None:
            raise ValueError(f"{op}: offsets must be None when input is 2-D (B, L), got "
                             f"offsets")
        b, length = ids.shape
        starts = np.arange(b, dtype=np.int64) * length
        ids = ids.reshape(-1)
        ends = starts + length
    elif ids.ndim == 1:
        if offsets is None:
            raise ValueError(f"{op}: offsets are required for a 1-D input")
        off = as_indices(offsets, f"{op}(offsets)").astype(np.int64, copy=False)
        if off.ndim != 1:
            raise ValueError(f"{op}: offsets must be 1-D, got shape {off.shape}")
        if off.size and off[0] != 0:
            raise ValueError(f"{op}: offsets[0] must be 0, got {int(off[0])}")
        if (np.diff(off) < 0).any() or (off.size and off[-1] > ids.size):
            raise ValueError(f"{op}: offsets must be non-decreasing and at most the input's "
                             f"length {ids.size}, got {off.tolist()}")
        if include_last_offset:
            if off.size == 0:
                raise ValueError(f"{op}: include_last_offset needs at least one offset")
            starts, ends = off[:-1], off[1:]
        else:
            starts = off
            ends = np.append(off[1:], ids.size)
    else:
        raise ValueError(f"{op}: input must be 1-D (with offsets) or 2-D (B, L), got shape "
                         f"{ids.shape}")
    ids = _check_ids(ids, rows, op)
    if padding_idx is not None:
        if not -rows <= padding_idx < rows:
            raise ValueError(f"{op}: padding_idx must be within [{-rows}, {rows}), got "
                             f"{padding_idx}")
        padding_idx %= rows
    psw = None
    if per_sample_weights is not None:
        if mode != "sum":
            raise ValueError(f"{op}: per_sample_weights is only supported for mode='sum', got "
                             f"mode={mode!r}")
        psw = as_input(per_sample_weights, f"{op}(per_sample_weights)").reshape(-1)
        if psw.size != ids.size:
            raise ValueError(f"{op}: per_sample_weights must have the input's {ids.size} "
                             f"elements, got {psw.size}")
    if max_norm is not None:
        embedding_renorm_(_max_norm_target(weight, w, op), ids, max_norm, norm_type)
        w = _table(weight, op)
    dt = compute_dtype(w.dtype)
    nbags = len(starts)
    bag = np.repeat(np.arange(nbags), ends - starts)
    pos = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) if nbags else \
        np.empty(0, np.int64)
    pos = pos.astype(np.int64)
    if padding_idx is not None:
        keep = ids[pos] != padding_idx
        bag, pos = bag[keep], pos[keep]
    vals = w[ids[pos]].astype(dt)
    if psw is not None:
        vals = vals * psw[pos].astype(dt)[:, None]
    out = np.zeros((nbags, dim), dtype=dt)
    if mode == "max":
        if bag.size:
            acc = np.full((nbags, dim), -np.inf, dtype=dt)
            np.maximum.at(acc, bag, vals)
            out = np.where(np.isneginf(acc), 0, acc).astype(dt)
        return out
    np.add.at(out, bag, vals)
    if mode == "mean":
        counts = np.bincount(bag, minlength=nbags).astype(dt)
        out = out / np.maximum(counts, 1)[:, None]
    return out


@_public
def one_hot(tensor, num_classes: int = -1) -> np.ndarray:
    """int64 array of shape ``tensor.shape + (num_classes,)``, 1 at each index; with
    ``num_classes=-1`` the number of classes is the largest index + 1."""
    op = "one_hot"
    ids = as_indices(tensor, op).astype(np.int64, copy=False)
    if (ids < 0).any():
        raise ValueError(f"{op}: class values must be non-negative, got {int(ids.min())}")
    if num_classes == -1:
        if ids.size == 0:
            raise ValueError(f"{op}: can not infer the total number of classes from an empty "
                             f"tensor")
        num_classes = int(ids.max()) + 1
    elif num_classes < 1 and ids.size or num_classes < 0:
        raise ValueError(f"{op}: num_classes must be positive or -1, got {num_classes}")
    elif ids.size and ids.max() >= num_classes:
        raise ValueError(f"{op}: class values must be smaller than num_classes={num_classes}, "
                         f"got {int(ids.max())}")
    out = np.zeros(ids.shape + (num_classes,), dtype=np.int64)
    np.put_along_axis(out, ids[..., None], 1, axis=-1)
    return out


def _broadcast_pair(x1, x2, op: str):
    a = as_input(x1, f"{op}(x1)")
    b = as_input(x2, f"{op}(x2)")
    dt = np.dtype(np.float64) if np.float64 in (a.dtype, b.dtype) else np.dtype(np.float32)
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"{op}: x1 of shape {a.shape} and x2 of shape {b.shape} do not "
                         f"broadcast") from None
    return a.astype(dt, copy=False), b.astype(dt, copy=False), dt, shape


@_public
def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8) -> np.ndarray:
    """``sum(x1 * x2) / (max(||x1||, eps) * max(||x2||, eps))`` along ``dim`` (inputs
    broadcast), as ``torch.nn.functional.cosine_similarity``."""
    op = "cosine_similarity"
    a, b, dt, shape = _broadcast_pair(x1, x2, op)
    nd = len(shape)
    if not -max(nd, 1) <= dim < max(nd, 1):
        raise IndexError(f"{op}: dim {dim} is out of range for inputs of {nd} dimension(s)")
    a64 = np.broadcast_to(a, shape).astype(np.float64)
    b64 = np.broadcast_to(b, shape).astype(np.float64)
    if nd == 0:
        a64, b64 = a64.reshape(1), b64.reshape(1)
    n1 = np.maximum(np.sqrt(np.sum(a64 * a64, axis=dim, keepdims=True)), eps)
    n2 = np.maximum(np.sqrt(np.sum(b64 * b64, axis=dim, keepdims=True)), eps)
    return np.sum((a64 / n1) * (b64 / n2), axis=dim).astype(dt)


@_public
def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> np.ndarray:
    """``||x1 - x2 + eps||_p`` along the last dimension (inputs broadcast), as
    ``torch.nn.functional.pairwise_distance``."""
    op = "pairwise_distance"
    a, b, dt, shape = _broadcast_pair(x1, x2, op)
    d = a.astype(np.float64) - b + eps
    if d.ndim == 0:
        return np.abs(d).astype(dt)
    return _vector_norm(d, p, d.ndim - 1, keepdim).astype(dt)


@_public
def bilinear(input1, input2, weight, bias=None) -> np.ndarray:
    """``y[..., o] = sum_ij x1[..., i] weight[o, i, j] x2[..., j] + bias[o]``, as
    ``torch.nn.functional.bilinear``: one GEMM of ``x1`` with the weight, then a row-wise
    product with ``x2``."""
    op = "bilinear"
    a = as_input(input1, f"{op}(input1)")
    b = as_input(input2, f"{op}(input2)")
    w = as_input(weight, f"{op}(weight)")
    if w.ndim != 3:
        raise ValueError(f"{op}: weight must be 3-D (out, in1, in2), got shape {w.shape}")
    o, i1, i2 = w.shape
    if a.ndim == 0 or b.ndim == 0 or a.shape[-1] != i1 or b.shape[-1] != i2 \
            or a.shape[:-1] != b.shape[:-1]:
        raise ValueError(f"{op}: expected input1 (*, {i1}) and input2 (*, {i2}) with the same "
                         f"leading shape, got {a.shape} and {b.shape}")
    dt = compute_dtype(np.result_type(a.dtype, b.dtype, w.dtype)
                       if np.float64 in (a.dtype, b.dtype, w.dtype) else np.float32)
    lead = a.shape[:-1]
    a2 = a.reshape(-1, i1).astype(dt, copy=False)
    b2 = b.reshape(-1, i2).astype(dt, copy=False)
    # (N, in1) @ (in1, out * in2) -> (N, out, in2), then contract in2 with x2
    wt = np.ascontiguousarray(w.astype(dt, copy=False).transpose(1, 0, 2).reshape(i1, o * i2))
    t = (a2 @ wt).reshape(-1, o, i2)
    y = np.einsum("noj,nj->no", t, b2)
    if bias is not None:
        bb = as_input(bias, f"{op}(bias)").astype(dt, copy=False)
        if bb.shape != (o,):
            raise ValueError(f"{op}: bias must have shape ({o},), got {bb.shape}")
        y = y + bb
    return y.reshape(lead + (o,)).astype(dt, copy=False)


def _check_p(p: float, op: str) -> None:
    if not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: dropout probability has to be between 0 and 1, but got {p}")


def _dropout_impl(arr: np.ndarray, input, p: float, training: bool, inplace: bool,
                  lead: int | None, alpha: bool) -> np.ndarray:
    """torch's ``_dropout_impl``: a Bernoulli(1 - p) keep mask over the whole input
    (``lead`` None), or over its first ``lead`` dimensions with the rest broadcast (feature
    dropout); alpha dropout keeps SELU's mean and variance."""
    if not training or p == 0.0 or arr.size == 0:
        return arr
    x = arr.astype(compute_dtype(arr.dtype), copy=False)
    out = x if inplace and _inplace_target(input, arr) else None
    if p == 1.0:
        return np.multiply(x, x.dtype.type(0), out=out)
    mask_shape = x.shape if lead is None else x.shape[:lead] + (1,) * (x.ndim - lead)
    keep = (default_generator().random(mask_shape) >= p).astype(x.dtype)
    if not alpha:
        return np.multiply(x, keep * x.dtype.type(1.0 / (1.0 - p)), out=out)
    a = 1.0 / math.sqrt((_ALPHA_DROP ** 2 * p + 1) * (1 - p))
    y = x * (keep * x.dtype.type(a)) + ((keep - 1) * (_ALPHA_DROP * a)
                                        + _ALPHA_DROP * a * p).astype(x.dtype)
    if out is not None:
        np.copyto(out, y)
        return out
    return y


def _feature_input(input, p: float, op: str) -> np.ndarray:
    _check_p(p, op)
    return as_input(input, op)


def _deprecated_rank(op: str, ndim: int, want: str) -> None:
    warnings.warn(f"{op}: received a {ndim}-D input; {op} exists for {want} inputs (torch "
                  f"deprecates other ranks): the dimensions are read as torch reads them",
                  stacklevel=3)


@_public
def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False) -> np.ndarray:
    """Zero whole channels of an (N, C, L) or (C, L) input with probability ``p`` in training
    (the rest scaled by ``1 / (1 - p)``); identity otherwise."""
    arr = _feature_input(input, p, "dropout1d")
    if arr.ndim not in (2, 3):
        raise ValueError(f"dropout1d: expected a 2-D (C, L) or 3-D (N, C, L) input, got shape "
                         f"{arr.shape}")
    return _dropout_impl(arr, input, p, training, inplace, arr.ndim - 1, False)


@_public
def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False) -> np.ndarray:
    """Zero whole channels of an (N, C, H, W) input with probability ``p`` in training;
    identity otherwise. As torch, a 3-D input is read as (N, C, L) (with a warning) and other
    ranks as (N, C, *)."""
    arr = _feature_input(input, p, "dropout2d")
    if arr.ndim != 4:
        _deprecated_rank("dropout2d", arr.ndim, "(N, C, H, W)")
    return _dropout_impl(arr, input, p, training, inplace, min(2, arr.ndim), False)


@_public
def dropout3d(input, p: float = 0.5, training: bool = True, inplace: bool = False) -> np.ndarray:
    """Zero whole channels of an (N, C, D, H, W) or (C, D, H, W) input with probability ``p``
    in training; identity otherwise (other ranks, with a warning, are read as unbatched)."""
    arr = _feature_input(input, p, "dropout3d")
    if arr.ndim not in (4, 5):
        _deprecated_rank("dropout3d", arr.ndim, "(N, C, D, H, W) or (C, D, H, W)")
    return _dropout_impl(arr, input, p, training, inplace, 2 if arr.ndim == 5 else 1, False)


@_public
def alpha_dropout(input, p: float = 0.5, training: bool = False,
                  inplace: bool = False) -> np.ndarray:
    """Alpha dropout (for SELU networks): dropped elements take SELU's negative saturation
    value and the result is affinely rescaled to keep the mean and variance; identity when
    not training."""
    arr = _feature_input(input, p, "alpha_dropout")
    return _dropout_impl(arr, input, p, training, inplace, None, True)


@_public
def feature_alpha_dropout(input, p: float = 0.5, training: bool = False,
                          inplace: bool = False) -> np.ndarray:
    """Alpha dropout of whole channels of an (N, C, *) input; identity when not training."""
    arr = _feature_input(input, p, "feature_alpha_dropout")
    if arr.ndim < 2:
        raise ValueError(f"feature_alpha_dropout: expected an (N, C, *) input, got shape "
                         f"{arr.shape}")
    return _dropout_impl(arr, input, p, training, inplace, 2, True)
