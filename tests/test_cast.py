"""modulekit._ext._cast: float32/float64/float16/bfloat16 conversions.

Every ordered pair is checked bit for bit against NumPy's ``astype`` (ml_dtypes' for
bfloat16) in every instruction-set path this CPU has (the ``isa`` fixture), on special values,
rounding ties, every 16-bit pattern, random data, the parallel path and in-place narrowing.
"""

import itertools
import sys
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import modulekit
from modulekit._ext import _cast, _isa, _openmp_helpers

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
TYPES = [F32, F64, F16, BF16]
PAIRS = list(itertools.product(TYPES, TYPES))
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
NARROWING = [(s, d) for s, d in PAIRS if d.itemsize <= s.itemsize and s != d]
# Elements that make a cast of every pair go parallel (work = n * (src + dst) bytes).
N_PARALLEL = _cast.parallel_min_bytes() // 4 + 1001


def ids(pair):
    return f"{pair[0].name}->{pair[1].name}"


def bits(a):
    return np.ascontiguousarray(a).view(UINT[a.dtype.itemsize])


def reference(x, dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow / invalid value in cast
        return x.astype(dtype)


def assert_bits_equal(got, x, dtype):
    want = reference(x, dtype)
    assert got.dtype == dtype and got.shape == x.shape
    g, w = bits(got).ravel(), bits(want).ravel()
    bad = np.flatnonzero(g != w)
    if bad.size:
        xs = bits(x).ravel()
        examples = ", ".join(
            f"{int(xs[i]):#x} -> got {int(g[i]):#x} want {int(w[i]):#x}" for i in bad[:5]
        )
        pytest.fail(f"{bad.size} of {g.size} differ ({x.dtype} -> {dtype}): {examples}")


@pytest.fixture(params=[1, 3], ids=["1thread", "3threads"])
def threads(request):
    """Run with 1 and with 3 OpenMP threads (3: uneven splits, more threads than cores)."""
    _openmp_helpers.set_num_threads(request.param)
    try:
        yield request.param
    finally:
        _openmp_helpers.reset_num_threads()


def from_bits(u, dtype):
    return np.asarray(u, dtype=UINT[dtype.itemsize]).view(dtype)


@pytest.fixture(autouse=True)
def _quiet_numpy():
    """NumPy warns on NaN and overflow in its own casts (the references); that is expected."""
    with np.errstate(invalid="ignore", over="ignore"):
        yield


def special_values(dtype):
    """Signed zeros, infinities, NaN payloads, extremes, overflow boundaries and every
    rounding tie of float16 and bfloat16 (with its neighbours), as ``dtype`` (f32 or f64)."""
    f32 = [
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000,            # +-0, +-inf
        0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001,            # quiet / signalling NaNs
        0x7F802000, 0x7FA00000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F801FFF, 0x7FBFFFFF,
        0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF,
        0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000,  # float16 max / overflow
        0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001, 0x7F7FC000,              # bfloat16 overflow
        0x33000000, 0x33000001, 0x32FFFFFF, 0x33800000, 0x38800000, 0x387FFFFF,
    ]
    vals = [from_bits(f32, F32).astype(dtype)]
    # every float16 value (subnormals included), midpoints between neighbours (the ties) and
    # the values just beside each midpoint, for both 16-bit types
    for t in (F16, BF16):
        allv = from_bits(np.arange(65536), t).astype(F64)
        fin = np.sort(np.unique(allv[np.isfinite(allv)]))
        mids = (fin[:-1] + fin[1:]) / 2
        top = fin[-1] + (fin[-1] - fin[-2]) / 2                     # the overflow tie
        m = np.concatenate([mids, [top, -top]]).astype(dtype)
        vals += [fin.astype(dtype), m, np.nextafter(m, np.inf), np.nextafter(m, -np.inf)]
    if dtype == F64:
        d = [
            0x7FF0000000000001, 0x7FF0040000000000, 0xFFF8000000000000, 0x7FF0000020000000,
            0x7FF7FFFFFFFFFFFF, 0x7FF0000000000400, 0x7FF8000000000001, 0xFFF0000000000001,
            0x0000000000000001, 0x8000000000000001, 0x7FEFFFFFFFFFFFFF, 0x0010000000000000,
        ]
        vals.append(from_bits(d, F64))
        # beyond float32: overflow, underflow, float32's own midpoints (double rounding)
        vals.append(np.array([1e300, -1e300, 3.5e38, 3.4028235677973366e38, 1e-300, -1e-50,
                              2.0 ** -149, 2.0 ** -150, 2.0 ** -151, 3 * 2.0 ** -151,
                              1 + 2.0 ** -11 + 2.0 ** -40, 1 + 2.0 ** -8 + 2.0 ** -40,
                              1 + 2.0 ** -11 - 2.0 ** -40, 1 + 2.0 ** -8 - 2.0 ** -40]))
        f32v = from_bits(np.arange(0, 2**32, 2**20 + 7, dtype=np.uint64), F32)
        f32v = f32v[np.isfinite(f32v)].astype(F64)
        vals += [f32v, np.nextafter(f32v, np.inf), np.nextafter(f32v, -np.inf)]
    return np.concatenate(vals).astype(dtype)


def random_data(dtype, n, rng):
    """Random bit patterns (NaNs with payloads, subnormals, ...) and values of all scales."""
    if n == 0:
        return np.empty(0, dtype)
    u = rng.integers(0, np.iinfo(UINT[dtype.itemsize]).max, n, dtype=UINT[dtype.itemsize],
                     endpoint=True).view(dtype)
    scaled = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))).astype(dtype)
    return np.where(rng.random(n) < 0.5, u, scaled)


# --------------------------------------------------------------------------------------
# bit-exactness


@pytest.mark.parametrize("dst", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("src", [F16, BF16], ids=lambda t: t.name)
def test_every_16bit_pattern(isa, src, dst):
    x = from_bits(np.arange(65536), src)
    assert_bits_equal(_cast.cast(x, dst), x, dst)


@pytest.mark.parametrize("dst", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("src", [F32, F64], ids=lambda t: t.name)
def test_special_values_and_ties(isa, src, dst):
    x = special_values(src)
    assert_bits_equal(_cast.cast(x, dst), x, dst)
    # the same values at every offset of a SIMD block (masked tails, scalar tails)
    for k in (1, 3, 7):
        y = x[k:]
        assert_bits_equal(_cast.cast(y, dst), y, dst)


def test_hardware_quirks_covered():
    """The cases that separate a correct kernel from the obvious hardware instruction."""
    x = from_bits([0x7F800001, 0x00000001, 0x007FFFFF], F32)  # sNaN, float32 subnormals
    assert list(bits(_cast.cast(x, F16))) == [0x7C01, 0x0000, 0x0000]
    assert list(bits(_cast.cast(x, BF16))) == [0x7FC0, 0x0000, 0x0080]  # no flush to zero
    d = np.array([1 + 2.0 ** -11 + 2.0 ** -40])  # float32 rounding first would give 0x3c00
    assert bits(_cast.cast(d, F16))[0] == 0x3C01
    assert bits(_cast.cast(np.array([1 + 2.0 ** -8 + 2.0 ** -40]), BF16))[0] == 0x3F81


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(st.floats(width=64), max_size=40),
    src=st.sampled_from([F32, F64]),
    dst=st.sampled_from(TYPES),
)
def test_hypothesis_values(values, src, dst):
    """Any float values (hypothesis favours boundaries), every instruction-set path."""
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.array(values, np.float64).astype(src)
    previous = _isa.get_isa()
    try:
        for level in _isa.available_isas():
            _isa.set_isa(level)
            assert_bits_equal(_cast.cast(x, dst), x, dst)
    finally:
        _isa.set_isa(previous)


@pytest.mark.parametrize("n", [0, 1, 7, 15, 16, 17, 1023])
@pytest.mark.parametrize("pair", PAIRS, ids=ids)
def test_random_sizes(isa, pair, n):
    src, dst = pair
    x = random_data(src, n, np.random.default_rng(n))
    assert_bits_equal(_cast.cast(x, dst), x, dst)
    out = np.empty(n, dst)
    _cast.cast_into(x, out)
    assert_bits_equal(out, x, dst)


@pytest.mark.parametrize("pair", PAIRS, ids=ids)
def test_parallel_size(isa, threads, pair):
    src, dst = pair
    n = N_PARALLEL
    assert n * (src.itemsize + dst.itemsize) >= _cast.parallel_min_bytes()
    x = random_data(src, n, np.random.default_rng(1))
    out = np.full(n + 64, np.nan, dst)           # guard elements after the end stay untouched
    _cast.cast_into(x, out[:n])
    assert_bits_equal(out[:n], x, dst)
    assert np.isnan(out[n:].astype(np.float32)).all()


# --------------------------------------------------------------------------------------
# in-place narrowing


def in_place_view(buf, dtype):
    """``dtype`` elements over the start of ``buf``'s own memory."""
    return buf.view(np.uint8)[: buf.size * dtype.itemsize].view(dtype)


@pytest.mark.parametrize("n", [1, 17, 1023, 70001, N_PARALLEL * 2 + 13])
@pytest.mark.parametrize("pair", NARROWING, ids=ids)
def test_in_place_narrowing(isa, threads, pair, n):
    src, dst = pair
    x = random_data(src, n, np.random.default_rng(2))
    expected = _cast.cast(x, dst)
    buf = x.copy()
    out = in_place_view(buf, dst)
    assert np.shares_memory(buf, out)
    _cast.cast_into(buf, out)
    np.testing.assert_array_equal(bits(out), bits(expected))


@pytest.mark.parametrize("n", [1, 15, 16, 17, 100, 1023, 5000])
@pytest.mark.parametrize("pair", PAIRS, ids=ids)
def test_parallel_path_small_sizes(isa, pair, n):
    """The parallel split (and in-place rounds) on sizes the threshold keeps serial."""
    src, dst = pair
    previous = _cast.set_parallel_min_bytes(0)
    _openmp_helpers.set_num_threads(3)
    try:
        x = random_data(src, n, np.random.default_rng(n))
        out = np.empty(n, dst)
        _cast.cast_into(x, out)
        assert_bits_equal(out, x, dst)
        if (src, dst) in NARROWING:
            buf = x.copy()
            _cast.cast_into(buf, in_place_view(buf, dst))
            np.testing.assert_array_equal(bits(in_place_view(buf, dst)), bits(out))
    finally:
        _cast.set_parallel_min_bytes(previous)
        _openmp_helpers.reset_num_threads()


STREAMED = [(F32, F16), (F32, BF16), (F16, F32), (BF16, F32)]


@pytest.mark.parametrize("pair", STREAMED, ids=ids)
def test_streaming_stores(isa, threads, pair):
    """The non-temporal-store kernels (large casts), at every output alignment and length
    around a 64-byte line."""
    src, dst = pair
    previous = _cast.set_stream_min_bytes(0)
    try:
        x = random_data(src, 4000, np.random.default_rng(4))
        want = reference(x, dst)
        backing = np.zeros(4200, dst)
        for offset in range(0, 40, 3):
            for n in (1, 31, 32, 33, 47, 64, 100, 4000 - offset):
                out = backing[offset:offset + n]
                _cast.cast_into(x[:n], out)
                np.testing.assert_array_equal(bits(out), bits(want[:n]))
        # an odd byte address (no aligned stores possible): the regular kernel takes over
        raw = np.zeros(4000 * dst.itemsize + 1, np.uint8)
        odd = raw[1:].view(dst)
        _cast.cast_into(x, odd)
        np.testing.assert_array_equal(bits(odd), bits(want))
    finally:
        _cast.set_stream_min_bytes(previous)


@pytest.mark.parametrize("stream", [False, True], ids=["stores", "streamed"])
@pytest.mark.parametrize("pair", STREAMED, ids=ids)
def test_new_array_on_every_thread(isa, threads, pair, stream):
    """``cast`` to a new array (its pages populated in one call, then the team; one thread
    where the system cannot populate): bit-identical at a size that goes parallel, and on
    Linux the work really ran in a parallel region."""
    src, dst = pair
    x = random_data(src, N_PARALLEL * 2 + 13, np.random.default_rng(5))
    previous = _cast.set_stream_min_bytes(0 if stream else 1 << 62)
    parallel = (threads > 1 and sys.platform.startswith("linux")
                and _openmp_helpers.openmp_enabled() and not _openmp_helpers._backing_off())
    try:
        before = _openmp_helpers._team_regions()
        out = _cast.cast(x, dst)
        regions = _openmp_helpers._team_regions() - before
    finally:
        _cast.set_stream_min_bytes(previous)
    assert out.dtype == dst and out.shape == x.shape and out.flags.c_contiguous
    assert_bits_equal(out, x, dst)
    if parallel:
        assert regions > 0, "a large new-array cast stayed on one thread"


def test_identity_in_place_is_a_no_op():
    x = np.arange(10, dtype=np.float32)
    _cast.cast_into(x, x)
    np.testing.assert_array_equal(x, np.arange(10, dtype=np.float32))


# --------------------------------------------------------------------------------------
# cast(): targets, layouts


@pytest.mark.parametrize("target", [modulekit.float16, "float16", np.float16, F16, "half"])
def test_cast_target_spellings(target):
    out = _cast.cast(np.ones((2, 3), np.float32), target)
    assert out.dtype == F16 and out.shape == (2, 3) and out.flags.c_contiguous


def test_cast_bfloat16_target_spellings():
    for target in (modulekit.bfloat16, "bfloat16", ml_dtypes.bfloat16):
        assert _cast.cast(np.ones(3, np.float32), target).dtype == BF16


def test_cast_non_contiguous_and_shapes(isa):
    x = np.random.default_rng(3).standard_normal((40, 30)).astype(np.float32)
    for view in (x[::2, 1::3], x.T, x[:, ::-1]):
        out = _cast.cast(view, F16)
        assert out.shape == view.shape and out.flags.c_contiguous
        np.testing.assert_array_equal(bits(out), bits(view.astype(F16)))
    zero_d = _cast.cast(np.float64(1.5), BF16)
    assert zero_d.shape == () and float(zero_d) == 1.5
    assert _cast.cast(np.empty((0, 5), np.float32), F64).shape == (0, 5)


def test_cast_byteswapped_source():
    x = np.arange(20, dtype=">f4")
    np.testing.assert_array_equal(_cast.cast(x, F16), np.arange(20, dtype=np.float16))


def test_cast_same_dtype_is_a_copy():
    x = np.arange(5, dtype=np.float32)
    out = _cast.cast(x, F32)
    assert not np.shares_memory(out, x)
    np.testing.assert_array_equal(out, x)


def test_cast_refuses_other_types():
    with pytest.raises(TypeError, match="int32"):
        _cast.cast(np.ones(3, np.float32), np.int32)
    with pytest.raises(TypeError, match="src has dtype int64"):
        _cast.cast(np.ones(3, np.int64), F32)
    with pytest.raises(TypeError, match="complex"):
        _cast.cast(np.ones(3, np.complex64), F32)


# --------------------------------------------------------------------------------------
# cast_into(): validation before any C code runs


def test_cast_into_rejects_bad_dtypes():
    with pytest.raises(TypeError, match="dst has dtype int32"):
        _cast.cast_into(np.ones(3, np.float32), np.empty(3, np.int32))
    with pytest.raises(TypeError, match="src has dtype >f4"):
        _cast.cast_into(np.ones(3, ">f4"), np.empty(3, np.float16))
    with pytest.raises(TypeError, match="numpy.ndarray"):
        _cast.cast_into([1.0, 2.0], np.empty(2, np.float16))
    with pytest.raises(TypeError, match="numpy.ndarray"):
        _cast.cast_into(np.ones(2, np.float32), memoryview(bytearray(4)))


def test_cast_into_rejects_size_mismatch():
    with pytest.raises(ValueError, match="src has 6 elements .* dst has 5"):
        _cast.cast_into(np.ones((2, 3), np.float32), np.empty(5, np.float16))
    _cast.cast_into(np.ones((2, 3), np.float32), np.empty((3, 2), np.float16))  # same count


def test_cast_into_rejects_layouts():
    with pytest.raises(ValueError, match="dst must be C-contiguous"):
        _cast.cast_into(np.ones(3, np.float32), np.empty(6, np.float16)[::2])
    with pytest.raises(ValueError, match="src must be C-contiguous"):
        _cast.cast_into(np.ones(6, np.float32)[::2], np.empty(3, np.float16))
    ro = np.empty(3, np.float16)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        _cast.cast_into(np.ones(3, np.float32), ro)


def test_cast_into_rejects_overlap():
    buf = np.zeros(64, np.float64)
    raw = buf.view(np.uint8)
    # narrowing, but dst starts 2 bytes into src
    with pytest.raises(ValueError, match="overlaps"):
        _cast.cast_into(buf[:16].view(np.float32), raw[2:66].view(np.float16))
    # widening in place (dst elements wider than src's)
    with pytest.raises(ValueError, match="overlaps"):
        _cast.cast_into(raw[:64].view(np.float32), buf[:16])
    # same dtype, shifted by one element
    with pytest.raises(ValueError, match="overlaps"):
        _cast.cast_into(buf[:10], buf[1:11])
    # dst ends inside src
    with pytest.raises(ValueError, match="overlaps"):
        _cast.cast_into(buf[8:16], raw[32:96].view(np.float64))
    # adjacent, not overlapping: fine
    _cast.cast_into(buf[:8], buf[8:16])
