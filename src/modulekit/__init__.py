"""modulekit: PyTorch-style Modules for fast CPU inference on NumPy arrays."""

from modulekit import memory, nn
from modulekit._ext._gemm import matmul
from modulekit._ext._tensor import Parameter, Tensor
from modulekit.checkpoint import CheckpointError, load, save
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
from modulekit.module import LoadResult, Module, StateDictError
from modulekit.profiler import profile
from modulekit.threads import get_num_threads, set_num_threads

__version__ = "0.1.0"  # the one place: pyproject.toml reads it (setuptools dynamic version)

__all__ = [
    "bfloat16",
    "bool_",
    "CheckpointError",
    "DataType",
    "Device",
    "float16",
    "float32",
    "float64",
    "get_num_threads",
    "int32",
    "int64",
    "int8",
    "load",
    "LoadResult",
    "matmul",
    "memory",
    "Module",
    "nn",
    "Parameter",
    "profile",
    "save",
    "set_num_threads",
    "StateDictError",
    "Tensor",
    "uint8",
]
