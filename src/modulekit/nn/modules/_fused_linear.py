"""Views of a stacked packed GEMM: several ``Linear`` layers (or ``MultiheadAttention``'s
in-projection thirds) served by ONE packed kernel over their stacked weights.

The planner's ``linear_stack`` rule (``modulekit.compile.rules.linear``) stacks sibling
``Linear`` layers that read the same input (BERT's query/key/value) and replaces each
layer's packed kernel by a :class:`RowsOf` view of the stacked one (no second copy of the
weights); the layers stay separate modules, so ``state_dict`` keys, ``repr`` and hooks are
unchanged. ``MultiheadAttention`` packs its ``in_proj_weight`` once and serves its thirds
through three views.
"""

from __future__ import annotations

import numpy as np

from modulekit._ext._gemm import pack_linear

__all__ = ["RowsOf"]

class RowsOf:
    """Stands in for a ``Linear``'s packed kernel: output rows ``[r0, r1)`` of a stacked one.

    ``unpack()`` slices the stacked weights (pickling, ``to(dtype)`` and re-packing use it);
    a direct ``forward`` (the layer called on its own, e.g. while hooked) packs the layer's
    rows alone on first use and keeps that.
    """

    __slots__ = ("fused", "r0", "r1", "_own")

    def __init__(self, fused, r0: int, r1: int) -> None:
        self.fused = fused
        self.r0 = r0
        self.r1 = r1
        self._own = None

    def unpack(self):
        w, b = self.fused.unpack()
        w = np.array(w[self.r0 : self.r1])
        return w, (None if b is None else np.array(b[self.r0 : self.r1]))

    @property
    def out_features(self) -> int:
        return self.r1 - self.r0

    @property
    def nbytes(self) -> int:
        """This view's share of the stacked pack (its rows' part: the shares of a stack's
        consecutive views add up to the stacked pack's size) plus its own pack, when used
        alone."""
        fused = self.fused
        total, rows = fused.nbytes, fused.out_features
        share = (total * self.r1) // rows - (total * self.r0) // rows if rows else 0
        return share + (0 if self._own is None else self._own.nbytes)

    def _kernel(self):
        own = self._own
        if own is None:
            w, b = self.unpack()
            own = self._own = pack_linear(w, b, self.fused.storage)
        return own

    def forward(self, x, activation="none", alpha=0.0, beta=0.0, out=None):
        return self._kernel().forward(x, activation, alpha, beta, out)

    __call__ = forward

    def __getattr__(self, name):  # in_features, storage, compute_dtype, has_bias, kernel
        return getattr(self.fused, name)

    @property
    def is_shared(self) -> bool:
        return self.fused.is_shared

    def shared_copy(self, memo: dict | None = None) -> RowsOf:
        """This view over a shared copy of the stacked kernel (self when it is shared);
        ``memo`` (id of a kernel -> its shared copy) gives a stack's views one copy."""
        fused = self.fused
        if fused.is_shared:
            return self
        memo = {} if memo is None else memo
        shared = memo.get(id(fused))
        if shared is None:
            shared = memo[id(fused)] = fused.shared_copy()
        return RowsOf(shared, self.r0, self.r1)

    def __reduce__(self):
        if self.fused.is_shared:  # the stacked kernel goes as a handle (once per pickle)
            return (_rows_of, (self.fused, self.r0, self.r1))
        w, b = self.unpack()
        return (pack_linear, (w, b, self.fused.storage))


def _rows_of(fused, r0: int, r1: int) -> RowsOf:
    """Unpickle a view of a shared stacked kernel, its row range checked."""
    rows = getattr(fused, "out_features", None)
    if not (
        type(rows) is int and type(r0) is int and type(r1) is int and 0 <= r0 < r1 <= rows
    ):
        raise ValueError(f"RowsOf: rows [{r0!r:.50}, {r1!r:.50}) are not a range of {fused!r:.200}")
    return RowsOf(fused, r0, r1)
