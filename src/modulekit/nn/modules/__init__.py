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
