"""MobileNetV2's kernels: the direct depthwise 3x3 (f32-dwconv2d-chw-3x3-*) against torch.

Odd sizes cover every remainder of the 16-column vectors and odd and even row counts (the
kernel runs one output row per step and carries the next rows' partial sums), paddings 0..2
(asymmetric too), residual on/off, batch > 1 and strided input views; every ISA path this CPU
has (the AVX-512 kernel, the phase-image fallback elsewhere) and float64 (its own direct loop).
"""

import numpy as np
import pytest

from modulekit import nn
from modulekit._ext import _conv

torch = pytest.importorskip("torch")
F = torch.nn.functional

ACTS = {None: lambda t: t, "relu": F.relu, "relu6": F.relu6}


def reference(x, w, b, stride, pads, act=None, residual=None, groups=None):
    xt = torch.from_numpy(np.ascontiguousarray(x)).double()
    t, l_, bo, r = pads
    xt = F.pad(xt, (l_, r, t, bo))
    bt = None if b is None else torch.from_numpy(np.asarray(b, np.float64))
    wt = torch.from_numpy(np.asarray(w, np.float64))
    y = F.conv2d(xt, wt, bt, stride, 0, 1, groups or w.shape[0])
    if residual is not None:
        y = y + torch.from_numpy(np.asarray(residual, np.float64))
    return ACTS[act](y).numpy()


# (batch, channels, H, W, stride, (top, left, bottom, right))
DW_CASES = [
    (1, 3, 1, 1, 1, (1, 1, 1, 1)),
    (2, 5, 7, 7, 1, (1, 1, 1, 1)),
    (1, 4, 9, 17, 1, (1, 1, 1, 1)),
    (1, 3, 13, 33, 1, (0, 0, 0, 0)),
    (1, 2, 6, 31, 1, (2, 0, 1, 2)),
    (1, 3, 14, 14, 2, (1, 1, 1, 1)),
    (2, 3, 15, 47, 2, (1, 1, 1, 1)),
    (1, 2, 11, 34, 2, (0, 0, 0, 0)),
    (1, 2, 10, 33, 2, (0, 1, 2, 0)),
    (1, 3, 2, 2, 2, (1, 1, 1, 1)),
    (1, 2, 5, 65, 1, (1, 1, 1, 1)),
    (1, 3, 5, 16, 1, (1, 1, 1, 1)),  # rows of <= 16 columns: loaded once, shifted in lanes
    (1, 2, 6, 12, 1, (0, 1, 2, 1)),
    (2, 2, 14, 14, 1, (1, 1, 1, 1)),
    # stride 2 (one output row per step, the next row's first sum carried): odd and even
    # sizes, rows past 32 columns, asymmetric and large padding
    (1, 3, 7, 8, 2, (1, 1, 1, 1)),
    (3, 2, 16, 15, 2, (1, 1, 1, 1)),
    (1, 2, 29, 29, 2, (1, 1, 1, 1)),
    (1, 2, 112, 112, 2, (1, 1, 1, 1)),
    (1, 2, 8, 16, 2, (0, 1, 1, 0)),
    (1, 2, 9, 37, 2, (2, 2, 2, 2)),
    (1, 2, 1, 5, 2, (1, 1, 1, 1)),
    (1, 2, 7, 37, 1, (1, 1, 0, 2)),  # left padding 1, right 2 / 0: the wide-row loads
    (1, 2, 9, 12, 1, (2, 1, 1, 0)),
]


@pytest.mark.parametrize("case", DW_CASES)
@pytest.mark.parametrize("act", [None, "relu6"])
def test_depthwise3x3(isa, rng, case, act):
    n, c, h, w, s, pads = case
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    packed = _conv.pack_conv2d(wt, b, stride=s, padding=pads, groups=c)
    assert packed.depthwise
    y = packed.forward(x, act)
    np.testing.assert_allclose(y, reference(x, wt, b, s, pads, act), rtol=1e-5, atol=1e-5)
    r = rng.standard_normal(y.shape).astype(np.float32)
    np.testing.assert_allclose(
        packed.forward(x, act, residual=r),
        reference(x, wt, b, s, pads, act, r),
        rtol=1e-5,
        atol=1e-5,
    )


def test_depthwise3x3_views_and_float64(isa, rng):
    big = rng.standard_normal((2, 9, 20, 41)).astype(np.float32)
    wt = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    for s in (1, 2):
        packed = _conv.pack_conv2d(wt, None, stride=s, padding=1, groups=4)
        for v in (big[:, 2:6, 1:18, 3:40], big[:, 1:9:2, ::2, :], big[:, :4, :, ::2]):
            np.testing.assert_allclose(
                packed.forward(v),
                reference(v, wt, None, s, (1, 1, 1, 1)),
                rtol=1e-5,
                atol=1e-5,
            )
        p64 = _conv.pack_conv2d(wt.astype(np.float64), None, stride=s, padding=1, groups=4)
        v = big[:, :4].astype(np.float64)
        y = p64.forward(v)
        assert y.dtype == np.float64
        np.testing.assert_allclose(y, reference(v, wt, None, s, (1, 1, 1, 1)), rtol=1e-12)


def _block(rng, cin, t, cout, stride, dtype=np.float32):
    chid = cin * t
    e = None
    if t != 1:
        we = (rng.standard_normal((chid, cin, 1, 1)) / np.sqrt(cin)).astype(dtype)
        e = (we, rng.standard_normal(chid).astype(dtype))
    wd = (rng.standard_normal((chid, 1, 3, 3)) / 3).astype(dtype)
    bd = rng.standard_normal(chid).astype(dtype)
    wp = (rng.standard_normal((cout, chid, 1, 1)) / np.sqrt(chid)).astype(dtype)
    bp = rng.standard_normal(cout).astype(dtype)
    packed = (
        None if e is None else _conv.pack_conv2d(*e),
        _conv.pack_conv2d(wd, bd, stride=stride, padding=1, groups=chid),
        _conv.pack_conv2d(wp, bp),
    )
    return e, (wd, bd), (wp, bp), packed


def _torch_block(x, e, d, p, stride, residual):
    xt = torch.from_numpy(np.asarray(x, np.float64))
    y = xt
    if e is not None:
        y = F.relu6(F.conv2d(y, torch.from_numpy(e[0]).double(), torch.from_numpy(e[1]).double()))
    y = F.relu6(
        F.conv2d(
            y,
            torch.from_numpy(d[0]).double(),
            torch.from_numpy(d[1]).double(),
            stride,
            1,
            1,
            d[0].shape[0],
        )
    )
    y = F.conv2d(y, torch.from_numpy(p[0]).double(), torch.from_numpy(p[1]).double())
    return (y + xt if residual else y).numpy()


#: MobileNetV2's epilogues: ReLU6 after the expand and depthwise steps, none after project
R6 = ("relu6", "relu6", None)

# (batch, C_in, expand ratio, C_out, H, W, stride, band rows (0: automatic))
INVRES_CASES = [
    (1, 8, 1, 8, 11, 13, 1, 0),  # no expansion, residual
    (1, 8, 1, 16, 12, 12, 1, 3),
    (2, 6, 6, 6, 9, 17, 1, 2),  # residual, batch 2, bands of 2
    (1, 5, 6, 7, 13, 11, 2, 0),
    (1, 5, 6, 7, 14, 50, 2, 3),
    (1, 8, 3, 8, 7, 7, 1, 1),
    (1, 8, 3, 8, 7, 7, 1, 4),
    (1, 4, 6, 12, 1, 1, 1, 0),
    (3, 4, 6, 4, 5, 33, 1, 5),
    (1, 3, 6, 9, 2, 3, 2, 1),
]


@pytest.mark.parametrize("case", INVRES_CASES)
def test_inverted_residual(isa, rng, case):
    n, cin, t, cout, h, w, s, band = case
    residual = s == 1 and cin == cout
    e, d, p, (pe, pd, pp) = _block(rng, cin, t, cout, s)
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    y = _conv.depthwise_chain(x, pe, pd, pp, R6, residual, band_rows=band)
    # the unfused layers, bit for bit
    u = x if pe is None else pe.forward(x, "relu6")
    u = pp.forward(pd.forward(u, "relu6"), None, x if residual else None)
    np.testing.assert_array_equal(y, u)
    np.testing.assert_allclose(y, _torch_block(x, e, d, p, s, residual), rtol=1e-4, atol=1e-4)
    # a strided view of the input, and every band height
    xv = np.repeat(x, 2, axis=3)[:, :, :, ::2]
    for b in (1, 2, 5):
        np.testing.assert_array_equal(
            _conv.depthwise_chain(xv, pe, pd, pp, R6, residual, band_rows=b), u
        )


@pytest.mark.parametrize("acts", [("hardswish", "relu", None), (None, "hardswish", "relu"),
                                  ("relu", None, "relu6"), ("gelu", "silu", "tanh")])
@pytest.mark.parametrize("case", [(1, 8, 3, 8, 9, 11, 1, 0), (2, 5, 6, 7, 13, 11, 2, 3)])
def test_depthwise_chain_other_epilogues(isa, rng, acts, case):
    """The chain kernel takes any epilogue for each of its three steps (the project's after
    the residual), bit for bit the three convolutions one after the other."""
    n, cin, t, cout, h, w, s, band = case
    residual = s == 1 and cin == cout
    _, _, _, (pe, pd, pp) = _block(rng, cin, t, cout, s)
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32) * 4
    chain = _conv.DepthwiseChain(pe, pd, pp, acts, residual)
    assert chain.activations == acts
    u = pp.forward(pd.forward(pe.forward(x, acts[0]), acts[1]), acts[2],
                   x if residual else None)
    np.testing.assert_array_equal(chain(x, band), u)
    assert _conv.DepthwiseChain.fusable(pe, pd, pp, acts, residual)
    with pytest.raises(ValueError, match="unknown activation"):
        _conv.DepthwiseChain(pe, pd, pp, ("swish", None, None))
    with pytest.raises(ValueError, match="three"):
        _conv.DepthwiseChain(pe, pd, pp, ("relu6", None))
    assert not _conv.DepthwiseChain.fusable(pe, pd, pp, ("swish", None, None))
    assert not _conv.DepthwiseChain.fusable(pe, pe, pp, acts)  # not depthwise in the middle


def test_inverted_residual_float64_and_errors(rng):
    e, d, p, (pe, pd, pp) = _block(rng, 4, 6, 4, 1, np.float64)
    x = rng.standard_normal((2, 4, 9, 10))
    y = _conv.depthwise_chain(x, pe, pd, pp, R6, True)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, _torch_block(x, e, d, p, 1, True), rtol=1e-10, atol=1e-10)
    _, _, _, (pe, pd, pp) = _block(rng, 4, 6, 8, 2)
    with pytest.raises(ValueError, match="residual needs stride 1"):
        _conv.depthwise_chain(x.astype(np.float32), pe, pd, pp, R6, True)
    with pytest.raises(ValueError, match="do not chain"):
        _conv.depthwise_chain(x.astype(np.float32), pe, pd, pe, R6, False)
    with pytest.raises(ValueError, match="expected input with 4 channels"):
        _conv.depthwise_chain(np.zeros((1, 5, 8, 8), np.float32), pe, pd, pp, R6, False)


def test_inverted_residual_plan_reuse(isa, rng):
    """One plan over inputs whose shape, batch, layout, dtype and the thread count change
    between calls: each call equals a fresh one and the unfused layers, and a wrong channel
    count after a successful call with the same N, H, W still raises."""
    import modulekit

    _, _, _, (pe, pd, pp) = _block(rng, 6, 6, 6, 1)
    plan = _conv.DepthwiseChain(pe, pd, pp, R6, True)
    assert plan.residual and plan.expand is pe and plan.dw is pd and plan.project is pp
    before = modulekit.get_num_threads()
    try:
        for n, h, w, threads in [
            (1, 9, 11, 2), (1, 9, 11, 2), (2, 9, 11, 2), (1, 9, 11, 1), (1, 5, 7, 2),
            (1, 9, 11, 3), (3, 1, 1, 2), (1, 9, 11, 2),
        ]:
            modulekit.set_num_threads(threads)
            x = rng.standard_normal((n, 6, h, w)).astype(np.float32)
            u = pp.forward(pd.forward(pe.forward(x, "relu6"), "relu6"), None, x)
            np.testing.assert_array_equal(plan(x), u)
            np.testing.assert_array_equal(plan(x), _conv.depthwise_chain(x, pe, pd, pp, R6, True))
            # a strided view, float64 and a nested list of the same values, band rows forced
            xv = np.repeat(x, 2, axis=3)[:, :, :, ::2]
            np.testing.assert_array_equal(plan(xv), u)
            np.testing.assert_array_equal(plan(x.astype(np.float64)), u)
            np.testing.assert_array_equal(plan(x.tolist()), u)
            np.testing.assert_array_equal(plan(x, band_rows=2), u)
            np.testing.assert_array_equal(plan(x), u)
    finally:
        modulekit.set_num_threads(before)
    with pytest.raises(ValueError, match="expected input with 6 channels"):
        plan(np.zeros((1, 5, 9, 11), np.float32))
    with pytest.raises(ValueError, match="do not chain"):
        _conv.DepthwiseChain(pe, pd, pe, R6)


def _random_state(model, rng):
    """Random float tensors for ``model`` (running variances in [0.5, 1.5])."""
    state = {}
    for k, v in model.state_dict().items():
        a = np.asarray(v)
        if k.endswith("running_var"):
            state[k] = rng.uniform(0.5, 1.5, a.shape).astype(a.dtype)
        elif a.dtype.kind == "f":
            state[k] = (rng.standard_normal(a.shape) * 0.1).astype(a.dtype)
    return state


# 1x1 convolutions on maps whose pixel count is not a multiple of 16 (f32-conv1x1-driver.c on
# AVX-512): every remainder of the 48/32-pixel tiles and of the 8-pixel channel-lane groups,
# output channels that are not a multiple of 8 or 16 (an odd panel count).
@pytest.mark.parametrize("hw", [(1, 1), (1, 7), (7, 7), (3, 11), (5, 13), (9, 9), (14, 14)])
@pytest.mark.parametrize("cin,cout", [(1, 5), (3, 8), (16, 13), (24, 40), (37, 16)])
def test_conv1x1_remainders(isa, rng, hw, cin, cout):
    h, w = hw
    x = rng.standard_normal((2, cin, h, w)).astype(np.float32)
    wt = (rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    packed = _conv.pack_conv2d(wt, b)
    r = rng.standard_normal((2, cout, h, w)).astype(np.float32)
    pads = (0, 0, 0, 0)
    for act in (None, "relu6"):
        np.testing.assert_allclose(
            packed.forward(x, act),
            reference(x, wt, b, 1, pads, act, groups=1),
            rtol=1e-5,
            atol=1e-5,
        )
    np.testing.assert_allclose(
        packed.forward(x, "relu", residual=r),
        F.relu(torch.from_numpy(reference(x, wt, b, 1, pads, None, r, groups=1))).numpy(),
        rtol=1e-5,
        atol=1e-5,
    )
    # a channel slice (channel stride != H*W)
    big = rng.standard_normal((2, cin + 3, h, w)).astype(np.float32)
    v = big[:, 2 : 2 + cin]
    np.testing.assert_allclose(
        packed.forward(v), reference(v, wt, b, 1, pads, groups=1), rtol=1e-5, atol=1e-5
    )


def test_conv1x1_threads_agree(rng):
    import modulekit

    x = rng.standard_normal((3, 40, 7, 7)).astype(np.float32)
    wt = rng.standard_normal((72, 40, 1, 1)).astype(np.float32)
    packed = _conv.pack_conv2d(wt, rng.standard_normal(72).astype(np.float32))
    before = modulekit.get_num_threads()
    try:
        modulekit.set_num_threads(1)
        one = packed.forward(x, "relu6")
        modulekit.set_num_threads(2)
        two = packed.forward(x, "relu6")
    finally:
        modulekit.set_num_threads(before)
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("hw,stride", [((7, 7), 1), ((14, 14), 2), ((30, 9), 1)])
def test_inverted_residual_threads_agree(rng, hw, stride):
    import modulekit

    _, _, _, (pe, pd, pp) = _block(rng, 16, 6, 16, stride)
    x = rng.standard_normal((1, 16, *hw)).astype(np.float32)
    before = modulekit.get_num_threads()
    try:
        modulekit.set_num_threads(1)
        one = _conv.depthwise_chain(x, pe, pd, pp, R6, stride == 1)
        modulekit.set_num_threads(2)  # one image: the threads split its rows
        two = _conv.depthwise_chain(x, pe, pd, pp, R6, stride == 1)
    finally:
        modulekit.set_num_threads(before)
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize(
    "cin,t,cout,hw,stride,n",
    [
        (40, 6, 40, (7, 7), 1, 1),  # one band, one image: threads split channels
        (24, 5, 36, (14, 14), 1, 1),  # hidden and output channels not multiples of 16
        (24, 6, 24, (15, 15), 1, 1),  # 15 rows: threads split the rows
        (32, 6, 56, (27, 13), 2, 1),  # 14 output rows, stride 2
        (40, 6, 40, (7, 7), 1, 2),  # two images: one image per thread
    ],
)
@pytest.mark.parametrize("threads", [2, 3])
def test_inverted_residual_channel_split_agrees(rng, cin, t, cout, hw, stride, n, threads):
    import modulekit

    _, _, _, (pe, pd, pp) = _block(rng, cin, t, cout, stride)
    x = rng.standard_normal((n, cin, *hw)).astype(np.float32)
    residual = stride == 1 and cin == cout
    before = modulekit.get_num_threads()
    try:
        modulekit.set_num_threads(1)
        one = _conv.depthwise_chain(x, pe, pd, pp, R6, residual)
        modulekit.set_num_threads(threads)
        many = _conv.depthwise_chain(x, pe, pd, pp, R6, residual)
    finally:
        modulekit.set_num_threads(before)
    np.testing.assert_array_equal(one, many)


# Stride-2 blocks (the depthwise step runs one output row per step): odd and even heights and
# widths, channels that are not multiples of 16, every band height, batch 1 and 3, 1 and 2
# threads; bit for bit against the unfused layers and against torch.
@pytest.mark.parametrize(
    "hw,cin,t,cout",
    [(hw, *c) for hw in [(7, 7), (8, 8), (15, 16), (16, 15), (29, 29), (29, 8)]
     for c in [(5, 6, 7), (16, 6, 24)]]
    + [((112, 112), 16, 6, 24)],
)
@pytest.mark.parametrize("n,threads", [(1, 1), (1, 2), (3, 1), (3, 2)])
def test_inverted_residual_stride2(isa, rng, hw, cin, t, cout, n, threads):
    import modulekit

    e, d, p, (pe, pd, pp) = _block(rng, cin, t, cout, 2)
    x = rng.standard_normal((n, cin, *hw)).astype(np.float32)
    before = modulekit.get_num_threads()
    try:
        modulekit.set_num_threads(threads)
        u = pp.forward(pd.forward(pe.forward(x, "relu6"), "relu6"), None)
        for band in (0, 1, 2, 3):
            y = _conv.depthwise_chain(x, pe, pd, pp, R6, False, band_rows=band)
            np.testing.assert_array_equal(y, u)
    finally:
        modulekit.set_num_threads(before)
    np.testing.assert_allclose(y, _torch_block(x, e, d, p, 2, False), rtol=1e-4, atol=1e-4)


# Whole planes of at most 256 pixels and 8 columns at stride 1 (the 7x7 maps) run the flat
# depthwise kernel when one band holds the plane (one thread, a batch of at least as many images
# as threads, or the channel split of one image): row widths 1..8 against the 16-lane vectors,
# 256 pixels exactly and just past it, and wider rows (the row kernel) beside them.
@pytest.mark.parametrize(
    "hw", [(1, 1), (16, 1), (3, 5), (7, 7), (11, 7), (32, 8), (33, 8), (5, 13), (14, 14)]
)
@pytest.mark.parametrize("cin,t,cout", [(8, 1, 8), (5, 6, 7), (24, 5, 24)])
@pytest.mark.parametrize("n,threads", [(1, 1), (1, 2), (3, 2)])
def test_inverted_residual_small_planes(isa, rng, hw, cin, t, cout, n, threads):
    import modulekit

    e, d, p, (pe, pd, pp) = _block(rng, cin, t, cout, 1)
    x = rng.standard_normal((n, cin, *hw)).astype(np.float32)
    residual = cin == cout
    before = modulekit.get_num_threads()
    try:
        modulekit.set_num_threads(threads)
        y = _conv.depthwise_chain(x, pe, pd, pp, R6, residual)
        u = x if pe is None else pe.forward(x, "relu6")
        u = pp.forward(pd.forward(u, "relu6"), None, x if residual else None)
    finally:
        modulekit.set_num_threads(before)
    np.testing.assert_array_equal(y, u)  # the unfused layers (the row kernel), bit for bit
    np.testing.assert_allclose(y, _torch_block(x, e, d, p, 1, residual), rtol=1e-4, atol=1e-4)


# The global average pool fused into a convolution (PackedConv2d.forward_mean): the lane-exact
# 1x1 path averages each thread's channels in the kernel, every other path the stored output;
# both in mk_mean_rows_f32's order, so they equal spatial_mean(forward(x)) bit for bit.
@pytest.mark.parametrize(
    "n,cin,cout,h,w,k",
    [(1, 320, 1280, 7, 7, 1), (2, 17, 37, 3, 5, 1), (1, 8, 64, 14, 14, 1), (3, 5, 19, 16, 16, 1),
     (1, 4, 3, 1, 1, 1), (2, 6, 11, 9, 13, 3), (1, 3, 33, 5, 17, 1)],
)
def test_forward_mean(isa, rng, n, cin, cout, h, w, k):
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    wt = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    packed = _conv.pack_conv2d(wt, b, padding=k // 2)
    r = rng.standard_normal((n, cout, h, w)).astype(np.float32)
    for act, res in ((None, None), ("relu6", None), ("relu", r)):
        y = packed.forward(x, act, res)
        mean = packed.forward_mean(x, act, res)
        assert mean.shape == (n, cout) and mean.dtype == np.float32
        np.testing.assert_array_equal(mean, _conv.spatial_mean(y))
        ref = reference(x, wt, b, 1, (k // 2,) * 4, act, res, groups=1).mean((2, 3))
        np.testing.assert_allclose(mean, ref, rtol=1e-5, atol=1e-5)
    # unbatched input, a channel-sliced view
    np.testing.assert_array_equal(packed.forward_mean(x[0]), packed.forward_mean(x[:1])[0])
    big = rng.standard_normal((n, cin + 2, h, w)).astype(np.float32)
    np.testing.assert_array_equal(
        packed.forward_mean(big[:, 1 : 1 + cin]), _conv.spatial_mean(packed.forward(big[:, 1:-1]))
    )


def test_spatial_mean(rng):
    for shape in [(1, 1, 1, 1), (2, 3, 1, 17), (1, 5, 7, 7), (2, 4, 4, 4), (1, 2, 33, 3)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got = _conv.spatial_mean(x)
        assert got.dtype == np.float32 and got.shape == shape[:2]
        np.testing.assert_allclose(got, x.astype(np.float64).mean((2, 3)), rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(_conv.spatial_mean(x[:, :, ::1, ::1].copy()), got)
        x64 = x.astype(np.float64)
        got64 = _conv.spatial_mean(x64)
        assert got64.dtype == np.float64
        np.testing.assert_allclose(got64, x64.mean((2, 3)), rtol=1e-12)
    # non-contiguous input
    x = rng.standard_normal((2, 6, 5, 9)).astype(np.float32)
    np.testing.assert_array_equal(_conv.spatial_mean(x[:, ::2, :, ::2]),
                                  _conv.spatial_mean(np.ascontiguousarray(x[:, ::2, :, ::2])))
    with pytest.raises(ValueError):
        _conv.spatial_mean(x[0])


def test_mobilenetv2_pooled_head_hooks(rng):
    """A hook on the last feature layer, its children or the classifier sees its call (the
    fused pool and the direct classifier call step aside); the output does not change."""
    from modulekit.models import mobilenetv2 as mm

    model = mm.MobileNetV2(num_classes=7).eval().initialize()
    x = rng.standard_normal((1, 3, 40, 40)).astype(np.float32)
    want = model(x)
    for target in (model.features[-1], model.features[-1][0], model.features[-1][2],
                   model.classifier, model.classifier[0], model.classifier[1]):
        calls = []
        h = target.register_forward_hook(lambda *a, c=calls: c.append(1))
        got = model(x)
        h.remove()
        np.testing.assert_array_equal(got, want)
        if target is not model.features[-1][0] and target is not model.features[-1][2]:
            assert calls == [1], target
    # train mode: dropout and batch statistics, the plain path (shape only)
    model.train()
    assert model(rng.standard_normal((2, 3, 40, 40)).astype(np.float32)).shape == (2, 7)


def _mbv2_random(rng, num_classes=10):
    from modulekit.models import mobilenetv2 as mm

    model = mm.MobileNetV2(num_classes=num_classes)
    state = {}
    for k, v in model.state_dict().items():
        a = np.asarray(v)
        if k.endswith("running_var") or (k.endswith("weight") and a.ndim == 1):
            state[k] = rng.uniform(0.5, 1.5, a.shape).astype(a.dtype)
        elif a.dtype.kind == "f" and a.ndim > 1:  # fan-in scaled: activations stay O(1)
            fan_in = a[0].size
            state[k] = (rng.standard_normal(a.shape) * 1.5 / np.sqrt(fan_in)).astype(a.dtype)
        elif a.dtype.kind == "f":
            state[k] = (rng.standard_normal(a.shape) * 0.05).astype(a.dtype)
    model.load_state_dict(state, strict=False)
    return model.eval().initialize()


def _unfused(model, x):
    """The model run layer by layer as modules (its forward, not its compiled plan)."""
    return model.forward(x)


def _close(a, b):
    """The plan (norms folded, the fused mean) against the layers run one by one."""
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _double(m, a, o):
    return o * 2


def _new_bn(c):
    bn = nn.BatchNorm2d(c)
    bn.load_state_dict(
        {"running_mean": np.full(c, 0.1, np.float32), "running_var": np.full(c, 2.0, np.float32),
         "weight": np.full(c, 1.2, np.float32), "bias": np.full(c, 0.1, np.float32)},
        strict=False,
    )
    return bn.eval()


PLAN_MUTATIONS = {
    # name: (mutation, whether the output must change)
    "replace a block": (lambda m: m.features.__setitem__(5, nn.Identity()), True),
    "delete a block": (lambda m: m.features.__delitem__(5), True),
    "hook on a block": (lambda m: m.features[5].register_forward_hook(_double), True),
    "hook inside a block": (lambda m: m.features[5].conv[1].register_forward_hook(_double), True),
    "pre-hook on features": (
        lambda m: m.features.register_forward_pre_hook(lambda mod, a: (a[0] * 0.5,)), True
    ),
    "hook on the last layer": (lambda m: m.features[-1].register_forward_hook(_double), True),
    "hook on the classifier Linear": (
        lambda m: m.classifier[1].register_forward_hook(_double), True
    ),
    "norm replaced": (lambda m: m.features[5].conv[1].__setitem__(1, _new_bn(192)), True),
    "norm without statistics": (
        lambda m: setattr(m.features[5].conv[1][1], "running_mean", None), True
    ),
    "last norm replaced": (lambda m: m.features[-1].__setitem__(1, _new_bn(1280)), True),
    "reload": (lambda m: m.load_state_dict(
        _mbv2_random(np.random.default_rng(9)).state_dict(include_packed=True)), True),
    "new classifier": (lambda m: m.classifier.__setitem__(1, nn.Linear(1280, 10)), True),
    "classifier train mode (dropout on)": (lambda m: m.classifier.train(), True),
    "block in train mode": (lambda m: m.features[5].train(), True),
    "initialize again": (lambda m: m.initialize(), False),
}


@pytest.mark.parametrize("name", sorted(PLAN_MUTATIONS))
def test_mobilenetv2_plan_follows_mutations(rng, name):
    """The compiled plan is reused while nothing changes, and every change that alters what
    the model computes is seen by the next call: the output is the layers' run one by one
    (to float32 rounding: the plan folds the norms)."""
    from modulekit import module as mod

    model = _mbv2_random(rng)
    x = rng.standard_normal((1, 3, 48, 40)).astype(np.float32)
    model(x)  # the capture
    before = model(x)
    _close(before, _unfused(model, x))
    captures = model._compiled.captures
    epoch = mod.structure_epoch()
    np.testing.assert_array_equal(model(x), before)
    assert model._compiled.captures == captures and mod.structure_epoch() == epoch
    mutate, changes = PLAN_MUTATIONS[name]
    mutate(model)
    if "train" in name:
        # dropout and batch statistics: compare shapes and that the plan stepped aside
        y = model(x)
        assert y.shape == before.shape and not np.array_equal(y, before)
        return
    model(x)
    after = model(x)
    _close(after, _unfused(model, x))
    assert np.allclose(after, before, rtol=1e-5, atol=1e-6) != changes
    np.testing.assert_array_equal(model(x), after)


def test_mobilenetv2_plan_cast_and_batch(rng):
    """A cast to float64 re-plans (float64 layers, the NumPy mean); other batch sizes and
    input sizes reuse the plan; non-ndarray input runs the layers."""
    model = _mbv2_random(rng)
    x = rng.standard_normal((2, 3, 40, 56)).astype(np.float32)
    model(x)
    y32 = model(x)
    _close(model(x[:1]), _unfused(model, x[:1]))
    _close(model(x.tolist()), y32)
    model.to(np.float64)
    model(x.astype(np.float64))
    y64 = model(x.astype(np.float64))
    assert y64.dtype == np.float64
    np.testing.assert_allclose(y64, _unfused(model, x.astype(np.float64)), rtol=1e-10,
                               atol=1e-10)
    np.testing.assert_allclose(y64, y32, rtol=1e-4, atol=1e-4)


def test_mobilenetv2_pickles_after_a_forward(rng):
    """The plans (kernel objects) stay out of a pickle; the copy re-plans, same output."""
    import pickle

    model = _mbv2_random(rng)
    x = rng.standard_normal((1, 3, 40, 40)).astype(np.float32)
    model(x)
    y = model(x)
    twin = pickle.loads(pickle.dumps(model))
    assert twin._compiled is not None and twin._compiled.captures == 0  # compiles again
    twin(x)
    np.testing.assert_array_equal(twin(x), y)
    np.testing.assert_array_equal(model(x), y)
