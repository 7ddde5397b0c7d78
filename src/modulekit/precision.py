"""float32 matmul precision: torch's ``set_float32_matmul_precision`` for modulekit's GEMMs.

``"highest"`` (the default) computes float32 matmuls in float32. ``"medium"`` lets them
compute in bfloat16 with float32 accumulation where this machine has bfloat16 kernels (AMX-BF16
tiles, else AVX512-BF16 ``vdpbf16ps``): inputs and weights are rounded to bfloat16 (nearest
even) for the multiplies, while the products are summed, the bias added and the activation
applied in float32, and inputs and outputs stay float32 arrays. A model whose weights are
stored in bfloat16 (``model.to(modulekit.bfloat16)``) computes in bfloat16 under ``"medium"``
(and widens its weights to float32 under ``"high"``/``"highest"``). ``"high"`` is accepted
with torch's meaning (float32 matmuls *may* use a faster internal precision than float32,
such as a bfloat16x3 split); modulekit has no such kernel yet, so it computes as
``"highest"``.

What "medium" covers: ``nn.Linear`` (and so the layer chains, stacked projections and
compiled plans built from it), the GEMM engine's ``PackedLinear``, float32
``modulekit.matmul`` (its ``b`` rounded to bfloat16 per call), the convolutions (on AMX
every one but the depthwise and fused inverted-residual ones; on AVX512-BF16 those that would
run as an implicit GEMM, not Winograd; see docs/api.md) and attention's two matmuls
(``q k^T`` and ``P v``, on both bfloat16 paths).
float16 weights keep float32 compute (rounding them to bfloat16 would drop 3 of their
bits); float64 computes in float64.

Scope and threads: :func:`set_float32_matmul_precision` sets a process-wide value, as
torch's does. The context manager :class:`float32_matmul_precision` overrides it for the
calling thread only, until the block ends (blocks nest), so one thread serving at
``"medium"`` does not change what another computes. The precision is read when a call
starts, in the calling thread.

Packed weights: a ``Linear`` packs its float32 (or bfloat16) weights once, as before; the
first forward under ``"medium"`` also packs a bfloat16 copy in the bfloat16 kernels' layout
(VNNI pairs, K padded to 32), once, and keeps it beside the float32 one, so switching
precision back and forth re-packs nothing (the copy costs half the float32 buffer's bytes;
``initialize()`` run under ``"medium"`` packs it up front). Both bfloat16 paths read the same
layout. ``load_state_dict`` and ``to(dtype)`` re-pack, and the bfloat16 copy is rebuilt at
the next ``"medium"`` forward; it is never shared (``share_memory``) or pickled.

Which bfloat16 path runs: ``modulekit._ext._isa.get_bf16()`` ("amx", "avx512bf16" or
"none"); ``MODULEKIT_BF16=none|avx512bf16|amx`` or ``_isa.set_bf16`` chooses one. On Linux
the AMX path is used only after the kernel grants the process the tile state
(``arch_prctl(ARCH_REQ_XCOMP_PERM)``, asked once at import); where it refuses, bfloat16
compute runs on AVX512-BF16, and where neither exists ``"medium"`` computes in float32.
"""

from __future__ import annotations

from modulekit._ext import _gemm

__all__ = [
    "float32_matmul_precision",
    "get_float32_matmul_precision",
    "set_float32_matmul_precision",
]

_NAMES = ("highest", "high", "medium")


def _code(precision, where: str) -> int:
    if not isinstance(precision, str):
        raise TypeError(
            f"{where}: precision must be a str ('highest', 'high' or 'medium'); "
            f"got {type(precision).__name__}"
        )
    try:
        return _NAMES.index(precision)
    except ValueError:
        raise ValueError(
            f"{where}: unknown precision {precision!r}: expected 'highest', 'high' or 'medium'"
        ) from None


def set_float32_matmul_precision(precision: str) -> None:
    """Set the process-wide internal precision of float32 matmuls, as torch's function.

    Parameters
    ----------
    precision : {"highest", "high", "medium"}
        "highest" (the default): float32 compute. "high": allowed to use a faster internal
        precision; computes as "highest" today. "medium": bfloat16 multiplies with float32
        accumulation where this machine has bfloat16 kernels (see the module docstring).

    Raises
    ------
    TypeError
        If ``precision`` is not a str.
    ValueError
        If it is not one of the three names (nothing changes).

    Notes
    -----
    A :class:`float32_matmul_precision` block active in a thread overrides this value there.
    """
    _gemm._set_precision(_code(precision, "set_float32_matmul_precision"))


def get_float32_matmul_precision() -> str:
    """The float32 matmul precision in effect in the calling thread: the innermost
    :class:`float32_matmul_precision` block's, else the process-wide value."""
    return _NAMES[_gemm._get_precision()]


class float32_matmul_precision:
    """Context manager: float32 matmuls in the calling thread use ``precision`` inside the
    block, then the previous setting again (also after an exception). Blocks nest.

    Parameters
    ----------
    precision : {"highest", "high", "medium"}

    Examples
    --------
    >>> import modulekit
    >>> with modulekit.float32_matmul_precision("medium"):
    ...     y = model(x)  # doctest: +SKIP

    Notes
    -----
    Only the calling thread is affected (the process-wide value of
    :func:`set_float32_matmul_precision` is left alone), so concurrent requests served by
    other threads keep their precision. The name is validated when the object is created.
    """

    def __init__(self, precision: str) -> None:
        self._code = _code(precision, "float32_matmul_precision")
        self.precision = precision
        self._saved: list[int] = []

    def __enter__(self) -> float32_matmul_precision:
        self._saved.append(_gemm._set_thread_precision(self._code))
        return self

    def __exit__(self, *exc) -> None:
        _gemm._set_thread_precision(self._saved.pop())

    def __repr__(self) -> str:
        return f"float32_matmul_precision({self.precision!r})"
