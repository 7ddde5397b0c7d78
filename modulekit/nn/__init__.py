"""Layers and containers with torch's names and constructor signatures.

``modulekit.nn.Module is modulekit.Module`` and ``modulekit.nn.Parameter is
modulekit.Parameter``; ``modulekit.nn.functional`` holds the stateless ops.
"""

from modulekit._ext._tensor import Parameter
from modulekit.module import LoadResult, Module, StateDictError, StateDictTypeError
from modulekit.nn import functional
from modulekit.nn._random import manual_seed
from modulekit.nn.modules import (
    GELU,
    Dropout,
    Flatten,
    Identity,
    Linear,
    ModuleDict,
    ModuleList,
    ReLU,
    ReLU6,
    Sequential,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)

__all__ = [
    "Dropout",
    "Flatten",
    "GELU",
    "Identity",
    "Linear",
    "LoadResult",
    "Module",
    "ModuleDict",
    "ModuleList",
    "Parameter",
    "ReLU",
    "ReLU6",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "StateDictError",
    "StateDictTypeError",
    "Tanh",
    "functional",
    "manual_seed",
]
