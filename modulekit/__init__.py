"""modulekit: PyTorch-style Modules for fast CPU inference on NumPy arrays."""

from modulekit._ext._tensor import Parameter, Tensor
from modulekit.device import Device
from modulekit.dtypes import (
    DataType,
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    int8,
    int32,
    int64,
    uint8,
)
from modulekit.threads import get_num_threads, set_num_threads

__version__ = "0.1.0"

__all__ = [
    "DataType",
    "Device",
    "Parameter",
    "Tensor",
    "bfloat16",
    "bool_",
    "float16",
    "float32",
    "float64",
    "get_num_threads",
    "int8",
    "int32",
    "int64",
    "set_num_threads",
    "uint8",
]
