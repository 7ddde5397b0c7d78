"""``Conv2d`` (packed indirect-GEMM / depthwise kernels, fused epilogues) and the folding of
an eval-mode BatchNorm2d into a convolution (:func:`fold_conv_bn`), which a Sequential's fused
call and the planner's ``conv_bn_fold`` rule (``modulekit.compile.rules.conv``) share.
"""

from __future__ import annotations

import math

import numpy as np

from modulekit._ext import _conv
from modulekit._ext._tensor import Parameter
from modulekit.dtypes import as_dtype
from modulekit.nn._input import as_input
from modulekit.nn._random import default_generator
from modulekit.nn.modules._packed import PackedWeightLayer
from modulekit.nn.modules.batchnorm import BatchNorm2d
from modulekit.nn.modules.conv_nd import _check_channels, _layer_dtype

__all__ = ["Conv2d", "fold_conv_bn"]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _pair(value, name):
    """An int or pair of ints as a pair, each within the kernels' range (``ValueError`` naming
    the parameter and the range past it: ``_conv.MAX_WINDOW``)."""
    return _conv._pair(value, name, "Conv2d")


class Conv2d(PackedWeightLayer):
    """2-D convolution over an (N, C_in, H, W) or (C_in, H, W) input, as ``torch.nn.Conv2d``.

    Parameters
    ----------
    in_channels, out_channels : int
    kernel_size, stride, dilation : int or (int, int)
    padding : int, (int, int), 'valid' or 'same'
        'same' needs stride 1 and pads ``dilation*(k-1)`` in total, the odd element at the end.
    groups : int
        Divides both channel counts; ``groups == in_channels == out_channels`` runs the
        depthwise kernel.
    bias : bool
    padding_mode : {'zeros', 'reflect', 'replicate', 'circular'}
        Other modes than 'zeros' pad the input in the forward ('reflect' needs each padding
        smaller than the input's size, 'circular' at most that size, as torch) and run the
        convolution unpadded; such a layer is not fused with a following norm or activation.
    device : must be the CPU
    dtype : floating DataType or name (default float32)

    Notes
    -----
    Weights are initialised as torch does (kaiming-uniform, ``a=sqrt(5)``: weight and bias
    ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``, ``fan_in = in_channels/groups * kH * kW``) from
    NumPy's generator. The first forward (or :meth:`~modulekit.Module.initialize`) packs
    ``weight`` and ``bias`` into the kernel layout and releases them; they then leave
    ``state_dict()`` and ``parameters()`` (``state_dict(include_packed=True)`` exports them),
    and ``load_state_dict`` / ``to(dtype)`` re-pack. float16/bfloat16 layers store 16-bit
    weights and compute in float32; float64 layers compute in float64.

    Needs the input's shape to be fully prepared: a 3x3 stride-1 float32 layer chooses
    Winograd F(2x2)/F(4x4) or the implicit GEMM per input size, batch and thread count, and
    builds the chosen Winograd variant's transformed weights on the first call that uses it.
    ``initialize()`` cannot do that; ``initialize(example)`` does (it runs the example).
    """

    _fused = None  # {(id(bn), activation): (PackedConv2d, bn's tensors and eps)} (Sequential)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        _check_channels(in_channels, out_channels, groups, "Conv2d")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(
                f"Conv2d: padding_mode must be one of {_PADDING_MODES}, got {padding_mode!r}"
            )
        dtype = _layer_dtype(dtype, device, "Conv2d")
        self.in_channels = int(in_channels)
        self.out_channels = int(out_channels)
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = _pair(stride, "stride")
        self.dilation = _pair(dilation, "dilation")
        if min(self.kernel_size) < 1 or min(self.stride) < 1 or min(self.dilation) < 1:
            raise ValueError(
                f"Conv2d: kernel_size {self.kernel_size}, stride {self.stride} and dilation "
                f"{self.dilation} must be positive"
            )
        _conv._check_extent(self.kernel_size, self.dilation, "Conv2d")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(
                    f"Conv2d: invalid padding string {padding!r}, should be one of "
                    "{'valid', 'same'}"
                )
            if padding == "same" and self.stride != (1, 1):
                raise ValueError("Conv2d: padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _pair(padding, "padding")
            if min(self.padding) < 0:
                raise ValueError(f"Conv2d: padding must be non-negative, got {padding!r}")
        self.groups = int(groups)
        self.padding_mode = padding_mode
        self._reset_parameters(dtype, bias)

    def _reset_parameters(self, dtype, bias: bool) -> None:
        """Create ``weight`` (and ``bias``, or register it as None) as torch initialises them
        (``LazyConv2d`` calls this when it materialises)."""
        kh, kw = self.kernel_size
        fan_in = self.in_channels // self.groups * kh * kw
        bound = 1.0 / math.sqrt(fan_in)
        rng = default_generator()
        shape = (self.out_channels, self.in_channels // self.groups, kh, kw)
        self.weight = Parameter(rng.uniform(-bound, bound, shape).astype(dtype.numpy))
        if bias:
            self.bias = Parameter(
                rng.uniform(-bound, bound, self.out_channels).astype(dtype.numpy))
        else:
            self.register_parameter("bias", None)

    def extra_repr(self) -> str:
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding != (0, 0):
            s += f", padding={self.padding}"  # torch prints 'same' unquoted
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if not self._has_bias():
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"  # unquoted, as torch
        return s

    # ---------------------------------------------------------------- packing protocol
    def _pack_args(self):
        padding = self.padding if self.padding_mode == "zeros" else 0  # padded in forward
        return dict(
            stride=self.stride, padding=padding, dilation=self.dilation, groups=self.groups
        )

    def _pack_kernel(self, weight, bias, storage):
        return _conv.pack_conv2d(weight, bias, storage=storage, **self._pack_args())

    def _weight_shape(self):
        kh, kw = self.kernel_size
        return (self.out_channels, self.in_channels // self.groups, kh, kw)

    def _packed_changed(self) -> None:
        self._fused = None  # the folded Conv+BN kernels follow the weights

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("_fused", None)  # a cache of kernel objects, rebuilt on demand
        return state

    # ---------------------------------------------------------------- compute
    def _error(self, exc: Exception) -> ValueError:
        return ValueError(f"{self._get_name()}({self.extra_repr()}): {exc}")

    def forward(self, input) -> np.ndarray:
        packed = self._packed
        if packed is None:
            self._pack()
            packed = self._packed
        x = as_input(input, "Conv2d")
        if self.padding_mode != "zeros":
            x = self._pad_input(x)
        try:
            return packed.forward(x)
        except ValueError as exc:
            raise self._error(exc) from None

    def _pad_input(self, x: np.ndarray) -> np.ndarray:
        """The input padded by ``padding_mode`` (conv_nd.pad_input), checked first."""
        from modulekit.nn.modules.conv_nd import _same_pads, pad_input

        if x.ndim not in (3, 4):
            raise ValueError(
                f"Conv2d: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape {x.shape}")
        if self.padding == "same":
            pads = _same_pads(self.kernel_size, self.dilation)
        elif self.padding == "valid":
            pads = ((0, 0), (0, 0))
        else:
            pads = tuple((p, p) for p in self.padding)
        if x.ndim == 3:
            return pad_input(x[None], pads, self.padding_mode, "Conv2d")[0]
        return pad_input(x, pads, self.padding_mode, "Conv2d")

    # ---------------------------------------------------------------- fusion in containers
    _EPILOGUES = ("relu", "relu6", "silu", "hardswish")

    def _fusable(self, following) -> int:
        """In a Sequential: absorb a following BatchNorm2d (folded into the weights in eval
        mode) and/or a following ReLU/ReLU6/SiLU/Hardswish (the kernel's epilogue), and then
        a MaxPool2d (pooled straight from the convolution's row bands, see
        ``PackedConv2d.forward_maxpool``). Not with a padding_mode other than 'zeros'."""
        if self.padding_mode != "zeros":
            return 0
        n = 0
        if following and isinstance(following[0], BatchNorm2d):
            n = 1
        nxt = following[n] if len(following) > n else None
        epilogue = nxt._epilogue if nxt is not None else None
        if epilogue is not None and epilogue[0] in self._EPILOGUES:
            n += 1
        if len(following) > n and _plain_maxpool(following[n]):
            n += 1
        return n

    def _forward_fused(self, following, input) -> np.ndarray:
        input = as_input(input, "Conv2d")
        pool = following[-1] if _plain_maxpool(following[-1]) else None
        if pool is not None:
            following = following[:-1]
        bn = following[0] if following and following[0]._epilogue is None else None
        act = following[-1]._epilogue[0] if following and following[-1]._epilogue else None
        if bn is not None and (bn.training or bn.running_mean is None):
            # batch statistics (or none): the modules one by one, as torch runs them
            y = self(input)
            for m in following:
                y = m(y)
            return pool(y) if pool is not None else y
        if bn is not None:
            packed = self._fused_packed(bn, act)
        else:  # a Conv2d and its activation: the kernel's epilogue
            packed = self._packed
            if packed is None:
                self._pack()
                packed = self._packed
        try:
            if pool is not None:
                return packed.forward_maxpool(input, act, *_maxpool_args(pool))
            return packed.forward(input, act)
        except ValueError as exc:
            raise self._error(exc) from None

    # ---------------------------------------------------------------- Conv + BN fusion
    def _clear_fused(self, module=None, incompatible_keys=None) -> None:
        self._fused = None

    def _fused_packed(self, bn, activation):
        """The convolution with ``bn`` (eval statistics) folded in, cached until the weights
        or the norm's tensors are reloaded / re-cast (``load_state_dict``, ``to``), or the
        norm's tensors or ``eps`` are replaced (``bn.running_var = Tensor(...)``). Writes
        into a tensor's memory in place are not seen."""
        key = (id(bn), activation)
        b, p = bn._buffers, bn._parameters
        sources = (b.get("running_mean"), b.get("running_var"), p.get("weight"),
                   p.get("bias"), bn.eps)
        cache = self._fused
        if cache is not None:
            hit = cache.get(key)
            if hit is not None and all(x is y for x, y in zip(hit[1][:4], sources)) \
                    and hit[1][4] == sources[4]:
                return hit[0]
        packed = fold_conv_bn(self, bn)
        with self._pack_lock:
            if self._fused is None:
                # a cache, not structure: no structure-epoch bump (a compiled plan stays)
                self.__dict__["_fused"] = {}
                if not getattr(self, "_fuse_hooked", False):
                    # a checkpoint loaded into the tree (the norm's statistics included)
                    # invalidates the folded weights
                    self.register_load_state_dict_post_hook(self._clear_fused)
                    self.__dict__["_fuse_hooked"] = True
            self._fused[key] = (packed, sources)  # (the tensors held: no id reuse)
        return packed


def fold_conv_bn(conv: Conv2d, bn) -> _conv.PackedConv2d:
    """A new packed kernel computing ``bn(conv(x))`` for ``bn``'s eval statistics: the
    layer's weights (unpacked from its kernel, packed first if need be) and bias folded with
    ``w * gamma / sqrt(var + eps)``, ``(b - mean) * gamma / sqrt(var + eps) + beta``
    (``_conv.fold_batchnorm``, in the layer's compute dtype), packed in its storage dtype.

    The one folding function: a Sequential's fused call (``Conv2d._fused_packed``) and the
    planner's ``conv_bn_fold`` rule both use it, so they give the same bits."""
    if conv._packed is None:
        conv._pack()
    with conv._pack_lock:
        weight, bias = conv._packed.unpack()
        storage = conv._packed.storage
    compute = np.float64 if storage == "float64" else np.float32
    w, b = _conv.fold_batchnorm(
        np.asarray(weight).astype(compute),
        None if bias is None else np.asarray(bias).astype(compute),
        bn.running_mean.numpy(),
        bn.running_var.numpy(),
        None if bn.weight is None else bn.weight.numpy(),
        None if bn.bias is None else bn.bias.numpy(),
        bn.eps,
    )
    npdt = as_dtype(storage).numpy
    return _conv.pack_conv2d(w.astype(npdt), b.astype(npdt), storage=storage,
                             **conv._pack_args())


def _plain_maxpool(module) -> bool:
    """A MaxPool2d whose forward is MaxPool2d's own (one a convolution can absorb)."""
    from modulekit.nn.modules.pooling import MaxPool2d

    return isinstance(module, MaxPool2d) and type(module).forward is MaxPool2d.forward


def _maxpool_args(pool) -> tuple:
    """``PackedConv2d.forward_maxpool``'s pooling arguments for a MaxPool2d."""
    return (pool.kernel_size, pool.stride, pool.padding, pool.dilation, pool.ceil_mode)
