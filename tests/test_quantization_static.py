"""Static int8 quantization: the qu8 convolution kernels (kernels/qgemm/qconv-driver.c)
against an exact NumPy model of the scheme on every ISA path, QuantizedConv2d's state and
errors, and quantize_static (calibration, BatchNorm folding, the compiled plan's int8
hand-off) against the float32 model."""

import pickle

import numpy as np
import pytest

import modulekit
from modulekit import models, nn
from modulekit._ext import _isa, _qgemm
from modulekit.quantization import (
    DynamicQuantizedLinear,
    QuantizedConv2d,
    activation_qparams,
    quantize_static,
)


def quantize_ref(x, scale, zp):
    """NCHW floats -> NHWC bytes, as mk_qu8_requantize: rint(x * float32(1 / scale))."""
    inv = np.float32(1) / np.float32(scale)
    t = np.clip(np.nan_to_num(np.asarray(x, np.float32) * inv, nan=-512), -512, 512)
    return np.clip(np.rint(t) + zp, 0, 255).astype(np.uint8).transpose(0, 2, 3, 1)


def conv_ref(xq, zp, s_in, q, ws, b, stride, pad, dil):
    """The integer sums of the convolution of NHWC bytes (zero point zp) with int8 weights,
    then float32(sum) * float32(s_in * ws) + b with one rounding (NHWC float32)."""
    n, h, w, c = xq.shape
    o, _, kh, kw = q.shape
    xp = np.pad(xq.astype(np.int64) - zp, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    acc = np.zeros((n, oh, ow, o), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dil:i * dil + stride * (oh - 1) + 1:stride,
                       j * dil:j * dil + stride * (ow - 1) + 1:stride]
            acc += patch @ q[:, :, i, j].astype(np.int64).T
    scale = (np.float32(s_in) * ws).astype(np.float32).astype(np.float64)
    bias = np.zeros(o) if b is None else b.astype(np.float64)
    return (acc.astype(np.float32).astype(np.float64) * scale + bias).astype(np.float32)


def requant_ref(y, scale, zp):
    return quantize_ref(y.transpose(0, 3, 1, 2), scale, zp)


GEOMETRIES = [  # n, c, h, w, out, k, stride, pad, dilation
    (1, 3, 17, 19, 5, 3, 1, 1, 1), (2, 16, 9, 8, 40, 3, 2, 1, 1), (1, 64, 14, 14, 64, 1, 2, 0, 1),
    (1, 8, 12, 12, 33, 1, 1, 0, 1), (1, 5, 11, 10, 7, 7, 2, 3, 1), (1, 4, 9, 9, 9, 3, 1, 2, 2),
    (3, 32, 5, 6, 70, 3, 1, 1, 1),
    (2, 256, 5, 5, 520, 3, 1, 1, 1),  # 1.2 MB of weights: every row in one block
]


def _layer(rng, c, o, k, stride, pad, dil, bias=True, zp=128):
    w = rng.standard_normal((o, c, k, k)).astype(np.float32)
    q, ws = _qgemm.quantize_weight(w.reshape(o, -1))
    b = rng.standard_normal(o).astype(np.float32) if bias else None
    s_in = np.float32(0.03)
    packed = _qgemm.pack_qconv2d(q.reshape(w.shape), ws, b, s_in, zp, stride, pad, dil)
    return packed, q.reshape(w.shape), ws, b, s_in


@pytest.mark.parametrize("geom", GEOMETRIES)
def test_qconv_matches_the_scheme(isa, rng, geom):
    n, c, h, w, o, k, stride, pad, dil = geom
    packed, q, ws, b, s_in = _layer(rng, c, o, k, stride, pad, dil, bias=o % 2 == 1, zp=100)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32) * 2
    xq = quantize_ref(x, s_in, 100)
    assert np.array_equal(_qgemm.quantize_per_tensor(x, s_in, 100).data, xq)
    ref = conv_ref(xq, 100, s_in, q, ws, b, stride, pad, dil)
    y = packed.forward(x)  # float in, float out (NCHW)
    np.testing.assert_allclose(y, ref.transpose(0, 3, 1, 2), rtol=1e-6, atol=1e-5)
    # bytes in, ReLU, bytes out
    qa = _qgemm.quantize_per_tensor(x, s_in, 100)
    out = packed.forward(qa, "relu", None, (0.05, 7))
    assert isinstance(out, _qgemm.QuantizedArray) and out.shape == y.shape
    assert np.array_equal(out.data, requant_ref(np.maximum(ref, 0), 0.05, 7))
    # a residual in bytes, ReLU6, floats out
    res = _qgemm.quantize_per_tensor(rng.standard_normal(y.shape).astype(np.float32), 0.02, 128)
    with_res = ref + (res.data.astype(np.float32) - 128) * np.float32(0.02)
    y6 = packed.forward(qa, "relu6", res)
    np.testing.assert_allclose(y6, np.clip(with_res, 0, 6).transpose(0, 3, 1, 2), rtol=1e-6,
                               atol=1e-5)
    # a float residual: added after the kernel
    yr = packed.forward(x, None, res.dequantize())
    np.testing.assert_allclose(yr, y + res.dequantize(), rtol=1e-6, atol=1e-5)


def test_forward_mean_is_the_pooled_forward(rng):
    """forward_mean: the global average pool of forward's result (NHWC floats averaged in
    place of the NCHW copy): plain, with a byte residual, a float residual, unbatched."""
    packed, *_ = _layer(rng, 24, 70, 1, 1, 0, 1)
    x = rng.standard_normal((2, 24, 7, 9)).astype(np.float32)
    res = _qgemm.quantize_per_tensor(rng.standard_normal((2, 70, 7, 9)), 0.05, 90)
    for act, r in ((None, None), ("relu6", None), ("relu", res), (None, res.dequantize())):
        got = packed.forward_mean(x, act, r)
        assert got.shape == (2, 70) and got.dtype == np.float32
        np.testing.assert_allclose(got, packed.forward(x, act, r).mean((2, 3)), rtol=2e-6,
                                   atol=1e-6)
    np.testing.assert_allclose(packed.forward_mean(x[0], "relu"),
                               packed.forward(x[0], "relu").mean((1, 2)), rtol=2e-6, atol=1e-6)


def test_every_path_gives_the_same_bits(rng):
    packed, *_ = _layer(rng, 24, 45, 3, 1, 1, 1)
    x = rng.standard_normal((2, 24, 13, 11)).astype(np.float32)
    res = _qgemm.quantize_per_tensor(rng.standard_normal((2, 45, 13, 11)), 0.05, 90)
    outs = []
    for isa in _isa.available_isas():
        previous = _isa.set_isa(isa)
        try:
            outs.append((packed.forward(x, "relu", res),
                         packed.forward(x, None, res, (0.1, 3)).data))
        finally:
            _isa.set_isa(previous)
    for y, yq in outs[1:]:
        assert np.array_equal(y, outs[0][0]) and np.array_equal(yq, outs[0][1])


def test_quantize_per_tensor_rounding_and_errors():
    x = np.array([[[[0.0, 0.05, 0.15, -0.05, 1e9, -1e9, np.nan, np.inf]]]], np.float32)
    qa = _qgemm.quantize_per_tensor(x, 0.1, 10)
    # half to even: 0.5 -> 0, 1.5 -> 2, -0.5 -> 0; saturating; NaN -> the smallest byte
    assert qa.data.ravel().tolist() == [10, 10, 12, 10, 255, 0, 0, 255]
    assert qa.shape == x.shape and qa.dequantize().shape == x.shape
    assert _qgemm.quantize_per_tensor(x[0], 0.1, 10).shape == x.shape[1:]
    assert np.asarray(_qgemm.quantize_per_tensor(x[0], 0.1, 10)).shape == x.shape[1:]
    for scale, zp in ((0, 0), (-1, 0), (np.inf, 0), (1, 256), (1, -1), (1, 0.5)):
        with pytest.raises(ValueError, match="scale|zero_point"):
            _qgemm.quantize_per_tensor(x, scale, zp)
    with pytest.raises(ValueError, match="expected a real"):
        _qgemm.quantize_per_tensor(np.zeros((3, 3)), 1, 0)


@pytest.mark.parametrize("shape", [(1, 3, 17, 29), (2, 5, 8, 8), (1, 1, 1, 70), (3, 2, 9, 1)])
def test_quantize_per_tensor_on_every_path(isa, rng, shape):
    """The NCHW -> NHWC conversion gives the scheme's bytes on every instruction-set path
    (vector rows and their tails, NaN, infinities, saturation, ties)."""
    x = (rng.standard_normal(shape) * 30).astype(np.float32)
    flat = x.reshape(-1)
    flat[:: 7] = np.round(flat[:: 7]) + 0.5  # ties (scale 1 below)
    flat[3:: 11] = np.nan
    flat[5:: 13] = np.inf
    flat[6:: 17] = -np.inf
    for scale, zp in ((1.0, 0), (0.37, 128), (1e-3, 255)):
        got = _qgemm.quantize_per_tensor(x, scale, zp).data
        assert np.array_equal(got, quantize_ref(x, scale, zp)), (isa, scale, zp)


def test_max_pool_of_bytes_is_the_float_pool(rng):
    from modulekit.nn import functional as F

    x = rng.standard_normal((2, 5, 13, 12)).astype(np.float32)
    qa = _qgemm.quantize_per_tensor(x, 0.02, 120)
    for args in ((3, 2, 1), (2, 2, 0), (3, 2, 1, 1, True), (3, 1, 1, 2)):
        pooled = _qgemm.max_pool_qu8(qa, *args)
        assert np.array_equal(pooled.dequantize(), F.max_pool2d(qa.dequantize(), *args))


def test_pack_qconv2d_refuses_bad_input(rng):
    q = np.zeros((4, 3, 3, 3), np.int8)
    s = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="4-D int8"):
        _qgemm.pack_qconv2d(q.astype(np.int16), s, None, 1, 0)
    with pytest.raises(ValueError, match="-128"):
        _qgemm.pack_qconv2d(np.full_like(q, -128), s, None, 1, 0)
    with pytest.raises(ValueError, match="positive finite"):
        _qgemm.pack_qconv2d(q, -s, None, 1, 0)
    with pytest.raises(ValueError, match="bias"):
        _qgemm.pack_qconv2d(q, s, np.zeros(3), 1, 0)
    with pytest.raises(ValueError, match="zero_point"):
        _qgemm.pack_qconv2d(q, s, None, 1, 300)
    with pytest.raises(ValueError, match="stride"):
        _qgemm.pack_qconv2d(q, s, None, 1, 0, stride=0)
    packed = _qgemm.pack_qconv2d(q, s, None, 1, 0)
    with pytest.raises(ValueError, match="input channels"):
        packed.forward(np.zeros((1, 2, 5, 5), np.float32))
    with pytest.raises(ValueError, match="smaller than the kernel"):
        packed.forward(np.zeros((1, 3, 2, 2), np.float32))
    with pytest.raises(ValueError, match="activation"):
        packed.forward(np.zeros((1, 3, 5, 5), np.float32), "gelu")
    with pytest.raises(TypeError, match="directly"):
        _qgemm.PackedQConv2d()


def test_activation_qparams():
    assert activation_qparams(0.0, 2.55) == (pytest.approx(0.01), 0)
    scale, zp = activation_qparams(-1.0, 1.0)
    assert scale == pytest.approx(2 / 255, rel=1e-6) and zp == 127  # 1 / float32 scale < 127.5
    assert activation_qparams(0.5, 2.0)[1] == 0  # the range always holds 0
    assert activation_qparams(0.0, 0.0)[0] > 0


# ----------------------------------------------------------------------------------- models
class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                  nn.BatchNorm2d(cout)) if stride != 1 or cin != cout else None

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 1, 1)
        self.bn = nn.BatchNorm2d(16)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.block1 = Block(16, 16, 1)
        self.block2 = Block(16, 32, 2)
        self.grouped = nn.Conv2d(32, 32, 3, 1, 1, groups=2)  # stays float32
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.pool(self.relu(self.bn(self.stem(x))))
        x = self.block2(self.block1(x))
        return self.fc(self.grouped(x).mean((2, 3)))


def randomized(model, rng):
    state = {}
    for k, v in model.state_dict().items():
        a = np.asarray(v)
        if k.endswith("running_var"):
            state[k] = rng.uniform(0.5, 1.5, a.shape).astype(a.dtype)
        elif k.endswith("num_batches_tracked"):
            state[k] = a
        elif a.ndim == 4:
            state[k] = (rng.standard_normal(a.shape) * np.sqrt(2 / a[0].size)).astype(a.dtype)
        else:
            state[k] = (rng.standard_normal(a.shape) * 0.1 + (k.endswith(".weight"))).astype(
                a.dtype)
    model.load_state_dict(state)
    return model.eval()


def test_quantize_static_small_network(rng):
    model = randomized(Net(), rng)
    calib = [rng.standard_normal((4, 3, 16, 16)).astype(np.float32) for _ in range(3)]
    q = quantize_static(model, calib)
    assert type(model.stem) is nn.Conv2d and type(model.bn) is nn.BatchNorm2d  # a copy
    assert type(q.stem) is QuantizedConv2d and type(q.bn) is nn.Identity
    assert type(q.block2.down[0]) is QuantizedConv2d and type(q.block2.down[1]) is nn.Identity
    assert type(q.grouped) is nn.Conv2d and type(q.fc) is DynamicQuantizedLinear
    x = rng.standard_normal((8, 3, 16, 16)).astype(np.float32)
    y, yq = model(x), q(x)
    assert np.abs(y - yq).max() < 0.05 * np.abs(y).max()
    q.compile()
    yc = q(x)
    assert np.abs(y - yc).max() < 0.05 * np.abs(y).max()
    # the stem, block1's convolutions and block2's first hand bytes on (block2's second
    # feeds the float32 grouped convolution), and block2's downsampling branch (a plain
    # layer call become a step: the plan names its module's type)
    assert q.code.count("# quantized_handoff") == 4
    assert "kernel_block2_down_0(" in q.code
    # the compiled model as the eager one up to the residuals' quantization
    assert np.abs(yc - yq).max() < 0.05 * np.abs(y).max()


def test_handoff_without_residual_is_bit_identical(rng):
    model = randomized(nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU6(), nn.Conv2d(16, 4, 1)), rng)
    q = quantize_static(model, rng.standard_normal((6, 3, 12, 12)).astype(np.float32))
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    eager = q(x)
    q.compile()
    assert np.array_equal(q(x), eager)
    assert q.code.count("quantized_handoff") == 2


def test_quantized_conv2d_state_and_pickle(rng):
    conv = randomized(nn.Conv2d(6, 10, 3, 2, 1), rng)
    layer = QuantizedConv2d.from_float(conv, (0.02, 128), (0.05, 3))
    keys = ["weight", "bias", "weight_scale", "input_scale", "input_zero_point", "scale",
            "zero_point"]
    x = rng.standard_normal((2, 6, 9, 9)).astype(np.float32)
    assert sorted(layer.state_dict()) == sorted(keys)  # before packing
    y = layer(x)
    state = layer.state_dict(include_packed=True)
    assert sorted(state) == sorted(keys)
    assert np.asarray(state["weight"]).dtype == np.int8
    assert np.asarray(state["input_zero_point"]).dtype == np.int32
    twin = QuantizedConv2d(6, 10, 3, 2, 1)
    twin.load_state_dict(state)
    assert np.array_equal(twin(x), y)
    again = pickle.loads(pickle.dumps(layer))
    assert np.array_equal(again(x), y)
    assert np.array_equal(y[0], layer(x[0]))  # unbatched
    with pytest.raises(ValueError, match=r"QuantizedConv2d\(6, 10.*input channels"):
        layer(np.zeros((1, 5, 9, 9), np.float32))
    with pytest.raises(ValueError, match="groups=1"):
        QuantizedConv2d.from_float(nn.Conv2d(4, 4, 3, groups=2), (1, 0))
    with pytest.raises(ValueError, match="positive int"):
        QuantizedConv2d(0, 3, 3)


def test_quantize_static_refuses_and_changes_nothing(rng):
    model = randomized(Net(), rng)
    calib = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    model.train()
    with pytest.raises(ValueError, match="training mode"):
        quantize_static(model, calib, inplace=True)
    model.eval()
    with pytest.raises(ValueError, match="no batch"):
        quantize_static(model, [], inplace=True)
    with pytest.raises(TypeError, match="calibration_data"):
        quantize_static(model, 3, inplace=True)

    class Skips(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(3, 3, 1)
            self.b = nn.Conv2d(3, 3, 1)

        def forward(self, x):
            return self.a(x)

    skips = Skips().eval()
    with pytest.raises(ValueError, match="never ran.*b"):
        quantize_static(skips, calib, inplace=True)
    assert type(skips.a) is nn.Conv2d and not skips.a._forward_pre_hooks
    assert type(model.stem) is nn.Conv2d and not model.stem._forward_pre_hooks


def test_resnet18_against_float32(rng):
    """ResNet-18 (random weights with norm statistics, 64x64 inputs), compiled: the int8
    model's logits within 10% of the float32 logits' scale, its top-1 class the same on at
    least 90% of 256 fixed inputs (the margins of a random model at 64x64 are small; the
    issue's 99% bar is measured at 224x224 by bench/accuracy.py and docs/api.md records it)."""
    model = randomized(models.resnet18(), rng)
    calib = [rng.standard_normal((16, 3, 64, 64)).astype(np.float32) for _ in range(4)]
    q = quantize_static(model, calib)
    q.compile()
    x = rng.standard_normal((256, 3, 64, 64)).astype(np.float32)
    y, yq = model(x), q(x)
    assert np.abs(y - yq).max() < 0.1 * np.abs(y).max()
    assert (y.argmax(1) == yq.argmax(1)).mean() >= 0.9


def dw_ref(xq, zp, s_in, q, ws, b, stride, pad):
    """The depthwise scheme: per channel, the exact sum of (x - zp) * w over the window, then
    float32(sum) * float32(s_in * ws) + b with one rounding (NHWC float32)."""
    n, h, w, c = xq.shape
    _, _, kh, kw = q.shape
    xp = np.pad(xq.astype(np.int64) - zp, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    acc = np.zeros((n, oh, ow, c), np.int64)
    for i in range(kh):
        for j in range(kw):
            acc += xp[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride] \
                * q[:, 0, i, j].astype(np.int64)
    scale = (np.float32(s_in) * ws).astype(np.float32).astype(np.float64)
    bias = np.zeros(c) if b is None else b.astype(np.float64)
    return (acc.astype(np.float64) * scale + bias).astype(np.float32)


@pytest.mark.parametrize("geom", [(1, 3, 9, 8, 3, 1, 1), (2, 40, 13, 11, 3, 2, 1),
                                  (1, 17, 7, 7, 5, 1, 2), (1, 96, 6, 6, 3, 1, 1),
                                  (3, 33, 20, 5, 3, 1, 0), (2, 16, 2, 3, 3, 1, 1),
                                  # long interior runs: stride 2 with a channel tail, no padding
                                  (1, 40, 9, 37, 3, 2, 1), (2, 24, 11, 30, 3, 1, 0),
                                  (1, 16, 4, 2, 3, 1, 1), (1, 48, 3, 29, 1, 1, 0),
                                  # threaded: work items of 128 channels by runs of rows
                                  (2, 130, 20, 24, 3, 2, 1), (1, 300, 8, 8, 3, 1, 1)])
def test_depthwise_qconv_matches_the_scheme(isa, rng, geom):
    n, c, h, w, k, stride, pad = geom
    wt = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    q, ws = _qgemm.quantize_weight(wt.reshape(c, -1))
    q = q.reshape(wt.shape)
    b = rng.standard_normal(c).astype(np.float32)
    packed = _qgemm.pack_qconv2d(q, ws, b, 0.03, 77, stride, pad, 1, groups=c)
    assert packed.groups == c and packed.in_channels == c
    x = rng.standard_normal((n, c, h, w)).astype(np.float32) * 2
    xq = quantize_ref(x, 0.03, 77)
    ref = dw_ref(xq, 77, 0.03, q, ws, b, stride, pad)
    np.testing.assert_allclose(packed.forward(x), ref.transpose(0, 3, 1, 2), rtol=1e-6,
                               atol=1e-5)
    out = packed.forward(_qgemm.quantize_per_tensor(x, 0.03, 77), "relu6", None, (0.03, 0))
    assert np.array_equal(out.data, requant_ref(np.clip(ref, 0, 6), 0.03, 0))
    # a residual in bytes, added in the epilogue of every output pixel
    res = _qgemm.quantize_per_tensor(rng.standard_normal(out.shape).astype(np.float32), 0.02, 90)
    # fmaf(r - zp, scale, y): one rounding of the exact value (float64 holds it)
    with_res = ((res.data.astype(np.float64) - 90) * np.float64(np.float32(0.02))
                + ref.astype(np.float64)).astype(np.float32)
    out = packed.forward(_qgemm.quantize_per_tensor(x, 0.03, 77), "relu", res, (0.05, 3))
    assert np.array_equal(out.data, requant_ref(np.maximum(with_res, 0), 0.05, 3))
    qq, ss, bb = packed.unpack()
    assert np.array_equal(qq, q) and np.array_equal(ss, ws) and np.array_equal(bb, b)
    again = pickle.loads(pickle.dumps(packed))
    assert np.array_equal(again.forward(x), packed.forward(x))


def test_depthwise_paths_give_the_same_bits(rng):
    q = rng.integers(-127, 128, (64, 1, 3, 3)).astype(np.int8)
    packed = _qgemm.pack_qconv2d(q, np.full(64, 0.01, np.float32), None, 0.05, 10, 1, 1,
                                 groups=64)
    x = rng.standard_normal((1, 64, 10, 9)).astype(np.float32)
    outs = []
    for isa in _isa.available_isas():
        previous = _isa.set_isa(isa)
        try:
            outs.append(packed.forward(x, "relu"))
        finally:
            _isa.set_isa(previous)
    assert all(np.array_equal(o, outs[0]) for o in outs)
    with pytest.raises(ValueError, match="groups"):
        _qgemm.pack_qconv2d(np.zeros((8, 2, 3, 3), np.int8), np.ones(8, np.float32), None,
                            1, 0, groups=4)


def _pointwise_layer(rng, ci, co, in_q):
    q = rng.integers(-127, 128, (co, ci, 1, 1)).astype(np.int8)
    return _qgemm.pack_qconv2d(q, (rng.random(co) * 0.02 + 1e-3).astype(np.float32),
                               rng.standard_normal(co).astype(np.float32), *in_q)


@pytest.mark.parametrize("block", [
    # cin, chid, cout, stride, h, w, n, residual, expand, bytes out
    (16, 96, 24, 2, 40, 36, 1, False, True, True),
    (24, 144, 24, 1, 33, 20, 2, True, True, True),
    (32, 32, 16, 1, 30, 17, 1, False, False, True),
    (8, 20, 8, 1, 19, 70, 2, True, True, False),
    (24, 48, 40, 2, 31, 9, 3, False, True, False),
])
def test_inverted_residual_block_gives_the_steps_bits(isa, rng, block):
    """QInvertedResidual (expand, depthwise, project in row bands, one call): the bytes (or
    floats) of the three steps run one after the other, with and without the expand and the
    residual, both strides, odd sizes, batches; the fused kernel runs where the 1x1 steps read
    their rows in place (off the AMX tile), the steps on small maps."""
    cin, chid, cout, s, h, w, n, residual, expand, bytes_out = block
    xq = (np.float32(0.04), 7)
    e = _pointwise_layer(rng, cin, chid, xq) if expand else None
    dq = rng.integers(-127, 128, (chid, 1, 3, 3)).astype(np.int8)
    d = _qgemm.pack_qconv2d(dq, (rng.random(chid) * 0.02 + 1e-3).astype(np.float32),
                            rng.standard_normal(chid).astype(np.float32),
                            0.03 if expand else xq[0], 0 if expand else xq[1], stride=s,
                            padding=1, groups=chid)
    p = _pointwise_layer(rng, chid, cout, (0.025, 2))
    out_qs = ((d.input_scale, d.input_zero_point) if expand else None,
              (p.input_scale, p.input_zero_point), (0.07, 5) if bytes_out else None)
    acts = ("relu6", "relu", None)
    assert _qgemm.QInvertedResidual.fusable(e, d, p, acts, out_qs, residual)
    blk = _qgemm.QInvertedResidual(e, d, p, acts, out_qs, residual)
    x = _qgemm.quantize_per_tensor(rng.standard_normal((n, cin, h, w)).astype(np.float32), *xq)
    got, want = blk(x), blk._steps(x)
    if bytes_out:
        assert isinstance(got, _qgemm.QuantizedArray) and got.scale == want.scale
        assert np.array_equal(got.data, want.data)
    else:
        assert np.array_equal(got, want)
    rows_in_place = "amx" not in p.kernel  # the AMX tile reads 1x1 rows gathered
    fused = rows_in_place and n * ((h - 1) // s + 1) >= 4 * modulekit.get_num_threads()
    assert blk.calls_fused == int(fused)
    # small maps and float inputs run the steps
    small = _qgemm.quantize_per_tensor(rng.standard_normal((1, cin, 5, 6)).astype(np.float32),
                                       *xq)
    assert np.array_equal(np.asarray(blk(small)), np.asarray(blk._steps(small)))
    assert blk.calls_fused <= 1


def test_inverted_residual_block_refuses_other_steps(rng):
    p = _pointwise_layer(rng, 16, 8, (0.02, 0))
    d = _qgemm.pack_qconv2d(np.ones((16, 1, 3, 3), np.int8), np.full(16, 0.01, np.float32),
                            None, 0.03, 0, stride=1, padding=1, groups=16)
    q = (p.input_scale, p.input_zero_point)
    assert _qgemm.QInvertedResidual.fusable(None, d, p, (None,) * 3, (None, q, None), False)
    # another quantization between the steps, a residual across channel counts, a 3x3 project
    assert not _qgemm.QInvertedResidual.fusable(None, d, p, (None,) * 3, (None, (0.5, 1), None),
                                                False)
    assert not _qgemm.QInvertedResidual.fusable(None, d, p, (None,) * 3, (None, q, None), True)
    assert not _qgemm.QInvertedResidual.fusable(None, d, d, (None,) * 3, (None, q, None), False)
    with pytest.raises(ValueError, match="inverted residual"):
        _qgemm.QInvertedResidual(None, d, p, ("gelu", None, None), (None, q, None), False)


def test_quantize_static_mobilenet_v2(rng):
    """Every convolution of MobileNetV2 quantized (the depthwise ones too), the compiled
    model's bytes handed on from the stem to the head."""
    model = randomized(models.mobilenet_v2(), rng)
    calib = [rng.standard_normal((4, 3, 64, 64)).astype(np.float32) for _ in range(2)]
    q = quantize_static(model, calib)
    assert not any(type(m) is nn.Conv2d for m in q.modules())
    q.compile()
    x = rng.standard_normal((4, 3, 64, 64)).astype(np.float32)
    y, yq = model(x), q(x)
    assert np.abs(y - yq).max() < 0.1 * np.abs(y).max()
    # 51 of the 52 convolutions hand bytes on (the plain project convolutions, made steps by
    # the hand-off rule, are named by their module's type); the head's returns its global
    # average pool (float32), as the float model's does
    assert q.code.count("# conv_global_avgpool") == 1
    # ... and the 17 inverted residual blocks (the other 50) run as one call each: the stem
    # is the one hand-off step left
    assert q.code.count("# quantized_invres") == 17
    assert q.code.count("# quantized_handoff") + q.code.count("# QuantizedConv2d ") == 1


def test_compiled_quantized_models_save_and_load(rng, tmp_path):
    """save() of a compiled model with static and dynamic int8 layers; load_module runs it
    without the Python classes and gives the compiled model's bits; a file whose int8 layer
    misses a tensor is refused naming it."""
    import modulekit as mk
    from modulekit import models
    from modulekit.checkpoint._common import CheckpointError, FileBuffer
    from modulekit.checkpoint.safetensors import read_safetensors, write_safetensors
    from modulekit.quantization import quantize_dynamic

    model = models.resnet18(num_classes=10).eval()
    q = quantize_static(model, [rng.standard_normal((4, 3, 32, 32)).astype(np.float32)])
    assert not any(m.training for m in q.modules())  # the new layers in eval mode too
    q.compile()
    x = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    want = q(x)  # the capture call returns the plan's result: the same bits from then on
    np.testing.assert_array_equal(q(x), want)
    path = str(tmp_path / "q.safetensors")
    q.save(path)
    loaded = mk.load_module(path)
    assert not isinstance(loaded, type(q))
    np.testing.assert_array_equal(loaded(x), want)

    mlp = quantize_dynamic(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval())
    assert not any(m.training for m in mlp.modules())
    mlp.compile()
    z = rng.standard_normal((5, 16)).astype(np.float32)
    mlp(z)
    mlp.save(str(tmp_path / "d.safetensors"))
    np.testing.assert_array_equal(mk.load_module(str(tmp_path / "d.safetensors"))(z), mlp(z))

    arrays, _, meta = read_safetensors(FileBuffer(path, use_mmap=False))
    arrays = {k: np.array(v) for k, v in arrays.items() if k != "conv1.weight_scale"}
    bad = str(tmp_path / "bad.safetensors")
    write_safetensors(arrays, bad, meta)
    with pytest.raises(CheckpointError, match="conv1.weight_scale"):
        mk.load_module(bad)
