"""modulekit's layers and containers, one concept per file."""

from modulekit.nn.modules.activation import (
    GELU,
    Hardswish,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from modulekit.nn.modules.attention import MultiheadAttention
from modulekit.nn.modules.batchnorm import BatchNorm1d, BatchNorm2d
from modulekit.nn.modules.container import ModuleDict, ModuleList, Sequential
from modulekit.nn.modules.conv import Conv2d
from modulekit.nn.modules.conv_nd import (
    Conv1d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
)
from modulekit.nn.modules.dropout import Dropout
from modulekit.nn.modules.flatten import Flatten
from modulekit.nn.modules.linear import Identity, Linear
from modulekit.nn.modules.normalization import LayerNorm
from modulekit.nn.modules.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from modulekit.nn.modules.sparse import Embedding
from modulekit.nn.modules.transformer import TransformerEncoder, TransformerEncoderLayer

__all__ = [
    "AdaptiveAvgPool2d",
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv2d",
    "Dropout",
    "Embedding",
    "Flatten",
    "GELU",
    "Hardswish",
    "Identity",
    "LayerNorm",
    "Linear",
    "MaxPool2d",
    "ModuleDict",
    "ModuleList",
    "MultiheadAttention",
    "ReLU",
    "ReLU6",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Tanh",
    "TransformerEncoder",
    "TransformerEncoderLayer",
]

# ---- convolution layers (conv_nd.py)
__all__ += ["Conv1d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]
