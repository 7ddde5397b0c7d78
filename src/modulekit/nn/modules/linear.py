"""``Linear`` (packed GEMM, fused bias) and ``Identity``."""

from __future__ import annotations

import math

import numpy as np

from modulekit._ext._gemm import ACTIVATIONS, pack_linear
from modulekit._ext._tensor import Parameter
from modulekit.device import as_device
from modulekit.dtypes import as_dtype, float32
from modulekit.module import Module
from modulekit.nn._input import as_input
from modulekit.nn._random import default_generator
from modulekit.nn.modules._packed import PackedWeightLayer

__all__ = ["Identity", "Linear"]


class Identity(Module):
    """A placeholder that returns its input unchanged; constructor arguments are ignored."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, input):
        return input


class Linear(PackedWeightLayer):
    """``y = x @ weight.T + bias`` over the last dimension, as ``torch.nn.Linear``.

    Parameters
    ----------
    in_features, out_features : int
        Sizes of each input and output sample.
    bias : bool
        Whether to learn an additive bias.
    device : str or Device, optional
        Must be the CPU.
    dtype : DataType or name, optional
        Floating storage dtype of the parameters (default float32).

    Notes
    -----
    Weights are initialised as torch does (kaiming-uniform with ``a=sqrt(5)``: weight and bias
    both ``U(-1/sqrt(in_features), 1/sqrt(in_features))``) from NumPy's generator
    (:func:`modulekit.nn.manual_seed` makes it reproducible; values differ from torch's RNG).

    The first forward (or :meth:`~modulekit.Module.initialize`) packs ``weight`` and ``bias``
    into the GEMM kernel's layout and releases them: they then leave ``state_dict()`` and
    ``parameters()``; ``load_state_dict`` and ``to(dtype)`` re-pack. Inputs of shape
    ``(*, in_features)`` (any array-like of real numbers) give float32 outputs, or float64
    when the layer is float64. float16/bfloat16 layers store the weight in 16 bits and compute
    in float32.
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None
    ) -> None:
        super().__init__()
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"Linear: {name} must be a non-negative int, got {value!r}")
        if device is not None:
            as_device(device)
        dtype = float32 if dtype is None else as_dtype(dtype)
        if not dtype.is_floating:
            raise TypeError(f"Linear: dtype must be a floating type, got {dtype.name}")
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        rng = default_generator()
        shape = (self.out_features, self.in_features)
        self.weight = Parameter(rng.uniform(-bound, bound, shape).astype(dtype.numpy))
        if bias:
            self.bias = Parameter(rng.uniform(-bound, bound, out_features).astype(dtype.numpy))
        else:
            self.register_parameter("bias", None)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self._has_bias()}")

    # ---------------------------------------------------------------- packing
    def _pack_kernel(self, weight, bias, storage):
        return pack_linear(weight, bias, storage)

    def _weight_shape(self):
        return (self.out_features, self.in_features)

    # ---------------------------------------------------------------- compute
    def forward(self, input) -> np.ndarray:
        return self._compute(input, "none", 0.0, 0.0)

    def _fusable(self, following) -> int:
        epilogue = following[0]._epilogue if following and following[0] is not None else None
        return 1 if epilogue is not None and epilogue[0] in ACTIVATIONS else 0

    def _forward_fused(self, following, input) -> np.ndarray:
        return self._compute(input, *following[0]._epilogue)

    def _compute(self, input, activation: str, alpha: float, beta: float) -> np.ndarray:
        """``activation(input @ weight.T + bias)``, the activation applied in the kernel's
        epilogue while the output tile is in registers."""
        packed = self._packed
        if packed is None:
            self._pack()
            packed = self._packed
        x = as_input(input, "Linear")  # native byte order, real numbers
        # fast path: a 2-D float array of the right width goes straight to the kernel
        if x.dtype.kind == "f":
            shape = x.shape
            if len(shape) == 2 and shape[1] == self.in_features:
                return packed.forward(x, activation, alpha, beta)
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            got = x.shape[-1] if x.ndim else "a scalar"
            raise ValueError(
                f"Linear(in_features={self.in_features}, out_features={self.out_features}): "
                f"input's last dimension is {got}, expected {self.in_features} "
                f"(input shape {x.shape})"
            )
        if x.dtype.kind in "biu":  # the kernels take floating inputs only
            x = x.astype(packed.compute_dtype)
        if x.ndim == 2:
            return packed.forward(x, activation, alpha, beta)
        lead = x.shape[:-1]
        y = packed.forward(x.reshape(math.prod(lead), self.in_features), activation, alpha, beta)
        return y.reshape(lead + (self.out_features,))
