"""Winograd F(2x2, 3x3) / F(4x4, 3x3) convolutions (modulekit._ext._conv) against torch.

Every case runs on every instruction-set path this CPU has (the ``isa`` fixture). Winograd
rounds differently from a direct sum, so outputs are compared with a tolerance relative to the
output's scale: F(2x2) is within a few ulp of it, F(4x4) about ten times more.
"""

import numpy as np
import pytest

from modulekit._ext import _conv, _isa, _openmp_helpers

torch = pytest.importorskip("torch")
F = torch.nn.functional

WINO = ["winograd-2x2", "winograd-4x4"]
TOL = {"winograd-2x2": 1e-5, "winograd-4x4": 5e-5, "igemm": 1e-5}


def reference(x, w, b, padding=1, act=None, residual=None, stride=1, dilation=1, groups=1):
    xt = torch.from_numpy(np.ascontiguousarray(x)).double()
    if isinstance(padding, tuple) and len(padding) == 4:  # (top, left, bottom, right)
        t, l_, bo, r = padding
        xt = F.pad(xt, (l_, r, t, bo))
        padding = 0
    y = F.conv2d(
        xt,
        torch.from_numpy(np.asarray(w, np.float64)),
        None if b is None else torch.from_numpy(np.asarray(b, np.float64)),
        stride,
        padding,
        dilation,
        groups,
    )
    if residual is not None:
        y = y + torch.from_numpy(np.asarray(residual, np.float64))
    if act == "relu":
        y = F.relu(y)
    elif act == "relu6":
        y = F.relu6(y)
    elif act == "silu":
        y = F.silu(y)
    elif act == "hardswish":
        y = F.hardswish(y)
    return y.numpy()


def check(y, ref, algorithm):
    assert y.shape == ref.shape and y.dtype == np.float32
    scale = max(float(np.abs(ref).max()), 1e-30)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=TOL[algorithm] * scale)


def make(rng, n, cin, cout, h, w, groups=1, k=3, bias=True):
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    wt = rng.standard_normal((cout, cin // groups, k, k)) / np.sqrt(cin // groups * k * k)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    return x, wt.astype(np.float32), b


def packed(wt, b, algorithm, **kw):
    p = _conv.pack_conv2d(wt, b, **kw)
    p.algorithm = algorithm
    return p


def expected_algorithm(algorithm):
    """The tile that runs when ``algorithm`` is forced on the active path."""
    if algorithm == "winograd-4x4" and _isa.get_isa() == "generic":
        return "winograd-2x2"  # the portable path has F(2x2) only
    return algorithm


@pytest.fixture
def threads():
    yield _openmp_helpers.set_num_threads
    _openmp_helpers.reset_num_threads()


# spatial sizes: 1, 2, 3 (smaller than a tile), 5, 7, primes, remainders of both tile sizes
SIZES = [(1, 1), (2, 2), (3, 3), (5, 7), (7, 5), (4, 9), (11, 13), (13, 2), (17, 19), (6, 23)]


@pytest.mark.parametrize("algorithm", WINO)
@pytest.mark.parametrize("hw", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("pad", [0, 1, 2, (1, 0, 2, 1)], ids=str)
def test_spatial_sizes_and_padding(isa, rng, algorithm, hw, pad):
    h, w = hw
    pt, pl, pb, pr = pad if isinstance(pad, tuple) else (pad,) * 4
    if h + pt + pb < 3 or w + pl + pr < 3:
        pytest.skip("input smaller than the kernel")
    x, wt, b = make(rng, 1, 5, 11, h, w)
    p = packed(wt, b, algorithm, padding=pad)
    assert p.algorithm_for(x.shape) == expected_algorithm(algorithm)
    check(p.forward(x), reference(x, wt, b, pad), algorithm)


# channel counts: 1, odd, a multiple of the panel (8), partial panels, wider than one tile
CHANNELS = [(1, 1), (3, 8), (8, 3), (9, 17), (16, 16), (24, 40), (33, 7)]


@pytest.mark.parametrize("algorithm", WINO)
@pytest.mark.parametrize("cio", CHANNELS, ids=lambda c: f"{c[0]}to{c[1]}")
@pytest.mark.parametrize("batch", [1, 3])
def test_channels_and_batch(isa, rng, algorithm, cio, batch):
    cin, cout = cio
    x, wt, b = make(rng, batch, cin, cout, 10, 9, bias=cin % 2 == 1)
    p = packed(wt, b, algorithm, padding=1)
    check(p.forward(x), reference(x, wt, b), algorithm)


@pytest.mark.parametrize("algorithm", WINO)
@pytest.mark.parametrize("act", [None, "relu", "relu6", "silu", "hardswish"])
@pytest.mark.parametrize("with_residual", [False, True])
def test_epilogues(isa, rng, algorithm, act, with_residual):
    x, wt, b = make(rng, 2, 6, 20, 9, 10)
    x *= 3  # both sides of the clamps
    res = rng.standard_normal((2, 20, 9, 10)).astype(np.float32) if with_residual else None
    p = packed(wt, b, algorithm, padding=1)
    check(p.forward(x, act, res), reference(x, wt, b, 1, act, res), algorithm)


@pytest.mark.parametrize("algorithm", WINO)
@pytest.mark.parametrize("nthreads", [1, 2, 3])
@pytest.mark.parametrize(
    "shape",
    [
        (1, 24, 32, 30, 31),  # batch 1: threads share each block
        (5, 16, 24, 19, 21),  # blocks across tile rows and images, each thread its own
        (2, 40, 8, 40, 37),  # many blocks, long rows
        (1, 128, 64, 28, 28),  # 49 / 196 tiles: a remainder under a wide tile joins a block
    ],
    ids=str,
)
def test_blocks_and_threads(isa, rng, threads, algorithm, nthreads, shape):
    n, cin, cout, h, w = shape
    threads(nthreads)
    x, wt, b = make(rng, n, cin, cout, h, w)
    res = rng.standard_normal((n, cout, h, w)).astype(np.float32)
    p = packed(wt, b, algorithm, padding=1)
    check(p.forward(x, "relu", res), reference(x, wt, b, 1, "relu", res), algorithm)


@pytest.mark.parametrize("algorithm", WINO)
def test_strided_views_and_unbatched(isa, rng, algorithm):
    x, wt, b = make(rng, 2, 6, 9, 14, 12)
    p = packed(wt, b, algorithm, padding=1)
    row_step = x[:, :, ::2, :]  # row stride 2W, unit column stride: Winograd reads it as is
    assert p.algorithm_for(row_step.shape) == expected_algorithm(algorithm)
    check(p.forward(row_step), reference(row_step, wt, b), algorithm)
    big = rng.standard_normal((2, 10, 14, 12)).astype(np.float32)
    chan = big[:, 3:9]  # channel slice: image stride != C*H*W
    check(p.forward(chan), reference(chan, wt, b), algorithm)
    check(p.forward(x[1]), reference(x[1:], wt, b)[0], algorithm)
    # a non-unit column stride runs the implicit GEMM (same result within rounding)
    flipped = x[:, :, :, ::-1]
    check(p.forward(flipped), reference(flipped, wt, b), "igemm")


@pytest.mark.parametrize("algorithm", WINO)
@pytest.mark.parametrize(
    "kw",
    [
        dict(groups=2),
        dict(stride=2),
        dict(dilation=2),
        dict(k=5),
        dict(k=1, padding=0),
        dict(groups=6),  # depthwise
    ],
    ids=lambda d: "-".join(f"{k}{v}" for k, v in d.items()),
)
def test_fallbacks(isa, rng, algorithm, kw):
    kw = dict(kw)
    k = kw.pop("k", 3)
    groups = kw.get("groups", 1)
    pad = kw.pop("padding", 1)
    x, wt, b = make(rng, 2, 6, 6, 11, 9, groups=groups, k=k)
    p = packed(wt, b, algorithm, padding=pad, **kw)
    assert p.algorithm_for(x.shape) in ("igemm", "depthwise")
    ref = reference(
        x, wt, b, pad, stride=kw.get("stride", 1), dilation=kw.get("dilation", 1), groups=groups
    )
    check(p.forward(x), ref, "igemm")
    assert p.winograd_nbytes == 0


def test_float64_falls_back(rng):
    x, wt, b = make(rng, 1, 8, 8, 9, 9)
    p = packed(wt.astype(np.float64), b.astype(np.float64), "winograd-4x4", padding=1)
    assert p.algorithm_for(x.shape) == "float64"
    y = p.forward(x.astype(np.float64), "relu")
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, reference(x, wt, b, 1, "relu"), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("algorithm", WINO)
@pytest.mark.parametrize("storage", ["float16", "bfloat16"])
def test_16bit_storage(isa, rng, algorithm, storage):
    import ml_dtypes

    x, wt, b = make(rng, 2, 8, 12, 9, 11)
    p = packed(wt, b, algorithm, padding=1, storage=storage)
    npdt = np.float16 if storage == "float16" else ml_dtypes.bfloat16
    wr, br = wt.astype(npdt).astype(np.float32), b.astype(npdt).astype(np.float32)
    check(p.forward(x, "relu"), reference(x, wr, br, 1, "relu"), algorithm)


def test_weight_cache_and_algorithm_attribute(rng):
    x, wt, b = make(rng, 1, 16, 24, 12, 12)
    p = _conv.pack_conv2d(wt, b, padding=1)
    assert p.algorithm == "auto" and p.winograd_nbytes == 0
    with pytest.raises(ValueError, match="algorithm must be one of"):
        p.algorithm = "fft"
    ref = reference(x, wt, b)
    p.algorithm = "winograd-2x2"
    check(p.forward(x), ref, "winograd-2x2")
    w32 = 24 * 16 * 9 * 4
    if _isa.get_isa() != "generic":
        n2 = p.winograd_nbytes
        assert n2 >= w32 * 16 // 9  # alpha^2 / 9 of the weight (plus panel padding, bias)
        p.algorithm = "winograd-4x4"
        check(p.forward(x), ref, "winograd-4x4")
        assert p.winograd_nbytes - n2 >= w32 * 4
    p.algorithm = "igemm"  # drops the transformed weights
    assert p.winograd_nbytes == 0
    assert p.algorithm_for(x.shape) == "igemm"
    check(p.forward(x), ref, "igemm")


def test_cost_model_choices(isa):
    """The ResNet-18 layers Winograd is built for take it; tiny ones keep the GEMM."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    p = _conv.pack_conv2d(w, padding=1)
    assert p.algorithm_for((1, 64, 56, 56)).startswith("winograd")
    # a 1x1 map is no Winograd case; AVX-512 runs it as im2col (1 pixel, no lane waste)
    assert p.algorithm_for((1, 64, 1, 1)) == ("im2col" if isa == "avx512" else "igemm")
    small = _conv.pack_conv2d(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), padding=1)
    # (3 input channels: on AVX-512 the row-band igemm of first layers)
    assert small.algorithm_for((1, 3, 8, 8)) == ("igemm-rows" if isa == "avx512" else "igemm")


@pytest.mark.parametrize("hw", [(1, 1), (2, 3), (3, 4), (4, 4), (5, 2)], ids=str)
@pytest.mark.parametrize("cout", [5, 8, 19])
def test_igemm_narrow_tiles(isa, rng, hw, cout):
    """Maps of at most 16 grid lanes: the 8 x 16 AVX-512 igemm tile (every path checked)."""
    x, wt, b = make(rng, 2, 12, cout, *hw)
    p = packed(wt, b, "igemm", padding=1)
    res = rng.standard_normal((2, cout) + hw).astype(np.float32)
    check(p.forward(x, "relu", res), reference(x, wt, b, 1, "relu", res), "igemm")


def test_concurrent_calls_use_their_own_scratch(rng):
    """Python threads calling convolutions at once: each thread's scratch is its own."""
    from concurrent.futures import ThreadPoolExecutor

    x, wt, b = make(rng, 2, 16, 24, 21, 19)
    convs = [packed(wt, b, a, padding=1) for a in ("winograd-2x2", "winograd-4x4", "igemm")]
    strided = _conv.pack_conv2d(wt, b, stride=2, padding=1)  # phase image in the scratch too
    inputs = [x * (i + 1) for i in range(6)]
    refs = [reference(v, wt, b) for v in inputs]
    sref = [reference(v, wt, b, stride=2) for v in inputs]

    def work(i):
        for _ in range(5):
            for p in convs:
                check(p.forward(inputs[i]), refs[i], "winograd-4x4")
            check(strided.forward(inputs[i]), sref[i], "igemm")
        return True

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(6)))


# ---- the GEMM stage in the engine orientation (few tiles: batch 1 deep layers) ------------


@pytest.fixture
def orientation():
    """Force the Winograd GEMM orientation: 0 igemm, 1 the GEMM engine's (where the ISA has
    it), restoring the plan's own choice after."""
    yield _conv._set_winograd_engine
    _conv._set_winograd_engine(-1)


def engine_expected():
    return _isa.get_isa() != "generic"  # the portable engine has no row kernels


@pytest.mark.parametrize(
    "shape,algorithm",
    [
        ((1, 512, 512, 7, 7), "winograd-2x2"),  # ResNet-18 layer4 at batch 1
        ((1, 256, 256, 14, 14), "winograd-4x4"),  # layer3
        ((1, 128, 128, 7, 7), "winograd-2x2"),
    ],
    ids=str,
)
def test_engine_deep_layers(isa, rng, threads, shape, algorithm):
    n, cin, cout, h, w = shape
    threads(2)
    x, wt, b = make(rng, n, cin, cout, h, w)
    res = rng.standard_normal((n, cout, h, w)).astype(np.float32)
    p = packed(wt, b, algorithm, padding=1)
    assert p.algorithm_for(x.shape) == expected_algorithm(algorithm)
    # the plan takes the engine orientation for these few tiles wherever the ISA has it
    assert p._winograd_engine_for(x.shape) == engine_expected()
    check(p.forward(x, "relu", res), reference(x, wt, b, 1, "relu", res), algorithm)


@pytest.mark.parametrize("algorithm", WINO)
@pytest.mark.parametrize("cio", [(40, 72), (72, 130), (130, 40), (3, 33), (17, 1)], ids=str)
@pytest.mark.parametrize("hw", [(5, 5), (7, 7), (9, 9), (13, 13), (6, 11)], ids=str)
@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_engine_orientation_shapes(isa, rng, threads, orientation, algorithm, cio, hw, nthreads):
    """Both orientations on channel counts off the panel widths (8, 16, 32) and odd maps, with
    the residual and ReLU epilogue: each within the Winograd tolerance of torch, and the
    engine orientation bit-identical to the igemm one (both start from the bias and
    accumulate over the input channels in order with fused multiply-adds)."""
    cin, cout = cio
    threads(nthreads)
    x, wt, b = make(rng, 1, cin, cout, *hw, bias=cin % 2 == 0)
    res = rng.standard_normal((1, cout) + hw).astype(np.float32)
    p = packed(wt, b, algorithm, padding=1)
    ref = reference(x, wt, b, 1, "relu", res)
    ys = []
    for mode in (0, 1):
        orientation(mode)
        assert p._winograd_engine_for(x.shape) == (mode == 1 and engine_expected())
        ys.append(p.forward(x, "relu", res))
        check(ys[-1], ref, algorithm)
    np.testing.assert_array_equal(ys[1], ys[0])


@pytest.mark.parametrize("algorithm", WINO)
@pytest.mark.parametrize("batch", [1, 3])
def test_engine_orientation_views_and_blocks(isa, rng, threads, orientation, algorithm, batch):
    """The engine orientation on strided and channel-sliced inputs, and on many tiles (blocks
    per thread, several blocks per image: forced, the plan keeps igemm there)."""
    threads(2)
    orientation(1)
    x, wt, b = make(rng, 2 * batch, 24, 20, 30, 26)
    p = packed(wt, b, algorithm, padding=1)
    for view in (x[::2], x[:batch, :, ::2, :], x[:batch, 4:20]):
        if view.shape[1] != 24:
            q = packed(wt[:, 4:20], b, algorithm, padding=1)
            check(q.forward(view), reference(view, wt[:, 4:20], b), algorithm)
        else:
            check(p.forward(view), reference(view, wt, b), algorithm)
    big = rng.standard_normal((batch, 24, 61, 57)).astype(np.float32)
    assert p._winograd_engine_for(big.shape) == engine_expected()
    check(p.forward(big, "relu"), reference(big, wt, b, 1, "relu"), algorithm)


def test_engine_orientation_choice(isa):
    """The cost model's orientation: blocks of few tiles with many channels take the engine's;
    64 channels over wide igemm tiles (ResNet-18 layer1, any batch) keep igemm, and so does
    every layer on the portable path."""
    w = np.zeros((512, 512, 3, 3), np.float32)
    p = _conv.pack_conv2d(w, padding=1)
    for shape in [(1, 512, 7, 7), (32, 512, 7, 7), (1, 512, 14, 14)]:
        assert p.algorithm_for(shape).startswith("winograd") or not engine_expected()
        assert p._winograd_engine_for(shape) == engine_expected()
    p = _conv.pack_conv2d(np.zeros((256, 256, 3, 3), np.float32), padding=1)
    assert p._winograd_engine_for((1, 256, 14, 14)) == engine_expected()
    p = _conv.pack_conv2d(np.zeros((128, 128, 3, 3), np.float32), padding=1)
    assert p._winograd_engine_for((1, 128, 28, 28)) == engine_expected()
    p = _conv.pack_conv2d(np.zeros((64, 64, 3, 3), np.float32), padding=1)
    for shape in [(1, 64, 56, 56), (32, 64, 56, 56)]:
        assert p.algorithm_for(shape).startswith("winograd")
        assert not p._winograd_engine_for(shape)
