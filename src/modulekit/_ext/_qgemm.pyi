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

STATIC_ACTIVATIONS: tuple[str, ...]

class QuantizedArray:
    data: np.ndarray
    scale: float
    zero_point: int
    unbatched: bool
    def __init__(self, data: Any, scale: float, zero_point: int, unbatched: bool = ...
                 ) -> None: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    def dequantize(self) -> np.ndarray: ...
    def __array__(self, dtype: Any = ..., copy: Any = ...) -> np.ndarray: ...

def quantize_per_tensor(x: Any, scale: float, zero_point: int) -> QuantizedArray: ...
def max_pool_qu8(x: QuantizedArray, kernel_size: Any, stride: Any = ..., padding: Any = ...,
                 dilation: Any = ..., ceil_mode: bool = ...) -> QuantizedArray: ...

class PackedQConv2d:
    in_channels: int
    out_channels: int
    kernel_size: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    input_scale: float
    input_zero_point: int
    output_scale: float
    output_zero_point: int
    has_bias: bool
    nbytes: int
    @property
    def kernel(self) -> str: ...
    def unpack(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]: ...
    def forward(self, x: Any, activation: str | None = ..., residual: Any = ...,
                output_q: tuple[float, int] | None = ...) -> np.ndarray | QuantizedArray: ...
    def forward_mean(self, x: Any, activation: str | None = ...,
                     residual: Any = ...) -> np.ndarray: ...
    def forward_maxpool(self, x: Any, activation: str | None, kernel_size: Any,
                        stride: Any = ..., padding: Any = ..., dilation: Any = ...,
                        ceil_mode: bool = ..., output_q: tuple[float, int] | None = ...
                        ) -> np.ndarray | QuantizedArray: ...

def pack_qconv2d(qweight: Any, scale: Any, bias: Any, input_scale: float,
                 input_zero_point: int, stride: Any = ..., padding: Any = ...,
                 dilation: Any = ..., output_scale: float = ..., output_zero_point: int = ...
                 ) -> PackedQConv2d: ...

_QParams = tuple[float, int]

class QInvertedResidual:
    expand: PackedQConv2d | None
    depthwise: PackedQConv2d
    project: PackedQConv2d
    activations: tuple[str | None, str | None, str | None]
    out_qs: tuple[_QParams | None, _QParams, _QParams | None]
    residual: bool
    calls_fused: int
    def __init__(self, expand: PackedQConv2d | None, depthwise: PackedQConv2d,
                 project: PackedQConv2d, activations: tuple[str | None, str | None, str | None],
                 out_qs: tuple[_QParams | None, _QParams, _QParams | None],
                 residual: bool) -> None: ...
    @staticmethod
    def fusable(expand: Any, depthwise: Any, project: Any, activations: Any, out_qs: Any,
                residual: bool) -> bool: ...
    def __call__(self, x: Any) -> np.ndarray | QuantizedArray: ...
