"""Layers and containers with torch's names and constructor signatures.

``modulekit.nn.Module is modulekit.Module`` and ``modulekit.nn.Parameter is
modulekit.Parameter``; ``modulekit.nn.functional`` holds the stateless ops and
``modulekit.nn.utils`` the recurrent layers' sequence packing.
"""

from modulekit._ext._tensor import Parameter
from modulekit.module import LoadResult, Module, StateDictError, StateDictTypeError
from modulekit.nn import functional, utils
from modulekit.nn import modules as _modules
from modulekit.nn._random import manual_seed
from modulekit.nn.modules import *  # noqa: F403 - every layer class (modules.__all__)

__all__ = [
    "LoadResult",
    "Module",
    "Parameter",
    "StateDictError",
    "StateDictTypeError",
    "functional",
    "manual_seed",
    "utils",
    *_modules.__all__,
]
