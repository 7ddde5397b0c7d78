"""modulekit: PyTorch-style Modules for fast CPU inference on NumPy arrays."""

from modulekit import memory, nn
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
from modulekit.module import LoadResult, Module, StateDictError
from modulekit.nn.functional import matmul

# float32 matmul precision (bfloat16 compute under "medium")
from modulekit.precision import (
    float32_matmul_precision,
    get_float32_matmul_precision,
    set_float32_matmul_precision,
)
from modulekit.threads import get_num_threads, set_num_threads

__version__ = "0.1.0"  # the one place: pyproject.toml reads it (setuptools dynamic version)

# Imported on first use (PEP 562), not by ``import modulekit``: the checkpoint readers and
# writers, the profiler and the compiled-module loader are ~25 ms of imports that a program
# running a model need not pay.
_LAZY = {
    "CheckpointError": "modulekit.checkpoint",
    "load": "modulekit.checkpoint",
    "save": "modulekit.checkpoint",
    "profile": "modulekit.profiler",
    "load_module": "modulekit.compile",
    "quantization": "modulekit.quantization",  # a submodule: modulekit.quantization.*
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'modulekit' has no attribute {name!r}")
    import importlib

    imported = importlib.import_module(module)
    value = imported if module == f"modulekit.{name}" else getattr(imported, name)
    globals()[name] = value  # later look-ups are plain module attributes
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


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
    "load_module",
    "LoadResult",
    "matmul",
    "memory",
    "Module",
    "nn",
    "Parameter",
    "profile",
    "quantization",
    "save",
    "set_num_threads",
    "StateDictError",
    "Tensor",
    "uint8",
]
__all__ += [
    "float32_matmul_precision",
    "get_float32_matmul_precision",
    "set_float32_matmul_precision",
]
