"""Convolution kernels (modulekit._ext._conv) against torch.nn.functional.conv2d."""

import numpy as np
import pytest

from modulekit._ext import _conv

torch = pytest.importorskip("torch")
F = torch.nn.functional

ACTS = {
    None: lambda t: t,
    "relu": F.relu,
    "relu6": F.relu6,
    "silu": F.silu,
    "hardswish": F.hardswish,
}


def reference(x, w, b, stride, padding, dilation, groups, act=None, residual=None):
    xt = torch.from_numpy(np.ascontiguousarray(x)).double()
    wt = torch.from_numpy(np.asarray(w, np.float64))
    bt = None if b is None else torch.from_numpy(np.asarray(b, np.float64))
    if isinstance(padding, tuple) and len(padding) == 4:  # (top, left, bottom, right)
        t, l_, bo, r = padding
        xt = F.pad(xt, (l_, r, t, bo))
        padding = 0
    y = F.conv2d(xt, wt, bt, stride, padding, dilation, groups)
    if residual is not None:
        y = y + torch.from_numpy(residual).double()
    return ACTS[act](y).numpy()


def make(rng, n, cin, cout, k, h, w, groups, bias=True):
    kh, kw = (k, k) if isinstance(k, int) else k
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    wt = rng.standard_normal((cout, cin // groups, kh, kw)) / np.sqrt(cin // groups * kh * kw)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    return x, wt.astype(np.float32), b


# (batch, cin, cout, kernel, H, W, stride, padding, dilation, groups)
GEOMETRIES = [
    (1, 3, 5, 3, 7, 9, 1, 1, 1, 1),
    (2, 8, 16, 1, 9, 7, 1, 0, 1, 1),  # 1x1 stride 1: the direct GEMM path
    (1, 8, 12, 1, 9, 7, 2, 0, 1, 1),  # 1x1 stride 2 (ResNet downsample)
    (1, 6, 10, 1, 5, 5, 1, 1, 1, 2),  # 1x1 padded, grouped
    (7, 4, 9, 3, 11, 13, 2, 1, 1, 1),
    (1, 5, 7, 5, 17, 15, 3, 2, 1, 1),
    (1, 3, 8, 7, 23, 21, 2, 3, 1, 1),  # ResNet stem geometry, small
    (1, 4, 6, 3, 13, 11, 1, 2, 2, 1),  # dilation 2
    (1, 4, 6, (3, 5), 12, 14, (1, 2), (1, 2), (2, 1), 2),
    (2, 8, 8, 3, 9, 10, 1, 1, 1, 8),  # depthwise s1
    (1, 12, 12, 3, 15, 15, 2, 1, 1, 12),  # depthwise s2
    (1, 6, 6, 5, 9, 12, 1, 2, 1, 6),  # depthwise 5x5
    (1, 6, 6, 3, 11, 11, 3, 1, 2, 6),  # depthwise s3 d2
    (1, 4, 8, 3, 7, 7, 1, 1, 1, 4),  # groups = C_in, multiplier 2 (grouped GEMM)
    (1, 20, 36, 3, 6, 5, 1, 0, 1, 1),  # unpadded, many output channels, tiny map
    (1, 17, 19, 3, 20, 23, 1, 1, 1, 1),  # odd channel counts: partial panels
    (1, 2, 3, 3, 3, 3, 1, 0, 1, 1),  # output 1x1
    (1, 2, 3, 1, 1, 1, 1, 0, 1, 1),
    (1, 3, 5, 3, 10, 11, 2, 0, 1, 1),  # stride 2 unpadded: both column phases, pl = 0
    (1, 5, 5, 3, 8, 9, 2, 0, 1, 5),  # the same, depthwise
    (1, 4, 4, 5, 12, 11, 2, 2, 1, 4),  # stride 2 with padding 2: the general phase copy
    (1, 3, 4, 3, 9, 1, 2, 1, 1, 1),  # a one-column input
    (2, 6, 8, 1, 5, 7, 1, 0, 1, 2),  # 1x1 direct path, grouped
]


@pytest.mark.parametrize("geom", GEOMETRIES, ids=lambda g: "-".join(map(str, g)))
def test_conv2d_geometries(isa, rng, geom):
    n, cin, cout, k, h, w, s, p, d, g = geom
    x, wt, b = make(rng, n, cin, cout, k, h, w, g)
    packed = _conv.pack_conv2d(wt, b, stride=s, padding=p, dilation=d, groups=g)
    assert packed.depthwise == (g > 1 and g == cin == cout)
    y = packed.forward(x)
    ref = reference(x, wt, b, s, p, d, g)
    assert y.shape == ref.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize(
    "geom",
    [
        (2, 6, 20, 3, 10, 9, 1, 1, 1, 1),
        (1, 10, 10, 3, 9, 9, 2, 1, 1, 10),
        (1, 16, 24, 1, 7, 7, 1, 0, 1, 1),
    ],
)
def test_conv2d_epilogues(isa, rng, act, geom):
    n, cin, cout, k, h, w, s, p, d, g = geom
    x, wt, b = make(rng, n, cin, cout, k, h, w, g)
    x *= 3  # reach both sides of the ReLU6 / Hardswish clamps
    packed = _conv.pack_conv2d(wt, b, stride=s, padding=p, dilation=d, groups=g)
    res_shape = reference(x, wt, b, s, p, d, g).shape
    residual = rng.standard_normal(res_shape).astype(np.float32)
    for r in (None, residual):
        y = packed.forward(x, activation=act, residual=r)
        np.testing.assert_allclose(y, reference(x, wt, b, s, p, d, g, act, r), rtol=1e-4, atol=1e-4)


def test_conv2d_large_multithreaded(isa, rng):
    x, wt, b = make(rng, 1, 32, 40, 3, 30, 31, 1)
    y = _conv.pack_conv2d(wt, b, padding=1).forward(x, "relu")
    np.testing.assert_allclose(y, reference(x, wt, b, 1, 1, 1, 1, "relu"), rtol=1e-4, atol=1e-4)


# (batch, cin, cout, kernel, H, W, stride, padding, groups): tile-major and panel-major
# (deep weights on a small map) work items, grouped items, the direct 1x1 path
BATCH_GEOMETRIES = [
    (3, 64, 16, 3, 24, 24, 1, 1, 1),
    (5, 256, 64, 3, 6, 6, 1, 1, 1),
    (3, 12, 18, 3, 9, 8, 2, 1, 3),
    (4, 16, 24, 1, 9, 7, 1, 0, 1),
]


@pytest.mark.parametrize("geom", BATCH_GEOMETRIES, ids=lambda g: "-".join(map(str, g)))
def test_igemm_batch_images(isa, rng, geom):
    """A batch's images are computed bit for bit as each image alone (with residual and
    activation)."""
    n, cin, cout, k, h, w, s, p, g = geom
    x, wt, b = make(rng, n, cin, cout, k, h, w, g)
    packed = _conv.pack_conv2d(wt, b, stride=s, padding=p, groups=g)
    packed.algorithm = "igemm"
    res = rng.standard_normal(packed.output_shape(x.shape)).astype(np.float32)
    y = packed.forward(x, "relu", res)
    for i in range(n):
        np.testing.assert_array_equal(y[i], packed.forward(x[i:i + 1], "relu", res[i:i + 1])[0])
    np.testing.assert_allclose(y, reference(x, wt, b, s, p, 1, g, "relu", res), rtol=1e-4,
                               atol=1e-4)


# (batch, cin, cout, H, W, stride): 3x3 padded 1, each with output rows whose vectors tile
# fewer lanes than the grid (mk_conv_igemm_grid_tiling)
ROW_VECTOR_GEOMETRIES = [
    (2, 8, 16, 16, 16, 1),  # 16 vectors of 16 an image (a DCGAN phase's map)
    (1, 5, 9, 47, 47, 1),  # each row's last vector partial (15 of 16 lanes)
    (1, 6, 8, 32, 32, 2),  # stride 2: 16x16 outputs over 17-column phase rows
]


@pytest.mark.parametrize("geom", ROW_VECTOR_GEOMETRIES, ids=lambda g: "-".join(map(str, g)))
def test_row_vector_tiles(isa, rng, geom):
    """Tiles of output-row vectors (the AVX-512 and AVX2 igemm, where they compute fewer lanes
    than the grid's consecutive lanes): against torch, and bit for bit the grid's sums (the same
    layer over the input widened with zero columns, whose grid tiles win)."""
    n, cin, cout, h, w, s = geom
    x, wt, b = make(rng, n, cin, cout, 3, h, w, 1)
    packed = _conv.pack_conv2d(wt, b, stride=s, padding=1)
    packed.algorithm = "igemm"
    assert packed._igemm_tiling_for(x.shape)[2] == {"generic": 0, "avx2": 8, "avx512": 16}[isa]
    res = rng.standard_normal(packed.output_shape(x.shape)).astype(np.float32)
    y = packed.forward(x, "relu", res)
    np.testing.assert_allclose(y, reference(x, wt, b, s, 1, 1, 1, "relu", res), rtol=1e-4,
                               atol=1e-4)
    wide = np.zeros(x.shape[:3] + (w + 3 * s,), np.float32)
    wide[..., :w] = x
    assert packed._igemm_tiling_for(wide.shape)[2] == 0
    ow = y.shape[3]
    res_wide = np.zeros(packed.output_shape(wide.shape), np.float32)
    res_wide[..., :ow] = res
    np.testing.assert_array_equal(packed.forward(wide, "relu", res_wide)[..., :ow], y)
    if cout == 16:  # the shifted blocks (a transposed convolution's phases) tile the same way
        shifts = [(0, 0), (1, 1)]
        pads = (1, 1, 2, 2)
        full = packed.with_padding(pads).forward(x)
        z = packed.forward_shifted(x, pads, (h, w), shifts)
        np.testing.assert_array_equal(z[:, :8], full[:, :8, :h, :w])
        np.testing.assert_array_equal(z[:, 8:16], full[:, 8:16, 1:h + 1, 1:w + 1])


@pytest.mark.parametrize("storage", ["float32", "bfloat16"])
def test_forward_shifted_blocks(isa, rng, storage):
    """Each block of output channels is the padded convolution's window at its shift, bit for
    bit: a transposed convolution's stride phases over one padded input."""
    x, wt, b = make(rng, 2, 6, 32, 2, 9, 7, 1)
    packed = _conv.pack_conv2d(wt, b, storage=storage)
    pads = (1, 1, 2, 1)
    full = packed.with_padding(pads).forward(x)  # (2, 32, 11, 8)
    shifts = [(1, 1), (1, 0), (0, 1), (2, 0)]
    y = packed.forward_shifted(x, pads, (8, 7), shifts)
    assert y.shape == (2, 32, 8, 7) and y.dtype == np.float32
    for i, (dy, dx) in enumerate(shifts):
        np.testing.assert_array_equal(y[:, 8 * i:8 * i + 8], full[:, 8 * i:8 * i + 8,
                                                                  dy:dy + 8, dx:dx + 7])
    two = packed.forward_shifted(x, pads, (9, 7), [(0, 1), (1, 0)])  # blocks of 16
    np.testing.assert_array_equal(two[:, 16:], full[:, 16:, 1:10, :7])
    np.testing.assert_array_equal(packed.forward_shifted(x[0], pads, (8, 7), shifts), y[0])
    # in place: block i's first rows x cols outputs at out[:, :, oy + sy oh, ox + sx ow], the
    # same bits; positions no block writes keep their values
    for steps, places, size in [
        ((2, 2), [(0, 0, 8, 7), (0, 1, 8, 7), (1, 0, 8, 6), (1, 1, 7, 7)], (16, 14)),
        ((2, 3), [(0, 0, 8, 7), (0, 1, 8, 5), (1, 0, 0, 0), (1, 2, 3, 7)], (16, 21)),
    ]:
        out = np.full((2, 8) + size, np.nan, np.float32)
        got = packed.forward_shifted(x, pads, (8, 7), shifts, out=out, places=places,
                                     steps=steps)
        assert got is out
        unset = np.ones(size, bool)
        for i, (oy, ox, rows, cols) in enumerate(places):
            at = (slice(oy, oy + steps[0] * rows, steps[0]), slice(ox, ox + steps[1] * cols,
                                                                     steps[1]))
            np.testing.assert_array_equal(out[(Ellipsis,) + at],
                                          y[:, 8 * i:8 * i + 8, :rows, :cols])
            unset[at] = False
        assert np.isnan(out[:, :, unset]).all()
        one = np.full((8,) + size, np.nan, np.float32)
        packed.forward_shifted(x[0], pads, (8, 7), shifts, out=one, places=places, steps=steps)
        np.testing.assert_array_equal(one, out[0])
    out = np.zeros((2, 8, 16, 14), np.float32)
    places = [(0, 0, 8, 7)] * 4
    for bad, match in [
        (dict(out=out.astype(np.float64), places=places, steps=(2, 2)), "float32"),
        (dict(out=np.zeros((2, 4, 16, 14), np.float32), places=places, steps=(2, 2)), "shape"),
        (dict(out=out, places=places[:3], steps=(2, 2)), "4 \\(oy, ox, rows, cols\\)"),
        (dict(out=out, places=places, steps=(0, 2)), "positive"),
        (dict(out=out, places=[(2, 0, 8, 7)] * 4, steps=(2, 2)), "leaves out"),
        (dict(out=out, places=[(0, 0, 9, 7)] * 4, steps=(1, 1)), "leaves out"),
        (dict(out=out, places=places), "go together"),
    ]:
        with pytest.raises(ValueError, match=match):
            packed.forward_shifted(x, pads, (8, 7), shifts, **bad)
    with pytest.raises(TypeError, match="places"):
        packed.forward_shifted(x, pads, (8, 7), shifts, out=out, places=5, steps=(2, 2))
    shared = np.zeros(x.size + out.size, np.float32)  # out over the input's last values
    xs = shared[:x.size].reshape(x.shape)
    xs[...] = x
    over = shared[x.size - 8:x.size - 8 + out.size].reshape(out.shape)
    with pytest.raises(ValueError, match="overlap"):
        packed.forward_shifted(xs, pads, (8, 7), shifts, out=over, places=places, steps=(2, 2))
    # layouts it does not run: None (the caller computes otherwise)
    for blocks in (3, 8):  # not whole panels of 8 channels
        assert packed.forward_shifted(x, pads, (8, 7), [(0, 0)] * blocks) is None
    grouped = _conv.pack_conv2d(rng.standard_normal((32, 3, 2, 2)).astype(np.float32), None,
                                groups=2)
    assert grouped.forward_shifted(x, pads, (8, 7), [(0, 0)]) is None
    with pytest.raises(ValueError, match="leaves the padded output"):
        packed.forward_shifted(x, pads, (8, 7), [(4, 0)] * 4)
    with pytest.raises(ValueError, match="leaves the padded output"):
        packed.forward_shifted(x, pads, (0, 7), shifts)
    with pytest.raises(ValueError, match="non-negative"):
        packed.forward_shifted(x, pads, (8, 7), [(-1, 0)] * 4)
    with pytest.raises(TypeError, match="pairs"):
        packed.forward_shifted(x, pads, (8, 7), 5)
    strided = _conv.pack_conv2d(wt, b, stride=2)
    with pytest.raises(ValueError, match="stride 1"):
        strided.forward_shifted(x, pads, (4, 3), shifts)
    with pytest.raises(ValueError, match="channels"):
        packed.forward_shifted(x[:, :4], pads, (8, 7), shifts)


def test_noncontiguous_inputs(isa, rng):
    x, wt, b = make(rng, 2, 6, 8, 3, 12, 10, 1)
    views = [
        np.asarray(x.transpose(0, 1, 3, 2)),  # swapped spatial axes
        x[:, :, ::2, :],  # row step
        x[:, :, :, ::-1],  # negative column stride
        np.asfortranarray(x),
    ]
    packed = _conv.pack_conv2d(wt, b, padding=1)
    for v in views:
        np.testing.assert_allclose(
            packed.forward(v), reference(v, wt, b, 1, 1, 1, 1), rtol=1e-4, atol=1e-4
        )
    # channel slice of a bigger tensor: the 1x1 direct path with a channel stride != H*W
    big = rng.standard_normal((2, 12, 7, 9)).astype(np.float32)
    view = big[:, 2:8]
    w1 = rng.standard_normal((5, 6, 1, 1)).astype(np.float32)
    np.testing.assert_allclose(
        _conv.pack_conv2d(w1).forward(view),
        reference(view, w1, None, 1, 0, 1, 1),
        rtol=1e-4,
        atol=1e-4,
    )
    # depthwise on a strided view
    wd = rng.standard_normal((6, 1, 3, 3)).astype(np.float32)
    v = x[:, :, 1::2, ::3]
    np.testing.assert_allclose(
        _conv.pack_conv2d(wd, groups=6, padding=1).forward(v),
        reference(v, wd, None, 1, 1, 1, 6),
        rtol=1e-4,
        atol=1e-4,
    )


def test_padding_modes(rng):
    x, wt, b = make(rng, 1, 3, 4, (4, 3), 9, 8, 1)
    y = _conv.pack_conv2d(wt, b, padding="same", dilation=2).forward(x)
    ref = F.conv2d(
        torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(b), padding="same", dilation=2
    ).numpy()
    assert y.shape == ref.shape == (1, 4, 9, 8)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    y = _conv.pack_conv2d(wt, b, padding="valid").forward(x)
    np.testing.assert_allclose(y, reference(x, wt, b, 1, 0, 1, 1), rtol=1e-4, atol=1e-4)
    y = _conv.pack_conv2d(wt, b, padding=(1, 0, 2, 3)).forward(x)
    np.testing.assert_allclose(y, reference(x, wt, b, 1, (1, 0, 2, 3), 1, 1), rtol=1e-4, atol=1e-4)


def test_unbatched_and_array_likes(rng):
    x, wt, b = make(rng, 1, 3, 4, 3, 6, 6, 1)
    packed = _conv.pack_conv2d(wt, b, padding=1)
    y3 = packed.forward(x[0])
    assert y3.shape == (4, 6, 6)
    np.testing.assert_allclose(y3, packed.forward(x)[0])
    np.testing.assert_allclose(packed(torch.from_numpy(x)), packed.forward(x))
    np.testing.assert_allclose(packed.forward(x.astype(np.float64)), packed.forward(x))


@pytest.mark.parametrize("storage", ["float16", "bfloat16"])
@pytest.mark.parametrize("depthwise", [False, True])
def test_16bit_weight_storage(isa, rng, storage, depthwise):
    import ml_dtypes

    g = 8 if depthwise else 1
    x, wt, b = make(rng, 2, 8, 8, 3, 9, 11, g)
    packed = _conv.pack_conv2d(wt, b, padding=1, groups=g, storage=storage)
    assert packed.storage == storage
    npdt = np.float16 if storage == "float16" else ml_dtypes.bfloat16
    wr, br = wt.astype(npdt).astype(np.float32), b.astype(npdt).astype(np.float32)
    np.testing.assert_allclose(
        packed.forward(x, "silu"), reference(x, wr, br, 1, 1, 1, g, "silu"), rtol=1e-4, atol=1e-4
    )
    w2, b2 = packed.unpack()
    assert w2.dtype == np.dtype(npdt)
    np.testing.assert_array_equal(w2.astype(np.float32), wr)
    np.testing.assert_array_equal(b2.astype(np.float32), br)
    f32 = _conv.pack_conv2d(wt, b, padding=1, groups=g)
    assert packed.nbytes < f32.nbytes


def test_float64(rng):
    x, wt, b = make(rng, 2, 4, 6, 3, 8, 7, 2)
    x, wt, b = x.astype(np.float64), wt.astype(np.float64), b.astype(np.float64)
    packed = _conv.pack_conv2d(wt, b, stride=2, padding=1, groups=2)
    assert packed.storage == "float64"
    res = rng.standard_normal((2, 6, 4, 4))
    y = packed.forward(x, "hardswish", residual=res)
    assert y.dtype == np.float64
    np.testing.assert_allclose(
        y, reference(x, wt, b, 2, 1, 1, 2, "hardswish", res), rtol=1e-12, atol=1e-12
    )


@pytest.mark.parametrize("groups,cout", [(1, 13), (3, 12), (6, 6)])
def test_unpack_roundtrip(rng, groups, cout):
    wt = rng.standard_normal((cout, 6 // groups, 3, 2)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    packed = _conv.pack_conv2d(wt, b, groups=groups)
    w2, b2 = packed.unpack()
    np.testing.assert_array_equal(w2, wt)
    np.testing.assert_array_equal(b2, b)
    assert _conv.pack_conv2d(wt, None, groups=groups).unpack()[1] is None
    assert packed.nbytes >= wt.nbytes + b.nbytes
    assert f"PackedConv2d(6, {cout}" in repr(packed)


def test_fold_batchnorm(rng):
    x, wt, b = make(rng, 2, 5, 7, 3, 8, 8, 1)
    mean, var = rng.standard_normal(7), rng.uniform(0.5, 2.0, 7)
    gamma, beta = rng.standard_normal(7), rng.standard_normal(7)
    w2, b2 = _conv.fold_batchnorm(wt, b, mean, var, gamma, beta, eps=1e-3)
    y = _conv.pack_conv2d(w2, b2, padding=1).forward(x)
    conv = F.conv2d(
        torch.from_numpy(x).double(),
        torch.from_numpy(wt).double(),
        torch.from_numpy(b).double(),
        padding=1,
    )
    ref = F.batch_norm(
        conv,
        torch.from_numpy(mean),
        torch.from_numpy(var),
        torch.from_numpy(gamma),
        torch.from_numpy(beta),
        False,
        0.1,
        1e-3,
    )
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-4, atol=1e-4)


def test_bad_inputs(rng):
    wt = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    packed = _conv.pack_conv2d(wt, padding=0)
    with pytest.raises(ValueError, match="expected input with 3 channels, got 5"):
        packed.forward(np.zeros((1, 5, 8, 8), np.float32))
    with pytest.raises(ValueError, match="smaller than the dilated kernel"):
        packed.forward(np.zeros((1, 3, 2, 8), np.float32))
    with pytest.raises(ValueError, match="4-D"):
        packed.forward(np.zeros((3, 8), np.float32))
    assert packed.forward(np.zeros((0, 3, 8, 8), np.float32)).shape == (0, 4, 6, 6)  # as torch
    with pytest.raises(ValueError, match="non-empty"):
        packed.forward(np.zeros((1, 3, 0, 8), np.float32))
    with pytest.raises(ValueError, match="residual shape"):
        packed.forward(np.zeros((1, 3, 8, 8), np.float32), residual=np.zeros((1, 4, 5, 5)))
    with pytest.raises(ValueError, match="unknown activation"):
        packed.forward(np.zeros((1, 3, 8, 8), np.float32), activation="mish")
    with pytest.raises(TypeError, match="numeric"):
        packed.forward(np.array([["a"]]))
    with pytest.raises(ValueError, match="4-D"):
        _conv.pack_conv2d(wt[0])
    with pytest.raises(ValueError, match="groups=2"):
        _conv.pack_conv2d(np.zeros((5, 1, 3, 3), np.float32), groups=2)
    with pytest.raises(ValueError, match="bias must have shape"):
        _conv.pack_conv2d(wt, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="'same' is not supported for strided"):
        _conv.pack_conv2d(wt, padding="same", stride=2)
    with pytest.raises(ValueError, match="padding must be"):
        _conv.pack_conv2d(wt, padding="reflect")
    with pytest.raises(ValueError, match="positive"):
        _conv.pack_conv2d(wt, stride=0)
    with pytest.raises(ValueError, match="storage"):
        _conv.pack_conv2d(wt, storage="int8")
    with pytest.raises(TypeError, match="floating point"):
        _conv.pack_conv2d(wt.astype(np.int32))
    with pytest.raises(TypeError, match="pack_conv2d"):
        _conv.PackedConv2d()


# (batch, cin, cout, kernel, H, W, stride, padding, dilation): geometries for the im2col path
# (AVX-512; forced where 'auto' takes the igemm)
IM2COL_GEOMETRIES = [
    (1, 5, 37, 3, 13, 11, 2, 1, 1),  # 7x6 output, partial panel
    (1, 7, 32, 1, 14, 15, 2, 0, 1),  # ResNet downsample 1x1 stride 2, odd map
    (1, 3, 40, 3, 7, 7, 1, 1, 1),  # stride 1 (Winograd does not take 3 channels)
    (3, 3, 40, 3, 7, 7, 1, 1, 1),  # batch 3
    (1, 9, 33, 3, 9, 31, 2, 0, 1),  # 4x15 output
    (1, 4, 48, 5, 17, 19, 3, 2, 1),  # stride 3: the scalar column walk
    (1, 6, 32, 3, 11, 5, 1, 2, 2),  # dilation 2
    (1, 2, 32, 3, 70, 66, 2, 1, 1),  # 35x33 output: rows of more than 16 columns
    (1, 64, 64, 3, 2, 3, 1, 1, 1),  # 2x3 output, window wider than the input
    (1, 16, 64, 1, 1, 1, 1, 1, 1),  # 3x3 output of a padded 1x1 input
    (1, 11, 40, 1, 16, 8, 2, 0, 1),  # strided 1x1 on an 8x4 map (a multiple of 16 pixels)
    (1, 8, 24, 3, 28, 28, 2, 1, 1),  # 14x14 output: the igemm's last tile 8x32 (209 lanes)
    (1, 8, 24, 3, 14, 13, 2, 1, 1),  # 7x7 output: 48 + 7 lanes, the last tile 8x16
    (2, 11, 40, 1, 16, 8, 2, 0, 1),  # the same at batch 2
]

# (input shape, cout, kernel, stride, padding, what 'auto' runs on AVX-512) (conv-config.c,
# im2col_pays): im2col for strided 1x1 kernels at batch 1 and where the igemm's grid tiles
# would cost more than twice the pixels; the igemm on ResNet-18's stride-2 3x3 maps
IM2COL_CHOICES = [
    ((1, 64, 56, 56), 128, 1, 2, 0, "im2col"),  # ResNet-18 downsamples
    ((1, 256, 14, 14), 512, 1, 2, 0, "im2col"),
    ((2, 256, 14, 14), 512, 1, 2, 0, "igemm"),  # batch 2
    ((1, 128, 28, 28), 256, 3, 2, 1, "igemm"),  # 14x14 output: grid tiles cost 1.16x the pixels
    ((1, 256, 14, 14), 512, 3, 2, 1, "igemm"),  # 7x7: 1.42x
    ((1, 64, 2, 3), 64, 3, 1, 1, "im2col"),  # 2x3: 16 lanes at 1.35 for 6 pixels
    ((1, 16, 1, 1), 64, 1, 1, 1, "im2col"),  # padded 1x1 input: a 3x3 map
    ((1, 16, 6, 6), 16, 1, 2, 0, "igemm"),  # fewer than 32 output channels
]


@pytest.mark.parametrize("shape,cout,k,s,p,want", IM2COL_CHOICES,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_im2col_choice(isa, rng, shape, cout, k, s, p, want):
    w = rng.standard_normal((cout, shape[1], k, k)).astype(np.float32)
    packed = _conv.pack_conv2d(w, stride=s, padding=p)
    got = packed.algorithm_for(shape)
    if isa == "avx512":
        assert got == want
    else:
        assert got != "im2col"  # no lane-exact paths (the 2x3 map: Winograd on AVX2)


def test_conv_config_names_the_active_path(isa):
    # one table (conv-config.c) holds each level's kernels: its wide igemm tile is named for it
    assert _conv.kernel_name() == {"generic": "f32-igemm-8x16-scalar",
                                   "avx2": "f32-igemm-8x24-avx2",
                                   "avx512": "f32-igemm-8x48-avx512"}[isa]


@pytest.mark.parametrize("geom", IM2COL_GEOMETRIES, ids=lambda g: "-".join(map(str, g)))
def test_im2col_path(isa, rng, geom):
    """im2col + the lane-exact GEMM (forced): against torch, on views, and bit-identical to
    the igemm. Without the lane-exact paths a forced 'im2col' leaves the choice to 'auto'."""
    n, cin, cout, k, h, w, s, p, d = geom
    x, wt, b = make(rng, n, cin, cout, k, h, w, 1)
    packed = _conv.pack_conv2d(wt, b, stride=s, padding=p, dilation=d)
    chosen = packed.algorithm_for(x.shape)
    packed.algorithm = "im2col"
    assert packed.algorithm_for(x.shape) == ("im2col" if isa == "avx512" else chosen)
    if isa != "avx512" and chosen.startswith("winograd"):
        packed.algorithm = "igemm"  # the comparison below is with the igemm's sums
    ref_shape = reference(x, wt, b, s, p, d, 1).shape
    residual = rng.standard_normal(ref_shape).astype(np.float32)
    views = [x, np.asfortranarray(x), x[:, :, :, ::-1].copy()[:, :, :, ::-1]]
    flipped = x[:, :, :, ::-1]  # negative column stride
    for v in views + [flipped]:
        y = packed.forward(v, "relu", residual)
        np.testing.assert_allclose(
            y, reference(v.copy(), wt, b, s, p, d, 1, "relu", residual), rtol=1e-4, atol=1e-4
        )
        auto = packed.algorithm
        packed.algorithm = "igemm"
        assert packed.algorithm_for(x.shape) == "igemm"
        np.testing.assert_array_equal(packed.forward(v, "relu", residual), y)
        packed.algorithm = auto


@pytest.mark.parametrize("n", [1, 2])
def test_stem_panel_chunks(isa, rng, n):
    """A 3-channel 7x7 stride-2 stem with 64 (and a partial 70) output channels: the phase copy
    split into row bands of each channel and the panels in L1-sized chunks."""
    for cout in (64, 70):
        x, wt, b = make(rng, n, 3, cout, 7, 45, 47, 1)
        packed = _conv.pack_conv2d(wt, b, stride=2, padding=3)
        res = rng.standard_normal(reference(x, wt, b, 2, 3, 1, 1).shape).astype(np.float32)
        for v in (x, x[:, :, :, ::-1]):
            np.testing.assert_allclose(
                packed.forward(v, "relu", res),
                reference(v.copy(), wt, b, 2, 3, 1, 1, "relu", res),
                rtol=1e-4,
                atol=1e-4,
            )


# ---- few input channels: the first convolution of a network ---------------------------------
# (batch, cin, cout, kernel, H, W, stride, padding): 1-4 input channels, kernels 3/5/7, strides
# 1 and 2, paddings 0 to 3 (stride 2 takes the one-pass split of each input row into its two
# column phases, for any left padding), odd sizes, a 1x1 output
FEW_CHANNEL_GEOMETRIES = [
    (1, 3, 32, 3, 37, 41, 2, 1),  # MobileNetV2's features.0, small
    (3, 3, 64, 7, 37, 41, 2, 3),  # ResNet's stem, small, batch 3
    (1, 3, 16, 5, 29, 33, 2, 2),
    (1, 1, 8, 3, 40, 35, 2, 0),
    (1, 2, 24, 7, 45, 47, 2, 3),
    (3, 4, 20, 5, 23, 19, 2, 1),
    (1, 3, 32, 3, 37, 41, 1, 1),
    (1, 3, 12, 7, 19, 17, 1, 3),
    (1, 3, 8, 7, 7, 7, 2, 0),  # 1x1 output
    (1, 3, 8, 3, 1, 1, 2, 1),  # 1x1 input and output
    (1, 3, 40, 7, 70, 3, 2, 3),  # rows narrower than the padding
    (1, 3, 9, 3, 5, 131, 2, 2),  # rows of several 16-column steps
]


@pytest.mark.parametrize("act", [None, "relu", "relu6", "residual"])
@pytest.mark.parametrize("geom", FEW_CHANNEL_GEOMETRIES, ids=lambda g: "-".join(map(str, g)))
def test_few_input_channels(isa, rng, geom, act):
    """First-layer convolutions (1-4 input channels) against torch, on contiguous and strided
    inputs, with each epilogue (relu, relu6, none, a residual add)."""
    n, cin, cout, k, h, w, s, p = geom
    x, wt, b = make(rng, n, cin, cout, k, h, w, 1)
    x *= 3  # both sides of the ReLU6 clamp
    packed = _conv.pack_conv2d(wt, b, stride=s, padding=p)
    shape = reference(x, wt, b, s, p, 1, 1).shape
    res = rng.standard_normal(shape).astype(np.float32) if act == "residual" else None
    a = "relu" if act == "residual" else act
    big = rng.standard_normal((n, cin + 2, 2 * h, w + 3)).astype(np.float32)
    big[:, 1:cin + 1, ::2, 2:w + 2] = x
    views = [x, big[:, 1:cin + 1, ::2, 2:w + 2], x[:, :, :, ::-1]]  # channel/row/column strides
    for v in views:
        y = packed.forward(v, a, res)
        np.testing.assert_allclose(
            y, reference(v.copy(), wt, b, s, p, 1, 1, a, res), rtol=1e-4, atol=1e-4
        )


@pytest.mark.parametrize("geom", FEW_CHANNEL_GEOMETRIES, ids=lambda g: "-".join(map(str, g)))
def test_few_input_channels_maxpool(isa, rng, geom):
    """The same convolutions fused with a 3/2 max pool (ResNet's stem): bit-identical to the two
    steps and equal to torch, on contiguous and strided inputs."""
    n, cin, cout, k, h, w, s, p = geom
    x, wt, b = make(rng, n, cin, cout, k, h, w, 1)
    packed = _conv.pack_conv2d(wt, b, stride=s, padding=p)
    for v in (x, x[:, :, :, ::-1]):
        y = packed.forward_maxpool(v, "relu", 3, 2, 1)
        np.testing.assert_array_equal(y, _conv.max_pool2d(packed.forward(v, "relu"), 3, 2, 1))
        conv = torch.from_numpy(reference(v.copy(), wt, b, s, p, 1, 1, "relu"))
        np.testing.assert_allclose(y, F.max_pool2d(conv, 3, 2, 1).numpy(), rtol=1e-4, atol=1e-4)
