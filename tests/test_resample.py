"""Pooling, resampling, padding and shape layers (issue #17) against torch.

Torch is the oracle: every case builds the same layer / functional call in both libraries and
compares the outputs (float32 rtol 1e-5 / atol 1e-6 unless noted, float64 tighter; indices
exactly). Odd shapes, unbatched inputs, non-contiguous inputs, float64, every ISA path of the
C kernels (the ``isa`` fixture) and bad input (errors naming the layer) are covered.
"""

import numpy as np
import pytest

import modulekit
import modulekit.nn as nn
import modulekit.nn.functional as F
from modulekit._ext import _resample

torch = pytest.importorskip("torch")
tnn = torch.nn
TF = torch.nn.functional


def _t(x):
    return torch.from_numpy(np.ascontiguousarray(x))


def _check(got, want, rtol=1e-5, atol=1e-6):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _check(g, w, rtol, atol)
        return
    w = want.detach().numpy()
    assert isinstance(got, np.ndarray)
    assert got.shape == w.shape, (got.shape, w.shape)
    assert got.dtype == w.dtype, (got.dtype, w.dtype)
    if w.dtype.kind in "iub":
        np.testing.assert_array_equal(got, w)
    else:
        np.testing.assert_allclose(got, w, rtol=rtol, atol=atol)


def _spatial(d, sizes=(7, 8, 9)):
    return sizes[:d]


# ------------------------------------------------------------------------------------------
# pooling

MAX_CASES = [  # kernel, stride, padding, dilation, ceil_mode
    (3, 2, 1, 1, True),
    (2, None, 0, 1, False),
    (3, 1, 1, 2, False),
    (3, 2, 1, 1, False),
    (2, 3, 1, 1, True),
    (1, 1, 0, 1, False),
]


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("case", MAX_CASES)
def test_max_pool_values_and_indices(d, case, rng):
    k, s, p, dil, ceil = case
    x = rng.standard_normal((2, 3) + _spatial(d)).astype(np.float32)
    x.reshape(-1)[5] = np.nan  # NaN wins its windows, as in torch
    x.reshape(-1)[40] = x.reshape(-1)[41]  # a tie: the first maximum's index
    cls = getattr(nn, f"MaxPool{d}d")
    tcls = getattr(tnn, f"MaxPool{d}d")
    for ri in (False, True):
        ours = cls(k, s, p, dil, return_indices=ri, ceil_mode=ceil)
        theirs = tcls(k, s, p, dil, return_indices=ri, ceil_mode=ceil)
        assert repr(ours) == repr(theirs)
        _check(ours(x), theirs(_t(x)))
        _check(getattr(F, f"max_pool{d}d")(x, k, s, p, dil, ceil, ri),
               getattr(TF, f"max_pool{d}d")(_t(x), k, s, p, dil, ceil, ri))


@pytest.mark.parametrize("d", [1, 2, 3])
def test_max_pool_unbatched_float64_noncontiguous(d, rng):
    x = rng.standard_normal((6, 3) + _spatial(d, (9, 10, 11)))[::2, :, ...]
    x = np.swapaxes(np.swapaxes(x, 0, 1), 0, 1)  # non-contiguous view
    assert not x.flags.c_contiguous
    ours = getattr(nn, f"MaxPool{d}d")(3, 2, 1, return_indices=True)
    theirs = getattr(tnn, f"MaxPool{d}d")(3, 2, 1, return_indices=True)
    _check(ours(x), theirs(_t(x)), rtol=1e-12, atol=1e-12)
    _check(ours(x[0]), theirs(_t(x[0])), rtol=1e-12, atol=1e-12)


def test_max_pool_minus_inf_windows(rng):
    """A window of -inf values gives -inf and the index of its first in-bounds element; a
    window with no element at all (dilation over padding) torch's start index."""
    x = np.full((1, 1, 5, 5), -np.inf, np.float32)
    _check(F.max_pool2d(x, 3, 2, 1, return_indices=True),
           TF.max_pool2d(_t(x), 3, 2, 1, return_indices=True))
    for shape in ((1, 1, 5), (1, 1, 1), (1, 3, 1, 6)):
        y = rng.standard_normal(shape).astype(np.float32)
        _check(F.max_pool2d(y, 2, 2, 1, 2, return_indices=True),
               TF.max_pool2d(_t(y), 2, 2, 1, 2, return_indices=True))
    z = rng.standard_normal((1, 1, 1, 5)).astype(np.float32)
    _check(F.max_pool3d(z, 2, 2, 1, 2, return_indices=True),
           TF.max_pool3d(_t(z), 2, 2, 1, 2, return_indices=True))


AVG_CASES = [  # kernel, stride, padding, ceil_mode, count_include_pad
    (3, 2, 1, True, True),
    (3, 2, 1, True, False),
    (2, None, 0, False, True),
    (3, 1, 1, False, False),
    (2, 3, 1, True, True),
    (4, 3, 2, True, False),
]


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("case", AVG_CASES)
def test_avg_pool(d, case, rng):
    k, s, p, ceil, cip = case
    x = rng.standard_normal((2, 3) + _spatial(d)).astype(np.float32)
    ours = getattr(nn, f"AvgPool{d}d")(k, s, p, ceil, cip)
    theirs = getattr(tnn, f"AvgPool{d}d")(k, s, p, ceil, cip)
    assert repr(ours) == repr(theirs)
    _check(ours(x), theirs(_t(x)))
    _check(getattr(F, f"avg_pool{d}d")(x, k, s, p, ceil, cip),
           getattr(TF, f"avg_pool{d}d")(_t(x), k, s, p, ceil, cip))
    _check(ours(x.astype(np.float64)), theirs(_t(x.astype(np.float64))), 1e-12, 1e-12)


@pytest.mark.parametrize("divisor", [1, 5, -3])
def test_avg_pool3d_divisor_override(divisor, rng):
    x = rng.standard_normal((2, 3, 5, 6, 7)).astype(np.float32)
    ours = nn.AvgPool3d(3, 2, 1, ceil_mode=True, divisor_override=divisor)
    theirs = tnn.AvgPool3d(3, 2, 1, ceil_mode=True, divisor_override=divisor)
    _check(ours(x), theirs(_t(x)))


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("size", [1, 3, 5, 10, None])
def test_adaptive_pools(d, size, rng):
    x = rng.standard_normal((2, 3) + _spatial(d)).astype(np.float32)
    x.reshape(-1)[7] = np.nan
    out = size if size is not None else (None,) + (4,) * (d - 1) if d > 1 else 4
    for name in ("AdaptiveAvgPool", "AdaptiveMaxPool"):
        if not hasattr(tnn, f"{name}{d}d"):
            continue
        if d == 1 and out is None:
            continue
        ours = getattr(nn, f"{name}{d}d")(out)
        theirs = getattr(tnn, f"{name}{d}d")(out)
        assert repr(ours) == repr(theirs)
        _check(ours(x), theirs(_t(x)))
        _check(ours(x[0]), theirs(_t(x[0])))
    ours = getattr(nn, f"AdaptiveMaxPool{d}d")(out, return_indices=True)
    theirs = getattr(tnn, f"AdaptiveMaxPool{d}d")(out, return_indices=True)
    _check(ours(x), theirs(_t(x)))


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("norm", [1, 2, 3.5])
def test_lp_pool(d, norm, rng):
    x = np.abs(rng.standard_normal((2, 3) + _spatial(d))).astype(np.float32) + 0.1
    for k, s, ceil in ((2, None, False), (3, 2, True)):
        ours = getattr(nn, f"LPPool{d}d")(norm, k, s, ceil)
        theirs = getattr(tnn, f"LPPool{d}d")(norm, k, s, ceil)
        assert repr(ours) == repr(theirs)
        _check(ours(x), theirs(_t(x)), rtol=1e-4, atol=1e-5)
        _check(getattr(F, f"lp_pool{d}d")(x, norm, k, s, ceil),
               getattr(TF, f"lp_pool{d}d")(_t(x), norm, k, s, ceil), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_max_unpool_round_trip(d, rng):
    shape = _spatial(d, (8, 9, 7))
    x = rng.standard_normal((2, 3) + shape).astype(np.float32)
    v, i = getattr(TF, f"max_pool{d}d")(_t(x), 2, 2, return_indices=True)
    ours = getattr(nn, f"MaxUnpool{d}d")(2, 2)
    theirs = getattr(tnn, f"MaxUnpool{d}d")(2, 2)
    assert repr(ours) == repr(theirs)
    _check(ours(v.numpy(), i.numpy(), shape), theirs(v, i, shape))
    _check(ours(v.numpy(), i.numpy(), (2, 3) + shape), theirs(v, i, (2, 3) + shape))
    even = tuple(n - n % 2 for n in shape)
    x2 = x[(...,) + tuple(slice(0, n) for n in even)]
    v, i = getattr(TF, f"max_pool{d}d")(_t(x2), 2, 2, return_indices=True)
    _check(ours(v.numpy(), i.numpy()), theirs(v, i))
    _check(getattr(F, f"max_unpool{d}d")(v.numpy()[0], i.numpy()[0], 2, 2),
           getattr(TF, f"max_unpool{d}d")(v[0], i[0], 2, 2))


def test_max_unpool_bad_indices():
    v = np.ones((1, 1, 2, 2), np.float32)
    i = np.array([[[[0, 1], [2, 99]]]])
    with pytest.raises(IndexError, match="MaxUnpool2d: found an invalid max index 99"):
        nn.MaxUnpool2d(2)(v, i)
    with pytest.raises(ValueError, match="MaxUnpool2d: output_size"):
        nn.MaxUnpool2d(2)(v, np.zeros((1, 1, 2, 2), np.int64), (9, 9))
    with pytest.raises(ValueError, match="MaxUnpool2d: indices shape"):
        nn.MaxUnpool2d(2)(v, np.zeros((1, 1, 2, 3), np.int64))
    with pytest.raises(TypeError, match="MaxUnpool2d: indices must be integers"):
        nn.MaxUnpool2d(2)(v, np.zeros((1, 1, 2, 2), np.float32))


def test_maxpool2d_return_indices_uses_torch_layout(rng):
    x = rng.standard_normal((2, 4, 11, 10)).astype(np.float32)
    ours = nn.MaxPool2d(3, 2, 1, dilation=1, return_indices=True, ceil_mode=True)
    theirs = tnn.MaxPool2d(3, 2, 1, dilation=1, return_indices=True, ceil_mode=True)
    assert repr(ours) == repr(theirs)
    _check(ours(x), theirs(_t(x)))
    # without indices the 2-D C kernel runs: same values
    np.testing.assert_array_equal(nn.MaxPool2d(3, 2, 1, ceil_mode=True)(x), ours(x)[0])


def test_pooling_bad_input():
    with pytest.raises(ValueError, match=r"MaxPool1d: expected a 2-D \(C, L\) or 3-D"):
        nn.MaxPool1d(2)(np.zeros((1, 1, 4, 4), np.float32))
    with pytest.raises(ValueError, match="MaxPool3d: padding .* at most half"):
        nn.MaxPool3d(2, padding=2)
    with pytest.raises(ValueError, match="AvgPool1d: kernel_size must be at least 1"):
        nn.AvgPool1d(0)
    with pytest.raises(TypeError, match="AvgPool3d: stride must be an int"):
        nn.AvgPool3d(2, stride=1.5)
    with pytest.raises(ValueError, match="AvgPool3d: divisor_override"):
        nn.AvgPool3d(2, divisor_override=0)
    with pytest.raises(ValueError, match="MaxPool3d: input spatial size .* too small"):
        nn.MaxPool3d(3)(np.zeros((1, 1, 2, 5, 5), np.float32))
    with pytest.raises(ValueError, match="AdaptiveMaxPool2d: every spatial dimension"):
        nn.AdaptiveMaxPool2d(2)(np.zeros((1, 1, 0, 5), np.float32))
    with pytest.raises(ValueError, match="AdaptiveAvgPool3d: output_size must be at least 1"):
        nn.AdaptiveAvgPool3d((1, 0, 1))
    with pytest.raises(TypeError, match="LPPool2d: norm_type must be a number"):
        nn.LPPool2d("2", 2)
    with pytest.raises(TypeError, match="MaxPool1d: got an array of complex"):
        nn.MaxPool1d(2)(np.zeros((1, 2, 4), np.complex64))
    with pytest.raises(NotImplementedError, match="FractionalMaxPool2d .*random"):
        nn.FractionalMaxPool2d(3, output_size=2)
    with pytest.raises(NotImplementedError, match="random"):
        F.fractional_max_pool2d(np.zeros((1, 1, 4, 4), np.float32), 2, output_size=2)


def test_pooling_dtypes(rng):
    x = rng.integers(-5, 5, (2, 3, 6, 7)).astype(np.int32)
    y = nn.AdaptiveMaxPool2d(3)(x)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, TF.adaptive_max_pool2d(_t(x.astype(np.float32)), 3))
    y16 = nn.AvgPool1d(2)(x[0].astype(np.float16))
    assert y16.dtype == np.float32
    np.testing.assert_allclose(y16, TF.avg_pool1d(_t(x[0].astype(np.float32)), 2))


# ------------------------------------------------------------------------------------------
# interpolate / Upsample

def _interp_cases():
    modes = [("nearest", 1), ("nearest", 2), ("nearest", 3), ("nearest-exact", 1),
             ("nearest-exact", 2), ("nearest-exact", 3), ("linear", 1), ("bilinear", 2),
             ("bicubic", 2), ("trilinear", 3), ("area", 1), ("area", 2), ("area", 3)]
    sizes = [dict(size=(8, 13, 3)), dict(scale_factor=2.0), dict(scale_factor=0.5),
             dict(scale_factor=1.7), dict(scale_factor=0.37, recompute_scale_factor=True),
             dict(size=(1, 1, 1)), dict(scale_factor=3.0), dict(scale_factor=(2.5, 0.75, 1.3))]
    for mode, d in modes:
        for kw in sizes:
            kw = dict(kw)
            if "size" in kw:
                kw["size"] = kw["size"][:d]
            if isinstance(kw.get("scale_factor"), tuple):
                kw["scale_factor"] = kw["scale_factor"][:d]
            aligns = [None] if mode.startswith("nearest") or mode == "area" else [False, True]
            for ac in aligns:
                yield mode, d, kw, ac


@pytest.mark.parametrize("mode,d,kw,align", list(_interp_cases()))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_interpolate(mode, d, kw, align, dtype, rng):
    for shape in ((5, 7, 6), (4, 4, 4), (9, 3, 11)):
        x = rng.standard_normal((2, 3) + shape[:d]).astype(dtype)
        want = TF.interpolate(_t(x), mode=mode, align_corners=align, **kw)
        tol = (1e-5, 1e-5) if dtype == np.float32 else (1e-12, 1e-12)
        _check(F.interpolate(x, mode=mode, align_corners=align, **kw), want, *tol)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("kw", [dict(size=(8, 13)), dict(size=(3, 2)), dict(scale_factor=0.5),
                                dict(scale_factor=0.3), dict(scale_factor=(1.5, 0.4))])
def test_interpolate_antialias(mode, align, kw, rng):
    for shape in ((17, 23), (12, 12)):
        x = rng.standard_normal((2, 3) + shape).astype(np.float32)
        want = TF.interpolate(_t(x), mode=mode, align_corners=align, antialias=True, **kw)
        if want.shape[-1] == 1 and want.shape[-2] != shape[0]:
            # torch 2.13's separable antialias pass returns a constant column when the width
            # shrinks to 1 and the height changes too (a torch bug: not reproduced)
            continue
        _check(F.interpolate(x, mode=mode, align_corners=align, antialias=True, **kw), want,
               1e-5, 1e-5)


@pytest.mark.parametrize("mode,align", [("nearest", None), ("bilinear", False),
                                        ("bilinear", True)])
@pytest.mark.parametrize("kw", [dict(scale_factor=2.0), dict(size=(37, 19)),
                                dict(scale_factor=0.5), dict(size=(5, 300)),
                                dict(scale_factor=(3.0, 1.0))])
def test_interpolate_2d_kernels_every_isa(isa, mode, align, kw, rng):
    """float32 4-D nearest / bilinear run the C kernels: every ISA path, odd widths (masked
    tails), non-contiguous input."""
    x = rng.standard_normal((2, 5, 13, 17)).astype(np.float32)
    want = TF.interpolate(_t(x), mode=mode, align_corners=align, **kw)
    _check(F.interpolate(x, mode=mode, align_corners=align, **kw), want, 1e-5, 1e-5)
    xt = np.asfortranarray(x)
    _check(F.interpolate(xt, mode=mode, align_corners=align, **kw), want, 1e-5, 1e-5)
    xs = rng.standard_normal((2, 5, 26, 17)).astype(np.float32)[:, :, ::2]
    _check(F.interpolate(xs, mode=mode, align_corners=align, **kw),
           TF.interpolate(_t(xs), mode=mode, align_corners=align, **kw), 1e-5, 1e-5)


@pytest.mark.parametrize("mode,d,align", [("bicubic", 2, False), ("bicubic", 2, True),
                                          ("linear", 1, False), ("trilinear", 3, True),
                                          ("nearest", 3, None), ("nearest-exact", 2, None),
                                          ("nearest", 1, None)])
@pytest.mark.parametrize("factor", [2.0, 0.6, 1.37])
def test_interpolate_taps_kernel_every_isa(isa, mode, d, align, factor, rng):
    """The other float32 modes run the per-axis taps kernel: every ISA path, widths that leave
    masked tails (inner rows and last-axis gathers), non-contiguous input."""
    shape = (2, 3) + (7, 19, 23)[3 - d:]
    x = rng.standard_normal(shape).astype(np.float32)
    want = TF.interpolate(_t(x), scale_factor=factor, mode=mode, align_corners=align)
    _check(F.interpolate(x, scale_factor=factor, mode=mode, align_corners=align), want,
           1e-5, 1e-5)
    xt = np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)
    _check(F.interpolate(xt, scale_factor=factor, mode=mode, align_corners=align), want,
           1e-5, 1e-5)
    if mode == "bicubic":
        want = TF.interpolate(_t(x), scale_factor=0.3, mode=mode, antialias=True)
        _check(F.interpolate(x, scale_factor=0.3, mode=mode, antialias=True), want, 1e-5, 1e-5)


def test_taps_axis_direct(rng):
    x = rng.standard_normal((3, 5, 40)).astype(np.float32)
    idx = rng.integers(0, 5, (9, 3))
    w = rng.standard_normal((9, 3)).astype(np.float32)
    want = sum(np.take(x, idx[:, t], axis=1) * w[:, t][None, :, None] for t in range(3))
    np.testing.assert_allclose(_resample.taps_axis(x, 1, idx, w), want, rtol=1e-5, atol=1e-6)
    idx = rng.integers(0, 40, (33, 2))
    np.testing.assert_array_equal(_resample.taps_axis(x, -1, idx[:, :1]),
                                  np.take(x, idx[:, 0], axis=2))
    with pytest.raises(IndexError, match="taps_axis: idx holds an index outside"):
        _resample.taps_axis(x, 0, np.array([[3]]))
    with pytest.raises(ValueError, match="w must be a float array"):
        _resample.taps_axis(x, 0, np.array([[0, 1]]), np.ones((1, 3), np.float32))
    with pytest.raises(IndexError, match="axis 3 is out of range"):
        _resample.taps_axis(x, 3, np.array([[0]]))


def test_interpolate_nan_stays_in_its_taps(rng):
    """A NaN reaches only the outputs whose taps read it (antialias taps past a window too)."""
    x = rng.standard_normal((1, 1, 12, 12)).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    for kw in (dict(mode="bilinear", antialias=True), dict(mode="bicubic", antialias=True),
               dict(mode="bicubic"), dict(mode="area")):
        got = F.interpolate(x, size=(5, 5), **kw)
        want = TF.interpolate(_t(x), size=(5, 5), **kw).numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_resample_kernels_misaligned_input(rng):
    """An input at an odd byte offset (NumPy flags it not ALIGNED) is copied, same values."""
    x = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    buf = np.zeros(x.nbytes + 1, np.uint8)
    mis = np.frombuffer(buf[1:].data, np.float32).reshape(x.shape)
    mis[...] = x
    assert not mis.flags.aligned
    for mode in ("nearest", "bilinear"):
        np.testing.assert_array_equal(F.interpolate(mis, scale_factor=2, mode=mode),
                                      F.interpolate(x, scale_factor=2, mode=mode))


def test_resample_kernels_threads_agree(rng):
    """Above the parallel threshold the rows split over threads: same result as one thread."""
    x = rng.standard_normal((3, 8, 40, 50)).astype(np.float32)
    before = modulekit.get_num_threads()
    try:
        modulekit.set_num_threads(2)
        a = F.interpolate(x, scale_factor=2, mode="bilinear")
        b = F.interpolate(x, scale_factor=2, mode="nearest")
        modulekit.set_num_threads(1)
        np.testing.assert_array_equal(a, F.interpolate(x, scale_factor=2, mode="bilinear"))
        np.testing.assert_array_equal(b, F.interpolate(x, scale_factor=2, mode="nearest"))
    finally:
        modulekit.set_num_threads(before)
    assert a.size > _resample.PARALLEL_THRESHOLD


def test_resample_kernels_validate_taps():
    x = np.zeros((1, 1, 4, 4), np.float32)
    idx, w = np.array([0, 4]), np.ones(2, np.float32)
    with pytest.raises(IndexError, match="ys0 holds an index outside"):
        _resample.bilinear2d(x, idx, idx, w, w, idx[:1], idx[:1], w[:1], w[:1])
    with pytest.raises(IndexError, match="xs holds an index outside"):
        _resample.nearest2d(x, np.array([0]), np.array([-1]))
    with pytest.raises(ValueError, match="wy0 must be 2 floats"):
        _resample.bilinear2d(x, idx[:1].repeat(2), idx[:1].repeat(2), w[:1], w, idx[:1],
                             idx[:1], w[:1], w[:1])
    with pytest.raises(TypeError, match="4-D float32"):
        _resample.nearest2d(x.astype(np.float64), np.array([0]), np.array([0]))


@pytest.mark.filterwarnings("ignore:`nn.functional.upsample")
def test_upsample_layers(rng):
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    pairs = [
        (nn.Upsample(scale_factor=2), tnn.Upsample(scale_factor=2)),
        (nn.Upsample(size=(4, 9), mode="bilinear", align_corners=True),
         tnn.Upsample(size=(4, 9), mode="bilinear", align_corners=True)),
        (nn.Upsample(scale_factor=(1.5, 2.5), mode="bicubic"),
         tnn.Upsample(scale_factor=(1.5, 2.5), mode="bicubic")),
        (nn.Upsample(scale_factor=0.5, mode="area"), tnn.Upsample(scale_factor=0.5, mode="area")),
        (nn.UpsamplingNearest2d(scale_factor=3), tnn.UpsamplingNearest2d(scale_factor=3)),
        (nn.UpsamplingBilinear2d(size=(6, 11)), tnn.UpsamplingBilinear2d(size=(6, 11))),
    ]
    for ours, theirs in pairs:
        assert repr(ours) == repr(theirs)
        _check(ours(x), theirs(_t(x)), 1e-5, 1e-5)
    _check(F.upsample_bilinear(x, scale_factor=2), TF.upsample_bilinear(_t(x), scale_factor=2),
           1e-5, 1e-5)
    _check(F.upsample_nearest(x, size=(3, 3)), TF.upsample_nearest(_t(x), size=(3, 3)))


@pytest.mark.parametrize("mode,kw", [("linear", {}), ("bilinear", {}), ("trilinear", {}),
                                     ("bilinear", {"antialias": True}),
                                     ("bicubic", {"antialias": True}), ("bicubic", {}),
                                     ("nearest", {}), ("bilinear", {"align_corners": True})])
def test_interpolate_unchanged_axes(mode, kw, rng):
    """An axis whose size does not change, whatever the scale factor: torch's linear modes
    blend each sample with itself (weights 1 and 0: a NaN stays where it is, an inf becomes
    NaN), its antialiasing passes skip the axis, bicubic and nearest compute it."""
    d = {"linear": 1, "trilinear": 3}.get(mode, 2)
    x = rng.standard_normal((1, 2) + (5, 6, 7)[:d]).astype(np.float32)
    x.reshape(-1)[1] = np.nan
    x.reshape(-1)[9] = np.inf
    for factor in (1.0, 1.1, (1.6, 1.1, 1.0)[:d]):
        want = TF.interpolate(_t(x), scale_factor=factor, mode=mode, **kw)
        got = F.interpolate(x, scale_factor=factor, mode=mode, **kw)
        _check(got, want, 1e-5, 1e-5)
        assert not np.shares_memory(got, x)


def test_interpolate_bad_input():
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(ValueError, match="only one of size or scale_factor"):
        F.interpolate(x, size=2, scale_factor=2)
    with pytest.raises(ValueError, match="either size or scale_factor"):
        F.interpolate(x)
    with pytest.raises(ValueError, match="align_corners option can only be set"):
        F.interpolate(x, scale_factor=2, align_corners=True)
    with pytest.raises(NotImplementedError, match="needs a 5-D input"):
        F.interpolate(x, scale_factor=2, mode="trilinear")
    with pytest.raises(NotImplementedError, match="anti-alias"):
        F.interpolate(x, scale_factor=2, mode="nearest", antialias=True)
    with pytest.raises(ValueError, match="mode must be one of"):
        F.interpolate(x, scale_factor=2, mode="cubic")
    with pytest.raises(ValueError, match=r"Upsample: expected a 3-D \(N, C, L\)"):
        nn.Upsample(scale_factor=2)(np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match="size .* must have 2 elements"):
        F.interpolate(x, size=(2, 2, 2))
    with pytest.raises(ValueError, match="scale_factor must be positive"):
        F.interpolate(x, scale_factor=-1.0)
    with pytest.raises(ValueError, match="must both be positive"):
        F.interpolate(x, scale_factor=0.1)
    # area is adaptive average pooling: an empty output is allowed, as in torch
    _check(F.interpolate(x, scale_factor=0.1, mode="area"),
           TF.interpolate(_t(x), scale_factor=0.1, mode="area"))
    with pytest.raises(ValueError, match="recompute_scale_factor is not meaningful"):
        F.interpolate(x, size=3, recompute_scale_factor=True)


# ------------------------------------------------------------------------------------------
# padding

PAD_CASES = [(1, (2, 3)), (1, (-1, 2)), (2, (1, 2, 3, 0)), (2, (0, -2, 1, 1)),
             (3, (1, 1, 2, 0, 1, 2)), (3, (0, 1, 0, 1, 1, 0))]


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("d,pad", PAD_CASES)
def test_pad_functional(mode, d, pad, rng):
    for batched in (False, True):
        shape = ((2,) if batched else ()) + (3,) + (5, 4, 6)[:d]
        x = rng.standard_normal(shape).astype(np.float32)
        kw = dict(value=1.5) if mode == "constant" else {}
        _check(F.pad(x, pad, mode, **kw), TF.pad(_t(x), pad, mode, **kw))
        big = rng.standard_normal(shape[:-1] + (2 * shape[-1],)).astype(np.float32)
        xt = big[..., ::2]  # non-contiguous
        _check(F.pad(xt, pad, mode, **kw), TF.pad(_t(xt), pad, mode, **kw))


def test_pad_constant_any_dims_and_dtypes(rng):
    x = rng.integers(0, 9, (2, 3, 4, 5)).astype(np.int64)
    got = F.pad(x, (1, 1, 0, 2, 1, 0, 0, 1), value=7.5)
    assert got.dtype == np.float32  # integer inputs compute in float32, as every op
    _check(got, TF.pad(_t(x.astype(np.float32)), (1, 1, 0, 2, 1, 0, 0, 1), value=7.5))
    h = x.astype(np.float16)
    assert F.pad(h[0], (1, 1), mode="reflect").dtype == np.float16  # floats keep their dtype
    x64 = rng.standard_normal((3, 4))
    _check(F.pad(x64, (2, -1)), TF.pad(_t(x64), (2, -1)))
    _check(F.pad(x64, ()), TF.pad(_t(x64), ()))


PAD_LAYERS = ["ZeroPad", "ConstantPad", "ReflectionPad", "ReplicationPad", "CircularPad"]


@pytest.mark.parametrize("name", PAD_LAYERS)
@pytest.mark.parametrize("d", [1, 2, 3])
def test_pad_layers(name, d, rng):
    x = rng.standard_normal((2, 3) + (5, 4, 6)[:d]).astype(np.float32)
    args = (2.5,) if name == "ConstantPad" else ()
    for padding in (1, tuple(range(1, 2 * d + 1))[::-1]):
        padding = padding if isinstance(padding, int) else tuple(min(p, 3) for p in padding)
        ours = getattr(nn, f"{name}{d}d")(padding, *args)
        theirs = getattr(tnn, f"{name}{d}d")(padding, *args)
        assert repr(ours) == repr(theirs)
        assert ours.padding == theirs.padding
        _check(ours(x), theirs(_t(x)))
        _check(ours(x[0]), theirs(_t(x[0])))
        _check(ours(x.astype(np.float64)), theirs(_t(x.astype(np.float64))))


def test_pad_negative_and_empty_edge_cases():
    x = np.arange(3, dtype=np.float32).reshape(1, 1, 3)
    for mode, pad in (("reflect", (-1, -1)), ("replicate", (-2, 0)), ("circular", (0, -3)),
                      ("circular", (-3, 0)), ("circular", (-1, 2)), ("reflect", (-1, 2))):
        _check(F.pad(x, pad, mode), TF.pad(_t(x), pad, mode))
    with pytest.raises(ValueError, match="leaves no element"):
        F.pad(x, (0, -3), "reflect")
    y = np.ones((1, 1, 2), np.float32)  # one of two padded dimensions emptied: torch answers
    _check(F.pad(y, (0, 0, 0, -1), "replicate"), TF.pad(_t(y), (0, 0, 0, -1), "replicate"))
    with pytest.raises(ValueError, match="more than once"):
        F.pad(x, (4, 0), "circular")
    with pytest.raises(ValueError, match="left after cropping"):
        F.pad(x, (-1, 3), "circular")
    empty = np.zeros((0, 1, 3), np.float32)  # an empty batch: torch pads its shape
    _check(F.pad(empty, (-1, 3), "circular"), TF.pad(_t(empty), (-1, 3), "circular"))


def test_pad_bad_input():
    x = np.zeros((1, 2, 3), np.float32)
    with pytest.raises(ValueError, match="ReflectionPad1d: reflect padding .* must be smaller"):
        nn.ReflectionPad1d(3)(x)
    with pytest.raises(ValueError, match="CircularPad1d: circular padding"):
        nn.CircularPad1d(4)(x)
    with pytest.raises(ValueError, match=r"ReplicationPad2d: expected a 3-D or 4-D input"):
        nn.ReplicationPad2d(1)(np.zeros((3,), np.float32))
    with pytest.raises(ValueError, match="ZeroPad2d: padding must be an int or a tuple of 4"):
        nn.ZeroPad2d((1, 2))
    with pytest.raises(ValueError, match="pad: padding length must be divisible by 2"):
        F.pad(x, (1, 2, 3))
    with pytest.raises(ValueError, match="too long"):
        F.pad(x, (1,) * 8)
    with pytest.raises(ValueError, match="mode must be one of"):
        F.pad(x, (1, 1), mode="edge")
    with pytest.raises(NotImplementedError, match="reflect padding of length 2"):
        F.pad(np.zeros(5, np.float32), (1, 1), mode="reflect")
    with pytest.raises(ValueError, match="negative output size"):
        F.pad(x, (-2, -2))
    with pytest.raises(ValueError, match="doesn't take in value"):
        F.pad(x, (1, 1), mode="replicate", value=3.0)
    with pytest.raises(TypeError, match="ConstantPad1d: value must be a number"):
        nn.ConstantPad1d(1, "a")


# ------------------------------------------------------------------------------------------
# shuffles, fold / unfold, unflatten

def test_pixel_and_channel_shuffle(rng):
    x = rng.standard_normal((2, 18, 5, 7)).astype(np.float32)
    for ours, theirs in ((nn.PixelShuffle(3), tnn.PixelShuffle(3)),
                         (nn.ChannelShuffle(6), tnn.ChannelShuffle(6))):
        assert repr(ours) == repr(theirs)
        _check(ours(x), theirs(_t(x)))
    _check(nn.PixelShuffle(3)(x[0]), tnn.PixelShuffle(3)(_t(x[0])))
    y = rng.standard_normal((2, 3, 4, 6, 9)).astype(np.float64)
    _check(nn.PixelUnshuffle(3)(y.swapaxes(-1, -2)), tnn.PixelUnshuffle(3)(_t(y.swapaxes(-1, -2))))
    assert repr(nn.PixelUnshuffle(3)) == repr(tnn.PixelUnshuffle(3))
    xi = x.astype(np.int16)
    assert F.pixel_shuffle(xi, 3).dtype == np.int16
    _check(F.channel_shuffle(x[:, :, :, 0], 3), TF.channel_shuffle(_t(x[:, :, :, 0]), 3))
    empty = np.zeros((0, 4, 2, 2), np.float32)  # torch's unshuffle hands it back unchanged
    _check(F.pixel_unshuffle(empty, 2), TF.pixel_unshuffle(_t(empty), 2))
    _check(F.pixel_shuffle(empty, 2), TF.pixel_shuffle(_t(empty), 2))
    _check(F.channel_shuffle(empty, 2), TF.channel_shuffle(_t(empty), 2))
    with pytest.raises(ValueError, match="PixelShuffle: the channel dimension 18 must be"):
        nn.PixelShuffle(4)(x)
    with pytest.raises(ValueError, match="PixelUnshuffle: height 5 and width 7"):
        nn.PixelUnshuffle(2)(x)
    with pytest.raises(ValueError, match="ChannelShuffle: the number of channels 18"):
        nn.ChannelShuffle(4)(x)
    with pytest.raises(ValueError, match="PixelShuffle: upscale_factor must be a positive"):
        nn.PixelShuffle(0)


FOLD_CASES = [  # kernel, dilation, padding, stride
    (2, 1, 0, 1), ((2, 3), 1, 1, 2), (3, 2, 1, 1), ((1, 2), (2, 1), (0, 1), (3, 2)),
]


@pytest.mark.parametrize("case", FOLD_CASES)
def test_fold_unfold(case, rng):
    k, dil, p, s = case
    x = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    ours, theirs = nn.Unfold(k, dil, p, s), tnn.Unfold(k, dil, p, s)
    assert repr(ours) == repr(theirs)
    cols = theirs(_t(x))
    _check(ours(x), cols)
    _check(ours(x[0]), theirs(_t(x[0])))
    _check(ours(x.transpose(0, 1, 3, 2)), theirs(_t(x.transpose(0, 1, 3, 2))))
    ours_f, theirs_f = nn.Fold((9, 10), k, dil, p, s), tnn.Fold((9, 10), k, dil, p, s)
    assert repr(ours_f) == repr(theirs_f)
    c = cols.numpy()
    _check(ours_f(c), theirs_f(cols))
    _check(ours_f(c[0]), theirs_f(cols[0]))
    _check(F.fold(c.astype(np.float64), (9, 10), k, dil, p, s),
           TF.fold(cols.double(), (9, 10), k, dil, p, s), 1e-12, 1e-12)


def test_fold_unfold_bad_input():
    with pytest.raises(ValueError, match="Fold: expected the size of input's dimension 1"):
        nn.Fold((4, 4), 2)(np.zeros((1, 5, 9), np.float32))
    with pytest.raises(ValueError, match="Fold: given output_size .* expected"):
        nn.Fold((4, 4), 2)(np.zeros((1, 8, 10), np.float32))
    with pytest.raises(ValueError, match=r"Unfold: expected a 3-D \(C, H, W\) or 4-D"):
        nn.Unfold(2)(np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match="Unfold: .* gives no sliding block"):
        nn.Unfold(5)(np.zeros((1, 1, 3, 3), np.float32))


def test_unflatten(rng):
    x = rng.standard_normal((2, 12, 5)).astype(np.float32)
    for dim, sizes in ((1, (3, 4)), (-1, (5, 1)), (1, (2, -1, 3)), (0, [2])):
        ours, theirs = nn.Unflatten(dim, sizes), tnn.Unflatten(dim, sizes)
        assert repr(ours) == repr(theirs)
        _check(ours(x), theirs(_t(x)))
    with pytest.raises(ValueError, match="Unflatten: provided sizes"):
        nn.Unflatten(1, (5, 2))(x)
    with pytest.raises(IndexError, match="Unflatten: dim 3 is out of range"):
        nn.Unflatten(3, (1, 5))(x)
    with pytest.raises(NotImplementedError, match="named dimensions"):
        nn.Unflatten("features", (("a", 3), ("b", 4)))


# ------------------------------------------------------------------------------------------
# functional names, capture

def test_functional_names_are_torchs():
    for name in ("max_pool1d", "max_pool3d", "avg_pool1d", "avg_pool3d", "adaptive_avg_pool1d",
                 "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d",
                 "adaptive_max_pool3d", "lp_pool1d", "lp_pool2d", "lp_pool3d", "max_unpool1d",
                 "max_unpool2d", "max_unpool3d", "interpolate", "pad", "pixel_shuffle",
                 "pixel_unshuffle", "channel_shuffle", "fold", "unfold"):
        fn = getattr(F, name)
        assert name in F.__all__
        assert fn.__name__ == name
        assert hasattr(fn, "__modulekit_traceable__")
        assert callable(getattr(TF, name))


@pytest.mark.parametrize("d", [1, 2, 3])
def test_with_indices_functions(d, rng):
    x = rng.standard_normal((2, 3) + _spatial(d)).astype(np.float32)
    name = f"max_pool{d}d_with_indices"
    _check(getattr(F, name)(x, 3, 2, 1), getattr(TF, name)(_t(x), 3, 2, 1))
    name = f"adaptive_max_pool{d}d_with_indices"
    _check(getattr(F, name)(x, 3), getattr(TF, name)(_t(x), 3))


def test_layers_hold_no_state():
    for m in (nn.Upsample(scale_factor=2), nn.MaxPool3d(2), nn.ReflectionPad2d(1),
              nn.Fold((4, 4), 2), nn.LPPool1d(2, 3), nn.MaxUnpool2d(2)):
        assert m.state_dict() == {}
        assert m.load_state_dict({}).missing_keys == []


def test_compiled_module_with_resampling(rng):
    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = nn.MaxPool2d(2, return_indices=True)
            self.unpool = nn.MaxUnpool2d(2)
            self.pad = nn.ReflectionPad2d(1)
            self.shuffle = nn.PixelShuffle(2)

        def forward(self, x):
            v, i = self.pool(x)
            y = self.unpool(v, i)
            y = F.interpolate(self.pad(y), scale_factor=2, mode="bilinear")
            return self.shuffle(F.pad(y, (0, 1, 1, 0)))

    x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    m = Decoder()
    want = m(x)
    m.compile()
    np.testing.assert_array_equal(m(x), want)
    np.testing.assert_array_equal(m(x), want)
    tv, ti = TF.max_pool2d(_t(x), 2, return_indices=True)
    ty = TF.interpolate(TF.pad(TF.max_unpool2d(tv, ti, 2), (1, 1, 1, 1), "reflect"),
                        scale_factor=2, mode="bilinear")
    _check(want, TF.pixel_shuffle(TF.pad(ty, (0, 1, 1, 0)), 2), 1e-5, 1e-5)


def test_saved_compiled_module_with_these_layers(rng, tmp_path):
    """A compiled module using these layers saves (their constructor arguments) and loads
    without its Python class, with the same outputs."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Upsample(scale_factor=(2, 1.5), mode="bilinear", align_corners=True)
            self.pad = nn.ReflectionPad1d((2, 1))
            self.pool = nn.MaxPool1d(3, 2, return_indices=True)
            self.unpool = nn.MaxUnpool1d(3, 2)
            self.fold = nn.Fold((6, 5), 2)
            self.unfold = nn.Unfold(2)
            self.shuffle = nn.PixelShuffle(2)
            self.unflatten = nn.Unflatten(2, (2, 3))
            self.adaptive = nn.AdaptiveAvgPool3d((None, 2, 1))
            self.lp = nn.LPPool2d(2, 2)
            self.cpad = nn.ConstantPad2d((1, 0, 2, 1), 3.5)

        def forward(self, x):
            v, i = self.pool(self.pad(x))
            y = self.unpool(v, i)
            z = F.interpolate(x[None], scale_factor=2, mode="nearest")
            u = self.fold(self.unfold(self.up(z)[:, :, :6, :5]))
            return (y, self.unflatten(u), self.shuffle(x.reshape(1, 12, 1, 10)),
                    self.adaptive(z[None]), self.lp(self.cpad(z)))

    x = np.abs(rng.standard_normal((3, 4, 10))).astype(np.float32)
    m = Net()
    want = m(x)
    m.compile()
    m(x)
    path = tmp_path / "net.mkc"
    m.save(str(path))
    loaded = modulekit.load_module(str(path))
    for a, b in zip(want, loaded(x)):
        np.testing.assert_array_equal(a, b)
    m2 = nn.Sequential(nn.MaxPool2d(2, return_indices=True))
    m2.compile()
    m2(np.zeros((1, 1, 4, 4), np.float32))
    with pytest.raises(modulekit.compile.CompileError,
                       match=r"return_indices=True\) cannot be saved"):
        m2.save(str(tmp_path / "pool.mkc"))
