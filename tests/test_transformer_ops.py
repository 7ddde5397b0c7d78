"""The _ops kernels (LayerNorm, masked softmax, GELU, embedding gather, transpose) on every ISA
path, against float64 NumPy references; validation before any kernel runs."""

import math

import ml_dtypes
import numpy as np
import pytest

from modulekit._ext import _ops

RNG = np.random.default_rng(7)
SIZES = [1, 5, 8, 16, 31, 64, 384, 1000]


def ref_layer_norm(x, g, b, eps):
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def ref_softmax(x, scale, mask):
    z = x.astype(np.float64) * scale + (0 if mask is None else mask)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("n", SIZES)
def test_layer_norm_matches_reference_with_residual_and_large_mean(isa, n):
    x = (RNG.standard_normal((6, n)) * 3 + 1000).astype(np.float32)
    r = RNG.standard_normal((6, n)).astype(np.float32)
    g = RNG.standard_normal(n).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    y = _ops.layer_norm(x, n, g, b, 1e-5, residual=r)
    ref = ref_layer_norm(x.astype(np.float64) + r, g, b, 1e-5)
    # 1000 + N(0, 3) in float32 carries ~6e-5 absolute rounding: relative to std 3, 2e-5
    np.testing.assert_allclose(y, ref, atol=2e-4 * max(1, np.abs(g).max()))
    assert y.dtype == np.float32 and y.shape == x.shape


def test_layer_norm_without_affine_float64_and_constant_rows(isa):
    x = RNG.standard_normal((3, 4, 10))
    y = _ops.layer_norm(x, 40)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, ref_layer_norm(x.reshape(3, 40), 1, 0, 1e-5).reshape(x.shape))
    const = np.full((2, 33), 5.0, np.float32)
    np.testing.assert_array_equal(_ops.layer_norm(const, 33), np.zeros((2, 33), np.float32))


def test_layer_norm_rejects_bad_shapes():
    with pytest.raises(ValueError, match="rows of 4"):
        _ops.layer_norm(np.ones((3, 5), np.float32), 4)
    with pytest.raises(ValueError, match="weight has 3 elements, expected 5"):
        _ops.layer_norm(np.ones((3, 5), np.float32), 5, np.ones(3))
    with pytest.raises(ValueError, match="residual shape"):
        _ops.layer_norm(np.ones((3, 5), np.float32), 5, residual=np.ones((3, 4)))
    with pytest.raises(TypeError, match="real numbers"):
        _ops.layer_norm(np.ones((3, 5), complex), 5)


@pytest.mark.parametrize("n", SIZES)
def test_softmax_scale_and_mask_folded_in(isa, n):
    x = (RNG.standard_normal((2, 3, 4, n)) * 4).astype(np.float32)
    mask = np.where(RNG.random((2, 1, 1, n)) < 0.3, -np.inf, 0.0).astype(np.float32)
    mask[..., 0] = RNG.standard_normal()
    want = ref_softmax(x, 0.25, mask)
    got = _ops.softmax_(x, 0.25, mask)
    assert got is x
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    assert np.all(got[np.broadcast_to(mask, got.shape) == -np.inf] == 0.0)


def test_softmax_strided_rows_large_logits_and_all_masked_rows(isa):
    base = (RNG.standard_normal((5, 2, 70)) * 50).astype(np.float32)
    view = base.transpose(1, 0, 2)  # (2, 5, 70): strided, last axis contiguous
    want = ref_softmax(view, 1.0, None)
    _ops.softmax_(view)
    np.testing.assert_allclose(view, want, rtol=1e-5, atol=1e-7)
    dead = np.full((1, 9), -np.inf, np.float32)
    assert np.isnan(_ops.softmax_(dead)).all()  # as torch.softmax on an all -inf row
    x64 = RNG.standard_normal((3, 11))
    np.testing.assert_allclose(_ops.softmax_(x64.copy(), 2.0), ref_softmax(x64, 2.0, None))


def test_softmax_parallel_path_matches_serial():
    x = RNG.standard_normal((4, 12, 32, 128)).astype(np.float32)  # above the threshold
    assert x.size >= _ops.PARALLEL_THRESHOLD
    want = ref_softmax(x, 0.125, None)
    np.testing.assert_allclose(_ops.softmax_(x, 0.125), want, rtol=2e-6, atol=1e-7)


def test_softmax_rejects_bad_input():
    with pytest.raises(TypeError, match="float32 or float64"):
        _ops.softmax_(np.ones((2, 3), np.int32))
    with pytest.raises(ValueError, match="cannot be broadcast"):
        _ops.softmax_(np.ones((2, 3), np.float32), mask=np.ones((2, 4), np.float32))
    ro = np.ones((2, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        _ops.softmax_(ro)
    with pytest.raises(ValueError, match="unit stride"):
        _ops.softmax_(np.ones((3, 6), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="1 to 4"):
        _ops.softmax_(np.ones((1, 1, 1, 1, 2), np.float32))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_reference(isa, approximate):
    x = np.concatenate([RNG.standard_normal(1001) * 4, [-30, -10, 0, 1e-8, 10, 30]])
    x32 = x.astype(np.float32)
    xd = x32.astype(np.float64)
    if approximate == "none":
        want = 0.5 * xd * np.array([math.erfc(-v / math.sqrt(2)) for v in xd])
    else:
        want = 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd**3)))
    got = _ops.gelu(x32, approximate)
    np.testing.assert_allclose(got, want, rtol=3e-6, atol=3e-7)
    np.testing.assert_allclose(_ops.gelu(xd, approximate), want, rtol=1e-12, atol=1e-15)
    out = x32.copy()
    assert _ops.gelu(out, approximate, out=out) is out
    np.testing.assert_array_equal(out, got)
    with pytest.raises(ValueError, match="approximate"):
        _ops.gelu(x32, "fast")


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_embedding_gather_and_accumulate(isa, dtype):
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    table = RNG.standard_normal((50, 37)).astype(np_dtype)
    ids = RNG.integers(0, 50, (3, 5))
    got = _ops.embedding(ids, table)
    want = table.astype(np.float64)[ids]
    assert got.dtype == (np.float64 if dtype == "float64" else np.float32)
    np.testing.assert_array_equal(got, want.astype(got.dtype))
    _ops.embedding(ids, table, out=got, accumulate=True)
    np.testing.assert_allclose(got, 2 * want, rtol=1e-6)


def test_embedding_checks_every_index_before_reading():
    table = np.zeros((10, 4), np.float32)
    for bad in (10, -1, 2**40):
        with pytest.raises(IndexError, match=rf"index {bad} at position \(1, 0\).*10 rows"):
            _ops.embedding([[1, 2], [bad, 3]], table)
    with pytest.raises(IndexError, match="out of range"):
        _ops.embedding(np.array([2**63 + 5], np.uint64), table)
    with pytest.raises(TypeError, match="integers"):
        _ops.embedding([1.0], table)
    with pytest.raises(TypeError, match="table dtype"):
        _ops.embedding([1], np.zeros((3, 2), np.int32))
    with pytest.raises(ValueError, match="out must be"):
        _ops.embedding([1], table, out=np.zeros((1, 3), np.float32))
    assert _ops.embedding(np.zeros((0, 3), np.int64), table).shape == (0, 3, 4)


def ref_attention(q, k, v, H, mask, scale):
    B, Lq, E = q.shape
    Lk, Ev = k.shape[1], v.shape[2]
    qh = q.astype(np.float64).reshape(B, Lq, H, -1).transpose(0, 2, 1, 3)
    kh = k.astype(np.float64).reshape(B, Lk, H, -1).transpose(0, 2, 1, 3)
    vh = v.astype(np.float64).reshape(B, Lk, H, -1).transpose(0, 2, 1, 3)
    p = ref_softmax(qh @ kh.transpose(0, 1, 3, 2), scale, mask)
    return (p @ vh).transpose(0, 2, 1, 3).reshape(B, Lq, Ev), p


@pytest.mark.parametrize(
    "B, H, Lq, Lk, d, dv",
    [
        (2, 3, 5, 37, 20, 12),
        (1, 2, 9, 1, 16, 16),
        (3, 1, 4, 64, 64, 48),
        (1, 12, 33, 33, 32, 32),
        (1, 2, 15, 47, 24, 40),  # 8 + 4 + 3 row blocks, key and value column tails
        (2, 1, 12, 17, 8, 33),
    ],
)
def test_fused_attention_matches_reference(isa, B, H, Lq, Lk, d, dv):
    E, Ev = H * d, H * dv
    qkv = RNG.standard_normal((B, max(Lq, Lk), 2 * E + Ev)).astype(np.float32)
    q = qkv[:, :Lq, :E]  # strided slices of one packed projection, as in self-attention
    k = qkv[:, :Lk, E : 2 * E]
    v = qkv[:, :Lk, 2 * E :]
    mask = np.where(RNG.random((B, 1, 1, Lk)) < 0.3, -np.inf, 0).astype(np.float32)
    mask[..., 0] = 0.5
    mask = mask + RNG.standard_normal((1, 1, Lq, Lk)).astype(np.float32)
    for m in (None, mask):
        out, w = _ops.attention(q, k, v, H, m, None, need_weights=True)
        want, p = ref_attention(q, k, v, H, m, 1 / math.sqrt(d))
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=2e-5)
        np.testing.assert_allclose(w, p, rtol=1e-5, atol=1e-6)
        out2, none = _ops.attention(q, k, v, H, m, 0.5 / math.sqrt(d))
        assert none is None and out2.flags.c_contiguous
        np.testing.assert_allclose(
            out2, ref_attention(q, k, v, H, m, 0.5 / math.sqrt(d))[0], rtol=1e-5, atol=2e-5
        )


def test_fused_attention_parallel_and_validation():
    q = RNG.standard_normal((4, 128, 384)).astype(np.float32)
    out, _ = _ops.attention(q, q, q, 12)
    np.testing.assert_allclose(
        out, ref_attention(q, q, q, 12, None, 1 / math.sqrt(32))[0], rtol=1e-5, atol=2e-5
    )
    q64 = q[:2, :40].astype(np.float64)
    out64, w64 = _ops.attention(q64, q64, q64, 12, need_weights=True)
    want64, p64 = ref_attention(q64, q64, q64, 12, None, 1 / math.sqrt(32))
    assert out64.dtype == np.float64
    np.testing.assert_allclose(out64, want64, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(w64, p64, rtol=1e-12, atol=1e-14)
    with pytest.raises(TypeError, match="real numbers"):
        _ops.attention(q.astype(np.complex64), q, q, 12)
    with pytest.raises(ValueError, match="not divisible by num_heads=5"):
        _ops.attention(q, q, q, 5)
    with pytest.raises(ValueError, match="do not fit"):
        _ops.attention(q, q[:, :, :192], q, 12)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        _ops.attention(q, q, q, 12, mask=np.zeros((4, 127), np.float32))


@pytest.mark.parametrize("n", [1, 5, 16, 31, 384, 1000])
def test_embedding_layer_norm_equals_separate_steps(isa, n):
    t0 = RNG.standard_normal((50, n)).astype(np.float32)
    t1 = (RNG.standard_normal((40, n)) + 30).astype(np.float32)  # a large mean
    t2 = RNG.standard_normal((2, n)).astype(np.float32)
    g = RNG.standard_normal(n).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    for shape in ((1, 1), (3, 7), (2, 97)):  # 194 rows: the parallel path for wide rows
        i0 = RNG.integers(0, 50, shape)
        i1 = np.ascontiguousarray(np.broadcast_to(np.arange(shape[1]) % 40, shape))
        i2 = RNG.integers(0, 2, shape)
        got = _ops.embedding_layer_norm(i0, t0, i1, t1, i2, t2, g, b, 1e-12)
        x = _ops.embedding(i0, t0)
        _ops.embedding(i1, t1, out=x, accumulate=True)
        _ops.embedding(i2, t2, out=x, accumulate=True)
        want = _ops.layer_norm(x, n, g, b, 1e-12)
        assert got.shape == shape + (n,) and got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
        s = t0[i0].astype(np.float64) + t1[i1] + t2[i2]
        np.testing.assert_allclose(
            got, ref_layer_norm(s, g, b, 1e-12), rtol=1e-4, atol=2e-4 if n > 1 else 1e-6
        )


def test_embedding_layer_norm_declines_or_checks_before_reading():
    t = RNG.standard_normal((10, 8)).astype(np.float32)
    g = np.ones(8, np.float32)
    ids = np.arange(6, dtype=np.int64).reshape(2, 3)
    args = [ids, t, ids, t, ids, t, g, g]
    assert _ops.embedding_layer_norm(*args, 1e-5) is not None
    # other dtypes, layouts or widths: None (the caller takes the separate steps)
    for pos, bad in (
        (1, t.astype(np.float16)),
        (0, np.asfortranarray(np.arange(6).reshape(2, 3))),
        (2, ids.astype(np.int32)),
        (3, t[:, :4].copy()),
        (4, ids[:, :2].copy()),
        (6, None),
        (7, np.ones(7, np.float32)),
    ):
        a = list(args)
        a[pos] = bad
        assert _ops.embedding_layer_norm(*a, 1e-5) is None
    for pos in (0, 2, 4):
        a = list(args)
        a[pos] = ids.copy()
        a[pos][1, 2] = 10
        with pytest.raises(IndexError, match=r"index 10 at position \(1, 2\).*10 rows"):
            _ops.embedding_layer_norm(*a, 1e-5)
    assert _ops.embedding_layer_norm(
        np.zeros((0, 3), np.int64), t, np.zeros((0, 3), np.int64), t,
        np.zeros((0, 3), np.int64), t, g, g, 1e-5,
    ).shape == (0, 3, 8)


@pytest.mark.parametrize(
    "B, H, Lq, Lk, d", [(1, 12, 32, 32, 32), (2, 3, 7, 13, 5), (1, 1, 1, 1, 1), (3, 2, 33, 17, 16)]
)
def test_attention_fast_path_equals_general_path(isa, B, H, Lq, Lk, d):
    """float32 without a mask or weights takes the fast path: the same kernel, bit for bit
    what the general path (asked for the weights) gives."""
    E = H * d
    qkv = RNG.standard_normal((B, max(Lq, Lk), 3 * E)).astype(np.float32)
    q, k, v = qkv[:, :Lq, :E], qkv[:, :Lk, E : 2 * E], qkv[:, :Lk, 2 * E :]
    fast, none = _ops.attention(q, k, v, H)
    general, _ = _ops.attention(q, k, v, H, need_weights=True)
    assert none is None and fast.flags.c_contiguous and fast.shape == (B, Lq, E)
    np.testing.assert_array_equal(fast, general)
    np.testing.assert_allclose(
        fast, ref_attention(q, k, v, H, None, 1 / math.sqrt(d))[0], rtol=1e-5, atol=2e-5
    )
    # a non-unit last stride or float64 input falls back to the general path
    qt = np.ascontiguousarray(q.transpose(0, 2, 1)).transpose(0, 2, 1)
    np.testing.assert_array_equal(_ops.attention(qt, k, v, H)[0], fast)
    assert _ops.attention(q.astype(np.float64), k, v, H)[0].dtype == np.float64


# ---- transpose_into: (B, R, C) -> (B, C, R)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 16, 16), (2, 17, 33), (1, 512, 200), (3, 1, 7),
                                   (2, 40, 1), (1, 5, 0)])
def test_transpose_into_every_block_and_edge(isa, dtype, shape):
    x = RNG.standard_normal(shape).astype(dtype)
    out = np.full((shape[0], shape[2], shape[1]), np.nan, dtype)
    assert _ops.transpose_into(x, out) is out
    np.testing.assert_array_equal(out, x.transpose(0, 2, 1))


def test_transpose_into_strided_views(isa):
    # a padded destination (the Conv1d GEMM's channels-last buffer) and a strided source
    x = RNG.standard_normal((2, 48, 72)).astype(np.float32)
    buf = np.zeros((2, 36 + 3, 48), np.float32)
    _ops.transpose_into(x[:, :, ::2], buf[:, 1:37])
    np.testing.assert_array_equal(buf[:, 1:37], x[:, :, ::2].transpose(0, 2, 1))
    assert not buf[:, 0].any() and not buf[:, 37:].any()
    src = RNG.standard_normal((3, 20, 32)).astype(np.float32)[::-1, 2:, 5:]
    out = np.empty((3, 27, 18), np.float32)
    np.testing.assert_array_equal(_ops.transpose_into(src, out), src.transpose(0, 2, 1))


def test_transpose_into_refuses_bad_arguments():
    x = np.zeros((1, 4, 5), np.float32)
    with pytest.raises(ValueError, match="out must have shape"):
        _ops.transpose_into(x, np.empty((1, 4, 5), np.float32))
    with pytest.raises(TypeError, match="out must have src's dtype"):
        _ops.transpose_into(x, np.empty((1, 5, 4), np.float64))
    with pytest.raises(TypeError, match="float32 or float64"):
        _ops.transpose_into(x.astype(np.int32), np.empty((1, 5, 4), np.int32))
    with pytest.raises(ValueError, match="must be 3-D"):
        _ops.transpose_into(x[0], np.empty((5, 4), np.float32))
    with pytest.raises(ValueError, match="contiguous last axis"):
        _ops.transpose_into(x, np.empty((1, 5, 8), np.float32)[:, :, ::2])
    ro = np.empty((1, 5, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        _ops.transpose_into(x, ro)
    sq = np.zeros((1, 4, 4), np.float32)
    with pytest.raises(ValueError, match="must not overlap"):
        _ops.transpose_into(sq, sq)
    with pytest.raises(TypeError, match="non-native byte order"):
        _ops.transpose_into(x.astype(">f4"), np.empty((1, 5, 4), np.float32))


# ---- scatter_phases: a transposed convolution's stride phases into their places


def _scatter_reference(src, out, windows, starts, counts, stride):
    for i in range(src.shape[1]):
        if min(counts[i]) == 0:
            continue
        dst = tuple(slice(o, o + (c - 1) * s + 1, s)
                    for o, c, s in zip(starts[i], counts[i], stride))
        win = tuple(slice(w, w + c) for w, c in zip(windows[i], counts[i]))
        out[(slice(None), slice(None)) + dst] = src[(slice(None), i, slice(None)) + win]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["2d", "1d", "3d", "uneven"])
def test_scatter_phases_matches_slicing(dtype, case):
    if case == "2d":  # DCGAN's k4 s2 p1: four 16x16 phases of a 17x17 merged output
        m, o, st = (1, 17, 17), (1, 32, 32), (1, 2, 2)
        windows = [(0, a, b) for a in (0, 1) for b in (0, 1)]
        starts = [(0, a, b) for a in (0, 1) for b in (0, 1)]
        counts = [(1, 16, 16)] * 4
    elif case == "1d":  # stride 3: three phases along the last axis
        m, o, st = (1, 1, 9), (1, 1, 24), (1, 1, 3)
        windows = [(0, 0, 1), (0, 0, 0), (0, 0, 1)]
        starts = [(0, 0, 0), (0, 0, 1), (0, 0, 2)]
        counts = [(1, 1, 8)] * 3
    elif case == "3d":  # stride (2, 1, 2): four phases
        m, o, st = (4, 4, 5), (6, 4, 10), (2, 1, 2)
        windows = [(a, 0, 0) for a in (0, 1) for _ in (0, 1)]
        starts = [(a, 0, b) for a in (0, 1) for b in (0, 1)]
        counts = [(3, 4, 5)] * 4
    else:  # an odd output: the phases' counts differ, one phase has none
        m, o, st = (1, 6, 6), (1, 9, 9), (1, 2, 2)
        windows = [(0, 0, 0), (0, 1, 0), (0, 0, 1), (0, 0, 0)]
        starts = [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]
        counts = [(1, 5, 5), (1, 5, 4), (1, 4, 5), (1, 0, 4)]
    nph = len(windows)
    src = RNG.standard_normal((3, nph, 5) + m).astype(dtype)
    out = np.full((3, 5) + o, np.nan, dtype)
    want = _scatter_reference(src, out.copy(), windows, starts, counts, st)
    assert _ops.scatter_phases(src, out, windows, starts, counts, st) is out
    np.testing.assert_array_equal(out, want)


def test_scatter_phases_refuses_bad_arguments():
    src = np.zeros((1, 4, 2, 1, 3, 3), np.float32)
    out = np.zeros((1, 2, 1, 6, 6), np.float32)
    box = np.zeros((4, 3), np.intp)
    cnt = np.tile([1, 3, 3], (4, 1))
    st = (1, 2, 2)
    _ops.scatter_phases(src, out, box, box, cnt, st)  # in bounds
    with pytest.raises(ValueError, match="leaves src"):  # a window past the source
        _ops.scatter_phases(src, out, box + [0, 0, 1], box, cnt, st)
    with pytest.raises(ValueError, match="leaves src"):  # a start past the output
        _ops.scatter_phases(src, out, box, box + [0, 2, 0], cnt, st)
    with pytest.raises(ValueError, match="leaves src"):
        _ops.scatter_phases(src, out, box - 1, box, cnt, st)
    with pytest.raises(ValueError, match="integers of shape"):
        _ops.scatter_phases(src, out, box[:3], box, cnt, st)
    with pytest.raises(ValueError, match="stride must be"):
        _ops.scatter_phases(src, out, box, box, cnt, (1, 0, 2))
    with pytest.raises(ValueError, match="out must start with"):
        _ops.scatter_phases(src, np.zeros((1, 3, 1, 6, 6), np.float32), box, box, cnt, st)
    with pytest.raises(TypeError, match="out must have src's dtype"):
        _ops.scatter_phases(src, out.astype(np.float64), box, box, cnt, st)
    with pytest.raises(ValueError, match="C-contiguous"):
        _ops.scatter_phases(src, np.zeros((1, 2, 1, 6, 12), np.float32)[..., ::2], box, box,
                            cnt, st)
    flat = np.zeros(200, np.float32)
    with pytest.raises(ValueError, match="must not overlap"):
        _ops.scatter_phases(flat[:72].reshape(src.shape), flat[:72].reshape(out.shape), box,
                            box, cnt, st)
    with pytest.raises(TypeError, match="non-native byte order"):
        _ops.scatter_phases(src.astype(">f4"), out, box, box, cnt, st)
