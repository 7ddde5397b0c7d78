import numpy as np

from modulekit._ext._gemm import PackedLinear

KINDS: dict[str, int]

def _set_fused(on: bool) -> bool: ...
def cell_kernel(dtype: object) -> str: ...
def recurrence(
    kind: str,
    hh: PackedLinear,
    hr: PackedLinear | None,
    xg: np.ndarray,
    xcol: int,
    out: np.ndarray,
    ocol: int,
    h: np.ndarray,
    c: np.ndarray | None,
    offsets: np.ndarray,
    batch_sizes: np.ndarray,
    reverse: bool = False,
) -> None: ...
