import numpy as np
import numpy.typing as npt

PARALLEL_THRESHOLD: int

def kernel_name() -> str: ...
def streaming_min_bytes() -> int: ...
def set_streaming_min_bytes(nbytes: int) -> int: ...
def group_norm(
    x: np.ndarray,
    num_groups: int,
    weight: npt.ArrayLike | None = None,
    bias: npt.ArrayLike | None = None,
    eps: float = 1e-5,
    return_stats: bool = False,
    op: str = "group_norm",
) -> np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray]: ...
