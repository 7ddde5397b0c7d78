"""``Flatten``: merge a range of dimensions."""

from __future__ import annotations

from modulekit.module import Module
from modulekit.nn import functional as F
from modulekit.nn._input import as_input

__all__ = ["Flatten"]


class Flatten(Module):
    """Merge dimensions ``start_dim..end_dim`` into one (default: all but the batch one)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input):
        return F.flatten(as_input(input, "Flatten"), self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
