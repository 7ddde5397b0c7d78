"""``interpolate`` (torch.nn.functional's): nearest, nearest-exact, (bi/tri)linear, bicubic,
area, with ``align_corners``, ``scale_factor``, ``recompute_scale_factor`` and ``antialias``.

Every mode but ``area`` is separable: output sample ``o`` along an axis is
``sum_t w[o, t] * x[idx[o, t]]`` over a few taps (1 for nearest, 2 for linear, 4 for cubic, the
filter's support for antialiasing). :func:`axis_taps` computes the taps exactly as torch's CPU
kernels do (``aten/src/ATen/native/UpSample.h`` and ``cpu/UpSampleKernel.cpp``: the scale and the
source coordinate in the compute dtype, nearest indices in float32), and :func:`_apply_taps`
applies them axis after axis, innermost first. ``area`` is adaptive average pooling.

float32 4-D nearest and bilinear (without antialiasing) run the fused 2-D C kernels of
:mod:`modulekit._ext._resample` on the same taps (one pass over the output, each input row
interpolated horizontally once per thread); every other float32 case applies the taps axis by
axis with its ``taps_axis`` kernel, except antialiasing filters whose windows differ in
length (absent taps), which, like float64, apply them with NumPy.

"""

from __future__ import annotations

import math

import numpy as np

from modulekit._ext import _resample
from modulekit.nn import _pool
from modulekit.nn._input import as_input

__all__ = ["axis_taps", "interpolate", "output_size"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)

_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")
_LINEAR_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}


def _scale_value(dt, scale, in_size: int, out_size: int):
    """torch's ``compute_scales_value``: ``1 / scale`` when a positive scale is given, else
    ``in / out``, in the dtype ``dt``."""
    if scale is not None and scale > 0:
        return dt.type(1.0 / scale)
    return dt.type(in_size) / dt.type(out_size)


def _area_scale(dt, in_size, out_size, align_corners, scale):
    if align_corners:
        return dt.type(in_size - 1) / dt.type(out_size - 1) if out_size > 1 else dt.type(0)
    return _scale_value(dt, scale, in_size, out_size)


def _source_index(dt, scale, o: np.ndarray, align_corners: bool, cubic: bool) -> np.ndarray:
    if align_corners:
        return scale * o.astype(dt)
    if dt == _F32:
        # torch's build contracts scale * (o + 0.5) - 0.5 into one fused multiply-add: the
        # float64 product of two float32 values is exact, so one rounding to float32 after the
        # subtraction gives the fused result (it decides the sign of a source index near 0)
        src = (np.float64(scale) * (o + 0.5) - 0.5).astype(_F32)
    else:
        src = scale * (o.astype(dt) + dt.type(0.5)) - dt.type(0.5)
    return src if cubic else np.maximum(src, dt.type(0))


def _guard(src: np.ndarray, in_size: int):
    idx = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    lam = np.clip(src - idx.astype(src.dtype), 0, 1).astype(src.dtype)
    return idx, lam


def _cubic_coeffs(t: np.ndarray, a: float) -> np.ndarray:
    a = t.dtype.type(a)

    def c1(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def c2(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    one = t.dtype.type(1)
    return np.stack([c2(t + one), c1(t), c1(one - t), c2(2 * one - t)], axis=1)


def _aa_filter(mode: str):
    if mode == "bilinear":
        def f(x):
            x = np.abs(x)
            return np.where(x < 1, 1 - x, 0)
    else:
        def f(x):  # bicubic with a = -0.5 (PIL's), as torch's antialiasing kernel
            x = np.abs(x)
            a = -0.5
            return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                            np.where(x < 2, (((x - 5) * x + 8) * x - 4) * a, 0))
    return f


def axis_taps(mode: str, in_size: int, out_size: int, scale, align_corners: bool,
              antialias: bool, dt: np.dtype) -> tuple[np.ndarray, np.ndarray | None]:
    """The taps of one axis: ``(idx, w)``, ``idx`` int64 ``(out, T)`` source positions and
    ``w`` ``(out, T)`` weights in ``dt`` (None for nearest modes: one tap of weight 1)."""
    o = np.arange(out_size, dtype=np.int64)
    if mode in ("nearest", "nearest-exact"):
        if mode == "nearest" and out_size == in_size:
            return o[:, None], None
        if mode == "nearest" and out_size == 2 * in_size:
            return (o >> 1)[:, None], None
        s = np.float32(_scale_value(_F64, scale, in_size, out_size))
        if mode == "nearest":
            src = np.floor(o.astype(np.float32) * s)
        else:
            src = np.floor(((o + 0.5) * np.float64(s)).astype(np.float32))
        return np.minimum(src.astype(np.int64), in_size - 1)[:, None], None
    if antialias:
        interp = 2 if mode == "bilinear" else 4
        scale_v = np.float64(_area_scale(dt, in_size, out_size, align_corners, scale))
        support = interp * 0.5 * scale_v if scale_v >= 1.0 else interp * 0.5
        delta = 0.0
        max_size = int(math.ceil(support)) * 2 + 1
        invscale = 1.0 / scale_v if scale_v >= 1.0 else 1.0
        center = (scale_v * (o + 0.5 - delta)).astype(dt)
        xmin = np.maximum((center - support + 0.5 + delta).astype(np.int64), 0)
        xsize = np.minimum((center + support + 0.5 + delta).astype(np.int64), in_size) - xmin
        xsize = np.clip(xsize, 0, max_size)
        j = np.arange(max_size, dtype=np.int64)[None, :]
        filt = _aa_filter(mode)
        w = filt(((j + xmin[:, None]) - center[:, None] + 0.5 - delta) * invscale).astype(dt)
        w = np.where(j < xsize[:, None], w, 0).astype(dt)
        total = w.sum(axis=1, keepdims=True)
        w = np.where(total != 0, w / np.where(total != 0, total, 1), w).astype(dt)
        # taps past the window are absent (index -1): torch reads only the window, so an inf
        # or NaN beside it must not turn into NaN through a zero weight
        idx = np.where(j < xsize[:, None], np.minimum(j + xmin[:, None], in_size - 1), -1)
        return idx, w
    if mode != "bicubic" and out_size == in_size:
        # torch's linear taps for an unchanged size, whatever the scale: the sample itself
        # twice, weights 1 and 0 (so an inf becomes NaN, as in torch)
        return np.stack([o, o], axis=1), np.stack(
            [np.ones(out_size, dt), np.zeros(out_size, dt)], axis=1)
    scale_v = _area_scale(dt, in_size, out_size, align_corners, scale)
    cubic = mode == "bicubic"
    src = _source_index(dt, scale_v, o, align_corners, cubic)
    idx, lam = _guard(src, in_size)
    if cubic:
        w = _cubic_coeffs(lam, -0.75)
        taps = np.clip(idx[:, None] + np.arange(-1, 3)[None, :], 0, in_size - 1)
        return taps, w
    idx1 = idx + (idx < in_size - 1)
    return np.stack([idx, idx1], axis=1), np.stack([1 - lam, lam], axis=1).astype(dt)


def _apply_taps(x: np.ndarray, axis: int, idx: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    """``sum_t w[:, t] * x[idx[:, t]]`` along ``axis``; a negative index is an absent tap
    (antialiasing windows of different lengths), which adds nothing."""
    absent = idx < 0
    if x.dtype == _F32 and not absent.any():  # the C kernel (float64 stays in NumPy)
        return _resample.taps_axis(x, axis, idx, w)
    if w is None:
        return np.take(x, idx[:, 0], axis=axis)
    shape = [1] * x.ndim
    shape[axis] = idx.shape[0]
    out = None
    for t in range(idx.shape[1]):
        term = np.take(x, np.maximum(idx[:, t], 0), axis=axis) * w[:, t].reshape(shape)
        if absent[:, t].any():
            term = np.where(absent[:, t].reshape(shape), x.dtype.type(0), term)
        if out is None:
            out = term
        else:
            out += term
    return out


def _kernel2d(x: np.ndarray, outs, scales, mode: str, align: bool) -> np.ndarray:
    """float32 (N, C, H, W) nearest / bilinear through the C kernels."""
    ih, iw = x.shape[2:]
    ty, wy = axis_taps(mode, ih, outs[0], scales[0], align, False, x.dtype)
    tx, wx = axis_taps(mode, iw, outs[1], scales[1], align, False, x.dtype)
    x = np.ascontiguousarray(x)
    if mode == "nearest":
        return _resample.nearest2d(x, ty[:, 0], tx[:, 0])
    return _resample.bilinear2d(x, ty[:, 0], ty[:, 1], wy[:, 0], wy[:, 1],
                                tx[:, 0], tx[:, 1], wx[:, 0], wx[:, 1])


def output_size(x_shape, dim: int, size, scale_factor, recompute_scale_factor, what):
    """``(output sizes, scales passed to the kernels)`` as ``F.interpolate`` computes them."""
    if size is not None and scale_factor is not None:
        raise ValueError(f"{what}: only one of size or scale_factor should be defined")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError(
                f"{what}: recompute_scale_factor is not meaningful with an explicit size")
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError(
                    f"{what}: size {tuple(size)} must have {dim} elements for a {dim + 2}-D "
                    f"input (spatial dimensions only)")
            sizes = size
        else:
            sizes = (size,) * dim
        out = []
        for v in sizes:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"{what}: size must be non-negative ints, got {size!r}")
            out.append(int(v))
        return tuple(out), (None,) * dim
    if scale_factor is None:
        raise ValueError(f"{what}: either size or scale_factor should be defined")
    if isinstance(scale_factor, (list, tuple)):
        if len(scale_factor) != dim:
            raise ValueError(
                f"{what}: scale_factor {tuple(scale_factor)} must have {dim} elements for a "
                f"{dim + 2}-D input")
        factors = tuple(float(f) for f in scale_factor)
    else:
        factors = (float(scale_factor),) * dim
    for f in factors:
        if not math.isfinite(f) or f <= 0:
            raise ValueError(f"{what}: scale_factor must be positive and finite, got "
                             f"{scale_factor!r}")
    out = tuple(int(math.floor(float(n) * f)) for n, f in zip(x_shape[2:], factors))
    scales = (None,) * dim if recompute_scale_factor else factors
    return out, scales


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False, *, what="interpolate"):
    """``torch.nn.functional.interpolate`` over an ``(N, C, *spatial)`` input with 1 to 3
    spatial dimensions (see the module docstring)."""
    if mode not in _MODES:
        raise ValueError(f"{what}: mode must be one of {', '.join(_MODES)}, got {mode!r}")
    x = as_input(input, what)
    if x.ndim not in (3, 4, 5):
        raise ValueError(
            f"{what}: expected a 3-D (N, C, L), 4-D (N, C, H, W) or 5-D (N, C, D, H, W) input, "
            f"got shape {tuple(x.shape)}")
    x = x.astype(_F64 if x.dtype == _F64 else _F32, copy=False)
    dim = x.ndim - 2
    if align_corners is not None and mode not in _LINEAR_DIMS:
        raise ValueError(
            f"{what}: align_corners option can only be set with the interpolating modes: "
            f"linear | bilinear | bicubic | trilinear (got mode {mode!r})")
    align = bool(align_corners)
    if mode in _LINEAR_DIMS and _LINEAR_DIMS[mode] != dim:
        raise NotImplementedError(
            f"{what}: got a {x.ndim}-D input, but mode {mode!r} needs a "
            f"{_LINEAR_DIMS[mode] + 2}-D input")
    if antialias and mode not in ("bilinear", "bicubic"):
        raise NotImplementedError(
            f"{what}: anti-alias option is only supported for bilinear and bicubic modes "
            f"(got mode {mode!r})")
    outs, scales = output_size(x.shape, dim, size, scale_factor, recompute_scale_factor, what)
    if mode == "area":  # adaptive average pooling: an output size of 0 is allowed, as torch
        return _pool.adaptive_avg_pool(x, dim, outs, what=what)
    if min(outs) < 1 or min(x.shape[2:]) < 1:
        raise ValueError(
            f"{what}: input spatial size {tuple(x.shape[2:])} and output size {outs} must both "
            f"be positive")
    # torch's antialiasing passes skip an axis whose size does not change (whatever the scale)
    keep = [bool(antialias) and outs[a] == x.shape[2 + a] for a in range(dim)]
    if dim == 2 and x.dtype == _F32 and not antialias and mode in ("nearest", "bilinear"):
        return _kernel2d(x, outs, scales, mode, align)
    y = x
    for a in reversed(range(dim)):
        if keep[a]:
            continue
        idx, w = axis_taps(mode, x.shape[2 + a], outs[a], scales[a], align, bool(antialias),
                           x.dtype)
        y = _apply_taps(y, 2 + a, idx, w)
    return y.copy() if y is x else np.ascontiguousarray(y)
