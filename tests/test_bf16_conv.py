"""bfloat16-compute convolutions: ``float32_matmul_precision("medium")`` on the AVX512-BF16 and
AMX paths (each test on every path this CPU has).

Oracle: torch. Under "medium" a convolution that the float32 kernels would run as an implicit
GEMM computes ``act(conv(bf16(x), bf16(w)) + b (+ residual))`` with float32 accumulation: it is
compared with torch's float64 convolution of the bfloat16-rounded operands within the bound of
a float32 sum of K // 2 + 1 pair products, ``(K // 2 + 3) * 2^-24`` times the per-element
magnitude ``conv(|bf16(x)|, |bf16(w)|) + |b| (+ |residual|)`` (a dropped or misplaced product
is 2^-8 of it or more). Depthwise, float16 and float64 layers keep float32 compute, and so do
Winograd layers on the AVX512-BF16 path.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import modulekit
from modulekit import nn
from modulekit._ext import _conv, _isa

HAS_BF16 = "avx512bf16" in _isa.available_bf16()
needs_bf16 = pytest.mark.skipif(not HAS_BF16, reason="no AVX512-BF16 on this CPU")


@pytest.fixture(autouse=True)
def _defaults():
    """Every test starts and ends at "highest", the detected ISA and the default bf16 path."""
    modulekit.set_float32_matmul_precision("highest")
    prev_isa, prev_bf16 = _isa.get_isa(), _isa.get_bf16()
    yield
    modulekit.set_float32_matmul_precision("highest")
    _isa.set_isa(prev_isa)
    _isa.set_bf16(prev_bf16)


@pytest.fixture(params=["avx512bf16", "amx"])
def bf16_path(request):
    """Each bfloat16 path this CPU has chosen in turn (AVX512-BF16 is the default on AMD and
    selectable on Intel; AMX where the OS grants the tile state)."""
    if request.param not in _isa.available_bf16():
        pytest.skip(f"no {request.param} bfloat16 path on this CPU")
    _isa.set_isa("avx512")
    _isa.set_bf16(request.param)
    return request.param


def _bf16(a):
    return torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(torch.bfloat16).double()


_ACTS = {None: lambda t: t, "relu": torch.relu, "relu6": lambda t: torch.clamp(t, 0, 6),
         "silu": F.silu, "gelu": F.gelu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
         "hardswish": F.hardswish, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}


def _check(y, x, w, b, stride, padding, dilation, groups, act=None, res=None):
    """y against torch's float64 conv of the bfloat16-rounded x and w (see the module doc)."""
    pt, pl, pb, pr = padding
    xb = F.pad(_bf16(x), (pl, pr, pt, pb))
    wb = _bf16(w)
    bt = None if b is None else torch.from_numpy(b).double()
    ref = F.conv2d(xb, wb, bt, stride, 0, dilation, groups)
    scale = F.conv2d(xb.abs(), wb.abs(), None if b is None else bt.abs(), stride, 0, dilation,
                     groups)
    if res is not None:
        ref = ref + torch.from_numpy(res).double()
        scale = scale + torch.from_numpy(res).double().abs()
    # the activations here are 1-Lipschitz or less (up to 1.1 for gelu/silu/hardswish)
    ref = _ACTS[act](ref).numpy()
    K = w.shape[1] * w.shape[2] * w.shape[3]
    tol = 1.2 * (K // 2 + 3) * 2.0**-24 * scale.numpy() + 1e-30
    err = np.abs(y.astype(np.float64) - ref)
    assert np.all(err <= tol), f"max err / tol {np.max(err / tol):.3g}"


# (N, Cin, H, W, Cout, k, stride, padding (t, l, b, r), dilation, groups)
_CASES = [
    (1, 3, 37, 41, 16, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1),    # a stem, odd map
    (2, 16, 14, 14, 24, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1),   # strided 3x3
    (3, 32, 9, 9, 40, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),     # direct 1x1
    (1, 24, 12, 10, 17, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1),   # strided 1x1, Cout % 8
    (2, 17, 11, 9, 13, (3, 3), (1, 1), (2, 1, 0, 2), (2, 2), 1),    # dilated, asymmetric pad
    (1, 16, 10, 10, 32, (3, 3), (1, 2), (1, 1, 1, 1), (1, 1), 4),   # grouped, mixed stride
    (1, 5, 6, 7, 3, (2, 3), (1, 1), (0, 1, 1, 0), (1, 1), 1),       # odd K (pair padding)
    (1, 128, 7, 7, 64, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1),    # few pixels, long K
    # the pair image (on AMX: channels padded to 32 by at most a third, or one tap)
    (2, 48, 12, 11, 40, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),   # 3x3 stride 1, Cout % 32
    (1, 62, 9, 10, 34, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 2),    # odd Cin_g 31, groups
    (1, 64, 30, 30, 96, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),   # direct 1x1
    (2, 40, 20, 19, 64, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1),   # strided 1x1
    (1, 32, 16, 16, 70, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 1),   # dilated, 3 panels
]


@needs_bf16
@pytest.mark.parametrize("case", _CASES, ids=lambda c: f"{c[1]}-{c[4]}-k{c[5][0]}x{c[5][1]}")
@pytest.mark.parametrize("bias", [True, False])
def test_medium_against_torch(bf16_path, rng, case, bias):
    n, cin, h, w_, cout, k, s, p, d, g = case
    w = rng.standard_normal((cout, cin // g) + k).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    x = rng.standard_normal((n, cin, h, w_)).astype(np.float32)
    pc = _conv.pack_conv2d(w, b, stride=s, padding=p, dilation=d, groups=g)
    if bf16_path == "avx512bf16":
        pc.algorithm = "igemm"  # not Winograd (float32 compute there on this path)
    with modulekit.float32_matmul_precision("medium"):
        assert pc.algorithm_for(x.shape) == "igemm-bf16"
        y = pc(x)
    _check(y, x, w, b, s, p, d, g)
    # "highest" again: float32 compute, and the bfloat16 result differs from it
    assert pc.algorithm_for(x.shape) != "igemm-bf16"
    assert not np.array_equal(pc(x), y)


@needs_bf16
@pytest.mark.parametrize("act", sorted(_ACTS, key=str))
def test_fused_residual_and_activations(bf16_path, rng, act):
    w = rng.standard_normal((20, 12, 3, 3)).astype(np.float32)
    b = rng.standard_normal(20).astype(np.float32)
    x = rng.standard_normal((2, 12, 15, 13)).astype(np.float32)
    pc = _conv.pack_conv2d(w, b, stride=2, padding=1)
    res = rng.standard_normal(pc.output_shape(x.shape)).astype(np.float32)
    with modulekit.float32_matmul_precision("medium"):
        y = pc(x, activation=act, residual=res)
    _check(y, x, w, b, (2, 2), (1, 1, 1, 1), (1, 1), 1, act, res)


@needs_bf16
def test_bit_identical_across_threads_layouts_and_entry_points(bf16_path, rng):
    """One lane sums its K products in one order whatever the thread count, the input's
    strides (direct 1x1 against the phase image) or the entry point."""
    w = rng.standard_normal((72, 48, 1, 1)).astype(np.float32)
    b = rng.standard_normal(72).astype(np.float32)
    big = rng.standard_normal((2, 48, 20, 30)).astype(np.float32)
    x = np.ascontiguousarray(big[:, :, :, :20])
    pc = _conv.pack_conv2d(w, b)
    with modulekit.float32_matmul_precision("medium"):
        y = pc(x, activation="relu")
        assert np.array_equal(pc(big[:, :, :, :20], activation="relu"), y)  # strided rows
        prev = modulekit.get_num_threads()
        modulekit.set_num_threads(1)
        try:
            assert np.array_equal(pc(x, activation="relu"), y)
        finally:
            modulekit.set_num_threads(prev)
        assert np.array_equal(pc.forward_mean(x, activation="relu"), _conv.spatial_mean(y))
        pooled = pc.forward_maxpool(x, activation="relu", kernel_size=2)
        assert pc.maxpool_algorithm_for(x.shape) == "igemm-bf16+max_pool2d"
        assert np.array_equal(pooled, _conv.max_pool2d(y, 2))


@needs_bf16
@pytest.mark.parametrize("case", [(37, 48, 7, 7, 40, 3, 1, 1, 1), (19, 32, 9, 11, 24, 3, 2, 1, 1),
                                  (21, 40, 14, 14, 56, 1, 2, 0, 1), (18, 64, 8, 8, 32, 3, 1, 1, 2)],
                         ids=lambda c: "n{}-c{}-{}x{}-k{}s{}g{}".format(*c[:4], c[5], c[6], c[8]))
def test_images_converted_a_step_at_a_time(bf16_path, rng, case):
    """Over the pair image the images of a batch are converted several at a time (as
    many as fit half of L2) and every panel passes over all their tiles: each image's result
    is the bits of that image alone, the last step's remainder and strided 1x1 layers (whose
    pair planes hold the one phase sub-image their taps read) included."""
    n, cin, h, w_, cout, k, s, p, g = case
    w = rng.standard_normal((cout, cin // g, k, k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    x = rng.standard_normal((n, cin, h, w_)).astype(np.float32)
    pc = _conv.pack_conv2d(w, b, stride=s, padding=p, groups=g)
    pc.algorithm = "igemm"
    oh, ow = (h + 2 * p - k) // s + 1, (w_ + 2 * p - k) // s + 1
    res = rng.standard_normal((n, cout, oh, ow)).astype(np.float32)
    with modulekit.float32_matmul_precision("medium"):
        y = pc(x, activation="relu", residual=res)
        for i in range(n):
            assert np.array_equal(pc(x[i:i + 1], activation="relu", residual=res[i:i + 1]),
                                  y[i:i + 1]), f"image {i}"
    _check(y, x, w, b, (s, s), (p, p, p, p), (1, 1), g, "relu", res)


@needs_bf16
@pytest.mark.parametrize("geom", [(3, 3, 64, 7, 37, 41, 2, 3), (1, 3, 40, 3, 29, 33, 1, 1),
                                  (2, 4, 24, 5, 23, 51, 2, 2), (1, 1, 33, 3, 9, 131, 2, 0),
                                  (1, 2, 70, 7, 70, 3, 2, 3)],
                         ids=lambda g: "-".join(map(str, g)))
def test_few_channel_maxpool_fused(bf16_path, rng, geom):
    """A few-channel convolution and the max pool after it (ResNet's stem) run fused in row
    bands under "medium": bit-identical to the convolution then max_pool2d, on every thread
    count, for contiguous and strided inputs; float32 compute again outside "medium"."""
    n, cin, cout, k, h, w, s, p = geom
    wt = rng.standard_normal((cout, cin, k, k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    pc = _conv.pack_conv2d(wt, b, stride=s, padding=p)
    prev = modulekit.get_num_threads()
    try:
        with modulekit.float32_matmul_precision("medium"):
            assert pc.maxpool_algorithm_for(x.shape, 3, 2, 1) == "igemm-bf16-maxpool"
            for v in (x, x[:, :, :, ::-1]):
                want = _conv.max_pool2d(pc(v, activation="relu"), 3, 2, 1)
                for nt in (1, 2, 3):
                    modulekit.set_num_threads(nt)
                    assert np.array_equal(pc.forward_maxpool(v, "relu", 3, 2, 1), want)
                modulekit.set_num_threads(prev)
        assert "bf16" not in pc.maxpool_algorithm_for(x.shape, 3, 2, 1)
    finally:
        modulekit.set_num_threads(prev)


@needs_bf16
@pytest.mark.parametrize("geom", [(2, 3, 32, 3, 45, 39, 2, 1), (1, 3, 64, 7, 37, 41, 2, 3),
                                  (2, 4, 24, 5, 23, 21, 1, 2), (1, 1, 9, 3, 17, 70, 1, 0)],
                         ids=lambda g: "-".join(map(str, g)))
def test_few_channel_bands_bit_identical_to_whole_image(bf16_path, rng, geom):
    """A few-channel convolution (a network's first layer) runs in row bands under "medium"
    ('igemm-bf16-rows'): each output the bits of the whole-image implicit GEMM ('igemm'
    forced), with a residual and an activation, on every thread count."""
    n, cin, cout, k, h, w, s, p = geom
    wt = rng.standard_normal((cout, cin, k, k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    pc = _conv.pack_conv2d(wt, b, stride=s, padding=p)
    whole = _conv.pack_conv2d(wt, b, stride=s, padding=p)
    whole.algorithm = "igemm"
    res = rng.standard_normal(pc.output_shape(x.shape)).astype(np.float32)
    prev = modulekit.get_num_threads()
    try:
        with modulekit.float32_matmul_precision("medium"):
            assert pc.algorithm_for(x.shape) == "igemm-bf16-rows"
            assert whole.algorithm_for(x.shape) == "igemm-bf16"
            want = whole(x, activation="relu", residual=res)
            for nt in (1, 2, 3):
                modulekit.set_num_threads(nt)
                assert np.array_equal(pc(x, activation="relu", residual=res), want), nt
    finally:
        modulekit.set_num_threads(prev)
    _check(want, x, wt, b, (s, s), (p,) * 4, (1, 1), 1, "relu", res)
    assert pc.algorithm_for(x.shape) == "igemm-rows"  # float32 bands outside "medium"


@needs_bf16
def test_bfloat16_weights_round_like_float32_ones(bf16_path, rng):
    """A layer stored in bfloat16 computes under "medium" from its stored bits: the same
    result as float32 weights that round to them."""
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    p32 = _conv.pack_conv2d(w, None, stride=2, padding=1)
    p16 = _conv.pack_conv2d(w, None, stride=2, padding=1, storage="bfloat16")
    with modulekit.float32_matmul_precision("medium"):
        assert p16.algorithm_for(x.shape) == "igemm-bf16"
        assert np.array_equal(p16(x), p32(x))


@needs_bf16
def test_what_keeps_float32_compute(bf16_path, rng):
    """Depthwise, float16 and float64 layers keep their float32 (float64) compute under
    "medium", and so does everything below the avx512 level or with bfloat16 compute off.
    Winograd layers (3x3 stride 1 where the cost model picks it or a tile is forced) keep
    float32 on the AVX512-BF16 path (there Winograd F(4x4) beats the bfloat16 implicit GEMM);
    on AMX they compute in bfloat16 unless a Winograd tile is forced."""
    x = rng.standard_normal((1, 64, 28, 28)).astype(np.float32)
    w3 = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    wino = _conv.pack_conv2d(w3, None, padding=1)
    forced = _conv.pack_conv2d(w3, None, padding=1)
    forced.algorithm = "winograd-2x2"
    dw = _conv.pack_conv2d(rng.standard_normal((64, 1, 3, 3)).astype(np.float32), None,
                           padding=1, groups=64)
    f16 = _conv.pack_conv2d(w3, None, stride=2, padding=1, storage="float16")
    f64 = _conv.pack_conv2d(w3.astype(np.float64), None, stride=2, padding=1)
    assert wino.algorithm_for(x.shape).startswith("winograd")
    with modulekit.float32_matmul_precision("medium"):
        if bf16_path == "amx":
            assert wino.algorithm_for(x.shape) == "igemm-bf16"
        else:
            assert wino.algorithm_for(x.shape).startswith("winograd")
        assert forced.algorithm_for(x.shape) == "winograd-2x2"
        forced_s2 = _conv.pack_conv2d(w3, None, stride=2, padding=1)
        forced_s2.algorithm = "winograd-2x2"  # no Winograd at stride 2: the implicit GEMM
        assert forced_s2.algorithm_for(x.shape) == "igemm-bf16"
        assert dw.algorithm_for(x.shape) == "depthwise"
        assert f16.algorithm_for(x.shape) == "igemm"
        assert f64.algorithm_for(x.astype(np.float64).shape) == "float64"
        wino.algorithm = "igemm"  # the implicit GEMM forced: bfloat16 under "medium"
        assert wino.algorithm_for(x.shape) == "igemm-bf16"
        _isa.set_isa("avx2")
        assert wino.algorithm_for(x.shape) == "igemm"
        _isa.set_isa("avx512")
        _isa.set_bf16("none")
        assert wino.algorithm_for(x.shape) == "igemm"


@needs_bf16
def test_paths_agree_within_rounding(rng):
    """Where the CPU has both bfloat16 paths, they compute the same rounded products (sums in
    other orders): AMX's pair image and packed tiles against AVX512-BF16's."""
    if "amx" not in _isa.available_bf16():
        pytest.skip("no AMX bfloat16 path on this CPU")
    _isa.set_isa("avx512")
    for cin, k in ((64, 3), (3, 7), (96, 1)):
        w = rng.standard_normal((48, cin, k, k)).astype(np.float32)
        x = rng.standard_normal((2, cin, 17, 15)).astype(np.float32)
        pc = _conv.pack_conv2d(w, None, stride=2, padding=k // 2)
        out = {}
        for path in ("avx512bf16", "amx"):
            _isa.set_bf16(path)
            with modulekit.float32_matmul_precision("medium"):
                assert pc.algorithm_for(x.shape) == "igemm-bf16"
                out[path] = pc(x)
        _check(out["amx"], x, w, None, (2, 2), (k // 2,) * 4, (1, 1), 1)
        np.testing.assert_allclose(out["amx"], out["avx512bf16"], rtol=1e-4, atol=1e-3)


@needs_bf16
def test_module_under_medium_and_back(bf16_path, rng):
    """nn.Conv2d follows the calling thread's precision at each call; "highest" afterwards
    gives the float32 bits again; the bfloat16 panels are not pickled."""
    import pickle

    conv = nn.Conv2d(16, 32, 3, stride=2, padding=1).eval()
    w, b = conv.weight.numpy().copy(), conv.bias.numpy().copy()
    x = rng.standard_normal((2, 16, 18, 18)).astype(np.float32)
    y32 = conv(x)
    with modulekit.float32_matmul_precision("medium"):
        y16 = conv(x)
    _check(y16, x, w, b, (2, 2), (1, 1, 1, 1), (1, 1), 1)
    assert np.array_equal(conv(x), y32)
    clone = pickle.loads(pickle.dumps(conv))
    with modulekit.float32_matmul_precision("medium"):
        assert np.array_equal(clone(x), y16)


@needs_bf16
def test_resnet18_medium_close_to_float32(bf16_path, rng):
    from modulekit import models

    model = models.resnet18().eval()
    x = rng.standard_normal((2, 3, 64, 64)).astype(np.float32)
    ref = model(x)
    with modulekit.float32_matmul_precision("medium"):
        y = model(x)
    cos = (y * ref).sum(1) / np.linalg.norm(y, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 0.999
    assert not np.array_equal(y, ref)
