from collections.abc import Sequence
from typing import Any, Literal, Union

import numpy as np
from numpy.typing import ArrayLike

_Pair = Union[int, tuple[int, int]]
_Act = (
    Literal["none", "identity", "relu", "relu6", "silu", "hardswish", "gelu", "gelu_tanh",
            "sigmoid", "tanh"]
    | None
)

ACTIVATIONS: dict[str | None, int]
#: The largest kernel size, stride, dilation, padding and output size the kernels take.
MAX_WINDOW: int

class PackedConv2d:
    in_channels: int
    out_channels: int
    groups: int
    kernel_size: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, int, int, int]
    storage: str
    depthwise: bool
    has_bias: bool
    @property
    def nbytes(self) -> int: ...
    @property
    def compute_dtype(self) -> np.dtype[Any]: ...
    # Winograd F(2x2, 3x3) / F(4x4, 3x3)
    @property
    def algorithm(
        self,
    ) -> Literal["auto", "igemm", "im2col", "winograd-2x2", "winograd-4x4"]: ...
    @algorithm.setter
    def algorithm(
        self, value: Literal["auto", "igemm", "im2col", "winograd-2x2", "winograd-4x4"]
    ) -> None: ...
    @property
    def winograd_nbytes(self) -> int: ...
    def algorithm_for(self, input_shape: tuple[int, int, int, int]) -> str: ...
    def _winograd_engine_for(self, input_shape: tuple[int, int, int, int]) -> bool: ...
    def _igemm_tiling_for(
        self, input_shape: tuple[int, int, int, int]
    ) -> tuple[int, int, int, int]: ...
    def maxpool_algorithm_for(
        self,
        input_shape: tuple[int, int, int, int],
        kernel_size: int | tuple[int, int] = ...,
        stride: int | tuple[int, int] | None = ...,
        padding: int | tuple[int, int] = ...,
        dilation: int | tuple[int, int] = ...,
        ceil_mode: bool = ...,
    ) -> str: ...
    def forward_maxpool(
        self,
        x: ArrayLike,
        activation: str | None = ...,
        kernel_size: int | tuple[int, int] = ...,
        stride: int | tuple[int, int] | None = ...,
        padding: int | tuple[int, int] = ...,
        dilation: int | tuple[int, int] = ...,
        ceil_mode: bool = ...,
    ) -> np.ndarray: ...
    # end Winograd
    def output_shape(self, input_shape: tuple[int, int, int, int]) -> tuple[int, int, int, int]: ...
    def unpack(self) -> tuple[np.ndarray, np.ndarray | None]: ...
    @property
    def is_shared(self) -> bool: ...
    def shared_copy(self) -> PackedConv2d: ...
    def with_padding(self, padding: tuple[int, int, int, int]) -> PackedConv2d: ...
    def forward_shifted(
        self,
        x: ArrayLike,
        padding: tuple[int, int, int, int],
        out_size: tuple[int, int],
        shifts: Sequence[tuple[int, int]],
        out: np.ndarray | None = ...,
        places: Sequence[tuple[int, int, int, int]] | None = ...,
        steps: tuple[int, int] | None = ...,
    ) -> np.ndarray | None: ...
    def __reduce__(self) -> tuple[Any, ...]: ...
    def forward(
        self, x: ArrayLike, activation: _Act = None, residual: ArrayLike | None = None
    ) -> np.ndarray: ...
    def __call__(
        self, x: ArrayLike, activation: _Act = None, residual: ArrayLike | None = None
    ) -> np.ndarray: ...
    def forward_mean(
        self, x: ArrayLike, activation: _Act = None, residual: ArrayLike | None = None
    ) -> np.ndarray: ...

def kernel_name() -> str: ...
def _set_winograd_engine(mode: int) -> int: ...
def _set_l2_bytes(n: int) -> int: ...
def pack_conv2d(
    weight: ArrayLike,
    bias: ArrayLike | None = None,
    stride: _Pair = 1,
    padding: Union[_Pair, tuple[int, int, int, int], Literal["same", "valid"]] = 0,
    dilation: _Pair = 1,
    groups: int = 1,
    storage: str | None = None,
) -> PackedConv2d: ...
def fold_batchnorm(
    weight: ArrayLike,
    bias: ArrayLike | None,
    running_mean: ArrayLike | None,
    running_var: ArrayLike | None,
    bn_weight: ArrayLike | None = None,
    bn_bias: ArrayLike | None = None,
    eps: float = 1e-5,
) -> tuple[np.ndarray, np.ndarray]: ...
def conv_output_size(
    size: int, kernel: int, stride: int, pad_lo: int, pad_hi: int, dilation: int
) -> int: ...
def pool_output_size(
    size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool
) -> int: ...
def max_pool2d(
    x: ArrayLike,
    kernel_size: _Pair,
    stride: _Pair | None = None,
    padding: _Pair = 0,
    dilation: _Pair = 1,
    ceil_mode: bool = False,
) -> np.ndarray: ...
def avg_pool2d(
    x: ArrayLike,
    kernel_size: _Pair,
    stride: _Pair | None = None,
    padding: _Pair = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> np.ndarray: ...
def adaptive_avg_pool2d(
    x: ArrayLike, output_size: Union[int, tuple[int | None, int | None]]
) -> np.ndarray: ...
def batch_norm_inference(
    x: ArrayLike, scale: ArrayLike, shift: ArrayLike, activation: _Act = None
) -> np.ndarray: ...

# --- depthwise chains: [1x1] -> depthwise 3x3 -> 1x1 (kernels/conv/f32-invres-driver.c) ---
INVRES_BAND_BYTES: int

def spatial_mean(x: ArrayLike) -> np.ndarray: ...
def depthwise_chain(
    x: ArrayLike,
    expand: PackedConv2d | None,
    dw: PackedConv2d,
    project: PackedConv2d,
    activations: tuple[_Act, _Act, _Act],
    residual: bool = False,
    band_rows: int = 0,
) -> np.ndarray: ...

class DepthwiseChain:
    expand: PackedConv2d | None
    dw: PackedConv2d
    project: PackedConv2d
    activations: tuple[_Act, _Act, _Act]
    residual: bool
    def __init__(
        self,
        expand: PackedConv2d | None,
        dw: PackedConv2d,
        project: PackedConv2d,
        activations: tuple[_Act, _Act, _Act],
        residual: bool = False,
    ) -> None: ...
    @staticmethod
    def fusable(
        expand: PackedConv2d | None,
        dw: PackedConv2d,
        project: PackedConv2d,
        activations: tuple[_Act, _Act, _Act],
        residual: bool = False,
    ) -> bool: ...
    def __call__(self, x: ArrayLike, band_rows: int = 0) -> np.ndarray: ...

# argument checks shared with modulekit.nn (errors name ``what`` and the parameter)
def _pair(value: Any, name: str, what: str) -> tuple[int, int]: ...
def _check_extent(k: tuple[int, int], d: tuple[int, int], what: str) -> None: ...
def _pool_args(
    what: str, kernel_size: _Pair, stride: _Pair | None, padding: _Pair, dilation: _Pair
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]: ...
