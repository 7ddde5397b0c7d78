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

# ---- layers (issue 17): activations, norms, embeddings, distances, losses; each file's
# __all__ lists its public classes
from modulekit.nn.modules import activation_ext as _activation_ext  # noqa: E402
from modulekit.nn.modules import loss as _loss  # noqa: E402
from modulekit.nn.modules import misc as _misc  # noqa: E402
from modulekit.nn.modules import norm_ext as _norm_ext  # noqa: E402
from modulekit.nn.modules.activation_ext import *  # noqa: E402, F403
from modulekit.nn.modules.loss import *  # noqa: E402, F403
from modulekit.nn.modules.misc import *  # noqa: E402, F403
from modulekit.nn.modules.norm_ext import *  # noqa: E402, F403

__all__ += _activation_ext.__all__ + _loss.__all__ + _misc.__all__ + _norm_ext.__all__

# ---- pooling, resampling, padding and shape layers (issue #17, resample)
from modulekit.nn.modules.padding import (  # noqa: E402
    CircularPad1d,
    CircularPad2d,
    CircularPad3d,
    ConstantPad1d,
    ConstantPad2d,
    ConstantPad3d,
    ReflectionPad1d,
    ReflectionPad2d,
    ReflectionPad3d,
    ReplicationPad1d,
    ReplicationPad2d,
    ReplicationPad3d,
    ZeroPad1d,
    ZeroPad2d,
    ZeroPad3d,
)
from modulekit.nn.modules.pooling_ext import (  # noqa: E402
    AdaptiveAvgPool1d,
    AdaptiveAvgPool3d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AdaptiveMaxPool3d,
    AvgPool1d,
    AvgPool3d,
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
)
from modulekit.nn.modules.resample import (  # noqa: E402
    Upsample,
    UpsamplingBilinear2d,
    UpsamplingNearest2d,
)
from modulekit.nn.modules.shape import (  # noqa: E402
    ChannelShuffle,
    Fold,
    PixelShuffle,
    PixelUnshuffle,
    Unflatten,
    Unfold,
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

__all__ += ["GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNBase", "RNNCell", "RNNCellBase"]

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
