"""Fast conversions between float32, float64, float16 and bfloat16.

Every ordered pair of the four types is converted by a C micro-kernel chosen for the active
instruction set (generic C, AVX2+F16C, AVX-512), OpenMP-parallel above a size threshold.
The results are bit-identical to ``ndarray.astype`` for the NumPy types and to ml_dtypes'
``astype`` for bfloat16 (round-to-nearest-even, overflow to infinity, subnormals, NaN sign
and payload as those give), in every instruction-set path.

:func:`cast_into` also narrows in place: ``dst`` may be a view of ``src``'s own memory
starting at the same address (``src.view(np.uint8)[: n * 2].view(np.float16)`` for example).
"""
cimport numpy as cnp
from libc.stdint cimport uintptr_t

from modulekit._ext._align cimport aligned
from modulekit._ext._isa cimport active_isa, mk_isa
from modulekit._ext._openmp_helpers cimport bind_team, effective_threads

import numpy as np

from modulekit.dtypes import as_dtype as _as_dtype, bfloat16_numpy, is_bfloat16

_TEAM = bind_team()  # the kernels' contention back-off: the process's state

cnp.import_array()

cdef extern from "cast/cast.h" nogil:
    int mk_cast_run(const void* src, int src_code, void* dst, int dst_code, size_t n,
                    int nthreads, mk_isa isa)
    int mk_cast_run_fresh(const void* src, int src_code, void* dst, int dst_code, size_t n,
                          int nthreads, mk_isa isa)

# Type codes (see _cast.pxd).
F32 = MK_DT_F32
F64 = MK_DT_F64
F16 = MK_DT_F16
BF16 = MK_DT_BF16

# bfloat16 (ml_dtypes.bfloat16) joins these tables on first use (_add_bf16), so that
# importing modulekit never imports ml_dtypes.
cdef dict _CODES = {
    np.dtype(np.float32): MK_DT_F32,
    np.dtype(np.float64): MK_DT_F64,
    np.dtype(np.float16): MK_DT_F16,
}
cdef tuple _NAMES = ("float32", "float64", "float16", "bfloat16")
# cast()'s fast path for its target: NumPy dtypes, scalar types and names -> (dtype, code);
# anything else (DataType, aliases, bfloat16 before its first use) goes through
# modulekit.dtypes.as_dtype.
cdef dict _TARGETS = {}


cdef void _add_target(object dt, int code):
    for key in (dt, dt.type, _NAMES[code], _as_dtype(_NAMES[code])):
        _TARGETS[key] = (dt, code)


for _dt, _code in _CODES.items():
    _add_target(_dt, _code)

# NumPy's type number of ml_dtypes.bfloat16 (a user-defined type: known once registered).
cdef int _BF16_NUM = -1


cdef int _add_bf16() except -1:
    """Register bfloat16 in the tables above (imports ml_dtypes if not yet imported)."""
    global _BF16_NUM
    dt = bfloat16_numpy()
    _CODES[dt] = MK_DT_BF16
    _add_target(dt, MK_DT_BF16)
    _BF16_NUM = dt.num
    return 0


def parallel_min_bytes():
    """Work (bytes read + bytes written) from which a cast uses several threads."""
    return mk_cast_parallel_min_bytes()


def set_parallel_min_bytes(nbytes):
    """Set the threshold of :func:`parallel_min_bytes`; returns the previous one.

    For measuring (``bench/casts.py --threshold``) and tests; the default was measured.
    Not synchronised with casts running in other threads.
    """
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    previous = mk_cast_parallel_min_bytes()
    mk_cast_set_parallel_min_bytes(<size_t>nbytes)
    return previous


def stream_min_bytes():
    """Work (bytes read + bytes written) from which a cast that does not alias writes its
    output with non-temporal stores (float32 <-> float16/bfloat16, AVX2 and AVX-512)."""
    return mk_cast_stream_min_bytes()


def set_stream_min_bytes(nbytes):
    """Set the threshold of :func:`stream_min_bytes`; returns the previous one (for measuring
    and tests; not synchronised with casts running in other threads)."""
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    previous = mk_cast_stream_min_bytes()
    mk_cast_set_stream_min_bytes(<size_t>nbytes)
    return previous


cdef int dtype_code(object dtype) except -2:
    cdef object code = _CODES.get(dtype)
    if code is None:
        if _BF16_NUM < 0 and isinstance(dtype, np.dtype) and is_bfloat16(dtype):
            _add_bf16()
            return MK_DT_BF16
        return -1
    return <int>code


cdef int cast_buffer(const void* src, int src_code, void* dst, int dst_code, Py_ssize_t n,
                     int nthreads) noexcept nogil:
    if n < 0:
        return -1
    return mk_cast_run(src, src_code, dst, dst_code, <size_t>n, nthreads, active_isa())


cdef inline int _array_code(cnp.ndarray a) except -2:
    """The type code of ``a``'s elements, or -1 (another dtype, or not native byte order)."""
    cdef int t = cnp.PyArray_TYPE(a)
    if cnp.PyArray_ISBYTESWAPPED(a):
        return -1
    if t == cnp.NPY_FLOAT32:
        return MK_DT_F32
    if t == cnp.NPY_FLOAT64:
        return MK_DT_F64
    if t == cnp.NPY_FLOAT16:
        return MK_DT_F16
    if t == _BF16_NUM:
        return MK_DT_BF16
    if _BF16_NUM < 0 and t >= 256 and is_bfloat16(a.dtype):  # 256: NPY_USERDEF
        _add_bf16()
        return MK_DT_BF16
    return -1


cdef inline int _code_of(cnp.ndarray a, str what) except -1:
    cdef int code = _array_code(a)
    if code < 0:
        raise TypeError(
            f"{what} has dtype {a.dtype}: expected float32, float64, float16 or bfloat16 "
            f"in native byte order"
        )
    return code


def cast_into(src, dst):
    """Convert ``src`` into the existing array ``dst``, casting to ``dst``'s dtype.

    Parameters
    ----------
    src : numpy.ndarray
        C-contiguous, float32, float64, float16 or ml_dtypes.bfloat16 (native byte order);
        a misaligned one is read through an aligned copy.
    dst : numpy.ndarray
        C-contiguous and writable, one of the same four dtypes, with as many
        elements as ``src`` (its shape may differ). It may share ``src``'s memory only by
        starting at the same address with elements no wider than ``src``'s (in-place
        narrowing, or a same-size conversion in place); any other overlap is refused. A
        misaligned one receives the values through an aligned temporary.

    Raises
    ------
    TypeError
        If either is not an ndarray or has another dtype.
    ValueError
        If either is not C-contiguous, ``dst`` is read-only, the element counts differ, or
        the buffers overlap in a way that is not allowed.
    """
    if not isinstance(src, np.ndarray):
        raise TypeError(f"src must be a numpy.ndarray, got {type(src).__name__}")
    if not isinstance(dst, np.ndarray):
        raise TypeError(f"dst must be a numpy.ndarray, got {type(dst).__name__}")
    cdef cnp.ndarray s = <cnp.ndarray>src
    cdef cnp.ndarray d = <cnp.ndarray>dst
    cdef int sc = _code_of(s, "src")
    cdef int dc = _code_of(d, "dst")
    if not cnp.PyArray_IS_C_CONTIGUOUS(s):
        raise ValueError("src must be C-contiguous (use numpy.ascontiguousarray, or cast())")
    if not cnp.PyArray_IS_C_CONTIGUOUS(d):
        raise ValueError("dst must be C-contiguous")
    if not cnp.PyArray_ISWRITEABLE(d):
        raise ValueError("dst is read-only: expected a writable array")
    cdef Py_ssize_t n = cnp.PyArray_SIZE(s)
    if cnp.PyArray_SIZE(d) != n:
        raise ValueError(
            f"src has {n} elements (shape {src.shape}) but dst has {dst.size} "
            f"(shape {dst.shape}): expected the same element count"
        )
    if n == 0:
        return
    cdef const char* sp = <const char*>cnp.PyArray_DATA(s)
    cdef char* dp = <char*>cnp.PyArray_DATA(d)
    cdef size_t ss = mk_dtype_size(sc), ds = mk_dtype_size(dc)
    cdef uintptr_t s0 = <uintptr_t>sp, d0 = <uintptr_t>dp
    if s0 < d0 + n * ds and d0 < s0 + n * ss:       # the byte ranges overlap
        if not (s0 == d0 and ds <= ss):
            raise ValueError(
                f"dst overlaps src: in place, dst must start at src's address with elements "
                f"no wider than src's ({_NAMES[dc]} from {_NAMES[sc]}, dst starts "
                f"{<Py_ssize_t>(d0 - s0)} bytes after src)"
            )
    # The kernels touch aligned memory only (_align.pxd): read a misaligned src from an
    # aligned copy, write a misaligned dst through an aligned temporary (overlaps are checked
    # above, on the caller's arrays)
    cdef cnp.ndarray tmp = None
    if not cnp.PyArray_ISALIGNED(s):
        s = aligned(s)
        sp = <const char*>cnp.PyArray_DATA(s)
    if not cnp.PyArray_ISALIGNED(d):
        tmp = np.empty(n, d.dtype)
        dp = <char*>cnp.PyArray_DATA(tmp)
    cdef int nthreads = effective_threads()
    with nogil:
        mk_cast_run(sp, sc, dp, dc, <size_t>n, nthreads, active_isa())
    if tmp is not None:
        np.copyto(dst.reshape(-1), tmp)


def cast(src, dtype):
    """Return a new C-contiguous array holding ``src`` converted to ``dtype``.

    Parameters
    ----------
    src : array_like
        float32, float64, float16 or ml_dtypes.bfloat16 data of any layout (a
        non-contiguous or byte-swapped array is made contiguous and native first).
    dtype : DataType, numpy dtype or str
        The target: one of the same four types (``modulekit.float16``, ``np.float16``,
        ``"bfloat16"``, ...).

    Returns
    -------
    numpy.ndarray
        A new array of ``src``'s shape; a copy even when the dtype is unchanged.
    """
    cdef object target
    cdef int dc
    cdef object hit = None
    try:
        hit = _TARGETS.get(dtype)
    except TypeError:                       # unhashable: let as_dtype say what is wrong
        pass
    if hit is None:
        target = _as_dtype(dtype).numpy
        dc = dtype_code(target)
        if dc < 0:
            raise TypeError(
                f"cannot cast to {target}: expected float32, float64, float16 or bfloat16"
            )
    else:
        target, dc = hit
    cdef object a = src if type(src) is np.ndarray else np.asarray(src)
    if cnp.PyArray_ISBYTESWAPPED(<cnp.ndarray>a) and a.dtype.kind == "f":
        a = a.astype(a.dtype.newbyteorder("="))
    if not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a):
        a = np.ascontiguousarray(a).reshape(a.shape)
    a = aligned(a)
    cdef cnp.ndarray s = <cnp.ndarray>a
    cdef int sc = _code_of(s, "src")
    cdef cnp.ndarray out = np.empty(a.shape, dtype=target)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(s)
    cdef const void* sp = cnp.PyArray_DATA(s)
    cdef void* dp = cnp.PyArray_DATA(out)
    cdef int nthreads = effective_threads()
    if n > 0:
        # the new output's pages populated in one call, then every thread (one thread where
        # they cannot be: docs/design.md, Dtype casts)
        with nogil:
            mk_cast_run_fresh(sp, sc, dp, dc, <size_t>n, nthreads, active_isa())
    return out
