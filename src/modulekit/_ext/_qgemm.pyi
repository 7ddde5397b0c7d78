from typing import Any

import numpy as np

ACTIVATIONS: tuple[str, ...]
MAX_IN_FEATURES: int

def quantize_weight(weight: Any) -> tuple[np.ndarray, np.ndarray]: ...

class PackedQLinear:
    in_features: int
    out_features: int
    nbytes: int
    has_bias: bool
    @property
    def kernel(self) -> str: ...
    def unpack(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]: ...
    def forward(self, x: Any, activation: str = ..., alpha: float = ..., beta: float = ...
                ) -> np.ndarray: ...

def pack_qlinear(qweight: Any, scale: Any, bias: Any = ...) -> PackedQLinear: ...
