# cython: language_level=3
"""Dynamically quantized int8 Linear kernels (``qd8-f32-qc8w``; see ``kernels/qgemm/qgemm.h``).

:func:`quantize_weight` turns a float weight ``(out_features, in_features)`` into symmetric
int8 values and one float32 scale per output channel; :func:`pack_qlinear` packs them (and
a float32 bias) once for the kernel of the active instruction set; :meth:`PackedQLinear.forward`
quantizes each row of a float32 input to int8 at run time (its own scale), multiplies in
int32 and returns ``act(x_q @ w_q.T * scales + bias)`` in float32. Every check happens here,
before the C kernels run without the GIL.
"""
import numpy as np

cimport numpy as cnp
from libc.stdint cimport int8_t, uint8_t
from libc.stdlib cimport free

from modulekit._ext._isa cimport active_bf16, active_isa
from modulekit._ext._openmp_helpers cimport effective_threads

cnp.import_array()

cdef extern from "<stdlib.h>" nogil:
    void *aligned_alloc(size_t alignment, size_t size)

cdef extern from "qgemm/qgemm.h" nogil:
    int MK_QD8_MAX_K
    ctypedef struct mk_qd8_config:
        const char *name
        size_t mr
        size_t nr
    const mk_qd8_config *mk_qd8_get_config(int isa, int amx)
    size_t mk_qd8_packed_size(const mk_qd8_config *cfg, size_t n, size_t k)
    void mk_qd8_pack(const mk_qd8_config *cfg, size_t n, size_t k, const int8_t *qw,
                     const float *scale, const float *bias, void *packed)
    void mk_qd8_unpack(const mk_qd8_config *cfg, size_t n, size_t k, const void *packed,
                       int8_t *qw, float *scale, float *bias)
    int mk_qd8_gemm_run(const mk_qd8_config *cfg, size_t m, size_t n, size_t k,
                        const float *x, size_t ldx, const void *packed, float *y, size_t ldc,
                        float lo, float hi, int nthreads)

_F32 = np.dtype(np.float32)
_I8 = np.dtype(np.int8)


cdef const mk_qd8_config *_config() noexcept:
    """The kernel configuration now: the active ISA level, and AMX-INT8 where the bfloat16
    selector is on AMX (the OS granted the tile state and MODULEKIT_BF16 / set_bf16 allow it)."""
    return mk_qd8_get_config(<int>active_isa(), active_bf16() == 2)

#: The activations the kernel applies in its epilogue (as clamp bounds; "clamp" takes them
#: from ``alpha`` and ``beta``).
ACTIVATIONS = ("none", "relu", "relu6", "clamp")

#: The largest in_features whose int32 sums are exact.
MAX_IN_FEATURES = MK_QD8_MAX_K


def quantize_weight(weight):
    """``(qweight, scale)``: ``weight`` (2-D, floating, finite) as symmetric int8 per output
    channel, ``qweight = round_half_even(weight / scale[:, None])`` within [-127, 127] and
    ``scale = max|weight[n, :]| / 127`` in float32 (1 for an all-zero row)."""
    w = np.asarray(weight)
    if w.ndim != 2 or w.dtype.kind != "f":
        raise ValueError(f"quantize_weight: expected a 2-D floating weight (out_features, "
                         f"in_features), got {w.dtype} of shape {w.shape}")
    w = w.astype(np.float64)
    if not np.isfinite(w).all():
        raise ValueError("quantize_weight: the weight holds NaN or infinity, which int8 "
                         "cannot represent")
    amax = np.abs(w).max(axis=1) if w.shape[1] else np.zeros(w.shape[0])
    scale = (amax / 127.0).astype(np.float32)
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(w / scale.astype(np.float64)[:, None]), -127, 127).astype(np.int8)
    return q, scale


cdef class PackedQLinear:
    """An int8 Linear weight packed for the ``qd8-f32-qc8w`` kernels; create with
    :func:`pack_qlinear`.

    Attributes
    ----------
    in_features, out_features : int
    has_bias : bool
    nbytes : int
        Bytes of the packed buffer (int8 weights, per-channel scales, bias, column sums).
    kernel : str
        The kernel the packing is for (it follows the active instruction set: a switch
        re-packs on the next call).
    """

    cdef void *_packed
    cdef const mk_qd8_config *_cfg
    cdef readonly Py_ssize_t in_features, out_features, nbytes
    cdef readonly bint has_bias

    def __cinit__(self):
        self._packed = NULL
        self._cfg = NULL

    def __init__(self, *args, **kwargs):
        raise TypeError("PackedQLinear cannot be created directly: use pack_qlinear()")

    def __dealloc__(self):
        free(self._packed)

    cdef int _pack(self, const mk_qd8_config *cfg, cnp.ndarray q, cnp.ndarray scale,
                   object bias) except -1:
        cdef size_t n = <size_t>self.out_features, k = <size_t>self.in_features
        cdef size_t size = mk_qd8_packed_size(cfg, n, k)
        cdef void *buf = aligned_alloc(64, (size + 63) // 64 * 64)
        cdef const float *bptr = NULL
        if buf == NULL:
            raise MemoryError(f"cannot allocate {size} bytes for packed int8 weights")
        if bias is not None:
            bptr = <const float *>cnp.PyArray_DATA(<cnp.ndarray>bias)
        with nogil:
            mk_qd8_pack(cfg, n, k, <const int8_t *>cnp.PyArray_DATA(q),
                        <const float *>cnp.PyArray_DATA(scale), bptr, buf)
        free(self._packed)
        self._packed = buf
        self._cfg = cfg
        self.nbytes = <Py_ssize_t>size
        return 0

    @property
    def kernel(self) -> str:
        return self._cfg.name.decode()

    def unpack(self):
        """``(qweight, scale, bias or None)``: the int8 weight (out_features, in_features),
        the float32 per-channel scales and bias, exactly as packed."""
        cdef cnp.ndarray q = np.empty((self.out_features, self.in_features), _I8)
        cdef cnp.ndarray s = np.empty(self.out_features, _F32)
        cdef cnp.ndarray b = np.empty(self.out_features, _F32)
        with nogil:
            mk_qd8_unpack(self._cfg, <size_t>self.out_features, <size_t>self.in_features,
                          self._packed, <int8_t *>cnp.PyArray_DATA(q),
                          <float *>cnp.PyArray_DATA(s), <float *>cnp.PyArray_DATA(b))
        return q, s, (b if self.has_bias else None)

    def __reduce__(self):
        return pack_qlinear, self.unpack()

    def forward(self, x, str activation="none", double alpha=0.0, double beta=0.0):
        """``act(quantized(x) @ qweight.T * scale + bias)`` for a 2-D ``x`` of in_features
        columns (converted to C-contiguous float32 if it is not); float32 output.
        ``activation``: "none", "relu", "relu6" or "clamp" (to [``alpha``, ``beta``]). A row
        of ``x`` holding NaN or infinity gives a row of NaN."""
        if activation == "none":
            bounds = (-np.inf, np.inf)
        elif activation == "relu":
            bounds = (0.0, np.inf)
        elif activation == "relu6":
            bounds = (0.0, 6.0)
        elif activation == "clamp":
            if not alpha <= beta:
                raise ValueError(f"PackedQLinear: clamp needs alpha <= beta, got {alpha}, {beta}")
            bounds = (alpha, beta)
        else:
            raise ValueError(f"PackedQLinear: activation must be one of "
                             f"{', '.join(ACTIVATIONS)}, got {activation!r}")
        arr = np.asarray(x)
        if arr.ndim != 2 or arr.shape[1] != self.in_features:
            raise ValueError(f"PackedQLinear: expected x of shape (rows, {self.in_features}), "
                             f"got {arr.shape}")
        if arr.dtype.kind not in "fiub":
            raise TypeError(f"PackedQLinear: x must hold real numbers, got {arr.dtype}")
        cdef cnp.ndarray a = np.ascontiguousarray(arr, dtype=_F32)
        cdef size_t m = <size_t>a.shape[0], n = <size_t>self.out_features
        cdef size_t k = <size_t>self.in_features
        cdef cnp.ndarray y = np.empty((a.shape[0], self.out_features), _F32)
        cdef const mk_qd8_config *cfg = _config()
        if cfg != self._cfg:
            q, s, b = self.unpack()
            self._pack(cfg, q, s, b)
        cdef float lo = bounds[0], hi = bounds[1]
        cdef int rc, nt = effective_threads()
        with nogil:
            rc = mk_qd8_gemm_run(cfg, m, n, k, <const float *>cnp.PyArray_DATA(a), k,
                                 self._packed, <float *>cnp.PyArray_DATA(y), n, lo, hi, nt)
        if rc != 0:
            raise MemoryError(f"PackedQLinear: cannot allocate scratch for {m} rows")
        return y


def pack_qlinear(qweight, scale, bias=None):
    """Pack an int8 weight ``(out_features, in_features)`` with values in [-127, 127], its
    float32 per-output-channel ``scale`` (positive, finite) and an optional float32 ``bias``
    for the kernel of the active instruction set."""
    q = np.asarray(qweight)
    if q.dtype != _I8 or q.ndim != 2:
        raise ValueError(f"pack_qlinear: qweight must be a 2-D int8 array, got {q.dtype} of "
                         f"shape {q.shape}")
    n, k = q.shape
    if k > MK_QD8_MAX_K:
        raise ValueError(f"pack_qlinear: in_features {k} exceeds {MK_QD8_MAX_K}, past which "
                         "the int32 sums could overflow")
    if q.size and q.min() < -127:
        raise ValueError("pack_qlinear: qweight holds -128; symmetric int8 weights are within "
                         "[-127, 127]")
    s = np.ascontiguousarray(scale, dtype=_F32)
    if s.shape != (n,) or not (np.isfinite(s) & (s > 0)).all():
        raise ValueError(f"pack_qlinear: scale must be {n} positive finite values, got shape "
                         f"{s.shape}")
    b = None
    if bias is not None:
        b = np.ascontiguousarray(bias, dtype=_F32)
        if b.shape != (n,):
            raise ValueError(f"pack_qlinear: bias must have shape ({n},), got {b.shape}")
    cdef PackedQLinear obj = PackedQLinear.__new__(PackedQLinear)
    obj.in_features = k
    obj.out_features = n
    obj.has_bias = b is not None
    obj._pack(_config(), np.ascontiguousarray(q), s, b)
    return obj
