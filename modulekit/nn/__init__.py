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
    AdaptiveAvgPool2d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv2d,
    Dropout,
    Flatten,
    Hardswish,
    Identity,
    Linear,
    MaxPool2d,
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
    "AdaptiveAvgPool2d",
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv2d",
    "Dropout",
    "Flatten",
    "functional",
    "GELU",
    "Hardswish",
    "Identity",
    "Linear",
    "LoadResult",
    "manual_seed",
    "MaxPool2d",
    "Module",
    "ModuleDict",
    "ModuleList",
    "Parameter",
    "ReLU",
    "ReLU6",
    "Sequential",
    "Sigmoid",
    "SiLU",
    "Softmax",
    "StateDictError",
    "StateDictTypeError",
    "Tanh",
]

# transformer layers (branch bert)
from modulekit.nn.modules import (  # noqa: E402
    Embedding,
    LayerNorm,
    MultiheadAttention,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ += [
    "Embedding",
    "LayerNorm",
    "MultiheadAttention",
    "TransformerEncoder",
    "TransformerEncoderLayer",
]
