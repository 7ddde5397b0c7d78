"""Padding and rearranging ops on NumPy arrays: ``pad`` (constant, reflect, replicate,
circular), ``pixel_shuffle`` / ``pixel_unshuffle``, ``channel_shuffle``, ``unfold`` (im2col),
``fold`` (col2im) and ``unflatten``, with torch's semantics.

The pure rearrangements (the shuffles, unflatten) keep the input's dtype, as torch does;
``pad`` keeps floating dtypes (float16 and bfloat16 included) and, as every arithmetic op of
modulekit, widens integer and bool inputs to float32 (a fill value need not be an integer);
``fold`` and ``unfold`` compute in float32 (float64 for float64 inputs) like the other layers.
"""

from __future__ import annotations

import math

import numpy as np

from modulekit.nn._input import as_input
from modulekit.nn._pool import ntuple

__all__ = ["channel_shuffle", "fold", "pad", "pixel_shuffle", "pixel_unshuffle", "unflatten",
           "unfold"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_pairs(pad, what) -> list[tuple[int, int]]:
    try:
        items = [int(p) if isinstance(p, (int, np.integer)) and not isinstance(p, bool)
                 else None for p in pad]
    except TypeError:
        raise TypeError(f"{what}: pad must be a sequence of ints, got {pad!r}") from None
    if None in items:
        raise TypeError(f"{what}: pad must be a sequence of ints, got {pad!r}")
    if len(items) % 2:
        raise ValueError(f"{what}: padding length must be divisible by 2, got {len(items)}")
    return [(items[i], items[i + 1]) for i in range(0, len(items), 2)]


def _pad_index(size: int, left: int, right: int, mode: str, what: str, axis: int,
               empty: bool = False) -> np.ndarray | None:
    """Source positions of each output position along one axis (negative amounts crop); None
    for an empty input (nothing to read; the checks still run).

    As torch: reflect and replicate map output position ``o`` to input ``o - left`` reflected
    / clamped over the whole input and must leave at least one element; circular crops first
    and wraps around what is left, at most once."""
    n_out = size + left + right
    if n_out < 0:
        raise ValueError(
            f"{what}: padding ({left}, {right}) on dimension {axis} of size {size} gives a "
            f"negative output size {n_out}")
    if mode == "circular":
        if left > size or right > size:
            raise ValueError(
                f"{what}: circular padding ({left}, {right}) wraps around dimension {axis} of "
                f"size {size} more than once")
        lo_crop = max(-left, 0)
        base = size - lo_crop - max(-right, 0)
        lpad, rpad = max(left, 0), max(right, 0)
        if not empty and (lpad > base or rpad > base):
            raise ValueError(
                f"{what}: circular padding ({left}, {right}) of dimension {axis} (size {size}) "
                f"needs more than the {base} element(s) left after cropping (torch refuses it "
                f"too)")
        if empty:
            return None
        i = np.arange(n_out, dtype=np.int64) - lpad
        return (np.mod(i, base) if base else i) + lo_crop
    if mode == "reflect" and (left >= size or right >= size):
        raise ValueError(
            f"{what}: reflect padding ({left}, {right}) must be smaller than the padded "
            f"dimension {axis} of size {size}")
    if empty or n_out == 0:
        return None
    i = np.arange(n_out, dtype=np.int64) - left
    if mode == "reflect":
        i = np.abs(i)
        return np.where(i >= size, 2 * (size - 1) - i, i)
    return np.clip(i, 0, size - 1)


def pad(input, pad, mode="constant", value=None, *, what="pad"):
    """``torch.nn.functional.pad``: ``pad`` lists (left, right) pairs from the last dimension
    backwards; negative values crop. ``constant`` pads any dimension with ``value`` (0 when
    None); ``reflect`` (mirror without the edge), ``replicate`` (edge) and ``circular`` (wrap)
    pad the last 1, 2 or 3 dimensions of a 2-D to 5-D input, as torch."""
    if mode not in _PAD_MODES:
        raise ValueError(
            f"{what}: mode must be one of {', '.join(_PAD_MODES)}, got {mode!r}")
    x = as_input(input, what)
    if x.dtype.kind in "iub":  # the library's rule: integer and bool inputs compute in float32
        x = x.astype(_F32)
    pairs = _pad_pairs(pad, what)
    if len(pairs) > x.ndim:
        raise ValueError(
            f"{what}: padding of length {2 * len(pairs)} is too long for a {x.ndim}-D input "
            f"(at most {2 * x.ndim})")
    if mode == "constant":
        fill = 0 if value is None else value
        out_shape = list(x.shape)
        src, dst = [slice(None)] * x.ndim, [slice(None)] * x.ndim
        for k, (lo, hi) in enumerate(pairs):
            ax = x.ndim - 1 - k
            n = x.shape[ax]
            out_shape[ax] = n + lo + hi
            if out_shape[ax] < 0:
                raise ValueError(
                    f"{what}: padding ({lo}, {hi}) on dimension {ax} of size {n} gives a "
                    f"negative output size {out_shape[ax]}")
            s0, s1 = max(-lo, 0), n - max(-hi, 0)
            src[ax] = slice(s0, max(s1, s0))
            d0 = max(lo, 0)
            dst[ax] = slice(d0, d0 + max(s1 - s0, 0))
        out = np.full(out_shape, fill, dtype=x.dtype)
        out[tuple(dst)] = x[tuple(src)]
        return out
    if value is not None and value != 0:
        raise ValueError(
            f"{what}: padding mode {mode!r} doesn't take in value argument (got {value!r})")
    npad = len(pairs)
    if npad > 3 or x.ndim not in (npad + 1, npad + 2):
        raise NotImplementedError(
            f"{what}: {mode} padding of length {2 * npad} pads the last {npad} dimension(s) of "
            f"a {npad + 1}-D or {npad + 2}-D input (torch supports 1 to 3 padded dimensions), "
            f"got a {x.ndim}-D input of shape {tuple(x.shape)}")
    y, empty = x, x.size == 0
    out_shape = list(x.shape)
    for k, (lo, hi) in enumerate(pairs):
        ax = x.ndim - 1 - k
        idx = _pad_index(x.shape[ax], lo, hi, mode, what, ax, empty)
        out_shape[ax] = x.shape[ax] + lo + hi
        if idx is not None:
            y = np.take(y, idx, axis=ax)
    if mode != "circular" and all(out_shape[x.ndim - 1 - k] < 1 for k in range(npad)):
        # torch's reflect / replicate: at least one padded dimension must keep an element
        raise ValueError(
            f"{what}: {mode} padding {tuple(pad)} leaves no element in any padded dimension "
            f"of an input of shape {tuple(x.shape)}")
    if empty or 0 in out_shape:
        return np.empty(out_shape, dtype=x.dtype)
    return np.ascontiguousarray(y)


def _positive_int(value, name, what) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what}: {name} must be a positive int, got {value!r}")
    return int(value)


def pixel_shuffle(input, upscale_factor, *, what="pixel_shuffle"):
    """``(*, C * r * r, H, W) -> (*, C, H * r, W * r)``."""
    r = _positive_int(upscale_factor, "upscale_factor", what)
    x = as_input(input, what)
    if x.ndim < 3:
        raise ValueError(f"{what}: expected an input of at least 3 dimensions (*, C, H, W), "
                         f"got shape {tuple(x.shape)}")
    *lead, c, h, w = x.shape
    if c % (r * r):
        raise ValueError(
            f"{what}: the channel dimension {c} must be divisible by upscale_factor squared "
            f"({r * r})")
    oc = c // (r * r)
    y = x.reshape(*lead, oc, r, r, h, w)
    n = len(lead)
    y = y.transpose(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return np.ascontiguousarray(y).reshape(*lead, oc, h * r, w * r)


def pixel_unshuffle(input, downscale_factor, *, what="pixel_unshuffle"):
    """``(*, C, H * r, W * r) -> (*, C * r * r, H, W)``."""
    r = _positive_int(downscale_factor, "downscale_factor", what)
    x = as_input(input, what)
    if x.ndim < 3:
        raise ValueError(f"{what}: expected an input of at least 3 dimensions (*, C, H, W), "
                         f"got shape {tuple(x.shape)}")
    *lead, c, h, w = x.shape
    if h % r or w % r:
        raise ValueError(
            f"{what}: height {h} and width {w} must be divisible by downscale_factor {r}")
    if x.size == 0:  # torch's pixel_unshuffle returns an empty input as it is (shape too)
        return x.copy()
    y = x.reshape(*lead, c, h // r, r, w // r, r)
    n = len(lead)
    y = y.transpose(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return np.ascontiguousarray(y).reshape(*lead, c * r * r, h // r, w // r)


def channel_shuffle(input, groups, *, what="channel_shuffle"):
    """``(N, g * k, *) -> (N, k * g, *)``: channel ``i * k + j`` moves to ``j * g + i``."""
    g = _positive_int(groups, "groups", what)
    x = as_input(input, what)
    if x.ndim < 3:
        raise ValueError(f"{what}: expected an input of at least 3 dimensions (N, C, *), got "
                         f"shape {tuple(x.shape)}")
    n, c = x.shape[:2]
    if c % g:
        raise ValueError(f"{what}: the number of channels {c} must be divisible by groups {g}")
    rest = x.shape[2:]
    y = x.reshape(n, g, c // g, *rest).swapaxes(1, 2)
    return np.ascontiguousarray(y).reshape(x.shape)


def _fold_args(kernel_size, dilation, padding, stride, what):
    k = ntuple(kernel_size, 2, "kernel_size", what, minimum=1)
    d = ntuple(dilation, 2, "dilation", what, minimum=1)
    p = ntuple(padding, 2, "padding", what, minimum=0)
    s = ntuple(stride, 2, "stride", what, minimum=1)
    return k, d, p, s


def _blocks(size, k, d, p, s):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def unfold(input, kernel_size, dilation=1, padding=0, stride=1, *, what="unfold"):
    """im2col: ``(N, C, H, W) -> (N, C * kh * kw, L)``, ``L`` sliding blocks in row-major
    order, each column the block's values channel by channel (zero padding)."""
    k, d, p, s = _fold_args(kernel_size, dilation, padding, stride, what)
    x = as_input(input, what)
    if x.ndim not in (3, 4):
        raise ValueError(f"{what}: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got "
                         f"shape {tuple(x.shape)}")
    x = x.astype(_F64 if x.dtype == _F64 else _F32, copy=False)
    unbatched = x.ndim == 3
    if unbatched:
        x = x[None]
    n, c, h, w = x.shape
    oh, ow = _blocks(h, k[0], d[0], p[0], s[0]), _blocks(w, k[1], d[1], p[1], s[1])
    if oh < 1 or ow < 1:
        raise ValueError(
            f"{what}: input spatial size ({h}, {w}) with kernel {k}, dilation {d}, padding {p} "
            f"and stride {s} gives no sliding block (({oh}, {ow}))")
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    out = np.empty((n, c, k[0], k[1], oh, ow), dtype=x.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            r0, c0 = i * d[0], j * d[1]
            out[:, :, i, j] = xp[:, :, r0:r0 + s[0] * (oh - 1) + 1:s[0],
                                 c0:c0 + s[1] * (ow - 1) + 1:s[1]]
    out = out.reshape(n, c * k[0] * k[1], oh * ow)
    return out[0] if unbatched else out


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1, *, what="fold"):
    """col2im, the adjoint of :func:`unfold`: ``(N, C * kh * kw, L) -> (N, C, H, W)``,
    overlapping block values summed."""
    k, d, p, s = _fold_args(kernel_size, dilation, padding, stride, what)
    osz = ntuple(output_size, 2, "output_size", what, minimum=1)
    x = as_input(input, what)
    if x.ndim not in (2, 3):
        raise ValueError(f"{what}: expected a 2-D (C * kh * kw, L) or 3-D (N, C * kh * kw, L) "
                         f"input, got shape {tuple(x.shape)}")
    x = x.astype(_F64 if x.dtype == _F64 else _F32, copy=False)
    unbatched = x.ndim == 2
    if unbatched:
        x = x[None]
    n, ck, L = x.shape
    kk = k[0] * k[1]
    if ck % kk:
        raise ValueError(
            f"{what}: expected the size of input's dimension 1 ({ck}) to be divisible by the "
            f"product of kernel_size {k} ({kk})")
    oh, ow = _blocks(osz[0], k[0], d[0], p[0], s[0]), _blocks(osz[1], k[1], d[1], p[1], s[1])
    if oh * ow != L or oh < 1 or ow < 1:
        raise ValueError(
            f"{what}: given output_size {osz}, kernel_size {k}, dilation {d}, padding {p} and "
            f"stride {s}, expected the size of input's dimension 2 to be {max(oh, 0) * max(ow, 0)}"
            f" blocks, but got {L}")
    c = ck // kk
    cols = x.reshape(n, c, k[0], k[1], oh, ow)
    hp, wp = osz[0] + 2 * p[0], osz[1] + 2 * p[1]
    out = np.zeros((n, c, hp, wp), dtype=x.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            r0, c0 = i * d[0], j * d[1]
            out[:, :, r0:r0 + s[0] * (oh - 1) + 1:s[0],
                c0:c0 + s[1] * (ow - 1) + 1:s[1]] += cols[:, :, i, j]
    out = np.ascontiguousarray(out[:, :, p[0]:p[0] + osz[0], p[1]:p[1] + osz[1]])
    return out[0] if unbatched else out


def unflatten(input, dim, sizes, *, what="unflatten"):
    """Split dimension ``dim`` into ``sizes`` (one entry may be -1)."""
    x = as_input(input, what)
    ndim = max(x.ndim, 1)
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise TypeError(f"{what}: dim must be an int, got {dim!r}")
    if not -ndim <= dim < ndim or x.ndim == 0:
        raise IndexError(f"{what}: dim {dim} is out of range for an input with {x.ndim} "
                         f"dimension(s)")
    dim = int(dim) % ndim
    try:
        sz = [int(v) for v in sizes]
    except TypeError:
        raise TypeError(f"{what}: sizes must be a sequence of ints, got {sizes!r}") from None
    if not sz:
        raise ValueError(f"{what}: sizes must be non-empty")
    n = x.shape[dim]
    if sz.count(-1) > 1 or any(v < -1 for v in sz):
        raise ValueError(f"{what}: sizes may hold at most one -1 and no other negative value, "
                         f"got {tuple(sz)}")
    if -1 in sz:
        known = math.prod(v for v in sz if v != -1)
        if known == 0 or n % known:
            raise ValueError(f"{what}: sizes {tuple(sz)} cannot split dimension {dim} of size "
                             f"{n}")
        sz[sz.index(-1)] = n // known
    if math.prod(sz) != n:
        raise ValueError(
            f"{what}: provided sizes {tuple(sz)} don't multiply up to the size of dim {dim} "
            f"({n}) in the input tensor")
    return x.reshape(x.shape[:dim] + tuple(sz) + x.shape[dim + 1:])
