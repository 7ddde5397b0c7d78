"""Misaligned and otherwise odd inputs through every kernel family, on every instruction-set path.

A float32 array whose data starts one byte past an aligned address (``np.frombuffer(buf[1:],
np.float32)``: NumPy flags it not ALIGNED) is valid input. The C kernels read and write only
aligned memory (``src/modulekit/_ext/_align.pxd``): the extensions' validation copies an input
that is not ALIGNED, refuses a misaligned ``out=`` (``cast_into`` writes through an aligned
temporary), and the layers pack weights from aligned copies. So a misaligned input gives the
same bits as an aligned one, and nothing reaches a kernel that UBSan would flag as a
misaligned access (``.ci/sanitize`` runs this file under AddressSanitizer and
UndefinedBehaviorSanitizer; docs/testing.md).

Each case compares a misaligned layout (and misaligned read-only, misaligned strided, and
rows a whole number of bytes but not of elements apart) bit for bit against the same values
aligned and C-contiguous; shapes are odd (primes, a size 1, size 0 where the op allows it).
"""

import numpy as np
import pytest
from ml_dtypes import bfloat16

import modulekit
from modulekit import nn
from modulekit._ext import _cast, _conv, _gemm, _ops
from modulekit.nn import functional as F


def misaligned(a, offset=1):
    """A writable copy of ``a`` whose data starts ``offset`` bytes past a 64-byte boundary."""
    a = np.asarray(a)
    buf = np.zeros(a.nbytes + offset + 64, np.uint8)
    start = (-buf.ctypes.data) % 64 + offset
    out = buf[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def misaligned_readonly(a):
    out = misaligned(a)
    out.flags.writeable = False
    return out


def misaligned_strided(a):
    """A misaligned view of ``a``'s values with every other element of the last axis."""
    a = np.asarray(a)
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    wide[..., ::2] = a
    return misaligned(wide)[..., ::2]


def odd_row_stride(a):
    """``a``'s values with rows (the second-to-last axis) ``itemsize + 1`` bytes further apart
    than C order: every row but the first misaligned, strides not whole elements."""
    a = np.asarray(a)
    if a.ndim < 2:
        return misaligned(a)
    strides = [a.itemsize, (a.shape[-1] + 1) * a.itemsize + 1]
    for d in reversed(a.shape[1:-1]):
        strides.append(strides[-1] * d)
    strides = tuple(reversed(strides))
    nbytes = strides[0] * a.shape[0] if a.size else 0
    buf = np.zeros(nbytes + 64, np.uint8)
    start = (-buf.ctypes.data) % 64
    out = np.ndarray(a.shape, a.dtype, buffer=buf, offset=start, strides=strides)
    out[...] = a
    return out


LAYOUTS = {
    "misaligned": misaligned,
    "misaligned-readonly": misaligned_readonly,
    "misaligned-strided": misaligned_strided,
    "odd-row-stride": odd_row_stride,
}


def layouts(a):
    """``(name, array)`` for each odd layout of ``a``'s values (all not ALIGNED)."""
    for name, make in LAYOUTS.items():
        m = make(a)
        assert not m.flags.aligned or m.size == 0, name
        np.testing.assert_array_equal(m, a)
        yield name, m


def same(got, want, what):
    """Bit-identical results (NaN payloads included), shape and dtype included."""
    got = [got] if not isinstance(got, tuple) else list(got)
    want = [want] if not isinstance(want, tuple) else list(want)
    for g, w in zip(got, want):
        if w is None:
            assert g is None, what
            continue
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, what
        assert g.tobytes() == w.tobytes(), what


def check(fn, *args):
    """``fn(*args)`` with each argument in turn (and then all of them) in every odd layout
    gives the bits ``fn`` gives for the aligned, C-contiguous arguments."""
    args = [np.ascontiguousarray(a) for a in args]
    want = fn(*args)
    for name in LAYOUTS:
        for i in range(len(args)):
            odd = list(args)
            odd[i] = LAYOUTS[name](args[i])
            same(fn(*odd), want, f"{name} argument {i}")
        odd = [LAYOUTS[name](a) for a in args]
        same(fn(*odd), want, f"{name} all arguments")
    return want


@pytest.fixture
def r(rng):
    def normal(*shape, dtype=np.float32):
        return rng.standard_normal(shape).astype(dtype)

    return normal


def test_layouts_are_misaligned():
    """Every layout the tests use is one NumPy flags as not ALIGNED, with the same values."""
    a = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    assert [name for name, _ in layouts(a)] == list(LAYOUTS)
    assert not np.frombuffer(bytes(41), np.float32, count=10, offset=1).flags.aligned


# ---- gemm: Linear, PackedLinear, matmul, linear chains --------------------------------------


@pytest.mark.parametrize("storage", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("m", [1, 7, 37])
def test_packed_linear_input(isa, r, storage, m):
    dt = np.float64 if storage == "float64" else np.float32
    p = _gemm.pack_linear(r(13, 29), r(13), storage)
    check(lambda x: p.forward(x, "gelu"), r(m, 29, dtype=dt))


@pytest.mark.parametrize("storage", ["float32", "float64", "float16", "bfloat16"])
def test_packed_linear_weights(isa, r, storage):
    """Weights and bias packed from misaligned arrays: the same packed panels."""
    sdt = bfloat16 if storage == "bfloat16" else np.dtype(storage)
    w, b = r(11, 23).astype(sdt), r(11)
    x = r(5, 23, dtype=np.float64 if storage == "float64" else np.float32)
    check(lambda w, b: _gemm.pack_linear(w, b, storage).forward(x), w, b)
    pw, pb = _gemm.pack_linear(misaligned(w), misaligned(b), storage).unpack()
    same(pw, w, "unpacked weight")


def test_packed_linear_out(isa, r):
    """``out=`` must be aligned, as it must be C-contiguous: refused, nothing written."""
    p = _gemm.pack_linear(r(17, 19), r(17))
    x = r(6, 19)
    out = misaligned(np.zeros((6, 17), np.float32))
    with pytest.raises(ValueError, match="out must be aligned"):
        p.forward(x, "relu", out=out)
    assert not out.any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul(isa, r, dtype):
    check(_gemm.matmul, r(7, 13, dtype=dtype), r(13, 11, dtype=dtype))
    check(_gemm.matmul, r(3, 5, 13, dtype=dtype), r(3, 13, 2, dtype=dtype))
    check(_gemm.matmul, r(3, 5, 13, dtype=dtype), r(13, 17, dtype=dtype))  # b shared, packed
    check(_gemm.matmul, r(0, 13, dtype=dtype), r(13, 3, dtype=dtype))


def test_linear_layers(isa, r):
    lin = nn.Linear(31, 17)
    w, b = lin.weight.numpy().copy(), lin.bias.numpy().copy()  # packed on the first call
    seq = nn.Sequential(nn.Linear(31, 19), nn.ReLU(), nn.Linear(19, 5), nn.GELU())
    x = r(9, 31)
    check(lin, x)
    check(seq, x)
    check(lambda x, w, b: F.linear(x, w, b), x, w, b)
    check(lin, r(2, 3, 31))
    check(lin, r(0, 31))


def test_linear_weights_bound_from_misaligned(isa, r):
    """load_state_dict from misaligned arrays (a checkpoint mapped at an odd offset)."""
    ref = nn.Sequential(nn.Linear(13, 7), nn.ReLU(), nn.Linear(7, 3))
    state = {k: np.asarray(v) for k, v in ref.state_dict().items()}
    x = r(4, 13)
    want = ref(x)
    for make in LAYOUTS.values():
        if make is odd_row_stride:
            continue
        m = nn.Sequential(nn.Linear(13, 7), nn.ReLU(), nn.Linear(7, 3))
        m.load_state_dict({k: make(v) for k, v in state.items()})
        same(m(x), want, make.__name__)
        same(m.to(modulekit.float16)(x), ref.to(modulekit.float16)(x), make.__name__)
        ref.to(modulekit.float32)


# ---- conv: Conv2d (igemm, im2col, rows, depthwise, 1x1, Winograd, stem), pools, batch norm ---

CONV_GEOMETRIES = {
    # name: (n, cin, cout, k, h, w, stride, padding, groups)
    "igemm": (2, 5, 7, 3, 11, 13, 2, 1, 1),
    "im2col": (1, 8, 32, 1, 13, 13, 2, 0, 1),  # a strided 1x1 (AVX-512: im2col)
    "stem": (1, 3, 17, 7, 23, 19, 2, 3, 1),
    "depthwise-s1": (1, 7, 7, 3, 13, 11, 1, 1, 7),
    "depthwise-s2": (1, 5, 5, 3, 17, 13, 2, 1, 5),
    "pointwise": (2, 11, 13, 1, 5, 7, 1, 0, 1),
    "pointwise-s2": (1, 9, 33, 1, 9, 11, 2, 0, 1),
    "grouped": (1, 6, 9, 3, 7, 5, 1, 1, 3),
}


@pytest.mark.parametrize("geom", CONV_GEOMETRIES.values(), ids=CONV_GEOMETRIES.keys())
def test_conv2d(isa, r, geom):
    n, cin, cout, k, h, w, s, p, g = geom
    conv = nn.Conv2d(cin, cout, k, stride=s, padding=p, groups=g)
    wt, b = conv.weight.numpy().copy(), conv.bias.numpy().copy()  # packed on the first call
    x = r(n, cin, h, w)
    y = check(conv, x)
    pk = _conv.pack_conv2d(wt, b, s, p, 1, g)
    check(lambda x, res: pk.forward(x, "relu", res), x, r(*y.shape))
    check(lambda wt, b: _conv.pack_conv2d(wt, b, s, p, 1, g).forward(x), wt, b)
    check(lambda x, wt, b: F.conv2d(x, wt, b, s, p, 1, g), x, wt, b)


def test_conv2d_im2col_forced(isa, r):
    """A 3x3 on a 7x7 map ('auto': the igemm) with im2col forced (AVX-512)."""
    wt, b = r(32, 8, 3, 3), r(32)
    pk = _conv.pack_conv2d(wt, b, padding=1)
    pk.algorithm = "im2col"
    check(lambda x, res: pk.forward(x, "relu", res), r(1, 8, 7, 7), r(1, 32, 7, 7))


@pytest.mark.parametrize("algorithm", ["winograd-2x2", "winograd-4x4"])
def test_conv2d_winograd(isa, r, algorithm):
    wt, b = r(8, 6, 3, 3), r(8)
    pk = _conv.pack_conv2d(wt, b, padding=1)
    pk.algorithm = algorithm
    x = r(1, 6, 13, 11)
    assert pk.algorithm_for(x.shape).startswith("winograd")
    check(lambda x, res: pk.forward(x, "relu", res), x, r(1, 8, 13, 11))


@pytest.mark.parametrize("storage", ["float16", "bfloat16", "float64"])
def test_conv2d_storage(isa, r, storage):
    dt = np.float64 if storage == "float64" else np.float32
    for depthwise in (False, True):
        g = 4 if depthwise else 1
        wt, b = r(4, 4 // g, 3, 3), r(4)
        pk = _conv.pack_conv2d(wt, b, padding=1, groups=g, storage=storage)
        check(pk.forward, r(2, 4, 7, 5, dtype=dt))


def test_conv2d_maxpool_and_mean(isa, r):
    pk = _conv.pack_conv2d(r(16, 3, 7, 7), r(16), stride=2, padding=3)
    check(lambda x: pk.forward_maxpool(x, "relu", 3, 2, 1), r(1, 3, 29, 31))
    check(lambda x: pk.forward_mean(x, "relu"), r(2, 3, 13, 11))


def test_inverted_residual(isa, r):
    e = _conv.pack_conv2d(r(24, 8, 1, 1), r(24))
    d = _conv.pack_conv2d(r(24, 1, 3, 3), r(24), padding=1, groups=24)
    p = _conv.pack_conv2d(r(8, 24, 1, 1), r(8))
    R6 = ("relu6", "relu6", None)
    plan = _conv.DepthwiseChain(e, d, p, R6, residual=True)
    check(plan, r(1, 8, 11, 13))
    check(lambda x: _conv.depthwise_chain(x, e, d, p, R6, residual=True), r(1, 8, 11, 13))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pools(isa, r, dtype):
    x = r(2, 3, 13, 11, dtype=dtype)
    check(lambda x: _conv.max_pool2d(x, 3, 2, 1), x)
    check(lambda x: _conv.avg_pool2d(x, 3, 2, 1, count_include_pad=False), x)
    check(lambda x: _conv.adaptive_avg_pool2d(x, (5, 3)), x)
    check(nn.MaxPool2d(2, ceil_mode=True), x)
    check(nn.AvgPool2d(5, 3, 2), x)
    check(nn.AdaptiveAvgPool2d(1), x)
    check(_conv.spatial_mean, x)


def test_batch_norm(isa, r):
    bn = nn.BatchNorm2d(5).eval()
    bn.load_state_dict({
        "weight": r(5), "bias": r(5), "running_mean": r(5),
        "running_var": np.abs(r(5)) + 0.5, "num_batches_tracked": np.array(3),
    })
    check(bn, r(2, 5, 7, 3))
    check(lambda x, sc, sh: _conv.batch_norm_inference(x, sc, sh, "relu"),
          r(2, 5, 7, 3), r(5), r(5))


# ---- ops: softmax, layer norm, GELU, attention, embedding ------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax(isa, r, dtype):
    s = r(2, 3, 5, 37, dtype=dtype)
    check(lambda m: _ops.softmax_(s.copy(), 0.5, m), r(5, 37, dtype=dtype))
    check(nn.Softmax(-1), s)
    for name, m in layouts(s):  # in place: like out=, scores must be aligned
        if m.flags.writeable:
            with pytest.raises(ValueError, match="scores must be aligned"):
                _ops.softmax_(m, 0.5, None)
            same(m, s, name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm(isa, r, dtype):
    x, w, b, res = r(3, 7, 41, dtype=dtype), r(41), r(41), r(3, 7, 41, dtype=dtype)
    check(lambda x, w, b: _ops.layer_norm(x, 41, w, b, 1e-5), x, w, b)
    check(lambda x, res: _ops.layer_norm(x, 41, w, b, 1e-5, res), x, res)
    ln = nn.LayerNorm(41)
    ln.load_state_dict({"weight": w, "bias": b})
    check(ln, x)
    check(lambda x, res: ln(x, res), x, res)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu(isa, r, dtype):
    x = r(3, 67, dtype=dtype)
    for approximate in ("none", "tanh"):
        check(lambda x, a=approximate: _ops.gelu(x, a), x)
        check(nn.GELU(approximate), x)
    out = misaligned(np.zeros_like(x))
    with pytest.raises(ValueError, match="aligned"):
        _ops.gelu(x, out=out)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention(isa, r, dtype):
    q, k, v = r(2, 5, 24, dtype=dtype), r(2, 7, 24, dtype=dtype), r(2, 7, 12, dtype=dtype)
    mask = r(2, 1, 5, 7, dtype=dtype)
    check(lambda q, k, v: _ops.attention(q, k, v, 3), q, k, v)
    check(lambda q, k, v, m: _ops.attention(q, k, v, 3, m, None, True), q, k, v, mask)
    mha = nn.MultiheadAttention(24, 4, batch_first=True)
    check(lambda q, k: mha(q, k, k), r(2, 5, 24, dtype=dtype), r(2, 7, 24, dtype=dtype))


@pytest.mark.parametrize("tdt", [np.float32, np.float64, np.float16, bfloat16])
def test_embedding(isa, r, rng, tdt):
    table = r(11, 19).astype(tdt)
    ids = rng.integers(0, 11, size=(3, 7))
    check(_ops.embedding, ids, table)
    emb = nn.Embedding.from_pretrained(table)
    check(emb, ids)
    check(emb, ids.astype(np.int32))
    out = misaligned(np.zeros((3, 7, 19), np.float64 if tdt == np.float64 else np.float32))
    with pytest.raises(ValueError, match="aligned"):
        _ops.embedding(ids, table, out=out)


def test_embedding_layer_norm(isa, r, rng):
    tables = [r(13, 31), r(5, 31), r(2, 31)]
    ids = [rng.integers(0, t.shape[0], size=(2, 9)) for t in tables]
    w, b = r(31), r(31)

    def fused(i0, t0, i1, t1, i2, t2, w, b):
        y = _ops.embedding_layer_norm(i0, t0, i1, t1, i2, t2, w, b, 1e-12)
        if y is None:  # the fused path declines what is not aligned: the separate steps
            y = _ops.embedding(i0, t0)
            _ops.embedding(i1, t1, out=y, accumulate=True)
            _ops.embedding(i2, t2, out=y, accumulate=True)
            y = _ops.layer_norm(y, 31, w, b, 1e-12)
        return y

    check(fused, ids[0], tables[0], ids[1], tables[1], ids[2], tables[2], w, b)


# ---- casts: cast, cast_into, Tensor, to() ----------------------------------------------------

FLOATS = [np.float32, np.float64, np.float16, bfloat16]


@pytest.mark.parametrize("src", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dst", FLOATS, ids=lambda d: np.dtype(d).name)
def test_cast(isa, r, src, dst):
    x = r(5, 67).astype(src)
    x[0, :3] = [np.nan, np.inf, -0.0]
    check(lambda x: _cast.cast(x, dst), x)
    want = _cast.cast(x, dst)
    out = np.zeros(x.shape, dst)
    for name, m in layouts(x):
        if m.flags.c_contiguous:
            _cast.cast_into(m, out)
            same(out, want, name)
    for offset in (1, 3):  # a misaligned dst receives the same bits
        out = misaligned(np.zeros(x.shape, dst), offset)
        _cast.cast_into(misaligned(x, offset), out)
        same(out, want, f"cast_into, dst offset {offset}")


def test_cast_in_place_misaligned(isa, r):
    """In place (dst at src's address, narrower) on misaligned memory."""
    for src, dst in [(np.float32, np.float16), (np.float64, bfloat16), (np.float64, np.float32)]:
        x = r(1000).astype(src)
        want = _cast.cast(x, dst)
        for offset in (1, 2, 4):
            m = misaligned(x, offset)
            d = m.view(np.uint8)[: x.size * np.dtype(dst).itemsize].view(dst)
            _cast.cast_into(m, d)
            same(d, want, f"in place at offset {offset}")


def test_tensor(isa, r):
    x = r(7, 13)
    for name, m in layouts(x):
        t = modulekit.Tensor(m)
        assert t.numpy().flags.aligned, name
        same(t.numpy(), x, name)
        same(t.to(modulekit.float16).numpy(), x.astype(np.float16), name)
        p = modulekit.Parameter(m.astype(np.float64))
        same(p.numpy(), x.astype(np.float64), name)
        t.copy_(m * 2)
        same(t.numpy(), x * 2, name)
        t.copy_(misaligned(x.astype(np.float64)))
        same(t.numpy(), x, name)
    with pytest.raises(ValueError, match="aligned"):
        modulekit.Tensor.from_numpy(misaligned(x))


def test_module_to(isa, r):
    """``to()`` on a model whose weights were loaded from misaligned arrays: the same bits as
    the model loaded from aligned ones, at every dtype."""
    def model():
        return nn.Sequential(nn.Linear(11, 7), nn.LayerNorm(7))

    ref = model()
    state = {k: np.asarray(v).copy() for k, v in ref.state_dict().items()}
    m = model()
    m.load_state_dict({k: misaligned(v) for k, v in state.items()})
    x = r(3, 11)
    for dt in (modulekit.float16, modulekit.bfloat16, modulekit.float64, modulekit.float32):
        ref.to(dt)
        m.to(dt)
        same(m(x), ref(x), dt.name)
        for k, v in m.state_dict().items():
            assert np.asarray(v).flags.aligned, k


def test_zero_size_and_readonly(isa, r):
    """Zero-size and read-only inputs (aligned or not) through each family."""
    lin = nn.Linear(5, 3)
    for x in (r(0, 5), misaligned(r(0, 5))):
        assert lin(x).shape == (0, 3)
    ro = r(4, 5)
    ro.flags.writeable = False
    same(lin(ro), lin(ro.copy()), "read-only")
    assert _cast.cast(misaligned(r(0)), np.float16).shape == (0,)
    assert _ops.gelu(misaligned(r(0, 3))).shape == (0, 3)
    assert _ops.layer_norm(misaligned(r(0, 3)), 3).shape == (0, 3)
    assert _ops.embedding(np.zeros((0,), np.int64), misaligned(r(3, 4))).shape == (0, 4)
    assert _gemm.matmul(misaligned(r(3, 0)), misaligned(r(0, 2))).tolist() == [[0, 0]] * 3
