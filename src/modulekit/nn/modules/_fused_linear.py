"""Several ``Linear`` layers reading the same input, run as ONE packed GEMM.

BERT's query/key/value projections (and any sibling ``Linear``s fed the same activations)
are one GEMM with their weights stacked: the activations are packed once and the kernel runs
on a wider N. The layers stay separate modules, so ``state_dict`` keys, ``repr`` and hooks are
unchanged: :class:`FusedLinears` replaces each layer's packed kernel by a :class:`RowsOf`
view of the stacked one (no second copy of the weights), and re-stacks whenever a layer has
been re-packed since (``load_state_dict``, ``to(dtype)``), which it sees because the layer's
packed object is then no longer its view.
"""

from __future__ import annotations

import threading

import numpy as np

from modulekit._ext._gemm import pack_linear
from modulekit.nn.modules.linear import Linear

__all__ = ["FusedLinears", "RowsOf"]

_LOCK = threading.Lock()


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


class FusedLinears:
    """Runs the ``Linear`` children ``names`` of ``owner`` (equal ``in_features``, storage
    dtype and bias presence) as one GEMM: ``forward(x2d)`` returns the stacked output
    ``(M, sum of out_features)``, whose column blocks are the layers' outputs.

    Kept in its owner's ``__dict__`` (not a module: not in ``state_dict``). The owner calls
    :meth:`usable` first: False while any of the layers has hooks (they then run one by one,
    so every hook sees its call) or is not a plain ``Linear``; a child replaced by another
    module is picked up there.
    """

    def __init__(self, owner, names) -> None:
        self.owner = owner  # the module holding the layers, as children named ``names``
        self.names = tuple(names)
        self.linears = ()
        self.packed = None  # the stacked PackedLinear
        self.views = ()  # the RowsOf installed in each layer
        self.offsets = ()

    def usable(self) -> bool:
        children = self.owner._modules
        linears = self.linears
        for i, name in enumerate(self.names):
            lin = children.get(name)
            if type(lin) is not Linear or lin._has_hooks:
                return False
            if not linears or linears[i] is not lin:  # a layer was replaced: stack anew
                with _LOCK:
                    self.linears = tuple(children[n] for n in self.names)
                    self.views = ()
                    self.packed = None
                return self.usable()
        return True

    def _current(self):
        views = self.views
        if views and all(lin._packed is v for lin, v in zip(self.linears, views)):
            return self.packed
        return None

    def _adopt(self, kernels):
        """The stacked kernel when ``kernels`` are already the views, in order, of one
        (a shared model as unpickled, or after share_memory()): adopted, not re-stacked."""
        if not all(type(k) is RowsOf for k in kernels):
            return None
        fused, r0 = kernels[0].fused, 0
        for k in kernels:
            if k.fused is not fused or k.r0 != r0:
                return None
            r0 = k.r1
        if r0 != fused.out_features:
            return None
        self.packed, self.views = fused, tuple(kernels)
        self.offsets = tuple((k.r0, k.r1) for k in kernels)
        return fused

    def _build(self):
        with _LOCK:
            packed = self._current()
            if packed is not None:
                return packed
            for lin in self.linears:
                if lin._packed is None:
                    lin._pack()
            kernels = [lin._packed for lin in self.linears]
            packed = self._adopt(kernels)
            if packed is not None:
                return packed
            storages = {k.storage for k in kernels}
            biases = {k.has_bias for k in kernels}
            if len(storages) != 1 or len(biases) != 1:
                return None
            if len({k.in_features for k in kernels}) != 1:
                return None
            parts = [k.unpack() for k in kernels]
            w = np.concatenate([np.asarray(p[0]) for p in parts])
            b = None
            if parts[0][1] is not None:
                b = np.concatenate([np.asarray(p[1]) for p in parts])
            packed = pack_linear(w, b, storages.pop())
            if all(k.is_shared for k in kernels):  # (re-packed by load_state_dict, say)
                packed = packed.shared_copy()
            offsets, views, r0 = [], [], 0
            for k in kernels:
                r1 = r0 + k.out_features
                offsets.append((r0, r1))
                views.append(RowsOf(packed, r0, r1))
                r0 = r1
            for lin, view in zip(self.linears, views):
                with lin._pack_lock:
                    lin._packed = view
                    lin._packed_changed()
            self.packed, self.views, self.offsets = packed, tuple(views), tuple(offsets)
            return packed

    def forward_ready(self) -> bool:
        """Build the stacked kernel now if it is not built (``initialize()``); whether the
        layers can be stacked."""
        return self._current() is not None or self._build() is not None

    def forward(self, x2d: np.ndarray):
        """The stacked output, or None when the layers cannot be stacked (mixed storage)."""
        packed = self._current()
        if packed is None:
            packed = self._build()
            if packed is None:
                return None
        return packed.forward(x2d)
