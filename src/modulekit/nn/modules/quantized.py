"""Quantized layers: ``DynamicQuantizedLinear`` (int8 weights, int8 activations quantized per
call) and ``QuantizedConv2d`` (int8 weights, activations quantized with calibrated
parameters); ``modulekit.quantization`` has the schemes, ``quantize_dynamic`` and
``quantize_static``."""

from __future__ import annotations

import math

import numpy as np

from modulekit._ext import _qgemm
from modulekit._ext._qgemm import ACTIVATIONS as _EPILOGUE
from modulekit._ext._qgemm import MAX_IN_FEATURES, pack_qlinear, quantize_weight
from modulekit._ext._tensor import Parameter, Tensor
from modulekit.dtypes import DataType, float32, int8
from modulekit.module import Module
from modulekit.nn._input import as_input

__all__ = ["DynamicQuantizedLinear", "QuantizedConv2d", "quantizable"]




class _QuantizedLayer(Module):
    """``Module``'s packing protocol for a layer of int8 ``weight``, float ``weight_scale``,
    an optional float ``bias`` (a Parameter) and the buffers of :attr:`_EXTRA`: a subclass
    says how to pack their values (:meth:`_pack_values`) and how to read them back from the
    packed object (:meth:`_packed_state`). Floating tensors report ``_float_dtype`` while
    packed: the kernels compute with float32 scales whatever ``to(dtype)`` asks, so a cast
    changes only the dtype the state dict reports."""

    _packed = None
    _float_dtype = float32
    _EXTRA: tuple[str, ...] = ()
    _shapes: dict = {}  # name -> (shape, dtype) while packed

    def _pack_values(self, values: dict[str, np.ndarray]):
        raise NotImplementedError

    def _packed_state(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _pack(self) -> None:
        with self._pack_lock:
            if self._packed is not None:
                return
            if self._buffers["weight"].dtype != int8:
                raise TypeError(f"{type(self).__name__}: weight must be int8, got "
                                f"{self._buffers['weight'].dtype.name}")
            names = ("weight", "weight_scale") + self._EXTRA
            tensors = {k: self._buffers[k] for k in names}
            bias = self._parameters.get("bias")
            if bias is not None:
                tensors["bias"] = bias
            packed = self._pack_values({k: t.numpy() for k, t in tensors.items()})
            self._float_dtype = tensors["weight_scale"].dtype
            self.__dict__["_shapes"] = {k: (tuple(t.shape), t.dtype) for k, t in tensors.items()}
            for k in names:
                del self._buffers[k]
            if bias is not None:
                del self._parameters["bias"]
            self._packed = packed

    def _has_bias(self) -> bool:
        if self._packed is not None:
            return "bias" in self._shapes
        return self._parameters.get("bias") is not None

    def _packed_keys(self) -> dict[str, tuple[tuple[int, ...], DataType]]:
        if self._packed is None:
            return {}
        return {k: (shape, self._float_dtype if dtype.is_floating else dtype)
                for k, (shape, dtype) in self._shapes.items()}

    def _packed_values(self) -> dict[str, np.ndarray]:
        if self._packed is None:
            return {}
        state = self._packed_state()
        return {k: np.ascontiguousarray(state[k], dtype=dtype.numpy).reshape(shape)
                for k, (shape, dtype) in self._packed_keys().items()}

    def _unpack(self) -> None:
        if self._packed is None:
            return
        values = self._packed_values()
        bias = values.pop("bias", None)
        buffers = dict(self._buffers)
        buffers.update((k, Tensor(v)) for k, v in values.items())
        self.__dict__["_buffers"] = buffers
        if bias is not None:
            params = dict(self._parameters)
            params["bias"] = Parameter(bias)
            self.__dict__["_parameters"] = params
        self._packed = None

    def _repack(self, values: dict[str, np.ndarray], dtype: DataType | None = None) -> None:
        with self._pack_lock:
            if self._packed is None:
                return
            state = self._packed_state()
            state.update(values)
            self._packed = self._pack_values(state)
            if dtype is not None:
                self._float_dtype = dtype


class DynamicQuantizedLinear(_QuantizedLayer):
    """A ``Linear`` with int8 weights and int8 activations quantized per call.

    Parameters
    ----------
    in_features, out_features : int
    bias : bool
        Whether the layer adds a float32 bias.

    Attributes
    ----------
    weight : Tensor
        int8, ``(out_features, in_features)``, values in [-127, 127] (a buffer).
    weight_scale : Tensor
        float32, ``(out_features,)``: the dequantized weight is ``weight * weight_scale[:, None]``.
    bias : Parameter or None
        float32, ``(out_features,)``.

    A new layer holds zero weights; :meth:`from_float` (and :func:`quantize_dynamic`) build
    one from a float ``Linear``. The state dict holds exactly ``weight``, ``weight_scale`` and
    ``bias``; like ``Linear``, the layer packs them into the kernel layout on its first call
    (or ``initialize()``). Inputs of any real dtype are computed in float32 and the output is
    float32.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(
                    f"DynamicQuantizedLinear: {name} must be a non-negative int, got {value!r}")
        if in_features > MAX_IN_FEATURES:
            raise ValueError(f"DynamicQuantizedLinear: in_features {in_features} exceeds "
                             f"{MAX_IN_FEATURES}, past which the int32 sums could overflow")
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.register_buffer("weight", Tensor(np.zeros((out_features, in_features), np.int8)))
        self.register_buffer("weight_scale", Tensor(np.ones(out_features, np.float32)))
        if bias:
            self.bias = Parameter(np.zeros(out_features, np.float32))
        else:
            self.register_parameter("bias", None)

    @classmethod
    def from_float(cls, linear) -> DynamicQuantizedLinear:
        """The quantized twin of a float ``Linear`` (its weights quantized per output
        channel; the Linear is left unchanged)."""
        state = linear.state_dict(include_packed=True)
        weight = state["weight"].numpy() if hasattr(state["weight"], "numpy") else state["weight"]
        q, scale = quantize_weight(np.asarray(weight))
        out_features, in_features = q.shape
        layer = cls(in_features, out_features, bias="bias" in state)
        layer.weight.numpy()[...] = q
        layer.weight_scale.numpy()[...] = scale
        if "bias" in state:
            layer.bias.numpy()[...] = np.asarray(state["bias"], dtype=np.float32)
        return layer

    def extra_repr(self) -> str:
        bias = self._packed.has_bias if self._packed is not None else self.bias is not None
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={bias}, dtype=int8")

    # ---------------------------------------------------------------- packing protocol
    def _pack_values(self, values):
        bias = values.get("bias")
        # the kernels compute with float32 scales and bias
        return pack_qlinear(np.asarray(values["weight"]),
                            np.asarray(values["weight_scale"], np.float32),
                            None if bias is None else np.asarray(bias, np.float32))

    def _packed_state(self):
        q, scale, bias = self._packed.unpack()
        state = {"weight": q, "weight_scale": scale}
        if bias is not None:
            state["bias"] = bias
        return state

    # ---------------------------------------------------------------- compute
    def forward(self, input) -> np.ndarray:
        return self._compute(input, "none", 0.0, 0.0)

    def _compute(self, input, activation: str, alpha: float, beta: float) -> np.ndarray:
        """``activation(self(input))`` (a name of ``modulekit._ext._gemm.ACTIVATIONS``, as
        ``Linear._compute``), in the kernel's epilogue: relu, relu6 and clamp as bounds, the
        others by the activation math ``modulekit.nn.functional`` evaluates (the same bits as
        the activation applied to the layer's output)."""
        if activation not in _EPILOGUE:
            raise ValueError(f"DynamicQuantizedLinear: unknown activation {activation!r}")
        packed = self._packed
        if packed is None:
            self._pack()
            packed = self._packed
        x = as_input(input, "DynamicQuantizedLinear")
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            got = x.shape[-1] if x.ndim else "a scalar"
            raise ValueError(
                f"DynamicQuantizedLinear(in_features={self.in_features}, out_features="
                f"{self.out_features}): input's last dimension is {got}, expected "
                f"{self.in_features} (input shape {x.shape})")
        if x.ndim == 2:
            return packed.forward(x, activation, alpha, beta)
        lead = x.shape[:-1]
        y = packed.forward(x.reshape(math.prod(lead), self.in_features), activation, alpha,
                           beta)
        return y.reshape(lead + (self.out_features,))


def quantizable(conv) -> bool:
    """Whether a float ``Conv2d`` has a quantized twin: groups 1 or depthwise (groups = in =
    out channels), ``padding_mode='zeros'``, numeric padding."""
    return (conv.groups == 1 or conv.groups == conv.in_channels == conv.out_channels) and \
        conv.padding_mode == "zeros" and not isinstance(conv.padding, str)


def _pair(value) -> tuple[int, int]:
    return (int(value), int(value)) if isinstance(value, (int, np.integer)) else \
        tuple(int(v) for v in value)


class QuantizedConv2d(_QuantizedLayer):
    """A ``Conv2d`` (groups 1 or depthwise, zero padding) computing in int8: its input
    quantized with one calibrated scale and zero point (``x_q = clamp(rint(x / input_scale) +
    input_zero_point, 0, 255)``), weights symmetric int8 per output channel, int32 sums, a
    float32 epilogue.

    Parameters
    ----------
    in_channels, out_channels : int
    kernel_size, stride, padding, dilation : int or pair of ints
    bias : bool
    groups : int
        1, or ``in_channels`` = ``out_channels`` (depthwise).

    Attributes
    ----------
    weight : Tensor
        int8, ``(out_channels, in_channels / groups, kh, kw)``, values in [-127, 127] (a
        buffer).
    weight_scale : Tensor
        float32, ``(out_channels,)``.
    bias : Parameter or None
        float32, ``(out_channels,)``.
    input_scale : Tensor
        float32, ``()``: the calibrated scale of the input.
    input_zero_point : Tensor
        int32, ``()``, within [0, 255].
    scale, zero_point : Tensor
        float32 ``()`` and int32 ``()``: the calibrated quantization of the layer's output
        (torch's names): what a compiled plan stores it in where only residual adds read it.

    :meth:`from_float` (and :func:`modulekit.quantization.quantize_static`) build one from a
    float ``Conv2d`` (and the ``BatchNorm2d`` folded into it). The state dict holds exactly
    the seven tensors above. Called alone, the layer returns float32 (N, C, H, W); in a
    compiled plan a chain of quantized convolutions hands its activations on as bytes (see
    ``quantize_static``).
    """

    _EXTRA = ("input_scale", "input_zero_point", "scale", "zero_point")

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, bias: bool = True, groups: int = 1) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(
                    f"QuantizedConv2d: {name} must be a positive int, got {value!r}")
        try:
            geometry = [_pair(v) for v in (kernel_size, stride, padding, dilation)]
        except (TypeError, ValueError):
            geometry = None
        if geometry is None or any(len(g) != 2 for g in geometry) or \
                min(geometry[0] + geometry[1] + geometry[3]) < 1 or min(geometry[2]) < 0:
            raise ValueError(f"QuantizedConv2d: kernel_size, stride and dilation must be "
                             f"positive ints (or pairs), padding non-negative; got "
                             f"{kernel_size!r}, {stride!r}, {dilation!r}, {padding!r}")
        if groups != 1 and not (groups == in_channels == out_channels):
            raise ValueError(f"QuantizedConv2d: groups must be 1 or in_channels = out_channels "
                             f"(depthwise), got groups={groups!r} for {in_channels} -> "
                             f"{out_channels} channels")
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.groups = int(groups)
        self.kernel_size, self.stride, self.padding, self.dilation = geometry
        if in_channels * geometry[0][0] * geometry[0][1] > MAX_IN_FEATURES:
            raise ValueError(f"QuantizedConv2d: in_channels * kernel area exceeds "
                             f"{MAX_IN_FEATURES}, past which the int32 sums could overflow")
        shape = (out_channels, in_channels // groups) + self.kernel_size
        self.register_buffer("weight", Tensor(np.zeros(shape, np.int8)))
        self.register_buffer("weight_scale", Tensor(np.ones(out_channels, np.float32)))
        self.register_buffer("input_scale", Tensor(np.ones((), np.float32)))
        self.register_buffer("input_zero_point", Tensor(np.zeros((), np.int32)))
        self.register_buffer("scale", Tensor(np.ones((), np.float32)))
        self.register_buffer("zero_point", Tensor(np.zeros((), np.int32)))
        if bias:
            self.bias = Parameter(np.zeros(out_channels, np.float32))
        else:
            self.register_parameter("bias", None)

    @classmethod
    def from_float(cls, conv, input_qparams: tuple[float, int],
                   output_qparams: tuple[float, int] = (1.0, 0), bn=None) -> QuantizedConv2d:
        """The quantized twin of a float ``Conv2d`` (groups 1 or depthwise,
        ``padding_mode='zeros'``, numeric padding), with ``bn`` (a ``BatchNorm2d`` in eval mode
        reading the convolution's output) folded in first, and the input and output
        quantizations ``(scale, zero_point)``. The float layers are left unchanged."""
        from modulekit.nn.modules.conv import fold_conv_bn

        if not quantizable(conv):
            raise ValueError(f"QuantizedConv2d.from_float: only groups=1 or depthwise, "
                             f"padding_mode='zeros' and numeric padding are quantized, got "
                             f"{conv!r}")
        if bn is not None:
            weight, bias = fold_conv_bn(conv, bn).unpack()
        else:
            state = conv.state_dict(include_packed=True)
            weight, bias = state["weight"], state.get("bias")
        w = np.asarray(weight, dtype=np.float64)
        q, scale = quantize_weight(w.reshape(w.shape[0], -1))
        layer = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride,
                    conv.padding, conv.dilation, bias=bias is not None, groups=conv.groups)
        layer.weight.numpy()[...] = q.reshape(w.shape)
        layer.weight_scale.numpy()[...] = scale
        layer.input_scale.numpy()[...], layer.input_zero_point.numpy()[...] = input_qparams
        layer.scale.numpy()[...], layer.zero_point.numpy()[...] = output_qparams
        if bias is not None:
            layer.bias.numpy()[...] = np.asarray(bias, dtype=np.float32)
        return layer

    def extra_repr(self) -> str:
        bias = self._packed.has_bias if self._packed is not None else self.bias is not None
        groups = f", groups={self.groups}" if self.groups != 1 else ""
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, dilation={self.dilation}"
                f"{groups}, bias={bias}, dtype=int8")

    # ---------------------------------------------------------------- packing protocol
    def _pack_values(self, values):
        bias = values.get("bias")
        return _qgemm.pack_qconv2d(
            np.asarray(values["weight"]), np.asarray(values["weight_scale"], np.float32),
            None if bias is None else np.asarray(bias, np.float32),
            float(np.asarray(values["input_scale"], np.float32)),
            int(np.asarray(values["input_zero_point"])), self.stride, self.padding,
            self.dilation, float(np.asarray(values["scale"], np.float32)),
            int(np.asarray(values["zero_point"])), self.groups)

    def _packed_state(self):
        packed = self._packed
        q, scale, bias = packed.unpack()
        state = {"weight": q, "weight_scale": scale,
                 "input_scale": np.asarray(packed.input_scale, np.float32),
                 "input_zero_point": np.asarray(packed.input_zero_point, np.int32),
                 "scale": np.asarray(packed.output_scale, np.float32),
                 "zero_point": np.asarray(packed.output_zero_point, np.int32)}
        if bias is not None:
            state["bias"] = bias
        return state

    # ---------------------------------------------------------------- compute
    def _error(self, exc: Exception) -> ValueError:
        return ValueError(f"{self._get_name()}({self.extra_repr()}): {exc}")

    def forward(self, input) -> np.ndarray:
        packed = self._packed
        if packed is None:
            self._pack()
            packed = self._packed
        x = input if isinstance(input, _qgemm.QuantizedArray) else as_input(input,
                                                                             "QuantizedConv2d")
        try:
            return packed.forward(x)
        except ValueError as exc:
            raise self._error(exc) from None
