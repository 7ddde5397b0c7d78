"""``Dropout``: inverted dropout in training, identity in eval."""

from __future__ import annotations

from modulekit.module import Module
from modulekit.nn import functional as F
from modulekit.nn._input import as_input

__all__ = ["Dropout"]


class Dropout(Module):
    """Zero each element with probability ``p`` in training and scale the rest by
    ``1 / (1 - p)`` (NumPy generator, see :func:`modulekit.nn.manual_seed`); in eval mode the
    input is returned unchanged."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return F.dropout(as_input(input, "Dropout"), self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
