# cython: language_level=3
"""Dynamically quantized int8 Linear kernels (``qd8-f32-qc8w``; see ``kernels/qgemm/qgemm.h``).

:func:`quantize_weight` turns a float weight ``(out_features, in_features)`` into symmetric
int8 values and one float32 scale per output channel; :func:`pack_qlinear` packs them (and
a float32 bias) once for the kernel of the active instruction set; :meth:`PackedQLinear.forward`
quantizes each row of a float32 input to int8 at run time (its own scale), multiplies in
int32 and returns ``act(x_q @ w_q.T * scales + bias)`` in float32. Every check happens here,
before the C kernels run without the GIL.
"""
import math

import numpy as np

cimport numpy as cnp
from libc.stdint cimport int8_t, int32_t, uint8_t
from libc.stdlib cimport free

from modulekit._ext._act cimport (MK_ACT_GELU_ERF, MK_ACT_GELU_TANH, MK_ACT_HARDSWISH,
                                   MK_ACT_NONE, MK_ACT_SIGMOID, MK_ACT_SILU, MK_ACT_TANH)
from modulekit._ext._isa cimport active_bf16, active_isa
from modulekit._ext._openmp_helpers cimport bind_team, effective_threads

_TEAM = bind_team()  # the kernels' contention back-off: the process's state

cnp.import_array()

cdef extern from "<stdlib.h>" nogil:
    void *aligned_alloc(size_t alignment, size_t size)

cdef extern from "qgemm/qgemm.h" nogil:
    int MK_QD8_MAX_K
    ctypedef struct mk_qgemm_epilogue:
        size_t ascale_step
        float lo
        float hi
        size_t ldr
        float res_scale
        int32_t res_zp
        int out_u8
        float out_inv_scale
        int32_t out_zp
        int act
    ctypedef struct mk_qconv_geom:
        size_t n, h, w, cin, oh, ow, cout, kh, kw, sh, sw, ph, pw, dh, dw
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
                        float lo, float hi, int act, int nthreads)
    void mk_qd8_pack_zp(const mk_qd8_config *cfg, size_t n, size_t k, const int8_t *qw,
                        const float *scale, const float *bias, int32_t zp, void *packed)
    int mk_qconv_run(const mk_qd8_config *cfg, const mk_qconv_geom *g, const uint8_t *x,
                     int32_t in_zp, float in_scale, const void *packed, const uint8_t *res,
                     const mk_qgemm_epilogue *ep, void *y, int nthreads)
    int MK_QDW_MAX_TAPS
    size_t mk_qdw_packed_size(size_t c, size_t taps)
    void mk_qdw_pack(size_t c, size_t taps, const int8_t *qw, const float *scale,
                     const float *bias, float *packed)
    void mk_qdw_unpack(size_t c, size_t taps, const float *packed, int8_t *qw, float *scale,
                       float *bias)
    int mk_qdw_run(int isa, const mk_qconv_geom *g, const uint8_t *x, int32_t in_zp,
                   float in_scale, const float *packed, const uint8_t *res,
                   const mk_qgemm_epilogue *ep, void *y, int nthreads)
    int mk_qconv_pointwise_direct(const mk_qd8_config *cfg, size_t cin)
    ctypedef struct mk_qinvres:
        const mk_qd8_config *cfg
        int isa
        size_t n, h, w, cin, chid, cout, stride
        const void *pe
        float e_scale
        int32_t e_zp
        mk_qgemm_epilogue ep_e
        const float *pd
        float d_scale
        int32_t d_zp
        mk_qgemm_epilogue ep_d
        const void *pp
        float p_scale
        int32_t p_zp
        mk_qgemm_epilogue ep_p
        int residual
    int mk_qinvres_run(const mk_qinvres *b, const uint8_t *x, void *y, int nthreads)
    void mk_qu8_quantize_nchw(int isa, size_t n, size_t c, size_t hw, const float *x,
                              float inv, int32_t zp, uint8_t *q, int nthreads)
    void mk_qu8_dequantize_nhwc(size_t n, size_t hw, size_t c, const uint8_t *q, float scale,
                                int32_t zp, float *x, int nthreads)
    void mk_qu8_maxpool_nhwc(size_t n, size_t h, size_t w, size_t c, size_t oh, size_t ow,
                             size_t kh, size_t kw, size_t sh, size_t sw, size_t ph, size_t pw,
                             size_t dh, size_t dw, const uint8_t *x, uint8_t *y, int nthreads)

_F32 = np.dtype(np.float32)
_I8 = np.dtype(np.int8)


cdef const mk_qd8_config *_config() noexcept:
    """The kernel configuration now: the active ISA level, and AMX-INT8 where the bfloat16
    selector is on AMX (the OS granted the tile state and MODULEKIT_BF16 / set_bf16 allow it)."""
    return mk_qd8_get_config(<int>active_isa(), active_bf16() == 2)

#: The activations the kernel applies in its epilogue: the first four as clamp bounds
#: ("clamp" takes them from ``alpha`` and ``beta``), the others by the one activation math of
#: kernels/common on the float32 results (the bits of ``nn.functional``'s).
ACTIVATIONS = ("none", "relu", "relu6", "clamp", "gelu", "gelu_tanh", "silu", "sigmoid",
               "tanh", "hardswish")
cdef dict _MATH_ACTS = {"gelu": MK_ACT_GELU_ERF, "gelu_tanh": MK_ACT_GELU_TANH,
                        "silu": MK_ACT_SILU, "sigmoid": MK_ACT_SIGMOID, "tanh": MK_ACT_TANH,
                        "hardswish": MK_ACT_HARDSWISH}

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


cdef class _PackedBuffer:
    """The packed weight buffer of :class:`PackedQLinear` and :class:`PackedQConv2d` (64-byte
    aligned, owned), with the kernel configuration it was packed for."""

    cdef void *_packed
    cdef const mk_qd8_config *_cfg
    cdef readonly Py_ssize_t nbytes
    cdef readonly bint has_bias

    def __cinit__(self):
        self._packed = NULL
        self._cfg = NULL

    def __init__(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} cannot be created directly: use its pack "
                        "function")

    def __dealloc__(self):
        free(self._packed)

    cdef void *_alloc(self, size_t size) except NULL:
        cdef void *buf = aligned_alloc(64, (size + 63) // 64 * 64)
        if buf == NULL:
            raise MemoryError(f"cannot allocate {size} bytes for packed int8 weights")
        return buf

    cdef void _adopt(self, void *buf, const mk_qd8_config *cfg, size_t size) noexcept:
        """Take ``buf`` (from :meth:`_alloc`, written) as the packed buffer."""
        free(self._packed)
        self._packed = buf
        self._cfg = cfg
        self.nbytes = <Py_ssize_t>size


cdef class PackedQLinear(_PackedBuffer):
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

    cdef readonly Py_ssize_t in_features, out_features

    cdef int _pack(self, const mk_qd8_config *cfg, cnp.ndarray q, cnp.ndarray scale,
                   object bias) except -1:
        cdef size_t n = <size_t>self.out_features, k = <size_t>self.in_features
        cdef size_t size = mk_qd8_packed_size(cfg, n, k)
        cdef void *buf = self._alloc(size)
        cdef const float *bptr = NULL
        if bias is not None:
            bptr = <const float *>cnp.PyArray_DATA(<cnp.ndarray>bias)
        with nogil:
            mk_qd8_pack(cfg, n, k, <const int8_t *>cnp.PyArray_DATA(q),
                        <const float *>cnp.PyArray_DATA(scale), bptr, buf)
        self._adopt(buf, cfg, size)
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
        ``activation``: one of :data:`ACTIVATIONS` ("clamp": to [``alpha``, ``beta``]), in
        the kernel's epilogue. A row of ``x`` holding NaN or infinity gives a row of NaN."""
        cdef int act = _MATH_ACTS.get(activation, MK_ACT_NONE)
        if act != MK_ACT_NONE or activation == "none":
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
                                 self._packed, <float *>cnp.PyArray_DATA(y), n, lo, hi,
                                 act, nt)
        if rc != 0:
            raise MemoryError(f"PackedQLinear: cannot allocate scratch for {m} rows")
        return y


def _check_scales(q, scale, bias, n, what):
    """``(scale, bias or None)`` as float32 after checking an int8 weight's values and its
    ``n`` per-channel scales and bias."""
    if q.size and q.min() < -127:
        raise ValueError(f"{what}: qweight holds -128; symmetric int8 weights are within "
                         "[-127, 127]")
    s = np.ascontiguousarray(scale, dtype=_F32)
    if s.shape != (n,) or not (np.isfinite(s) & (s > 0)).all():
        raise ValueError(f"{what}: scale must be {n} positive finite values, got shape "
                         f"{s.shape}")
    b = None
    if bias is not None:
        b = np.ascontiguousarray(bias, dtype=_F32)
        if b.shape != (n,):
            raise ValueError(f"{what}: bias must have shape ({n},), got {b.shape}")
    return s, b


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
    s, b = _check_scales(q, scale, bias, n, "pack_qlinear")
    cdef PackedQLinear obj = PackedQLinear.__new__(PackedQLinear)
    obj.in_features = k
    obj.out_features = n
    obj.has_bias = b is not None
    obj._pack(_config(), np.ascontiguousarray(q), s, b)
    return obj


# ---------------------------------------------------------------------------------------------
# Statically quantized activations (qu8): NHWC bytes with one (scale, zero point) per tensor,
# convolved with int8 weights packed for the same kernels (``kernels/qgemm/qconv-driver.c``).

_U8 = np.dtype(np.uint8)
_STATIC_BOUNDS = {None: (-np.inf, np.inf), "none": (-np.inf, np.inf), "relu": (0.0, np.inf),
                  "relu6": (0.0, 6.0)}

#: The activations a quantized convolution computes in its epilogue.
STATIC_ACTIVATIONS = ("none", "relu", "relu6")


cdef mk_qgemm_epilogue _static_epilogue(activation, out_q) except *:
    """The epilogue of a quantized convolution step: its clamp (the static activations are
    clamps: lo and hi), then bytes in ``out_q`` ((scale, zero point), checked) or floats
    (None); no residual."""
    cdef mk_qgemm_epilogue ep
    ep.lo, ep.hi = _STATIC_BOUNDS[activation]
    ep.ascale_step, ep.ldr, ep.res_scale, ep.res_zp = 0, 0, 0.0, 0
    ep.act = MK_ACT_NONE
    if out_q is None:
        ep.out_u8, ep.out_inv_scale, ep.out_zp = 0, 1.0, 0
    else:
        ep.out_u8, ep.out_inv_scale, ep.out_zp = 1, np.float32(1.0) / out_q[0], out_q[1]
    return ep


def _check_qparams(scale, zero_point, what):
    """``(float32 scale, int zero_point)`` checked: a positive finite scale, a byte zero
    point."""
    s = np.float32(scale)
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"{what}: scale must be a positive finite number, got {scale!r}")
    if isinstance(zero_point, (bool, np.bool_)) or int(zero_point) != zero_point \
            or not 0 <= int(zero_point) <= 255:
        raise ValueError(f"{what}: zero_point must be an integer in [0, 255], got "
                         f"{zero_point!r}")
    return s, int(zero_point)


cdef class QuantizedArray:
    """A float32 image held as bytes: ``value = (data - zero_point) * scale``, ``data`` NHWC
    ``uint8``. The value one quantized convolution of a compiled plan hands to the next;
    :func:`quantize_per_tensor` makes one, :meth:`dequantize` (or ``np.asarray``) gives the
    float32 NCHW array back.

    Attributes
    ----------
    data : ndarray
        uint8, ``(N, H, W, C)``, C-contiguous.
    scale : float
    zero_point : int
    unbatched : bool
        The image stands for a 3-D ``(C, H, W)`` array (``data`` keeps a batch of one).
    """

    cdef readonly object data
    cdef readonly float scale
    cdef readonly int zero_point
    cdef readonly bint unbatched

    def __init__(self, data, scale, zero_point, unbatched=False):
        d = np.asarray(data)
        if d.dtype != _U8 or d.ndim != 4 or not d.flags.c_contiguous:
            raise ValueError(f"QuantizedArray: data must be C-contiguous uint8 (N, H, W, C), "
                             f"got {d.dtype} of shape {d.shape}")
        if unbatched and d.shape[0] != 1:
            raise ValueError("QuantizedArray: an unbatched image has a batch of one")
        self.data = d
        self.scale, self.zero_point = _check_qparams(scale, zero_point, "QuantizedArray")
        self.unbatched = unbatched

    @property
    def shape(self):
        """The float array's shape: ``(N, C, H, W)`` (``(C, H, W)`` when unbatched)."""
        n, h, w, c = self.data.shape
        return (c, h, w) if self.unbatched else (n, c, h, w)

    def dequantize(self):
        """The float32 values, NCHW (CHW when unbatched)."""
        cdef cnp.ndarray q = self.data
        n, h, w, c = self.data.shape
        cdef cnp.ndarray y = np.empty((n, c, h, w), _F32)
        cdef size_t sn = n, shw = h * w, sc = c
        cdef float s = self.scale
        cdef int32_t z = self.zero_point
        cdef int nt = effective_threads()
        with nogil:
            mk_qu8_dequantize_nhwc(sn, shw, sc, <const uint8_t *>cnp.PyArray_DATA(q), s, z,
                                   <float *>cnp.PyArray_DATA(y), nt)
        return y[0] if self.unbatched else y

    def __array__(self, dtype=None, copy=None):
        y = self.dequantize()
        return y if dtype is None else y.astype(dtype, copy=False)

    def __repr__(self):
        return (f"QuantizedArray(shape={self.shape}, scale={self.scale!r}, "
                f"zero_point={self.zero_point})")


cdef QuantizedArray _wrap(cnp.ndarray data, float scale, int zero_point, bint unbatched):
    """A QuantizedArray of a kernel's fresh output, its (scale, zero point) checked already."""
    cdef QuantizedArray qa = QuantizedArray.__new__(QuantizedArray)
    qa.data, qa.scale, qa.zero_point, qa.unbatched = data, scale, zero_point, unbatched
    return qa


def quantize_per_tensor(x, scale, zero_point):
    """A float (N, C, H, W) or (C, H, W) array as a :class:`QuantizedArray`: each value to the
    byte ``clamp(rint(x / scale) + zero_point, 0, 255)`` (computed as ``x * (1 / scale)`` in
    float32, as the kernels' epilogue does; NaN to 0)."""
    s, z = _check_qparams(scale, zero_point, "quantize_per_tensor")
    arr = np.asarray(x)
    if arr.ndim not in (3, 4) or arr.dtype.kind not in "fiub":
        raise ValueError(f"quantize_per_tensor: expected a real (N, C, H, W) or (C, H, W) "
                         f"array, got {arr.dtype} of shape {arr.shape}")
    unbatched = arr.ndim == 3
    cdef cnp.ndarray a = np.ascontiguousarray(arr[None] if unbatched else arr, dtype=_F32)
    n, c, h, w = (<object>a).shape
    cdef cnp.ndarray q = np.empty((n, h, w, c), _U8)
    cdef size_t sn = n, sc = c, shw = h * w
    cdef float inv = np.float32(1.0) / s
    cdef int32_t zp = z
    cdef int nt = effective_threads()
    with nogil:
        mk_qu8_quantize_nchw(<int>active_isa(), sn, sc, shw, <const float *>cnp.PyArray_DATA(a),
                             inv, zp, <uint8_t *>cnp.PyArray_DATA(q), nt)
    return _wrap(q, s, z, unbatched)


def _pair(value, what):
    t = (value, value) if isinstance(value, (int, np.integer)) else tuple(value)
    if len(t) != 2 or any(isinstance(v, bool) or int(v) != v for v in t):
        raise ValueError(f"pack_qconv2d: {what} must be an int or a pair of ints, got {value!r}")
    return tuple(int(v) for v in t)


cdef class PackedQConv2d(_PackedBuffer):
    """A statically quantized 2-D convolution (groups 1, or depthwise: groups = in = out
    channels, ``kernels/qgemm/qdwconv.c``): int8 weights per output channel,
    the input quantized with one calibrated (scale, zero point), int32 sums, and the float32
    epilogue of ``kernels/qgemm/qgemm.h`` (bias, a residual, a clamp activation) storing
    float32 or requantized bytes. Create with :func:`pack_qconv2d`.

    Attributes
    ----------
    in_channels, out_channels, groups : int
    kernel_size, stride, padding, dilation : tuple of int
    input_scale : float
    input_zero_point : int
    output_scale, output_zero_point : float, int
        The calibrated quantization of the convolution's own output (bias included, before a
        residual or an activation): kept for a caller that stores it as bytes, not used by
        :meth:`forward`.
    has_bias : bool
    nbytes : int
    kernel : str
        The int8 GEMM tile the packing is for (it follows the active instruction set).
    """

    cdef readonly Py_ssize_t in_channels, out_channels, groups
    cdef readonly tuple kernel_size, stride, padding, dilation
    cdef readonly float input_scale, output_scale
    cdef readonly int input_zero_point, output_zero_point

    cdef int _pack(self, const mk_qd8_config *cfg, cnp.ndarray qw, cnp.ndarray scale,
                   object bias) except -1:
        """qw: (out, kh*kw*in) int8, k ordered (kh, kw, in) (depthwise: (channels, kh*kw))."""
        cdef size_t n = <size_t>qw.shape[0], k = <size_t>qw.shape[1]
        cdef size_t size = mk_qdw_packed_size(n, k) if self.groups > 1 else \
            mk_qd8_packed_size(cfg, n, k)
        cdef void *buf = self._alloc(size)
        cdef const float *bptr = NULL
        cdef int32_t zp = self.input_zero_point
        if bias is not None:
            bptr = <const float *>cnp.PyArray_DATA(<cnp.ndarray>bias)
        cdef bint depthwise = self.groups > 1
        with nogil:
            if depthwise:
                mk_qdw_pack(n, k, <const int8_t *>cnp.PyArray_DATA(qw),
                            <const float *>cnp.PyArray_DATA(scale), bptr, <float *>buf)
            else:
                mk_qd8_pack_zp(cfg, n, k, <const int8_t *>cnp.PyArray_DATA(qw),
                               <const float *>cnp.PyArray_DATA(scale), bptr, zp, buf)
        self._adopt(buf, cfg, size)
        return 0

    @property
    def kernel(self) -> str:
        if self.groups > 1:
            return "qu8-dwconv-avx512" if active_isa() >= 2 else "qu8-dwconv-scalar"
        return self._cfg.name.decode()

    def unpack(self):
        """``(qweight, scale, bias or None)``: the int8 weight (out, in / groups, kh, kw), the
        float32 per-channel scales and bias, exactly as packed."""
        kh, kw = self.kernel_size
        cin = self.in_channels // self.groups
        cdef size_t n = <size_t>self.out_channels
        cdef size_t k = <size_t>(cin * kh * kw)
        cdef cnp.ndarray q = np.empty((n, k), _I8)
        cdef cnp.ndarray s = np.empty(n, _F32)
        cdef cnp.ndarray b = np.empty(n, _F32)
        cdef bint depthwise = self.groups > 1
        with nogil:
            if depthwise:
                mk_qdw_unpack(n, k, <const float *>self._packed, <int8_t *>cnp.PyArray_DATA(q),
                              <float *>cnp.PyArray_DATA(s), <float *>cnp.PyArray_DATA(b))
            else:
                mk_qd8_unpack(self._cfg, n, k, self._packed, <int8_t *>cnp.PyArray_DATA(q),
                              <float *>cnp.PyArray_DATA(s), <float *>cnp.PyArray_DATA(b))
        q = np.ascontiguousarray(q.reshape(n, kh, kw, cin).transpose(0, 3, 1, 2))
        return q, s, (b if self.has_bias else None)

    def _kernel_rows(self, q):
        """The packing's rows of an (out, in / groups, kh, kw) weight."""
        if self.groups > 1:
            return np.ascontiguousarray(q.reshape(self.out_channels, -1))
        return np.ascontiguousarray(q.transpose(0, 2, 3, 1).reshape(self.out_channels, -1))

    def __reduce__(self):
        q, s, b = self.unpack()
        return pack_qconv2d, (q, s, b, self.input_scale, self.input_zero_point, self.stride,
                              self.padding, self.dilation, self.output_scale,
                              self.output_zero_point, self.groups)

    def __repr__(self):
        kh, kw = self.kernel_size
        return (f"PackedQConv2d({self.in_channels}, {self.out_channels}, kernel_size=({kh}, "
                f"{kw}), stride={self.stride}, kernel={self.kernel!r})")

    cdef const mk_qd8_config *_current(self) except NULL:
        cdef const mk_qd8_config *cfg = _config()
        if cfg != self._cfg and self.groups == 1:
            # the instruction set was switched: re-pack for its GEMM tile
            q, s, b = self.unpack()
            self._pack(cfg, self._kernel_rows(q), s, b)
        return cfg

    def _quantized_input(self, x):
        """``x`` (a float NCHW/CHW array, or a QuantizedArray) as bytes in this layer's
        input quantization."""
        if isinstance(x, QuantizedArray):
            qa = <QuantizedArray>x
            if qa.scale == self.input_scale and qa.zero_point == self.input_zero_point:
                if qa.data.shape[3] != self.in_channels:
                    raise ValueError(f"expected {self.in_channels} input channels, got "
                                     f"{qa.data.shape[3]} (input shape {qa.shape})")
                return qa
            x = qa.dequantize()  # another quantization: through float32
        arr = np.asarray(x)
        if arr.ndim not in (3, 4):
            raise ValueError(f"expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape "
                             f"{arr.shape}")
        if arr.shape[arr.ndim - 3] != self.in_channels:
            raise ValueError(f"expected {self.in_channels} input channels, got "
                             f"{arr.shape[arr.ndim - 3]} (input shape {arr.shape})")
        if arr.dtype.kind not in "fiub":
            raise TypeError(f"input must hold real numbers, got {arr.dtype}")
        return quantize_per_tensor(arr, self.input_scale, self.input_zero_point)

    def forward(self, x, activation=None, residual=None, output_q=None):
        """``activation(conv(x) + residual)``.

        Parameters
        ----------
        x : array_like or QuantizedArray
            (N, C, H, W) or (C, H, W); a float array is quantized with the layer's input
            (scale, zero point), a QuantizedArray in them is read as it is.
        activation : {None, 'none', 'relu', 'relu6'}
        residual : None, array_like or QuantizedArray
            Of the output's shape; a QuantizedArray is added in the kernel's epilogue, a
            float array to the float32 result.
        output_q : None or (scale, zero_point)
            None: a float32 NCHW array; else a :class:`QuantizedArray` in that quantization.
        """
        if residual is not None and not isinstance(residual, QuantizedArray):
            return self._forward_float_residual(x, activation, residual, output_q)
        y, unbatched, q = self._run(x, activation, residual, output_q)
        if q is not None:
            return _wrap(y, q[0], q[1], unbatched)
        out = np.ascontiguousarray(y.transpose(0, 3, 1, 2))
        return out[0] if unbatched else out

    def forward_mean(self, x, activation=None, residual=None):
        """Each channel's mean over the pixels of ``forward(x, activation, residual)``: a
        convolution with a global average pool fused in (the compile rule
        ``conv_global_avgpool``), read from the kernel's NHWC floats without the NCHW copy.

        The mean is NumPy's float32 sum over the pixels divided by their count (agrees with
        ``forward(...).mean((2, 3))`` to float32 rounding, not bit for bit).

        Returns
        -------
        ndarray, shape (N, C_out) (or (C_out,) for a 3-D input), float32
        """
        if residual is not None and not isinstance(residual, QuantizedArray):
            from modulekit._ext._conv import spatial_mean
            y = self.forward(x, activation, residual)
            return spatial_mean(y[None])[0] if y.ndim == 3 else spatial_mean(y)
        y, unbatched, _ = self._run(x, activation, residual, None)
        n, oh, ow, c = y.shape
        mean = np.add.reduce(y.reshape(n, oh * ow, c), axis=1) / np.float32(oh * ow)
        return mean[0] if unbatched else mean

    def _run(self, x, activation, residual, output_q):
        """The kernel's call: ``(y, unbatched, q)``, y the (N, OH, OW, C_out) NHWC result,
        float32 or (``output_q``) bytes in the checked quantization q (else None);
        ``residual`` None or a QuantizedArray."""
        if activation not in _STATIC_BOUNDS:
            raise ValueError(f"PackedQConv2d: activation must be one of "
                             f"{', '.join(STATIC_ACTIVATIONS)} or None, got {activation!r}")
        cdef QuantizedArray qx = self._quantized_input(x)
        cdef const mk_qd8_config *cfg = self._current()
        n, h, w, c = qx.data.shape
        kh, kw = self.kernel_size
        sh, sw = self.stride
        ph, pw = self.padding
        dh, dw = self.dilation
        oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        if oh <= 0 or ow <= 0:
            raise ValueError(f"input of {h}x{w} pixels is smaller than the kernel "
                             f"({kh}x{kw}, dilation {self.dilation}, padding {self.padding})")
        cdef mk_qconv_geom g
        g.n, g.h, g.w, g.cin, g.oh, g.ow, g.cout = n, h, w, c, oh, ow, self.out_channels
        g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw = kh, kw, sh, sw, ph, pw, dh, dw
        q = None if output_q is None else _check_qparams(*output_q, "PackedQConv2d output")
        cdef mk_qgemm_epilogue ep = _static_epilogue(activation, q)
        cdef const uint8_t *rptr = NULL
        cdef cnp.ndarray rdata
        if residual is not None:
            rq = <QuantizedArray>residual
            if rq.data.shape != (n, oh, ow, self.out_channels):
                raise ValueError(f"residual of shape {rq.shape} does not match the output")
            rdata = rq.data
            rptr = <const uint8_t *>cnp.PyArray_DATA(rdata)
            ep.res_scale, ep.res_zp = rq.scale, rq.zero_point
        cdef cnp.ndarray y = np.empty((n, oh, ow, self.out_channels), _F32 if q is None else _U8)
        cdef cnp.ndarray xd = qx.data
        cdef int rc, nt = effective_threads()
        cdef float in_scale = self.input_scale
        cdef int32_t in_zp = self.input_zero_point
        cdef bint depthwise = self.groups > 1
        cdef int isa = <int>active_isa()
        with nogil:
            if depthwise:
                rc = mk_qdw_run(isa, &g, <const uint8_t *>cnp.PyArray_DATA(xd), in_zp,
                                in_scale, <const float *>self._packed, rptr, &ep,
                                cnp.PyArray_DATA(y), nt)
            else:
                rc = mk_qconv_run(cfg, &g, <const uint8_t *>cnp.PyArray_DATA(xd), in_zp,
                                  in_scale, self._packed, rptr, &ep, cnp.PyArray_DATA(y), nt)
        if rc != 0:
            raise MemoryError("PackedQConv2d: cannot allocate the gathered rows")
        return y, qx.unbatched, q

    def _forward_float_residual(self, x, activation, residual, output_q):
        """A float residual: added (and the activation applied) after the kernel."""
        y = self.forward(x)
        r = np.asarray(residual)
        if r.shape != y.shape:
            raise ValueError(f"residual of shape {r.shape} does not match the output's "
                             f"{y.shape}")
        y += r
        if activation not in (None, "none"):
            lo, hi = _STATIC_BOUNDS[activation]
            np.clip(y, lo, hi, out=y)
        return y if output_q is None else quantize_per_tensor(y, *output_q)

    def forward_maxpool(self, x, activation, kernel_size, stride=None, padding=0, dilation=1,
                        ceil_mode=False, output_q=None):
        """``max_pool2d(forward(x, activation), ...)``; with ``output_q`` the pooling runs on
        the requantized bytes (the same values: requantization keeps the order)."""
        if output_q is None:
            from modulekit._ext._conv import max_pool2d
            return max_pool2d(self.forward(x, activation), kernel_size, stride, padding,
                              dilation, ceil_mode)
        return max_pool_qu8(self.forward(x, activation, None, output_q), kernel_size, stride,
                            padding, dilation, ceil_mode)


def max_pool_qu8(QuantizedArray x, kernel_size, stride=None, padding=0, dilation=1,
                 ceil_mode=False):
    """``max_pool2d`` of a :class:`QuantizedArray` (torch's window rules), in its bytes."""
    from modulekit._ext._conv import pool_output_size

    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(kernel_size if stride is None else stride, "stride")
    ph, pw = _pair(padding, "padding")
    dh, dw = _pair(dilation, "dilation")
    if min(kh, kw, sh, sw, dh, dw) <= 0 or min(ph, pw) < 0 or 2 * ph > kh or 2 * pw > kw:
        raise ValueError(f"max_pool: invalid window kernel_size={kernel_size}, stride={stride},"
                         f" padding={padding}, dilation={dilation}")
    cdef cnp.ndarray xd = x.data
    n, h, w, c = x.data.shape
    oh = pool_output_size(h, kh, sh, ph, dh, ceil_mode)
    ow = pool_output_size(w, kw, sw, pw, dw, ceil_mode)
    if oh <= 0 or ow <= 0:
        raise ValueError(f"max_pool: input of {h}x{w} pixels gives an empty output")
    cdef cnp.ndarray y = np.empty((n, oh, ow, c), _U8)
    cdef size_t a0 = n, a1 = h, a2 = w, a3 = c, a4 = oh, a5 = ow
    cdef size_t b0 = kh, b1 = kw, b2 = sh, b3 = sw, b4 = ph, b5 = pw, b6 = dh, b7 = dw
    cdef int nt = effective_threads()
    with nogil:
        mk_qu8_maxpool_nhwc(a0, a1, a2, a3, a4, a5, b0, b1, b2, b3, b4, b5, b6, b7,
                            <const uint8_t *>cnp.PyArray_DATA(xd),
                            <uint8_t *>cnp.PyArray_DATA(y), nt)
    return _wrap(y, x.scale, x.zero_point, x.unbatched)


def pack_qconv2d(qweight, scale, bias, input_scale, input_zero_point, stride=1, padding=0,
                 dilation=1, output_scale=1.0, output_zero_point=0, groups=1):
    """Pack a quantized convolution: ``qweight`` int8 (out, in / groups, kh, kw) within
    [-127, 127] (``groups`` 1, or depthwise: ``groups`` = in = out channels),
    its float32 per-output-channel ``scale`` (positive, finite), an optional float32 ``bias``,
    the input's calibrated ``input_scale`` / ``input_zero_point`` (and the output's, kept as
    attributes), for the kernel of the active instruction set."""
    q = np.asarray(qweight)
    if q.dtype != _I8 or q.ndim != 4:
        raise ValueError(f"pack_qconv2d: qweight must be a 4-D int8 array (out, in, kh, kw), "
                         f"got {q.dtype} of shape {q.shape}")
    n, c, kh, kw = q.shape
    if min(n, c, kh, kw) == 0:
        raise ValueError(f"pack_qconv2d: empty weight of shape {q.shape}")
    if isinstance(groups, bool) or int(groups) != groups or not (
            groups == 1 or (groups == n and c == 1)):
        raise ValueError(f"pack_qconv2d: groups must be 1 or, for a depthwise convolution, the "
                         f"channel count with one output per channel; got groups={groups!r} "
                         f"for a weight of shape {q.shape}")
    groups = int(groups)
    if groups > 1 and kh * kw > MK_QDW_MAX_TAPS:
        raise ValueError(f"pack_qconv2d: a depthwise window of {kh * kw} taps exceeds "
                         f"{MK_QDW_MAX_TAPS}, past which the sums could lose precision")
    if c * kh * kw > MK_QD8_MAX_K:
        raise ValueError(f"pack_qconv2d: in_channels * kh * kw = {c * kh * kw} exceeds "
                         f"{MK_QD8_MAX_K}, past which the int32 sums could overflow")
    s, b = _check_scales(q, scale, bias, n, "pack_qconv2d")
    in_s, in_z = _check_qparams(input_scale, input_zero_point, "pack_qconv2d input")
    out_s, out_z = _check_qparams(output_scale, output_zero_point, "pack_qconv2d output")
    st, pd, dl = _pair(stride, "stride"), _pair(padding, "padding"), _pair(dilation, "dilation")
    if min(st + dl) <= 0 or min(pd) < 0:
        raise ValueError(f"pack_qconv2d: stride and dilation must be positive and padding "
                         f"non-negative, got {st}, {dl}, {pd}")
    cdef PackedQConv2d obj = PackedQConv2d.__new__(PackedQConv2d)
    obj.in_channels, obj.out_channels, obj.groups = c * groups, n, groups
    obj.kernel_size, obj.stride, obj.padding, obj.dilation = (kh, kw), st, pd, dl
    obj.input_scale, obj.input_zero_point = in_s, in_z
    obj.output_scale, obj.output_zero_point = out_s, out_z
    obj.has_bias = b is not None
    obj._pack(_config(), obj._kernel_rows(q), s, b)
    return obj


def _pointwise(p):
    return (isinstance(p, PackedQConv2d) and p.groups == 1 and p.kernel_size == (1, 1)
            and p.stride == (1, 1) and p.padding == (0, 0) and p.dilation == (1, 1))


cdef class QInvertedResidual:
    """MobileNetV2's statically quantized inverted residual block as one call
    (``mk_qinvres_run``): [``expand`` 1x1] -> ``depthwise`` 3x3 -> ``project`` 1x1 (+ the
    block's input), in bands of output rows so the expanded bytes stay in the caches; the
    three steps' bits (the compile rule ``quantized_invres`` builds it from three
    ``QuantizedConvStep``s).

    Parameters
    ----------
    expand, depthwise, project : PackedQConv2d (expand may be None)
    activations : (str or None, str or None, str or None)
        Each step's epilogue activation.
    out_qs : ((scale, zero_point), (scale, zero_point), (scale, zero_point) or None)
        The expand's and the depthwise's output quantizations (their readers' inputs: the
        depthwise's and the project's) and the project's (None: float32 NCHW out).
    residual : bool
        Add the block's input (stride 1, as many channels in as out).

    Calling it with a :class:`QuantizedArray` in the block's input quantization runs the
    fused kernel where the two 1x1 steps read their rows in place (not on AMX tiles) and the
    output has 4 rows for every thread (with fewer, the expanded rows two threads both
    compute cost more than the fusion saves); otherwise the three steps run one after the
    other, with the same results (``calls_fused`` counts the fused calls).
    """

    cdef readonly object expand, depthwise, project
    cdef readonly tuple activations, out_qs
    cdef readonly bint residual
    #: calls that ran the fused kernel (the others ran the three steps)
    cdef readonly Py_ssize_t calls_fused

    @staticmethod
    def fusable(expand, depthwise, project, activations, out_qs, residual):
        """Whether the three steps make a block :class:`QInvertedResidual` takes."""
        if not (isinstance(depthwise, PackedQConv2d) and depthwise.groups > 1
                and depthwise.kernel_size == (3, 3) and depthwise.stride in ((1, 1), (2, 2))
                and depthwise.padding == (1, 1) and depthwise.dilation == (1, 1)
                and _pointwise(project) and project.in_channels == depthwise.out_channels
                and (expand is None or (_pointwise(expand)
                                        and expand.out_channels == depthwise.in_channels))):
            return False
        if len(activations) != 3 or any(a not in _STATIC_BOUNDS for a in activations):
            return False
        e_q, d_q, _ = out_qs
        if expand is not None and e_q != (depthwise.input_scale, depthwise.input_zero_point):
            return False
        if d_q != (project.input_scale, project.input_zero_point):
            return False
        cin = (expand or depthwise).in_channels
        return not residual or (depthwise.stride == (1, 1) and cin == project.out_channels)

    def __init__(self, expand, depthwise, project, activations, out_qs, residual):
        if not QInvertedResidual.fusable(expand, depthwise, project, activations, out_qs,
                                         residual):
            raise ValueError("QInvertedResidual: the steps do not make an inverted residual "
                             "block it takes (see QInvertedResidual.fusable)")
        self.expand, self.depthwise, self.project = expand, depthwise, project
        self.activations, self.out_qs, self.residual = tuple(activations), tuple(out_qs), \
            bool(residual)

    def _steps(self, x):
        """The three steps one after the other."""
        ae, ad, ap = self.activations
        eq, dq, pq = self.out_qs
        h = x if self.expand is None else self.expand.forward(x, ae, None, eq)
        h = self.depthwise.forward(h, ad, None, dq)
        return self.project.forward(h, ap, x if self.residual else None, pq)

    def __call__(self, x):
        cdef PackedQConv2d first = self.expand if self.expand is not None else self.depthwise
        cdef PackedQConv2d dw = self.depthwise, pr = self.project
        cdef PackedQConv2d ex = self.expand
        if not isinstance(x, QuantizedArray):
            return self._steps(x)
        cdef QuantizedArray qx = <QuantizedArray>x
        n, h, w, c = qx.data.shape
        cdef int nt = effective_threads()
        s = dw.stride[0]
        oh, ow = (h - 1) // s + 1, (w - 1) // s + 1
        cdef const mk_qd8_config *cfg = pr._current()
        if ex is not None:
            ex._current()
        if (qx.scale != first.input_scale or qx.zero_point != first.input_zero_point
                or c != first.in_channels or n * oh < 4 * nt
                or not mk_qconv_pointwise_direct(cfg, dw.in_channels)
                or (ex is not None and not mk_qconv_pointwise_direct(cfg, c))):
            return self._steps(x)
        ae, ad, ap = self.activations
        eq, dq, pq = self.out_qs
        cdef mk_qinvres b
        b.cfg, b.isa = cfg, <int>active_isa()
        b.n, b.h, b.w, b.cin, b.chid, b.cout, b.stride = n, h, w, c, dw.in_channels, \
            pr.out_channels, s
        b.pe = ex._packed if ex is not None else NULL
        if ex is not None:
            b.e_scale, b.e_zp, b.ep_e = ex.input_scale, ex.input_zero_point, \
                _static_epilogue(ae, eq)
        b.pd, b.d_scale, b.d_zp = <const float *>dw._packed, dw.input_scale, dw.input_zero_point
        b.ep_d = _static_epilogue(ad, dq)
        b.pp, b.p_scale, b.p_zp = pr._packed, pr.input_scale, pr.input_zero_point
        b.ep_p = _static_epilogue(ap, pq)
        b.residual = self.residual
        if self.residual:
            b.ep_p.res_scale, b.ep_p.res_zp = qx.scale, qx.zero_point
        cdef cnp.ndarray y = np.empty((n, oh, ow, pr.out_channels), _F32 if pq is None else _U8)
        cdef cnp.ndarray xd = qx.data
        cdef int rc
        with nogil:
            rc = mk_qinvres_run(&b, <const uint8_t *>cnp.PyArray_DATA(xd), cnp.PyArray_DATA(y),
                                nt)
        if rc == -1:
            raise MemoryError("QInvertedResidual: cannot allocate the band buffers")
        if rc != 0:
            return self._steps(x)
        self.calls_fused += 1
        if pq is not None:
            return _wrap(y, pq[0], pq[1], qx.unbatched)
        out = np.ascontiguousarray(y.transpose(0, 3, 1, 2))
        return out[0] if qx.unbatched else out
