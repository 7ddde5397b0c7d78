"""Convolution, depthwise convolution, pooling and batch-norm inference kernels (NCHW).

Activations stay NCHW, torch's layout, so layers exchange plain NumPy arrays with no layout
conversion. A convolution is an indirect GEMM (see ``kernels/conv/conv.h``): weights are packed
once into panels of 8 output channels ``[bias[8]][K x 8]`` (``K = C_in/groups * KH * KW``);
each call copies the input once into a zero-padded, stride-phase-split image, and the
microkernel (8 x 48 AVX-512, 8 x 24 AVX2, 8 x 16 portable C) reads every ``k``-row of the
virtual im2col matrix as a contiguous run of that image through a per-``k`` offset table.
1x1 stride-1 unpadded convolutions read the input itself. Depthwise convolutions
(``groups == C_in == C_out``) have their own kernel. Bias, a residual add and the activation
are fused into the store. float16/bfloat16 storage is widened to float32 once per call;
float64 weights compute in float64 (a direct loop).

Stride-1, undilated, ungrouped 3x3 float32 convolutions may run as Winograd F(2x2, 3x3) or
F(4x4, 3x3) instead (``kernels/conv/f32-winograd-driver.c``): a cost model in C picks the
implicit GEMM or a tile size per call from the channels and the map size. The transformed
weights are built on first use of a tile size and kept on the :class:`PackedConv2d` (16/9 of
the float32 weight for F(2x2), 4x for F(4x4)); :attr:`PackedConv2d.algorithm` can force one.

Every shape, stride and dtype check happens here, before any ``nogil`` code.
"""

cimport numpy as cnp
from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.stdint cimport uint16_t, uint32_t

from modulekit._ext._act cimport (MK_ACT_GELU_ERF, MK_ACT_GELU_TANH, MK_ACT_HARDSWISH,
                                   MK_ACT_NONE, MK_ACT_RELU, MK_ACT_RELU6, MK_ACT_SIGMOID,
                                   MK_ACT_SILU, MK_ACT_TANH)
from modulekit._ext._align cimport aligned
from modulekit._ext._caches cimport mk_l2_scaled, set_l2_bytes
from modulekit._ext._isa cimport MK_ISA_AVX512, active_bf16, active_isa
from modulekit._ext._openmp_helpers cimport bind_team, effective_threads

import threading

import numpy as np

from modulekit import _shared
from modulekit._ext._gemm import _get_precision, _winograd_engine_capsule
from modulekit.dtypes import bfloat16_numpy, is_bfloat16

_TEAM = bind_team()  # the kernels' contention back-off: the process's state

cnp.import_array()

# the GEMM engine's entry points for the Winograd GEMM stage, from the _gemm extension
mk_wino_eng_install(<const mk_wino_eng_api *>PyCapsule_GetPointer(
    _winograd_engine_capsule(), b"modulekit._ext._gemm.wino_eng_api"))

__all__ = [
    "PackedConv2d",
    "pack_conv2d",
    "fold_batchnorm",
    "conv_output_size",
    "pool_output_size",
    "max_pool2d",
    "avg_pool2d",
    "adaptive_avg_pool2d",
    "batch_norm_inference",
    "ACTIVATIONS",
    "depthwise_chain",
    "DepthwiseChain",
    "INVRES_BAND_BYTES",
]

ACTIVATIONS = {
    None: MK_ACT_NONE,
    "none": MK_ACT_NONE,
    "identity": MK_ACT_NONE,
    "relu": MK_ACT_RELU,
    "relu6": MK_ACT_RELU6,
    "silu": MK_ACT_SILU,
    "hardswish": MK_ACT_HARDSWISH,
    "gelu": MK_ACT_GELU_ERF,
    "gelu_tanh": MK_ACT_GELU_TANH,
    "sigmoid": MK_ACT_SIGMOID,
    "tanh": MK_ACT_TANH,
}

# Per-thread float32 scratch of the convolution calls (phase images, Winograd blocks), kept
# between calls: a fresh np.empty of a few hundred KiB is a new mmap whose pages fault in on
# every call (tens of microseconds per layer). One buffer per calling thread, so concurrent
# forwards never share one; it grows to the largest layer a thread has run.
_tls = threading.local()


cdef cnp.ndarray _scratch(Py_ssize_t n):
    """A float32 array of at least n elements, owned by the calling thread."""
    cdef cnp.ndarray buf = getattr(_tls, "buf", None)
    if buf is None or buf.shape[0] < n:
        buf = np.empty(max(n, 1024), np.float32)
        _tls.buf = buf
    return buf
_STORAGE = {"float32": MK_W_F32, "float16": MK_W_F16, "bfloat16": MK_W_BF16,
            "float64": MK_W_F64}
_MAX_TAPS = 256  # depthwise kernels up to KH*KW = 256 (16x16)

# Winograd: the algorithm names and the weight-transform matrices G (alpha x 3) per tile size
_ALGORITHMS = frozenset({"auto", "igemm", "im2col", "winograd-2x2", "winograd-4x4"})
# PackedConv2d.algorithm as mk_conv_layer.force, and mk_conv_choose's answers by name (the
# lane-exact direct 1x1 is the igemm's GEMM without its lane waste: 'igemm' to the user)
_FORCE = {"auto": MK_CONV_FORCE_AUTO, "igemm": MK_CONV_FORCE_IGEMM,
          "im2col": MK_CONV_FORCE_IM2COL, "winograd-2x2": 2, "winograd-4x4": 4}
_ALGORITHM_NAMES = {MK_CONV_ALGO_F64: "float64", MK_CONV_ALGO_DEPTHWISE: "depthwise",
                    MK_CONV_ALGO_IM2COL: "im2col", MK_CONV_ALGO_ROWS: "igemm-rows",
                    MK_CONV_ALGO_1X1: "igemm", MK_CONV_ALGO_IGEMM: "igemm",
                    MK_CONV_ALGO_BF16: "igemm-bf16", MK_CONV_ALGO_BF16_ROWS: "igemm-bf16-rows"}
_PREC_MEDIUM = 2  # mk_precision: float32_matmul_precision("medium")
_WINO_G = {
    2: np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64),
    # float literals: cdivision would fold 1 / 4 as a C integer division
    4: np.array([[6.0, 0, 0], [-4.0, -4.0, -4.0], [-4.0, 4.0, -4.0], [1.0, 2.0, 4.0],
                 [1.0, -2.0, 4.0], [0, 0, 24.0]], np.float64) / 24.0,
}


# ---------------------------------------------------------------------------------------------
# argument helpers


#: The largest kernel size, stride, dilation, padding and output size the kernels take:
#: their geometry is C int arithmetic, and with every window parameter and every dilated
#: kernel extent within this bound a padded size stays below 2**31.
MAX_WINDOW = 2**20


def _in_range(int_value, name, what):
    """``int_value`` (a Python int) unless it is outside ``[-MAX_WINDOW, MAX_WINDOW]``
    (the sign is checked by the callers, with their own messages)."""
    if not -MAX_WINDOW <= int_value <= MAX_WINDOW:
        lo = 0 if name == "padding" else 1
        raise ValueError(
            f"{what}: {name}={int_value} is out of range: each value must be between {lo} and "
            f"{MAX_WINDOW} (2**20)"
        )
    return int_value


def _pair(value, name, what):
    """``value`` as a pair of ints (an int means both), each within ``MAX_WINDOW``; ``what``
    names the call in errors."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        v = _in_range(int(value), name, what)
        return (v, v)
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"{what}: {name} must be an int or a pair of ints, got {value!r}") from None
    if len(items) == 1:
        items = items * 2
    if len(items) != 2 or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items
    ):
        raise TypeError(f"{what}: {name} must be an int or a pair of ints, got {value!r}")
    return (_in_range(int(items[0]), name, what), _in_range(int(items[1]), name, what))


def _check_extent(k, d, what):
    """Refuse a dilated kernel ``d * (k - 1) + 1`` longer than ``MAX_WINDOW`` (k, d: pairs)."""
    for axis in (0, 1):
        if d[axis] * (k[axis] - 1) + 1 > MAX_WINDOW:
            raise ValueError(
                f"{what}: the dilated kernel, dilation * (kernel_size - 1) + 1 = "
                f"{d[axis] * (k[axis] - 1) + 1} (dilation {d}, kernel_size {k}), must be at "
                f"most {MAX_WINDOW} (2**20)"
            )


cdef int _check_native(object arr, str what) except -1:
    """Refuse a byte-swapped array: the kernels read native words only. (The layers and
    ``nn.functional`` convert such input first, in ``modulekit.nn._input.as_input``.)"""
    if not arr.dtype.isnative:
        raise TypeError(
            f"{what}: the array is in non-native byte order (dtype {arr.dtype.str}); the "
            f"kernels read native-endian data: convert it first, e.g. "
            f"x.astype(x.dtype.newbyteorder('='))"
        )
    return 0


def _act_code(activation):
    try:
        return ACTIVATIONS[activation if activation is None else str(activation).lower()]
    except KeyError:
        raise ValueError(
            f"unknown activation {activation!r}: expected None, 'relu', 'relu6', 'silu', "
            "'hardswish', 'gelu', 'gelu_tanh', 'sigmoid' or 'tanh'"
        ) from None


def conv_output_size(size, kernel, stride, pad_lo, pad_hi, dilation):
    """Output length of a convolution along one axis (torch's formula)."""
    num = size + pad_lo + pad_hi - dilation * (kernel - 1) - 1
    return num // stride + 1   # Python floor division: num may be negative


def pool_output_size(size, kernel, stride, pad, dilation, ceil_mode):
    """Output length of a pooling window along one axis, torch's ``pooling_output_shape``.

    With ``ceil_mode`` the last window must start inside the input or its left padding.
    """
    num = size + 2 * pad - dilation * (kernel - 1) - 1 + (stride - 1 if ceil_mode else 0)
    out = num // stride + 1   # Python floor division: num may be negative
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


cdef object _as_input(x, what, dtype):
    """``x`` as an aligned ndarray of ``dtype`` (copying only when it must); strides stay as
    they are unless they are not whole elements."""
    arr = x if isinstance(x, np.ndarray) else None
    if arr is None:
        from modulekit._ext._tensor import as_array  # Tensor, buffer protocol, torch, lists
        arr = np.asarray(as_array(x))
    _check_native(arr, what)
    if arr.dtype != dtype:
        if arr.dtype.kind not in "fiub" and not is_bfloat16(arr.dtype):
            raise TypeError(f"{what}: expected a numeric array, got dtype {arr.dtype}")
        arr = arr.astype(dtype)
    elif not arr.flags.aligned or any(s % arr.itemsize for s in arr.strides):
        arr = arr.copy()  # C order, aligned
    return arr


cdef void _fill_input_geom(mk_conv_geom *g, cnp.ndarray x):
    cdef Py_ssize_t isz = x.itemsize
    g.N = <int>x.shape[0]
    g.C = <int>x.shape[1]
    g.H = <int>x.shape[2]
    g.W = <int>x.shape[3]
    g.sn = x.strides[0] // isz
    g.sc = x.strides[1] // isz
    g.sh = x.strides[2] // isz
    g.sw = x.strides[3] // isz


def _check_4d(x, what):
    if x.ndim != 4:
        raise ValueError(f"{what}: expected a 4-D (N, C, H, W) input, got shape {x.shape}")
    if 0 in x.shape[1:]:  # an empty batch is fine (an empty output, as in torch)
        raise ValueError(
            f"{what}: expected non-empty channels, height and width, got shape {x.shape}")
    if max(x.shape) > 2**31 - 1 or x.shape[0] * x.shape[1] > 2**31 - 1:
        raise ValueError(
            f"{what}: input too large, shape {x.shape} (batch * channels must stay below 2**31)"
        )
    if max(x.shape[2:]) > 2**31 - 1 - 2 * MAX_WINDOW:
        raise ValueError(
            f"{what}: input too large, shape {x.shape} (height and width must stay below "
            f"2**31 - 2**21)"
        )


# ---------------------------------------------------------------------------------------------
# convolution


cdef class PackedConv2d:
    """A 2-D convolution with its weights packed for the kernels; built by :func:`pack_conv2d`.

    Attributes
    ----------
    in_channels, out_channels, groups : int
    kernel_size, stride, dilation : tuple of int
        (height, width) pairs.
    padding : tuple of int
        (top, left, bottom, right).
    storage : str
        Weight storage: 'float32', 'float16', 'bfloat16' (computed in float32, or in bfloat16
        under "medium": see :meth:`algorithm_for`) or 'float64'.
    depthwise : bool
        True when the dedicated depthwise kernel runs (groups == in == out channels).
    """

    def __init__(self):
        raise TypeError("PackedConv2d is built by pack_conv2d(weight, bias, ...)")

    # --- Winograd ---------------------------------------------------------------------------

    @property
    def algorithm(self):
        """Algorithm of float32 convolutions: 'auto' (default), 'igemm', 'im2col',
        'winograd-2x2' or 'winograd-4x4'.

        'auto' lets the cost model choose per input shape (see :meth:`algorithm_for`). A
        forced Winograd tile applies only where Winograd can run (3x3, stride 1, dilation 1,
        groups 1, float32 compute, unit input column stride); elsewhere the implicit GEMM
        runs. 'winograd-4x4' runs F(2x2) on the portable C path, which has no F(4x4).
        Winograd rounds differently from a direct sum: F(2x2) errors are a few ulp of the
        output scale, F(4x4) about ten times more (relative 1e-5 to 1e-4 at 512 channels).
        Setting 'igemm' also drops the transformed weights built so far (see
        :attr:`winograd_nbytes`), and forces the phase-image implicit GEMM where 'auto' would
        run im2col (both give the same bits). 'im2col' forces the window matrix and the
        lane-exact GEMM where that path exists (AVX-512, float32 weights, groups 1, not a
        plain 1x1 stride-1 layer); elsewhere the choice stays 'auto''s.
        """
        return self._algorithm

    @algorithm.setter
    def algorithm(self, value):
        if value not in _ALGORITHMS:
            raise ValueError(
                f"algorithm must be one of {sorted(_ALGORITHMS)}, got {value!r}")
        self._algorithm = value
        if value == "igemm":
            self._wino = {}

    @property
    def winograd_nbytes(self):
        """Bytes of the transformed Winograd weights built so far (0 before first use).

        Each tile size a forward has used keeps its own copy: 16/9 of the float32 weight for
        F(2x2), 4x for F(4x4) (so up to 5.8x for a layer run at both, e.g. batch 1 and 32).
        """
        return sum(int(u.nbytes) for u in self._wino.values())

    def algorithm_for(self, input_shape):
        """Name of what :meth:`forward` runs for an (N, C_in, H, W) contiguous input here:
        'igemm', 'im2col' (batch 1 on AVX-512: strided 1x1 kernels and tiny output maps, see
        ``f32-conv-im2col.c``),
        'igemm-rows' (at most 4 input channels on AVX-512: the igemm in row bands, see
        ``mk_conv2d_rows_f32``), 'winograd-2x2', 'winograd-4x4', 'depthwise', 'float64' or
        'igemm-bf16' (bfloat16 multiplies under ``float32_matmul_precision("medium")`` on a
        bfloat16 path: AVX512-BF16 or AMX), 'igemm-bf16-rows' (the same in row bands, at most
        4 input channels). The choice is ``mk_conv_choose``'s (``kernels/conv/conv-config.c``).

        Depends on the instruction-set path, the bfloat16 path, the calling thread's float32
        matmul precision and the thread count in effect.
        """
        cdef mk_conv_geom g
        self._shape_geom(input_shape, &g)
        cdef mk_conv_choice c = self._choose(&g, <int>active_isa(), effective_threads())
        if c.algo == MK_CONV_ALGO_WINOGRAD:
            return f"winograd-{c.wino_m}x{c.wino_m}"
        return _ALGORITHM_NAMES[c.algo]

    cdef mk_conv_layer _layer(self):
        """The layer as ``mk_conv_choose`` sees it."""
        cdef mk_conv_layer layer
        layer.groups = self.groups
        layer.Cout = self.out_channels
        layer.wtype = self._wtype
        layer.depthwise = self.depthwise
        layer.force = _FORCE[self._algorithm]
        # "medium" precision on a bfloat16 path (AVX512-BF16 or AMX), float32 or bfloat16
        # weights (float16 keeps float32 compute)
        layer.bf16 = (active_bf16() if not self.depthwise
                      and (self._wtype == MK_W_F32 or self._wtype == MK_W_BF16)
                      and _get_precision() == _PREC_MEDIUM else 0)
        return layer

    cdef mk_conv_choice _choose(self, mk_conv_geom *g, int isa, int nthreads):
        """What a call on geometry ``g`` runs (``mk_conv_choose``)."""
        cdef mk_conv_layer layer = self._layer()
        cdef mk_conv_choice c
        mk_conv_choose(&layer, g, isa, nthreads, &c)
        return c

    cdef _shape_geom(self, input_shape, mk_conv_geom *g):
        """Fill *g for an (N, C_in, H, W) C-contiguous input."""
        n, c, h, w = (int(v) for v in input_shape)
        g.N, g.C, g.H, g.W = n, c, h, w
        g.sw, g.sh, g.sc, g.sn = 1, w, h * w, c * h * w
        g.KH, g.KW = self.kernel_size
        g.sy, g.sx = self.stride
        g.pt, g.pl, g.pb, g.pr = self.padding
        g.dy, g.dx = self.dilation
        oshape = self.output_shape((n, c, h, w))
        g.OH, g.OW = oshape[2], oshape[3]

    def _winograd_engine_for(self, input_shape):
        """Whether a Winograd call for this input runs its GEMM stage in the GEMM engine's
        orientation (False: the igemm one, or no Winograd). For tests and benchmarks."""
        cdef mk_conv_geom g
        self._shape_geom(input_shape, &g)
        return bool(self._choose(&g, <int>active_isa(), effective_threads()).wino_eng)

    def _igemm_tiling_for(self, input_shape):
        """The float32 phase-image igemm's tiling of one image's output for this input:
        ``(nr, tail_nr, vector, lanes)`` (``mk_conv_igemm_grid_tiling``: ``vector`` 0 for the
        grid's consecutive lanes, else the lanes of the output rows' vectors). For tests."""
        cdef mk_conv_geom g
        self._shape_geom(input_shape, &g)
        cdef mk_igemm_tiling t
        mk_conv_igemm_grid_tiling(<int>active_isa(), &g, &t)
        return t.nr, t.tail_nr, t.vector, t.lanes

    def _winograd_weights(self, int m, int eng=0, int isa=0):
        """U = G w G^T for tile size m (cached): packed as alpha^2 groups of igemm panels, or
        with ``eng`` as alpha^2 groups of the GEMM engine's panels of U_t^T for ``isa``
        (mk_wino_eng_pack)."""
        key = (m, isa if eng else -1)  # -1: the igemm panels
        u = self._wino.get(key)
        if u is not None:
            return u
        w, b = self.unpack()
        w = np.asarray(w, np.float64)
        G = _WINO_G[m]
        a = G.shape[0]
        cout, cin = self.out_channels, self.in_channels
        # (alpha, alpha, Cout, Cin)
        ut = np.einsum("ik,ockl,jl->ijoc", G, w, G, optimize=True).reshape(a * a, cout, cin)
        cdef cnp.ndarray ut32, b32, raw
        cdef size_t nbytes, off
        cdef const float *bp = NULL
        if eng:
            ut32 = np.ascontiguousarray(ut, np.float32)
            if b is not None:
                b32 = np.ascontiguousarray(b, np.float32)
                bp = <const float *>cnp.PyArray_DATA(b32)
            nbytes = a * a * mk_wino_eng_bytes(isa, cout, cin)
            raw = np.empty(nbytes + 64, np.uint8)
            off = (-<size_t>cnp.PyArray_DATA(raw)) % 64
            u = raw[off:off + nbytes]  # 64-byte aligned (the engine's panels)
            mk_wino_eng_pack(isa, a * a, cout, cin, <const float *>cnp.PyArray_DATA(ut32),
                             a + 1, bp, cnp.PyArray_DATA(u))
            self._wino = {**self._wino, key: u}
            return u
        npan = (cout + MK_CONV_MR - 1) // MK_CONV_MR
        panels = np.zeros((a * a, npan * MK_CONV_MR, MK_CONV_MR + cin), np.float32)
        panels[:, :cout, MK_CONV_MR:] = ut
        if b is not None:
            panels[a + 1, :cout, 0] = np.asarray(b, np.float32)  # t = (1, 1): see conv.h
        panels = panels.reshape(a * a, npan, MK_CONV_MR, MK_CONV_MR + cin)
        flat = np.concatenate(
            [panels[:, :, :, 0],
             panels[:, :, :, MK_CONV_MR:].transpose(0, 1, 3, 2).reshape(
                 a * a, npan, cin * MK_CONV_MR)], axis=2)
        u = np.ascontiguousarray(flat, np.float32).reshape(-1)
        self._wino = {**self._wino, key: u}  # a new dict: readers in other threads stay valid
        return u

    @property
    def nbytes(self):
        """Bytes held by the packed weights (and bias)."""
        return int(self._packed.nbytes) + (0 if self._bias is None else int(self._bias.nbytes))

    @property
    def compute_dtype(self):
        """NumPy dtype of the inputs, outputs and accumulation."""
        return np.dtype(np.float64) if self.storage == "float64" else np.dtype(np.float32)

    def output_shape(self, input_shape):
        """(N, C_out, OH, OW) for an (N, C_in, H, W) input shape."""
        n, _, h, w = input_shape
        kh, kw = self.kernel_size
        pt, pl, pb, pr = self.padding
        return (
            n,
            self.out_channels,
            conv_output_size(h, kh, self.stride[0], pt, pb, self.dilation[0]),
            conv_output_size(w, kw, self.stride[1], pl, pr, self.dilation[1]),
        )

    def __repr__(self):
        return (
            f"PackedConv2d({self.in_channels}, {self.out_channels}, kernel_size="
            f"{self.kernel_size}, stride={self.stride}, padding={self.padding}, dilation="
            f"{self.dilation}, groups={self.groups}, bias={bool(self.has_bias)}, "
            f"storage={self.storage!r})"
        )

    def unpack(self):
        """Return ``(weight, bias)`` as torch lays them out, in the storage dtype.

        ``weight`` has shape (C_out, C_in/groups, KH, KW); ``bias`` is (C_out,) or None.
        """
        cdef int kh = self.kernel_size[0], kw = self.kernel_size[1]
        cdef int cin_g = self.in_channels // self.groups
        if self.storage == "float64" or self.depthwise:
            w = np.array(self._packed).reshape(self.out_channels, cin_g, kh, kw)
            return w, (None if self._bias is None else np.array(self._bias))
        cdef int cout_g = self.out_channels // self.groups
        cdef int npg = (cout_g + MK_CONV_MR - 1) // MK_CONV_MR
        cdef Py_ssize_t K = cin_g * kh * kw
        p = self._packed.reshape(self.groups, npg, MK_CONV_MR + K * MK_CONV_MR)
        bias = p[:, :, :MK_CONV_MR].reshape(self.groups, npg * MK_CONV_MR)[:, :cout_g]
        w = p[:, :, MK_CONV_MR:].reshape(self.groups, npg, K, MK_CONV_MR)
        w = w.transpose(0, 1, 3, 2).reshape(self.groups, npg * MK_CONV_MR, K)[:, :cout_g]
        w = np.ascontiguousarray(w).reshape(self.out_channels, cin_g, kh, kw)
        return w, (np.ascontiguousarray(bias).reshape(-1) if self.has_bias else None)

    # --- shared memory (Module.share_memory) -------------------------------------------------

    @property
    def is_shared(self):
        """Whether the packed weights (and bias) live in shared memory."""
        return _shared.is_shared(self._packed) and (
            self._bias is None or _shared.is_shared(self._bias))

    def shared_copy(self):
        """This convolution with its packed weights in new shared-memory segments (self when
        they are shared already): copied, not re-packed. The Winograd transforms stay a
        per-process cache. A shared PackedConv2d pickles as handles plus its geometry."""
        if self.is_shared:
            return self
        cdef PackedConv2d out = PackedConv2d.__new__(PackedConv2d)
        out.in_channels, out.out_channels, out.groups = (
            self.in_channels, self.out_channels, self.groups)
        out.kernel_size, out.stride, out.dilation, out.padding = (
            self.kernel_size, self.stride, self.dilation, self.padding)
        out.storage, out.depthwise, out.has_bias = self.storage, self.depthwise, self.has_bias
        out._wtype = self._wtype
        out._algorithm = self._algorithm
        out._wino = {}
        out._packed = _shared.copy_to_shared(self._packed)
        out._bias = None if self._bias is None else _shared.copy_to_shared(self._bias)
        return out

    def with_padding(self, padding):
        """This convolution with another zero padding, ``(top, left, bottom, right)``: a new
        PackedConv2d sharing this one's packed weights, bias and Winograd transforms (nothing
        is re-packed or copied). ``ConvTranspose`` runs its stride phases with it, whose
        paddings follow the input size.
        """
        try:
            pads = tuple(padding)
        except TypeError:
            pads = ()
        if len(pads) != 4 or not all(
                isinstance(p, (int, np.integer)) and not isinstance(p, bool) for p in pads):
            raise TypeError(
                f"with_padding: padding must be 4 ints (top, left, bottom, right), got "
                f"{padding!r}")
        pads = tuple(_in_range(int(p), "padding", "with_padding") for p in pads)
        if min(pads) < 0:
            raise ValueError(f"with_padding: padding must be non-negative, got {pads}")
        cdef PackedConv2d out = PackedConv2d.__new__(PackedConv2d)
        out.in_channels, out.out_channels, out.groups = (
            self.in_channels, self.out_channels, self.groups)
        out.kernel_size, out.stride, out.dilation, out.padding = (
            self.kernel_size, self.stride, self.dilation, pads)
        out.storage, out.depthwise, out.has_bias = self.storage, self.depthwise, self.has_bias
        out._wtype = self._wtype
        out._algorithm = self._algorithm
        out._wino = self._wino
        out._bf16 = self._bf16
        out._packed = self._packed
        out._bias = self._bias
        return out

    def forward_shifted(self, x, padding, out_size, shifts, out=None, places=None,
                        steps=None):
        """Blocks of output channels, each over the padded input at its own offset.

        Block ``i`` (``out_channels // len(shifts)`` consecutive channels) gives
        ``conv(pad(x))[:, block i, dy : dy + OH, dx : dx + OW]`` for ``shifts[i] = (dy, dx)``
        and ``out_size = (OH, OW)``, and no other window: a transposed convolution's stride
        phases (``ConvTranspose``'s merged phases: one sub-kernel a block) in one float32
        implicit GEMM. With ``out``, each block's outputs go in place among the others' (the
        phases interleaved by the GEMM's stores: no second pass).

        Parameters
        ----------
        x : array_like
            (N, C, H, W) or (C, H, W).
        padding : tuple of 4 int
            (top, left, bottom, right) zero padding, as :meth:`with_padding`.
        out_size : tuple of 2 int
            (OH, OW), positive.
        shifts : sequence of (int, int)
            Each block's (dy, dx), non-negative; ``dy + OH`` and ``dx + OW`` at most the
            padded convolution's output size.
        out : ndarray, optional
            float32, C-contiguous, (N, out_channels // len(shifts), H2, W2) (3-D for a 3-D
            ``x``): block ``i``'s output ``(c, oh, ow)`` for ``oh < rows`` and ``ow < cols``
            is written to ``out[:, c, oy + sy * oh, ox + sx * ow]``, for ``places[i] = (oy,
            ox, rows, cols)`` and ``steps = (sy, sx)``; every such position inside ``out``.
            Positions no block writes keep their values; positions two blocks write get
            either's (the stride phases of a transposed convolution never share one).
        places : sequence of (int, int, int, int), optional
            With ``out``: each block's first position and how many of its rows and columns
            (at most OH and OW) it writes.
        steps : tuple of 2 int, optional
            With ``out``: the rows and columns between a block's outputs (positive).

        Returns
        -------
        ndarray or None
            ``out``, or a new (N, C_out, OH, OW) float32 array (3-D for a 3-D ``x``); None
            where this layer does not run the float32 implicit GEMM (float64 storage, bfloat16
            compute under ``float32_matmul_precision('medium')``, groups) or a block is not
            whole panels of 8 output channels (``out`` is then left as it was).

        Raises
        ------
        ValueError
            For a stride other than 1, shifts and sizes past the padded output, or ``out``,
            ``places`` and ``steps`` that do not match (positions outside ``out``), or an
            ``out`` that overlaps the input.
        """
        what = "forward_shifted"
        if self.groups != 1 or self._wtype == MK_W_F64:
            return None
        if self.stride != (1, 1):
            raise ValueError(f"{what}: the convolution must have stride 1, got {self.stride}")
        try:
            blocks = [tuple(int(v) for v in sh) for sh in shifts]
            oh, ow = (int(v) for v in out_size)
        except (TypeError, ValueError):
            raise TypeError(f"{what}: shifts must be (dy, dx) pairs and out_size (OH, OW), got "
                            f"{shifts!r} and {out_size!r}") from None
        nb = len(blocks)
        if nb == 0 or any(len(b) != 2 or min(b) < 0 for b in blocks):
            raise ValueError(f"{what}: shifts must be non-negative (dy, dx) pairs, got {shifts!r}")
        if (out is None) != (places is None) or (out is None) != (steps is None):
            raise ValueError(f"{what}: out, places and steps go together")
        if self.out_channels % nb or (self.out_channels // nb) % MK_CONV_MR:
            return None  # a panel would straddle two blocks
        cdef PackedConv2d conv = self.with_padding(padding)
        cdef mk_conv_geom g
        xa, unbatched, oshape = conv._geometry(x, &g)
        if oh < 1 or ow < 1 or max(b[0] for b in blocks) + oh > g.OH or \
                max(b[1] for b in blocks) + ow > g.OW:
            raise ValueError(f"{what}: out_size {(oh, ow)} with shifts {blocks} leaves the "
                             f"padded output of {(g.OH, g.OW)}")
        cdef cnp.ndarray dst = None  # what the GEMM writes: out as 4-D, or a new array
        if out is not None:
            dst, place = _placed_output(out, unbatched, g.N, self.out_channels // nb, places,
                                        steps, nb, oh, ow)
            if np.may_share_memory(out, xa):
                raise ValueError(f"{what}: out must not overlap the input")
        cdef int isa = <int>active_isa()
        cdef int nthreads = effective_threads()
        cdef mk_conv_choice c = conv._choose(&g, isa, nthreads)
        if c.algo in (MK_CONV_ALGO_BF16, MK_CONV_ALGO_BF16_ROWS, MK_CONV_ALGO_F64):
            return None
        g.OH, g.OW = oh, ow  # the grid the blocks share (reads stay inside the padded input)
        per = self.out_channels // nb // MK_CONV_MR  # panels a block
        cdef cnp.ndarray shift = np.array(
            [blocks[p // per][0] * g.Wq + blocks[p // per][1] for p in range(per * nb)],
            np.intp)
        cdef mk_conv_blocks cb
        cb.nblocks = nb
        cb.shift = <const Py_ssize_t *>cnp.PyArray_DATA(shift)
        cb.origin = NULL
        cdef cnp.ndarray origin, count
        if out is None:
            dst = np.empty((g.N, self.out_channels, oh, ow), np.float32)
        else:
            h2, w2 = dst.shape[2], dst.shape[3]
            origin = np.array([oy * w2 + ox for oy, ox, _, _ in place], np.intp)
            count = np.array([p[2:] for p in place], np.intc).reshape(-1)
            cb.origin = <const Py_ssize_t *>cnp.PyArray_DATA(origin)
            cb.count = <const int *>cnp.PyArray_DATA(count)
            cb.ns = dst.shape[1] * h2 * w2
            cb.cs = h2 * w2
            cb.rs = w2
            cb.sy, cb.sx = steps
        result = out if out is not None else dst[0] if unbatched else dst
        if g.N == 0:
            return result
        cdef cnp.ndarray packed = self._packed
        cdef cnp.ndarray phase = _scratch(mk_conv_phase_size(&g, g.C))
        cdef cnp.ndarray koff = np.empty(g.C * g.KH * g.KW, np.intp)
        cdef cnp.ndarray wide
        cdef float *widep = NULL
        if self._wtype != MK_W_F32:
            wide = np.empty(packed.size, np.float32)
            widep = <float *>cnp.PyArray_DATA(wide)
        cdef cnp.ndarray xin = xa
        cdef void *op = cnp.PyArray_DATA(dst)
        with nogil:
            mk_conv2d_shifted_f32(&g, <const float *>cnp.PyArray_DATA(xin), self.out_channels,
                                  cnp.PyArray_DATA(packed), self._wtype, widep,
                                  <float *>cnp.PyArray_DATA(phase),
                                  <Py_ssize_t *>cnp.PyArray_DATA(koff), &cb, <float *>op, isa,
                                  nthreads)
        return result

    def __reduce__(self):
        args = (self.in_channels, self.out_channels, self.groups, self.kernel_size,
                self.stride, self.dilation, self.padding, self.storage, self.has_bias,
                self._algorithm)
        if self.is_shared:
            return (_attach_conv2d, args + (
                _shared.handle_of(self._packed),
                None if self._bias is None else _shared.handle_of(self._bias)))
        w, b = self.unpack()
        return (_repack_conv2d, args + (w, b))

    def __call__(self, x, activation=None, residual=None):
        return self.forward(x, activation, residual)

    cdef tuple _geometry(self, x, mk_conv_geom *gp):
        """The input as a 4-D array of the compute dtype, whether it was 3-D, and the
        output shape; fills *gp (phase geometry included)."""
        dtype = self.compute_dtype
        xa = _as_input(x, "conv2d", dtype)
        unbatched = xa.ndim == 3
        if unbatched:
            xa = xa[None]
        _check_4d(xa, "conv2d")
        if xa.shape[1] != self.in_channels:
            raise ValueError(
                f"conv2d: expected input with {self.in_channels} channels, got {xa.shape[1]} "
                f"(input shape {tuple(xa.shape)[1 if unbatched else 0:]})"
            )
        cdef mk_conv_geom g
        _fill_input_geom(&g, xa)
        g.KH, g.KW = self.kernel_size
        g.sy, g.sx = self.stride
        g.pt, g.pl, g.pb, g.pr = self.padding
        g.dy, g.dx = self.dilation
        if (g.H + g.pt + g.pb < g.dy * (g.KH - 1) + 1 or
                g.W + g.pl + g.pr < g.dx * (g.KW - 1) + 1):
            raise ValueError(
                f"conv2d: input spatial size ({g.H}, {g.W}) with padding {self.padding} is "
                f"smaller than the dilated kernel ({g.dy * (g.KH - 1) + 1}, "
                f"{g.dx * (g.KW - 1) + 1})"
            )
        oshape = self.output_shape(xa.shape)
        g.OH, g.OW = oshape[2], oshape[3]
        # a stride past the padded input gives one output row (column) either way; clamped to
        # the padded size it computes the same, where a stride of 2**20 would size the
        # stride-phase image (sy * sx phases) at terabytes
        if g.sy > g.H + g.pt + g.pb:
            g.sy = g.H + g.pt + g.pb
        if g.sx > g.W + g.pl + g.pr:
            g.sx = g.W + g.pl + g.pr
        mk_conv_geometry(&g)
        gp[0] = g
        return xa, unbatched, oshape

    def forward_maxpool(self, x, activation=None, kernel_size=2, stride=None, padding=0,
                        dilation=1, ceil_mode=False):
        """``max_pool2d(act(conv(x) + bias), kernel_size, stride, padding, dilation,
        ceil_mode)``, fused where :meth:`maxpool_algorithm_for` says 'igemm-maxpool'.

        The fused kernel computes the convolution in bands of rows into per-thread buffers
        and pools them straight into the output (the convolution output never goes to
        memory); the result is bit-identical to :meth:`forward` then :func:`max_pool2d`,
        which is what runs elsewhere.

        Returns
        -------
        ndarray, shape (N, C_out, PH, PW) (or (C_out, PH, PW) for a 3-D input)
        """
        cdef int act = _act_code(activation)
        cdef mk_conv_geom g, pg
        xa, unbatched, oshape = self._geometry(x, &g)
        cdef int isa = <int>active_isa()
        cdef int nthreads = effective_threads()
        cdef mk_conv_layer layer = self._layer()
        k, s, p, d = _conv_pool_geom(&pg, oshape, kernel_size, stride, padding, dilation,
                                     ceil_mode)
        if g.N == 0:  # an empty batch: nothing to compute
            return np.empty((0, self.out_channels, pg.OH, pg.OW), self.compute_dtype)
        cdef int fused = mk_conv_maxpool_fused(&layer, &g, &pg, isa, nthreads)
        if not fused:
            y = self.forward(xa, activation)
            y = max_pool2d(y, k, s, p, d, ceil_mode)
            return y[0] if unbatched else y
        cdef int path = active_bf16() if fused == MK_CONV_ALGO_BF16_ROWS else 0
        cdef cnp.ndarray out = np.empty((g.N, self.out_channels, pg.OH, pg.OW), np.float32)
        cdef cnp.ndarray xin = xa
        self._rows(&g, &pg, cnp.PyArray_DATA(xin), cnp.PyArray_DATA(out), NULL, act, path, isa,
                   nthreads)
        return out[0] if unbatched else out

    def maxpool_algorithm_for(self, input_shape, kernel_size=2, stride=None, padding=0,
                              dilation=1, ceil_mode=False):
        """What :meth:`forward_maxpool` runs for an (N, C_in, H, W) contiguous input here:
        'igemm-maxpool' (the fused kernel), 'igemm-bf16-maxpool' (the fused kernel computing
        in bfloat16, under "medium" on a bfloat16 path) or
        ``algorithm_for(input_shape) + '+max_pool2d'``.
        """
        cdef mk_conv_geom g, pg
        n, c, h, w = (int(v) for v in input_shape)
        xa = np.empty((n, c, h, w), self.compute_dtype)
        _, _, oshape = self._geometry(xa, &g)
        _conv_pool_geom(&pg, oshape, kernel_size, stride, padding, dilation, ceil_mode)
        cdef mk_conv_layer layer = self._layer()
        fused = mk_conv_maxpool_fused(&layer, &g, &pg, <int>active_isa(), effective_threads())
        if fused:
            return "igemm-bf16-maxpool" if fused == MK_CONV_ALGO_BF16_ROWS else "igemm-maxpool"
        return self.algorithm_for(input_shape) + "+max_pool2d"

    def forward(self, x, activation=None, residual=None):
        """Convolve ``x`` and return ``act(conv(x) + bias + residual)`` as a new ndarray.

        Parameters
        ----------
        x : array_like, shape (N, C_in, H, W) or (C_in, H, W)
            Any strides; cast to the compute dtype (float32, or float64 for float64 weights).
        activation : {None, 'relu', 'relu6', 'silu', 'hardswish', 'gelu', 'gelu_tanh', \
'sigmoid', 'tanh'}
            Fused after the bias and the residual (kernels/common/act.h's math: the bits of
            ``nn.functional``'s activation).
        residual : array_like, optional
            Same shape as the output; added before the activation.

        Returns
        -------
        ndarray, shape (N, C_out, OH, OW) (or (C_out, OH, OW) for a 3-D input)
        """
        return self._forward(x, activation, residual, False)

    def forward_mean(self, x, activation=None, residual=None):
        """Each channel's mean over the pixels of ``forward(x, activation, residual)``: a
        convolution with a global average pool fused in.

        Where the convolution runs f32-conv1x1-driver.c (a 1x1 stride-1 layer on a small map,
        AVX-512: MobileNetV2's last layer) each thread averages the channels it has just
        written, while they are in its caches; elsewhere the mean runs over the stored output
        (:func:`spatial_mean`), in the same summation order, so both agree bit for bit.

        Parameters
        ----------
        x, activation, residual
            As :meth:`forward`.

        Returns
        -------
        ndarray, shape (N, C_out) (or (C_out,) for a 3-D input)
        """
        return self._forward(x, activation, residual, True)

    cdef _forward(self, x, activation, residual, bint want_mean):
        """:meth:`forward`, or (``want_mean``) :meth:`forward_mean`."""
        cdef int act = _act_code(activation)
        dtype = self.compute_dtype
        cdef mk_conv_geom g
        xa, unbatched, oshape = self._geometry(x, &g)
        out = np.empty(oshape, dtype)
        res = None
        if residual is not None:
            res = _as_input(residual, "conv2d residual", dtype)
            if unbatched and res.ndim == 3:
                res = res[None]
            if res.shape != out.shape:
                raise ValueError(
                    f"conv2d: residual shape {tuple(res.shape)} does not match the output "
                    f"shape {tuple(out.shape)}"
                )
            res = np.ascontiguousarray(res)
        cdef cnp.ndarray mean
        cdef float *mp
        cdef const float *op
        cdef Py_ssize_t rows
        if g.N == 0:  # an empty batch: nothing to compute
            return np.empty(oshape[:2], dtype) if want_mean else out
        if not want_mean:
            self._run(&g, xa, out, res, act)
            return out[0] if unbatched else out
        if dtype != np.float32:
            self._run(&g, xa, out, res, act)
            mean = spatial_mean(out)
        else:
            mean = np.empty(oshape[:2], np.float32)
            mp = <float *>cnp.PyArray_DATA(mean)
            if self._run(&g, xa, out, res, act, mp) is not True:
                op = <const float *>cnp.PyArray_DATA(out)
                rows = <Py_ssize_t>g.N * self.out_channels
                with nogil:
                    mk_mean_rows_f32(op, rows, <Py_ssize_t>g.OH * g.OW, mp)
        return mean[0] if unbatched else mean

    cdef _run(self, mk_conv_geom *g, cnp.ndarray x, cnp.ndarray out, cnp.ndarray res, int act,
              float *mean=NULL):
        """Run the kernel for ``x`` into ``out``; True when it also wrote the channel means
        into ``mean`` (the lane-exact 1x1 path), None otherwise (then ``mean`` is untouched)."""
        cdef int nthreads = effective_threads()
        cdef int isa = <int>active_isa()
        cdef void *xp = cnp.PyArray_DATA(x)
        cdef void *op = cnp.PyArray_DATA(out)
        cdef void *rp = NULL if res is None else cnp.PyArray_DATA(res)
        cdef cnp.ndarray packed = self._packed
        cdef cnp.ndarray bias = self._bias
        cdef cnp.ndarray koff, scratch, wf, bf
        cdef void *wp = cnp.PyArray_DATA(packed)
        cdef void *bp = NULL
        cdef int groups = self.groups, cout = self.out_channels
        cdef mk_conv_choice c = self._choose(g, isa, nthreads)
        cdef int rc
        if c.algo == MK_CONV_ALGO_F64:
            if bias is not None:
                bp = cnp.PyArray_DATA(bias)
            with nogil:
                mk_conv2d_f64(g, <const double *>xp, groups, cout, <const double *>wp,
                              <const double *>bp, <double *>op, <const double *>rp, act,
                              nthreads)
        elif c.algo == MK_CONV_ALGO_DEPTHWISE:
            wf = packed if self._wtype == MK_W_F32 else np.ascontiguousarray(
                packed, dtype=np.float32)
            bf = None
            if bias is not None:
                bf = bias if self._wtype == MK_W_F32 else np.ascontiguousarray(
                    bias, dtype=np.float32)
                bp = cnp.PyArray_DATA(bf)
            wp = cnp.PyArray_DATA(wf)
            scratch = np.empty(mk_dwconv_scratch(g) * max(nthreads, 1), np.float32)
            with nogil:
                mk_dwconv2d_f32(g, <const float *>xp, <const float *>wp, <const float *>bp,
                                <float *>cnp.PyArray_DATA(scratch), <float *>op,
                                <const float *>rp, act, isa, nthreads)
        elif c.algo == MK_CONV_ALGO_WINOGRAD:
            wf = self._winograd_weights(c.wino_m, c.wino_eng, isa)
            scratch = _scratch(mk_conv_winograd_scratch(g, cout, c.wino_m, isa, nthreads,
                                                        c.wino_eng))
            with nogil:
                rc = mk_conv2d_winograd_f32(g, <const float *>xp, cout, c.wino_m,
                                            <const float *>cnp.PyArray_DATA(wf), c.wino_eng,
                                            <float *>cnp.PyArray_DATA(scratch), <float *>op,
                                            <const float *>rp, act, isa, nthreads)
            if rc != 0:
                raise MemoryError("conv2d: Winograd GEMM buffer allocation failed")
        elif c.algo == MK_CONV_ALGO_IM2COL:
            scratch = _scratch(mk_conv_im2col_size(g))
            koff = np.empty(g.C * g.KH * g.KW, np.intp)
            with nogil:
                mk_conv2d_im2col_f32(g, <const float *>xp, cout, <const float *>wp,
                                     <float *>cnp.PyArray_DATA(scratch),
                                     <Py_ssize_t *>cnp.PyArray_DATA(koff), <float *>op,
                                     <const float *>rp, act, nthreads)
        elif c.algo == MK_CONV_ALGO_ROWS or c.algo == MK_CONV_ALGO_BF16_ROWS:
            self._rows(g, NULL, xp, op, rp, act,
                       active_bf16() if c.algo == MK_CONV_ALGO_BF16_ROWS else 0, isa, nthreads)
        elif c.algo == MK_CONV_ALGO_1X1:
            koff = np.empty(g.C, np.intp)
            with nogil:
                mk_conv1x1_mean_f32(g.N, g.C, <Py_ssize_t>g.H * g.W, <const float *>xp, g.sn,
                                    g.sc, cout, <const float *>wp,
                                    <Py_ssize_t *>cnp.PyArray_DATA(koff), <float *>op,
                                    <const float *>rp, act, mean, nthreads)
            return True if mean != NULL else None
        elif c.algo == MK_CONV_ALGO_BF16:
            self._igemm_bf16(g, xp, op, rp, act, c.direct, nthreads)
        else:
            self._igemm(g, xp, op, rp, act, c.direct, isa, nthreads)

    cdef _igemm(self, mk_conv_geom *g, void *xp, void *op, void *rp, int act, bint direct,
                int isa, int nthreads):
        """The implicit GEMM (mk_conv2d_f32) over the phase image, or (``direct``) over the
        input itself."""
        cdef cnp.ndarray packed = self._packed
        cdef cnp.ndarray phase, wide
        cdef float *php = NULL
        cdef float *widep = NULL
        if not direct:
            phase = _scratch(mk_conv_phase_size(g, g.C))
            php = <float *>cnp.PyArray_DATA(phase)
        if self._wtype != MK_W_F32:
            wide = np.empty(packed.size, np.float32)
            widep = <float *>cnp.PyArray_DATA(wide)
        cdef cnp.ndarray koff = np.empty((g.C // self.groups) * g.KH * g.KW, np.intp)
        with nogil:
            mk_conv2d_f32(g, <const float *>xp, self.groups, self.out_channels,
                          cnp.PyArray_DATA(packed), self._wtype, widep, php,
                          <Py_ssize_t *>cnp.PyArray_DATA(koff), <float *>op,
                          <const float *>rp, act, isa, nthreads)

    cdef _rows(self, mk_conv_geom *g, mk_conv_geom *pg, void *xp, void *op, void *rp, int act,
               int path, int isa, int nthreads):
        """The igemm in row bands (at most 4 input channels): ``mk_conv2d_rows_f32``, or
        ``mk_conv2d_rows_bf16`` on bfloat16 path ``path`` (0: float32), max pooled by ``pg``
        in the bands when it is not NULL."""
        cdef cnp.ndarray scratch = _scratch(
            mk_conv_rows_scratch(path, g, pg, self.out_channels, nthreads))
        cdef cnp.ndarray koff = np.empty(g.C * g.KH * g.KW, np.intp)
        cdef cnp.ndarray w = self._bf16_panels(path) if path else self._packed
        cdef float *sp = <float *>cnp.PyArray_DATA(scratch)
        cdef Py_ssize_t *kp = <Py_ssize_t *>cnp.PyArray_DATA(koff)
        cdef void *wp = cnp.PyArray_DATA(w)
        with nogil:
            if path:
                mk_conv2d_rows_bf16(path, g, pg, <const float *>xp, self.out_channels,
                                    <const uint32_t *>wp, sp, kp, <float *>op,
                                    <const float *>rp, act, nthreads)
            else:
                mk_conv2d_rows_f32(g, pg, <const float *>xp, self.out_channels,
                                   <const float *>wp, sp, kp, <float *>op, <const float *>rp,
                                   act, isa, nthreads)

    cdef cnp.ndarray _bf16_panels(self, int path):
        """The pair panels of bfloat16 path ``path`` (see conv.h), packed on first use."""
        if self._bf16 is None:
            self._bf16 = {}
        cdef cnp.ndarray w16 = self._bf16.get(path)
        cdef int cin_g = self.in_channels // self.groups, cout_g = self.out_channels // self.groups
        cdef int taps = self.kernel_size[0] * self.kernel_size[1]
        if w16 is None:
            w16 = np.empty(mk_bf16_conv_panels_words(path, self.groups, cout_g, cin_g, taps),
                           np.uint32)
            mk_bf16_conv_pack_panels(path, cnp.PyArray_DATA(self._packed), self._wtype,
                                     self.groups, cout_g, cin_g, taps,
                                     <uint32_t *>cnp.PyArray_DATA(w16))
            self._bf16[path] = w16
        return w16

    cdef _igemm_bf16(self, mk_conv_geom *g, void *xp, void *op, void *rp, int act,
                     bint direct, int nthreads):
        """The bfloat16-compute implicit GEMM (mk_conv2d_bf16): one scratch holds the phase
        image or each thread's two phase planes (none when ``direct``), then the packed tiles
        or the pair images of a step."""
        cdef int path = active_bf16()
        cdef cnp.ndarray w16 = self._bf16_panels(path)
        # the phase image, or (pair image) each thread's two phase planes
        cdef Py_ssize_t nphase = 0 if direct else (
            mk_conv_phase_size(g, max(g.C, 2 * nthreads)) + 15) // 16 * 16
        cdef cnp.ndarray scratch = _scratch(
            nphase + mk_conv_bf16_tiles_words(path, g, self.groups, direct, nthreads))
        cdef float *php = NULL if direct else <float *>cnp.PyArray_DATA(scratch)
        cdef uint32_t *tiles = <uint32_t *>cnp.PyArray_DATA(scratch) + nphase
        cdef cnp.ndarray koff = np.empty((g.C // self.groups) * g.KH * g.KW, np.intp)
        with nogil:
            mk_conv2d_bf16(path, g, <const float *>xp, self.groups, self.out_channels,
                           <const uint32_t *>cnp.PyArray_DATA(w16), tiles, php,
                           <Py_ssize_t *>cnp.PyArray_DATA(koff), <float *>op,
                           <const float *>rp, act, nthreads)


cdef tuple _conv_pool_geom(mk_conv_geom *pg, tuple oshape, kernel_size, stride, padding,
                           dilation, ceil_mode):
    """Fill *pg, the max pooling geometry over a contiguous convolution output of shape
    oshape, from max_pool2d's arguments (checked); returns them as pairs (k, s, p, d)."""
    k, s, p, d = _pool_args("max_pool2d", kernel_size, stride, padding, dilation)
    pg.N, pg.C, pg.H, pg.W = oshape
    pg.sw, pg.sh = 1, pg.W
    pg.sc = <Py_ssize_t>pg.H * pg.W
    pg.sn = pg.C * pg.sc
    _fill_pool_window(pg, k, s, p, d, ceil_mode, "max_pool2d")
    return k, s, p, d


def pack_conv2d(weight, bias=None, stride=1, padding=0, dilation=1, groups=1, storage=None):
    """Pack a convolution's weights once for :meth:`PackedConv2d.forward`.

    Parameters
    ----------
    weight : array_like, shape (C_out, C_in/groups, KH, KW)
    bias : array_like, shape (C_out,), optional
    stride, dilation : int or (int, int)
    padding : int, (int, int), (top, left, bottom, right), 'valid' or 'same'
        'same' (stride 1 only) pads ``dilation*(k-1)`` in total, the odd one at the end, as torch.
    groups : int
    storage : {None, 'float32', 'float16', 'bfloat16', 'float64'}
        Weight storage; None takes float64 for a float64 weight and float32 otherwise.
        16-bit storage computes in float32.

    Returns
    -------
    PackedConv2d
    """
    w = _weight_array(weight)
    if w.ndim != 4:
        raise ValueError(
            f"pack_conv2d: weight must be 4-D (C_out, C_in/groups, KH, KW), got shape {w.shape}"
        )
    if storage is None:
        storage = "float64" if w.dtype == np.float64 else "float32"
    storage = str(getattr(storage, "name", storage))
    if storage not in _STORAGE:
        raise ValueError(
            f"pack_conv2d: storage must be 'float32', 'float16', 'bfloat16' or 'float64', "
            f"got {storage!r}"
        )
    cdef int cout = w.shape[0], cin_g = w.shape[1], kh = w.shape[2], kw = w.shape[3]
    groups = int(groups)
    if groups < 1 or cout % groups:
        raise ValueError(
            f"pack_conv2d: groups={groups} must be positive and divide out_channels={cout}"
        )
    if min(w.shape) < 1:
        raise ValueError(f"pack_conv2d: weight has an empty dimension, shape {w.shape}")
    stride = _pair(stride, "stride", "pack_conv2d")
    dilation = _pair(dilation, "dilation", "pack_conv2d")
    if min(stride) < 1 or min(dilation) < 1:
        raise ValueError(
            f"pack_conv2d: stride {stride} and dilation {dilation} must be positive"
        )
    _check_extent((kh, kw), dilation, "pack_conv2d")
    if isinstance(padding, str):
        if padding == "valid":
            pads = (0, 0, 0, 0)
        elif padding == "same":
            if stride != (1, 1):
                raise ValueError("pack_conv2d: padding='same' is not supported for strided "
                                 f"convolutions (stride={stride}), as in torch")
            th, tw = dilation[0] * (kh - 1), dilation[1] * (kw - 1)
            pads = (th // 2, tw // 2, th - th // 2, tw - tw // 2)
        else:
            raise ValueError(
                f"pack_conv2d: padding must be an int, a tuple, 'valid' or 'same', got "
                f"{padding!r}"
            )
    elif not isinstance(padding, (int, np.integer)) and len(tuple(padding)) == 4:
        pads = tuple(_in_range(int(p), "padding", "pack_conv2d") for p in padding)
    else:
        ph, pw = _pair(padding, "padding", "pack_conv2d")
        pads = (ph, pw, ph, pw)
    if min(pads) < 0:
        raise ValueError(f"pack_conv2d: padding must be non-negative, got {padding!r}")
    b = None
    if bias is not None:
        b = np.asarray(_weight_array(bias)).reshape(-1)
        if b.shape != (cout,):
            raise ValueError(
                f"pack_conv2d: bias must have shape ({cout},) to match the weight, got "
                f"{np.shape(b)}"
            )

    cdef PackedConv2d self = PackedConv2d.__new__(PackedConv2d)
    self._algorithm = "auto"
    self._wino = {}
    self.in_channels = cin_g * groups
    self.out_channels = cout
    self.groups = groups
    self.kernel_size = (kh, kw)
    self.stride = stride
    self.dilation = dilation
    self.padding = pads
    self.storage = storage
    self.has_bias = b is not None
    self.depthwise = (groups > 1 and groups == cout and cin_g == 1 and kh * kw <= _MAX_TAPS
                      and storage != "float64")
    self._wtype = _STORAGE[storage]
    sdtype = bfloat16_numpy() if storage == "bfloat16" else np.dtype(storage)

    if storage == "float64" or self.depthwise:
        self._packed = np.ascontiguousarray(w.astype(np.float64 if storage == "float64"
                                                     else np.float32), dtype=sdtype)
        self._packed = self._packed.reshape(cout, cin_g * kh * kw)
        self._bias = None if b is None else np.ascontiguousarray(
            b.astype(np.float64 if storage == "float64" else np.float32), dtype=sdtype)
        return self

    # panels of MR output channels: [bias[MR]][K x MR], zero padded, group by group
    cdef int cout_g = cout // groups
    cdef int npg = (cout_g + MK_CONV_MR - 1) // MK_CONV_MR
    cdef Py_ssize_t K = cin_g * kh * kw
    wf = w.astype(np.float32).reshape(groups, cout_g, K)
    packed = np.zeros((groups, npg * MK_CONV_MR, MK_CONV_MR + K), np.float32)
    packed[:, :cout_g, MK_CONV_MR:] = wf
    if b is not None:
        packed[:, :cout_g, 0] = b.astype(np.float32).reshape(groups, cout_g)
    # (g, panel, r, [bias|K]) -> (g, panel, [bias|K], r)
    packed = packed.reshape(groups, npg, MK_CONV_MR, MK_CONV_MR + K)
    bias_part = packed[:, :, :, 0]                                   # (g, np, MR)
    body = packed[:, :, :, MK_CONV_MR:].transpose(0, 1, 3, 2)        # (g, np, K, MR)
    flat = np.concatenate(
        [bias_part.reshape(groups, npg, MK_CONV_MR),
         body.reshape(groups, npg, K * MK_CONV_MR)], axis=2)
    self._packed = np.ascontiguousarray(flat.reshape(groups * npg, -1).astype(sdtype))
    self._bias = None
    return self


def _conv_from_geometry(in_channels, out_channels, groups, kernel_size, stride, dilation,
                        padding, storage, has_bias, algorithm, w, b):
    """pack_conv2d with a pickled geometry, checked."""
    for label, value in (("in_channels", in_channels), ("out_channels", out_channels),
                         ("groups", groups)):
        if type(value) is not int or not 0 < value < 2 ** 31:
            raise ValueError(f"PackedConv2d: {label} must be a positive int, got {value!r:.100}")
    if in_channels % groups:
        raise ValueError(f"PackedConv2d: groups={groups} must divide in_channels={in_channels}")
    if type(has_bias) is not bool:
        raise ValueError(f"PackedConv2d: has_bias must be a bool, got {has_bias!r:.100}")
    if algorithm not in _ALGORITHMS:
        raise ValueError(f"PackedConv2d: unknown algorithm {algorithm!r:.100}")
    kh, kw = _pair(kernel_size, "kernel_size", "PackedConv2d")
    if w is None:
        w = np.zeros((out_channels, in_channels // groups, kh, kw), np.float32)
        b = np.zeros(out_channels, np.float32) if has_bias else None
    packed = pack_conv2d(w, b, stride, padding, dilation, groups, storage)
    if (packed.in_channels, packed.kernel_size, packed.has_bias) != (
            in_channels, (kh, kw), has_bias):
        raise ValueError("PackedConv2d: the pickled weights do not match the geometry")
    packed.algorithm = algorithm
    return packed


def _repack_conv2d(in_channels, out_channels, groups, kernel_size, stride, dilation, padding,
                   storage, has_bias, algorithm, w, b):
    """Unpickle a PackedConv2d from its weights (packed again for this process)."""
    return _conv_from_geometry(in_channels, out_channels, groups, kernel_size, stride,
                               dilation, padding, storage, has_bias, algorithm, w, b)


def _attach_conv2d(in_channels, out_channels, groups, kernel_size, stride, dilation, padding,
                   storage, has_bias, algorithm, packed_handle, bias_handle):
    """Unpickle a shared PackedConv2d: map its segments after checking that the geometry is
    valid and implies exactly the packed arrays' sizes (found by packing zeros: the layout
    code is pack_conv2d's own; the weight's size is bounded by the mapped segment first)."""
    raw = _shared.attach(packed_handle, "shared PackedConv2d")
    kh, kw = _pair(kernel_size, "kernel_size", "PackedConv2d")
    if (type(out_channels) is int and type(in_channels) is int and type(groups) is int
            and groups > 0 and
            out_channels * (in_channels // groups) * kh * kw * 2 > raw.nbytes + 4096):
        raise ValueError(
            f"shared PackedConv2d: the handle's {raw.nbytes} bytes cannot hold a "
            f"({out_channels}, {in_channels} / {groups}, {kh}, {kw}) weight")
    ref = _conv_from_geometry(in_channels, out_channels, groups, kernel_size, stride,
                              dilation, padding, storage, has_bias, algorithm, None, None)
    cdef PackedConv2d out = <PackedConv2d>ref
    for label, handle, expect in (("weights", packed_handle, out._packed),
                                  ("bias", bias_handle, out._bias)):
        if expect is None:
            if handle is not None:
                raise ValueError(f"shared PackedConv2d: a {label} handle where none is packed")
            continue
        if not isinstance(handle, tuple) or len(handle) != 4 or handle[3] != expect.nbytes:
            raise ValueError(
                f"shared PackedConv2d: the {label} handle {handle!r:.200} does not hold the "
                f"{expect.nbytes} bytes this geometry packs to")
    out._packed = raw.view(out._packed.dtype).reshape(out._packed.shape)
    if out._bias is not None:
        braw = _shared.attach(bias_handle, "shared PackedConv2d")
        out._bias = braw.view(out._bias.dtype).reshape(out._bias.shape)
    out._wino = {}
    return out


def _placed_output(out, unbatched, n, channels, places, steps, nb, oh, ow):
    """``forward_shifted``'s ``out`` as a 4-D array and its ``places`` as tuples, checked (see
    there)."""
    what = "forward_shifted"
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or \
            not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"{what}: out must be a writeable C-contiguous float32 array")
    o = out[None] if unbatched else out
    if o.ndim != 4 or o.shape[0] != n or o.shape[1] != channels:
        raise ValueError(f"{what}: out must have shape ({n}, {channels}, H2, W2)"
                         f"{' without the batch axis' if unbatched else ''}, got {out.shape}")
    try:
        place = [tuple(int(v) for v in p) for p in places]
        sy, sx = (int(v) for v in steps)
    except (TypeError, ValueError):
        raise TypeError(f"{what}: places must be (oy, ox, rows, cols) and steps (sy, sx), got "
                        f"{places!r} and {steps!r}") from None
    if len(place) != nb or any(len(p) != 4 for p in place) or sy < 1 or sx < 1:
        raise ValueError(f"{what}: places must be {nb} (oy, ox, rows, cols) and steps positive, "
                         f"got {places!r} and {steps!r}")
    for oy, ox, rows, cols in place:
        if min(oy, ox, rows, cols) < 0 or rows > oh or cols > ow or (rows and cols and (
                oy + sy * (rows - 1) >= o.shape[2] or ox + sx * (cols - 1) >= o.shape[3])):
            raise ValueError(f"{what}: a block of {rows}x{cols} at {(oy, ox)} with steps "
                             f"{(sy, sx)} leaves out of {o.shape[2:]} (or the {(oh, ow)} grid)")
    return o, place


def kernel_name():
    """The wide implicit-GEMM kernel of the convolution configuration the active
    instruction-set level runs (``"f32-igemm-8x48-avx512"``, ...; ``conv-config.c``)."""
    return mk_conv_get_config(<int>active_isa()).name.decode()


def _set_winograd_engine(int mode):
    """Winograd GEMM orientation, for tests and benchmarks: -1 lets the plan choose (the
    default), 0 keeps the igemm orientation, 1 takes the GEMM engine's wherever the
    instruction set has it. Returns the previous mode."""
    return mk_conv_winograd_set_engine(mode)


def _set_l2_bytes(size_t n):
    """Make this extension's kernels size their L2 blocking for an L2 of ``n`` bytes (0: keep
    the current value); returns the value before. For tests and tuning runs (the results do
    not depend on it); call it while no kernel runs."""
    return set_l2_bytes(n)


def _weight_array(obj):
    if isinstance(obj, np.ndarray):
        arr = obj
    else:
        from modulekit._ext._tensor import as_array
        arr = np.asarray(as_array(obj))
    if arr.dtype.kind != "f" and not is_bfloat16(arr.dtype):
        raise TypeError(f"pack_conv2d: weights must be floating point, got dtype {arr.dtype}")
    if not arr.dtype.isnative:  # weights are copied into the packed layout anyway
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr


def fold_batchnorm(weight, bias, running_mean, running_var, bn_weight=None, bn_bias=None,
                   eps=1e-5):
    """Fold an inference-mode BatchNorm into the preceding convolution's weight and bias.

    ``bn(conv(x)) = conv'(x)`` with ``scale = bn_weight / sqrt(running_var + eps)``,
    ``weight' = weight * scale[:, None, None, None]`` and
    ``bias' = (bias - running_mean) * scale + bn_bias`` (computed in float64).

    Returns
    -------
    (weight', bias') : ndarrays in the weight's dtype (float32 for 16-bit weights).
    """
    w = np.asarray(_weight_array(weight))
    out_dtype = np.float64 if w.dtype == np.float64 else np.float32
    cout = w.shape[0]
    def vec(v, name, default):
        if v is None:
            return np.full(cout, default, np.float64)
        a = np.asarray(_weight_array(v), dtype=np.float64).reshape(-1)
        if a.shape != (cout,):
            raise ValueError(
                f"fold_batchnorm: {name} must have shape ({cout},), got {a.shape}")
        return a
    mean = vec(running_mean, "running_mean", 0.0)
    var = vec(running_var, "running_var", 1.0)
    gamma = vec(bn_weight, "bn_weight", 1.0)
    beta = vec(bn_bias, "bn_bias", 0.0)
    b = vec(bias, "bias", 0.0)
    scale = gamma / np.sqrt(var + float(eps))
    w2 = (w.astype(np.float64) * scale.reshape((cout,) + (1,) * (w.ndim - 1))).astype(out_dtype)
    b2 = ((b - mean) * scale + beta).astype(out_dtype)
    return w2, b2


# ---------------------------------------------------------------------------------------------
# pooling and batch norm


cdef object _pool_input(x, what):
    xa = _as_input(x, what, _float_dtype_of(x))
    unbatched = xa.ndim == 3
    if unbatched:
        xa = xa[None]
    _check_4d(xa, what)
    return xa, unbatched


def _float_dtype_of(x):
    dt = getattr(x, "dtype", None)
    try:
        if dt is not None and np.dtype(dt) == np.float64:
            return np.dtype(np.float64)
    except TypeError:
        pass
    return np.dtype(np.float32)


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """2-D max pooling as ``torch.nn.functional.max_pool2d`` (NaN propagates).

    ``x``: (N, C, H, W) or (C, H, W), any strides; float64 stays float64, everything else
    computes in float32. ``stride`` defaults to ``kernel_size``; ``padding`` is at most half the
    kernel, as torch requires.
    """
    xa, unbatched = _pool_input(x, "max_pool2d")
    k, s, p, d = _pool_args("max_pool2d", kernel_size, stride, padding, dilation)
    cdef mk_conv_geom g
    _fill_pool_geom(&g, xa, k, s, p, d, ceil_mode, "max_pool2d")
    cdef cnp.ndarray xin = xa
    cdef cnp.ndarray out = np.empty((g.N, g.C, g.OH, g.OW), xa.dtype)
    if g.N == 0:
        return out
    cdef int nt = effective_threads()
    cdef void *xp = cnp.PyArray_DATA(xin)
    cdef void *op = cnp.PyArray_DATA(out)
    if xa.dtype == np.float64:
        with nogil:
            mk_max_pool2d_f64(&g, <const double *>xp, <double *>op, nt)
    else:
        with nogil:
            if (active_isa() < MK_ISA_AVX512 or
                    not mk_max_pool2d_f32_avx512(&g, <const float *>xp, <float *>op, nt)):
                mk_max_pool2d_f32(&g, <const float *>xp, <float *>op, nt)
    return out[0] if unbatched else out


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """2-D average pooling as ``torch.nn.functional.avg_pool2d``."""
    xa, unbatched = _pool_input(x, "avg_pool2d")
    k, s, p, _ = _pool_args("avg_pool2d", kernel_size, stride, padding, 1)
    cdef int divisor = 0
    if divisor_override is not None:
        divisor = _in_range(int(divisor_override), "divisor_override", "avg_pool2d")
        if divisor == 0:
            raise ValueError("avg_pool2d: divisor_override must be non-zero")
    cdef mk_conv_geom g
    _fill_pool_geom(&g, xa, k, s, p, (1, 1), ceil_mode, "avg_pool2d")
    cdef cnp.ndarray xin = xa
    cdef cnp.ndarray out = np.empty((g.N, g.C, g.OH, g.OW), xa.dtype)
    if g.N == 0:
        return out
    cdef int nt = effective_threads()
    cdef int cip = bool(count_include_pad)
    cdef void *xp = cnp.PyArray_DATA(xin)
    cdef void *op = cnp.PyArray_DATA(out)
    if xa.dtype == np.float64:
        with nogil:
            mk_avg_pool2d_f64(&g, <const double *>xp, <double *>op, cip, divisor, nt)
    else:
        with nogil:
            mk_avg_pool2d_f32(&g, <const float *>xp, <float *>op, cip, divisor, nt)
    return out[0] if unbatched else out


def adaptive_avg_pool2d(x, output_size):
    """2-D adaptive average pooling as ``torch.nn.functional.adaptive_avg_pool2d``.

    ``output_size``: int or (int or None, int or None); None keeps the input's size.
    """
    xa, unbatched = _pool_input(x, "adaptive_avg_pool2d")
    if isinstance(output_size, (int, np.integer)):
        osz = (int(output_size), int(output_size))
    else:
        osz = tuple(output_size)
        if len(osz) != 2:
            raise ValueError(
                f"adaptive_avg_pool2d: output_size must be an int or a pair, got {output_size!r}")
        osz = (xa.shape[2] if osz[0] is None else int(osz[0]),
               xa.shape[3] if osz[1] is None else int(osz[1]))
    if min(osz) < 1 or max(osz) > MAX_WINDOW:
        raise ValueError(
            f"adaptive_avg_pool2d: output_size must be positive and at most {MAX_WINDOW} (2**20), "
            f"got {osz}")
    cdef mk_conv_geom g
    _fill_input_geom(&g, xa)
    g.OH, g.OW = osz
    cdef cnp.ndarray xin = xa
    cdef cnp.ndarray out = np.empty((g.N, g.C, g.OH, g.OW), xa.dtype)
    if g.N == 0:
        return out
    cdef int nt = effective_threads()
    cdef void *xp = cnp.PyArray_DATA(xin)
    cdef void *op = cnp.PyArray_DATA(out)
    if xa.dtype == np.float64:
        with nogil:
            mk_adaptive_avg_pool2d_f64(&g, <const double *>xp, <double *>op, nt)
    else:
        with nogil:
            mk_adaptive_avg_pool2d_f32(&g, <const float *>xp, <float *>op, nt)
    return out[0] if unbatched else out


def batch_norm_inference(x, scale, shift, activation=None):
    """``act(x * scale[c] + shift[c])`` per channel of an (N, C, ...) input.

    ``scale = weight / sqrt(running_var + eps)``, ``shift = bias - running_mean * scale``.
    Inputs of rank 2 to 4 ((N, C), (N, C, L), (N, C, H, W)); float64 stays float64.
    """
    cdef int act = _act_code(activation)
    dt = _float_dtype_of(x)
    xa = _as_input(x, "batch_norm", dt)
    if xa.ndim < 2 or xa.ndim > 4:
        raise ValueError(
            f"batch_norm: expected a 2-D, 3-D or 4-D (N, C, ...) input, got shape {xa.shape}")
    shape = xa.shape
    x4 = xa.reshape(shape + (1,) * (4 - xa.ndim)) if xa.ndim < 4 else xa
    if 0 in x4.shape:
        return np.empty(shape, dt)
    cdef cnp.ndarray sc = aligned(np.ascontiguousarray(np.asarray(scale, dt).reshape(-1)))
    cdef cnp.ndarray sh = aligned(np.ascontiguousarray(np.asarray(shift, dt).reshape(-1)))
    if sc.shape[0] != shape[1] or sh.shape[0] != shape[1]:
        raise ValueError(
            f"batch_norm: expected {shape[1]} channel scales and shifts, got "
            f"{sc.shape[0]} and {sh.shape[0]}")
    cdef mk_conv_geom g
    _fill_input_geom(&g, x4)
    cdef cnp.ndarray xin = x4
    cdef cnp.ndarray out = np.empty(shape, dt)
    cdef int nt = effective_threads()
    cdef void *xp = cnp.PyArray_DATA(xin)
    cdef void *op = cnp.PyArray_DATA(out)
    cdef void *sp = cnp.PyArray_DATA(sc)
    cdef void *hp = cnp.PyArray_DATA(sh)
    if dt == np.float64:
        with nogil:
            mk_scale_shift_f64(&g, <const double *>xp, <const double *>sp,
                               <const double *>hp, <double *>op, act, nt)
    else:
        with nogil:
            mk_scale_shift_f32(&g, <const float *>xp, <const float *>sp,
                               <const float *>hp, <float *>op, act, nt)
    return out


def _pool_args(what, kernel_size, stride, padding, dilation):
    """A pooling's arguments as checked pairs ``(k, s, p, d)``; ``stride`` None (or empty)
    is ``kernel_size``, as torch has it."""
    k = _pair(kernel_size, "kernel_size", what)
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) \
        else _pair(stride, "stride", what)
    p = _pair(padding, "padding", what)
    d = _pair(dilation, "dilation", what)
    if min(k) < 1 or min(s) < 1 or min(d) < 1:
        raise ValueError(
            f"{what}: kernel_size {k}, stride {s} and dilation {d} must be positive")
    if min(p) < 0 or p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise ValueError(
            f"{what}: padding {p} must be non-negative and at most half the kernel size {k}")
    _check_extent(k, d, what)
    return k, s, p, d


cdef void _fill_pool_geom(mk_conv_geom *g, cnp.ndarray x, k, s, p, d, ceil_mode, what) except *:
    _fill_input_geom(g, x)
    _fill_pool_window(g, k, s, p, d, ceil_mode, what)


cdef void _fill_pool_window(mk_conv_geom *g, k, s, p, d, ceil_mode, what) except *:
    """The window fields and output size of a pooling over g's input fields."""
    g.KH, g.KW = k
    g.sy, g.sx = s
    g.pt, g.pl = p
    g.pb, g.pr = p
    g.dy, g.dx = d
    g.OH = pool_output_size(g.H, g.KH, g.sy, g.pt, g.dy, ceil_mode)
    g.OW = pool_output_size(g.W, g.KW, g.sx, g.pl, g.dx, ceil_mode)
    if g.OH < 1 or g.OW < 1:
        raise ValueError(
            f"{what}: input spatial size ({g.H}, {g.W}) is too small for kernel {k} with "
            f"padding {p} and dilation {d} (output would be ({g.OH}, {g.OW}))")


# ---------------------------------------------------------------------------------------------
# depthwise chains: [1x1] -> depthwise 3x3 -> 1x1 (kernels/conv/f32-invres-driver.c)

#: Output rows per band of the fused block: the band's expanded rows and depthwise output
#: (about ``chid * R * (stride * W + OW)`` floats) are kept within this many bytes on the
#: reference machine's 1 MiB L2, scaled to the CPU's L2 (``kernels/common/caches.h``), so they
#: stay in L2 between the three steps; a whole image's rows when they fit in twice that (small
#: maps: one band, no short last band and the longest pixel runs). Measured on MobileNetV2's
#: blocks (1 MiB L2): 4 rows at 112x112, 8 at 56x56, whole images from 28x28 down; twice
#: those on a 2 MiB L2 (the Xeon without AMX, the blocks alone: 0.94-1.01x the time of the
#: 1 MiB bands).
INVRES_BAND_BYTES = 512 * 1024


def spatial_mean(x):
    """Each channel's mean over its pixels (a global average pool, flattened).

    float32 input: ``mk_mean_rows_f32``'s fixed summation order (the order
    :meth:`PackedConv2d.forward_mean` uses, so the two agree bit for bit); other dtypes:
    NumPy's contiguous row sum divided by the pixel count.

    Parameters
    ----------
    x : array_like, shape (N, C, H, W)

    Returns
    -------
    ndarray, shape (N, C), x's floating dtype (float32 for other dtypes)
    """
    xa = np.asarray(x)
    _check_4d(xa, "spatial_mean")
    if xa.shape[0] == 0:
        return np.empty((0, xa.shape[1]), np.float64 if xa.dtype == np.float64 else np.float32)
    cdef Py_ssize_t n = xa.shape[0], c = xa.shape[1], hw = xa.shape[2] * xa.shape[3]
    if xa.dtype != np.float32 and xa.dtype.kind == "f":
        return np.einsum("ncp->nc", np.reshape(xa, (n, c, hw))) / xa.dtype.type(hw)
    cdef cnp.ndarray xc = aligned(np.ascontiguousarray(xa, dtype=np.float32))
    cdef cnp.ndarray mean = np.empty((n, c), np.float32)
    with nogil:
        mk_mean_rows_f32(<const float *>cnp.PyArray_DATA(xc), n * c, hw,
                         <float *>cnp.PyArray_DATA(mean))
    return mean


def _chain_acts(activations):
    """The three MK_ACT codes of a chain's ``activations`` (a 3-sequence of epilogue names)."""
    if not isinstance(activations, (tuple, list)) or len(activations) != 3:
        raise ValueError(
            "depthwise_chain: activations must be a sequence of three epilogue names or None "
            f"(expand, depthwise, project), got {activations!r}")
    return tuple(_act_code(a) for a in activations)


def _chain_fusable(expand, dw, project):
    """Whether the fused kernel (f32-invres-driver.c) takes these three convolutions."""
    cdef PackedConv2d e = expand
    cdef PackedConv2d d = dw
    cdef PackedConv2d p = project
    if not (d.depthwise and d.kernel_size == (3, 3) and d.dilation == (1, 1)
            and d.stride in ((1, 1), (2, 2)) and d._wtype == MK_W_F32 and d.storage == "float32"):
        return False
    for c in ((p,) if e is None else (e, p)):
        if (c.storage != "float32" or c.groups != 1 or c.kernel_size != (1, 1)
                or c.stride != (1, 1) or c.padding != (0, 0, 0, 0) or c.dilation != (1, 1)):
            return False
    return True


def depthwise_chain(x, expand, dw, project, activations, residual=False, band_rows=0):
    """A pointwise -> depthwise 3x3 -> pointwise chain of convolutions in one call, fused in
    row bands (MobileNetV2's inverted residual block, MobileNet/EfficientNet-style blocks).

    Computes ``act_p(project(act_d(dw(act_e(expand(x))))) (+ x))``, each convolution with its
    bias (a folded BatchNorm's included) and the epilogue activation ``activations`` names,
    as the three layers would one after the other, equal to them bit for bit. On AVX-512 the
    chain runs in bands of output rows (``kernels/conv/f32-invres-driver.c``), so the expanded
    tensor never leaves the cache; on other instruction sets, for other geometries or weight
    storage the three convolutions run one after the other. A chain run many times is cheaper
    through a :class:`DepthwiseChain` (this builds one per call).

    Parameters
    ----------
    x : array_like, shape (N, C_in, H, W)
        Chain input, cast to float32.
    expand : PackedConv2d or None
        1x1, stride 1, no padding, ``C_in -> C_hid``; None when the chain starts with the
        depthwise convolution (``C_hid == C_in``).
    dw : PackedConv2d
        Depthwise ``C_hid`` 3x3 (stride 1 or 2, dilation 1, any padding).
    project : PackedConv2d
        1x1 ``C_hid -> C_out``.
    activations : (str or None, str or None, str or None)
        The epilogues of expand, depthwise and project (``PackedConv2d.forward``'s names);
        the project's runs after the residual.
    residual : bool
        Add ``x`` to the output (needs stride 1 and ``C_out == C_in``).
    band_rows : int
        Output rows per band; 0 picks them from ``INVRES_BAND_BYTES`` scaled to the CPU's L2
        (and, with fewer images than threads, small enough that every thread gets a range of
        rows).

    Returns
    -------
    ndarray, shape (N, C_out, OH, OW), float32
    """
    return DepthwiseChain(expand, dw, project, activations, residual)(x, band_rows)


cdef class DepthwiseChain:
    """A depthwise chain (see :func:`depthwise_chain`) checked once, to run many times.

    The constructor checks that the three convolutions chain and whether the fused kernel can
    run them; each call then checks only the input. The geometry, band rows and scratch size
    of the last input shape (and thread count) are kept, so a call with the same shape as the
    previous one (a model's steady state) goes straight to the kernel: the per-call Python
    work was about 8 us per block on MobileNetV2 (its objects are cold after each block's
    megabytes of activations), 6% of the network at batch 1.

    Parameters
    ----------
    expand, dw, project, activations, residual
        As for :func:`depthwise_chain`.
    """

    cdef readonly PackedConv2d expand, dw, project
    cdef readonly bint residual
    cdef readonly tuple activations
    cdef bint _fusable
    cdef int _cin, _chid, _cout, _ae, _ad, _ap
    cdef cnp.ndarray _dwb
    # the last input shape's geometry: (N, H, W), thread count and band_rows it was built for
    cdef mk_conv_geom _g
    cdef int _R, _nt, _band
    cdef Py_ssize_t _nscratch
    cdef bint _ready

    @staticmethod
    def fusable(expand, dw, project, activations, residual=False):
        """Whether these three float32 convolutions chain and the fused kernel takes their
        geometry (a chain it does not take still runs, one convolution after the other)."""
        try:
            DepthwiseChain(expand, dw, project, activations, residual)
        except (ValueError, TypeError):
            return False
        return bool(_chain_fusable(expand, dw, project))

    def __init__(self, expand, PackedConv2d dw, PackedConv2d project, activations,
                 residual=False):
        cdef PackedConv2d e = expand
        self._ae, self._ad, self._ap = _chain_acts(activations)
        if not (dw.groups == dw.in_channels == dw.out_channels):
            raise ValueError("depthwise_chain: the middle convolution must be depthwise "
                             f"(groups == channels), got groups={dw.groups}")
        cin = e.in_channels if e is not None else dw.in_channels
        chid = dw.in_channels
        if (e is not None and e.out_channels != chid) or project.in_channels != chid:
            raise ValueError(
                f"depthwise_chain: channels do not chain: expand "
                f"{None if e is None else (e.in_channels, e.out_channels)}, depthwise "
                f"{dw.in_channels}, project {(project.in_channels, project.out_channels)}"
            )
        if residual and (dw.stride != (1, 1) or project.out_channels != cin):
            raise ValueError(
                "depthwise_chain: the residual needs stride 1 and as many output channels as "
                f"input channels (stride {dw.stride}, {cin} -> {project.out_channels})"
            )
        self.expand, self.dw, self.project = e, dw, project
        self.residual = bool(residual)
        self.activations = tuple(activations)
        self._fusable = _chain_fusable(e, dw, project)
        self._cin, self._chid, self._cout = cin, chid, project.out_channels
        self._dwb = dw._bias if dw._bias is not None else np.zeros(chid, np.float32)
        self._ready = False

    cdef _plan(self, cnp.ndarray xa, int nthreads, int band_rows):
        """Geometry and band rows for ``xa`` (checked 4-D float32 C-contiguous)."""
        cdef PackedConv2d d = self.dw
        cdef mk_conv_geom g
        _fill_input_geom(&g, xa)
        g.KH = g.KW = 3
        g.sy, g.sx = d.stride
        g.pt, g.pl, g.pb, g.pr = d.padding
        g.dy = g.dx = 1
        if g.H + g.pt + g.pb < 3 or g.W + g.pl + g.pr < 3:
            raise ValueError(
                f"depthwise_chain: input spatial size ({g.H}, {g.W}) with padding "
                f"{d.padding} is smaller than the 3x3 kernel"
            )
        oshape = d.output_shape((<object>xa).shape)
        g.OH, g.OW = oshape[2], oshape[3]
        mk_conv_geometry(&g)
        cdef bint has_e = self.expand is not None
        cdef int R = band_rows
        cdef Py_ssize_t budget
        if R <= 0:
            per_row = 4 * self._chid * ((g.sy * g.W if has_e else 0) + g.OW)
            budget = mk_l2_scaled(INVRES_BAND_BYTES)
            if per_row * g.OH <= 2 * budget:
                R = g.OH
            else:
                R = max(1, min(g.OH, budget // max(per_row, 1)))
        R = min(R, g.OH)
        if band_rows <= 0 and g.N < nthreads and not (
            R == g.OH and mk_invres_channel_split(&g, has_e, nthreads)
        ):
            # threads split an image's rows: at least one range of R rows per thread (the rows
            # two ranges share are expanded by both)
            R = min(R, max(1, -(-g.OH * g.N // nthreads)))
        self._g = g
        self._R = R
        self._nt = nthreads
        self._band = band_rows
        self._nscratch = mk_invres_scratch(&g, self._chid, has_e, R) * max(nthreads, 1)
        self._ready = True

    def __call__(self, x, band_rows=0):
        """Run the block on ``x`` (N, C_in, H, W); returns (N, C_out, OH, OW) float32."""
        if not mk_conv_get_config(<int>active_isa()).lane_exact or not self._fusable:
            ae, ad, ap = self.activations
            y = x if self.expand is None else self.expand.forward(x, ae)
            y = self.dw.forward(y, ad)
            return self.project.forward(y, ap, x if self.residual else None)
        cdef int nthreads = effective_threads()
        cdef int band = band_rows
        cdef cnp.ndarray xa
        cdef cnp.npy_intp *sh
        cdef bint same = False
        if (type(x) is np.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>x) == cnp.NPY_FLOAT32
                and not cnp.PyArray_ISBYTESWAPPED(<cnp.ndarray>x)
                and cnp.PyArray_NDIM(<cnp.ndarray>x) == 4
                and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x)
                and cnp.PyArray_ISALIGNED(<cnp.ndarray>x)):
            xa = <cnp.ndarray>x
            if self._ready and nthreads == self._nt and band == self._band:
                sh = cnp.PyArray_DIMS(xa)
                same = (sh[0] == self._g.N and sh[1] == self._cin and sh[2] == self._g.H
                        and sh[3] == self._g.W)
        else:
            xa = _as_input(x, "depthwise_chain", np.float32)
        if not same:
            _check_4d(xa, "depthwise_chain")
            if xa.shape[0] == 0:
                raise ValueError("depthwise_chain: expected a non-empty batch, got shape "
                                 f"{(<object>xa).shape}")
            if xa.shape[1] != self._cin:
                raise ValueError(
                    f"depthwise_chain: expected input with {self._cin} channels, got "
                    f"{xa.shape[1]}"
                )
            xa = np.ascontiguousarray(xa)
            self._plan(xa, nthreads, band)
        cdef mk_conv_geom g = self._g
        cdef int R = self._R
        cdef cnp.npy_intp dims[4]
        dims[0], dims[1], dims[2], dims[3] = g.N, self._cout, g.OH, g.OW
        cdef cnp.ndarray out = cnp.PyArray_EMPTY(4, dims, cnp.NPY_FLOAT32, 0)
        # the calling thread's kept scratch: the same memory every block, so it is in the
        # caches (a fresh allocation's lines are cold and their first writes read memory)
        cdef cnp.ndarray scratch = _scratch(self._nscratch)
        dims[0] = self._cin + self._chid
        cdef cnp.ndarray koff = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INTP, 0)
        cdef cnp.ndarray dwt = self.dw._packed
        cdef cnp.ndarray wpp = self.project._packed
        cdef cnp.ndarray wpe
        cdef const float *xp = <const float *>cnp.PyArray_DATA(xa)
        cdef const float *wep = NULL
        if self.expand is not None:
            wpe = self.expand._packed
            wep = <const float *>cnp.PyArray_DATA(wpe)
        cdef const float *rp = xp if self.residual else NULL
        cdef int cout = self._cout, chid = self._chid
        with nogil:
            mk_invres_f32(&g, xp, chid, wep, <const float *>cnp.PyArray_DATA(dwt),
                          <const float *>cnp.PyArray_DATA(self._dwb), cout,
                          <const float *>cnp.PyArray_DATA(wpp),
                          <Py_ssize_t *>cnp.PyArray_DATA(koff), <float *>cnp.PyArray_DATA(out),
                          rp, <float *>cnp.PyArray_DATA(scratch), R, self._ae, self._ad,
                          self._ap, nthreads)
        return out
