"""Group normalisation over the C kernels in ``kernels/norm`` (GroupNorm, and InstanceNorm as
one group per channel).

:func:`group_norm` validates shapes, dtypes and alignment here, then makes one ``nogil`` call:
float32 work dispatches on :func:`modulekit._ext._isa.get_isa`'s level through the config table
of ``kernels/norm/norm-config.c`` (:func:`kernel_name` says which variant runs); float64 work
runs the portable C path. Groups are spread over ``modulekit.get_num_threads()`` OpenMP threads
when the input holds at least ``PARALLEL_THRESHOLD`` elements (one thread while the contention
back-off of kernels/common/team.h holds, as for every kernel family).
"""

cimport numpy as cnp
import numpy as np

from modulekit._ext._align cimport aligned
from modulekit._ext._isa cimport active_isa
from modulekit._ext._norm cimport (
    mk_groupnorm_f32,
    mk_groupnorm_f64,
    mk_norm_config_for,
    mk_norm_set_streaming_min_bytes,
    mk_norm_streaming_min_bytes,
)
from modulekit._ext._openmp_helpers cimport bind_team, effective_threads
from modulekit.dtypes import is_bfloat16

_TEAM = bind_team()  # the kernels' contention back-off: the process's state

cnp.import_array()

__all__ = ["PARALLEL_THRESHOLD", "group_norm", "kernel_name", "set_streaming_min_bytes",
           "streaming_min_bytes"]

# Below this many elements the groups run on the calling thread (a parallel region costs
# 1-15 us).
PARALLEL_THRESHOLD = 1 << 15

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


cdef int _threads(Py_ssize_t work, Py_ssize_t items) except -1:
    if work < PARALLEL_THRESHOLD or items < 2:
        return 1
    return effective_threads()


def kernel_name():
    """The float32 kernel variant the active instruction-set level runs
    (``"f32-moments-64-avx512"``, ...)."""
    return mk_norm_config_for(<int>active_isa()).name.decode()



def streaming_min_bytes():
    """Outputs of at least this many bytes are written with non-temporal stores where the
    active level has them (AVX-512): they bypass the caches instead of reading each output
    line first. 0 means never."""
    return mk_norm_streaming_min_bytes()


def set_streaming_min_bytes(size_t nbytes):
    """Set :func:`streaming_min_bytes` (0: never stream); returns the previous value. For
    measurements (``bench/performance_notes.md``) and tests of both paths."""
    return mk_norm_set_streaming_min_bytes(nbytes)


def _affine(v, Py_ssize_t c, dt, str what, str op):
    if v is None:
        return None
    a = np.asarray(v)
    if a.dtype.kind not in "fiub" and not is_bfloat16(a.dtype):
        raise TypeError(f"{op}: {what} must hold real numbers, got dtype {a.dtype}")
    a = aligned(np.ascontiguousarray(a.astype(dt, copy=False).reshape(-1)))
    if a.shape[0] != c:
        raise ValueError(f"{op}: {what} must have {c} elements (one per channel), got "
                         f"{a.shape[0]}")
    return a


def group_norm(x, Py_ssize_t num_groups, weight=None, bias=None, double eps=1e-5,
               bint return_stats=False, str op="group_norm"):
    """Group normalisation of ``x`` (N, C, *): each of ``num_groups`` groups of C/G channels
    normalised by its own mean and biased variance, then ``* weight[c] + bias[c]``.

    Parameters
    ----------
    x : ndarray
        float32 or float64 input of 2 or more dimensions (other dtypes: the caller casts).
    num_groups : int
        Divides C.
    weight, bias : array_like or None
        C values each, or None (1 and 0); cast to ``x``'s dtype.
    eps : float
        Added to the variance.
    return_stats : bool
        Also return the (N, G) float64 means and ``1 / sqrt(var + eps)``.
    op : str
        Names the caller in errors.

    Returns
    -------
    ndarray or (ndarray, ndarray, ndarray)
        A new C-contiguous array of ``x``'s shape and dtype (and the statistics).
    """
    if type(x) is not np.ndarray:
        raise TypeError(f"{op}: expected an ndarray, got {type(x).__name__}")
    dt = x.dtype
    if dt != _F32 and dt != _F64:
        raise TypeError(f"{op}: expected float32 or float64 input, got {dt}")
    if not dt.isnative:
        raise TypeError(f"{op}: the input is in non-native byte order ({dt.str})")
    if x.ndim < 2:
        raise ValueError(f"{op}: expected an input of at least 2 dimensions (N, C, *), got "
                         f"shape {x.shape}")
    cdef Py_ssize_t n = x.shape[0], c = x.shape[1]
    if num_groups <= 0 or c % num_groups != 0:
        raise ValueError(f"{op}: num_groups={num_groups} must be positive and divide the "
                         f"{c} channels of the input (shape {x.shape})")
    G = _affine(weight, c, dt, "weight", op)
    B = _affine(bias, c, dt, "bias", op)
    X = aligned(np.ascontiguousarray(x))
    cdef Py_ssize_t s = X.size // (n * c) if n * c else 0
    cdef cnp.ndarray out = np.empty(x.shape, dtype=dt)
    cdef cnp.ndarray mean = None, rstd = None
    cdef double *pm = NULL
    cdef double *pr = NULL
    if return_stats:  # else the kernel writes none
        mean = np.full((n, num_groups), np.nan, dtype=_F64)
        rstd = np.full((n, num_groups), np.nan, dtype=_F64)
        pm = <double *>cnp.PyArray_DATA(mean)
        pr = <double *>cnp.PyArray_DATA(rstd)
    if X.size == 0:
        return (out, mean, rstd) if return_stats else out
    cdef void *px = cnp.PyArray_DATA(<cnp.ndarray>X)
    cdef void *pg = NULL if G is None else cnp.PyArray_DATA(<cnp.ndarray>G)
    cdef void *pb = NULL if B is None else cnp.PyArray_DATA(<cnp.ndarray>B)
    cdef void *po = cnp.PyArray_DATA(out)
    cdef int nt = _threads(X.size, n * num_groups)
    cdef int isa = <int>active_isa()
    cdef size_t un = n, uc = c, us = s, ug = num_groups
    if dt == _F32:
        with nogil:
            mk_groupnorm_f32(isa, un, uc, us, ug, <const float *>px, <const float *>pg,
                             <const float *>pb, eps, <float *>po, pm, pr, nt)
    else:
        with nogil:
            mk_groupnorm_f64(un, uc, us, ug, <const double *>px, <const double *>pg,
                             <const double *>pb, eps, <double *>po, pm, pr, nt)
    return (out, mean, rstd) if return_stats else out
