"""Tests of the packed GEMM engine (modulekit._ext._gemm).

References are computed in float64 from the weights exactly as packed (``unpack()``: for
float16/bfloat16 storage these are the ROUNDED weights), so the tolerances only cover the
float32 (or float64) arithmetic of the kernels: a per-element bound ``rtol * scale`` with
``scale = |x| @ |W|.T + |b|`` (the size of the terms summed), rtol 1e-5 for float32 compute
(K <= ~1000; typical error ~sqrt(K) * 6e-8) and 1e-13 for float64. Activations are Lipschitz
(constant <= 1.13), so the same bound, plus one float32 rounding of the result, applies after
them. Every test runs on every instruction-set path this CPU has.
"""

import functools
import math
import pickle

import numpy as np
import pytest

from modulekit._ext import _gemm, _isa, _openmp_helpers

ISAS = _isa.available_isas()
STORAGES = ("float32", "float64", "float16", "bfloat16")
ACTS = ("none", "relu", "relu6", "clamp", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh",
        "hardswish")


@pytest.fixture(params=ISAS)
def isa(request):
    previous = _isa.set_isa(request.param)
    yield request.param
    _isa.set_isa(previous)


@pytest.fixture
def threads():
    """Restore modulekit's thread count after a test changes it."""
    yield _openmp_helpers.set_num_threads
    _openmp_helpers.reset_num_threads()


@functools.cache
def _gelu_exact1(v):
    mpmath = pytest.importorskip("mpmath")  # torch's dependency (through sympy)
    if not math.isfinite(v):
        return 0.5 * v * math.erfc(-v * math.sqrt(0.5))  # torch's NaN at -inf
    with mpmath.workdps(40):
        x = mpmath.mpf(v)
        return float(x * mpmath.erfc(-x / mpmath.sqrt(2)) / 2)


# GELU to the last bit (mpmath): float64 erfc of a rounded -z/sqrt(2) is off by up to ~1e-13
# relative in the far tail (2 z^2 times the argument's rounding)
_gelu_exact = np.vectorize(_gelu_exact1, otypes=[np.float64])


def act_ref(z, act, alpha=-0.5, beta=0.75):
    """Activation in float64 (exact formulas)."""
    z = np.asarray(z, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if act == "none":
            return z
        if act == "relu":
            return np.where(np.isnan(z), z, np.maximum(z, 0.0))
        if act == "relu6":
            return np.where(np.isnan(z), z, np.clip(z, 0.0, 6.0))
        if act == "clamp":
            return np.where(np.isnan(z), z, np.clip(z, alpha, beta))
        # (1 + erf(t)) == erfc(-t) and (1 + tanh(u)) == 2 / (1 + exp(-2u)): the forms without
        # cancellation, so the reference is accurate for negative z too
        if act == "gelu":
            return _gelu_exact(z)
        if act == "gelu_tanh":
            u = math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)
            return z / (1.0 + np.exp(-2.0 * u))
        if act == "silu":
            return z / (1.0 + np.exp(-z))
        if act == "sigmoid":
            return 1.0 / (1.0 + np.exp(-z))
        if act == "tanh":
            return np.tanh(z)
        if act == "hardswish":
            return z * np.clip(z + 3.0, 0.0, 6.0) / 6.0
    raise AssertionError(act)


def make(rng, m, n, k, storage="float32", bias=True):
    w = rng.standard_normal((n, k))
    b = rng.standard_normal(n) if bias else None
    x = rng.standard_normal((m, k))
    p = _gemm.pack_linear(w, b, storage)
    return p, x.astype(p.compute_dtype)


def check(p, x, y, act="none", alpha=-0.5, beta=0.75):
    """Compare y = p.forward(x, act) with the float64 reference of the packed weights."""
    w, b = p.unpack()
    w64 = w.astype(np.float64)
    x64 = np.asarray(x, dtype=np.float64)
    b64 = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
    z = x64 @ w64.T + b64
    scale = np.abs(x64) @ np.abs(w64).T + np.abs(b64)
    rtol = 1e-13 if p.compute_dtype == np.float64 else 1e-5
    eps = 1e-15 if p.compute_dtype == np.float64 else 1.2e-7
    ref = act_ref(z, act, alpha, beta)
    assert y.shape == z.shape and y.dtype == p.compute_dtype and y.flags.c_contiguous
    tol = 1.2 * rtol * scale + eps * np.abs(ref) + 1e-30
    bad = ~(np.abs(y - ref) <= tol)
    assert not bad.any(), (
        f"{bad.sum()} elements off, worst {np.max(np.abs(y - ref) - tol)} ({p.kernel}, act={act})"
    )


M_VALUES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 63, 64, 65, 257, 1031)


@pytest.mark.parametrize("storage", STORAGES)
def test_shapes_every_m(isa, storage):
    rng = np.random.default_rng(1)
    p, _ = make(rng, 1, 37, 131, storage)
    for m in M_VALUES:
        x = rng.standard_normal((m, 131)).astype(p.compute_dtype)
        check(p, x, p.forward(x))


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize(
    "n,k", [(1, 1), (1, 7), (5, 1), (13, 29), (31, 97), (64, 64), (97, 389), (33, 0), (0, 5)]
)
def test_shapes_odd_sizes(isa, storage, n, k):
    rng = np.random.default_rng(2)
    for m, bias in ((1, True), (3, False), (11, True), (70, False)):
        p, x = make(rng, m, n, k, storage, bias)
        check(p, x, p.forward(x))


def test_large(isa):
    """Several KC blocks, MC blocks and panels; both threads when OpenMP is on."""
    rng = np.random.default_rng(3)
    p, x = make(rng, 300, 520, 1100)
    check(p, x, p.forward(x, "relu"), "relu")
    p, x = make(rng, 150, 100, 700, "float64")
    check(p, x, p.forward(x, "silu"), "silu")


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("act", ACTS)
def test_epilogues(isa, storage, act):
    rng = np.random.default_rng(4)
    for m in (1, 5, 23):  # small-M path and main path
        p, x = make(rng, m, 45, 20, storage)
        x *= 0.7
        check(p, x, p.forward(x, act, -0.5, 0.75), act)


GRID = np.concatenate(
    [
        np.linspace(-12, 12, 2401),
        np.geomspace(1e-30, 40, 300),
        -np.geomspace(1e-30, 40, 300),
        [0.0, -0.0, 88.0, -88.0, 100.0, -100.0, 1e30, -1e30],
    ]
)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("act", ACTS)
def test_activation_accuracy(isa, dtype, act):
    """act(x) through an identity weight: no rounding before the activation, so the result
    must be the exact activation rounded to the output dtype (float32: 3e-7 relative, a few
    roundings, 5e-7 for the float32 evaluations of GELU, SiLU and Sigmoid, the same on every
    path; float64: 1e-13)."""
    x = GRID.astype(dtype)
    eye = _gemm.pack_linear(np.eye(8), None, dtype)
    xs = np.resize(x, (x.size // 8 + 1) * 8).reshape(-1, 8)
    for m in (1, 7, xs.shape[0]):
        y = eye.forward(xs[:m], act, -0.5, 0.75)
        ref = act_ref(xs[:m].astype(np.float64), act)
        rel = 3e-7 if dtype == "float32" else 1e-13
        if dtype == "float32" and act in ("gelu", "silu", "sigmoid"):
            rel = 5e-7  # evaluated in float32 (kernels/common), the same on every path
        tiny = np.finfo(dtype).tiny
        ok = np.abs(y - ref) <= rel * np.abs(ref) + tiny
        assert ok.all(), (act, xs[:m][~ok][:5], y[~ok][:5], ref[~ok][:5])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_against_torch(isa, dtype):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(5)
    w = rng.standard_normal((70, 90)).astype(dtype)
    b = rng.standard_normal(70).astype(dtype)
    p = _gemm.pack_linear(w, b, dtype)
    fns = {
        "none": lambda t: t,
        "relu": F.relu,
        "relu6": F.relu6,
        "clamp": lambda t: torch.clamp(t, -0.5, 0.75),
        "gelu": F.gelu,
        "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
        "silu": F.silu,
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
        "hardswish": F.hardswish,
    }
    for m in (1, 6, 40):
        x = (rng.standard_normal((m, 90)) * 0.3).astype(dtype)
        z = F.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b))
        scale = np.abs(x).astype(np.float64) @ np.abs(w).T + np.abs(b)
        rtol = 1e-5 if dtype == "float32" else 1e-13
        for act, fn in fns.items():
            ref = fn(z).numpy().astype(np.float64)
            y = p.forward(x, act, -0.5, 0.75)
            # both sides round the pre-activation: twice the bound, plus torch's own rounding
            tol = 2.4 * rtol * scale + 4 * np.finfo(dtype).eps * np.abs(ref)
            np.testing.assert_array_less(np.abs(y - ref), tol + 1e-30, err_msg=act)


@pytest.mark.parametrize("storage", STORAGES)
def test_input_layouts(isa, storage):
    rng = np.random.default_rng(6)
    p, x = make(rng, 1, 19, 53, storage)
    dt = p.compute_dtype
    big = rng.standard_normal((40, 120)).astype(dt)
    cases = {
        "fortran": np.asfortranarray(rng.standard_normal((30, 53)).astype(dt)),
        "neg_rows": big[::-1, :53],
        "neg_cols": big[:9, 53:0:-1][:, :53],
        "both_neg": big[::-2, ::-2][:, :53],
        "col_step": big[:5, ::2][:, :53],
        "broadcast": np.broadcast_to(big[0, :53], (12, 53)),
        "single_neg": big[3:4, 100:47:-1],
        "float16": rng.standard_normal((4, 53)).astype(np.float16),
        "list": rng.standard_normal((2, 53)).tolist(),
    }
    for name, xin in cases.items():
        y = p.forward(xin)
        xr = np.asarray(xin, dtype=np.float64)
        check(p, xr.astype(dt), y)
        y2 = p.forward(np.ascontiguousarray(xr, dtype=dt))
        np.testing.assert_array_equal(y, y2, err_msg=name)
    # misaligned data (byte offset) is copied, not mis-read
    raw = np.zeros(53 * 3 * dt.itemsize + 1, np.uint8)
    mis = raw[1:].view(dt).reshape(3, 53)
    mis[...] = rng.standard_normal((3, 53))
    np.testing.assert_array_equal(p.forward(mis), p.forward(mis.copy()))


def test_out_argument(isa):
    rng = np.random.default_rng(7)
    p, x = make(rng, 10, 24, 16)
    out = np.empty((10, 24), np.float32)
    assert p.forward(x, "relu", out=out) is out
    np.testing.assert_array_equal(out, p.forward(x, "relu"))
    with pytest.raises(ValueError, match="shape"):
        p.forward(x, out=np.empty((10, 23), np.float32))
    with pytest.raises(TypeError, match="dtype"):
        p.forward(x, out=np.empty((10, 24), np.float64))
    with pytest.raises(ValueError, match="C-contiguous"):
        p.forward(x, out=np.empty((24, 10), np.float32).T)
    with pytest.raises(TypeError, match="ndarray"):
        p.forward(x, out=[[0.0] * 24] * 10)
    p2, _ = make(rng, 1, 16, 16)
    buf = rng.standard_normal((10, 16)).astype(np.float32)
    with pytest.raises(ValueError, match="overlap"):
        p2.forward(buf, out=buf)


@pytest.mark.parametrize("act", ["none", "relu", "relu6", "clamp", "gelu", "tanh", "sigmoid"])
def test_nan_propagates(isa, act):
    rng = np.random.default_rng(8)
    for storage in ("float32", "float64", "bfloat16"):
        for m in (2, 20):
            p, x = make(rng, m, 40, 33, storage)
            x[1, 5] = np.nan
            y = p.forward(x, act, -0.5, 0.75)
            assert np.isnan(y[1]).all(), (storage, m, y[1])
            assert not np.isnan(np.delete(y, 1, axis=0)).any()


def test_nan_weight_and_bias(isa):
    w = np.ones((20, 10))
    w[3, 4] = np.nan
    b = np.zeros(20)
    b[7] = np.nan
    y = _gemm.pack_linear(w, b).forward(np.ones((5, 10), np.float32), "relu")
    assert np.isnan(y[:, 3]).all() and np.isnan(y[:, 7]).all()
    assert np.isfinite(np.delete(y, [3, 7], axis=1)).all()


def test_bad_inputs():
    p = _gemm.pack_linear(np.ones((4, 6)), np.zeros(4))
    with pytest.raises(ValueError, match="in_features=6"):
        p.forward(np.ones((3, 5), np.float32))
    with pytest.raises(ValueError, match="2-D"):
        p.forward(np.ones(6, np.float32))
    with pytest.raises(ValueError, match="2-D"):
        p.forward(np.ones((2, 3, 6), np.float32))
    with pytest.raises(TypeError, match="complex128"):
        p.forward(np.ones((3, 6), complex))
    with pytest.raises(TypeError, match="object"):
        p.forward(np.array([[object()] * 6]))
    with pytest.raises(TypeError, match="int64"):
        p.forward(np.ones((3, 6), np.int64))
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        p.forward(np.ones((3, 6), np.float32), "swish")
    with pytest.raises(ValueError, match="alpha"):
        p.forward(np.ones((3, 6), np.float32), "clamp", 1.0, 0.0)
    with pytest.raises(ValueError, match="alpha"):
        p.forward(np.ones((3, 6), np.float32), "clamp", math.nan, 1.0)
    with pytest.raises(TypeError, match="pack_linear"):
        _gemm.PackedLinear()
    with pytest.raises(ValueError, match="pack_linear"):
        _gemm.PackedLinear.__new__(_gemm.PackedLinear).forward(np.ones((1, 1), np.float32))
    with pytest.raises(ValueError, match="pack_linear"):
        _gemm.PackedLinear.__new__(_gemm.PackedLinear).unpack()
    with pytest.raises(ValueError, match="unknown storage 'int8'"):
        _gemm.pack_linear(np.ones((4, 6)), None, "int8")
    with pytest.raises(ValueError, match=r"bias must have shape \(4,\)"):
        _gemm.pack_linear(np.ones((4, 6)), np.zeros(5))
    with pytest.raises(ValueError, match="weight must be 2-D"):
        _gemm.pack_linear(np.ones(6))
    with pytest.raises(TypeError, match="weight must be"):
        _gemm.pack_linear(np.ones((4, 6), np.int32))
    with pytest.raises(TypeError, match="bias must be"):
        _gemm.pack_linear(np.ones((4, 6)), np.array(["a"] * 4))


@pytest.mark.parametrize("storage", STORAGES)
def test_unpack_roundtrip_and_pickle(isa, storage):
    rng = np.random.default_rng(9)
    w = rng.standard_normal((23, 41)) * 3
    b = rng.standard_normal(23)
    p = _gemm.pack_linear(w, b, storage)
    wu, bu = p.unpack()
    sdt = np.float64 if storage == "float64" else None
    expect = w.astype(wu.dtype) if sdt is None else w
    assert wu.dtype.name == storage and wu.shape == (23, 41)
    np.testing.assert_array_equal(wu.view(np.uint8), np.asarray(expect, wu.dtype).view(np.uint8))
    np.testing.assert_array_equal(bu, b.astype(p.compute_dtype))
    assert p.has_bias and p.in_features == 41 and p.out_features == 23 and p.storage == storage
    assert p.nbytes >= 23 * 41 * wu.dtype.itemsize and p.nbytes % 64 == 0
    q = pickle.loads(pickle.dumps(p))
    x = rng.standard_normal((7, 41)).astype(p.compute_dtype)
    np.testing.assert_array_equal(q.forward(x), p.forward(x))
    p2 = _gemm.pack_linear(wu, None, storage)
    assert p2.unpack()[1] is None and not p2.has_bias
    np.testing.assert_array_equal(p2.unpack()[0].view(np.uint8), wu.view(np.uint8))


def test_isa_switch_repacks():
    rng = np.random.default_rng(10)
    p, x = make(rng, 9, 50, 30)
    first = p.forward(x)
    for name in ISAS:
        previous = _isa.set_isa(name)
        try:
            y = p.forward(x)
            assert name.replace("generic", "scalar") in p.kernel
            check(p, x, y)
        finally:
            _isa.set_isa(previous)
    check(p, x, first)


def test_repacked_linear_collected_in_a_cycle(monkeypatch):
    """A re-packed PackedLinear (it keeps the replaced buffers until it is freed) that is
    garbage in a reference cycle frees them without error: the collector must not clear the
    list __dealloc__ reads."""
    import gc

    rng = np.random.default_rng(12)
    p, x = make(rng, 9, 50, 30)
    for name in ISAS:  # each ISA switch re-packs and retires the old buffer
        previous = _isa.set_isa(name)
        try:
            p.forward(x)
        finally:
            _isa.set_isa(previous)
    p.forward(x)
    errors = []
    monkeypatch.setattr("sys.unraisablehook", errors.append)
    cycle = [p]
    cycle.append(cycle)
    del p, cycle
    gc.collect()
    assert errors == []


@pytest.mark.skipif(not _openmp_helpers.openmp_enabled(), reason="built without OpenMP")
@pytest.mark.parametrize("storage", ["float32", "float64", "float16"])
def test_threads_same_result(isa, storage, threads):
    rng = np.random.default_rng(11)
    for m, n, k in ((3, 1500, 400), (400, 90, 70), (130, 400, 450)):
        p, x = make(rng, m, n, k, storage)
        threads(1)
        assert _gemm._planned_threads(p, m) == 1
        y1 = p.forward(x, "gelu")
        threads(2)
        assert _gemm._planned_threads(p, m) == 2
        y2 = p.forward(x, "gelu")
        np.testing.assert_array_equal(y1, y2)
        check(p, x, y2, "gelu")
    threads(2)
    small, _ = make(rng, 1, 64, 64)
    assert _gemm._planned_threads(small, 1) == 1  # tiny calls stay serial
    assert _gemm._planned_threads(small, 16) == 1


def _matmul_check(a, b, out):
    a64 = np.asarray(a, np.float64)
    b64 = np.asarray(b, np.float64)
    ref = np.matmul(a64, b64)
    scale = np.matmul(np.abs(a64), np.abs(b64))
    rtol = 1e-13 if out.dtype == np.float64 else 1e-5
    assert out.shape == ref.shape and out.flags.c_contiguous
    assert np.all(np.abs(out - ref) <= rtol * scale + 1e-30)


def test_matmul(isa):
    rng = np.random.default_rng(12)
    f32 = np.float32
    a = rng.standard_normal((65, 300)).astype(f32)
    b = rng.standard_normal((300, 47)).astype(f32)
    out = _gemm.matmul(a, b)
    assert out.dtype == f32
    _matmul_check(a, b, out)
    _matmul_check(a.T.copy().T, b[::-1][::-1], _gemm.matmul(np.asfortranarray(a), b))
    _matmul_check(a[::-1], b[:, ::-1], _gemm.matmul(a[::-1], b[:, ::-1]))
    _matmul_check(a[:1], b, _gemm.matmul(a[:1], b))
    a3 = rng.standard_normal((3, 17, 40)).astype(f32)
    b3 = rng.standard_normal((3, 40, 9)).astype(f32)
    _matmul_check(a3, b3, _gemm.matmul(a3, b3))
    _matmul_check(a3, b3[0], _gemm.matmul(a3, b3[0]))
    _matmul_check(a3[0], b3, _gemm.matmul(a3[0], b3))
    _matmul_check(a3[:1], b3, _gemm.matmul(a3[:1], b3))
    _matmul_check(
        a3.transpose(0, 2, 1)[:, :, :17].transpose(0, 2, 1),
        b3,
        _gemm.matmul(a3.transpose(0, 2, 1)[:, :, :17].transpose(0, 2, 1), b3),
    )
    d = _gemm.matmul(a.astype(np.float64), b)
    assert d.dtype == np.float64
    _matmul_check(a, b, d)
    h = _gemm.matmul(a.astype(np.float16), b.astype(np.float16))
    assert h.dtype == f32
    _matmul_check(a.astype(np.float16), b.astype(np.float16), h)
    z = _gemm.matmul(np.ones((4, 0), f32), np.ones((0, 5), f32))
    assert z.shape == (4, 5) and not z.any()
    assert _gemm.matmul(np.ones((0, 3), f32), np.ones((3, 5), f32)).shape == (0, 5)
    with pytest.raises(ValueError, match="inner dimensions"):
        _gemm.matmul(a, a)
    with pytest.raises(ValueError, match="2-D or 3-D"):
        _gemm.matmul(a[0], b)
    with pytest.raises(ValueError, match="broadcast"):
        _gemm.matmul(np.ones((2, 3, 4), f32), np.ones((3, 4, 5), f32))
    with pytest.raises(TypeError, match="complex"):
        _gemm.matmul(a.astype(complex), b)
    with pytest.raises(TypeError, match="int64"):
        _gemm.matmul(np.ones((2, 2), np.int64), np.ones((2, 2), np.int64))


def test_linear_function(isa):
    rng = np.random.default_rng(13)
    x = rng.standard_normal((6, 30)).astype(np.float32)
    w = rng.standard_normal((12, 30)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    y = _gemm.linear(x, w, b, "relu")
    assert y.dtype == np.float32
    check(_gemm.pack_linear(w, b), x, y, "relu")
    y64 = _gemm.linear(x.astype(np.float64), w)
    assert y64.dtype == np.float64
    check(_gemm.pack_linear(w, None, "float64"), x.astype(np.float64), y64)
    yh = _gemm.linear(x, w.astype(np.float16), b)
    check(_gemm.pack_linear(w.astype(np.float16), b, "float16"), x, yh)


def test_warm_threads_and_repr():
    _gemm.warm_threads()
    p = _gemm.pack_linear(np.ones((3, 2)), None, "bfloat16")
    assert "PackedLinear(in_features=2, out_features=3, bias=False" in repr(p)
    assert p.compute_dtype == np.float32


@pytest.mark.skipif(not _openmp_helpers.openmp_enabled(), reason="built without OpenMP")
def test_matmul_batched_threads(isa, threads):
    """Many small products run one per thread; same results as one thread."""
    rng = np.random.default_rng(14)
    a3 = rng.standard_normal((9, 20, 33)).astype(np.float32)
    b3 = rng.standard_normal((9, 33, 18)).astype(np.float32)
    cases = [(a3, b3), (a3, b3[0]), (a3[0], b3), (a3[:, ::-1], b3[:, ::-1])]
    cases.append((a3.astype(np.float64), b3))
    for a, b in cases:
        threads(1)
        y1 = _gemm.matmul(a, b)
        threads(2)
        y2 = _gemm.matmul(a, b)
        np.testing.assert_array_equal(y1, y2)
        _matmul_check(a, b, y2)


@pytest.mark.skipif(not _openmp_helpers.openmp_enabled(), reason="built without OpenMP")
def test_matmul_threads_tiles(isa, threads):
    """Threaded matmul (B packed in chunks by the team, then row or panel tiles from a shared
    counter): same results as one thread and as a pre-packed forward, any strides."""
    rng = np.random.default_rng(15)
    # row tiles (many rows), panel tiles (few rows, many columns), K past one KC block,
    # remainders of every register block
    for m, k, n in ((300, 401, 77), (13, 389, 1100), (97, 1030, 45), (40, 64, 300)):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        threads(1)
        y1 = _gemm.matmul(a, b)
        threads(2)
        y2 = _gemm.matmul(a, b)
        np.testing.assert_array_equal(y1, y2)
        np.testing.assert_array_equal(y2, _gemm.pack_linear(b.T).forward(a))
        _matmul_check(a, b, y2)
        bt = np.asfortranarray(b)
        np.testing.assert_array_equal(_gemm.matmul(a[::-1], bt[:, ::-1]), y1[::-1, ::-1])
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        threads(1)
        d1 = _gemm.matmul(a64, b64)
        threads(2)
        np.testing.assert_array_equal(_gemm.matmul(a64, b64), d1)


def _packed_path(f, *args):
    """f(*args) with the row-direct path (unit-stride inputs of more than 8 rows) off."""
    previous = _gemm._set_rowdirect(False)
    try:
        return f(*args)
    finally:
        _gemm._set_rowdirect(previous)


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("act", ["none", "relu6", "gelu"])
def test_rowdirect_matches_packed_path(isa, storage, act, threads):
    """More than 8 rows of a unit-stride input run the MR-row direct kernels on the rows in
    place (the remainder rows on the small-M kernel of their count, the 1-row one over panel
    pairs): bit-identical to packing the input, for every row remainder, several MC row
    blocks, K past one KC block, an odd panel count and a partial last panel, negative row
    strides and both thread counts."""
    rng = np.random.default_rng(16)
    for m, n, k in ((9, 70, 33), (16, 97, 400), (17, 161, 1), (31, 33, 777), (33, 5, 64),
                    (201, 130, 390), (40, 1100, 100)):
        p, x = make(rng, m, n, k, storage)
        big = rng.standard_normal((m, k + 3)).astype(p.compute_dtype)
        inputs = {"contiguous": x, "row_gap": big[:, 2:k + 2], "neg_rows": big[::-1, :k]}
        for nt in (1, 2):
            threads(nt)
            direct = {name: p.forward(xin, act, 0.0, 6.0) for name, xin in inputs.items()}
            packed = {name: _packed_path(p.forward, xin, act, 0.0, 6.0)
                      for name, xin in inputs.items()}
            for name in inputs:
                np.testing.assert_array_equal(direct[name], packed[name], err_msg=f"{name} {m}")
        check(p, x, direct["contiguous"], "relu6" if act == "relu6" else act, 0.0, 6.0)


def test_rowdirect_matmul_matches_packed_path(isa, threads):
    """matmul with a unit-stride A (row-direct) equals the packed-A path bit for bit."""
    rng = np.random.default_rng(17)
    for m, k, n in ((300, 401, 77), (97, 1030, 45), (20, 64, 300), (257, 3, 129)):
        for dt in (np.float32, np.float64):
            a = rng.standard_normal((m, k)).astype(dt)
            b = rng.standard_normal((k, n)).astype(dt)
            for nt in (1, 2):
                threads(nt)
                y = _gemm.matmul(a, b)
                y0 = _packed_path(_gemm.matmul, a, b)
                np.testing.assert_array_equal(y, y0)
                _matmul_check(a, b, y)


@pytest.mark.skipif(not _openmp_helpers.openmp_enabled(), reason="built without OpenMP")
def test_matmul_pipelined_packing(isa, threads):
    """Threaded row-direct matmul packs B in chunks of panels while the team computes the
    chunks already packed (MC-row tiles per chunk from the chunk's own counter): bit-identical
    to one thread and to the packed-A path, for many chunks, a partial last chunk and panel,
    fewer rows than one MC block, negative row strides and float64."""
    rng = np.random.default_rng(18)
    for m, k, n in ((600, 50, 1001), (130, 300, 259), (64, 129, 100), (1000, 7, 1999)):
        for dt in (np.float32, np.float64):
            big = rng.standard_normal((m, k + 2)).astype(dt)
            b = rng.standard_normal((k, n)).astype(dt)
            for a in (big[:, :k], big[::-1, 1:k + 1]):
                threads(1)
                y1 = _gemm.matmul(a, b)
                threads(2)
                y2 = _gemm.matmul(a, b)
                np.testing.assert_array_equal(y2, y1, err_msg=f"{m} {k} {n}")
                np.testing.assert_array_equal(y2, _packed_path(_gemm.matmul, a, b))
                _matmul_check(a, b, y2)
