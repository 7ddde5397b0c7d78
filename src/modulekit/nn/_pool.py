"""N-d pooling (1-, 2- and 3-D) on NumPy arrays: max (with indices), average, adaptive average,
adaptive max, power-average (LP) and max-unpooling, with torch's semantics.

Every window reduction is separable: a max (with its argmax) or a sum over a box is the same
reduction applied one spatial axis after another, innermost axis first. Each axis costs
``kernel_size`` passes of whole-array NumPy work (``k0 + k1 + k2`` passes for a 3-D window, not
``k0 * k1 * k2``), with no Python loop over elements. Tie-breaking follows torch's CPU kernels:
the first maximum in row-major window order wins, a NaN always wins (the last NaN of the window,
as torch's ``val > max || isnan(val)`` update has it), and a window's index starts at its first
in-bounds element.

Indices are flat positions within each (sample, channel) plane of the input, as torch's.
The public entry points are wrapped by ``modulekit.nn.functional`` (torch's names) and the
pooling layers of ``modulekit.nn.modules.pooling_ext``.
"""

from __future__ import annotations

import math

import numpy as np

from modulekit.nn._input import as_input

__all__ = [
    "adaptive_avg_pool",
    "adaptive_max_pool",
    "avg_pool",
    "lp_pool",
    "max_pool",
    "max_unpool",
    "ntuple",
    "pool_input",
]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_SHAPES = {1: "(C, L) or (N, C, L)", 2: "(C, H, W) or (N, C, H, W)",
           3: "(C, D, H, W) or (N, C, D, H, W)"}

#: The largest kernel, stride, padding, dilation or output size accepted (as the 2-D kernels).
MAX_WINDOW = 2**20


def ntuple(value, n: int, name: str, what: str, *, allow_none: bool = False,
           minimum: int | None = None) -> tuple:
    """``value`` (an int or a sequence of ``n`` ints) as an ``n``-tuple of ints.

    Raises ``TypeError`` for a non-integer and ``ValueError`` for a wrong length or a value
    below ``minimum``, naming ``what`` and the parameter ``name``."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        items = (int(value),) * n
    elif value is None and allow_none:
        items = (None,) * n
    else:
        try:
            items = tuple(value)
        except TypeError:
            raise TypeError(
                f"{what}: {name} must be an int or a sequence of {n} ints, got {value!r}"
            ) from None
        if len(items) == 1 and n > 1:
            items = items * n
        if len(items) != n:
            raise ValueError(
                f"{what}: {name} must be an int or a sequence of {n} ints, got {value!r}")
        out = []
        for v in items:
            if v is None and allow_none:
                out.append(None)
            elif isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                out.append(int(v))
            else:
                raise TypeError(
                    f"{what}: {name} must be an int or a sequence of {n} ints, got {value!r}")
        items = tuple(out)
    if minimum is not None:
        for v in items:
            if v is not None and v < minimum:
                raise ValueError(f"{what}: {name} must be at least {minimum}, got {value!r}")
    for v in items:
        if v is not None and abs(v) > MAX_WINDOW:
            raise ValueError(f"{what}: {name} must be at most {MAX_WINDOW} (2**20), got {value!r}")
    return items


def pool_input(input, d: int, what: str, *, float_only: bool = True) -> tuple[np.ndarray, bool]:
    """The input of a ``d``-D pooling as an ``(N, C, *spatial)`` array and whether a batch
    dimension was added (an unbatched ``(C, *spatial)`` input). Floating compute dtype unless
    ``float_only`` is False. Every spatial dimension must be non-empty."""
    x = as_input(input, what)
    if x.ndim not in (d + 1, d + 2):
        raise ValueError(
            f"{what}: expected a {d + 1}-D {_SHAPES[d].split(' or ')[0]} or {d + 2}-D "
            f"{_SHAPES[d].split(' or ')[1]} input, got shape {tuple(x.shape)}")
    if float_only:
        x = x.astype(_F64 if x.dtype == _F64 else _F32, copy=False)
    unbatched = x.ndim == d + 1
    if unbatched:
        x = x[None]
    if min(x.shape[2:]) < 1:
        raise ValueError(
            f"{what}: every spatial dimension must be non-empty, got input shape "
            f"{tuple(x.shape[1:] if unbatched else x.shape)}")
    return x, unbatched


def pool_output_size(size: int, k: int, s: int, p: int, dil: int, ceil_mode: bool) -> int:
    """torch's pooling output size along one axis (``ceil_mode``: the last window must start
    inside the input or its left padding)."""
    span = size + 2 * p - dil * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _window_args(d, kernel_size, stride, padding, dilation, what, *, check_pad=True):
    k = ntuple(kernel_size, d, "kernel_size", what, minimum=1)
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        s = k
    else:
        s = ntuple(stride, d, "stride", what, minimum=1)
    p = ntuple(padding, d, "padding", what, minimum=0)
    dl = ntuple(dilation, d, "dilation", what, minimum=1)
    if check_pad and any(pi > ki // 2 for pi, ki in zip(p, k)):
        raise ValueError(
            f"{what}: padding {p} should be at most half of the kernel size {k}")
    return k, s, p, dl


def _outputs(x, k, s, p, dl, ceil_mode, what):
    outs = tuple(pool_output_size(n, ki, si, pi, di, ceil_mode)
                 for n, ki, si, pi, di in zip(x.shape[2:], k, s, p, dl))
    if min(outs) < 1:
        raise ValueError(
            f"{what}: input spatial size {tuple(x.shape[2:])} is too small for kernel {k} with "
            f"padding {p} and dilation {dl} (output would be {outs})")
    return outs


def _bcast(v: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = v.shape[0]
    return v.reshape(shape)


def _max_axis(val, idx, axis, starts, step, count, lengths, plane_stride):
    """Max (and argmax, if ``idx`` is not None) along ``axis`` over windows
    ``starts[o] + j * step`` for ``j < count`` (``j < lengths[o]`` when given); positions
    outside the axis are skipped. ``idx`` holds flat plane indices of the values so far."""
    size = val.shape[axis]
    ndim = val.ndim
    out_shape = list(val.shape)
    out_shape[axis] = starts.shape[0]
    cur = np.full(out_shape, -np.inf, dtype=val.dtype)
    # the first in-bounds position of each window: torch's initial index
    first = np.where(starts < 0, starts + (-starts + step - 1) // step * step, starts)
    first = np.minimum(first, size - 1)
    cidx = None
    if idx is not None:
        cidx = np.take(idx, first, axis=axis) + _bcast(first * plane_stride, axis, ndim)
    for j in range(count):
        pos = starts + j * step
        valid = (pos >= 0) & (pos < size)
        if lengths is not None:
            valid &= j < lengths
        if not valid.any():
            continue
        posc = np.clip(pos, 0, size - 1)
        v = np.take(val, posc, axis=axis)
        with np.errstate(invalid="ignore"):
            cond = (v > cur) | np.isnan(v)
        cond &= _bcast(valid, axis, ndim)
        np.copyto(cur, v, where=cond)
        if idx is not None:
            vi = np.take(idx, posc, axis=axis) + _bcast(posc * plane_stride, axis, ndim)
            np.copyto(cidx, vi, where=cond)
    return cur, cidx


def _axis_slice(ndim: int, axis: int, sl: slice) -> tuple:
    key = [slice(None)] * ndim
    key[axis] = sl
    return tuple(key)


def _pad_axis(val: np.ndarray, axis: int, left: int, right: int, fill) -> np.ndarray:
    if left == 0 and right == 0:
        return val
    shape = list(val.shape)
    shape[axis] += left + right
    out = np.full(shape, fill, dtype=val.dtype)
    out[_axis_slice(val.ndim, axis, slice(left, left + val.shape[axis]))] = val
    return out


def _window_views(val, axis, out, s, p, dil, k, fill):
    """The ``k`` strided views (no copies) of ``val`` padded along ``axis`` with ``fill``:
    view ``j`` holds the window element ``j`` of every output position ``o`` (input position
    ``o * s - p + j * dil``)."""
    size = val.shape[axis]
    right = max(0, (out - 1) * s - p + (k - 1) * dil + 1 - size)
    padded = _pad_axis(val, axis, p, right, fill)
    return [padded[_axis_slice(val.ndim, axis, slice(j * dil, j * dil + s * (out - 1) + 1, s))]
            for j in range(k)]


def _max_axis_fixed(val, idx, axis, out, s, p, dil, k, plane_stride):
    """:func:`_max_axis` for the fixed windows ``o * s - p + j * dil`` (``j < k``) of
    ordinary pooling, on strided views of the padded axis instead of gathers; without
    indices a running ``np.maximum`` (which propagates NaN, as torch)."""
    views = _window_views(val, axis, out, s, p, dil, k, -np.inf)
    if idx is None:
        cur = views[0].copy()
        for v in views[1:]:
            np.maximum(cur, v, out=cur)
        return cur, None
    size = val.shape[axis]
    starts = np.arange(out, dtype=np.int64) * s - p
    # torch's initial index: the window's first position at or after 0 (past the end when the
    # window holds no element: torch reports that position, so do we)
    first = np.where(starts < 0, starts + (-starts + dil - 1) // dil * dil, starts)
    cidx = (np.take(idx, np.minimum(first, size - 1), axis=axis)
            + _bcast(first * plane_stride, axis, val.ndim))
    cur = np.full(views[0].shape, -np.inf, dtype=val.dtype)
    ipos = _window_views(idx, axis, out, s, p, dil, k, 0)
    for j, (v, iv) in enumerate(zip(views, ipos)):
        with np.errstate(invalid="ignore"):
            cond = (v > cur) | np.isnan(v)
        np.copyto(cur, v, where=cond)
        pos = _bcast((starts + j * dil) * plane_stride, axis, val.ndim)
        np.copyto(cidx, iv + pos, where=cond)
    return cur, cidx


def _empty_window_indices(idx, sizes, outs, k, s, p, dl, strides) -> None:
    """Give the windows that hold no input element (all padding: possible with dilation)
    torch's index, its first position past the padding on every axis, in place. The separable
    pass would have taken an in-bounds position along the axes where the window is not
    empty."""
    d = len(sizes)
    empty = np.zeros(outs, dtype=bool)
    start = np.zeros(outs, dtype=np.int64)
    for a in range(d):
        starts = np.arange(outs[a], dtype=np.int64) * s[a] - p[a]
        first = np.where(starts < 0, starts + (-starts + dl[a] - 1) // dl[a] * dl[a], starts)
        shape = [1] * d
        shape[a] = outs[a]
        empty |= (first >= sizes[a]).reshape(shape)  # no position of the window is inside
        start = start + (first * strides[a]).reshape(shape)
    if empty.any():
        np.copyto(idx, np.broadcast_to(start, idx.shape), where=np.broadcast_to(empty, idx.shape))


def _sum_axis_fixed(val, axis, out, s, p, k):
    """Window sums over ``o * s - p .. + k`` on strided views of the zero-padded axis."""
    views = _window_views(val, axis, out, s, p, 1, k, 0)
    acc = views[0].copy()
    for v in views[1:]:
        acc += v
    return acc


def _sum_axis(val, axis, starts, count, lengths=None):
    """Sum along ``axis`` over windows ``starts[o] .. starts[o] + count`` (``+ lengths[o]``
    when given); out-of-range positions are skipped (zero padding)."""
    size = val.shape[axis]
    out_shape = list(val.shape)
    out_shape[axis] = starts.shape[0]
    acc = np.zeros(out_shape, dtype=val.dtype)
    for j in range(count):
        pos = starts + j
        valid = (pos >= 0) & (pos < size)
        if lengths is not None:
            valid &= j < lengths
        if not valid.any():
            continue
        v = np.take(val, np.clip(pos, 0, size - 1), axis=axis)
        if valid.all():
            acc += v
        else:  # where, not a 0/1 product: a NaN outside the window must not leak in
            acc += np.where(_bcast(valid, axis, val.ndim), v, val.dtype.type(0))
    return acc


def _plane_strides(spatial: tuple) -> list[int]:
    strides, acc = [], 1
    for n in reversed(spatial):
        strides.append(acc)
        acc *= n
    return strides[::-1]


def max_pool(input, d, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
             return_indices=False, *, what="max_pool"):
    """``d``-D max pooling; ``(values, indices)`` with ``return_indices`` (int64 indices)."""
    k, s, p, dl = _window_args(d, kernel_size, stride, padding, dilation, what)
    x, unbatched = pool_input(input, d, what)
    outs = _outputs(x, k, s, p, dl, bool(ceil_mode), what)
    strides = _plane_strides(x.shape[2:])
    val = x
    idx = np.zeros(x.shape, dtype=np.int64) if return_indices else None
    for a in reversed(range(d)):
        val, idx = _max_axis_fixed(val, idx, a + 2, outs[a], s[a], p[a], dl[a], k[a],
                                   strides[a])
    if idx is not None:
        _empty_window_indices(idx, x.shape[2:], outs, k, s, p, dl, strides)
    if unbatched:
        val = val[0]
        idx = idx[0] if idx is not None else None
    return (val, idx) if return_indices else val


def avg_pool(input, d, kernel_size, stride=None, padding=0, ceil_mode=False,
             count_include_pad=True, divisor_override=None, *, what="avg_pool"):
    """``d``-D average pooling (zero padding counted unless ``count_include_pad`` is False;
    ``divisor_override`` replaces the divisor)."""
    k, s, p, _ = _window_args(d, kernel_size, stride, padding, 1, what)
    if divisor_override is not None:
        if isinstance(divisor_override, bool) or not isinstance(
                divisor_override, (int, np.integer)) or divisor_override == 0:
            raise ValueError(
                f"{what}: divisor_override must be a non-zero int, got {divisor_override!r}")
    x, unbatched = pool_input(input, d, what)
    if d == 3 and any(n < ki for n, ki in zip(x.shape[2:], k)):
        raise ValueError(  # torch's 3-D average pooling checks this, padding or not
            f"{what}: input spatial size {tuple(x.shape[2:])} is smaller than the kernel {k}")
    outs = _outputs(x, k, s, p, (1,) * d, bool(ceil_mode), what)
    val = x
    div = None
    for a in reversed(range(d)):
        size = x.shape[a + 2]
        starts = np.arange(outs[a], dtype=np.int64) * s[a] - p[a]
        val = _sum_axis_fixed(val, a + 2, outs[a], s[a], p[a], k[a])
        ends = np.minimum(starts + k[a], size + p[a])
        if count_include_pad:
            n = ends - starts
        else:
            n = np.minimum(ends, size) - np.maximum(starts, 0)
        n = _bcast(n.astype(val.dtype), a + 2, val.ndim)
        div = n if div is None else div * n
    if divisor_override is not None:
        val = val / val.dtype.type(divisor_override)
    else:
        val = val / div
    return val[0] if unbatched else val


def _adaptive_sizes(x, d, output_size, what):
    outs = ntuple(output_size, d, "output_size", what, allow_none=True, minimum=0)
    return tuple(x.shape[2 + i] if o is None else o for i, o in enumerate(outs))


def _adaptive_bounds(size: int, out: int):
    o = np.arange(out, dtype=np.int64)
    starts = (o * size) // out
    ends = -((-(o + 1) * size) // out)  # ceil
    return starts, ends


def adaptive_avg_pool(input, d, output_size, *, what="adaptive_avg_pool"):
    """``d``-D adaptive average pooling: output cell ``i`` averages input
    ``floor(i * L / out) .. ceil((i + 1) * L / out)`` along each axis (None keeps a size)."""
    x, unbatched = pool_input(input, d, what)
    outs = _adaptive_sizes(x, d, output_size, what)
    val = x
    for a in reversed(range(d)):
        size = x.shape[a + 2]
        if outs[a] == size:
            continue
        if outs[a] == 0:
            shape = list(val.shape)
            shape[a + 2] = 0
            val = np.empty(shape, dtype=val.dtype)
            continue
        if size % outs[a] == 0:  # equal, disjoint windows (global pooling among them)
            k = size // outs[a]
            shape = val.shape[:a + 2] + (outs[a], k) + val.shape[a + 3:]
            val = val.reshape(shape).sum(axis=a + 3) / val.dtype.type(k)
            continue
        starts, ends = _adaptive_bounds(size, outs[a])
        lengths = ends - starts
        total = _sum_axis(val, a + 2, starts, int(lengths.max()), lengths)
        val = total / _bcast(lengths.astype(val.dtype), a + 2, val.ndim)
    return val[0] if unbatched else val


def adaptive_max_pool(input, d, output_size, return_indices=False, *,
                      what="adaptive_max_pool"):
    """``d``-D adaptive max pooling (windows as :func:`adaptive_avg_pool`)."""
    x, unbatched = pool_input(input, d, what)
    outs = _adaptive_sizes(x, d, output_size, what)
    if min(outs) == 0:
        raise ValueError(f"{what}: output_size must be positive, got {output_size!r}")
    strides = _plane_strides(x.shape[2:])
    val = x
    idx = np.zeros(x.shape, dtype=np.int64) if return_indices else None
    for a in reversed(range(d)):
        size = x.shape[a + 2]
        if idx is None and size % outs[a] == 0:  # equal, disjoint windows: a reshape
            k = size // outs[a]
            val = val.reshape(val.shape[:a + 2] + (outs[a], k) + val.shape[a + 3:]).max(
                axis=a + 3)
            continue
        starts, ends = _adaptive_bounds(size, outs[a])
        lengths = ends - starts
        val, idx = _max_axis(val, idx, a + 2, starts, 1, int(lengths.max()), lengths,
                             strides[a])
    if unbatched:
        val = val[0]
        idx = idx[0] if idx is not None else None
    return (val, idx) if return_indices else val


def lp_pool(input, d, norm_type, kernel_size, stride=None, ceil_mode=False, *, what="lp_pool"):
    """Power-average pooling: ``(sum over the window of x ** p) ** (1 / p)``, computed as torch
    does (``sign(s) * relu(|s|)`` of the window mean times the window size, to ``1 / p``)."""
    if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float, np.number)):
        raise TypeError(f"{what}: norm_type must be a number, got {norm_type!r}")
    k, _, _, _ = _window_args(d, kernel_size, stride, 0, 1, what)
    x, unbatched = pool_input(input, d, what)
    p = float(norm_type)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        out = avg_pool(np.power(x, x.dtype.type(p)), d, k, stride, 0, ceil_mode, what=what)
        out = np.sign(out) * np.maximum(np.abs(out), 0) * out.dtype.type(math.prod(k))
        out = np.power(out, out.dtype.type(1.0 / p))
    return out[0] if unbatched else out


def max_unpool(input, indices, d, kernel_size, stride=None, padding=0, output_size=None, *,
               what="max_unpool"):
    """Partial inverse of max pooling: a zero array of the pooled input's size with each value
    written at its index (flat within its (sample, channel) plane)."""
    k, s, p, _ = _window_args(d, kernel_size, stride, padding, 1, what, check_pad=False)
    x = as_input(input, what)
    if x.ndim not in (d + 1, d + 2):
        raise ValueError(
            f"{what}: expected a {d + 1}-D or {d + 2}-D input, got shape {tuple(x.shape)}")
    x = x.astype(_F64 if x.dtype == _F64 else _F32, copy=False)
    ind = np.asarray(as_input(indices, f"{what}(indices)"))
    if ind.dtype.kind not in "iu":
        raise TypeError(f"{what}: indices must be integers, got dtype {ind.dtype}")
    if ind.shape != x.shape:
        raise ValueError(
            f"{what}: indices shape {tuple(ind.shape)} must match the input's {tuple(x.shape)}")
    unbatched = x.ndim == d + 1
    if unbatched:
        x, ind = x[None], ind[None]
    default = tuple((n - 1) * si - 2 * pi + ki
                    for n, si, pi, ki in zip(x.shape[2:], s, p, k))
    if output_size is None:
        outs = default
    else:
        sizes = tuple(int(v) for v in output_size)
        if len(sizes) == d + 2:
            sizes = sizes[2:]
        elif len(sizes) == d + 1:
            sizes = sizes[1:]
        if len(sizes) != d:
            raise ValueError(
                f"{what}: output_size must have {d}, {d + 1} or {d + 2} elements, got "
                f"{tuple(output_size)}")
        for n, dflt, si in zip(sizes, default, s):
            if not dflt - si < n < dflt + si:
                raise ValueError(
                    f"{what}: output_size {sizes} is out of range: each size must lie strictly "
                    f"between {tuple(a - b for a, b in zip(default, s))} and "
                    f"{tuple(a + b for a, b in zip(default, s))}")
        outs = sizes
    plane = math.prod(outs)
    nc = x.shape[0] * x.shape[1]
    plane_in = math.prod(x.shape[2:])
    flat_idx = ind.reshape(nc, plane_in).astype(np.int64, copy=False)
    if flat_idx.size and (flat_idx.min() < 0 or flat_idx.max() >= plane):
        bad = flat_idx[(flat_idx < 0) | (flat_idx >= plane)][0]
        raise IndexError(
            f"{what}: found an invalid max index {int(bad)} (output plane {outs} holds "
            f"{plane} elements)")
    out = np.zeros((nc, plane), dtype=x.dtype)
    rows = np.arange(nc)[:, None]
    out[rows, flat_idx] = x.reshape(nc, plane_in)
    out = out.reshape(x.shape[:2] + outs)
    return out[0] if unbatched else out
