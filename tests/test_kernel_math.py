"""The one activation math of the kernels (kernels/common/act.h, vmath.inc.h).

Three users evaluate it: ``nn.functional``'s activations (``_ops.activation``), the GEMM's
epilogue and the convolution's epilogue. These tests check

* accuracy against the exact value (torch in float64, or mpmath for GELU's erf form) on a dense
  float32 grid, at the bounds docs/api.md ("Activation numerics") documents, on every ISA path;
* NaN, +-inf, huge and signed-zero inputs against torch's float64 answers;
* the same bits from every ISA path (scalar, AVX2, AVX-512: one source, explicit FMAs);
* the same bits from the three users: a fused Linear/Conv + activation equals the activation
  applied after the unfused layer (what ``compile/rules/linear.py:EXACT_EPILOGUES`` relies on).
"""

import math

import numpy as np
import pytest

import modulekit.nn.functional as F
from modulekit._ext import _conv, _gemm, _isa, _ops
from modulekit.compile.rules.linear import EXACT_EPILOGUES

torch = pytest.importorskip("torch")
TF = torch.nn.functional

# name -> torch function; "clamp" uses (-0.5, 0.75)
TORCH = {
    "none": lambda t: t,
    "relu": TF.relu,
    "relu6": TF.relu6,
    "clamp": lambda t: torch.clamp(t, -0.5, 0.75),
    "hardswish": TF.hardswish,
    "gelu": TF.gelu,
    "gelu_tanh": lambda t: TF.gelu(t, approximate="tanh"),
    "silu": TF.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}
ACTS = tuple(_ops.ACTIVATIONS)
TRANSCENDENTAL = ("gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
# The float32 bound of each activation, in units in the last place of the exact result (see
# docs/api.md): min/max are exact; hardswish is torch's own operations in torch's order (two
# roundings after x + 3); GELU-tanh is evaluated in double and rounded once; tanh, sigmoid,
# SiLU and GELU (erf form) are evaluated in float32 (the epilogues and the recurrent cells'
# gates stay cheap).
ULPS = {"none": 0, "relu": 0, "relu6": 0, "clamp": 0, "hardswish": 2, "gelu": 8,
        "gelu_tanh": 1, "silu": 3, "sigmoid": 3, "tanh": 3}
F32_TINY = np.finfo(np.float32).tiny


def act(x, name, **kw):
    return _ops.activation(x, name, -0.5, 0.75, **kw)


def dense_grid(step=4099, limit=None):
    """Every ``step``-th float32 bit pattern (both signs, every binade), finite."""
    bits = np.arange(0, 2**32, step, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[np.isfinite(x)]
    if limit is not None:
        x = x[np.abs(x) < limit]
    return x


def exact(x, name):
    """The exact activation of float32 ``x``, in float64."""
    x64 = np.asarray(x, dtype=np.float64)
    if name == "gelu":
        mpmath = pytest.importorskip("mpmath")  # torch's dependency (through sympy)
        out = np.empty_like(x64)
        with mpmath.workdps(40):
            for i, v in enumerate(x64.ravel()):
                m = mpmath.mpf(float(v))
                out.flat[i] = float(m * mpmath.erfc(-m / mpmath.sqrt(2)) / 2)
        return out
    if name == "gelu_tanh":  # torch's float64 form cancels for x < 0: this one does not
        u = math.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64**3)
        with np.errstate(over="ignore"):
            return x64 / (1.0 + np.exp(-2.0 * u))
    if name == "silu":
        with np.errstate(over="ignore"):
            return x64 / (1.0 + np.exp(-x64))
    with torch.no_grad():
        return TORCH[name](torch.from_numpy(x64)).numpy()


def ulp_error(y, ref):
    """|y - ref| in float32 units in the last place of ref (subnormal spacing below FLT_MIN)."""
    ref32 = np.abs(ref).astype(np.float32)
    spacing = np.spacing(np.maximum(ref32, F32_TINY)).astype(np.float64)
    return np.abs(y.astype(np.float64) - ref) / spacing


def same_bits(a, b):
    """Equal bit patterns, any NaN equal to any NaN (payload and sign are not specified)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    ints = {4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return (a.view(ints) == b.view(ints)) | (np.isnan(a) & np.isnan(b))


# ---- accuracy -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ACTS)
def test_float32_accuracy_dense_grid(isa, name):
    """About a million float32 values over every binade (|x| < 1e37: hardswish's x * 6
    overflows past that, as in torch): within the documented ulp bound of the exact value."""
    x = dense_grid(4099 if name != "gelu" else 65537, limit=1e37)
    y = act(x, name)
    ref = exact(x, name)
    if name == "silu":  # x < -87.3: x exp(x) from a subnormal exp(x), |y| < 1e-36
        deep = x < -87.3
        np.testing.assert_array_less(np.abs(y[deep] - ref[deep]), 2.0**-149 * np.abs(x[deep]))
        x, y, ref = x[~deep], y[~deep], ref[~deep]
    err = ulp_error(y, ref)
    worst = int(np.argmax(err))
    assert err[worst] <= ULPS[name], (name, x[worst], y[worst], ref[worst], err[worst])


@pytest.mark.parametrize("name", ACTS)
def test_float64_accuracy(name):
    """float64: libm-based, within a few float64 ulps (the GELU tail included)."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(2000) * 6, np.linspace(-38, 38, 1001)])
    y = act(x, name)
    if name == "gelu":
        ref = exact(x, name)
    else:
        with torch.no_grad():
            ref = TORCH[name](torch.from_numpy(x)).numpy()
        if name in ("gelu_tanh", "silu"):
            ref = exact(x, name)  # torch's float64 gelu_tanh cancels for x < 0
    rel = np.full(x.shape, 1.2e-15)  # a few roundings on each side
    if name == "gelu":
        rel[:] = 2e-15
    if name == "gelu_tanh":  # exp amplifies the rounding of its argument 2u by |2u|
        u = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
        rel = 2.2e-16 * (4 + 4 * np.abs(2 * u))
    np.testing.assert_array_less(np.abs(y - ref), rel * np.abs(ref) + 1e-300)


@pytest.mark.parametrize("name", ACTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_against_torch(isa, name, dtype):
    """Typical inputs against torch's own function in the same dtype."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((37, 53)) * 4).astype(dtype)
    with torch.no_grad():
        ref = TORCH[name](torch.from_numpy(x)).numpy()
    rtol, atol = (1e-6, 1e-6) if dtype == np.float32 else (1e-14, 1e-14)
    if name == "gelu_tanh":  # torch forms 1 + tanh(u): cancellation for x < 0
        atol = 1e-6 if dtype == np.float32 else 1e-15
    np.testing.assert_allclose(act(x, name), ref, rtol=rtol, atol=atol)


SPECIALS = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 3.4e38, -3.4e38, 88.7,
            -88.7, 104.0, -104.0, 1e-30, -1e-30, 1e-45, -1e-45]


@pytest.mark.parametrize("name", ACTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_special_values(isa, name, dtype):
    """NaN gives NaN; +-inf, huge and tiny values give torch's float64 answer (NaN where
    torch's formula multiplies inf by 0: SiLU, GELU, Hardswish at -inf), to the dtype's
    accuracy; signed zeros as torch."""
    x = np.array(SPECIALS, dtype=dtype)
    y = act(x, name)
    with torch.no_grad():
        ref = TORCH[name](torch.from_numpy(x.astype(np.float64))).numpy()
    if name == "hardswish" and dtype == np.float32:  # x * 6 overflows float32, as in torch
        with torch.no_grad():
            ref = TORCH[name](torch.from_numpy(x)).numpy().astype(np.float64)
    assert np.array_equal(np.isnan(y), np.isnan(ref)), (name, x, y, ref)
    fin = ~np.isnan(ref)
    rel = 1e-6 if dtype == np.float32 else 1e-14
    tiny = 2e-43 if dtype == np.float32 else 1e-300  # SiLU: 2^-149 abs(x) below x = -87.3
    np.testing.assert_allclose(y[fin], ref[fin].astype(dtype), rtol=rel, atol=tiny)
    zero = fin & (ref == 0)
    if name in ("none", "relu", "relu6", "clamp"):  # exact ops: the sign of zero too
        assert np.array_equal(np.signbit(y[zero]), np.signbit(ref[zero])), (name, x[zero])


def test_bad_input():
    x = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="activation: unknown activation 'mish'"):
        _ops.activation(x, "mish")
    with pytest.raises(ValueError, match="clamp needs alpha"):
        _ops.activation(x, "clamp", 1.0, 0.0)
    with pytest.raises(ValueError, match="out must be a writable C-contiguous float32"):
        _ops.activation(x, "silu", out=np.empty(4, np.float64))
    with pytest.raises(TypeError, match="real numbers"):
        _ops.activation(np.ones(3, np.complex64), "silu")
    out = np.full(4, 7.0, np.float32)
    with pytest.raises(ValueError):
        _ops.activation(x, "silu", out=out[::2])
    assert (out == 7.0).all()  # nothing written after an error


@pytest.mark.parametrize("name", TRANSCENDENTAL + ("hardswish",))
def test_layouts_dtypes_and_inplace(name):
    """Non-contiguous, 0-d, empty, integer and float16 inputs; out= in place."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((9, 31)) * 3).astype(np.float32)
    ref = act(x, name)
    assert same_bits(act(np.asfortranarray(x), name), ref).all()
    assert same_bits(act(x.T, name), ref.T).all()
    assert same_bits(act(x[:, ::3], name), ref[:, ::3]).all()
    assert act(np.float32(1.5), name).shape == ()
    assert act(np.zeros((0, 3), np.float32), name).shape == (0, 3)
    assert act(np.arange(5), name).dtype == np.float32
    assert act(x.astype(np.float16), name).dtype == np.float32
    y = x.copy()
    assert act(y, name, out=y) is y and same_bits(y, ref).all()


# ---- one math on every ISA path --------------------------------------------------------------


@pytest.mark.parametrize("name", ACTS)
def test_same_bits_on_every_isa(name):
    """The scalar, AVX2 and AVX-512 instantiations give the same bits (odd lengths: masked
    tails, and long enough for the OpenMP split)."""
    x = np.concatenate([dense_grid(20011), np.float32(SPECIALS)])
    x = x[: x.size // 17 * 17 - 3]
    results = []
    for level in _isa.available_isas():
        previous = _isa.set_isa(level)
        try:
            results.append((level, act(x, name)))
        finally:
            _isa.set_isa(previous)
    for level, y in results[1:]:
        ok = same_bits(y, results[0][1])
        assert ok.all(), (name, level, x[~ok][:4], y[~ok][:4], results[0][1][~ok][:4])


# ---- one math in every kernel family ---------------------------------------------------------

GEMM_ACTS = tuple(a for a in _gemm.ACTIVATIONS)
CONV_ACTS = ("relu", "relu6", "silu", "hardswish", "gelu", "gelu_tanh", "sigmoid", "tanh")


@pytest.mark.parametrize("storage", ["float32", "float64", "float16"])
@pytest.mark.parametrize("name", GEMM_ACTS)
def test_gemm_epilogue_is_functional(isa, name, storage):
    """Linear + activation fused in the GEMM's epilogue == the activation after the Linear,
    bit for bit (small-M and main paths, odd widths)."""
    rng = np.random.default_rng(3)
    dt = np.float64 if storage == "float64" else np.float32
    w = (rng.standard_normal((45, 29)) * 0.6).astype(dt)
    b = rng.standard_normal(45).astype(dt)
    packed = _gemm.pack_linear(w, b, storage)
    for m in (1, 5, 23, 70):
        x = (rng.standard_normal((m, 29)) * 2).astype(dt)
        z = packed.forward(x, "none")
        fused = packed.forward(x, name, -0.5, 0.75)
        ok = same_bits(fused, act(z, name))
        assert ok.all(), (name, m, z[~ok][:4], fused[~ok][:4])


@pytest.mark.parametrize(
    "geom",
    [
        dict(k=1, groups=1, stride=1, pad=0),  # 1x1 kernels
        dict(k=3, groups=1, stride=1, pad=1),  # direct / Winograd
        dict(k=3, groups=1, stride=2, pad=1),  # strided: phase images
        dict(k=3, groups=16, stride=1, pad=1),  # depthwise
        dict(k=5, groups=1, stride=1, pad=2),
    ],
    ids=["1x1", "3x3", "3x3s2", "dw3x3", "5x5"],
)
@pytest.mark.parametrize("name", CONV_ACTS)
def test_conv_epilogue_is_functional(isa, name, geom):
    """Conv (+ residual) + activation fused in the convolution's epilogue == the activation
    after the unfused convolution, bit for bit, on each convolution algorithm."""
    rng = np.random.default_rng(4)
    cin = cout = 16
    w = (rng.standard_normal((cout, cin // geom["groups"], geom["k"], geom["k"])) * 0.3)
    w = w.astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    packed = _conv.pack_conv2d(w, b, geom["stride"], geom["pad"], 1, geom["groups"])
    for hw in (7, 20):
        x = (rng.standard_normal((2, cin, hw, hw)) * 2).astype(np.float32)
        z = packed.forward(x)
        res = rng.standard_normal(z.shape).astype(np.float32)
        for residual in (None, res):
            pre = z if residual is None else packed.forward(x, None, residual)
            fused = packed.forward(x, name, residual)
            ok = same_bits(fused, act(pre, name))
            assert ok.all(), (name, hw, pre[~ok][:4], fused[~ok][:4])


@pytest.mark.parametrize("name", ["relu", "relu6", "silu", "hardswish", "gelu", "sigmoid"])
def test_conv_epilogue_float64_is_functional(name):
    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 4, 3, 3))
    packed = _conv.pack_conv2d(w, rng.standard_normal(6), 1, 1)
    x = rng.standard_normal((1, 4, 9, 9)) * 2
    assert same_bits(packed.forward(x, name), act(packed.forward(x), name)).all()


@pytest.mark.parametrize("name", ["silu", "gelu", "gelu_tanh", "sigmoid", "tanh", "hardswish",
                                  "relu", "relu6"])
def test_functional_and_modules_are_the_kernels(isa, name):
    """nn.functional's activations are the kernels' math: bit-identical to _ops.activation
    (so to the fused epilogues above)."""
    fn = {
        "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu,
        "sigmoid": F.sigmoid, "tanh": F.tanh, "hardswish": F.hardswish, "relu": F.relu,
        "relu6": F.relu6,
    }[name]
    x = dense_grid(40009)
    assert same_bits(fn(x), act(x, name)).all()
    x64 = x.astype(np.float64)
    assert same_bits(fn(x64), act(x64, name)).all()


def test_exact_epilogues_cover_every_bit_identical_activation():
    """The compile rule fuses every activation whose epilogue is now bit-identical."""
    assert set(EXACT_EPILOGUES) == {"relu", "relu6", "hardswish", "gelu", "gelu_tanh", "silu",
                                    "sigmoid", "tanh"}
