"""Element-wise activations and ``Softmax`` (torch names, signatures and reprs)."""

from __future__ import annotations

import numpy as np

from modulekit.module import Module
from modulekit.nn import functional as F
from modulekit.nn._input import as_input

__all__ = ["GELU", "Hardswish", "ReLU", "ReLU6", "SiLU", "Sigmoid", "Softmax", "Tanh"]


class _InplaceActivation(Module):
    _fn = None

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return type(self)._fn(as_input(input, self._get_name()), inplace=self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_InplaceActivation):
    """``max(x, 0)`` element-wise; ``inplace=True`` overwrites a writable float ndarray."""

    _fn = staticmethod(F.relu)
    _epilogue = ("relu", 0.0, 0.0)


class ReLU6(_InplaceActivation):
    """``min(max(x, 0), 6)`` element-wise."""

    _fn = staticmethod(F.relu6)
    _epilogue = ("relu6", 0.0, 6.0)


class SiLU(_InplaceActivation):
    """``x * sigmoid(x)`` element-wise."""

    _fn = staticmethod(F.silu)
    _epilogue = ("silu", 0.0, 0.0)


class GELU(Module):
    """GELU, exact (``approximate='none'``) or the tanh approximation."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    @property
    def _epilogue(self):
        return ("gelu" if self.approximate == "none" else "gelu_tanh", 0.0, 0.0)

    def forward(self, input):
        return F.gelu(as_input(input, "GELU"), approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Sigmoid(Module):
    """``1 / (1 + exp(-x))`` element-wise."""

    _epilogue = ("sigmoid", 0.0, 0.0)

    def forward(self, input):
        return F.sigmoid(as_input(input, "Sigmoid"))


class Tanh(Module):
    """Hyperbolic tangent element-wise."""

    _epilogue = ("tanh", 0.0, 0.0)

    def forward(self, input):
        return F.tanh(as_input(input, "Tanh"))


class Softmax(Module):
    """Softmax along ``dim`` (torch's legacy implicit choice, with a warning, when None)."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(as_input(input, "Softmax"), self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Hardswish(Module):
    """``x * relu6(x + 3) / 6`` element-wise, as ``torch.nn.Hardswish``."""

    _epilogue = ("hardswish", 0.0, 0.0)

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""

    def forward(self, input) -> np.ndarray:
        return F.hardswish(as_input(input, "Hardswish"))
