# cython: language_level=3
"""The packed GEMM engine: pre-packed weights, fused bias + activation, OpenMP.

:class:`PackedLinear` holds a torch-layout Linear weight ``(out_features, in_features)``
packed once into the panel layout of the microkernel chosen for the active instruction set
(see ``kernels/gemm/gemm-config.c``); :meth:`PackedLinear.forward` computes
``act(x @ weight.T + bias)`` for any 2-D ``x``. :func:`linear` and :func:`matmul` pack per
call. Every check happens here, before the C kernels run without the GIL.
"""
import numpy as np

from modulekit import _shared

cimport cython
cimport numpy as cnp
from cython.parallel cimport prange
from cpython.dict cimport PyDict_GetItem, PyDict_Next
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_New
from libc.stdint cimport uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from modulekit._ext._act cimport (MK_ACT_CLAMP, MK_ACT_GELU_ERF, MK_ACT_GELU_TANH,
                                   MK_ACT_HARDSWISH, MK_ACT_NONE, MK_ACT_RELU, MK_ACT_SIGMOID,
                                   MK_ACT_SILU, MK_ACT_TANH)
from modulekit._ext._align cimport aligned, check_aligned
from modulekit._ext._caches cimport set_l2_bytes
from modulekit._ext._isa cimport active_bf16, active_isa
from modulekit._ext._openmp_helpers cimport bind_team, effective_threads, omp_get_thread_num

_TEAM = bind_team()  # the kernels' contention back-off: the process's state

cnp.import_array()

cdef extern from "Python.h":
    object PyObject_GenericGetDict(object obj, void *context)


cdef inline object _instance_attr(object obj, str name):
    """``getattr(obj, name)``, reading the instance dict first (Module defines __getattr__,
    which makes every plain attribute access go through a slower hook)."""
    cdef PyObject *v
    d = PyObject_GenericGetDict(obj, NULL)
    if type(d) is dict:
        v = PyDict_GetItem(d, name)
        if v != NULL:
            return <object>v
    return getattr(obj, name)


cdef extern from "<stdlib.h>" nogil:
    void *aligned_alloc(size_t alignment, size_t size)

from modulekit.dtypes import bfloat16_numpy, is_bfloat16

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)

ACTIVATIONS = ("none", "relu", "relu6", "clamp", "gelu", "gelu_tanh", "silu", "sigmoid",
               "tanh", "hardswish")
STORAGES = ("float32", "float64", "float16", "bfloat16")

cdef dict _ACT_CODES = {
    "none": MK_ACT_NONE, "relu": MK_ACT_RELU, "relu6": MK_ACT_CLAMP, "clamp": MK_ACT_CLAMP,
    "gelu": MK_ACT_GELU_ERF, "gelu_tanh": MK_ACT_GELU_TANH, "silu": MK_ACT_SILU,
    "sigmoid": MK_ACT_SIGMOID, "tanh": MK_ACT_TANH, "hardswish": MK_ACT_HARDSWISH,
}
cdef dict _STORAGE_CODES = {
    "float32": MK_STORAGE_F32, "float64": MK_STORAGE_F64, "float16": MK_STORAGE_F16,
    "bfloat16": MK_STORAGE_BF16,
}


cdef int make_epilogue(object activation, double alpha, double beta,
                       mk_epilogue *ep) except -1:
    code = _ACT_CODES.get(activation)
    if code is None:
        raise ValueError(
            f"unknown activation {activation!r}: expected one of {', '.join(ACTIVATIONS)}"
        )
    ep.act = <int>code
    if ep.act == MK_ACT_RELU:
        alpha, beta = 0.0, float("inf")
    elif activation == "relu6":
        alpha, beta = 0.0, 6.0
    elif ep.act == MK_ACT_CLAMP:
        if not (alpha <= beta):
            raise ValueError(
                f"clamp needs alpha (min) <= beta (max), both not NaN; got {alpha!r}, {beta!r}"
            )
    ep.lo = alpha
    ep.hi = beta
    ep.lo32 = <float>alpha
    ep.hi32 = <float>beta
    return 0


cdef object _float_dtype(object dtype, str what):
    """The dtype if it is one of the four floating dtypes in native byte order, else
    TypeError (the kernels read native words only; ``modulekit.nn._input.as_input``, which
    the layers and ``modulekit.matmul`` run first, converts byte-swapped input)."""
    if dtype == _F32 or dtype == _F64 or dtype == _F16 or is_bfloat16(dtype):
        return dtype
    if not dtype.isnative:
        raise TypeError(
            f"{what} is in non-native byte order (dtype {dtype.str}); the kernels read "
            f"native-endian data: convert it first, e.g. x.astype(x.dtype.newbyteorder('='))"
        )
    raise TypeError(
        f"{what} must be a float16, bfloat16, float32 or float64 array; got dtype {dtype}"
    )


cdef cnp.ndarray _as_compute(object x, object compute_dtype, str what):
    """x as an ndarray of the compute dtype (no copy when it already is one)."""
    cdef cnp.ndarray arr
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    arr = <cnp.ndarray>x
    if arr.dtype != compute_dtype:
        _float_dtype(arr.dtype, what)
        arr = arr.astype(compute_dtype)
    return arr


cdef inline bint _elem_strides_ok(cnp.ndarray arr, Py_ssize_t itemsize):
    """True when the data is aligned and every stride is a whole number of elements; else
    the caller copies ``arr`` (``cnp.PyArray_NewCopy``: ``np.ascontiguousarray`` would return
    a misaligned C-contiguous array as it is; see ``_align.pxd``)."""
    cdef int d
    if (<uintptr_t>cnp.PyArray_DATA(arr)) % <uintptr_t>itemsize:
        return False
    for d in range(cnp.PyArray_NDIM(arr)):
        if cnp.PyArray_STRIDE(arr, d) % itemsize:
            return False
    return True


cdef cnp.ndarray _input_rows(object x, int typenum, object compute_dtype,
                             Py_ssize_t in_features):
    """``x`` as a 2-D (batch, in_features) array of the compute dtype (no copy when it is one)."""
    cdef cnp.ndarray arr
    if (type(x) is np.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>x) == typenum
            and not cnp.PyArray_ISBYTESWAPPED(<cnp.ndarray>x)):
        arr = <cnp.ndarray>x
    else:
        arr = _as_compute(x, compute_dtype, "x")
    if cnp.PyArray_NDIM(arr) != 2:
        raise ValueError(
            f"x must be 2-D (batch, in_features={in_features}); got shape {(<object>arr).shape}"
        )
    if cnp.PyArray_DIM(arr, 1) != in_features:
        raise ValueError(
            f"x has {cnp.PyArray_DIM(arr, 1)} features (shape {(<object>arr).shape}); expected "
            f"in_features={in_features}"
        )
    return arr


# no tp_clear: __dealloc__ reads _retired, which a cycle collection would set to None first
@cython.no_gc_clear
cdef class PackedLinear:
    """A Linear weight packed for the GEMM microkernels; create with :func:`pack_linear`.

    Attributes
    ----------
    in_features, out_features : int
        K and N of the weight ``(out_features, in_features)``.
    storage : str
        Dtype the weights are stored in: "float32", "float64", "float16" or "bfloat16".
    compute_dtype : numpy.dtype
        Dtype of inputs, accumulation and outputs: float64 for "float64" storage, else float32.
    nbytes : int
        Bytes of the packed buffer (weights, bias, padding).
    has_bias : bool
    compute_kernel : str
        The kernel a forward from this thread runs now (a bfloat16 one under "medium").
    bf16_nbytes : int
        Bytes of the bfloat16-compute copy (0 until a forward under "medium" packs it).

    Under ``set_float32_matmul_precision("medium")`` (or inside a
    ``float32_matmul_precision("medium")`` block in the calling thread) a layer with float32
    or bfloat16 weights computes in bfloat16 with float32 accumulation on the machine's
    bfloat16 path (``_isa.get_bf16``), from a second buffer packed once at the first such
    forward (see ``modulekit/precision.py``).
    """

    def __cinit__(self):
        self._packed = NULL
        self._cfg = NULL
        self._packed16 = NULL
        self._cfg16 = NULL
        self._packed16_size = 0
        self._retired = []

    def __init__(self, *args, **kwargs):
        raise TypeError(
            "PackedLinear cannot be created directly: use pack_linear(weight, bias, storage)"
        )

    def __dealloc__(self):
        if self._shm is None:
            free(self._packed)
        free(self._packed16)
        for addr in self._retired:
            if type(addr) is int:  # (a shared segment's holder array is just dropped)
                free(<void *><uintptr_t>addr)

    cdef int _pack(self, const mk_gemm_config *cfg, object w, object b) except -1:
        """Pack w (N, K) C-contiguous in the storage dtype and b (N,) or None for cfg."""
        cdef size_t n = <size_t>self.out_features, k = <size_t>self.in_features
        cdef size_t size = mk_gemm_packed_size(cfg, n, k)
        cdef void *buf = aligned_alloc(64, size)
        cdef const void *bptr = NULL
        if buf == NULL:
            raise MemoryError(f"cannot allocate {size} bytes for packed weights")
        cdef const void *wptr = cnp.PyArray_DATA(<cnp.ndarray>w)
        cdef int nthreads = effective_threads()
        if b is not None:
            bptr = cnp.PyArray_DATA(<cnp.ndarray>b)
        with nogil:
            mk_gemm_pack(cfg, n, k, wptr, 1, <ptrdiff_t>k, bptr, buf, nthreads)
        if self._packed != NULL:
            # another thread may still be computing from the old buffer (it read the
            # pointer before this re-pack): keep it until the object dies
            self._retired.append(<uintptr_t>self._packed if self._shm is None else self._shm)
            self._shm = None
        self._packed = buf
        self._packed_size = size
        self._cfg = cfg
        return 0

    cdef int ensure_ready(self) except -1:
        """Re-pack when the active instruction set uses another layout (tests switch it);
        under "medium" precision, also pack the bfloat16 buffer if it is not there yet."""
        cdef const mk_gemm_config *cfg = mk_gemm_get_config(self._compute, self._storage,
                                                            <int>active_isa())
        if mk_gemm_precision() == MK_PREC_MEDIUM:
            self.ensure_bf16()
        if cfg == self._cfg:
            return 0
        if self._cfg == NULL:
            raise ValueError("this PackedLinear holds no weights: create it with pack_linear")
        if cfg == NULL:  # pragma: no cover - every ISA level has every storage
            raise RuntimeError("no GEMM kernel for this storage and instruction set")
        if cfg.nr == self._cfg.nr and cfg.wsize == self._cfg.wsize:
            self._cfg = cfg          # same packed layout
            return 0
        w, b = self.unpack()
        self._pack(cfg, w, b)
        return 0

    cdef int gemm(self, size_t m, const void *a, ptrdiff_t rsa, ptrdiff_t csa, void *c,
                  size_t ldc, const mk_epilogue *ep, int nthreads) noexcept nogil:
        cdef const mk_gemm_config *cfg16 = self._bf16_now()
        cdef const mk_gemm_config *have = self._cfg16
        if cfg16 != NULL and have != NULL and _same_layout(cfg16, have):
            return mk_gemm_run(cfg16, m, <size_t>self.out_features, <size_t>self.in_features,
                               a, rsa, csa, self._packed16, c, ldc, ep, nthreads)
        return mk_gemm_run(self._cfg, m, <size_t>self.out_features, <size_t>self.in_features,
                           a, rsa, csa, self._packed, c, ldc, ep, nthreads)

    cdef int recurrence(self, mk_gemm_recurrence *r, int nthreads) noexcept nogil:
        """``mk_gemm_recurrence_run`` with this layer as W (``r.gates * r.h`` outputs, ``r.h``
        inputs), in the configuration :meth:`gemm` would use: fills ``r.cfg`` and
        ``r.packed``. Returns 0, -1 (a packing buffer) or -2 (``r.h`` not a multiple of the
        panel width: nothing done)."""
        cdef const mk_gemm_config *cfg16 = self._bf16_now()
        cdef const mk_gemm_config *have = self._cfg16
        if cfg16 != NULL and have != NULL and _same_layout(cfg16, have):
            r.cfg, r.packed = cfg16, self._packed16
        else:
            r.cfg, r.packed = self._cfg, self._packed
        return mk_gemm_recurrence_run(r, nthreads)

    cdef const mk_gemm_config *_bf16_now(self) noexcept nogil:
        """The bfloat16-compute configuration a call from this thread uses now, or NULL:
        float32 compute with float32 or bfloat16 weights, precision "medium" in this thread,
        and a bfloat16 path on this machine (see ``_isa.get_bf16``). float16 weights keep
        their float32 compute: rounding them to bfloat16 would drop 3 of their bits."""
        if self._compute != MK_COMPUTE_F32 or self._storage == MK_STORAGE_F16:
            return NULL
        if mk_gemm_precision() != MK_PREC_MEDIUM:
            return NULL
        return mk_gemm_get_bf16_config(active_bf16())

    cdef int ensure_bf16(self) except -1:
        """Pack the bfloat16 buffer for the path in use, once (see :meth:`_bf16_now`).

        Weights are rounded to bfloat16 (nearest even) from the packed source. A concurrent
        forward may still read a buffer this replaces: the old one is kept until the object
        dies, as for :meth:`_pack`."""
        cdef const mk_gemm_config *cfg = self._bf16_now()
        cdef size_t n = <size_t>self.out_features, k = <size_t>self.in_features, size
        cdef void *buf
        cdef const void *bptr = NULL
        cdef const void *wptr
        cdef cnp.ndarray w16, b
        cdef int nthreads
        if cfg == NULL or cfg == self._cfg16:
            return 0
        if self._cfg16 != NULL and _same_layout(cfg, self._cfg16):
            self._cfg16 = cfg
            return 0
        if self._cfg == NULL:
            raise ValueError("this PackedLinear holds no weights: create it with pack_linear")
        w, bias = self.unpack()
        w16 = np.ascontiguousarray(w.astype(bfloat16_numpy(), copy=False)).view(np.uint16)
        if bias is not None:
            b = bias
            bptr = cnp.PyArray_DATA(b)
        wptr = cnp.PyArray_DATA(w16)
        size = mk_gemm_packed_size(cfg, n, k)
        buf = aligned_alloc(64, size)
        if buf == NULL:
            raise MemoryError(f"cannot allocate {size} bytes for bfloat16 packed weights")
        nthreads = effective_threads()
        with nogil:
            mk_gemm_pack(cfg, n, k, wptr, 1, <ptrdiff_t>k, bptr, buf, nthreads)
        if self._packed16 != NULL:
            self._retired.append(<uintptr_t>self._packed16)
        self._packed16 = buf
        self._packed16_size = size
        self._cfg16 = cfg
        return 0

    @property
    def bf16_nbytes(self):
        """Bytes of the bfloat16-compute buffer (0 until a "medium" forward packs it)."""
        return self._packed16_size if self._packed16 != NULL else 0

    @property
    def compute_kernel(self):
        """Name of the configuration a forward from this thread runs now: the bfloat16 one
        under "medium" precision where this machine has a bfloat16 path (packing its buffer
        now if needed), else :attr:`kernel`'s."""
        self.ensure_ready()
        cdef const mk_gemm_config *cfg16 = self._bf16_now()
        if cfg16 != NULL and self._cfg16 != NULL and _same_layout(cfg16, self._cfg16):
            return cfg16.name.decode()
        return self.kernel

    @property
    def nbytes(self):
        return self._packed_size

    @property
    def kernel(self):
        """Name of the microkernel configuration the weights are packed for."""
        return self._cfg.name.decode() if self._cfg != NULL else None

    def forward(self, x, activation="none", double alpha=0.0, double beta=0.0, out=None):
        """Compute ``act(x @ weight.T + bias)``.

        Parameters
        ----------
        x : array_like, shape (M, in_features)
            Any strides (Fortran order, negative strides, broadcast rows); cast to
            ``compute_dtype`` when it is another floating dtype.
        activation : str
            "none", "relu", "relu6", "clamp" (min ``alpha``, max ``beta``), "gelu" (erf
            form), "gelu_tanh", "silu", "sigmoid" or "tanh".
        alpha, beta : float
            Bounds of "clamp".
        out : ndarray, optional
            C-contiguous, aligned, writeable, shape (M, out_features), ``compute_dtype``, not
            overlapping ``x``.

        Returns
        -------
        ndarray, shape (M, out_features), C-contiguous, ``compute_dtype``.
        """
        cdef mk_epilogue ep
        cdef cnp.ndarray arr, res
        cdef cnp.npy_intp dims[2]
        cdef Py_ssize_t itemsize, m
        cdef int rc, nthreads
        make_epilogue(activation, alpha, beta, &ep)
        if self._cfg != mk_gemm_get_config(self._compute, self._storage, <int>active_isa()):
            self.ensure_ready()
        elif mk_gemm_precision() == MK_PREC_MEDIUM:
            self.ensure_bf16()
        arr = _input_rows(x, self._typenum, self.compute_dtype, self.in_features)
        itemsize = cnp.PyArray_ITEMSIZE(arr)
        if not _elem_strides_ok(arr, itemsize):
            arr = cnp.PyArray_NewCopy(arr, cnp.NPY_CORDER)
        m = cnp.PyArray_DIM(arr, 0)
        if out is None:
            dims[0] = m
            dims[1] = self.out_features
            res = cnp.PyArray_EMPTY(2, dims, self._typenum, 0)
        else:
            res = self._check_out(out, m, arr)
        nthreads = effective_threads()
        with nogil:
            rc = self.gemm(<size_t>m, cnp.PyArray_DATA(arr),
                           cnp.PyArray_STRIDE(arr, 0) // itemsize,
                           cnp.PyArray_STRIDE(arr, 1) // itemsize,
                           cnp.PyArray_DATA(res), <size_t>self.out_features, &ep, nthreads)
        if rc != 0:
            raise MemoryError("cannot allocate the GEMM packing buffer")
        return res

    cdef object _check_out(self, object out, Py_ssize_t m, object x):
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out must be a numpy.ndarray; got {type(out).__name__}")
        cdef cnp.ndarray o = <cnp.ndarray>out
        if o.dtype != self.compute_dtype:
            raise TypeError(f"out must have dtype {self.compute_dtype}; got {o.dtype}")
        if o.ndim != 2 or (<object>o).shape[0] != m or (<object>o).shape[1] != self.out_features:
            raise ValueError(
                f"out must have shape {(m, self.out_features)}; got {(<object>o).shape}"
            )
        if not o.flags.c_contiguous or not o.flags.writeable:
            raise ValueError("out must be C-contiguous and writeable")
        check_aligned(o, "out")
        if np.may_share_memory(o, x):
            raise ValueError("out must not overlap x")
        return o

    def __call__(self, x, activation="none", double alpha=0.0, double beta=0.0, out=None):
        return self.forward(x, activation, alpha, beta, out)

    def unpack(self):
        """The packed weight and bias, exactly as packed.

        Returns
        -------
        weight : ndarray, shape (out_features, in_features), the storage dtype
        bias : ndarray, shape (out_features,), ``compute_dtype``; or None
        """
        cdef cnp.ndarray w, b = None
        if self._cfg == NULL:
            raise ValueError("this PackedLinear holds no weights: create it with pack_linear")
        sdt = _storage_dtype(self.storage)
        # bfloat16 is moved as raw 16-bit words, then viewed as ml_dtypes.bfloat16
        w = np.empty((self.out_features, self.in_features),
                     dtype=np.uint16 if self._storage == MK_STORAGE_BF16 else sdt)
        if self.has_bias:
            b = np.empty(self.out_features, dtype=self.compute_dtype)
        with nogil:
            mk_gemm_unpack(self._cfg, <size_t>self.out_features, <size_t>self.in_features,
                           self._packed, cnp.PyArray_DATA(w),
                           cnp.PyArray_DATA(b) if b is not None else NULL)
        if self._storage == MK_STORAGE_BF16:
            w = w.view(sdt)
        return w, b

    @property
    def is_shared(self):
        """Whether the packed buffer lives in shared memory (see :meth:`shared_copy`)."""
        return self._shm is not None

    def shared_copy(self):
        """This packed layer with its buffer in a new shared-memory segment (self when it is
        shared already): the bytes are copied, not re-packed.

        A shared PackedLinear pickles as a handle to the segment plus its geometry; the
        receiving process maps the segment (no copy, no re-pack).
        """
        if self._shm is not None:
            return self
        if self._cfg == NULL:
            raise ValueError("this PackedLinear holds no weights: create it with pack_linear")
        shm = _shared.empty_shared(self._packed_size)
        cdef PackedLinear out = self._like()
        cdef void *dst = cnp.PyArray_DATA(<cnp.ndarray>shm)
        with nogil:
            memcpy(dst, self._packed, self._packed_size)
        out._shm = shm
        out._packed = dst
        out._packed_size = self._packed_size
        out._cfg = self._cfg
        return out

    cdef PackedLinear _like(self):
        """A new, empty PackedLinear with this one's geometry and dtypes."""
        cdef PackedLinear out = PackedLinear.__new__(PackedLinear)
        out.in_features = self.in_features
        out.out_features = self.out_features
        out.storage = self.storage
        out.compute_dtype = self.compute_dtype
        out.has_bias = self.has_bias
        out._compute = self._compute
        out._storage = self._storage
        out._typenum = self._typenum
        return out

    def __reduce__(self):
        if self._shm is not None:
            return (_attach_linear, (
                _shared.handle_of(self._shm), self.out_features, self.in_features,
                self.storage, self.has_bias, self._cfg.isa,
            ))
        w, b = self.unpack()
        return (pack_linear, (w, b, self.storage))

    def __repr__(self):
        return (
            f"PackedLinear(in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.has_bias}, storage={self.storage!r}, kernel={self.kernel!r})"
        )


cdef inline bint _same_layout(const mk_gemm_config *x, const mk_gemm_config *y) noexcept nogil:
    """Whether a buffer packed for x can be read by y's kernels."""
    return (x.nr == y.nr and x.esize == y.esize and x.wsize == y.wsize and x.kpad == y.kpad
            and x.storage == y.storage)


cdef object _storage_dtype(str storage):
    if storage == "bfloat16":
        return bfloat16_numpy()
    return np.dtype(storage)


def _attach_linear(handle, out_features, in_features, storage, has_bias, isa):
    """Unpickle a shared PackedLinear: map the segment ``handle`` names, after checking that
    the geometry is valid and that the packed size it implies is the handle's size."""
    if not isinstance(storage, str) or storage not in _STORAGE_CODES:
        raise ValueError(
            f"shared PackedLinear: unknown storage {storage!r:.100}: expected one of "
            f"{', '.join(STORAGES)}"
        )
    for label, value in (("out_features", out_features), ("in_features", in_features),
                         ("isa", isa)):
        if type(value) is not int or not 0 <= value < 2 ** 31:
            raise ValueError(
                f"shared PackedLinear: {label} must be an int in [0, 2**31), got {value!r:.100}"
            )
    if out_features * in_features >= 2 ** 40:
        raise ValueError(
            f"shared PackedLinear: a ({out_features}, {in_features}) weight is too large"
        )
    if type(has_bias) is not bool:
        raise ValueError(f"shared PackedLinear: has_bias must be a bool, got {has_bias!r:.100}")
    cdef PackedLinear self = PackedLinear.__new__(PackedLinear)
    self.storage = storage
    self._storage = _STORAGE_CODES[storage]
    self._compute = MK_COMPUTE_F64 if storage == "float64" else MK_COMPUTE_F32
    self.compute_dtype = _F64 if storage == "float64" else _F32
    self._typenum = cnp.NPY_FLOAT64 if storage == "float64" else cnp.NPY_FLOAT32
    self.out_features = out_features
    self.in_features = in_features
    self.has_bias = has_bias
    # the layout it was packed for (an instruction set this CPU may lack: ensure_ready
    # re-packs privately for the active one at the first forward, as for a switched ISA)
    cdef const mk_gemm_config *cfg = mk_gemm_get_config(self._compute, self._storage, <int>isa)
    if cfg == NULL:
        raise ValueError(
            f"shared PackedLinear: no {storage} GEMM layout for instruction-set level {isa}"
        )
    cdef size_t size = mk_gemm_packed_size(cfg, <size_t>out_features, <size_t>in_features)
    if not isinstance(handle, tuple) or len(handle) != 4 or handle[3] != size:
        raise ValueError(
            f"shared PackedLinear: the handle {handle!r:.200} does not hold the {size} bytes "
            f"a ({out_features}, {in_features}) {storage} weight packs to"
        )
    shm = _shared.attach(handle, "shared PackedLinear")
    self._shm = shm
    self._packed = cnp.PyArray_DATA(<cnp.ndarray>shm)
    self._packed_size = size
    self._cfg = cfg
    return self


def pack_linear(weight, bias=None, storage="float32"):
    """Pack a Linear weight for :meth:`PackedLinear.forward`.

    Parameters
    ----------
    weight : array_like, shape (out_features, in_features)
        torch's Linear layout; any floating dtype (cast to ``storage``, round to nearest even).
    bias : array_like, shape (out_features,), optional
        Stored in the compute dtype (float32, or float64 for "float64" storage).
    storage : str
        "float32", "float64", "float16" or "bfloat16" (the last two: weight-only 16-bit
        storage, widened to float32 in the kernel; compute and output float32).

    Returns
    -------
    PackedLinear

    Notes
    -----
    Called while the calling thread's float32 matmul precision is "medium", it also packs
    the bfloat16-compute copy (see :class:`PackedLinear`).
    """
    if not isinstance(storage, str) or storage not in _STORAGE_CODES:
        raise ValueError(f"unknown storage {storage!r}: expected one of {', '.join(STORAGES)}")
    cdef PackedLinear self = PackedLinear.__new__(PackedLinear)
    cdef cnp.ndarray w, b = None
    self.storage = storage
    self._storage = _STORAGE_CODES[storage]
    self._compute = MK_COMPUTE_F64 if storage == "float64" else MK_COMPUTE_F32
    self.compute_dtype = _F64 if storage == "float64" else _F32
    self._typenum = cnp.NPY_FLOAT64 if storage == "float64" else cnp.NPY_FLOAT32
    wa = np.asarray(weight)
    if not wa.dtype.isnative and wa.dtype.kind == "f":  # copied into the packed layout anyway
        wa = wa.astype(wa.dtype.newbyteorder("="))
    _float_dtype(wa.dtype, "weight")
    if wa.ndim != 2:
        raise ValueError(f"weight must be 2-D (out_features, in_features); got shape {wa.shape}")
    w = aligned(np.ascontiguousarray(wa, dtype=_storage_dtype(storage)))
    self.out_features = cnp.PyArray_DIM(w, 0)
    self.in_features = cnp.PyArray_DIM(w, 1)
    if bias is not None:
        ba = np.asarray(bias)
        if not ba.dtype.isnative and ba.dtype.kind == "f":
            ba = ba.astype(ba.dtype.newbyteorder("="))
        _float_dtype(ba.dtype, "bias")
        if ba.shape != (self.out_features,):
            raise ValueError(
                f"bias must have shape ({self.out_features},) to match weight {wa.shape}; "
                f"got {ba.shape}"
            )
        b = aligned(np.ascontiguousarray(ba, dtype=self.compute_dtype))
    self.has_bias = b is not None
    cdef const mk_gemm_config *cfg = mk_gemm_get_config(self._compute, self._storage,
                                                        <int>active_isa())
    if cfg == NULL:  # pragma: no cover
        raise RuntimeError("no GEMM kernel for this storage and instruction set")
    self._pack(cfg, w, b)
    if mk_gemm_precision() == MK_PREC_MEDIUM:
        self.ensure_bf16()  # packed under "medium" (initialize()): the bfloat16 copy too
    return self


def linear(x, weight, bias=None, activation="none"):
    """``act(x @ weight.T + bias)`` for 2-D x, packing the weight on every call.

    float64 if ``x`` or ``weight`` is float64, else float32 (float16/bfloat16 weights are
    kept as weight-only storage). See :meth:`PackedLinear.forward` for ``activation``.
    """
    xa = np.asarray(x)
    wa = np.asarray(weight)
    xdt = _float_dtype(xa.dtype, "x")
    wdt = _float_dtype(wa.dtype, "weight")
    if xdt == _F64 or wdt == _F64:
        storage = "float64"
    elif wdt == _F16:
        storage = "float16"
    elif is_bfloat16(wdt):
        storage = "bfloat16"
    else:
        storage = "float32"
    return pack_linear(wa, bias, storage).forward(xa, activation)


def matmul(a, b):
    """``a @ b`` for 2-D (M, K) @ (K, N) and batched 3-D (B, M, K) @ (B, K, N), a 2-D (or
    batch-1) operand broadcast over the batch. Any strides. float32 unless either operand is
    float64 (float16/bfloat16 are promoted to float32). Returns a C-contiguous ndarray.
    A float32 product under "medium" precision (``modulekit.float32_matmul_precision``)
    computes in bfloat16 with float32 accumulation on the machine's bfloat16 path."""
    cdef cnp.ndarray out
    A = np.asarray(a)
    Bm = np.asarray(b)
    cdef const mk_gemm_config *cfg
    cdef const mk_gemm_config *cfg16 = NULL
    cdef mk_epilogue ep
    cdef Py_ssize_t batch, ba, bb, i, M, K, N, es, bes
    cdef void *packed = NULL
    cdef int nthreads
    adt = _float_dtype(A.dtype, "a")
    bdt = _float_dtype(Bm.dtype, "b")
    if A.ndim not in (2, 3) or Bm.ndim not in (2, 3):
        raise ValueError(
            f"matmul needs 2-D or 3-D operands; got shapes {A.shape} and {Bm.shape}"
        )
    if A.shape[A.ndim - 1] != Bm.shape[Bm.ndim - 2]:
        raise ValueError(
            f"matmul: inner dimensions differ: a {A.shape} has K={A.shape[A.ndim - 1]}, "
            f"b {Bm.shape} has K={Bm.shape[Bm.ndim - 2]}"
        )
    ba = A.shape[0] if A.ndim == 3 else 1
    bb = Bm.shape[0] if Bm.ndim == 3 else 1
    if ba != bb and ba != 1 and bb != 1:
        raise ValueError(f"matmul: batch sizes {ba} and {bb} cannot be broadcast")
    batch = max(ba, bb)
    cdt = _F64 if (adt == _F64 or bdt == _F64) else _F32
    A = _as_compute(A, cdt, "a")
    Bm = _as_compute(Bm, cdt, "b")
    es = cdt.itemsize
    if not _elem_strides_ok(A, es):
        A = cnp.PyArray_NewCopy(A, cnp.NPY_CORDER)
    if not _elem_strides_ok(Bm, es):
        Bm = cnp.PyArray_NewCopy(Bm, cnp.NPY_CORDER)
    bes = es
    if cdt == _F32 and mk_gemm_precision() == MK_PREC_MEDIUM:
        # "medium": bfloat16 multiplies, float32 accumulation. b is rounded to bfloat16 here
        # (the cast kernels, nearest even) and packed into the bfloat16 layout by the engine;
        # a is rounded while it is packed.
        cfg16 = mk_gemm_get_bf16_config(active_bf16())
        if cfg16 != NULL:
            from modulekit._ext._cast import cast
            Bm = cast(Bm, "bfloat16").view(np.uint16)
            bes = 2
    M = A.shape[A.ndim - 2]
    K = A.shape[A.ndim - 1]
    N = Bm.shape[Bm.ndim - 1]
    if A.ndim == 2 and Bm.ndim == 2:
        out = np.empty((M, N), dtype=cdt)
    else:
        out = np.empty((batch, M, N), dtype=cdt)
    if out.size == 0:
        if K == 0:
            out[...] = 0
        return out
    cfg = mk_gemm_get_config(MK_COMPUTE_F64 if cdt == _F64 else MK_COMPUTE_F32,
                             MK_STORAGE_F64 if cdt == _F64 else MK_STORAGE_F32,
                             <int>active_isa())
    if cfg16 != NULL:
        cfg = cfg16
    make_epilogue("none", 0.0, 0.0, &ep)
    A3 = A if A.ndim == 3 else A[None]
    B3 = Bm if Bm.ndim == 3 else Bm[None]
    cdef char *pa = <char *>cnp.PyArray_DATA(<cnp.ndarray>A3)
    cdef char *pb = <char *>cnp.PyArray_DATA(<cnp.ndarray>B3)
    cdef char *po = <char *>cnp.PyArray_DATA(out)
    # strides in elements; a broadcast operand has batch stride 0
    cdef Py_ssize_t sab = A3.strides[0] // es if ba > 1 else 0
    cdef Py_ssize_t rsa = A3.strides[1] // es, csa = A3.strides[2] // es
    cdef Py_ssize_t sbb = B3.strides[0] // bes if bb > 1 else 0
    cdef Py_ssize_t rsb = B3.strides[1] // bes, csb = B3.strides[2] // bes
    cdef size_t size = mk_gemm_packed_size(cfg, <size_t>N, <size_t>K)
    cdef int nt = 1, r, rcsum = 0
    nthreads = effective_threads()
    # Many small products: one thread per product, instead of threads inside products too
    # small to split. Either way every product is computed the same way, so results do not
    # depend on the thread count.
    if batch > 1 and nthreads > 1 and mk_gemm_plan_threads(cfg, M, N, K, nthreads) == 1:
        nt = nthreads if nthreads < batch else <int>batch
    if bb > 1 or batch == 1:
        # each product packs its own b, block by block inside the blocked loop
        with nogil:
            if nt > 1:
                for i in prange(batch, num_threads=nt, schedule="static"):
                    rcsum += mk_gemm_matmul(cfg, <size_t>M, <size_t>N, <size_t>K,
                                            pa + i * sab * es, rsa, csa, pb + i * sbb * bes,
                                            rsb, csb, po + i * M * N * es, <size_t>N, 1)
            else:
                for i in range(batch):
                    rcsum += mk_gemm_matmul(cfg, <size_t>M, <size_t>N, <size_t>K,
                                            pa + i * sab * es, rsa, csa, pb + i * sbb * bes,
                                            rsb, csb, po + i * M * N * es, <size_t>N, nthreads)
        if rcsum != 0:
            raise MemoryError("cannot allocate the GEMM packing buffer")
        return out
    # one b shared by every product: pack it once
    packed = aligned_alloc(64, size)
    if packed == NULL:
        raise MemoryError(f"cannot allocate {size} bytes to pack b")
    try:
        with nogil:
            mk_gemm_pack(cfg, <size_t>N, <size_t>K, pb, rsb, csb, NULL, packed, nthreads)
            if nt > 1:
                for i in prange(batch, num_threads=nt, schedule="static"):
                    r = mk_gemm_run(cfg, <size_t>M, <size_t>N, <size_t>K, pa + i * sab * es,
                                    rsa, csa, packed, po + i * M * N * es, <size_t>N, &ep, 1)
                    rcsum += r
            else:
                for i in range(batch):
                    rcsum += mk_gemm_run(cfg, <size_t>M, <size_t>N, <size_t>K,
                                         pa + i * sab * es, rsa, csa, packed,
                                         po + i * M * N * es, <size_t>N, &ep, nthreads)
    finally:
        free(packed)
    if rcsum != 0:
        raise MemoryError("cannot allocate the GEMM packing buffer")
    return out


# ---------------------------------------------------------------- layer chains
cdef class PackedChain:
    """Consecutive packed Linear layers with their fused activations, run as one call.

    Create with :func:`linear_chain`. :meth:`forward` computes
    ``act_n(... act_1(x @ W_1.T + b_1) ... @ W_n.T + b_n)`` in one kernel call: with more
    than one thread, one OpenMP parallel region runs every layer (each thread its share of
    each layer's output tiles, a barrier between layers), and the intermediate results live in
    two buffers kept between calls. The output is bit-identical to calling the layers'
    :meth:`PackedLinear.forward` one after another, for any thread count.

    The chain reads each layer's packed buffer at every call, so a layer re-packed in place
    (for another instruction set) is followed; a layer replaced by a new
    :class:`PackedLinear` is not (build a new chain).

    Attributes
    ----------
    layers : tuple of PackedLinear
    activations : tuple of (str, float, float)
        Per layer: the activation name and clamp bounds, as :meth:`PackedLinear.forward`
        takes them.
    in_features, out_features : int
        Input width of the first layer and output width of the last.
    compute_dtype : numpy.dtype
    """

    def __cinit__(self):
        self._spec = NULL
        self._buf = NULL
        self._buf_half = 0
        self._busy = False

    def __init__(self, *args, **kwargs):
        raise TypeError(
            "PackedChain cannot be created directly: use linear_chain(layers, activations)"
        )

    def __dealloc__(self):
        free(self._spec)
        free(self._buf)

    cdef int _refresh(self) except -1:
        """Point the C description at each layer's current buffer and configuration."""
        cdef PackedLinear lin
        cdef Py_ssize_t i
        cdef const mk_gemm_config *cfg
        for i in range(self._nl):
            lin = <PackedLinear>self.layers[i]
            cfg = mk_gemm_get_config(lin._compute, lin._storage, <int>active_isa())
            if lin._cfg != cfg:
                lin.ensure_ready()
            self._spec[i].cfg = lin._cfg
            self._spec[i].packed = lin._packed
        return 0

    def forward(self, x):
        """Run the chain on ``x``.

        Parameters
        ----------
        x : array_like, shape (M, in_features)
            Any strides; cast to ``compute_dtype`` when it is another floating dtype.

        Returns
        -------
        ndarray, shape (M, out_features), C-contiguous, ``compute_dtype``.
        """
        return self._run(x)

    cdef object _run(self, object x):
        cdef mk_gemm_chain_layer *spec
        cdef mk_gemm_chain_layer *spec16 = NULL
        cdef PackedLinear lin
        cdef const mk_gemm_config *cfg16
        cdef Py_ssize_t i
        self._refresh()
        spec = self._spec
        if mk_gemm_precision() == MK_PREC_MEDIUM:
            # bfloat16 compute for the layers that have it, in a private copy of the spec
            # (another thread may run this chain at another precision at the same time)
            spec16 = <mk_gemm_chain_layer *>malloc(<size_t>self._nl * sizeof(mk_gemm_chain_layer))
            if spec16 == NULL:
                raise MemoryError("cannot allocate the chain description")
            memcpy(spec16, self._spec, <size_t>self._nl * sizeof(mk_gemm_chain_layer))
            spec = spec16
            try:
                for i in range(self._nl):
                    lin = <PackedLinear>self.layers[i]
                    lin.ensure_bf16()
                    cfg16 = lin._bf16_now()
                    if cfg16 != NULL and lin._cfg16 != NULL and _same_layout(cfg16, lin._cfg16):
                        spec16[i].cfg = cfg16
                        spec16[i].packed = lin._packed16
            except BaseException:
                free(spec16)
                raise
        try:
            return self._run_spec(x, spec)
        finally:
            free(spec16)

    cdef object _run_spec(self, object x, mk_gemm_chain_layer *spec):
        cdef cnp.ndarray arr, res
        cdef cnp.npy_intp dims[2]
        cdef Py_ssize_t itemsize, m
        cdef size_t half
        cdef void *buf
        cdef void *tmp = NULL
        cdef int rc, nthreads
        arr = _input_rows(x, self._typenum, self.compute_dtype, self.in_features)
        itemsize = cnp.PyArray_ITEMSIZE(arr)
        # the chain reads rows with unit stride
        if (not _elem_strides_ok(arr, itemsize)
                or (cnp.PyArray_STRIDE(arr, 1) != itemsize and self.in_features > 1)):
            arr = cnp.PyArray_NewCopy(arr, cnp.NPY_CORDER)
        m = cnp.PyArray_DIM(arr, 0)
        dims[0] = m
        dims[1] = self.out_features
        res = cnp.PyArray_EMPTY(2, dims, self._typenum, 0)
        if m == 0:
            return res
        half = (<size_t>m * <size_t>self._mid * <size_t>itemsize + 63) // 64 * 64
        if half == 0:
            half = 64
        if self._busy:  # another thread is running this chain: use a buffer of our own
            tmp = aligned_alloc(64, 2 * half)
            buf = tmp
        else:
            if half > self._buf_half:
                free(self._buf)
                self._buf = aligned_alloc(64, 2 * half)
                self._buf_half = half if self._buf != NULL else 0
            buf = self._buf
        if buf == NULL:
            raise MemoryError(f"cannot allocate {2 * half} bytes for the chain's buffers")
        if tmp == NULL:
            self._busy = True
            half = self._buf_half
        nthreads = effective_threads()
        try:
            with nogil:
                rc = mk_gemm_chain_run(<size_t>self._nl, spec, <size_t>m,
                                       cnp.PyArray_DATA(arr),
                                       cnp.PyArray_STRIDE(arr, 0) // itemsize,
                                       cnp.PyArray_DATA(res), buf, <char *>buf + half, nthreads)
        finally:
            if tmp != NULL:
                free(tmp)
            else:
                self._busy = False
        if rc != 0:
            raise MemoryError("cannot allocate the GEMM packing buffer")
        return res

    def __call__(self, x):
        return self.forward(x)

    def _watch(self, owner, children, modules, linears, acts):
        """Bind the modules this chain stands for (see :meth:`_forward_watched`).

        Parameters
        ----------
        owner : Module or None
            The container whose whole forward the chain is (``nn.Sequential``): it must have
            no hooks and its ``_modules`` must still hold exactly ``children``, in order.
        children : sequence
            The owner's children when the chain was planned (ignored without an owner).
        modules : sequence
            Every module of the chained run, in order; none may have hooks.
        linears : sequence
            Per layer, the Linear module whose ``_packed`` must be ``layers[i]``.
        acts : sequence
            Per layer, the activation module whose ``_epilogue`` must still equal
            ``activations[i]``, or None where the layer has no activation.
        """
        linears, acts = tuple(linears), tuple(acts)
        if len(linears) != self._nl or len(acts) != self._nl:
            raise ValueError(f"_watch: expected {self._nl} linears and activations")
        self._owner = owner
        self._children = tuple(children) if owner is not None else ()
        self._modules = tuple(modules)
        self._linears = linears
        self._acts = acts
        # an activation whose class holds its epilogue as a plain tuple (ReLU, ...) needs no
        # re-reading per call; a property (GELU's approximate) does
        self._act_static = tuple(
            act is not None and type(getattr(type(act), "_epilogue", None)) is tuple
            and getattr(type(act), "_epilogue") == self.activations[i]
            for i, act in enumerate(acts)
        )

    def _forward_watched(self, x):
        """``forward(x)`` when the watched modules still describe this chain, else None (the
        caller then runs them one by one, or rebuilds the chain).

        These are the checks of ``nn.Sequential``'s chained step, made here because at
        batch 1 the whole chain takes a few microseconds: ``x`` is a 2-D ndarray of the
        compute dtype; the owner (if any) has no hooks, no ``forward`` set on the instance,
        and still the same children; no
        watched module has hooks (``_has_hooks``); ``linears[i]._packed`` is ``layers[i]``;
        ``acts[i]._epilogue`` equals the activation the chain was built with. None when
        nothing is watched."""
        cdef Py_ssize_t i, pos = 0
        cdef PyObject *key
        cdef PyObject *value
        cdef tuple children
        if (self._modules is None or type(x) is not np.ndarray
                or cnp.PyArray_TYPE(<cnp.ndarray>x) != self._typenum
                or cnp.PyArray_ISBYTESWAPPED(<cnp.ndarray>x)
                or cnp.PyArray_NDIM(<cnp.ndarray>x) != 2):
            return None
        if self._owner is not None:
            owner_dict = PyObject_GenericGetDict(self._owner, NULL)
            # hooks, or a forward assigned on the instance, go through Module.__call__
            if (_instance_attr(self._owner, "_has_hooks")
                    or (type(owner_dict) is dict
                        and PyDict_GetItem(owner_dict, "forward") != NULL)):
                return None
            current = _instance_attr(self._owner, "_modules")
            children = self._children
            if type(current) is not dict or len(<dict>current) != len(children):
                return None
            i = 0
            while PyDict_Next(current, &pos, &key, &value):
                if value != <PyObject *>children[i]:
                    return None
                i += 1
        for m in self._modules:
            if _instance_attr(m, "_has_hooks"):
                return None
        for i in range(self._nl):
            if _instance_attr(self._linears[i], "_packed") is not self.layers[i]:
                return None
            act = self._acts[i]
            if act is None:
                continue
            if self._act_static[i]:  # the class's tuple, unless the instance overrides it
                if PyDict_GetItem(PyObject_GenericGetDict(act, NULL), "_epilogue") != NULL:
                    return None
            else:
                ep = getattr(act, "_epilogue")
                if ep is not self._sources[i] and ep != self.activations[i]:
                    return None
        return self._run(x)

    def __repr__(self):
        steps = ", ".join(
            f"{lin.in_features}->{lin.out_features}" + (f" {a[0]}" if a[0] != "none" else "")
            for lin, a in zip(self.layers, self.activations)
        )
        return f"PackedChain({steps})"


def linear_chain(layers, activations=None):
    """Chain packed Linear layers (each with its epilogue activation) into one kernel call.

    Parameters
    ----------
    layers : sequence of PackedLinear
        At least one; layer ``i + 1``'s ``in_features`` equals layer ``i``'s
        ``out_features``; one compute dtype (weight storages may differ within it).
    activations : sequence, optional
        Per layer: an activation name, or a tuple ``(name, alpha, beta)`` as
        :meth:`PackedLinear.forward` takes them; None (the default) for no activations.

    Returns
    -------
    PackedChain
    """
    cdef PackedChain self = PackedChain.__new__(PackedChain)
    cdef PackedLinear lin
    cdef Py_ssize_t i, nl
    layers = tuple(layers)
    nl = len(layers)
    if nl == 0:
        raise ValueError("linear_chain needs at least one layer")
    for i in range(nl):
        if not isinstance(layers[i], PackedLinear):
            raise TypeError(
                f"linear_chain: layer {i} is a {type(layers[i]).__name__}, not a PackedLinear"
            )
    acts = [("none", 0.0, 0.0)] * nl if activations is None else list(activations)
    if len(acts) != nl:
        raise ValueError(f"linear_chain: {nl} layers but {len(acts)} activations")
    for i in range(nl):
        a = acts[i]
        acts[i] = (a, 0.0, 0.0) if isinstance(a, str) else tuple(a)
        if len(acts[i]) != 3:
            raise ValueError(
                f"linear_chain: activation {i} must be a name or (name, alpha, beta); got {a!r}"
            )
    first = <PackedLinear>layers[0]
    for i in range(1, nl):
        lin = <PackedLinear>layers[i]
        if lin._compute != first._compute:
            raise ValueError(
                f"linear_chain: layer {i} computes in {lin.compute_dtype}, layer 0 in "
                f"{first.compute_dtype}"
            )
        if lin.in_features != (<PackedLinear>layers[i - 1]).out_features:
            raise ValueError(
                f"linear_chain: layer {i} has in_features={lin.in_features} but layer {i - 1} "
                f"has out_features={(<PackedLinear>layers[i - 1]).out_features}"
            )
    self._spec = <mk_gemm_chain_layer *>malloc(<size_t>nl * sizeof(mk_gemm_chain_layer))
    if self._spec == NULL:
        raise MemoryError("cannot allocate the chain description")
    self._nl = nl
    self._mid = 1
    for i in range(nl):
        lin = <PackedLinear>layers[i]
        name, alpha, beta = acts[i]
        make_epilogue(name, alpha, beta, &self._spec[i].ep)
        self._spec[i].n = <size_t>lin.out_features
        self._spec[i].k = <size_t>lin.in_features
        if i + 1 < nl and lin.out_features > self._mid:
            self._mid = lin.out_features
    self.layers = layers
    self._sources = tuple(activations) if activations is not None else (None,) * nl
    self.activations = tuple(acts)
    self.in_features = first.in_features
    self.out_features = (<PackedLinear>layers[nl - 1]).out_features
    self.compute_dtype = first.compute_dtype
    self._compute = first._compute
    self._typenum = first._typenum
    self._refresh()
    return self


def _chain_planned_threads(PackedChain chain, Py_ssize_t m):
    """Threads a chain forward of m rows would use now (for tests and benchmarks)."""
    chain._refresh()
    return mk_gemm_chain_plan_threads(<size_t>chain._nl, chain._spec, <size_t>m,
                                      effective_threads())


def _winograd_engine_capsule():
    """The engine's entry points for the convolution's Winograd GEMM stage
    (``mk_gemm_wino_api``, wino-eng-api.h) in a PyCapsule named
    ``modulekit._ext._gemm.wino_eng_api``: ``_conv`` installs them at import, as the
    extensions export no C symbols to each other."""
    return PyCapsule_New(<void *>&mk_gemm_wino_api, b"modulekit._ext._gemm.wino_eng_api", NULL)


def _set_rowdirect(bint on):
    """Run problems of more than 8 rows with a unit-stride input on the row-direct kernels
    (``True``, the default) or pack the input (``False``); returns the previous setting.

    Both paths give bit-identical results (for tests and benchmarks).
    """
    return bool(mk_gemm_set_rowdirect(on))


def _set_l2_bytes(size_t n):
    """Make this extension's kernels size their L2 blocking for an L2 of ``n`` bytes (0: keep
    the current value); returns the value before. For tests and tuning runs (the results do
    not depend on it); call it while no kernel runs."""
    return set_l2_bytes(n)


def warm_threads():
    """Start the OpenMP thread team now, so the first parallel GEMM does not pay for it."""
    cdef int n = effective_threads()
    with nogil:
        mk_gemm_warm_threads(n)


def _planned_threads(PackedLinear packed, Py_ssize_t m):
    """Threads a forward of m rows would use now (for tests and benchmarks)."""
    packed.ensure_ready()
    return mk_gemm_plan_threads(packed._cfg, <size_t>m, <size_t>packed.out_features,
                                <size_t>packed.in_features, effective_threads())


# ---------------------------------------------------------------- float32 matmul precision
PRECISIONS = ("highest", "high", "medium")


def _get_precision():
    """The calling thread's effective float32 matmul precision (0 highest, 1 high, 2 medium)."""
    return mk_gemm_precision()


def _get_global_precision():
    """The process-wide float32 matmul precision (0 highest, 1 high, 2 medium)."""
    return mk_gemm_get_global_precision()


def _set_precision(int p):
    """Set the process-wide float32 matmul precision (0, 1 or 2)."""
    if not 0 <= p <= 2:
        raise ValueError(f"precision code must be 0, 1 or 2; got {p}")
    mk_gemm_set_precision(p)


def _set_thread_precision(int p):
    """Set (0, 1, 2) or clear (-1) the calling thread's override; returns the previous one."""
    if not -1 <= p <= 2:
        raise ValueError(f"precision code must be -1, 0, 1 or 2; got {p}")
    return mk_gemm_set_thread_precision(p)
