"""The rest of torch.nn's activations: torch names, signatures and reprs, each a
thin layer over its :mod:`modulekit.nn.functional` function."""

from __future__ import annotations

import numpy as np

from modulekit._ext._tensor import Parameter
from modulekit.device import as_device
from modulekit.dtypes import as_dtype, float32
from modulekit.module import Module
from modulekit.nn import functional as F
from modulekit.nn._input import as_input

__all__ = [
    "CELU",
    "ELU",
    "GLU",
    "Hardshrink",
    "Hardsigmoid",
    "Hardtanh",
    "LeakyReLU",
    "LogSigmoid",
    "LogSoftmax",
    "Mish",
    "PReLU",
    "RReLU",
    "SELU",
    "Softmax2d",
    "Softmin",
    "Softplus",
    "Softshrink",
    "Softsign",
    "Tanhshrink",
    "Threshold",
]


def _inplace_repr(inplace: bool) -> str:
    return ", inplace=True" if inplace else ""


class Threshold(Module):
    """``x if x > threshold else value`` element-wise, as ``torch.nn.Threshold``."""

    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return F.threshold(
            as_input(input, self._get_name()), self.threshold, self.value, self.inplace
        )

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}{_inplace_repr(self.inplace)}"


class LeakyReLU(Module):
    """``x if x >= 0 else negative_slope * x``, as ``torch.nn.LeakyReLU``."""

    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return F.leaky_relu(as_input(input, self._get_name()), self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}{_inplace_repr(self.inplace)}"


class PReLU(Module):
    """``x if x >= 0 else weight * x`` with a learned slope (one, or one per channel of
    dimension 1), as ``torch.nn.PReLU``; state-dict key ``weight``."""

    def __init__(
        self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None
    ) -> None:
        super().__init__()
        if (
            isinstance(num_parameters, bool)
            or not isinstance(num_parameters, (int, np.integer))
            or num_parameters < 1
        ):
            raise ValueError(
                f"PReLU: num_parameters must be a positive int, got {num_parameters!r}"
            )
        if device is not None:
            as_device(device)
        dtype = float32 if dtype is None else as_dtype(dtype)
        if not dtype.is_floating:
            raise TypeError(f"PReLU: dtype must be a floating type, got {dtype.name}")
        self.num_parameters = int(num_parameters)
        self.init = init
        self.weight = Parameter(np.full(self.num_parameters, init, dtype=dtype.numpy))

    def forward(self, input):
        x = as_input(input, "PReLU")
        if self.weight.dtype.name == "float64":
            x = x.astype(np.float64, copy=False)
        try:
            return F.prelu(x, self.weight)
        except ValueError as exc:
            raise ValueError(f"PReLU({self.num_parameters}): {exc}") from None

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class RReLU(Module):
    """Randomised leaky ReLU, as ``torch.nn.RReLU``: slope ``(lower + upper) / 2`` in eval
    mode; per-element slopes drawn from ``U(lower, upper)`` in training mode (the library's
    generator)."""

    def __init__(
        self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False
    ) -> None:
        super().__init__()
        if lower > upper:
            raise ValueError(f"RReLU: lower bound {lower} must not exceed upper bound {upper}")
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(
            as_input(input, self._get_name()), self.lower, self.upper, self.training, self.inplace
        )

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}{_inplace_repr(self.inplace)}"


class _AlphaActivation(Module):
    _fn = None

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return type(self)._fn(as_input(input, self._get_name()), self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}{_inplace_repr(self.inplace)}"


class ELU(_AlphaActivation):
    """``x if x > 0 else alpha * (exp(x) - 1)``, as ``torch.nn.ELU``."""

    _fn = staticmethod(F.elu)


class CELU(_AlphaActivation):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``, as ``torch.nn.CELU``."""

    _fn = staticmethod(F.celu)


class SELU(Module):
    """``scale * elu(x, alpha)`` with torch's fixed constants, as ``torch.nn.SELU``."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.selu(as_input(input, self._get_name()), self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Hardtanh(Module):
    """``min(max(x, min_val), max_val)``, as ``torch.nn.Hardtanh``."""

    def __init__(
        self,
        min_val: float = -1.0,
        max_val: float = 1.0,
        inplace: bool = False,
        min_value=None,
        max_value=None,
    ) -> None:
        super().__init__()
        if min_value is not None:  # torch's deprecated spellings
            min_val = min_value
        if max_value is not None:
            max_val = max_value
        if max_val <= min_val:
            raise ValueError(f"Hardtanh: max_val {max_val} must be greater than min_val {min_val}")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input):
        return F.hardtanh(
            as_input(input, self._get_name()), self.min_val, self.max_val, self.inplace
        )

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}{_inplace_repr(self.inplace)}"


class Hardsigmoid(Module):
    """``relu6(x + 3) / 6``, as ``torch.nn.Hardsigmoid``."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.hardsigmoid(as_input(input, self._get_name()), self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Mish(Module):
    """``x * tanh(softplus(x))``, as ``torch.nn.Mish``."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.mish(as_input(input, self._get_name()), self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta`` (linear above ``threshold``), as
    ``torch.nn.Softplus``."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(as_input(input, self._get_name()), self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class _Shrink(Module):
    _fn = None

    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return type(self)._fn(as_input(input, self._get_name()), self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Hardshrink(_Shrink):
    """``x if |x| > lambd else 0``, as ``torch.nn.Hardshrink``."""

    _fn = staticmethod(F.hardshrink)


class Softshrink(_Shrink):
    """``x -+ lambd`` outside ``[-lambd, lambd]``, 0 inside, as ``torch.nn.Softshrink``."""

    _fn = staticmethod(F.softshrink)


class _Elementwise(Module):
    _fn = None

    def forward(self, input):
        return type(self)._fn(as_input(input, self._get_name()))


class Softsign(_Elementwise):
    """``x / (1 + |x|)``, as ``torch.nn.Softsign``."""

    _fn = staticmethod(F.softsign)


class LogSigmoid(_Elementwise):
    """``log(sigmoid(x))`` computed stably, as ``torch.nn.LogSigmoid``."""

    _fn = staticmethod(F.logsigmoid)


class Tanhshrink(_Elementwise):
    """``x - tanh(x)``, as ``torch.nn.Tanhshrink``."""

    _fn = staticmethod(F.tanhshrink)


class _DimActivation(Module):
    _fn = None

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return type(self)._fn(as_input(input, self._get_name()), self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(_DimActivation):
    """``log(softmax(x))`` along ``dim``, computed stably, as ``torch.nn.LogSoftmax``."""

    _fn = staticmethod(F.log_softmax)


class Softmin(_DimActivation):
    """``softmax(-x)`` along ``dim``, as ``torch.nn.Softmin``."""

    _fn = staticmethod(F.softmin)


class Softmax2d(Module):
    """Softmax over the channels of a (N, C, H, W) or (C, H, W) input at every location, as
    ``torch.nn.Softmax2d``."""

    def forward(self, input):
        x = F.as_float_array(as_input(input, self._get_name()), "Softmax2d")
        if x.ndim not in (3, 4):
            raise ValueError(
                f"Softmax2d: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, "
                f"got shape {x.shape}"
            )
        return F.softmax(x, -3)


class GLU(Module):
    """Gated linear unit ``a * sigmoid(b)`` over the two halves of ``dim``, as
    ``torch.nn.GLU``."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(as_input(input, self._get_name()), self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
