"""modulekit's layers and containers, one concept per file."""

from modulekit.nn.modules.activation import GELU, ReLU, ReLU6, Sigmoid, SiLU, Softmax, Tanh
from modulekit.nn.modules.container import ModuleDict, ModuleList, Sequential
from modulekit.nn.modules.dropout import Dropout
from modulekit.nn.modules.flatten import Flatten
from modulekit.nn.modules.linear import Identity, Linear

__all__ = [
    "Dropout",
    "Flatten",
    "GELU",
    "Identity",
    "Linear",
    "ModuleDict",
    "ModuleList",
    "ReLU",
    "ReLU6",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Tanh",
]
