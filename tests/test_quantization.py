"""int8 dynamic quantization: the qd8-f32-qc8w kernels against an exact NumPy model of the
scheme on every ISA path, and quantize_dynamic / DynamicQuantizedLinear against float32 and
torch's own quantize_dynamic."""

import copy
import pickle
import warnings

import numpy as np
import pytest

import modulekit as mk
from modulekit import nn
from modulekit._ext import _isa, _qgemm
from modulekit.quantization import DynamicQuantizedLinear, quantize_dynamic

OUTLIERS, OUTLIER_RATIO = 4, 24.0  # kernels/qgemm/qgemm-driver.c


def outliers(row):
    """The values a row sets aside (kernels/qgemm/qgemm-driver.c): those over 24x the row's
    mean magnitude, the 4 largest, as {index: value}; none in a non-finite row."""
    a = np.abs(row.astype(np.float64))
    if not np.isfinite(a).all() or a.size == 0:
        return {}
    over = np.flatnonzero(a > OUTLIER_RATIO * a.mean())
    over = over[np.argsort(-a[over], kind="stable")][:OUTLIERS]
    return {int(i): row[i] for i in over}


def reference(x, q, scale, bias, lo=-np.inf, hi=np.inf):
    """The scheme of kernels/qgemm/qgemm.h in NumPy: per-row symmetric int8 activations,
    exact integer sums, then float32(int) * float32(sx * sw) + bias with one rounding; a
    row's outliers set aside before it is quantized and their float products added before
    the clamp."""
    x = np.array(x, np.float32)
    extra = np.zeros((x.shape[0], q.shape[0]))
    for r in range(x.shape[0]):
        for i, v in outliers(x[r]).items():
            extra[r] += np.float64(v) * (scale * q[:, i].astype(np.float32)).astype(np.float64)
            x[r, i] = 0.0
    amax = np.abs(x).max(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.float32(127) / amax
        qx = np.clip(np.rint(x * inv[:, None]), -127, 127).astype(np.int64)
    qx[amax == 0] = 0
    sx = np.where(amax == 0, np.float32(1), amax / np.float32(127)).astype(np.float32)
    acc = (qx @ q.astype(np.int64).T).astype(np.float32).astype(np.float64)
    s = (sx[:, None] * scale[None, :]).astype(np.float32).astype(np.float64)
    b = np.zeros(q.shape[0]) if bias is None else bias.astype(np.float64)
    return np.clip(acc * s + b + extra, lo, hi).astype(np.float32)


SHAPES = [(1, 1, 1), (1, 5, 3), (3, 33, 17), (8, 32, 4), (9, 64, 100), (17, 100, 384),
          (70, 40, 129)]


@pytest.mark.parametrize("m, n, k", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_kernel_matches_the_scheme(isa, rng, m, n, k, bias):
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32) if bias else None
    x = rng.standard_normal((m, k)).astype(np.float32) * rng.uniform(0.1, 10, (m, 1))
    q, scale = _qgemm.quantize_weight(w)
    packed = _qgemm.pack_qlinear(q, scale, b)
    bounds = {"none": (-np.inf, np.inf), "relu": (0, np.inf), "relu6": (0, 6),
              "clamp": (-0.5, 0.25)}
    for act, (lo, hi) in bounds.items():
        y = packed.forward(x, act, -0.5, 0.25)
        np.testing.assert_allclose(y, reference(x, q, scale, b, lo, hi), rtol=1e-6, atol=1e-6)
    # the others in the epilogue: the bits of nn.functional's activation of the output
    from modulekit.nn import functional as F

    math = {"gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
            "silu": F.silu, "sigmoid": F.sigmoid, "tanh": F.tanh, "hardswish": F.hardswish}
    assert set(bounds) | set(math) == set(_qgemm.ACTIVATIONS)
    y = packed.forward(x, "none")
    for act, fn in math.items():
        np.testing.assert_array_equal(packed.forward(x, act), fn(y), err_msg=act)
    qq, ss, bb = packed.unpack()
    assert np.array_equal(qq, q) and np.array_equal(ss, scale)
    assert (bb is None) == (b is None) and (b is None or np.array_equal(bb, b))


def test_every_path_gives_the_same_bits(rng):
    w = rng.standard_normal((77, 203)).astype(np.float32)
    b = rng.standard_normal(77).astype(np.float32)
    x = rng.standard_normal((45, 203)).astype(np.float32)
    x[[3, 40], [5, 100]] = [80.0, -95.0]  # rows with outliers (their float products too)
    q, scale = _qgemm.quantize_weight(w)
    outs, kernels = [], set()
    previous, previous_bf16 = _isa.get_isa(), _isa.get_bf16()
    try:
        for level in _isa.available_isas():
            _isa.set_isa(level)
            # the AMX-INT8 tile follows the bfloat16 selector: every selector this CPU has
            for bf16 in _isa.available_bf16() if level == "avx512" else (_isa.get_bf16(),):
                _isa.set_bf16(bf16)
                packed = _qgemm.pack_qlinear(q, scale, b)
                kernels.add(packed.kernel)
                for threads in (1, 2):
                    old = mk.get_num_threads()
                    mk.set_num_threads(threads)
                    try:
                        outs.append(packed.forward(x, "relu"))
                    finally:
                        mk.set_num_threads(old)
    finally:
        _isa.set_isa(previous)
        _isa.set_bf16(previous_bf16)
    assert "qd8-f32-qc8w-gemm-4x16-scalar" in kernels
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    avx512 = "avx512" in _isa.available_isas()
    assert ("qd8-f32-qc8w-gemm-8x32-avx512vnni" in kernels) == (
        "avx512_vnni" in flags and avx512)
    assert ("qd8-f32-qc8w-gemm-32x32-amx" in kernels) == (
        "amx_int8" in flags and avx512 and _isa.amx_status() == "granted")
    for y in outs[1:]:
        np.testing.assert_array_equal(y, outs[0])


def test_switching_isa_repacks(rng):
    q, scale = _qgemm.quantize_weight(rng.standard_normal((40, 30)).astype(np.float32))
    x = rng.standard_normal((10, 30)).astype(np.float32)
    previous = _isa.get_isa()
    try:
        _isa.set_isa("generic")
        packed = _qgemm.pack_qlinear(q, scale)
        assert packed.kernel.endswith("scalar")
        y = packed.forward(x)
        _isa.set_isa(previous)
        np.testing.assert_array_equal(packed.forward(x), y)
        assert np.array_equal(packed.unpack()[0], q)
    finally:
        _isa.set_isa(previous)


def test_special_rows(isa, rng):
    w = rng.standard_normal((20, 9)).astype(np.float32)
    b = rng.standard_normal(20).astype(np.float32)
    q, scale = _qgemm.quantize_weight(w)
    packed = _qgemm.pack_qlinear(q, scale, b)
    x = rng.standard_normal((5, 9)).astype(np.float32)
    x[1] = 0.0  # a zero row gives the bias
    x[2, 3] = np.nan  # non-finite rows give NaN rows, the others are untouched
    x[3, 0] = -np.inf
    x[4] = 1e-38  # too small to scale: computed as zeros
    y = packed.forward(x)
    np.testing.assert_array_equal(y[1], b)
    assert np.isnan(y[2]).all() and np.isnan(y[3]).all()
    np.testing.assert_array_equal(y[4], b)
    np.testing.assert_allclose(y[0], reference(x[:1], q, scale, b)[0], rtol=1e-6, atol=1e-6)


def test_rows_with_outliers(isa, rng):
    """A row whose few largest values dwarf the rest (a [CLS] token's LayerNorm output in a
    real MiniLM: 17.5 among values of median magnitude 0.06) keeps them out of its int8 scale
    and adds their float32 products back: far closer to the float32 product than quantizing
    them with the row, the scheme's NumPy model to float rounding, every activation after."""
    n, k = 48, 384
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    q, scale = _qgemm.quantize_weight(w)
    packed = _qgemm.pack_qlinear(q, scale, b)
    x = (rng.standard_normal((6, k)) * 0.06).astype(np.float32)
    x[0, [7, 200]] = [17.5, -14.6]                 # two outliers
    x[1, [1, 2, 3, 4, 5, 6]] = [9, -10, 11, -12, 13, 14]  # six: the four largest set aside
    x[2, 383] = 30.0                               # at the row's end
    x[3, 0] = 1.0                                  # 16x the mean: an ordinary row
    x[4, 5], x[4, 9] = 20.0, np.nan                # non-finite: NaN, no outliers
    x[5] = 0.0                                     # a zero row gives the bias
    x[5, 11] = 5.0                                 # its one value: exact float
    assert [len(outliers(r)) for r in x] == [2, 4, 1, 0, 0, 1]
    exact = x.astype(np.float64) @ (scale[:, None] * q).T.astype(np.float64) + b
    y = packed.forward(x)
    np.testing.assert_allclose(y[[0, 1, 2, 3, 5]], reference(x, q, scale, b)[[0, 1, 2, 3, 5]],
                               rtol=1e-5, atol=1e-5)
    assert np.isnan(y[4]).all()
    np.testing.assert_allclose(y[5], exact[5], rtol=1e-5, atol=1e-5)
    # quantized with its outliers (one scale for the whole row), row 0's product would be
    # mostly rounding: the small values round to 0 or one step of 17.5 / 127
    amax = np.abs(x[0]).max()
    qx = np.clip(np.rint(x[0] * (127 / amax)), -127, 127) * (amax / 127)
    err_whole = np.abs(qx @ (scale[:, None] * q).T + b - exact[0]).max()
    err = np.abs(y[0] - exact[0]).max()
    assert err < err_whole / 10, (err, err_whole)
    for act, lo, hi in (("relu", 0, np.inf), ("clamp", -0.5, 0.25)):
        np.testing.assert_allclose(packed.forward(x[:4], act, -0.5, 0.25),
                                   reference(x[:4], q, scale, b, lo, hi), rtol=1e-5, atol=1e-5)
    from modulekit.nn import functional as F

    np.testing.assert_array_equal(packed.forward(x[:4], "gelu"), F.gelu(packed.forward(x[:4])))


def test_weight_quantization(rng):
    w = rng.standard_normal((6, 50)).astype(np.float32)
    w[2] = 0.0
    q, scale = _qgemm.quantize_weight(w)
    assert q.dtype == np.int8 and scale.dtype == np.float32
    assert np.abs(q).max() == 127 and q.min() >= -127
    assert scale[2] == 1.0 and not q[2].any()
    np.testing.assert_allclose(q * scale[:, None], w, atol=scale.max() / 2 + 1e-7)


def test_bad_arguments():
    with pytest.raises(ValueError, match="NaN or infinity"):
        _qgemm.quantize_weight(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match="2-D floating"):
        _qgemm.quantize_weight(np.ones(3))
    q = np.ones((2, 3), np.int8)
    with pytest.raises(ValueError, match="-128"):
        _qgemm.pack_qlinear(np.full((2, 3), -128, np.int8), np.ones(2))
    with pytest.raises(ValueError, match="positive finite"):
        _qgemm.pack_qlinear(q, np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="bias"):
        _qgemm.pack_qlinear(q, np.ones(2), np.ones(3))
    with pytest.raises(ValueError, match="exceeds"):
        _qgemm.pack_qlinear(np.ones((1, _qgemm.MAX_IN_FEATURES + 1), np.int8), np.ones(1))
    packed = _qgemm.pack_qlinear(q, np.ones(2))
    with pytest.raises(ValueError, match=r"\(rows, 3\)"):
        packed.forward(np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match="activation"):
        packed.forward(np.ones((2, 3), np.float32), "softmax")
    with pytest.raises(ValueError, match="alpha <= beta"):
        packed.forward(np.ones((2, 3), np.float32), "clamp", 1.0, 0.0)
    with pytest.raises(TypeError):
        _qgemm.PackedQLinear()


# ---- the layer and quantize_dynamic ----------------------------------------------------
def mlp():
    return nn.Sequential(nn.Linear(96, 256), nn.ReLU(), nn.Linear(256, 256), nn.GELU(),
                         nn.Linear(256, 10)).eval()


def relative_error(y, ref):
    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))


def test_quantize_dynamic_against_float_and_torch(rng):
    torch = pytest.importorskip("torch")
    m = mlp()
    x = rng.standard_normal((64, 96)).astype(np.float32)
    ref = m(x)
    q = quantize_dynamic(m)
    assert all(type(q[i]) is DynamicQuantizedLinear for i in (0, 2, 4))
    assert type(m[0]) is nn.Linear  # not in place by default
    y = q(x)
    assert y.dtype == np.float32
    err = relative_error(y, ref)
    # torch's quantize_dynamic of the same weights (per-tensor scales): ours is finer-grained
    tm = torch.nn.Sequential(torch.nn.Linear(96, 256), torch.nn.ReLU(),
                             torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 10))
    tm.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in
                        m.state_dict(include_packed=True).items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tq = torch.ao.quantization.quantize_dynamic(tm.eval(), {torch.nn.Linear},
                                                    dtype=torch.qint8)
    with torch.no_grad():
        terr = relative_error(tq(torch.from_numpy(x)).numpy(), ref)
    assert err < 0.02 and err <= 1.1 * terr, (err, terr)


def test_layer_state_dict_pickle_and_casts(rng):
    q = quantize_dynamic(mlp())
    x = rng.standard_normal((7, 96)).astype(np.float32)
    y = q(x)
    sd = q.state_dict(include_packed=True)
    assert {k: str(v.dtype) for k, v in sd.items() if k.startswith("0.")} == {
        "0.weight": "modulekit.int8", "0.weight_scale": "modulekit.float32",
        "0.bias": "modulekit.float32"}
    fresh = quantize_dynamic(mlp())
    assert not fresh.load_state_dict(sd).missing_keys
    np.testing.assert_array_equal(fresh(x), y)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(q))(x), y)
    np.testing.assert_array_equal(copy.deepcopy(q)(x), y)
    with pytest.raises(mk.StateDictError):
        fresh.load_state_dict({})  # packed keys count as missing, as for Linear
    q.to(mk.float64)  # the kernels keep float32 scales; the state dict reports the cast
    np.testing.assert_array_equal(q(x), y)
    assert str(q.state_dict(include_packed=True)["0.bias"].dtype) == "modulekit.float64"
    # leading dimensions and other input dtypes
    x3 = rng.standard_normal((2, 3, 96))
    y3 = q(x3)
    assert y3.shape == (2, 3, 10) and y3.dtype == np.float32
    np.testing.assert_array_equal(y3.reshape(6, 10), q(x3.reshape(6, 96).astype(np.float32)))
    with pytest.raises(ValueError, match="DynamicQuantizedLinear.*expected 96"):
        q(np.ones((2, 95), np.float32))


def test_fused_activations_match_the_modules(rng):
    layer = DynamicQuantizedLinear.from_float(nn.Linear(40, 30))
    x = rng.standard_normal((6, 40)).astype(np.float32)
    y = layer(x)
    for name, module in (("relu", nn.ReLU()), ("relu6", nn.ReLU6()), ("gelu", nn.GELU()),
                         ("silu", nn.SiLU()), ("tanh", nn.Tanh())):
        np.testing.assert_array_equal(layer._compute(x, name, 0.0, 6.0), module(y), name)
    with pytest.raises(ValueError, match="unknown activation"):
        layer._compute(x, "swish", 0.0, 0.0)


def test_from_float_and_a_new_layer(rng):
    lin = nn.Linear(12, 5)
    layer = DynamicQuantizedLinear.from_float(lin)
    x = rng.standard_normal((3, 12)).astype(np.float32)
    assert relative_error(layer(x), lin(x)) < 0.02
    empty = DynamicQuantizedLinear(12, 5, bias=False)
    np.testing.assert_array_equal(empty(x), np.zeros((3, 5), np.float32))
    assert "dtype=int8" in repr(empty)
    with pytest.raises(ValueError, match="in_features"):
        DynamicQuantizedLinear(-1, 3)


def test_quantize_dynamic_options(rng):
    m = mlp()
    q = quantize_dynamic(m, {"2"})
    assert type(q[0]) is nn.Linear and type(q[2]) is DynamicQuantizedLinear
    assert quantize_dynamic(m, {nn.Linear}, dtype="qint8", inplace=True) is m
    assert type(m[4]) is DynamicQuantizedLinear
    with pytest.raises(ValueError, match="int8"):
        quantize_dynamic(mlp(), dtype=mk.float16)
    with pytest.raises(ValueError, match="only Linear"):
        quantize_dynamic(mlp(), {nn.ReLU})
    with pytest.raises(ValueError, match="'1' is not a Linear"):
        quantize_dynamic(mlp(), {"1"})
    hooked = mlp()
    hooked[2].register_forward_hook(lambda *a: None)
    with pytest.raises(ValueError, match="hooks"):
        quantize_dynamic(hooked, inplace=True)
    assert type(hooked[0]) is nn.Linear  # nothing changed


def test_compiled_quantized_model(rng):
    q = quantize_dynamic(mlp())
    x = rng.standard_normal((4, 96)).astype(np.float32)
    want = q(x)
    q.compile(fullgraph=True)  # the quantized layer is a leaf of the capture
    np.testing.assert_array_equal(q(x), want)
    np.testing.assert_array_equal(q(x), want)
    assert "DynamicQuantizedLinear" in q.code


def test_compiled_quantized_linear_fuses_its_activation(rng):
    """compile() puts the activation after a DynamicQuantizedLinear into its kernel's
    epilogue (the linear_activation rule): the same bits as the eager layers."""
    import warnings

    nn.manual_seed(0)
    model = quantize_dynamic(nn.Sequential(nn.Linear(24, 48), nn.GELU(), nn.Linear(48, 16),
                                           nn.Tanh(), nn.Linear(16, 4)).eval())
    x = rng.standard_normal((7, 24)).astype(np.float32)
    eager = model(x)
    model.compile()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to eager
        np.testing.assert_array_equal(model(x), eager)
        np.testing.assert_array_equal(model(x), eager)
    code = model.code
    assert "DynamicQuantizedLinear+GELU" in code and "DynamicQuantizedLinear+Tanh" in code, code
