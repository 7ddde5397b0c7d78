"""The NumPy random generator behind layer initialisation and dropout."""

from __future__ import annotations

import numpy as np

__all__ = ["default_generator", "manual_seed"]

# Made on first use: numpy.random costs ~10 ms to import, which ``import modulekit`` need not pay.
_generator = None


def default_generator() -> np.random.Generator:
    """The process-wide generator used by ``Linear``'s default initialisation and dropout."""
    global _generator
    if _generator is None:
        _generator = np.random.default_rng()
    return _generator


def manual_seed(seed: int) -> np.random.Generator:
    """Reseed the generator (``np.random.default_rng(seed)``) so initialisation and dropout
    masks are reproducible; returns the new generator."""
    global _generator
    _generator = np.random.default_rng(seed)
    return _generator
