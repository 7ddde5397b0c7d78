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

# ---- layers (issue 17): activations, norms, embeddings, distances, losses
from modulekit.nn.modules import (
    _activation_ext,  # noqa: E402
    _loss,  # noqa: E402
    _misc,  # noqa: E402
    _norm_ext,  # noqa: E402
)
from modulekit.nn.modules.activation_ext import *  # noqa: E402, F403
from modulekit.nn.modules.loss import *  # noqa: E402, F403
from modulekit.nn.modules.misc import *  # noqa: E402, F403
from modulekit.nn.modules.norm_ext import *  # noqa: E402, F403

__all__ += _activation_ext.__all__ + _loss.__all__ + _misc.__all__ + _norm_ext.__all__
