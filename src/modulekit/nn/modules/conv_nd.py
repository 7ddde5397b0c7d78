"""``Conv1d``, ``Conv3d`` and ``ConvTranspose1d/2d/3d`` over the packed 2-D convolution engine,
and the input padding of ``padding_mode`` 'reflect', 'replicate' and 'circular' (all convs).

How each runs on :class:`~modulekit._ext._conv.PackedConv2d` (weights packed once):

- **Conv1d** without groups or dilation is one packed GEMM per image (``PackedLinear``,
  weight packed as (C_out, K·C_in)) over the input in channels-last order, where the im2col
  matrix is a strided view (row ``l`` is the contiguous run of K·C_in values from position
  ``l·stride``): no im2col copy. The input is copied to (N, L, C) once by the blocked
  transpose kernel (``_ops.transpose_into``; not at all when it already is channels-last in
  memory and needs no padding, e.g. the previous Conv1d's output)
  and the result is returned as an (N, C_out, L_out) view of the (N, L_out, C_out) GEMM
  output, so a stack of Conv1d layers transposes nothing between layers. (Against the
  height-1 implicit GEMM: 1.45-1.65x faster on wav2vec2-base's 512->512 k3 s2 layer, 1.8x on
  its first layer, 1->512 k10 s5; ``bench/performance_notes.md``.) Grouped or dilated Conv1d
  are a 2-D convolution of height 1: the (N, C, L) input viewed as (N, C, 1, L) (no copy),
  the (C_out, C_in/g, K) weight packed as (C_out, C_in/g, 1, K).
- **Conv3d** stacks the kernel's depth taps into the channels: for each output depth the KD
  input planes it reads (zeros in the depth padding) become KD x C channels of one image, so
  the whole convolution is one 2-D convolution over (N * OD) images of C·KD channels with the
  weight reshaped (C_out, C_in/g · KD, KH, KW) (``_PackedConvNd._stack_depth``; a kernel of
  depth 1, stride 1, unpadded, needs no copy at batch 1).
- **ConvTranspose** is split by stride phase: an output position ``o`` along an axis with
  ``(o + padding) % stride == r`` receives exactly the taps ``k`` with ``k·dilation % stride
  == r``, which read consecutive inputs, so phase ``r`` is an ordinary stride-1 convolution
  with the flipped sub-kernel of those taps (dilation ``dilation / gcd(dilation, stride)``)
  and a zero padding fixed by the input size (``PackedConv2d.with_padding``: no re-pack). No
  multiply-add is wasted on the zeros a zero-insertion (or col2im) formulation would add;
  the phases' outputs are interleaved into the result (a single phase when every stride is
  1, written nowhere else). Phases without taps hold the bias.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from modulekit._ext import _conv, _gemm, _ops
from modulekit._ext._tensor import Parameter
from modulekit.device import as_device
from modulekit.dtypes import as_dtype, float32
from modulekit.nn._input import as_input
from modulekit.nn._random import default_generator
from modulekit.nn.modules._packed import PackedWeightLayer

__all__ = [
    "Conv1d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "pack_conv_nd",
    "pack_conv_transpose_nd",
    "pad_input",
]

PADDING_MODES = ("zeros", "reflect", "replicate", "circular")
_NP_PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


# ---------------------------------------------------------------------------------------------
# argument checks


def _ntuple(value, n: int, name: str, what: str) -> tuple[int, ...]:
    """An int or a sequence of ``n`` ints (one int means all) as an ``n``-tuple, each within
    the kernels' range (``_conv.MAX_WINDOW``)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        v = _conv._in_range(int(value), name, what)
        return (v,) * n
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(
            f"{what}: {name} must be an int or a tuple of {n} ints, got {value!r}"
        ) from None
    if len(items) == 1:
        items = items * n
    if len(items) != n or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items
    ):
        raise TypeError(f"{what}: {name} must be an int or a tuple of {n} ints, got {value!r}")
    return tuple(_conv._in_range(int(v), name, what) for v in items)


def _check_channels(in_channels, out_channels, groups, what: str) -> None:
    for name, value in (
        ("in_channels", in_channels),
        ("out_channels", out_channels),
        ("groups", groups),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{what}: {name} must be a positive int, got {value!r}")
    if in_channels % groups:
        raise ValueError(f"{what}: in_channels must be divisible by groups")
    if out_channels % groups:
        raise ValueError(f"{what}: out_channels must be divisible by groups")


def _check_window(kernel_size, stride, dilation, what: str) -> None:
    if min(kernel_size) < 1 or min(stride) < 1 or min(dilation) < 1:
        raise ValueError(
            f"{what}: kernel_size {kernel_size}, stride {stride} and dilation {dilation} must "
            "be positive"
        )
    for k, d in zip(kernel_size, dilation):
        if d * (k - 1) + 1 > _conv.MAX_WINDOW:
            raise ValueError(
                f"{what}: the dilated kernel, dilation * (kernel_size - 1) + 1 = "
                f"{d * (k - 1) + 1} (dilation {dilation}, kernel_size {kernel_size}), must be "
                f"at most {_conv.MAX_WINDOW} (2**20)"
            )


def _layer_dtype(dtype, device, what: str):
    if device is not None:
        as_device(device)
    dtype = float32 if dtype is None else as_dtype(dtype)
    if not dtype.is_floating:
        raise TypeError(f"{what}: dtype must be a floating type, got {dtype.name}")
    return dtype


def _batched(x: np.ndarray, nd: int, in_channels: int, what: str):
    """``x`` as (N, C, *spatial) and whether it came unbatched; checks the rank, the channel
    count and that no spatial size is zero."""
    if x.ndim == nd + 1:
        x, unbatched = x[None], True
    elif x.ndim == nd + 2:
        unbatched = False
    else:
        raise ValueError(
            f"{what}: expected a {nd + 1}-D (C, {_axes(nd)}) or {nd + 2}-D (N, C, {_axes(nd)}) "
            f"input, got shape {x.shape}"
        )
    if x.shape[1] != in_channels:
        raise ValueError(
            f"{what}: expected input with {in_channels} channels, got {x.shape[1]} (input "
            f"shape {x.shape[1:] if unbatched else x.shape})"
        )
    if 0 in x.shape[2:]:
        raise ValueError(f"{what}: expected non-empty spatial dimensions, got shape {x.shape}")
    return x, unbatched


def _axes(nd: int) -> str:
    return {1: "L", 2: "H, W", 3: "D, H, W"}[nd]


# ---------------------------------------------------------------------------------------------
# padding_mode


def pad_input(x: np.ndarray, pads, mode: str, what: str = "conv") -> np.ndarray:
    """Pad the spatial axes of ``x`` (N, C, *spatial) as torch's ``F.pad`` does for the
    convolutions' ``padding_mode``.

    Parameters
    ----------
    x : ndarray
        (N, C, *spatial), any strides.
    pads : sequence of (int, int)
        (before, after) per spatial axis, non-negative.
    mode : {'zeros', 'reflect', 'replicate', 'circular'}
    what : str
        Names the layer in errors.

    Raises
    ------
    ValueError
        'reflect' with a padding not smaller than the axis, 'circular' with a padding larger
        than it (the input would wrap more than once), as torch refuses them.
    """
    spatial = x.shape[2:]
    for (lo, hi), size in zip(pads, spatial):
        if mode == "reflect" and max(lo, hi) >= size:
            raise ValueError(
                f"{what}: padding_mode='reflect' needs each padding smaller than the input's "
                f"size along its axis: padding ({lo}, {hi}) for size {size} (input shape "
                f"{x.shape})"
            )
        if mode == "circular" and max(lo, hi) > size:
            raise ValueError(
                f"{what}: padding_mode='circular' needs each padding at most the input's size "
                f"along its axis (it would wrap around more than once): padding ({lo}, {hi}) "
                f"for size {size} (input shape {x.shape})"
            )
    if not any(lo or hi for lo, hi in pads):
        return x
    width = [(0, 0), (0, 0)] + [tuple(p) for p in pads]
    if mode == "zeros":
        return np.pad(x, width)
    return np.pad(x, width, mode=_NP_PAD_MODES[mode])


def _same_pads(kernel_size, dilation) -> tuple[tuple[int, int], ...]:
    """padding='same': ``dilation * (k - 1)`` in total, the odd element at the end (torch)."""
    pads = []
    for k, d in zip(kernel_size, dilation):
        total = d * (k - 1)
        pads.append((total // 2, total - total // 2))
    return tuple(pads)


# ---------------------------------------------------------------------------------------------
# packed kernels


class _PackedConvNd:
    """A 1-, 2- or 3-D convolution over one ``PackedConv2d``, or for the GEMM-shaped Conv1d
    one ``PackedLinear`` (``gemm``); see the module docstring.

    Offers the packing protocol's ``has_bias``, ``storage``, ``unpack()`` and the shared-memory
    hooks (``is_shared``, ``shared_copy``); built by :func:`pack_conv_nd`.
    """

    def __init__(self, conv, nd, kernel_size, stride, dilation, padding, groups):
        self.conv = conv
        self.gemm = isinstance(conv, _gemm.PackedLinear)  # Conv1d as one GEMM per image
        self.nd = nd
        self.kernel_size = kernel_size
        self.stride = stride
        self.dilation = dilation
        self.padding = padding  # ((lo, hi), ...) per spatial axis
        self.groups = groups
        if self.gemm:
            self.in_channels = conv.in_features // kernel_size[0]
            self.out_channels = conv.out_features
        else:
            self.in_channels = conv.in_channels // (kernel_size[0] if nd == 3 else 1)
            self.out_channels = conv.out_channels

    # --- the packing protocol
    @property
    def has_bias(self) -> bool:
        return self.conv.has_bias

    @property
    def storage(self) -> str:
        return self.conv.storage

    @property
    def compute_dtype(self) -> np.dtype:
        return self.conv.compute_dtype

    @property
    def nbytes(self) -> int:
        return self.conv.nbytes

    def unpack(self):
        w, b = self.conv.unpack()
        if self.gemm:  # (C_out, K * C_in), k-major -> (C_out, C_in, K)
            w = np.asarray(w).reshape(self.out_channels, self.kernel_size[0], self.in_channels)
            return np.ascontiguousarray(w.transpose(0, 2, 1)), b
        shape = (self.out_channels, self.in_channels // self.groups) + self.kernel_size
        return w.reshape(shape), b

    @property
    def is_shared(self) -> bool:
        return self.conv.is_shared

    def shared_copy(self):
        if self.is_shared:
            return self
        return _PackedConvNd(self.conv.shared_copy(), self.nd, self.kernel_size, self.stride,
                             self.dilation, self.padding, self.groups)

    def output_size(self, spatial, padding=None) -> tuple[int, ...]:
        padding = self.padding if padding is None else padding
        return tuple(
            _conv.conv_output_size(n, k, s, lo, hi, d)
            for n, k, s, (lo, hi), d in zip(
                spatial, self.kernel_size, self.stride, padding, self.dilation
            )
        )

    # --- compute
    def forward(self, x: np.ndarray, padding=None, activation=None) -> np.ndarray:
        """``x`` (N, C, *spatial) checked by the caller (rank, channels, sizes); ``padding``
        overrides the packed zero padding, ((lo, hi), ...) per axis."""
        conv = self.conv
        nd = self.nd
        if self.gemm:
            return self._forward_gemm(x, self.padding if padding is None else padding,
                                      activation)
        if nd == 2:
            if padding is not None:
                conv = conv.with_padding(
                    (padding[0][0], padding[1][0], padding[0][1], padding[1][1]))
            return conv.forward(x, activation)
        if nd == 1:
            if padding is not None:
                conv = conv.with_padding((0, padding[0][0], 0, padding[0][1]))
            y = conv.forward(x[:, :, None, :], activation)
            return y.reshape(y.shape[0], y.shape[1], y.shape[3])
        pad = self.padding if padding is None else padding
        if padding is not None:
            conv = conv.with_padding((pad[1][0], pad[2][0], pad[1][1], pad[2][1]))
        stacked, od = self._stack_depth(x, pad[0])
        y = conv.forward(stacked, activation)
        n = x.shape[0]
        y = y.reshape((n, od) + y.shape[1:])
        return np.ascontiguousarray(y.transpose(0, 2, 1, 3, 4))

    def _forward_gemm(self, x: np.ndarray, padding, activation) -> np.ndarray:
        """Conv1d as ``PackedLinear`` over the strided im2col view of channels-last input."""
        n, c, length = x.shape
        k, s = self.kernel_size[0], self.stride[0]
        lo, hi = padding[0]
        lout = (length + lo + hi - k) // s + 1
        dt = self.compute_dtype
        isz = dt.itemsize
        xt = x.transpose(0, 2, 1)  # (N, L, C), a view
        if (lo or hi or xt.dtype != dt or xt.strides[2] != isz
                or (length > 1 and xt.strides[1] != c * isz)):
            buf = np.empty((n, length + lo + hi, c), dt)
            buf[:, :lo] = 0
            buf[:, lo + length:] = 0
            if x.dtype == dt:
                _ops.transpose_into(x, buf[:, lo:lo + length])
            else:
                buf[:, lo:lo + length] = xt
            xt = buf
        out = np.empty((n, lout, self.out_channels), dt)
        act = "none" if activation is None else activation
        for i in range(n):
            rows = np.lib.stride_tricks.as_strided(
                xt[i], (lout, k * c), (s * c * isz, isz), writeable=False)
            self.conv.forward(rows, act, out=out[i])
        return out.transpose(0, 2, 1)

    def _stack_depth(self, x: np.ndarray, dpad):
        """(N * OD, C * KD, H, W): for output depth ``od`` the KD input planes it reads
        (channel ``c * KD + kd`` is plane ``od * stride - pad + kd * dilation`` of channel
        ``c``), zeros where that plane is in the padding."""
        n, c, d, h, w = x.shape
        kd, sd, dd = self.kernel_size[0], self.stride[0], self.dilation[0]
        lo, hi = dpad
        od = _conv.conv_output_size(d, kd, sd, lo, hi, dd)
        xt = x.transpose(0, 2, 1, 3, 4)  # (N, D, C, H, W), a view
        dtype = self.compute_dtype
        if kd == 1 and sd == 1 and lo == 0 and hi == 0:
            return xt.astype(dtype, copy=False).reshape(n * d, c, h, w), od
        full = True
        ranges = []
        for k in range(kd):
            # output depths whose plane od * sd - lo + k * dd lies inside the input
            first = max(0, -((k * dd - lo) // sd))  # ceil((lo - k*dd) / sd)
            last = min(od - 1, (d - 1 + lo - k * dd) // sd)
            ranges.append((first, last))
            full = full and first == 0 and last == od - 1
        buf = (np.empty if full else np.zeros)((n, od, c, kd, h, w), dtype)
        for k, (first, last) in enumerate(ranges):
            if last < first:
                continue
            start = first * sd - lo + k * dd
            stop = last * sd - lo + k * dd + 1
            buf[:, first:last + 1, :, k] = xt[:, start:stop:sd]
        return buf.reshape(n * od, c * kd, h, w), od


def pack_conv_nd(weight, bias, stride, padding, dilation, groups, storage) -> _PackedConvNd:
    """Pack an N-d convolution's weight (C_out, C_in/groups, *kernel), N = 1, 2 or 3, once.

    ``padding`` is ((lo, hi), ...) per spatial axis (non-negative zero padding; the layers
    pad for the other ``padding_mode`` themselves and pack zeros).
    """
    w = np.asarray(weight)
    nd = w.ndim - 2
    kernel_size = tuple(int(k) for k in w.shape[2:])
    if nd == 1 and groups == 1 and dilation[0] == 1:
        # (C_out, C_in, K) -> (C_out, K * C_in): the rows of channels-last im2col
        w2 = np.ascontiguousarray(np.asarray(w).transpose(0, 2, 1)).reshape(w.shape[0], -1)
        b = None if bias is None else np.asarray(bias)
        conv = _gemm.pack_linear(w2, b, storage=storage)
    elif nd == 1:
        w4 = w.reshape(w.shape[0], w.shape[1], 1, kernel_size[0])
        conv = _conv.pack_conv2d(
            w4, bias, (1, stride[0]), (0, padding[0][0], 0, padding[0][1]), (1, dilation[0]),
            groups, storage,
        )
    elif nd == 2:
        conv = _conv.pack_conv2d(
            w, bias, stride, (padding[0][0], padding[1][0], padding[0][1], padding[1][1]),
            dilation, groups, storage,
        )
    elif nd == 3:
        w4 = w.reshape(w.shape[0], w.shape[1] * kernel_size[0], kernel_size[1], kernel_size[2])
        conv = _conv.pack_conv2d(
            w4, bias, stride[1:], (padding[1][0], padding[2][0], padding[1][1], padding[2][1]),
            dilation[1:], groups, storage,
        )
    else:
        raise ValueError(f"pack_conv_nd: expected a 3-D, 4-D or 5-D weight, got {w.shape}")
    return _PackedConvNd(conv, nd, kernel_size, tuple(stride), tuple(dilation),
                         tuple(tuple(p) for p in padding), groups)


class _Phase:
    """One stride phase of a transposed convolution: along each axis the residue ``r`` of
    ``(o + padding) % stride``, its taps, their input offsets and (when it has taps on every
    axis) the stride-1 convolution of the flipped sub-kernel."""

    __slots__ = ("residue", "taps", "m_max", "sub_dilation", "conv")

    def __init__(self, residue, taps, m_max, sub_dilation, conv):
        self.residue = residue
        self.taps = taps
        self.m_max = m_max
        self.sub_dilation = sub_dilation
        self.conv = conv


class _PackedConvTransposeNd:
    """A 1-, 2- or 3-D transposed convolution as stride phases of stride-1 convolutions (see
    the module docstring). Built by :func:`pack_conv_transpose_nd`."""

    def __init__(self, phases, nd, in_channels, out_channels, kernel_size, stride, padding,
                 dilation, groups, bias, storage, merged=None):
        self.phases = phases
        self.nd = nd
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.groups = groups
        self._bias = bias  # compute-dtype copy for tap-less phases (None: no bias)
        self._storage = storage
        self.merged = merged  # every phase in one convolution (same sub-kernel shapes), or None

    @property
    def has_bias(self) -> bool:
        return self._bias is not None

    @property
    def storage(self) -> str:
        return self._storage

    @property
    def compute_dtype(self) -> np.dtype:
        return np.dtype(np.float64 if self._storage == "float64" else np.float32)

    @property
    def nbytes(self) -> int:
        return sum(p.conv.nbytes for p in self.phases if p.conv is not None) + (
            0 if self.merged is None else self.merged.nbytes)

    def unpack(self):
        """(weight (C_in, C_out/groups, *kernel), bias or None) in the storage dtype."""
        g = self.groups
        cin_g, cout_g = self.in_channels // g, self.out_channels // g
        wc = None
        bias = None
        subs = [None if p.conv is None else p.conv.unpack() for p in self.phases]
        if self.merged is not None:
            w, b = self.merged.unpack()  # (g * P * cout_g, cin_g, *sub): channel (g, phase, c)
            w = w.reshape((g, len(self.phases), cout_g) + w.shape[1:])
            if b is not None:
                b = np.asarray(b).reshape(g, len(self.phases), cout_g)[:, 0].reshape(-1)
            subs = [(np.ascontiguousarray(w[:, i]).reshape((-1,) + w.shape[3:]), b)
                    for i in range(len(self.phases))]
        for phase, sub in zip(self.phases, subs):
            if sub is None:
                continue
            w, b = sub
            if wc is None:
                wc = np.zeros((self.out_channels, cin_g) + self.kernel_size, w.dtype)
                bias = b
            flip = (slice(None), slice(None)) + (slice(None, None, -1),) * self.nd
            wc[(slice(None), slice(None)) + np.ix_(*phase.taps)] = w[flip]
        # (C_out, C_in/g, *k) -> (g, cout_g, cin_g, *k) -> (g, cin_g, cout_g, *k)
        wt = wc.reshape((g, cout_g, cin_g) + self.kernel_size).swapaxes(1, 2)
        return np.ascontiguousarray(wt).reshape((self.in_channels, cout_g) + self.kernel_size), \
            bias

    @property
    def is_shared(self) -> bool:
        return all(p.conv.is_shared for p in self.phases if p.conv is not None) and (
            self.merged is None or self.merged.is_shared)

    def shared_copy(self):
        if self.is_shared:
            return self
        phases = [
            _Phase(p.residue, p.taps, p.m_max, p.sub_dilation,
                   None if p.conv is None else p.conv.shared_copy())
            for p in self.phases
        ]
        return _PackedConvTransposeNd(
            phases, self.nd, self.in_channels, self.out_channels, self.kernel_size, self.stride,
            self.padding, self.dilation, self.groups, self._bias, self._storage,
            None if self.merged is None else self.merged.shared_copy())

    def output_size(self, spatial, output_padding) -> tuple[int, ...]:
        return tuple(
            (n - 1) * s - 2 * p + d * (k - 1) + op + 1
            for n, s, p, d, k, op in zip(spatial, self.stride, self.padding, self.dilation,
                                        self.kernel_size, output_padding)
        )

    def forward(self, x: np.ndarray, out_size) -> np.ndarray:
        """``x`` (N, C_in, *spatial) checked by the caller; ``out_size`` the output's spatial
        size (positive)."""
        nd = self.nd
        n = x.shape[0]
        spatial = x.shape[2:]
        dtype = self.compute_dtype
        geoms = [self._phase_geometry(p, spatial, out_size) for p in self.phases]
        if all(s == 1 for s in self.stride):
            run = self._run_phase(self.phases[0], geoms[0], x)
            if run is not None and run[0] is not None:
                return run[0]
        out = np.empty((n, self.out_channels) + tuple(out_size), dtype)
        if self.merged is not None:
            self._forward_merged(x, geoms, out)
            return out
        bias_view = None
        for phase, geom in zip(self.phases, geoms):
            run = self._run_phase(phase, geom, x)
            if run is None:
                continue
            y, where = run
            if y is None:  # no tap reaches these positions: the bias alone
                if bias_view is None:
                    bias_view = (np.zeros(self.out_channels, dtype) if self._bias is None
                                 else self._bias).reshape((-1,) + (1,) * nd)
                out[where] = bias_view
            else:
                out[where] = y
        return out

    def _phase_geometry(self, phase, spatial, out_size):
        """Per axis ``(n_out, o0, lo, hi)``: the phase's output count, its first output
        position and the zero padding (negative: a crop) its stride-1 convolution needs; None
        when the phase has no output position."""
        geom = []
        for a in range(self.nd):
            s, p, r = self.stride[a], self.padding[a], phase.residue[a]
            q0 = -((r - p) // s)  # first q with o = q*s + r - p >= 0
            q1 = (out_size[a] - 1 + p - r) // s
            n_out = q1 - q0 + 1
            if n_out <= 0:
                return None
            lo = phase.m_max[a] - q0
            extent = (len(phase.taps[a]) - 1) * phase.sub_dilation[a] + 1
            hi = n_out - 1 + extent - spatial[a] - lo
            geom.append((n_out, q0 * s + r - p, lo, hi))
        return geom

    @staticmethod
    def _crop(geom_axes, spatial):
        """(input slices, non-negative pads) for per-axis (lo, hi) paddings, or None when the
        cropped input is empty (every tap reads padding)."""
        crop = [slice(None), slice(None)]
        pads = []
        for (lo, hi), size in zip(geom_axes, spatial):
            start, stop = max(0, -lo), size + min(hi, 0)
            if stop <= start:
                return None
            crop.append(slice(start, stop))
            pads.append((max(lo, 0), max(hi, 0)))
        return tuple(crop), tuple(pads)

    def _run_phase(self, phase, geom, x):
        """(phase output or None for bias-only, the output positions) or None when the phase
        has no output position."""
        if geom is None:
            return None
        where = (slice(None), slice(None)) + tuple(
            slice(o0, o0 + (n_out - 1) * s + 1, s)
            for (n_out, o0, _, _), s in zip(geom, self.stride))
        if phase.conv is None:
            return None, where
        cropped = self._crop([(lo, hi) for _, _, lo, hi in geom], x.shape[2:])
        if cropped is None:
            return None, where
        crop, pads = cropped
        return phase.conv.forward(x[crop], pads), where

    def _forward_merged(self, x, geoms, out) -> None:
        """Every phase as one convolution (``merged``: the phases' sub-kernels stacked along the
        output channels, a block of channels a phase) over the union of their paddings: one
        pass over the input and one parallel region instead of one per phase. In 2-D each
        block reads the padded input at its phase's offset (``PackedConv2d.forward_shifted``),
        computes its phase's outputs only and the GEMM's stores put them in their places in
        ``out``. Otherwise (1-D, 3-D, groups, bfloat16 compute, a phase not whole panels of 8
        channels) every block computes the union of the phases' windows, which overlap by the
        spread of their paddings (a 16x16 DCGAN map: 17x17 a phase, 13% more multiply-adds),
        and the phases' windows go to their places in one parallel pass
        (``_ops.scatter_phases``). Phases without an output position are skipped."""
        nd, nph = self.nd, len(self.phases)
        live = [i for i, g in enumerate(geoms) if g is not None]
        lows = [max(geoms[i][a][2] for i in live) for a in range(nd)]
        offs = [{i: lows[a] - geoms[i][a][2] for i in live} for a in range(nd)]
        extents = [(len(self.phases[0].taps[a]) - 1) * self.phases[0].sub_dilation[a] + 1
                   for a in range(nd)]

        def past(a, n):  # the padding after the input that n outputs of axis a need
            return n - 1 + extents[a] - x.shape[2 + a] - lows[a]

        # the union of the phases' windows
        union = [past(a, max(offs[a][i] + geoms[i][a][0] for i in live)) for a in range(nd)]
        cropped = self._crop(list(zip(lows, union)), x.shape[2:])
        g = self.groups
        cout_g = self.out_channels // g
        if cropped is None:  # every tap reads padding: the bias alone
            out[...] = (0 if self._bias is None else self._bias.reshape((-1,) + (1,) * nd))
            return
        if nd == 2 and not self.merged.gemm:
            # the blocks' common grid: the most outputs of any phase, from the largest offset;
            # each block computes its phase's outputs alone, written in place by the stores
            size = [max(geoms[i][a][0] for i in live) for a in range(nd)]
            his = [past(a, max(offs[a].values()) + size[a]) for a in range(nd)]
            crop, pads = self._crop(list(zip(lows, his)), x.shape[2:])
            places = [(0, 0, 0, 0) if gm is None else (gm[0][1], gm[1][1], gm[0][0], gm[1][0])
                      for gm in geoms]
            if self.merged.conv.forward_shifted(
                    x[crop], (pads[0][0], pads[1][0], pads[0][1], pads[1][1]), size,
                    [(offs[0].get(i, 0), offs[1].get(i, 0)) for i in range(nph)], out=out,
                    places=places, steps=self.stride) is not None:
                return
        crop, pads = cropped
        # (N, g * P * cout_g, *n_m); a GEMM-shaped Conv1d's is a channels-last view
        y = np.ascontiguousarray(self.merged.forward(x[crop], pads))
        n = y.shape[0]
        lead = (1,) * (3 - nd)  # the kernel's three spatial axes
        boxes = np.zeros((3, nph, 3), np.intp)  # windows, starts, counts
        for i in live:
            boxes[0, i, 3 - nd:] = [w[i] for w in offs]
            boxes[1, i, 3 - nd:] = [geom[1] for geom in geoms[i]]
            boxes[2, i, 3 - nd:] = [geom[0] for geom in geoms[i]]
            boxes[2, i, :3 - nd] = 1
        _ops.scatter_phases(y.reshape((n * g, nph, cout_g) + lead + y.shape[2:]),
                            out.reshape((n * g, cout_g) + lead + out.shape[2:]), *boxes,
                            lead + tuple(self.stride))


def pack_conv_transpose_nd(weight, bias, stride, padding, dilation, groups, storage):
    """Pack a transposed convolution's weight (C_in, C_out/groups, *kernel), N = 1, 2 or 3
    spatial axes, into its stride phases (each a packed stride-1 convolution)."""
    w = np.asarray(weight)
    nd = w.ndim - 2
    kernel_size = tuple(int(k) for k in w.shape[2:])
    cin, cout_g = w.shape[0], w.shape[1]
    cin_g = cin // groups
    cout = cout_g * groups
    # the ordinary convolution's layout: (C_out, C_in/g, *k)
    wc = w.reshape((groups, cin_g, cout_g) + kernel_size).swapaxes(1, 2)
    wc = wc.reshape((cout, cin_g) + kernel_size)
    phases = []
    for residue in itertools.product(*(range(s) for s in stride)):
        taps, m_max, sub_dil = [], [], []
        for a in range(nd):
            s, d, r = stride[a], dilation[a], residue[a]
            t = [k for k in range(kernel_size[a]) if (k * d) % s == r]
            taps.append(t)
            m_max.append((t[-1] * d - r) // s if t else 0)
            sub_dil.append(d // math.gcd(d, s))
        conv = None
        if all(taps):
            flip = (slice(None), slice(None)) + (slice(None, None, -1),) * nd
            sub = np.ascontiguousarray(wc[(slice(None), slice(None)) + np.ix_(*taps)][flip])
            conv = pack_conv_nd(sub, bias, (1,) * nd, ((0, 0),) * nd, tuple(sub_dil), groups,
                                storage)
        phases.append(_Phase(residue, taps, tuple(m_max), tuple(sub_dil), conv))
    compute = np.float64 if storage == "float64" else np.float32
    b = None if bias is None else np.ascontiguousarray(np.asarray(bias).astype(compute))
    merged = None
    if len(phases) > 1 and all(p.conv is not None for p in phases) and all(
            [len(t) for t in p.taps] == [len(t) for t in phases[0].taps]
            and p.sub_dilation == phases[0].sub_dilation for p in phases):
        # the phases' flipped sub-kernels stacked along the output channels, group-major:
        # channel (group, phase, c) so that each group still reads its own input channels
        flip = (slice(None), slice(None)) + (slice(None, None, -1),) * nd
        subs = [wc[(slice(None), slice(None)) + np.ix_(*p.taps)][flip] for p in phases]
        stacked = np.stack([s.reshape((groups, cout_g) + s.shape[1:]) for s in subs], axis=1)
        stacked = np.ascontiguousarray(stacked).reshape((-1,) + subs[0].shape[1:])
        mb = None
        if bias is not None:
            bb = np.asarray(bias).reshape(groups, 1, cout_g)
            mb = np.ascontiguousarray(np.broadcast_to(bb, (groups, len(phases), cout_g)))
            mb = mb.reshape(-1)
        merged = pack_conv_nd(stacked, mb, (1,) * nd, ((0, 0),) * nd, phases[0].sub_dilation,
                              groups, storage)
        for p in phases:  # packed once: the merged convolution holds every phase
            p.conv = None
    return _PackedConvTransposeNd(phases, nd, cin, cout, kernel_size, tuple(stride),
                                  tuple(padding), tuple(dilation), groups, b, storage, merged)


# ---------------------------------------------------------------------------------------------
# layers


class _ConvNd(PackedWeightLayer):
    """Conv1d / Conv3d: the constructor, packing and forward shared by the N-d layers."""

    _nd = 0
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None,
                 output_padding=0) -> None:
        super().__init__()
        what = type(self).__name__
        nd = self._nd
        _check_channels(in_channels, out_channels, groups, what)
        if padding_mode not in PADDING_MODES:
            raise ValueError(
                f"{what}: padding_mode must be one of {PADDING_MODES}, got {padding_mode!r}"
            )
        if self._transposed and padding_mode != "zeros":
            raise ValueError(f'{what}: only "zeros" padding mode is supported, as in torch')
        dtype = _layer_dtype(dtype, device, what)
        self.in_channels = int(in_channels)
        self.out_channels = int(out_channels)
        self.kernel_size = _ntuple(kernel_size, nd, "kernel_size", what)
        self.stride = _ntuple(stride, nd, "stride", what)
        self.dilation = _ntuple(dilation, nd, "dilation", what)
        _check_window(self.kernel_size, self.stride, self.dilation, what)
        if isinstance(padding, str):
            if self._transposed:
                raise ValueError(f'{what}: padding must be an int or a tuple of ints, got '
                                 f'{padding!r} ("same" and "valid" are for Conv{nd}d)')
            if padding not in ("same", "valid"):
                raise ValueError(
                    f"{what}: invalid padding string {padding!r}, should be one of "
                    "{'valid', 'same'}"
                )
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError(
                    f"{what}: padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _ntuple(padding, nd, "padding", what)
            if min(self.padding) < 0:
                raise ValueError(f"{what}: padding must be non-negative, got {padding!r}")
        self.output_padding = _ntuple(output_padding, nd, "output_padding", what)
        if min(self.output_padding) < 0:
            raise ValueError(
                f"{what}: output_padding must be non-negative, got {output_padding!r}")
        if self._transposed:
            for op, s, d in zip(self.output_padding, self.stride, self.dilation):
                if op >= s and op >= d:
                    raise ValueError(
                        f"{what}: output_padding {self.output_padding} must be smaller than "
                        f"either stride {self.stride} or dilation {self.dilation}"
                    )
        self.groups = int(groups)
        self.padding_mode = padding_mode
        self.transposed = self._transposed
        self._reset_parameters(dtype, bias)

    def _reset_parameters(self, dtype, bias: bool) -> None:
        """Create ``weight`` (and ``bias``, or register it as None) as torch initialises them
        (the lazy layers call this when they materialise)."""
        shape = self._weight_shape()
        # kaiming_uniform(a=sqrt(5)) as torch: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in =
        # weight.shape[1] * prod(kernel_size), the bias the same bound
        fan_in = shape[1] * math.prod(self.kernel_size)
        bound = 1.0 / math.sqrt(fan_in)
        rng = default_generator()
        self.weight = Parameter(rng.uniform(-bound, bound, shape).astype(dtype.numpy))
        if bias:
            self.bias = Parameter(
                rng.uniform(-bound, bound, self.out_channels).astype(dtype.numpy))
        else:
            self.register_parameter("bias", None)

    def extra_repr(self) -> str:
        nd = self._nd
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding != (0,) * nd:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * nd:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if not self._has_bias():
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s

    # ---------------------------------------------------------------- packing protocol
    def _weight_shape(self):
        return (self.out_channels, self.in_channels // self.groups) + self.kernel_size

    def _pads(self) -> tuple[tuple[int, int], ...]:
        """(lo, hi) per spatial axis of the layer's padding."""
        if self.padding == "valid":
            return ((0, 0),) * self._nd
        if self.padding == "same":
            return _same_pads(self.kernel_size, self.dilation)
        return tuple((p, p) for p in self.padding)

    def _pack_kernel(self, weight, bias, storage):
        pads = self._pads() if self.padding_mode == "zeros" else ((0, 0),) * self._nd
        return pack_conv_nd(weight, bias, self.stride, pads, self.dilation, self.groups,
                            storage)

    # ---------------------------------------------------------------- compute
    def _error(self, exc: Exception) -> ValueError:
        return ValueError(f"{self._get_name()}({self.extra_repr()}): {exc}")

    def forward(self, input) -> np.ndarray:
        packed = self._packed
        if packed is None:
            self._pack()
            packed = self._packed
        what = self._get_name()
        x, unbatched = _batched(as_input(input, what), self._nd, self.in_channels, what)
        pads = self._pads()
        if self.padding_mode != "zeros":
            x = pad_input(x, pads, self.padding_mode, what)
            pads = ((0, 0),) * self._nd
        for n, k, d, (lo, hi) in zip(x.shape[2:], self.kernel_size, self.dilation, pads):
            if n + lo + hi < d * (k - 1) + 1:
                raise self._error(ValueError(
                    f"the padded input size per channel {tuple(n + lo + hi for n, (lo, hi) in zip(x.shape[2:], pads))} "  # noqa: E501
                    f"is smaller than the dilated kernel "
                    f"{tuple(d * (k - 1) + 1 for k, d in zip(self.kernel_size, self.dilation))}"
                    f" (input shape {x.shape})"
                ))
        try:
            y = packed.forward(x)
        except ValueError as exc:
            raise self._error(exc) from None
        return y[0] if unbatched else y


class Conv1d(_ConvNd):
    """1-D convolution over an (N, C_in, L) or (C_in, L) input, as ``torch.nn.Conv1d``.

    Parameters
    ----------
    in_channels, out_channels : int
    kernel_size, stride, dilation : int or (int,)
    padding : int, (int,), 'valid' or 'same'
        'same' needs stride 1 and pads ``dilation*(k-1)`` in total, the odd element at the end.
    groups : int
        Divides both channel counts.
    bias : bool
    padding_mode : {'zeros', 'reflect', 'replicate', 'circular'}
        How the input is padded ('reflect' needs each padding smaller than the length,
        'circular' at most the length, as torch).
    device : must be the CPU
    dtype : floating DataType or name (default float32)

    Notes
    -----
    Runs as a 2-D convolution of height 1 on the packed convolution engine (weights packed
    once, on the first forward or :meth:`~modulekit.Module.initialize`, then released from
    ``state_dict()`` as ``Conv2d``'s are). float16/bfloat16 layers compute in float32,
    float64 layers in float64. Initialisation as torch (kaiming-uniform, ``a=sqrt(5)``).
    """

    _nd = 1

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype)


class Conv3d(_ConvNd):
    """3-D convolution over an (N, C_in, D, H, W) or (C_in, D, H, W) input, as
    ``torch.nn.Conv3d``.

    Parameters
    ----------
    in_channels, out_channels : int
    kernel_size, stride, dilation : int or (int, int, int)
    padding : int, (int, int, int), 'valid' or 'same'
    groups : int
    bias : bool
    padding_mode : {'zeros', 'reflect', 'replicate', 'circular'}
    device : must be the CPU
    dtype : floating DataType or name (default float32)

    Notes
    -----
    Runs as one 2-D convolution over (N x D_out) images whose channels are the C_in x KD input
    planes each output depth reads (a copy of the input KD / stride_D times; none for a kernel
    of depth 1 at stride 1, unpadded, batch 1); the weight is packed once as
    (C_out, C_in/groups x KD, KH, KW).
    """

    _nd = 3

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype)


class _ConvTransposeNd(_ConvNd):
    """ConvTranspose1d/2d/3d: weight (C_in, C_out/groups, *kernel_size)."""

    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype, output_padding)

    def _weight_shape(self):
        return (self.in_channels, self.out_channels // self.groups) + self.kernel_size

    def _packed_keys(self):
        keys = super()._packed_keys()
        if "bias" in keys:  # (out_channels,): the weight's first axis is in_channels here
            keys["bias"] = ((self.out_channels,), keys["bias"][1])
        return keys

    def _pack_kernel(self, weight, bias, storage):
        return pack_conv_transpose_nd(weight, bias, self.stride, self.padding, self.dilation,
                                      self.groups, storage)

    def _output_padding(self, spatial, output_size, unbatched: bool):
        """torch's ``_ConvTransposeNd._output_padding``: the output padding that gives
        ``output_size`` (its last N entries), checked against the sizes reachable."""
        if output_size is None:
            return self.output_padding
        what = self._get_name()
        nd = self._nd
        try:
            size = [int(v) for v in output_size]
        except TypeError:
            raise TypeError(
                f"{what}: output_size must be a sequence of ints, got {output_size!r}") from None
        lead = 1 if unbatched else 2
        if len(size) == nd + lead:
            size = size[lead:]
        if len(size) != nd:
            raise ValueError(
                f"{what}: for {nd + lead}-D input, output_size must have {nd} or {nd + lead} "
                f"elements (got {len(list(output_size))})"
            )
        lo = [
            (n - 1) * s - 2 * p + d * (k - 1) + 1
            for n, s, p, d, k in zip(spatial, self.stride, self.padding, self.dilation,
                                     self.kernel_size)
        ]
        hi = [m + s - 1 for m, s in zip(lo, self.stride)]
        if any(not a <= v <= b for v, a, b in zip(size, lo, hi)):
            raise ValueError(
                f"{what}: requested an output size of {size}, but valid sizes range from {lo} "
                f"to {hi} (for an input of {tuple(spatial)})"
            )
        return tuple(v - a for v, a in zip(size, lo))

    def forward(self, input, output_size=None) -> np.ndarray:
        packed = self._packed
        if packed is None:
            self._pack()
            packed = self._packed
        what = self._get_name()
        x, unbatched = _batched(as_input(input, what), self._nd, self.in_channels, what)
        spatial = x.shape[2:]
        op = self._output_padding(spatial, output_size, unbatched)
        out_size = packed.output_size(spatial, op)
        if min(out_size) < 0:
            raise self._error(ValueError(
                f"the output size {out_size} for an input of {tuple(spatial)} is negative"
            ))
        if min(out_size) == 0:  # torch returns an empty result
            y = np.empty((x.shape[0], self.out_channels) + out_size, packed.compute_dtype)
            return y[0] if unbatched else y
        try:
            y = packed.forward(x, out_size)
        except ValueError as exc:
            raise self._error(exc) from None
        return y[0] if unbatched else y


class ConvTranspose1d(_ConvTransposeNd):
    """1-D transposed convolution over an (N, C_in, L) or (C_in, L) input, as
    ``torch.nn.ConvTranspose1d``.

    Parameters
    ----------
    in_channels, out_channels : int
    kernel_size, stride, padding, output_padding, dilation : int or (int,)
        ``output_padding`` must be smaller than the stride or the dilation.
    groups : int
    bias : bool
    padding_mode : 'zeros'
        The only mode torch has for transposed convolutions.
    device : must be the CPU
    dtype : floating DataType or name (default float32)

    Notes
    -----
    ``forward(input, output_size=None)``: ``output_size`` (the spatial size, or with the batch
    and channel dimensions) picks the output padding, as torch. Runs as ``stride`` stride-1
    convolutions, one per output phase (no zero-insertion); the weight is packed once into
    them. ``weight`` has shape (C_in, C_out/groups, K).
    """

    _nd = 1

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 padding_mode: str = "zeros", device=None, dtype=None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding,
                         output_padding, groups, bias, dilation, padding_mode, device, dtype)


class ConvTranspose2d(_ConvTransposeNd):
    """2-D transposed convolution over an (N, C_in, H, W) or (C_in, H, W) input, as
    ``torch.nn.ConvTranspose2d``.

    Parameters
    ----------
    in_channels, out_channels : int
    kernel_size, stride, padding, output_padding, dilation : int or (int, int)
    groups : int
    bias : bool
    padding_mode : 'zeros'
    device : must be the CPU
    dtype : floating DataType or name (default float32)

    Notes
    -----
    See :class:`ConvTranspose1d`: ``stride[0] * stride[1]`` phase convolutions interleaved
    into the output.
    """

    _nd = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 padding_mode: str = "zeros", device=None, dtype=None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding,
                         output_padding, groups, bias, dilation, padding_mode, device, dtype)


class ConvTranspose3d(_ConvTransposeNd):
    """3-D transposed convolution over an (N, C_in, D, H, W) or (C_in, D, H, W) input, as
    ``torch.nn.ConvTranspose3d``.

    Parameters
    ----------
    in_channels, out_channels : int
    kernel_size, stride, padding, output_padding, dilation : int or (int, int, int)
    groups : int
    bias : bool
    padding_mode : 'zeros'
    device : must be the CPU
    dtype : floating DataType or name (default float32)

    Notes
    -----
    See :class:`ConvTranspose1d` and :class:`Conv3d`: each phase is a stride-1 3-D convolution.
    """

    _nd = 3

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 padding_mode: str = "zeros", device=None, dtype=None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding,
                         output_padding, groups, bias, dilation, padding_mode, device, dtype)


# ---------------------------------------------------------------------------------------------
# functional forms (modulekit.nn.functional.conv1d, conv3d, conv_transpose1d/2d/3d)


def _functional_weight(weight, bias, nd: int, what: str):
    w = as_input(weight, f"{what}(weight)")
    if w.ndim != nd + 2:
        raise ValueError(
            f"{what}: weight must be {nd + 2}-D, got shape {w.shape}")
    if 0 in w.shape:
        raise ValueError(f"{what}: weight has an empty dimension, shape {w.shape}")
    storage = "float64" if w.dtype == np.float64 else "float32"
    w = w.astype(storage, copy=False)
    b = None
    if bias is not None:
        b = as_input(bias, f"{what}(bias)").astype(storage, copy=False)
    return w, b, storage


def _functional_groups(groups, what: str) -> int:
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"{what}: groups must be a positive int, got {groups!r}")
    return int(groups)


def conv_functional(nd: int, input, weight, bias, stride, padding, dilation, groups):
    """``torch.nn.functional.conv{nd}d``: packs ``weight`` for this one call."""
    what = f"conv{nd}d"
    w, b, storage = _functional_weight(weight, bias, nd, what)
    groups = _functional_groups(groups, what)
    cout = w.shape[0]
    if cout % groups:
        raise ValueError(
            f"{what}: groups={groups} must divide the weight's out_channels {cout}")
    if b is not None and b.shape != (cout,):
        raise ValueError(f"{what}: bias must have shape ({cout},), got {b.shape}")
    kernel = tuple(w.shape[2:])
    stride = _ntuple(stride, nd, "stride", what)
    dilation = _ntuple(dilation, nd, "dilation", what)
    _check_window(kernel, stride, dilation, what)
    if isinstance(padding, str):
        if padding == "valid":
            pads = ((0, 0),) * nd
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError(
                    f"{what}: padding='same' is not supported for strided convolutions")
            pads = _same_pads(kernel, dilation)
        else:
            raise ValueError(
                f"{what}: invalid padding string {padding!r}, should be one of "
                "{'valid', 'same'}")
    else:
        pads = tuple((p, p) for p in _ntuple(padding, nd, "padding", what))
        if min(min(p) for p in pads) < 0:
            raise ValueError(f"{what}: padding must be non-negative, got {padding!r}")
    x, unbatched = _batched(as_input(input, what), nd, w.shape[1] * groups, what)
    for n, k, d, (lo, hi) in zip(x.shape[2:], kernel, dilation, pads):
        if n + lo + hi < d * (k - 1) + 1:
            raise ValueError(
                f"{what}: the padded input size per channel along an axis, {n + lo + hi}, is "
                f"smaller than the dilated kernel {d * (k - 1) + 1} (input shape {x.shape}, "
                f"weight shape {w.shape})"
            )
    packed = pack_conv_nd(w, b, stride, pads, dilation, groups, storage)
    y = packed.forward(x)
    return y[0] if unbatched else y


def conv_transpose_functional(nd: int, input, weight, bias, stride, padding, output_padding,
                              groups, dilation):
    """``torch.nn.functional.conv_transpose{nd}d``: packs ``weight`` for this one call."""
    what = f"conv_transpose{nd}d"
    w, b, storage = _functional_weight(weight, bias, nd, what)
    groups = _functional_groups(groups, what)
    cin = w.shape[0]
    if cin % groups:
        raise ValueError(
            f"{what}: groups={groups} must divide the weight's in_channels {cin} (its first "
            "dimension)")
    cout = w.shape[1] * groups
    if b is not None and b.shape != (cout,):
        raise ValueError(f"{what}: bias must have shape ({cout},), got {b.shape}")
    kernel = tuple(w.shape[2:])
    stride = _ntuple(stride, nd, "stride", what)
    dilation = _ntuple(dilation, nd, "dilation", what)
    _check_window(kernel, stride, dilation, what)
    if isinstance(padding, str):
        raise ValueError(f"{what}: padding must be an int or a tuple of ints, got {padding!r}")
    padding = _ntuple(padding, nd, "padding", what)
    output_padding = _ntuple(output_padding, nd, "output_padding", what)
    if min(padding) < 0 or min(output_padding) < 0:
        raise ValueError(
            f"{what}: padding {padding} and output_padding {output_padding} must be "
            "non-negative")
    for op, s, d in zip(output_padding, stride, dilation):
        if op >= s and op >= d:
            raise ValueError(
                f"{what}: output_padding {output_padding} must be smaller than either stride "
                f"{stride} or dilation {dilation}")
    x, unbatched = _batched(as_input(input, what), nd, cin, what)
    packed = pack_conv_transpose_nd(w, b, stride, padding, dilation, groups, storage)
    out_size = packed.output_size(x.shape[2:], output_padding)
    if min(out_size) < 0:
        raise ValueError(
            f"{what}: the output size {out_size} for an input of {x.shape[2:]} is negative")
    if min(out_size) == 0:
        y = np.empty((x.shape[0], cout) + out_size, packed.compute_dtype)
    else:
        y = packed.forward(x, out_size)
    return y[0] if unbatched else y
