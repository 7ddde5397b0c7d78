"""Pooling and batch-norm inference kernels against torch.nn.functional."""

import numpy as np
import pytest

from modulekit._ext import _conv

torch = pytest.importorskip("torch")
F = torch.nn.functional

MAX_CASES = [  # kernel, stride, padding, dilation, ceil_mode, H, W
    (3, 2, 1, 1, False, 112 // 8, 112 // 8),
    (3, 2, 1, 1, True, 13, 15),
    (2, 2, 0, 1, True, 7, 9),
    ((3, 2), (2, 1), (1, 0), 1, False, 10, 7),
    (3, 1, 1, 2, False, 9, 8),
    (3, 3, 0, 1, True, 8, 10),
    (5, 2, 2, (2, 1), True, 11, 12),
    (1, 1, 0, 1, False, 4, 5),
]


@pytest.mark.parametrize("case", MAX_CASES, ids=lambda c: "-".join(map(str, c)))
def test_max_pool2d(isa, rng, case):
    k, s, p, d, ceil, h, w = case
    x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
    y = _conv.max_pool2d(x, k, s, p, d, ceil)
    ref = F.max_pool2d(torch.from_numpy(x), k, s, p, d, ceil).numpy()
    assert y.shape == ref.shape
    np.testing.assert_array_equal(y, ref)
    y64 = _conv.max_pool2d(x.astype(np.float64), k, s, p, d, ceil)
    assert y64.dtype == np.float64
    np.testing.assert_array_equal(y64, ref)


def test_max_pool2d_nan_and_views(rng):
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    x[0, 0, 1, 1] = np.nan
    y = _conv.max_pool2d(x, 2)
    assert np.isnan(y[0, 0, 0, 0]) and not np.isnan(y[0, 1]).any()
    v = rng.standard_normal((2, 4, 9, 10)).astype(np.float32)[:, ::2, :, ::-1]
    np.testing.assert_array_equal(
        _conv.max_pool2d(v, 3, 2, 1), F.max_pool2d(torch.from_numpy(v.copy()), 3, 2, 1).numpy()
    )
    assert _conv.max_pool2d(v[0], 3).shape == (2, 3, 3)  # unbatched


@pytest.mark.parametrize(
    "case",
    [  # kernel, stride, padding, dilation, ceil_mode, H, W: rows wider than a vector step
        (3, 2, 1, 1, False, 37, 67),  # ResNet's stem pool, 34 output columns
        (3, 2, 1, 1, True, 20, 36),
        (2, 1, 1, 1, False, 9, 33),
        (3, 2, 0, (1, 2), True, 11, 41),
        (4, 2, 2, 1, False, 7, 18),
    ],
    ids=lambda c: "-".join(map(str, c)),
)
def test_max_pool2d_special_values(isa, rng, case):
    """NaN, infinities and signed zeros: bit-identical to torch on every ISA path."""
    k, s, p, d, ceil, h, w = case
    x = rng.standard_normal((1, 3, h, w)).astype(np.float32)
    x[0, 0] = np.where(rng.random((h, w)) < 0.5, np.float32(-0.0), np.float32(0.0))
    x[0, 1, ::5, ::7] = np.nan
    x[0, 1, 2::6, 1::4] = np.inf
    x[0, 2] = -np.inf
    x[0, 2, 3::4, ::3] = np.nan
    for v in (x, x[:, :, ::-1], np.asfortranarray(x)):
        y = _conv.max_pool2d(v, k, s, p, d, ceil)
        ref = F.max_pool2d(torch.from_numpy(v.copy()), k, s, p, d, ceil).numpy()
        np.testing.assert_array_equal(y, ref)
        np.testing.assert_array_equal(np.signbit(y), np.signbit(ref))



@pytest.mark.parametrize("pad,ceil", [(0, False), (1, False), (1, True), (0, True)])
@pytest.mark.parametrize("w", [1, 2, 31, 33, 64, 97])
def test_max_pool2d_3x3_stride2_widths(isa, rng, w, pad, ceil):
    """The 3/2 window walk (even, odd and shifted-even columns of each 32-column step) and the
    row passes run four output rows ahead of their column passes: widths around the vector
    steps, output heights 1 to 9, NaN/inf/signed zeros, bit-identical to torch."""
    if w < 3 - 2 * pad:
        pytest.skip("window larger than the padded input")
    for h in (3, 5, 8, 11, 18):
        x = rng.standard_normal((1, 2, h, w)).astype(np.float32)
        x[0, 0, ::3, ::5] = np.nan
        x[0, 0, 1::4, 2::3] = np.inf
        x[0, 1] = np.where(rng.random((h, w)) < 0.5, np.float32(-0.0), np.float32(0.0))
        y = _conv.max_pool2d(x, 3, 2, pad, 1, ceil)
        ref = F.max_pool2d(torch.from_numpy(x), 3, 2, pad, 1, ceil).numpy()
        np.testing.assert_array_equal(y, ref)
        np.testing.assert_array_equal(np.signbit(y), np.signbit(ref))

AVG_CASES = [  # kernel, stride, padding, ceil_mode, count_include_pad, divisor, H, W
    (3, 2, 1, False, True, None, 9, 10),
    (3, 2, 1, True, True, None, 9, 10),
    (3, 2, 1, True, False, None, 10, 9),
    (2, 2, 0, True, True, None, 7, 7),
    ((3, 2), (2, 3), (1, 1), True, False, None, 11, 13),
    (3, 1, 1, False, True, 4, 6, 6),
    (7, 7, 0, False, True, None, 7, 7),
]


@pytest.mark.parametrize("case", AVG_CASES, ids=lambda c: "-".join(map(str, c)))
def test_avg_pool2d(rng, case):
    k, s, p, ceil, cip, div, h, w = case
    x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
    y = _conv.avg_pool2d(x, k, s, p, ceil, cip, div)
    ref = F.avg_pool2d(torch.from_numpy(x), k, s, p, ceil, cip, div).numpy()
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "size,out", [((7, 7), 1), ((10, 9), (3, 4)), ((5, 6), (7, None)), ((4, 4), (4, 4))]
)
def test_adaptive_avg_pool2d(rng, size, out):
    x = rng.standard_normal((2, 3) + size)
    for dt in (np.float32, np.float64):
        xd = x.astype(dt)
        y = _conv.adaptive_avg_pool2d(xd, out)
        ref = F.adaptive_avg_pool2d(torch.from_numpy(xd), out).numpy()
        assert y.dtype == dt and y.shape == ref.shape
        np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(4, 5), (3, 5, 7), (2, 5, 6, 7)])
def test_batch_norm_inference(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    mean, var = rng.standard_normal(5), rng.uniform(0.5, 2, 5)
    gamma, beta = rng.standard_normal(5), rng.standard_normal(5)
    scale = gamma / np.sqrt(var + 1e-5)
    shift = beta - mean * scale
    ref = F.batch_norm(
        torch.from_numpy(x).double(),
        torch.from_numpy(mean),
        torch.from_numpy(var),
        torch.from_numpy(gamma),
        torch.from_numpy(beta),
        False,
        0.1,
        1e-5,
    )
    np.testing.assert_allclose(
        _conv.batch_norm_inference(x, scale, shift), ref.numpy(), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        _conv.batch_norm_inference(x, scale, shift, "relu"),
        F.relu(ref).numpy(),
        rtol=1e-5,
        atol=1e-5,
    )
    if len(shape) == 4:  # strided view
        v = x[:, :, ::-1]
        np.testing.assert_allclose(
            _conv.batch_norm_inference(v, scale, shift),
            ref.numpy()[:, :, ::-1],
            rtol=1e-5,
            atol=1e-5,
        )


def test_pool_errors():
    x = np.zeros((1, 2, 4, 4), np.float32)
    with pytest.raises(ValueError, match="at most half the kernel"):
        _conv.max_pool2d(x, 2, padding=2)
    with pytest.raises(ValueError, match="too small"):
        _conv.max_pool2d(x, 5)
    with pytest.raises(ValueError, match="4-D"):
        _conv.avg_pool2d(np.zeros((4, 4)), 2)
    with pytest.raises(ValueError, match="divisor_override"):
        _conv.avg_pool2d(x, 2, divisor_override=0)
    with pytest.raises(ValueError, match="positive"):
        _conv.adaptive_avg_pool2d(x, 0)
    with pytest.raises(ValueError, match="channel scales"):
        _conv.batch_norm_inference(x, np.ones(3), np.ones(3))
    with pytest.raises(TypeError, match="kernel_size"):
        _conv.max_pool2d(x, "3")


# ---- convolution fused with the max pooling after it (PackedConv2d.forward_maxpool) ----------
FUSED_CASES = [  # N, Cin, H, W, Cout, kernel, stride, padding, pool k, s, p, d, ceil_mode
    (1, 3, 224, 224, 64, 7, 2, 3, 3, 2, 1, 1, False),  # ResNet's stem
    (2, 3, 37, 41, 13, 7, 2, 3, 3, 2, 1, 1, False),
    (1, 5, 29, 31, 17, 3, 1, 1, 3, 2, 1, 1, True),
    (3, 4, 23, 19, 9, 3, 2, 0, 2, 2, 0, 1, False),
    (1, 2, 17, 18, 8, 5, 1, 2, 3, 1, 1, 1, False),
    (1, 3, 45, 47, 24, 7, 2, 3, 2, 1, 0, 1, True),
    (2, 1, 11, 13, 1, 3, 1, 1, 3, 2, 1, 2, True),
    (1, 3, 30, 30, 7, 3, 2, 1, (3, 2), (1, 2), (1, 0), 1, False),
    (1, 6, 19, 23, 11, 1, 2, 0, 3, 3, 1, 1, False),
]


@pytest.mark.parametrize("case", FUSED_CASES, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("act", [None, "relu", "hardswish"])
def test_conv_maxpool_fused(isa, rng, case, act):
    n, cin, h, w, cout, k, s, p, pk, ps, pp, pd, ceil = case
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    wt = rng.standard_normal((cout, cin, k, k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    packed = _conv.pack_conv2d(wt, b, s, p)
    alg = packed.maxpool_algorithm_for(x.shape, pk, ps, pp, pd, ceil)
    fused = isa == "avx512" and (ps if isinstance(ps, int) else ps[1]) in (1, 2)
    assert alg == ("igemm-maxpool" if fused else packed.algorithm_for(x.shape) + "+max_pool2d")
    y = packed.forward_maxpool(x, act, pk, ps, pp, pd, ceil)
    # bit-identical to the two steps
    two = _conv.max_pool2d(packed.forward(x, act), pk, ps, pp, pd, ceil)
    assert y.shape == two.shape and y.dtype == np.float32
    np.testing.assert_array_equal(y, two)
    # and torch's
    acts = {None: lambda t: t, "relu": F.relu, "hardswish": F.hardswish}
    conv = F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(wt).double(),
                    torch.from_numpy(b).double(), s, p)
    ref = F.max_pool2d(acts[act](conv), pk, ps, pp, pd, ceil).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-4)


def test_conv_maxpool_fused_nan_views_unbatched(isa, rng):
    x = rng.standard_normal((2, 3, 40, 36)).astype(np.float32)
    x[0, 1, 17, 9] = np.nan
    wt = rng.standard_normal((16, 3, 7, 7)).astype(np.float32)
    packed = _conv.pack_conv2d(wt, None, 2, 3)
    y = packed.forward_maxpool(x, "relu", 3, 2, 1)
    two = _conv.max_pool2d(packed.forward(x, "relu"), 3, 2, 1)
    np.testing.assert_array_equal(y, two)  # NaNs in the same places
    assert np.isnan(y[0]).any() and not np.isnan(y[1]).any()
    xv = rng.standard_normal((3, 50, 44)).astype(np.float32)[:, ::2, 1::2]  # strided, 3-D
    y = packed.forward_maxpool(xv, None, 3, 2, 1)
    two = _conv.max_pool2d(packed.forward(xv), 3, 2, 1)
    assert y.shape == two.shape == (16, 7, 6)
    np.testing.assert_array_equal(y, two)
    # float16 weights and forced igemm run the two steps; same bits as those
    h = _conv.pack_conv2d(wt, None, 2, 3, storage="float16")
    assert h.maxpool_algorithm_for(x.shape, 3, 2, 1).endswith("+max_pool2d")
    np.testing.assert_array_equal(h.forward_maxpool(x, "relu", 3, 2, 1),
                                  _conv.max_pool2d(h.forward(x, "relu"), 3, 2, 1))
    with pytest.raises(ValueError, match="max_pool2d"):
        packed.forward_maxpool(x, "relu", 3, 2, 2)  # padding more than half the window


@pytest.mark.parametrize("shape", [(1, 1, 1, 2), (2, 3, 1, 20), (1, 2, 3, 33)])
def test_max_pool_window_of_padding_rows_only(isa, shape):
    """Dilation can put every row of a window in the padding (H=1, padding 1, dilation 2:
    rows -1 and 1): torch answers -inf there; the kernels once read a row past the plane."""
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for pool in [dict(kernel_size=2, stride=2, padding=1, dilation=2),
                 dict(kernel_size=2, stride=1, padding=1, dilation=2)]:
        want = torch.nn.functional.max_pool2d(torch.from_numpy(x), **pool).numpy()
        got = _conv.max_pool2d(x, **pool)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(_conv.max_pool2d(x.astype(np.float64), **pool), want)


def test_empty_batch_pools_and_conv_like_torch():
    torch = pytest.importorskip("torch")
    x = np.zeros((0, 3, 6, 5), np.float32)
    t = torch.from_numpy(x)
    assert _conv.max_pool2d(x, 2).shape == tuple(torch.nn.functional.max_pool2d(t, 2).shape)
    assert _conv.avg_pool2d(x, 3, 2).shape == tuple(torch.nn.functional.avg_pool2d(t, 3, 2).shape)
    assert _conv.adaptive_avg_pool2d(x, 2).shape == (0, 3, 2, 2)
    packed = _conv.pack_conv2d(np.ones((4, 3, 3, 3), np.float32), padding=1)
    assert packed.forward(x).shape == (0, 4, 6, 5)
    assert packed.forward_mean(x).shape == (0, 4)
    assert packed.forward_maxpool(x, "relu", 2).shape == (0, 4, 3, 2)
    with pytest.raises(ValueError, match="non-empty"):
        _conv.max_pool2d(np.zeros((1, 0, 4, 4), np.float32), 2)
