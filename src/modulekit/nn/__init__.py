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
    Embedding,
    Flatten,
    Hardswish,
    Identity,
    LayerNorm,
    Linear,
    MaxPool2d,
    ModuleDict,
    ModuleList,
    MultiheadAttention,
    ReLU,
    ReLU6,
    Sequential,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from modulekit.nn.modules.conv_nd import (
    Conv1d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
)

__all__ = [
    "AdaptiveAvgPool2d",
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv2d",
    "Dropout",
    "Embedding",
    "Flatten",
    "functional",
    "GELU",
    "Hardswish",
    "Identity",
    "LayerNorm",
    "Linear",
    "LoadResult",
    "manual_seed",
    "MaxPool2d",
    "Module",
    "ModuleDict",
    "ModuleList",
    "MultiheadAttention",
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
    "TransformerEncoder",
    "TransformerEncoderLayer",
]

# ---- convolution layers (conv_nd.py)
__all__ += ["Conv1d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]
