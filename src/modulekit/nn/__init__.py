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
# ---- pooling, resampling, padding and shape layers (issue #17, resample)
from modulekit.nn.modules import (  # noqa: E402
    AdaptiveAvgPool1d,
    AdaptiveAvgPool3d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AdaptiveMaxPool3d,
    AvgPool1d,
    AvgPool3d,
    ChannelShuffle,
    CircularPad1d,
    CircularPad2d,
    CircularPad3d,
    ConstantPad1d,
    ConstantPad2d,
    ConstantPad3d,
    Fold,
    FractionalMaxPool2d,
    FractionalMaxPool3d,
    LPPool1d,
    LPPool2d,
    LPPool3d,
    MaxPool1d,
    MaxPool3d,
    MaxUnpool1d,
    MaxUnpool2d,
    MaxUnpool3d,
    PixelShuffle,
    PixelUnshuffle,
    ReflectionPad1d,
    ReflectionPad2d,
    ReflectionPad3d,
    ReplicationPad1d,
    ReplicationPad2d,
    ReplicationPad3d,
    Unflatten,
    Unfold,
    Upsample,
    UpsamplingBilinear2d,
    UpsamplingNearest2d,
    ZeroPad1d,
    ZeroPad2d,
    ZeroPad3d,
)

__all__ += [  # noqa: PLE0604
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d",
    "AvgPool1d",
    "AvgPool3d",
    "FractionalMaxPool2d",
    "FractionalMaxPool3d",
    "LPPool1d",
    "LPPool2d",
    "LPPool3d",
    "MaxPool1d",
    "MaxPool3d",
    "MaxUnpool1d",
    "MaxUnpool2d",
    "MaxUnpool3d",
    "Upsample",
    "UpsamplingBilinear2d",
    "UpsamplingNearest2d",
    "CircularPad1d",
    "CircularPad2d",
    "CircularPad3d",
    "ConstantPad1d",
    "ConstantPad2d",
    "ConstantPad3d",
    "ReflectionPad1d",
    "ReflectionPad2d",
    "ReflectionPad3d",
    "ReplicationPad1d",
    "ReplicationPad2d",
    "ReplicationPad3d",
    "ZeroPad1d",
    "ZeroPad2d",
    "ZeroPad3d",
    "ChannelShuffle",
    "Fold",
    "PixelShuffle",
    "PixelUnshuffle",
    "Unflatten",
    "Unfold",
]
# ---- recurrent layers (rnn)
from modulekit.nn import utils  # noqa: E402
from modulekit.nn.modules.rnn import (  # noqa: E402
    GRU,
    LSTM,
    RNN,
    GRUCell,
    LSTMCell,
    RNNBase,
    RNNCell,
    RNNCellBase,
)

__all__ += [
    "GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNBase", "RNNCell", "RNNCellBase", "utils",
]

# ---- transformer decoder (rnn)
from modulekit.nn.modules.transformer_decoder import (  # noqa: E402
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
)

__all__ += ["Transformer", "TransformerDecoder", "TransformerDecoderLayer"]
# ---- convolution layers (conv_nd.py)
__all__ += ["Conv1d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]

# ---- lazy convolutions (lazy.py)
from modulekit.nn.modules.lazy import (  # noqa: E402
    LazyConv1d,
    LazyConv2d,
    LazyConv3d,
    LazyConvTranspose1d,
    LazyConvTranspose2d,
    LazyConvTranspose3d,
)

__all__ += [
    "LazyConv1d", "LazyConv2d", "LazyConv3d",
    "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d",
]
