"""Conv1d, Conv3d, ConvTranspose1d/2d/3d, padding_mode for every conv, and their functional
forms, against torch (the oracle)."""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import modulekit  # noqa: E402
import modulekit.nn as mnn  # noqa: E402
import modulekit.nn.functional as F  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5

CONV = {1: "Conv1d", 2: "Conv2d", 3: "Conv3d"}
TRANSPOSE = {1: "ConvTranspose1d", 2: "ConvTranspose2d", 3: "ConvTranspose3d"}


def _pair_modules(name, *args, dtype=None, **kwargs):
    """A torch module (eval, seeded) and its modulekit twin holding the same weights."""
    torch.manual_seed(0)
    tm = getattr(torch.nn, name)(*args, **kwargs).eval()
    if dtype is not None:
        tm = tm.to(dtype)
    mm = getattr(mnn, name)(*args, **kwargs, dtype=str(tm.weight.dtype).replace("torch.", ""))
    mm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return tm, mm


def _check(tm, mm, x, rtol=RTOL, atol=ATOL, **kwargs):
    with torch.no_grad():
        expected = tm(x, **kwargs).numpy()
    got = mm(x.numpy(), **kwargs)
    assert isinstance(got, np.ndarray)
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)
    return got


# ---------------------------------------------------------------------------------- options

CONV_CASES = [
    # kernel, stride, padding, dilation, groups
    (3, 1, 0, 1, 1),
    (3, 2, 1, 1, 1),
    (5, 3, 2, 2, 1),
    (2, 1, "same", 3, 1),
    (4, 1, "same", 1, 2),
    (3, 1, "valid", 1, 3),
    (1, 2, 0, 1, 1),
    (3, 2, 2, 1, 6),
]


@pytest.mark.parametrize("nd", [1, 3])
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_options(isa, nd, case):
    k, s, p, d, g = case
    cin, cout = 6, 12 if g != 6 else 6
    tm, mm = _pair_modules(CONV[nd], cin, cout, k, stride=s, padding=p, dilation=d, groups=g)
    size = (11,) if nd == 1 else (7, 6, 9)
    torch.manual_seed(1)
    _check(tm, mm, torch.randn((2, cin) + size))


@pytest.mark.parametrize("k,s,p,mode", [
    (3, 2, 0, "zeros"), (3, 1, 1, "zeros"), (4, 1, "same", "zeros"), (1, 1, 0, "zeros"),
    (10, 5, 0, "zeros"),
    (5, 3, 2, "reflect"), (2, 2, 1, "circular"), (3, 1, "same", "replicate"),
])
def test_conv1d_gemm_path(isa, k, s, p, mode):
    """groups 1, dilation 1: one packed GEMM per image over channels-last
    input (the result a channels-last view), also fed a channels-last input."""
    tm, mm = _pair_modules("Conv1d", 16, 24, k, stride=s, padding=p, padding_mode=mode)
    mm.initialize()
    assert mm._packed.gemm
    torch.manual_seed(11)
    x = torch.randn(3, 16, 37)
    y = _check(tm, mm, x)
    _check(tm, mm, x[1])  # unbatched
    xl = np.ascontiguousarray(x.numpy().transpose(0, 2, 1)).transpose(0, 2, 1)
    np.testing.assert_allclose(mm(xl), y, rtol=RTOL, atol=ATOL)
    # a stack of layers: each output is the next one's channels-last input
    tm2, mm2 = _pair_modules("Conv1d", 24, 8, 3)
    with torch.no_grad():
        expected = tm2(tm(x)).numpy()
    np.testing.assert_allclose(mm2(mm(x.numpy())), expected, rtol=RTOL, atol=ATOL)


def test_conv1d_paths():
    """Grouped or dilated Conv1d run as a height-1 2-D convolution; one input channel (as
    wav2vec2's first layer) is a GEMM with K = kernel_size."""
    for kwargs, gemm in (({"groups": 2}, False), ({"dilation": 2}, False), ({}, True)):
        cin = 2 if kwargs else 1
        tm, mm = _pair_modules("Conv1d", cin, 8, 10, stride=5, **kwargs)
        mm.initialize()
        assert mm._packed.gemm is gemm
        _check(tm, mm, torch.randn(2, cin, 160))


def test_conv1d_gemm_path_dtypes():
    tm, mm = _pair_modules("Conv1d", 16, 8, 3, stride=2, padding=1, dtype=torch.float64)
    assert mm(np.zeros((1, 16, 9))).dtype == np.float64 and mm._packed.gemm
    _check(tm, mm, torch.randn(2, 16, 21, dtype=torch.float64), rtol=1e-10, atol=1e-12)
    tm, mm = _pair_modules("Conv1d", 16, 8, 3)
    _check(tm, mm, torch.randn(0, 16, 9))  # an empty batch
    mm.to("bfloat16")
    x = torch.randn(2, 16, 9)
    with torch.no_grad():
        expected = torch.nn.functional.conv1d(
            x, tm.weight.bfloat16().float(), tm.bias.bfloat16().float()).numpy()
    np.testing.assert_allclose(mm(x.numpy()), expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("padding", [1, 2, "same"])
def test_padding_modes(isa, nd, mode, padding):
    k = 3 if padding != "same" else 4  # an even kernel: 'same' pads unevenly
    tm, mm = _pair_modules(CONV[nd], 3, 5, k, padding=padding, padding_mode=mode)
    size = {1: (9,), 2: (6, 7), 3: (4, 5, 6)}[nd]
    torch.manual_seed(2)
    _check(tm, mm, torch.randn((2, 3) + size))
    assert f"padding_mode={mode}" in repr(mm) and repr(mm) == repr(tm)


def test_padding_mode_strided_dilated_grouped(isa):
    tm, mm = _pair_modules("Conv2d", 4, 8, (3, 2), stride=(2, 1), padding=(2, 1),
                           dilation=(1, 2), groups=2, padding_mode="reflect")
    torch.manual_seed(3)
    _check(tm, mm, torch.randn(3, 4, 9, 8))


def test_conv2d_padding_mode_not_fused_with_bn():
    torch.manual_seed(0)
    tseq = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, padding_mode="circular"),
        torch.nn.BatchNorm2d(8), torch.nn.ReLU()).eval()
    with torch.no_grad():
        tseq[1].running_mean.uniform_(-1, 1)
        tseq[1].running_var.uniform_(0.5, 2)
    mseq = mnn.Sequential(mnn.Conv2d(3, 8, 3, padding=1, padding_mode="circular"),
                          mnn.BatchNorm2d(8), mnn.ReLU())
    mseq.load_state_dict({k: v.numpy() for k, v in tseq.state_dict().items()})
    mseq.eval()
    x = torch.randn(2, 3, 7, 7)
    with torch.no_grad():
        expected = tseq(x).numpy()
    np.testing.assert_allclose(mseq(x.numpy()), expected, rtol=RTOL, atol=ATOL)


TRANSPOSE_CASES = [
    # kernel, stride, padding, output_padding, dilation, groups
    (3, 1, 0, 0, 1, 1),
    (4, 2, 1, 0, 1, 1),
    (3, 2, 1, 1, 1, 1),
    (5, 3, 2, 2, 1, 1),
    (3, 2, 0, 1, 2, 1),
    (2, 3, 0, 0, 1, 1),  # stride past the kernel: phases without taps hold the bias
    (3, 2, 4, 0, 3, 3),  # padding crops more than the kernel reaches
    (1, 2, 0, 1, 1, 2),
    (4, 4, 1, 3, 2, 6),
]


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("case", TRANSPOSE_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose_options(isa, nd, case, bias):
    k, s, p, op, d, g = case
    cin, cout = 6, 12 if g != 6 else 6
    tm, mm = _pair_modules(TRANSPOSE[nd], cin, cout, k, stride=s, padding=p,
                           output_padding=op, dilation=d, groups=g, bias=bias)
    size = {1: (7,), 2: (5, 6), 3: (3, 4, 5)}[nd]
    torch.manual_seed(4)
    _check(tm, mm, torch.randn((2, cin) + size))
    assert repr(mm) == repr(tm)


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("size,padding,output_padding", [
    (1, 0, 0), (1, 2, 1), (2, 3, 0), (4, 1, 1), (3, 4, 1),
])
def test_conv_transpose_merged_phases(isa, nd, size, padding, output_padding):
    """kernel a multiple of the stride: every phase has the same sub-kernel and they run as
    one convolution; tiny inputs, paddings that crop past the input, phases without output."""
    tm, mm = _pair_modules(TRANSPOSE[nd], 4, 6, 4, stride=2, padding=padding,
                           output_padding=output_padding, groups=2)
    mm.initialize()
    assert mm._packed.merged is not None
    torch.manual_seed(12)
    x = torch.randn((2, 4) + (size,) * nd)
    with torch.no_grad():
        expected = tm(x).numpy()
    if 0 in expected.shape:
        assert mm(x.numpy()).shape == expected.shape
    else:
        _check(tm, mm, x)


@pytest.mark.parametrize("case", [
    # kernel, stride, padding, output_padding, dilation, input size
    (4, 2, 1, 0, 1, (16, 16)),  # DCGAN's upsampling: four 2x2 phases
    (4, 2, 1, 1, 1, (5, 6)),  # an odd output: the phases' output counts differ
    (4, 2, 3, 1, 1, (5, 4)),  # padding crops past the kernel's reach
    (2, 2, 0, 0, 1, (7, 5)),  # U-Net's k2 s2: 1x1 phases, no shifts
    (6, 3, 2, 2, 1, (4, 5)),  # nine phases
    ((4, 3), (2, 1), (1, 1), (0, 0), 1, (6, 5)),  # strided along one axis only
    (4, 2, 1, 0, 3, (6, 6)),  # dilation 3: sub-kernels dilated 3
])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_conv_transpose2d_shifted_phases(isa, case, dtype):
    """Output channels in whole panels (16 a phase): each phase's block reads the padded input
    at its own offset (PackedConv2d.forward_shifted) and computes its outputs alone."""
    k, s, p, op, d, size = case
    tm, mm = _pair_modules("ConvTranspose2d", 5, 16, k, stride=s, padding=p,
                           output_padding=op, dilation=d)
    if dtype == "float16":  # float16 weights widened in the kernel: torch's, rounded alike
        mm.to("float16")
        tm.half().float()
    mm.initialize()
    assert mm._packed.merged is not None
    torch.manual_seed(6)
    _check(tm, mm, torch.randn((2, 5) + size))


def test_conv_transpose2d_under_medium_precision():
    """Under float32_matmul_precision("medium") on a bfloat16 path the merged phases do not take
    the shifted blocks (forward_shifted declines): every block computes the union of the windows
    and the scatter places them; within bfloat16's rounding of torch's float32 result."""
    tm, mm = _pair_modules("ConvTranspose2d", 24, 16, 4, stride=2, padding=1)
    mm.initialize()
    torch.manual_seed(7)
    x = torch.randn(2, 24, 9, 8)
    with torch.no_grad():
        expected = tm(x).numpy()
    with modulekit.float32_matmul_precision("medium"):
        got = mm(x.numpy())
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-2 * scale)


def test_conv_transpose_mixed_axes(isa):
    tm, mm = _pair_modules("ConvTranspose3d", 4, 6, (2, 3, 4), stride=(1, 2, 3),
                           padding=(0, 1, 2), output_padding=(0, 1, 2), dilation=(2, 1, 1))
    torch.manual_seed(5)
    _check(tm, mm, torch.randn(2, 4, 3, 5, 4))


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_conv_transpose_output_size(nd):
    tm, mm = _pair_modules(TRANSPOSE[nd], 4, 3, 3, stride=3, padding=1)
    size = {1: (5,), 2: (4, 5), 3: (3, 4, 2)}[nd]
    x = torch.randn((2, 4) + size)
    lo = [(n - 1) * 3 - 2 + 2 + 1 for n in size]
    for extra in itertools.product(range(3), repeat=nd):
        out = [a + e for a, e in zip(lo, extra)]
        _check(tm, mm, x, output_size=out)
    # with the batch and channel dimensions, as torch allows
    _check(tm, mm, x, output_size=[2, 3] + lo)
    with pytest.raises(ValueError, match=rf"ConvTranspose{nd}d: requested an output size"):
        mm(x.numpy(), output_size=[a + 3 for a in lo])
    with pytest.raises(ValueError, match="output_size must have"):
        mm(x.numpy(), output_size=[5] * (nd + 1))


def test_conv_transpose_zero_output():
    tm, mm = _pair_modules("ConvTranspose1d", 3, 2, 1, stride=3, padding=2, dilation=3)
    _check(tm, mm, torch.randn(2, 3, 2))  # output length 0, as torch


# ------------------------------------------------------------------------- shapes and dtypes


@pytest.mark.parametrize("name,size", [
    ("Conv1d", (13,)), ("Conv3d", (3, 5, 4)), ("ConvTranspose1d", (13,)),
    ("ConvTranspose2d", (5, 3)), ("ConvTranspose3d", (2, 3, 4)),
])
def test_unbatched_and_odd_shapes(isa, name, size):
    tm, mm = _pair_modules(name, 5, 7, 3, stride=2, padding=1)
    torch.manual_seed(6)
    _check(tm, mm, torch.randn((5,) + size))  # unbatched
    _check(tm, mm, torch.randn((3, 5) + size))
    empty = mm(np.zeros((0, 5) + size, np.float32))
    with torch.no_grad():
        assert empty.shape == tuple(tm(torch.zeros((0, 5) + size)).shape)


@pytest.mark.parametrize("name,nd", [
    ("Conv1d", 1), ("Conv2d", 2), ("Conv3d", 3), ("ConvTranspose1d", 1),
    ("ConvTranspose2d", 2), ("ConvTranspose3d", 3),
])
def test_non_contiguous_input(isa, name, nd):
    kwargs = {"padding_mode": "reflect"} if not name.startswith("ConvT") else {}
    tm, mm = _pair_modules(name, 4, 6, 3, stride=2, padding=1, **kwargs)
    size = {1: (18,), 2: (10, 12), 3: (6, 8, 10)}[nd]
    big = torch.randn((3, 8) + size)
    x = big[:, ::2][(slice(None), slice(None)) + (slice(None, None, 2),) * nd]  # strided
    assert not x.is_contiguous()
    with torch.no_grad():
        expected = tm(x).numpy()
    xn = big.numpy()[:, ::2][(slice(None), slice(None)) + (slice(None, None, 2),) * nd]
    np.testing.assert_allclose(mm(xn), expected, rtol=RTOL, atol=ATOL)
    # channels-last memory (a transposed view)
    xt = np.moveaxis(np.ascontiguousarray(np.moveaxis(x.numpy(), 1, -1)), -1, 1)
    np.testing.assert_allclose(mm(xt), expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", ["Conv1d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
                                  "ConvTranspose3d"])
def test_float64(name):
    tm, mm = _pair_modules(name, 4, 6, 3, stride=2, padding=1, groups=2, dtype=torch.float64)
    nd = int(name[-2])
    size = {1: (9,), 2: (5, 6), 3: (3, 4, 5)}[nd]
    torch.manual_seed(7)
    got = _check(tm, mm, torch.randn((2, 4) + size, dtype=torch.float64), rtol=1e-10,
                 atol=1e-12)
    assert got.dtype == np.float64


@pytest.mark.parametrize("name", ["Conv1d", "ConvTranspose2d"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_storage(name, dtype):
    """16-bit layers store 16-bit weights and compute in float32."""
    torch.manual_seed(8)
    tm = getattr(torch.nn, name)(4, 6, 3, stride=2).eval().to(getattr(torch, dtype))
    mm = getattr(mnn, name)(4, 6, 3, stride=2)
    mm.to(dtype)
    mm.load_state_dict({k: v.float().numpy() for k, v in tm.state_dict().items()})
    size = (9,) if name == "Conv1d" else (5, 6)
    x = torch.randn((2, 4) + size)
    ref = getattr(torch.nn, name)(4, 6, 3, stride=2).eval()
    ref.load_state_dict({k: v.float() for k, v in tm.state_dict().items()})
    with torch.no_grad():
        expected = ref(x).numpy()
    np.testing.assert_allclose(mm(x.numpy()), expected, rtol=RTOL, atol=ATOL)
    assert mm.state_dict(include_packed=True)["weight"].dtype.name == dtype


# ----------------------------------------------------------------------- module behaviour


@pytest.mark.parametrize("name", ["Conv1d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
                                  "ConvTranspose3d"])
def test_state_dict_init_and_repack(name):
    torch.manual_seed(0)
    tm = getattr(torch.nn, name)(4, 6, 3, groups=2)
    mm = getattr(mnn, name)(4, 6, 3, groups=2)
    tsd, msd = tm.state_dict(), mm.state_dict()
    assert list(tsd) == list(msd)
    for k in tsd:
        assert tuple(tsd[k].shape) == msd[k].shape
    # torch's initialisation bounds: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = w.shape[1]*k^n
    w = msd["weight"].numpy()
    bound = 1 / np.sqrt(w.shape[1] * np.prod(w.shape[2:]))
    assert np.abs(w).max() <= bound and np.abs(msd["bias"].numpy()).max() <= bound
    assert np.abs(w).max() > 0.5 * bound
    # packing releases the weights; the packed values round-trip exactly
    mm.initialize()
    assert "weight" not in mm.state_dict()
    packed = mm.state_dict(include_packed=True)
    np.testing.assert_array_equal(packed["weight"].numpy(), w)
    # loading re-packs
    mm.load_state_dict({k: v.numpy() for k, v in tsd.items()})
    nd = int(name[-2])
    x = torch.randn((2, 4) + (5,) * nd)
    _check(tm.eval(), mm, x)
    np.testing.assert_array_equal(mm.state_dict(include_packed=True)["weight"].numpy(),
                                  tsd["weight"].numpy())


@pytest.mark.parametrize("name", ["Conv1d", "Conv3d", "ConvTranspose2d"])
def test_to_float64_and_pickle(name):
    tm, mm = _pair_modules(name, 3, 4, 3, stride=2)
    nd = int(name[-2])
    x = torch.randn((2, 3) + (6,) * nd)
    _check(tm, mm, x)
    clone = pickle.loads(pickle.dumps(mm))
    _check(tm, clone, x)
    mm.to("float64")
    got = mm(x.numpy().astype(np.float64))
    assert got.dtype == np.float64
    with torch.no_grad():
        np.testing.assert_allclose(got, tm.double()(x.double()).numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name,args,shape", [
    ("ConvTranspose2d", (3, 4, 4, 2, 1), (1, 3, 5, 5)),  # merged phases
    ("ConvTranspose2d", (3, 4, 3, 2, 1), (1, 3, 5, 5)),  # separate phases
    ("Conv1d", (16, 4, 3), (2, 16, 9)),  # the GEMM path
    ("Conv3d", (3, 4, 3), (1, 3, 4, 5, 5)),
])
def test_share_memory(name, args, shape):
    tm, mm = _pair_modules(name, *args)
    x = torch.randn(*shape)
    mm.initialize()
    mm.share_memory()
    assert mm._packed.is_shared
    clone = pickle.loads(pickle.dumps(mm))
    _check(tm, clone, x)


# ------------------------------------------------------------------------------ functional


@pytest.mark.parametrize("nd", [1, 3])
def test_functional_conv(isa, nd):
    torch.manual_seed(9)
    x = torch.randn((2, 6) + (7,) * nd)
    w = torch.randn((4, 3) + (3,) * nd)
    b = torch.randn(4)
    fn = getattr(F, f"conv{nd}d")
    tfn = getattr(torch.nn.functional, f"conv{nd}d")
    for kwargs in ({}, {"stride": 2, "padding": 1, "dilation": 2, "groups": 2},
                   {"padding": "same", "groups": 2}, {"padding": "valid", "groups": 2}):
        g = kwargs.get("groups", 1)
        xx = x if g == 2 else x[:, :3]
        got = fn(xx.numpy(), w.numpy(), b.numpy(), **kwargs)
        np.testing.assert_allclose(got, tfn(xx, w, b, **kwargs).numpy(), rtol=RTOL, atol=ATOL)
    got = fn(x[0, :3].numpy(), w.numpy())  # unbatched, no bias
    np.testing.assert_allclose(got, tfn(x[0, :3], w).numpy(), rtol=RTOL, atol=ATOL)
    got = fn(x[:, :3].double().numpy(), w.double().numpy())
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, tfn(x[:, :3].double(), w.double()).numpy(), rtol=1e-10)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_functional_conv_transpose(isa, nd):
    torch.manual_seed(10)
    x = torch.randn((2, 6) + (5,) * nd)
    w = torch.randn((6, 2) + (3,) * nd)
    b = torch.randn(4)
    fn = getattr(F, f"conv_transpose{nd}d")
    tfn = getattr(torch.nn.functional, f"conv_transpose{nd}d")
    kwargs = dict(stride=2, padding=1, output_padding=1, groups=2, dilation=1)
    got = fn(x.numpy(), w.numpy(), b.numpy(), **kwargs)
    np.testing.assert_allclose(got, tfn(x, w, b, **kwargs).numpy(), rtol=RTOL, atol=ATOL)
    # positional, torch's order: stride, padding, output_padding, groups, dilation
    got = fn(x.numpy(), w.numpy(), None, 3, 0, 1, 2, 2)
    np.testing.assert_allclose(got, tfn(x, w, None, 3, 0, 1, 2, 2).numpy(), rtol=RTOL,
                               atol=ATOL)


# ----------------------------------------------------------------------------- bad input


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="Conv1d: in_channels must be divisible by groups"):
        mnn.Conv1d(5, 4, 3, groups=2)
    with pytest.raises(ValueError, match="Conv3d: out_channels must be a positive int"):
        mnn.Conv3d(4, 0, 3)
    with pytest.raises(ValueError, match="Conv1d: padding_mode must be one of"):
        mnn.Conv1d(4, 4, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match='ConvTranspose2d: only "zeros" padding mode'):
        mnn.ConvTranspose2d(4, 4, 3, padding_mode="reflect")
    with pytest.raises(ValueError, match="ConvTranspose1d: output_padding .* must be smaller"):
        mnn.ConvTranspose1d(4, 4, 3, stride=2, output_padding=2)
    with pytest.raises(ValueError, match="Conv3d: padding='same' is not supported for strided"):
        mnn.Conv3d(4, 4, 3, stride=2, padding="same")
    with pytest.raises(TypeError, match="Conv3d: kernel_size must be an int or a tuple of 3"):
        mnn.Conv3d(4, 4, (3, 3))
    with pytest.raises(ValueError, match="ConvTranspose3d: padding must be an int"):
        mnn.ConvTranspose3d(4, 4, 3, padding="same")
    with pytest.raises(ValueError, match="Conv1d: kernel_size .* must be positive"):
        mnn.Conv1d(4, 4, 0)
    with pytest.raises(TypeError, match="Conv1d: dtype must be a floating type"):
        mnn.Conv1d(4, 4, 3, dtype="int32")


@pytest.mark.parametrize("name", ["Conv1d", "Conv3d", "ConvTranspose1d", "ConvTranspose3d"])
def test_bad_input_names_layer(name):
    nd = int(name[-2])
    mm = getattr(mnn, name)(4, 6, 3)
    with pytest.raises(ValueError, match=rf"{name}: expected input with 4 channels, got 5"):
        mm(np.zeros((2, 5) + (6,) * nd, np.float32))
    with pytest.raises(ValueError, match=rf"{name}: expected a {nd + 1}-D .* or {nd + 2}-D"):
        mm(np.zeros((2, 4) + (6,) * (nd + 1), np.float32))
    with pytest.raises(ValueError, match=rf"{name}: expected non-empty spatial"):
        mm(np.zeros((2, 4) + (0,) * nd, np.float32))
    with pytest.raises(TypeError, match=name):
        mm(np.zeros((2, 4) + (6,) * nd, np.complex64))


def test_bad_input_sizes():
    with pytest.raises(ValueError, match=r"Conv1d\(.*\): the padded input size per channel"):
        mnn.Conv1d(2, 2, 5)(np.zeros((1, 2, 4), np.float32))
    with pytest.raises(ValueError, match=r"Conv1d: padding_mode='reflect' needs each padding"):
        mnn.Conv1d(2, 2, 3, padding=3, padding_mode="reflect")(np.zeros((1, 2, 3), np.float32))
    with pytest.raises(ValueError, match=r"Conv2d: padding_mode='circular' needs"):
        mnn.Conv2d(2, 2, 3, padding=4, padding_mode="circular")(
            np.zeros((1, 2, 3, 5), np.float32))
    with pytest.raises(ValueError, match="conv1d: expected input with 6 channels"):
        F.conv1d(np.zeros((1, 5, 8), np.float32), np.zeros((4, 3, 3), np.float32), groups=2)
    with pytest.raises(ValueError, match="conv_transpose2d: weight must be 4-D"):
        F.conv_transpose2d(np.zeros((1, 5, 8, 8), np.float32), np.zeros((5, 3, 3), np.float32))
    with pytest.raises(ValueError, match="conv3d: bias must have shape"):
        F.conv3d(np.zeros((1, 2, 4, 4, 4), np.float32), np.zeros((3, 2, 1, 1, 1), np.float32),
                 np.zeros(4, np.float32))


def test_error_leaves_layer_usable():
    tm, mm = _pair_modules("ConvTranspose2d", 4, 6, 3, stride=2)
    with pytest.raises(ValueError):
        mm(np.zeros((1, 3, 5, 5), np.float32))
    _check(tm, mm, torch.randn(1, 4, 5, 5))


def test_compiled_module():
    """A compiled forward with the layers and a functional conv: the same values, no
    fallback warning."""
    import warnings

    class Net(mnn.Module):
        def __init__(self):
            super().__init__()
            self.a = mnn.Conv1d(16, 8, 3, padding=1, padding_mode="reflect")
            self.b = mnn.ConvTranspose1d(8, 4, 4, 2, 1)

        def forward(self, x):
            return F.conv1d(self.b(self.a(x)), np.ones((2, 4, 3), np.float32))

    net = Net()
    x = np.random.default_rng(0).standard_normal((2, 16, 11)).astype(np.float32)
    eager = net(x)
    net.compile()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        net(x)
        np.testing.assert_array_equal(net(x), eager)


def test_packed_conv2d_with_padding(isa):
    """PackedConv2d.with_padding: another zero padding over the same packed weights."""
    from modulekit._ext import _conv

    torch.manual_seed(13)
    w, b = torch.randn(6, 4, 3, 2), torch.randn(6)
    x = torch.randn(2, 4, 7, 6)
    packed = _conv.pack_conv2d(w.numpy(), b.numpy(), stride=(2, 1))
    for pads in ((0, 0, 0, 0), (1, 2, 0, 3), (4, 0, 2, 1)):
        other = packed.with_padding(pads)
        assert other.padding == pads and other.stride == packed.stride
        expected = torch.nn.functional.conv2d(
            torch.nn.functional.pad(x, (pads[1], pads[3], pads[0], pads[2])), w, b, (2, 1))
        np.testing.assert_allclose(other.forward(x.numpy()), expected.numpy(), rtol=RTOL,
                                   atol=ATOL)
        got_w, got_b = other.unpack()
        np.testing.assert_array_equal(got_w, w.numpy())
    assert packed.padding == (0, 0, 0, 0)  # unchanged
    with pytest.raises(ValueError, match="with_padding: padding must be non-negative"):
        packed.with_padding((0, -1, 0, 0))
    with pytest.raises(TypeError, match="with_padding: padding must be 4 ints"):
        packed.with_padding((1, 1))
    with pytest.raises(ValueError, match="out of range"):
        packed.with_padding((0, 2**40, 0, 0))


def test_public_names():
    for name in ("Conv1d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"):
        assert name in mnn.__all__ and getattr(mnn, name).__module__.endswith("conv_nd")
    for name in ("conv1d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"):
        assert name in F.__all__
    assert modulekit.nn.Conv1d is mnn.modules.Conv1d
