from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

ACTIVATIONS: tuple[str, ...]
STORAGES: tuple[str, ...]

class PackedLinear:
    in_features: int
    out_features: int
    storage: str
    compute_dtype: np.dtype[Any]
    has_bias: bool
    @property
    def nbytes(self) -> int: ...
    @property
    def kernel(self) -> str | None: ...
    @property
    def compute_kernel(self) -> str | None: ...
    @property
    def bf16_nbytes(self) -> int: ...
    def forward(
        self,
        x: npt.ArrayLike,
        activation: str = "none",
        alpha: float = 0.0,
        beta: float = 0.0,
        out: np.ndarray | None = None,
    ) -> np.ndarray: ...
    def __call__(
        self,
        x: npt.ArrayLike,
        activation: str = "none",
        alpha: float = 0.0,
        beta: float = 0.0,
        out: np.ndarray | None = None,
    ) -> np.ndarray: ...
    def unpack(self) -> tuple[np.ndarray, np.ndarray | None]: ...
    @property
    def is_shared(self) -> bool: ...
    def shared_copy(self) -> PackedLinear: ...
    def __reduce__(self) -> tuple[Any, ...]: ...

def _attach_linear(
    handle: tuple[str, int, int, int],
    out_features: int,
    in_features: int,
    storage: str,
    has_bias: bool,
    isa: int,
) -> PackedLinear: ...

def pack_linear(
    weight: npt.ArrayLike, bias: npt.ArrayLike | None = None, storage: str = "float32"
) -> PackedLinear: ...
def linear(
    x: npt.ArrayLike,
    weight: npt.ArrayLike,
    bias: npt.ArrayLike | None = None,
    activation: str = "none",
) -> np.ndarray: ...
def matmul(a: npt.ArrayLike, b: npt.ArrayLike) -> np.ndarray: ...

class PackedChain:
    layers: tuple[PackedLinear, ...]
    activations: tuple[tuple[str, float, float], ...]
    in_features: int
    out_features: int
    compute_dtype: np.dtype[Any]
    def forward(self, x: npt.ArrayLike) -> np.ndarray: ...
    def __call__(self, x: npt.ArrayLike) -> np.ndarray: ...
    def _watch(
        self,
        owner: Any,
        children: Sequence[Any],
        modules: Sequence[Any],
        linears: Sequence[Any],
        acts: Sequence[Any],
    ) -> None: ...
    def _forward_watched(self, x: Any) -> np.ndarray | None: ...

def linear_chain(
    layers: Sequence[PackedLinear],
    activations: Sequence[str | tuple[str, float, float]] | None = None,
) -> PackedChain: ...
def _chain_planned_threads(chain: PackedChain, m: int) -> int: ...
def _winograd_engine_capsule() -> object: ...
def _set_rowdirect(on: bool) -> bool: ...
def _set_l2_bytes(n: int) -> int: ...
def warm_threads() -> None: ...
def _planned_threads(packed: PackedLinear, m: int) -> int: ...

# float32 matmul precision (modulekit/precision.py is the public API)
PRECISIONS: tuple[str, str, str]

def _get_precision() -> int: ...
def _get_global_precision() -> int: ...
def _set_precision(p: int) -> None: ...
def _set_thread_precision(p: int) -> int: ...
