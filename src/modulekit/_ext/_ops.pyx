"""Fused row-wise ops of the transformer layers, over the C kernels in ``kernels/ops``.

* :func:`layer_norm`: LayerNorm over the trailing ``n`` elements in one pass (an optional
  residual added on the way in).
* :func:`softmax_`: in-place softmax over the last axis with a scale and an additive mask folded
  in (attention scores).
* :func:`activation`: the element-wise activations (ReLU, ReLU6, clamp, Hardswish, GELU in
  both forms, SiLU, Sigmoid, Tanh) by kernels/common's one math, the GEMM's and the
  convolution's epilogue math; :func:`gelu` is one of them.
* :func:`attention`: fused multi-head attention, one head's scores per thread.
* :func:`embedding`: embedding gather (float32/float64 tables, or float16/bfloat16 tables widened
  to float32), every index checked before anything is read.
* :func:`embedding_layer_norm`: three float32 embedding rows summed and layer-normalised in one
  pass per row (BERT's embeddings).
* :func:`transpose_into`: the last two axes of a 3-D array swapped into another array (layout
  changes such as (N, C, L) -> (N, L, C)) in 16 x 16 blocks.
* :func:`scatter_phases`: a transposed convolution's stride phases, computed as one
  convolution, into their interleaved places in its output.

Each function validates shapes, dtypes and strides in Python before the ``nogil`` kernel runs;
float32 work dispatches on :func:`modulekit._ext._isa.get_isa`'s level, float64 work runs the
portable C path. Work above ``PARALLEL_THRESHOLD`` elements runs on
``modulekit.get_num_threads()`` OpenMP threads, or on the calling thread while the contention
back-off of every parallel region holds (kernels/common/team.h).
"""

cimport numpy as cnp
import numpy as np
from libc.math cimport sqrt
from libc.stdint cimport int64_t
from libc.stddef cimport ptrdiff_t

from modulekit._ext._gemm import _get_precision
from modulekit._ext._act cimport (MK_ACT_CLAMP, MK_ACT_GELU_ERF, MK_ACT_GELU_TANH,
                                   MK_ACT_HARDSWISH, MK_ACT_NONE, MK_ACT_RELU, MK_ACT_RELU6,
                                   MK_ACT_SIGMOID, MK_ACT_SILU, MK_ACT_TANH, mk_act_f32,
                                   mk_act_f64)
from modulekit._ext._align cimport aligned, check_aligned
from modulekit._ext._isa cimport active_bf16, active_isa
from modulekit._ext._openmp_helpers cimport bind_team, effective_threads
from modulekit.dtypes import is_bfloat16

_TEAM = bind_team()  # the kernels' contention back-off: the process's state

cnp.import_array()

__all__ = [
    "ACTIVATIONS", "PARALLEL_THRESHOLD", "activation", "attention", "layer_norm", "softmax_",
    "gelu", "embedding", "embedding_layer_norm", "transpose_into", "scatter_phases",
]

# Below this many elements an op runs on the calling thread (a parallel region costs 1-15 us).
PARALLEL_THRESHOLD = 1 << 15

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_F16 = np.dtype(np.float16)
_I64 = np.dtype(np.int64)


cdef inline int _threads(Py_ssize_t work) except -1:
    """Threads for an op of ``work`` elements: one below PARALLEL_THRESHOLD, else
    ``effective_threads()`` (the kernels' regions go serial on their own while the contention
    back-off holds: kernels/common/team.h)."""
    if work < PARALLEL_THRESHOLD:
        return 1
    return effective_threads()


cdef int _check_native(object arr, str what) except -1:
    """Refuse a byte-swapped array: the kernels read native words only. (The layers convert
    such input first, in ``modulekit.nn._input.as_input``.)"""
    if not arr.dtype.isnative:
        raise TypeError(
            f"{what}: the array is in non-native byte order (dtype {arr.dtype.str}); the "
            f"kernels read native-endian data: convert it first, e.g. "
            f"x.astype(x.dtype.newbyteorder('='))"
        )
    return 0


def _float_array(x, str what):
    """``x`` as an ndarray in its compute dtype (float64 stays, other reals become float32)."""
    arr = np.asarray(x)
    _check_native(arr, what)
    if arr.dtype == _F32 or arr.dtype == _F64:
        return arr
    if arr.dtype.kind not in "biuf" and not is_bfloat16(arr.dtype):
        raise TypeError(f"{what}: expected real numbers, got dtype {arr.dtype}")
    return arr.astype(_F32)


def layer_norm(x, Py_ssize_t n, weight=None, bias=None, double eps=1e-5, residual=None):
    """LayerNorm of ``x + residual`` over its trailing ``n`` elements.

    Parameters
    ----------
    x : array_like
        Input; its trailing dimensions must hold ``n`` elements per row.
    n : int
        Elements normalised together (the product of ``normalized_shape``).
    weight, bias : array_like or None
        ``n`` values each (any shape of that size), or None for 1 and 0.
    eps : float
        Added to the variance.
    residual : array_like or None
        Added to ``x`` before normalising (same shape as ``x``).

    Returns
    -------
    ndarray
        New C-contiguous array of ``x``'s shape, float64 if ``x`` is float64 else float32.
    """
    fast = _layer_norm_f32_fast(x, n, weight, bias, eps, residual)
    if fast is not None:
        return fast
    X = _float_array(x, "layer_norm")
    if n <= 0 or X.ndim == 0 or X.size % n != 0:
        raise ValueError(f"layer_norm: input of shape {X.shape} cannot be split into rows of {n}")
    dt = X.dtype
    X = aligned(np.ascontiguousarray(X))
    cdef Py_ssize_t rows = X.size // n
    R = None
    if residual is not None:
        R = aligned(np.ascontiguousarray(
            _float_array(residual, "layer_norm").astype(dt, copy=False)))
        if R.shape != X.shape:
            raise ValueError(
                f"layer_norm: residual shape {R.shape} does not match input shape {X.shape}")
    G = B = None
    if weight is not None:
        G = aligned(np.ascontiguousarray(np.asarray(weight), dtype=dt).reshape(-1))
        if G.shape[0] != n:
            raise ValueError(f"layer_norm: weight has {G.shape[0]} elements, expected {n}")
    if bias is not None:
        B = aligned(np.ascontiguousarray(np.asarray(bias), dtype=dt).reshape(-1))
        if B.shape[0] != n:
            raise ValueError(f"layer_norm: bias has {B.shape[0]} elements, expected {n}")
    cdef cnp.ndarray out = np.empty(X.shape, dtype=dt)
    if rows == 0:
        return out
    cdef void *px = cnp.PyArray_DATA(<cnp.ndarray>X)
    cdef void *pr = NULL if R is None else cnp.PyArray_DATA(<cnp.ndarray>R)
    cdef void *pg = NULL if G is None else cnp.PyArray_DATA(<cnp.ndarray>G)
    cdef void *pb = NULL if B is None else cnp.PyArray_DATA(<cnp.ndarray>B)
    cdef void *po = cnp.PyArray_DATA(out)
    cdef int nt = _threads(X.size)
    cdef int isa = <int>active_isa()
    if dt == _F32:
        with nogil:
            mk_layernorm_f32(isa, rows, n, <const float *>px, n, <const float *>pr, n,
                             <const float *>pg, <const float *>pb, <float>eps, <float *>po, n,
                             nt)
    else:
        with nogil:
            mk_layernorm_f64(rows, n, <const double *>px, n, <const double *>pr, n,
                             <const double *>pg, <const double *>pb, eps, <double *>po, n, nt)
    return out


cdef inline bint _f32_c(object a) noexcept:
    """``a`` is a C-contiguous, aligned float32 ndarray."""
    return (type(a) is np.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>a) == cnp.NPY_FLOAT32
            and not cnp.PyArray_ISBYTESWAPPED(<cnp.ndarray>a)
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a)
            and cnp.PyArray_ISALIGNED(<cnp.ndarray>a))


cdef object _layer_norm_f32_fast(object x, Py_ssize_t n, object weight, object bias,
                                 double eps, object residual):
    """layer_norm's common case without the conversions: float32 C-contiguous ndarrays of
    matching sizes (a transformer layer's call). None when anything differs: the general
    path then converts or raises."""
    if not (_f32_c(x) and _f32_c(weight) and _f32_c(bias)):
        return None
    cdef cnp.ndarray X = <cnp.ndarray>x
    cdef int nd = cnp.PyArray_NDIM(X)
    if (n <= 0 or nd == 0 or X.shape[nd - 1] != n or cnp.PyArray_SIZE(<cnp.ndarray>weight) != n
            or cnp.PyArray_SIZE(<cnp.ndarray>bias) != n):
        return None
    cdef void *pr = NULL
    if residual is not None:
        if not _f32_c(residual) or not cnp.PyArray_SAMESHAPE(X, <cnp.ndarray>residual):
            return None
        pr = cnp.PyArray_DATA(<cnp.ndarray>residual)
    cdef Py_ssize_t rows = cnp.PyArray_SIZE(X) // n
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(nd, X.shape, cnp.NPY_FLOAT32, 0)
    cdef const float *px = <const float *>cnp.PyArray_DATA(X)
    cdef const float *pg = <const float *>cnp.PyArray_DATA(<cnp.ndarray>weight)
    cdef const float *pb = <const float *>cnp.PyArray_DATA(<cnp.ndarray>bias)
    cdef float *po = <float *>cnp.PyArray_DATA(out)
    cdef int nt = _threads(rows * n)
    cdef int isa = <int>active_isa()
    if rows:
        with nogil:
            mk_layernorm_f32(isa, rows, n, px, n, <const float *>pr, n, pg, pb, <float>eps, po,
                             n, nt)
    return out


def softmax_(scores, double scale=1.0, mask=None):
    """Softmax over the last axis, in place: ``scores = softmax(scores * scale + mask)``.

    Parameters
    ----------
    scores : ndarray
        Writable, aligned float32 or float64 array of 1 to 4 dimensions with a unit-stride
        last axis.
    scale : float
        Multiplies the scores before the mask is added.
    mask : array_like or None
        Additive mask broadcastable to ``scores.shape`` (``-inf`` removes a position; a row
        removed everywhere becomes NaN, as in torch).

    Returns
    -------
    ndarray
        ``scores``.
    """
    if not isinstance(scores, np.ndarray):
        raise TypeError(f"softmax_: scores must be an ndarray, got {type(scores).__name__}")
    S = scores
    _check_native(S, "softmax_: scores")
    dt = S.dtype
    if dt != _F32 and dt != _F64:
        raise TypeError(f"softmax_: scores must be float32 or float64, got {dt}")
    if not S.flags.writeable:
        raise ValueError("softmax_: scores must be writable")
    check_aligned(S, "softmax_: scores")
    if not 1 <= S.ndim <= 4:
        raise ValueError(f"softmax_: scores must have 1 to 4 dimensions, got shape {S.shape}")
    cdef Py_ssize_t es = dt.itemsize
    if S.shape[S.ndim - 1] > 1 and S.strides[S.ndim - 1] != es:
        raise ValueError("softmax_: the last axis of scores must have unit stride")
    for s in S.strides:
        if s % es:
            raise ValueError("softmax_: scores strides must be multiples of the item size")
    S4 = S.reshape((1,) * (4 - S.ndim) + S.shape) if S.ndim < 4 else S
    if S4.size == 0:
        return scores
    if not np.shares_memory(S4, S):
        raise ValueError("softmax_: scores cannot be viewed as 4-D without a copy")
    M4 = None
    if mask is not None:
        M = np.asarray(mask)
        if M.dtype != dt:
            if M.dtype.kind not in "biuf":
                raise TypeError(f"softmax_: mask must hold real numbers, got dtype {M.dtype}")
            M = M.astype(dt)
        M = aligned(M)
        try:
            M4 = np.broadcast_to(M, S.shape)
        except ValueError:
            raise ValueError(
                f"softmax_: mask of shape {M.shape} cannot be broadcast to scores of shape "
                f"{S.shape}") from None
        if M4.strides[M4.ndim - 1] not in (es,) and M4.shape[M4.ndim - 1] > 1:
            M4 = np.ascontiguousarray(M4)
            M4 = np.broadcast_to(M4, S.shape)
        M4 = M4.reshape((1,) * (4 - M4.ndim) + M4.shape) if M4.ndim < 4 else M4
    cdef Py_ssize_t n = S4.shape[3]
    cdef Py_ssize_t na = S4.shape[0], nb = S4.shape[1], nc = S4.shape[2]
    cdef ptrdiff_t sx0 = S4.strides[0] // es, sx1 = S4.strides[1] // es, sx2 = S4.strides[2] // es
    cdef ptrdiff_t sm0 = 0, sm1 = 0, sm2 = 0
    cdef void *pm = NULL
    if M4 is not None:
        if M4.strides[3] != es and M4.shape[3] > 1:
            raise ValueError("softmax_: mask's last axis must have unit stride")
        sm0, sm1, sm2 = M4.strides[0] // es, M4.strides[1] // es, M4.strides[2] // es
        pm = cnp.PyArray_DATA(<cnp.ndarray>M4)
    cdef void *px = cnp.PyArray_DATA(<cnp.ndarray>S4)
    cdef int nt = _threads(S4.size)
    cdef int isa = <int>active_isa()
    if dt == _F32:
        with nogil:
            mk_softmax_f32(isa, na, nb, nc, n, <float *>px, sx0, sx1, sx2, <const float *>pm,
                           sm0, sm1, sm2, <float>scale, nt)
    else:
        with nogil:
            mk_softmax_f64(na, nb, nc, n, <double *>px, sx0, sx1, sx2, <const double *>pm,
                           sm0, sm1, sm2, scale, nt)
    return scores


# Activation names -> kernels/common/act.h codes (the names of _gemm.ACTIVATIONS).
cdef dict _ACT_CODES = {
    "none": MK_ACT_NONE, "relu": MK_ACT_RELU, "relu6": MK_ACT_RELU6, "clamp": MK_ACT_CLAMP,
    "hardswish": MK_ACT_HARDSWISH, "gelu": MK_ACT_GELU_ERF, "gelu_tanh": MK_ACT_GELU_TANH,
    "silu": MK_ACT_SILU, "sigmoid": MK_ACT_SIGMOID, "tanh": MK_ACT_TANH,
}
ACTIVATIONS = tuple(_ACT_CODES)


def activation(x, str name, double alpha=0.0, double beta=0.0, out=None):
    """``name(x)`` element-wise by the one activation math of the kernels (kernels/common).

    The same functions the GEMM and convolution epilogues apply, so the result has the bits a
    fused Linear/Conv + activation gives. float32 (and narrower, and integer) inputs give
    float32; float64 inputs give float64 (libm).

    Parameters
    ----------
    x : array_like
        Real numbers, any shape and strides.
    name : str
        One of :data:`ACTIVATIONS`: ``'none'``, ``'relu'``, ``'relu6'``, ``'clamp'`` (to
        ``[alpha, beta]``), ``'hardswish'``, ``'gelu'`` (erf form), ``'gelu_tanh'``,
        ``'silu'``, ``'sigmoid'``, ``'tanh'``.
    alpha, beta : float
        ``'clamp'``'s bounds, ``alpha <= beta``; ignored otherwise.
    out : numpy.ndarray, optional
        A writable C-contiguous array of the result's dtype and shape (``x`` itself for in
        place).

    Returns
    -------
    numpy.ndarray
        ``out``, or a new C-contiguous array.

    Raises
    ------
    ValueError
        An unknown ``name``, clamp bounds out of order or NaN, or an unusable ``out``.
    TypeError
        Complex, object or string input.
    """
    code = _ACT_CODES.get(name)
    if code is None:
        raise ValueError(
            f"activation: unknown activation {name!r}: expected one of {', '.join(ACTIVATIONS)}")
    if code == MK_ACT_CLAMP and not (alpha <= beta):
        raise ValueError(
            f"activation: clamp needs alpha (min) <= beta (max), both not NaN; got {alpha!r}, "
            f"{beta!r}")
    X = _float_array(x, "activation")
    if not X.flags.c_contiguous:
        X = np.ascontiguousarray(X)  # (np.ascontiguousarray would make a 0-d array 1-d)
    X = aligned(X)
    dt = X.dtype
    cdef cnp.ndarray Y
    if out is None:
        Y = np.empty(X.shape, dtype=dt)
    else:
        if (not isinstance(out, np.ndarray) or out.dtype != dt or out.shape != X.shape
                or not out.flags.c_contiguous or not out.flags.writeable):
            raise ValueError(
                f"activation: out must be a writable C-contiguous {dt} array of shape "
                f"{X.shape}")
        check_aligned(out, "activation: out")
        Y = out
    cdef Py_ssize_t n = X.size
    if n == 0:
        return Y
    cdef void *px = cnp.PyArray_DATA(<cnp.ndarray>X)
    cdef void *py = cnp.PyArray_DATA(Y)
    cdef int act = <int>code
    cdef int nt = _threads(n)
    cdef int isa = <int>active_isa()
    cdef float lo32 = <float>alpha, hi32 = <float>beta
    if dt == _F32:
        with nogil:
            mk_act_f32(isa, n, <const float *>px, <float *>py, act, lo32, hi32, nt)
    else:
        with nogil:
            mk_act_f64(n, <const double *>px, <double *>py, act, alpha, beta, nt)
    return Y


def gelu(x, str approximate="none", out=None):
    """GELU of ``x``: erf form (``approximate='none'``) or the tanh form; see
    :func:`activation` (this is ``activation(x, 'gelu' or 'gelu_tanh', out=out)``)."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return activation(x, "gelu" if approximate == "none" else "gelu_tanh", out=out)


cdef void _check_ids(object ids, Py_ssize_t rows) except *:
    """Raise IndexError naming the first value of ``ids`` (a C-contiguous int64 ndarray) that
    is not a row of a table of ``rows`` rows."""
    cdef cnp.ndarray I = <cnp.ndarray>ids
    cdef ptrdiff_t bad
    with nogil:
        bad = mk_ids_first_bad(<const int64_t *>cnp.PyArray_DATA(I), cnp.PyArray_SIZE(I), rows)
    if bad >= 0:
        raise IndexError(
            f"embedding: index {int(ids.reshape(-1)[bad])} at position "
            f"{tuple(int(i) for i in np.unravel_index(bad, ids.shape))} is out of range for a "
            f"table of {rows} rows (valid: 0 to {rows - 1})")


def embedding(ids, table, out=None, bint accumulate=False):
    """Rows of ``table`` picked by ``ids``: ``out[..., :] (+)= table[ids[...], :]``.

    Parameters
    ----------
    ids : array_like of integers
        Any shape; every value must be in ``[0, table.shape[0])``, else ``IndexError`` (checked
        before anything is read).
    table : ndarray
        2-D C-contiguous float32, float64, float16 or bfloat16 (16-bit tables are widened to
        float32).
    out : ndarray or None
        Writable, aligned C-contiguous array of shape ``ids.shape + (table.shape[1],)`` in the
        result dtype (float64 for float64 tables, else float32); required when
        ``accumulate``.
    accumulate : bool
        Add the rows to ``out`` instead of overwriting it.
    """
    I = np.asarray(ids)
    _check_native(I, "embedding: indices")
    if I.dtype.kind not in "iu" and not (I.dtype.kind == "b" and I.size == 0):
        raise TypeError(f"embedding: indices must be integers, got dtype {I.dtype}")
    if I.dtype.kind == "u" and I.size and I.max() > np.iinfo(np.int64).max:
        raise IndexError("embedding: index out of range of int64")
    # (np.ascontiguousarray would make a 0-d index 1-d: a scalar index gives one row, (dim,))
    I = aligned(np.require(I, dtype=_I64, requirements="C"))
    if not isinstance(table, np.ndarray) or table.ndim != 2:
        raise ValueError("embedding: table must be a 2-D ndarray")
    T = aligned(np.ascontiguousarray(table))
    cdef int tdt
    if T.dtype == _F32:
        tdt, rdt = MK_TABLE_F32, _F32
    elif T.dtype == _F64:
        tdt, rdt = MK_TABLE_F64, _F64
    elif T.dtype == _F16:
        tdt, rdt = MK_TABLE_F16, _F32
    elif is_bfloat16(T.dtype):
        tdt, rdt = MK_TABLE_BF16, _F32
    else:
        raise TypeError(
            f"embedding: table dtype must be float32, float64, float16 or bfloat16, got {T.dtype}")
    cdef Py_ssize_t rows = T.shape[0], dim = T.shape[1], n = I.size
    shape = I.shape + (dim,)
    cdef cnp.ndarray O
    if out is None:
        if accumulate:
            raise ValueError("embedding: accumulate=True needs out")
        O = np.empty(shape, dtype=rdt)
    else:
        if (not isinstance(out, np.ndarray) or out.dtype != rdt or out.shape != shape
                or not out.flags.c_contiguous or not out.flags.writeable):
            raise ValueError(
                f"embedding: out must be a writable C-contiguous {rdt} array of shape {shape}")
        check_aligned(out, "embedding: out")
        O = out
    _check_ids(I, rows)
    cdef const int64_t *pi = <const int64_t *>cnp.PyArray_DATA(<cnp.ndarray>I)
    if n == 0 or dim == 0:
        return O
    cdef const void *pt = cnp.PyArray_DATA(<cnp.ndarray>T)
    cdef void *po = cnp.PyArray_DATA(O)
    cdef int nt = _threads(n * dim)
    cdef int isa = <int>active_isa()
    with nogil:
        mk_gather(isa, tdt, n, dim, pi, pt, po, dim, accumulate, nt)
    return O


cdef inline bint _i64_c(object a) noexcept:
    """``a`` is a C-contiguous, aligned int64 ndarray."""
    return (type(a) is np.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>a) == cnp.NPY_INT64
            and not cnp.PyArray_ISBYTESWAPPED(<cnp.ndarray>a)
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a)
            and cnp.PyArray_ISALIGNED(<cnp.ndarray>a))


def embedding_layer_norm(ids0, table0, ids1, table1, ids2, table2, weight, bias, double eps):
    """``layer_norm(table0[ids0] + table1[ids1] + table2[ids2])`` in one pass per row (BERT's
    embeddings), or None when this fused path does not apply.

    Parameters
    ----------
    ids0, ids1, ids2 : ndarray
        C-contiguous int64 arrays of one shape; every value must be a row of its table, else
        ``IndexError`` (all three checked before any row is read).
    table0, table1, table2 : ndarray
        2-D C-contiguous float32 tables of one width ``n``.
    weight, bias : ndarray
        C-contiguous float32, ``n`` values each.
    eps : float

    Returns
    -------
    ndarray or None
        New float32 array of shape ``ids0.shape + (n,)``, equal bit for bit to gathering the
        three rows with :func:`embedding` (accumulating in that order) and then
        :func:`layer_norm`. None when any argument is of another dtype, layout or shape: the
        caller then takes those separate steps (which convert or raise).
    """
    if not (_i64_c(ids0) and _i64_c(ids1) and _i64_c(ids2) and _f32_c(table0)
            and _f32_c(table1) and _f32_c(table2) and _f32_c(weight) and _f32_c(bias)):
        return None
    cdef cnp.ndarray I0 = <cnp.ndarray>ids0, I1 = <cnp.ndarray>ids1, I2 = <cnp.ndarray>ids2
    cdef cnp.ndarray T0 = <cnp.ndarray>table0, T1 = <cnp.ndarray>table1, T2 = <cnp.ndarray>table2
    if (cnp.PyArray_NDIM(T0) != 2 or cnp.PyArray_NDIM(T1) != 2 or cnp.PyArray_NDIM(T2) != 2
            or not cnp.PyArray_SAMESHAPE(I0, I1) or not cnp.PyArray_SAMESHAPE(I0, I2)):
        return None
    cdef Py_ssize_t n = T0.shape[1]
    if (n <= 0 or T1.shape[1] != n or T2.shape[1] != n
            or cnp.PyArray_SIZE(<cnp.ndarray>weight) != n
            or cnp.PyArray_SIZE(<cnp.ndarray>bias) != n):
        return None
    cdef Py_ssize_t rows = cnp.PyArray_SIZE(I0)
    cdef const int64_t *p0 = <const int64_t *>cnp.PyArray_DATA(I0)
    cdef const int64_t *p1 = <const int64_t *>cnp.PyArray_DATA(I1)
    cdef const int64_t *p2 = <const int64_t *>cnp.PyArray_DATA(I2)
    _check_ids(I0, T0.shape[0])
    _check_ids(I1, T1.shape[0])
    _check_ids(I2, T2.shape[0])
    shape = ids0.shape + (n,)
    cdef cnp.ndarray out = np.empty(shape, dtype=_F32)
    if rows == 0:
        return out
    cdef const float *pt0 = <const float *>cnp.PyArray_DATA(T0)
    cdef const float *pt1 = <const float *>cnp.PyArray_DATA(T1)
    cdef const float *pt2 = <const float *>cnp.PyArray_DATA(T2)
    cdef const float *pg = <const float *>cnp.PyArray_DATA(<cnp.ndarray>weight)
    cdef const float *pb = <const float *>cnp.PyArray_DATA(<cnp.ndarray>bias)
    cdef float *po = <float *>cnp.PyArray_DATA(out)
    cdef int nt = _threads(rows * n)
    cdef int isa = <int>active_isa()
    with nogil:
        mk_embed3_layernorm_f32(isa, rows, n, p0, pt0, p1, pt1, p2, pt2, pg, pb, <float>eps, po,
                                nt)
    return out


def _rows_view(x, str what, Py_ssize_t width_multiple, dt):
    """``x`` as a 3-D ``dt`` array with a unit-stride last axis (no copy when it has one)."""
    A = np.asarray(x)
    _check_native(A, f"attention: {what}")
    if A.dtype.kind not in "biuf" and not is_bfloat16(A.dtype):
        raise TypeError(f"attention: {what} must hold real numbers, got dtype {A.dtype}")
    if A.dtype != dt:
        A = A.astype(dt)
    if A.ndim != 3:
        raise ValueError(f"attention: {what} must be 3-D (batch, seq, features), got {A.shape}")
    es = dt.itemsize
    if (A.shape[2] > 1 and A.strides[2] != es) or A.strides[0] % es or A.strides[1] % es:
        A = np.ascontiguousarray(A)
    A = aligned(A)
    if A.shape[2] % width_multiple:
        raise ValueError(
            f"attention: {what} has {A.shape[2]} features, not divisible by num_heads="
            f"{width_multiple}")
    return A


cdef inline bint _f32_rows3(object a, Py_ssize_t heads) noexcept:
    """``a`` is an aligned 3-D float32 ndarray with a unit-stride last axis whose width splits
    into ``heads`` heads and whose other strides are whole elements."""
    if type(a) is not np.ndarray:
        return False
    cdef cnp.ndarray A = <cnp.ndarray>a
    if (cnp.PyArray_TYPE(A) != cnp.NPY_FLOAT32 or cnp.PyArray_NDIM(A) != 3
            or cnp.PyArray_ISBYTESWAPPED(A) or not cnp.PyArray_ISALIGNED(A)):
        return False
    return ((A.shape[2] <= 1 or A.strides[2] == 4) and A.strides[0] % 4 == 0
            and A.strides[1] % 4 == 0 and A.shape[2] % heads == 0)


cdef object _attention_f32_fast(object q, object k, object v, Py_ssize_t num_heads,
                                object scale):
    """attention's common case (float32 rows used in place, no mask, no weights: a
    transformer layer's call) without the general path's conversions; None when anything
    differs (the general path then converts or raises)."""
    if not (_f32_rows3(q, num_heads) and _f32_rows3(k, num_heads)
            and _f32_rows3(v, num_heads)):
        return None
    cdef cnp.ndarray Q = <cnp.ndarray>q, K = <cnp.ndarray>k, V = <cnp.ndarray>v
    cdef Py_ssize_t B = Q.shape[0], Lq = Q.shape[1], E = Q.shape[2]
    cdef Py_ssize_t Lk = K.shape[1], Ev = V.shape[2]
    if (K.shape[0] != B or V.shape[0] != B or K.shape[2] != E or V.shape[1] != Lk
            or Lq == 0 or Lk == 0 or B == 0 or Ev == 0):
        return None
    cdef Py_ssize_t d = E // num_heads, dv = Ev // num_heads
    cdef double fscale
    if scale is None:
        fscale = 1.0 / sqrt(<double>d) if d else 1.0
    else:
        fscale = float(scale)
    cdef cnp.npy_intp dims[3]
    dims[0] = B
    dims[1] = Lq
    dims[2] = Ev
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(3, dims, cnp.NPY_FLOAT32, 0)
    cdef Py_ssize_t work = B * num_heads * Lq * Lk * (d + dv) // 8
    cdef int nt = _threads(work)
    cdef int isa = <int>active_isa()
    cdef int bf16 = _attention_bf16()
    cdef int rc
    cdef const float *pq = <const float *>cnp.PyArray_DATA(Q)
    cdef const float *pk = <const float *>cnp.PyArray_DATA(K)
    cdef const float *pv = <const float *>cnp.PyArray_DATA(V)
    cdef float *po = <float *>cnp.PyArray_DATA(out)
    cdef ptrdiff_t qsb = Q.strides[0] // 4, qsr = Q.strides[1] // 4
    cdef ptrdiff_t ksb = K.strides[0] // 4, ksr = K.strides[1] // 4
    cdef ptrdiff_t vsb = V.strides[0] // 4, vsr = V.strides[1] // 4
    with nogil:
        rc = mk_attention_f32(isa, bf16, B, num_heads, Lq, Lk, d, dv, pq, qsb, qsr, pk, ksb,
                              ksr, pv, vsb, vsr, NULL, 0, 0, 0, <float>fscale, po, Lq * Ev,
                              Ev, NULL, nt)
    if rc != 0:
        raise MemoryError("attention: could not allocate the per-thread scratch buffers")
    return out


cdef int _attention_bf16():
    """The bfloat16 path a float32 attention multiplies on now (1: AVX512-BF16, 2: AMX), or 0:
    the calling thread's float32 matmul precision is not "medium", or no bfloat16 path."""
    return active_bf16() if _get_precision() == _PREC_MEDIUM else 0


_PREC_MEDIUM = 2  # mk_precision: float32_matmul_precision("medium")


def attention(q, k, v, Py_ssize_t num_heads, mask=None, scale=None, bint need_weights=False):
    """Fused multi-head scaled dot-product attention.

    Parameters
    ----------
    q : ndarray (B, Lq, E)
    k : ndarray (B, Lk, E)
    v : ndarray (B, Lk, Ev)
        Real arrays; computed in float64 when any is float64, else float32. With a unit-stride
        last axis any row and batch strides are used in place (slices of a packed QKV
        projection need no copy). Head ``h`` owns columns ``h * E / num_heads`` to
        ``(h + 1) * E / num_heads`` (and likewise of ``Ev``).
    num_heads : int
    mask : array_like or None
        Additive mask broadcastable to ``(B, num_heads, Lq, Lk)`` (``-inf`` removes a key).
    scale : float, optional
        Multiplies ``q k^T``; defaults to ``1 / sqrt(E / num_heads)``.
    need_weights : bool
        Also return the probabilities, ``(B, num_heads, Lq, Lk)``.

    Returns
    -------
    out : ndarray (B, Lq, Ev), C-contiguous
    weights : ndarray or None

    Notes
    -----
    Under ``float32_matmul_precision("medium")`` on the AVX512-BF16 path a float32 attention
    multiplies in bfloat16: ``q``, ``scale * k``, the (float32) softmax probabilities and ``v``
    are rounded to bfloat16 (nearest even) and the products summed in float32; ``weights``
    are the float32 probabilities.
    """
    if num_heads <= 0:
        raise ValueError(f"attention: num_heads must be positive, got {num_heads}")
    if mask is None and not need_weights:
        fast = _attention_f32_fast(q, k, v, num_heads, scale)
        if fast is not None:
            return fast, None
    dt = _F64 if _F64 in (np.asarray(q).dtype, np.asarray(k).dtype, np.asarray(v).dtype) else _F32
    cdef Py_ssize_t es = dt.itemsize
    Q = _rows_view(q, "q", num_heads, dt)
    K = _rows_view(k, "k", num_heads, dt)
    V = _rows_view(v, "v", num_heads, dt)
    cdef Py_ssize_t B = Q.shape[0], Lq = Q.shape[1], E = Q.shape[2]
    cdef Py_ssize_t Lk = K.shape[1], Ev = V.shape[2]
    if K.shape[0] != B or V.shape[0] != B or K.shape[2] != E or V.shape[1] != Lk:
        raise ValueError(
            f"attention: shapes q {Q.shape}, k {K.shape}, v {V.shape} do not fit "
            "q (B, Lq, E), k (B, Lk, E), v (B, Lk, Ev)")
    cdef Py_ssize_t d = E // num_heads, dv = Ev // num_heads
    cdef double fscale = (1.0 / np.sqrt(d) if d else 1.0) if scale is None else float(scale)
    cdef cnp.ndarray out = np.empty((B, Lq, Ev), dtype=dt)
    W = np.empty((B, num_heads, Lq, Lk), dtype=dt) if need_weights else None
    M = None
    if mask is not None:
        M = np.asarray(mask)
        if M.dtype != dt:
            if M.dtype.kind not in "biuf":
                raise TypeError(f"attention: mask must hold real numbers, got dtype {M.dtype}")
            M = M.astype(dt)
        M = aligned(M)
        try:
            M = np.broadcast_to(M, (B, num_heads, Lq, Lk))
        except ValueError:
            raise ValueError(
                f"attention: mask of shape {M.shape} cannot be broadcast to "
                f"{(B, num_heads, Lq, Lk)}") from None
        if Lk > 1 and M.strides[3] != es:
            M = np.ascontiguousarray(M)
    if out.size == 0 or Lq == 0:
        return out, W
    if Lk == 0:
        out[...] = np.nan  # softmax over no keys, as torch
        if W is not None:
            W[...] = np.nan
        return out, W
    cdef void *pq = cnp.PyArray_DATA(<cnp.ndarray>Q)
    cdef void *pk = cnp.PyArray_DATA(<cnp.ndarray>K)
    cdef void *pv = cnp.PyArray_DATA(<cnp.ndarray>V)
    cdef void *po = cnp.PyArray_DATA(out)
    cdef void *pw = NULL if W is None else cnp.PyArray_DATA(<cnp.ndarray>W)
    cdef void *pm = NULL
    cdef ptrdiff_t msb = 0, msh = 0, msr = 0
    if M is not None:
        pm = cnp.PyArray_DATA(<cnp.ndarray>M)
        msb, msh, msr = M.strides[0] // es, M.strides[1] // es, M.strides[2] // es
    cdef ptrdiff_t qsb = Q.strides[0] // es, qsr = Q.strides[1] // es
    cdef ptrdiff_t ksb = K.strides[0] // es, ksr = K.strides[1] // es
    cdef ptrdiff_t vsb = V.strides[0] // es, vsr = V.strides[1] // es
    cdef ptrdiff_t osb = Lq * Ev, osr = Ev
    cdef Py_ssize_t work = B * num_heads * Lq * Lk * (d + dv) // 8
    cdef int nt = _threads(work)
    cdef int isa = <int>active_isa()
    cdef int bf16 = _attention_bf16()
    cdef int rc
    if dt == _F32:
        with nogil:
            rc = mk_attention_f32(isa, bf16, B, num_heads, Lq, Lk, d, dv, <const float *>pq,
                                  qsb, qsr, <const float *>pk, ksb, ksr, <const float *>pv,
                                  vsb, vsr, <const float *>pm, msb, msh, msr, <float>fscale,
                                  <float *>po, osb, osr, <float *>pw, nt)
    else:
        with nogil:
            rc = mk_attention_f64(B, num_heads, Lq, Lk, d, dv, <const double *>pq, qsb, qsr,
                                  <const double *>pk, ksb, ksr, <const double *>pv, vsb, vsr,
                                  <const double *>pm, msb, msh, msr, fscale, <double *>po,
                                  osb, osr, <double *>pw, nt)
    if rc != 0:
        raise MemoryError("attention: could not allocate the per-thread scratch buffers")
    return out, W


cdef bint _unit_last_axis(a, Py_ssize_t isz):
    """Every axis longer than one: its stride whole elements, the last axis's one element."""
    for d in range(3):
        if a.shape[d] > 1 and (a.strides[d] % isz or (d == 2 and a.strides[d] != isz)):
            return False
    return True


cdef inline ptrdiff_t _stride(a, int d, Py_ssize_t isz):
    """Axis ``d``'s stride in elements (0 for an axis of length one: never stepped)."""
    return a.strides[d] // isz if a.shape[d] > 1 else 0


def _src_out(src, out, int src_ndim, int out_ndim, str what):
    """The dtype of ``src`` after checking that ``src`` and ``out`` are NumPy arrays of the
    given ranks, one float32 or float64 dtype, in native byte order."""
    if not isinstance(src, np.ndarray) or not isinstance(out, np.ndarray):
        raise TypeError(f"{what}: src and out must be NumPy arrays")
    if src.ndim != src_ndim or out.ndim != out_ndim:
        shapes = (f"{src_ndim}-D" if src_ndim == out_ndim
                  else f"{src_ndim}-D and {out_ndim}-D respectively")
        raise ValueError(f"{what}: src and out must be {shapes}, got {src.ndim}-D and "
                         f"{out.ndim}-D")
    _check_native(src, what)
    dt = src.dtype
    if dt != _F32 and dt != _F64:
        raise TypeError(f"{what}: src must be float32 or float64, got {dt}")
    if out.dtype != dt:
        raise TypeError(f"{what}: out must have src's dtype {dt}, got {out.dtype}")
    return dt


def transpose_into(src, out):
    """``out[b, j, i] = src[b, i, j]``: the last two axes of a 3-D array swapped into ``out``.

    Parameters
    ----------
    src : ndarray
        (B, R, C) float32 or float64, any strides (copied first unless its last axis is
        contiguous and it is aligned).
    out : ndarray
        Writable (B, C, R) array of ``src``'s dtype whose last axis is contiguous (a view into a
        larger buffer is fine, e.g. the unpadded rows of a padded (N, L + pad, C) buffer),
        outside ``src``'s address range.

    Returns
    -------
    ndarray
        ``out``.
    """
    what = "transpose_into"
    dt = _src_out(src, out, 3, 3, what)
    cdef Py_ssize_t nb = src.shape[0], nr = src.shape[1], nc = src.shape[2]
    if out.shape != (nb, nc, nr):
        raise ValueError(f"{what}: out must have shape {(nb, nc, nr)} for src of shape "
                         f"{src.shape}, got {out.shape}")
    if not out.flags.writeable:
        raise ValueError(f"{what}: out must be writable")
    if src.size == 0:
        return out
    cdef Py_ssize_t isz = dt.itemsize
    if not _unit_last_axis(out, isz):
        raise ValueError(f"{what}: out must have a contiguous last axis and strides that are "
                         f"whole elements, got strides {out.strides}")
    check_aligned(out, f"{what}: out")
    if np.may_share_memory(src, out):
        raise ValueError(f"{what}: src and out must not overlap (their address ranges)")
    if not _unit_last_axis(src, isz):
        src = np.ascontiguousarray(src)
    src = aligned(src)
    cdef ptrdiff_t sb = _stride(src, 0, isz), sr = _stride(src, 1, isz)
    cdef ptrdiff_t db = _stride(out, 0, isz), dr = _stride(out, 1, isz)
    cdef const void *ps = cnp.PyArray_DATA(<cnp.ndarray>src)
    cdef void *po = cnp.PyArray_DATA(<cnp.ndarray>out)
    cdef int nt = _threads(src.size)
    cdef int isa = <int>active_isa()
    with nogil:
        mk_transpose(isa, <size_t>isz, <size_t>nb, <size_t>nr, <size_t>nc, ps, sb, sr, po, db,
                     dr, nt)
    return out


def scatter_phases(src, out, windows, starts, counts, stride):
    """A transposed convolution's stride phases into their places in its output.

    For every outer index ``b``, channel ``c``, phase ``i`` and position ``q`` (three spatial
    axes) below ``counts[i]``::

        out[b, c, starts[i] + q * stride] = src[b, i, c, windows[i] + q]

    Parameters
    ----------
    src : ndarray
        C-contiguous (B, P, C, M0, M1, M2) float32 or float64: the P phases stacked along the
        channels (a 1-D or 2-D convolution's spatial axes padded with leading ones).
    out : ndarray
        Writable C-contiguous (B, C, O0, O1, O2) array of ``src``'s dtype, outside ``src``.
    windows, starts, counts : array_like of int
        (P, 3) each: phase ``i``'s first source position, first output position and count
        per axis (a count of 0 skips the phase).
    stride : sequence of 3 int
        The output step of a phase per axis (the transposed convolution's stride).

    Returns
    -------
    ndarray
        ``out``. Positions no phase reaches are left as they were.

    Raises
    ------
    ValueError
        When a phase's box leaves ``src`` or ``out``, or shapes, dtypes or layouts differ
        from the above.
    """
    what = "scatter_phases"
    dt = _src_out(src, out, 6, 5, what)
    for name, a in (("src", src), ("out", out)):
        if not a.flags.c_contiguous:
            raise ValueError(f"{what}: {name} must be C-contiguous")
    if not out.flags.writeable:
        raise ValueError(f"{what}: out must be writable")
    nb, nph, cg = src.shape[:3]
    if out.shape[:2] != (nb, cg):
        raise ValueError(f"{what}: out must start with (B, C) = {(nb, cg)} for src of shape "
                         f"{src.shape}, got {out.shape}")
    boxes = []
    for name, box in (("windows", windows), ("starts", starts), ("counts", counts)):
        b = np.asarray(box)
        if b.shape != (nph, 3) or b.dtype.kind not in "iu":
            raise ValueError(f"{what}: {name} must be integers of shape {(nph, 3)}, got "
                             f"{b.dtype} {b.shape}")
        boxes.append(np.ascontiguousarray(b, dtype=np.intp))
    w0, o0, cnt = boxes
    st = np.ascontiguousarray(stride, dtype=np.intp)
    if st.shape != (3,) or (st < 1).any():
        raise ValueError(f"{what}: stride must be 3 positive integers, got {stride!r}")
    mshape = np.asarray(src.shape[3:], np.intp)
    oshape = np.asarray(out.shape[2:], np.intp)
    live = (cnt > 0).all(axis=1)  # a phase with an empty axis writes nothing
    if (cnt < 0).any() or (w0[live] < 0).any() or (o0[live] < 0).any() or \
            (w0[live] + cnt[live] > mshape).any() or \
            (o0[live] + (cnt[live] - 1) * st > oshape - 1).any():
        raise ValueError(f"{what}: a phase's box leaves src {src.shape[3:]} or out "
                         f"{out.shape[2:]} (windows {w0.tolist()}, starts {o0.tolist()}, "
                         f"counts {cnt.tolist()}, stride {st.tolist()})")
    if np.may_share_memory(src, out):
        raise ValueError(f"{what}: src and out must not overlap")
    if out.size == 0 or src.size == 0:
        return out
    cdef const void *ps = cnp.PyArray_DATA(<cnp.ndarray>src)
    cdef void *po = cnp.PyArray_DATA(<cnp.ndarray>out)
    cdef const ptrdiff_t *mp = <const ptrdiff_t *>cnp.PyArray_DATA(mshape)
    cdef const ptrdiff_t *op = <const ptrdiff_t *>cnp.PyArray_DATA(oshape)
    cdef const ptrdiff_t *wp = <const ptrdiff_t *>cnp.PyArray_DATA(w0)
    cdef const ptrdiff_t *cp = <const ptrdiff_t *>cnp.PyArray_DATA(cnt)
    cdef const ptrdiff_t *sp0 = <const ptrdiff_t *>cnp.PyArray_DATA(o0)
    cdef const ptrdiff_t *stp = <const ptrdiff_t *>cnp.PyArray_DATA(st)
    cdef size_t isz = dt.itemsize, b_ = nb, c_ = cg, p_ = nph
    cdef int nt = _threads(out.size)
    with nogil:
        mk_scatter_phases(isz, b_, c_, p_, ps, mp, wp, cp, po, op, sp0, stp, nt)
    return out
