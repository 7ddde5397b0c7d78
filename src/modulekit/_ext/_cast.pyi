"""Fast conversions between float32, float64, float16 and bfloat16 (see _cast.pyx)."""

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from modulekit.dtypes import DataType

# Element-type codes of the C kernels (cast_buffer in _cast.pxd).
F32: int  # 0: float32
F64: int  # 1: float64
F16: int  # 2: float16
BF16: int  # 3: bfloat16 (ml_dtypes.bfloat16)

def parallel_min_bytes() -> int: ...
def set_parallel_min_bytes(nbytes: int) -> int: ...
def stream_min_bytes() -> int: ...
def set_stream_min_bytes(nbytes: int) -> int: ...
def cast_into(src: np.ndarray, dst: np.ndarray) -> None: ...
def cast(src: ArrayLike, dtype: DataType | np.dtype[Any] | type | str) -> np.ndarray: ...
