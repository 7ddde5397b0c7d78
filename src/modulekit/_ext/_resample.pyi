from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["PARALLEL_THRESHOLD", "bilinear2d", "nearest2d", "taps_axis"]

PARALLEL_THRESHOLD: int

def bilinear2d(
    x: np.ndarray[Any, np.dtype[np.float32]],
    ys0: ArrayLike,
    ys1: ArrayLike,
    wy0: ArrayLike,
    wy1: ArrayLike,
    xs0: ArrayLike,
    xs1: ArrayLike,
    wx0: ArrayLike,
    wx1: ArrayLike,
) -> np.ndarray[Any, np.dtype[np.float32]]: ...
def nearest2d(
    x: np.ndarray[Any, np.dtype[np.float32]], ys: ArrayLike, xs: ArrayLike
) -> np.ndarray[Any, np.dtype[np.float32]]: ...
def taps_axis(
    x: np.ndarray[Any, np.dtype[np.float32]],
    axis: int,
    idx: ArrayLike,
    w: ArrayLike | None = None,
) -> np.ndarray[Any, np.dtype[np.float32]]: ...
