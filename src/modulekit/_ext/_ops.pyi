from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

PARALLEL_THRESHOLD: int

def layer_norm(
    x: npt.ArrayLike,
    n: int,
    weight: npt.ArrayLike | None = None,
    bias: npt.ArrayLike | None = None,
    eps: float = 1e-5,
    residual: npt.ArrayLike | None = None,
) -> np.ndarray: ...
def softmax_(
    scores: np.ndarray, scale: float = 1.0, mask: npt.ArrayLike | None = None
) -> np.ndarray: ...
ACTIVATIONS: tuple[str, ...]

def activation(
    x: npt.ArrayLike,
    name: str,
    alpha: float = 0.0,
    beta: float = 0.0,
    out: np.ndarray | None = None,
) -> np.ndarray: ...
def gelu(
    x: npt.ArrayLike, approximate: str = "none", out: np.ndarray | None = None
) -> np.ndarray: ...
def embedding(
    ids: npt.ArrayLike,
    table: np.ndarray,
    out: np.ndarray | None = None,
    accumulate: bool = False,
) -> np.ndarray: ...
def embedding_layer_norm(
    ids0: np.ndarray,
    table0: np.ndarray,
    ids1: np.ndarray,
    table1: np.ndarray,
    ids2: np.ndarray,
    table2: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray,
    eps: float,
) -> np.ndarray | None: ...
def transpose_into(src: np.ndarray, out: np.ndarray) -> np.ndarray: ...
def scatter_phases(
    src: np.ndarray,
    out: np.ndarray,
    windows: npt.ArrayLike,
    starts: npt.ArrayLike,
    counts: npt.ArrayLike,
    stride: Sequence[int],
) -> np.ndarray: ...
def attention(
    q: npt.ArrayLike,
    k: npt.ArrayLike,
    v: npt.ArrayLike,
    num_heads: int,
    mask: npt.ArrayLike | None = None,
    scale: float | None = None,
    need_weights: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]: ...
