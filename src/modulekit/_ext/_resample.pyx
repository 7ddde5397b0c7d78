"""2-D resampling of float32 NCHW arrays over the C kernels in ``kernels/resample``.

* :func:`bilinear2d`: separable two-tap interpolation (each input row interpolated
  horizontally once per thread, output rows blended vertically).
* :func:`nearest2d`: gather by row and column index.
* :func:`taps_axis`: one axis of any separable resampling (T taps per output sample: bicubic,
  (tri)linear, nearest in 1-D / 3-D, antialiasing filters), vectorised over the trailing
  dimensions (or weighted gathers along the last one).

The tap tables (indices and weights per output row and column) come from the caller
(``modulekit.nn._interp.axis_taps``, torch's formulas). Every shape, dtype and index is checked
here before the ``nogil`` kernel runs, and a non-contiguous or misaligned array is copied
(``_align.aligned``); float32 work dispatches on
:func:`modulekit._ext._isa.get_isa`'s level. Work above ``PARALLEL_THRESHOLD`` output elements
runs on ``modulekit.get_num_threads()`` OpenMP threads, taking chunks of rows from a shared
counter; each threaded call takes part in the contention back-off of every kernel family
(kernels/common/team.h, docs/design.md, Threads).
"""

cimport numpy as cnp
import numpy as np
from libc.stdint cimport int32_t

from modulekit._ext._align cimport aligned
from modulekit._ext._isa cimport active_isa
from modulekit._ext._openmp_helpers cimport bind_team, effective_threads

_TEAM = bind_team()  # the kernels' contention back-off: the process's state

cnp.import_array()

__all__ = ["PARALLEL_THRESHOLD", "bilinear2d", "nearest2d", "taps_axis"]

# Below this many output elements a call runs on the calling thread.
PARALLEL_THRESHOLD = 1 << 15

_F32 = np.dtype(np.float32)
_I32 = np.dtype(np.int32)


cdef extern from "resample/resample.h" nogil:
    int mk_f32_bilinear2d(int isa, size_t planes, size_t ih, size_t iw, size_t oh, size_t ow,
                          const float *x, float *y, const int32_t *ys0, const int32_t *ys1,
                          const float *wy0, const float *wy1, const int32_t *xs0,
                          const int32_t *xs1, const float *wx0, const float *wx1,
                          int nthreads)
    void mk_f32_nearest2d(int isa, size_t planes, size_t ih, size_t iw, size_t oh, size_t ow,
                          const float *x, float *y, const int32_t *ys, const int32_t *xs,
                          int nthreads)
    void mk_f32_taps_axis(int isa, size_t outer, size_t len, size_t inner, size_t out_len,
                          size_t ntaps, const float *x, float *y, const int32_t *idx,
                          const float *w, int nthreads)


cdef inline int _threads(Py_ssize_t work) except -1:
    if work < PARALLEL_THRESHOLD:
        return 1
    return effective_threads()


cdef cnp.ndarray _input(object x, str what):
    if not isinstance(x, np.ndarray) or x.dtype != _F32 or x.ndim != 4:
        raise TypeError(f"{what}: x must be a 4-D float32 ndarray (N, C, H, W)")
    if not x.dtype.isnative:
        raise TypeError(f"{what}: x must be in native byte order")
    if min(x.shape[2], x.shape[3]) < 1:
        raise ValueError(f"{what}: the input plane {x.shape[2:]} must be non-empty")
    if x.shape[2] * x.shape[3] >= 2**31:
        raise ValueError(f"{what}: an input plane of {x.shape[2] * x.shape[3]} elements is "
                         f"too large (at most 2**31 - 1)")
    return aligned(np.ascontiguousarray(x))


cdef cnp.ndarray _index(object idx, Py_ssize_t n, Py_ssize_t bound, str name, str what):
    """``idx`` as a C-contiguous int32 array of ``n`` values, each in ``[0, bound)``."""
    a = np.asarray(idx)
    if a.ndim != 1 or a.shape[0] != n or a.dtype.kind not in "iu":
        raise ValueError(f"{what}: {name} must be {n} integers, got {a.dtype} {a.shape}")
    if n and (a.min() < 0 or a.max() >= bound):
        raise IndexError(f"{what}: {name} holds an index outside [0, {bound})")
    return aligned(np.ascontiguousarray(a, dtype=_I32))


cdef cnp.ndarray _weights(object w, Py_ssize_t n, str name, str what):
    a = np.asarray(w)
    if a.ndim != 1 or a.shape[0] != n or a.dtype.kind != "f":
        raise ValueError(f"{what}: {name} must be {n} floats, got {a.dtype} {a.shape}")
    return aligned(np.ascontiguousarray(a, dtype=_F32))


def bilinear2d(x, ys0, ys1, wy0, wy1, xs0, xs1, wx0, wx1):
    """Bilinear resampling of ``x`` (N, C, H, W) float32 to (N, C, OH, OW), ``OH = len(ys0)``,
    ``OW = len(xs0)``: output ``(oy, ox)`` is
    ``wy0[oy] * (wx0[ox] * x[ys0[oy], xs0[ox]] + wx1[ox] * x[ys0[oy], xs1[ox]]) +
    wy1[oy] * (the same on row ys1[oy])``."""
    cdef cnp.ndarray X = _input(x, "bilinear2d")
    cdef Py_ssize_t n = X.shape[0], c = X.shape[1], ih = X.shape[2], iw = X.shape[3]
    cdef Py_ssize_t oh = len(ys0), ow = len(xs0)
    cdef cnp.ndarray Ys0 = _index(ys0, oh, ih, "ys0", "bilinear2d")
    cdef cnp.ndarray Ys1 = _index(ys1, oh, ih, "ys1", "bilinear2d")
    cdef cnp.ndarray Xs0 = _index(xs0, ow, iw, "xs0", "bilinear2d")
    cdef cnp.ndarray Xs1 = _index(xs1, ow, iw, "xs1", "bilinear2d")
    cdef cnp.ndarray Wy0 = _weights(wy0, oh, "wy0", "bilinear2d")
    cdef cnp.ndarray Wy1 = _weights(wy1, oh, "wy1", "bilinear2d")
    cdef cnp.ndarray Wx0 = _weights(wx0, ow, "wx0", "bilinear2d")
    cdef cnp.ndarray Wx1 = _weights(wx1, ow, "wx1", "bilinear2d")
    cdef cnp.ndarray Y = np.empty((n, c, oh, ow), dtype=_F32)
    if Y.size == 0:
        return Y
    cdef int nt = _threads(Y.size)
    cdef int isa = <int>active_isa()
    cdef int rc
    with nogil:
        rc = mk_f32_bilinear2d(
            isa, n * c, ih, iw, oh, ow, <const float *>cnp.PyArray_DATA(X),
            <float *>cnp.PyArray_DATA(Y), <const int32_t *>cnp.PyArray_DATA(Ys0),
            <const int32_t *>cnp.PyArray_DATA(Ys1), <const float *>cnp.PyArray_DATA(Wy0),
            <const float *>cnp.PyArray_DATA(Wy1), <const int32_t *>cnp.PyArray_DATA(Xs0),
            <const int32_t *>cnp.PyArray_DATA(Xs1), <const float *>cnp.PyArray_DATA(Wx0),
            <const float *>cnp.PyArray_DATA(Wx1), nt)
    if rc != 0:
        raise MemoryError("bilinear2d: could not allocate the threads' row caches")
    return Y


def nearest2d(x, ys, xs):
    """Nearest resampling of ``x`` (N, C, H, W) float32: ``y[..., oy, ox] = x[..., ys[oy],
    xs[ox]]``."""
    cdef cnp.ndarray X = _input(x, "nearest2d")
    cdef Py_ssize_t n = X.shape[0], c = X.shape[1], ih = X.shape[2], iw = X.shape[3]
    cdef Py_ssize_t oh = len(ys), ow = len(xs)
    cdef cnp.ndarray Ys = _index(ys, oh, ih, "ys", "nearest2d")
    cdef cnp.ndarray Xs = _index(xs, ow, iw, "xs", "nearest2d")
    cdef cnp.ndarray Y = np.empty((n, c, oh, ow), dtype=_F32)
    if Y.size == 0:
        return Y
    cdef int nt = _threads(Y.size)
    cdef int isa = <int>active_isa()
    with nogil:
        mk_f32_nearest2d(isa, n * c, ih, iw, oh, ow, <const float *>cnp.PyArray_DATA(X),
                         <float *>cnp.PyArray_DATA(Y), <const int32_t *>cnp.PyArray_DATA(Ys),
                         <const int32_t *>cnp.PyArray_DATA(Xs), nt)
    return Y


def taps_axis(x, int axis, idx, w=None):
    """Resample float32 ``x`` along ``axis`` with taps: ``y[..., o, ...] = sum_t w[o, t] *
    x[..., idx[o, t], ...]``. ``idx`` is ``(out, T)`` integers in ``[0, x.shape[axis])``,
    ``w`` ``(out, T)`` floats (None: one tap of weight 1, a gather)."""
    if not isinstance(x, np.ndarray) or x.dtype != _F32 or x.ndim < 1:
        raise TypeError("taps_axis: x must be a float32 ndarray of at least 1 dimension")
    if not x.dtype.isnative:
        raise TypeError("taps_axis: x must be in native byte order")
    cdef Py_ssize_t nd = x.ndim
    if not -nd <= axis < nd:
        raise IndexError(f"taps_axis: axis {axis} is out of range for {nd} dimension(s)")
    if axis < 0:  # (C division semantics: no % on a negative axis)
        axis += nd
    shape = x.shape
    cdef Py_ssize_t length = shape[axis]
    if length < 1 or length >= 2**31:
        raise ValueError(f"taps_axis: the resampled dimension has {length} elements "
                         f"(1 to 2**31 - 1)")
    I = np.asarray(idx)
    if I.ndim != 2 or I.dtype.kind not in "iu" or I.shape[1] < 1:
        raise ValueError(f"taps_axis: idx must be an (out, taps) integer array, got "
                         f"{I.dtype} {I.shape}")
    cdef Py_ssize_t out_len = I.shape[0], ntaps = I.shape[1]
    if out_len and (I.min() < 0 or I.max() >= length):
        raise IndexError(f"taps_axis: idx holds an index outside [0, {length})")
    if w is None:
        W = np.ones((out_len, ntaps), dtype=_F32)
    else:
        W = np.asarray(w)
        if W.shape != I.shape or W.dtype.kind != "f":
            raise ValueError(f"taps_axis: w must be a float array of idx's shape {I.shape}, "
                             f"got {W.dtype} {W.shape}")
    cdef cnp.ndarray It = aligned(np.ascontiguousarray(I.T, dtype=_I32))
    cdef cnp.ndarray Wt = aligned(np.ascontiguousarray(W.T, dtype=_F32))
    cdef cnp.ndarray X = aligned(np.ascontiguousarray(x))
    cdef Py_ssize_t outer = 1, inner = 1, k
    for k in range(axis):
        outer *= shape[k]
    for k in range(axis + 1, nd):
        inner *= shape[k]
    cdef cnp.ndarray Y = np.empty(shape[:axis] + (out_len,) + shape[axis + 1:], dtype=_F32)
    if Y.size == 0:
        return Y
    cdef int nt = _threads(Y.size * ntaps)
    cdef int isa = <int>active_isa()
    with nogil:
        mk_f32_taps_axis(isa, outer, length, inner, out_len, ntaps,
                         <const float *>cnp.PyArray_DATA(X), <float *>cnp.PyArray_DATA(Y),
                         <const int32_t *>cnp.PyArray_DATA(It),
                         <const float *>cnp.PyArray_DATA(Wt), nt)
    return Y
