"""``DynamicQuantizedLinear``: a Linear with int8 weights and per-call int8 activations
(``modulekit.quantization`` has the scheme and ``quantize_dynamic``)."""

from __future__ import annotations

import math

import numpy as np

from modulekit._ext._qgemm import ACTIVATIONS as _EPILOGUE
from modulekit._ext._qgemm import MAX_IN_FEATURES, pack_qlinear, quantize_weight
from modulekit._ext._tensor import Parameter, Tensor
from modulekit.dtypes import DataType, float32, int8
from modulekit.module import Module
from modulekit.nn._input import as_input

__all__ = ["DynamicQuantizedLinear"]


def _after():
    from modulekit.nn import functional as F

    return {"gelu": F.gelu, "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
            "silu": F.silu, "sigmoid": F.sigmoid, "tanh": F.tanh}


_AFTER = _after()


class DynamicQuantizedLinear(Module):
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
    _packed = None
    _float_dtype = float32  # what weight_scale and bias report while packed (see to())

    def _pack(self) -> None:
        with self._pack_lock:
            if self._packed is not None:
                return
            weight, scale = self._buffers["weight"], self._buffers["weight_scale"]
            bias = self._parameters.get("bias")
            if weight.dtype != int8:
                raise TypeError(f"DynamicQuantizedLinear: weight must be int8, got "
                                f"{weight.dtype.name}")
            packed = pack_qlinear(weight.numpy(), scale.numpy(),
                                  None if bias is None else bias.numpy())
            self._float_dtype = scale.dtype
            del self._buffers["weight"], self._buffers["weight_scale"]
            if bias is not None:
                del self._parameters["bias"]
            self._packed = packed

    def _packed_keys(self) -> dict[str, tuple[tuple[int, ...], DataType]]:
        packed = self._packed
        if packed is None:
            return {}
        n, k = self.out_features, self.in_features
        keys = {"weight": ((n, k), int8), "weight_scale": ((n,), self._float_dtype)}
        if packed.has_bias:
            keys["bias"] = ((n,), self._float_dtype)
        return keys

    def _packed_values(self) -> dict[str, np.ndarray]:
        packed = self._packed
        if packed is None:
            return {}
        q, scale, bias = packed.unpack()
        dtype = self._float_dtype.numpy
        values = {"weight": q, "weight_scale": scale.astype(dtype)}
        if bias is not None:
            values["bias"] = bias.astype(dtype)
        return values

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
            packed = self._packed
            if packed is None:
                return
            q, scale, bias = packed.unpack()
            q = values.get("weight", q)
            scale = values.get("weight_scale", scale)
            bias = values.get("bias", bias)
            # the kernels compute with float32 scales whatever ``to(dtype)`` asks: a cast
            # changes only the dtype the state dict reports for weight_scale and bias
            self._packed = pack_qlinear(np.asarray(q), np.asarray(scale, np.float32),
                                        None if bias is None else np.asarray(bias, np.float32))
            if dtype is not None:
                self._float_dtype = dtype

    # ---------------------------------------------------------------- compute
    def forward(self, input) -> np.ndarray:
        return self._compute(input, "none", 0.0, 0.0)

    def _compute(self, input, activation: str, alpha: float, beta: float) -> np.ndarray:
        """``activation(self(input))`` (a name of ``modulekit._ext._gemm.ACTIVATIONS``, as
        ``Linear._compute``): relu, relu6 and clamp in the kernel's epilogue, the others
        applied to its float32 output by ``modulekit.nn.functional``."""
        if activation not in _EPILOGUE:
            y = self._compute(input, "none", 0.0, 0.0)
            if activation not in _AFTER:
                raise ValueError(f"DynamicQuantizedLinear: unknown activation {activation!r}")
            return _AFTER[activation](y)
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
