"""The input rules every layer shares (``modulekit/nn/_input.py``, docs/api.md "Inputs"):
byte-swapped input gives the native answer, complex/object/string input is refused naming the
layer, indices follow torch's shapes, and window parameters are range-checked."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

import modulekit
import modulekit.nn as nn
import modulekit.nn.functional as F
from modulekit._ext import _conv, _gemm, _ops
from modulekit.models import BasicBlock, BertConfig, BertModel, MobileNetV2, ResNet
from modulekit.nn._input import as_indices, as_input

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(18)
SWAPPED = ">" if sys.byteorder == "little" else "<"


def _layers():
    """(name, module, input shape, call) for every layer class of modulekit.nn and the
    models; call(module, x) -> output array."""
    seq = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    seq.initialize()
    conv_seq = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(),
                             nn.MaxPool2d(2)).eval()
    mha = nn.MultiheadAttention(6, 2)
    tel = nn.TransformerEncoderLayer(6, 2, 8, dropout=0.0)
    plain = lambda m, x: m(x)  # noqa: E731
    cases = [
        ("Linear", nn.Linear(5, 3), (4, 5), plain),
        ("Linear(3-D)", nn.Linear(5, 3), (2, 3, 5), plain),
        ("Sequential(Linear, ReLU)", nn.Sequential(nn.Linear(5, 3), nn.ReLU()), (2, 5), plain),
        ("Sequential(Linear chain)", seq, (2, 5), plain),
        ("Conv2d", nn.Conv2d(2, 3, 3), (1, 2, 6, 5), plain),
        ("Conv2d(depthwise)", nn.Conv2d(3, 3, 3, groups=3, padding=1), (1, 3, 6, 5), plain),
        ("Sequential(Conv2d, BatchNorm2d, ReLU, MaxPool2d)", conv_seq, (1, 2, 6, 6), plain),
        ("MaxPool2d", nn.MaxPool2d(2), (1, 2, 4, 6), plain),
        ("AvgPool2d", nn.AvgPool2d(3, 1, 1), (1, 2, 4, 6), plain),
        ("AdaptiveAvgPool2d", nn.AdaptiveAvgPool2d(2), (1, 2, 5, 6), plain),
        ("BatchNorm1d", nn.BatchNorm1d(3).eval(), (4, 3), plain),
        ("BatchNorm1d(train)", nn.BatchNorm1d(3), (4, 3, 2), plain),
        ("BatchNorm2d", nn.BatchNorm2d(2).eval(), (2, 2, 3, 3), plain),
        ("LayerNorm", nn.LayerNorm(6), (3, 6), plain),
        ("MultiheadAttention", mha, (3, 2, 6), lambda m, x: m(x, x, x)[0]),
        ("MultiheadAttention(cross)", mha, (3, 2, 6),
         lambda m, x: m(x, np.ascontiguousarray(x[::-1]), x)[0]),
        ("TransformerEncoderLayer", tel, (3, 2, 6), plain),
        ("TransformerEncoder", nn.TransformerEncoder(tel, 2), (3, 2, 6), plain),
        ("ResNet", ResNet(BasicBlock, [1, 1, 1, 1], num_classes=5).eval(), (1, 3, 32, 32),
         plain),
        ("MobileNetV2", MobileNetV2(num_classes=5, width_mult=0.25).eval(), (1, 3, 32, 32),
         plain),
    ]
    for cls in (nn.ReLU, nn.ReLU6, nn.GELU, nn.SiLU, nn.Sigmoid, nn.Tanh, nn.Hardswish,
                nn.Identity, nn.Flatten, nn.Dropout):
        cases.append((cls.__name__, cls().eval(), (3, 4), plain))
    cases.append(("Softmax", nn.Softmax(dim=1), (3, 4), plain))
    # ---- convolution layers (conv_nd.py)
    cases += [
        ("Conv1d", nn.Conv1d(2, 3, 3), (2, 2, 7), plain),
        ("Conv1d(GEMM)", nn.Conv1d(16, 3, 3, padding=1), (2, 16, 7), plain),
        ("Conv2d(reflect)", nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"),
         (1, 2, 5, 6), plain),
        ("Conv3d", nn.Conv3d(2, 3, 3, padding=1), (1, 2, 3, 4, 5), plain),
        ("ConvTranspose1d", nn.ConvTranspose1d(2, 3, 3, stride=2), (2, 2, 5), plain),
        ("ConvTranspose2d", nn.ConvTranspose2d(2, 3, 4, stride=2, padding=1), (1, 2, 4, 5),
         plain),
        ("ConvTranspose3d", nn.ConvTranspose3d(2, 3, 3, stride=2), (1, 2, 2, 3, 4), plain),
    ]
    return cases


CASES = _layers()


@pytest.mark.parametrize("name, module, shape, call", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("code", ["f4", "f8", "f2"])
def test_byte_swapped_input_gives_the_native_answer(name, module, shape, call, code):
    x = (RNG.standard_normal(shape) * 2).astype("=" + code)
    swapped = x.astype(SWAPPED + code)
    assert not swapped.dtype.isnative and np.array_equal(swapped, x)
    want = np.asarray(call(module, x))
    got = np.asarray(call(module, swapped))
    assert got.dtype.isnative or name in ("Identity",)
    np.testing.assert_array_equal(got, want)  # identical: the same values were read


def test_issue_example_linear_big_endian():
    lin = nn.Linear(3, 1, bias=False)
    lin.load_state_dict({"weight": np.ones((1, 3))})
    x = np.array([[1, 2, 3]], dtype=">f4")
    assert lin(x).tolist() == [[6.0]]
    seq = nn.Sequential(nn.Linear(3, 1, bias=False), nn.ReLU())
    seq[0].load_state_dict({"weight": np.ones((1, 3))})
    assert seq(x).tolist() == [[6.0]]
    seq.initialize()
    assert seq(x).tolist() == [[6.0]]


def test_matmul_byte_order_and_dtypes():
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.standard_normal((4, 5)).astype(np.float32)
    want = modulekit.matmul(a, b)
    np.testing.assert_array_equal(modulekit.matmul(a.astype(">f4"), b.astype(">f4")), want)
    np.testing.assert_allclose(want, a @ b, rtol=1e-5, atol=1e-6)
    assert modulekit.matmul(a.astype(">f8"), b).dtype == np.float64
    assert modulekit.matmul(np.ones((2, 2), np.int64), np.ones((2, 2), np.float32)).tolist() \
        == [[2.0, 2.0], [2.0, 2.0]]
    with pytest.raises(TypeError, match="matmul\\(a\\): got an array of complex numbers"):
        modulekit.matmul(a.astype(np.complex64), b)


def test_kernel_entry_points_refuse_byte_swapped_arrays():
    """The second line of defence: the Cython entry points say what is wrong."""
    x = np.ones((2, 3), ">f4")
    with pytest.raises(TypeError, match="non-native byte order \\(dtype >f4\\)"):
        _gemm.matmul(x, np.ones((3, 2), np.float32))
    packed = _gemm.pack_linear(np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match="non-native byte order"):
        packed.forward(x)
    with pytest.raises(TypeError, match="non-native byte order"):
        _conv.max_pool2d(np.ones((1, 1, 4, 4), ">f4"), 2)
    with pytest.raises(TypeError, match="non-native byte order"):
        _conv.pack_conv2d(np.ones((1, 1, 3, 3), np.float32)).forward(np.ones((1, 1, 4, 4), ">f4"))
    with pytest.raises(TypeError, match="non-native byte order"):
        _ops.layer_norm(x, 3)
    with pytest.raises(TypeError, match="non-native byte order"):
        _ops.embedding(np.array([1], ">i8"), np.ones((3, 2), np.float32))
    # byte-swapped weights are converted when packed (they are copied anyway)
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(_gemm.pack_linear(w.astype(">f4")).unpack()[0], w)


def test_hot_path_is_the_array_itself():
    x = np.ones((4, 5), np.float32)
    assert as_input(x, "Linear") is x
    y = np.ones((4, 5), np.float64)[:, ::2]
    assert as_input(y, "Linear") is y
    assert as_indices(np.arange(3), "Embedding").base is None


BAD_INPUTS = {
    "complex": (np.complex128, "complex numbers"),
    "object": (object, "Python objects"),
    "string": (np.str_, "strings"),
    "bytes": (np.bytes_, "bytes"),
    "datetime": ("datetime64[s]", "datetimes"),
}


@pytest.mark.parametrize("name, module, shape, call", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("kind", sorted(BAD_INPUTS))
def test_non_real_input_refused_naming_the_layer(name, module, shape, call, kind):
    if name == "Identity":
        pytest.skip("Identity returns its input unchanged, whatever it is (as torch)")
    dtype, words = BAD_INPUTS[kind]
    x = np.ones(shape).astype(dtype)
    with pytest.raises(TypeError) as info:
        call(module, x)
    msg = str(info.value)
    assert words in msg and "expected real numbers" in msg, msg
    layer = name.split("(")[0]
    if layer == "Sequential":  # its first layer refuses it
        layer = name[len("Sequential("):].split(",")[0].split(" ")[0].rstrip(")")
    if layer in ("ResNet", "MobileNetV2"):  # plain torchvision code: its first layer refuses it
        layer = "Conv2d"
    assert msg.startswith(layer) or layer in msg.split(":")[0], msg


def test_layernorm_complex_and_object_inputs():
    ln = nn.LayerNorm(3)
    with pytest.raises(TypeError, match="LayerNorm: got an array of complex numbers"):
        ln(np.array([1 + 1j, 2, 3]))
    with pytest.raises(TypeError, match="LayerNorm: got an array of Python objects"):
        ln(np.array([1, 2, 3], dtype=object))
    with pytest.raises(TypeError, match="LayerNorm\\(residual\\): got an array of complex"):
        ln(np.ones(3, np.float32), residual=np.ones(3, np.complex64))


# ---------------------------------------------------------------------------------------------
# Embedding indices against torch


@pytest.fixture
def embeddings():
    t = torch.nn.Embedding(5, 3)
    m = nn.Embedding(5, 3)
    m.load_state_dict(t.state_dict())
    return m, t


@pytest.mark.parametrize("ids", [
    np.int64(2), np.int32(4), np.uint8(1), np.array(3), np.array([], np.int64),
    np.zeros((0, 3), np.int32), np.array([[0, 4], [2, 2]], np.int16), [1, 2],
    np.array([1, 2], ">i8"), np.array([[1], [3]], np.uint8), 2,
], ids=repr)
def test_embedding_index_shapes_like_torch(embeddings, ids):
    m, t = embeddings
    got = m(ids)
    with torch.no_grad():
        want = t(torch.as_tensor(np.asarray(ids).astype(np.int64))).numpy()
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("ids", [np.int64(-1), np.int64(5), np.array([[0, 7]], np.int32),
                                 np.array([-3]), np.uint64(2**63 + 1)], ids=repr)
def test_embedding_out_of_range_raises_index_error(embeddings, ids):
    m, t = embeddings
    with pytest.raises(IndexError, match=r"Embedding\(5, 3\).*out of range"):
        m(ids)
    with pytest.raises((IndexError, RuntimeError)):
        t(torch.as_tensor(np.asarray(ids).astype(np.int64)))


@pytest.mark.parametrize("ids, words", [
    (np.array([1.0]), "floating"), (np.array([True]), "bools"), (np.array(["a"]), "strings"),
    (np.array([1 + 0j]), "complex"),
])
def test_embedding_non_integer_indices_refused(embeddings, ids, words):
    with pytest.raises(TypeError, match=rf"Embedding\(5, 3\).*{words}"):
        embeddings[0](ids)


def test_bert_token_ids_byte_order():
    model = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=32,
                                 max_position_embeddings=20, type_vocab_size=2))
    ids = RNG.integers(0, 50, size=(2, 7))
    mask = np.ones((2, 7), ">f4")
    mask[1, 5:] = 0
    # the compiled parts' plans, without a mask (initialize's example) and with one (the
    # first call with a mask captures): every call below runs a plan
    model.initialize()
    model(ids, attention_mask=mask)
    want = model(ids).last_hidden_state
    np.testing.assert_array_equal(model(ids.astype(">i8")).last_hidden_state, want)
    np.testing.assert_array_equal(model(ids.astype(np.int32)).last_hidden_state, want)
    np.testing.assert_array_equal(model(ids, attention_mask=mask).last_hidden_state,
                                  model(ids, attention_mask=mask.astype("=f4")).last_hidden_state)
    with pytest.raises(TypeError, match="BertModel\\(input_ids\\).*floating"):
        model(ids.astype(np.float32))


# ---------------------------------------------------------------------------------------------
# murky errors made clear


@pytest.mark.parametrize("shape, dim", [((0, 3), 1), ((0, 3), 0), ((3, 0), 1), ((3, 0), 0),
                                        ((0,), 0), ((2, 0, 4), -1)])
def test_softmax_of_empty_input_like_torch(shape, dim):
    got = F.softmax(np.zeros(shape, np.float32), dim)
    want = torch.softmax(torch.zeros(shape), dim)
    assert got.shape == tuple(want.shape) and got.dtype == np.float32
    assert nn.Softmax(dim)(np.zeros(shape)).shape == shape
    with pytest.raises(IndexError, match="out of range"):
        F.softmax(np.zeros(shape), len(shape))


HUGE = 2**40


@pytest.mark.parametrize("make, words", [
    (lambda: nn.Conv2d(1, 1, 3, padding=HUGE), "padding=1099511627776 is out of range"),
    (lambda: nn.Conv2d(1, 1, 3, padding=(1, HUGE)), "padding=1099511627776 is out of range"),
    (lambda: nn.Conv2d(1, 1, 3, stride=HUGE), "stride=1099511627776 is out of range"),
    (lambda: nn.Conv2d(1, 1, 3, dilation=HUGE), "dilation=1099511627776 is out of range"),
    (lambda: nn.Conv2d(1, 1, HUGE), "kernel_size=1099511627776 is out of range"),
    (lambda: nn.Conv2d(1, 1, 3, dilation=2**19 + 1), "dilated kernel"),
    (lambda: nn.MaxPool2d(HUGE), "kernel_size=1099511627776 is out of range"),
    (lambda: nn.MaxPool2d(3, stride=HUGE), "stride=1099511627776 is out of range"),
    (lambda: nn.MaxPool2d(3, dilation=HUGE), "dilation=1099511627776 is out of range"),
    (lambda: nn.MaxPool2d(3, padding=HUGE), "padding=1099511627776 is out of range"),
    (lambda: nn.AvgPool2d(HUGE), "kernel_size=1099511627776 is out of range"),
    (lambda: nn.AvgPool2d(3, divisor_override=HUGE), "divisor_override"),
    (lambda: nn.AdaptiveAvgPool2d(HUGE), "output_size"),
    (lambda: F.conv2d(np.ones((1, 1, 4, 4)), np.ones((1, 1, 2, 2)), padding=HUGE),
     "padding=1099511627776 is out of range"),
    (lambda: F.max_pool2d(np.ones((1, 1, 4, 4)), 2, stride=HUGE),
     "stride=1099511627776 is out of range"),
    (lambda: F.avg_pool2d(np.ones((1, 1, 4, 4)), 2, divisor_override=HUGE), "divisor_override"),
    (lambda: F.adaptive_avg_pool2d(np.ones((1, 1, 4, 4)), HUGE), "output_size"),
])
def test_huge_window_parameters_name_the_parameter(make, words):
    with pytest.raises(ValueError, match=words) as info:
        make()
    assert "2**20" in str(info.value) or "1048576" in str(info.value)


def test_largest_window_parameters_still_work():
    conv = nn.Conv2d(1, 1, 1, padding=3, stride=2**20)
    assert conv(np.ones((1, 1, 2, 2), np.float32)).shape == (1, 1, 1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tconv = torch.nn.Conv2d(1, 1, 1, padding=3, stride=2**20)
    assert tuple(tconv(torch.ones(1, 1, 2, 2)).shape) == (1, 1, 1, 1)
