"""``PackedWeightLayer``: the packing protocol for a layer whose ``weight`` and optional
``bias`` become one kernel object (``Linear``, ``Conv2d``)."""

from __future__ import annotations

import numpy as np

from modulekit._ext._tensor import Parameter
from modulekit.dtypes import DataType, as_dtype
from modulekit.module import Module

__all__ = ["PackedWeightLayer"]


class PackedWeightLayer(Module):
    """Implements ``Module``'s packing protocol for ``weight`` + ``bias`` layers.

    A subclass says how to build its kernel object (:meth:`_pack_kernel`) and what shape its
    weight has (:meth:`_weight_shape`); the packed object must offer ``has_bias``,
    ``storage`` (a dtype name) and ``unpack() -> (weight, bias or None)``. The bias keeps its
    own dtype through a pack/unpack round trip.

    Shared memory (:meth:`~modulekit.Module.share_memory`): a packed object offering
    ``shared_copy()`` and ``is_shared`` (``PackedLinear``, ``PackedConv2d``) is copied into a
    shared segment and then pickles as a handle (the layer pickles packed, not as raw
    weights); a re-pack of a shared layer that keeps its storage dtype (``load_state_dict``)
    is shared again, a cast (``to(dtype)``) is private.
    """

    _packed = None  # the kernel object once packed
    _bias_dtype = None  # the bias's DataType while packed

    def _pack_kernel(self, weight: np.ndarray, bias: np.ndarray | None, storage: str):
        """Build the packed kernel object from source arrays (storage: a dtype name)."""
        raise NotImplementedError

    def _weight_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def _packed_changed(self) -> None:
        """Called whenever the packed form is built, rebuilt or dropped (drop caches)."""

    def _has_bias(self) -> bool:
        return self._packed.has_bias if self._packed is not None else self.bias is not None

    def _pack(self) -> None:
        with self._pack_lock:
            if self._packed is not None:
                return
            weight = self._parameters.get("weight")
            if weight is None:
                raise RuntimeError(f"{type(self).__name__}: cannot pack, its weight is None")
            bias = self._parameters.get("bias")
            packed = self._pack_kernel(
                weight.numpy(), None if bias is None else bias.numpy(), weight.dtype.name
            )
            self._bias_dtype = None if bias is None else bias.dtype
            del self._parameters["weight"]
            if bias is not None:
                del self._parameters["bias"]
            self._packed = packed
            self._packed_changed()

    def _shared_packed(self, memo: dict):
        """The packed kernel with its buffer in shared memory (a new object, or the current
        one when it is shared already), or None when not packed or not shareable; ``memo``
        (id of a packed object -> its shared copy) makes objects reached twice one copy."""
        packed = self._packed
        if packed is None or not hasattr(packed, "shared_copy"):
            return None
        if hasattr(packed, "fused"):  # a RowsOf view: share the stacked kernel once
            return packed.shared_copy(memo)
        new = memo.get(id(packed))
        if new is None:
            new = memo[id(packed)] = packed.shared_copy()
        return new

    def _set_shared_packed(self, packed) -> None:
        """Bind the object :meth:`_shared_packed` returned."""
        with self._pack_lock:
            if packed is not self._packed:
                self._packed = packed
                self._packed_changed()

    def __getstate__(self) -> dict:
        if getattr(self._packed, "is_shared", False):
            # shared: the packed kernel pickles as a handle to its segment (no re-pack)
            state = self.__dict__.copy()
            state.pop("_pack_lock", None)
            return state
        return super().__getstate__()

    def _packed_keys(self) -> dict[str, tuple[tuple[int, ...], DataType]]:
        packed = self._packed
        if packed is None:
            return {}
        keys = {"weight": (self._weight_shape(), as_dtype(packed.storage))}
        if packed.has_bias:
            keys["bias"] = ((self._weight_shape()[0],), self._bias_dtype)
        return keys

    def _packed_values(self) -> dict[str, np.ndarray]:
        packed = self._packed
        if packed is None:
            return {}
        weight, bias = packed.unpack()
        values = {"weight": np.ascontiguousarray(weight)}
        if bias is not None:
            values["bias"] = np.asarray(bias).astype(self._bias_dtype.numpy, order="C")
        return values

    def _unpack(self) -> None:
        if self._packed is None:
            return
        params = {k: Parameter(v) for k, v in self._packed_values().items()}
        params.update((k, v) for k, v in self._parameters.items() if k not in params)
        self.__dict__["_parameters"] = params
        self._packed = None
        self._bias_dtype = None
        self._packed_changed()

    def _repack(self, values: dict[str, np.ndarray], dtype: DataType | None = None) -> None:
        with self._pack_lock:
            packed = self._packed
            if packed is None:
                return
            weight, bias = values.get("weight"), values.get("bias")
            if weight is None or (bias is None and packed.has_bias):
                old_weight, old_bias = packed.unpack()
                weight = old_weight if weight is None else weight
                bias = old_bias if bias is None else bias
            storage = as_dtype(packed.storage) if dtype is None else dtype
            bias_dtype = self._bias_dtype if dtype is None else dtype
            if bias is not None:
                bias = np.asarray(bias).astype(bias_dtype.numpy, copy=False)
            new = self._pack_kernel(
                np.asarray(weight).astype(storage.numpy, copy=False), bias, storage.name
            )
            if getattr(packed, "is_shared", False) and storage.name == packed.storage:
                new = new.shared_copy()  # stays shared (in a new segment) unless cast
            self._packed = new
            self._bias_dtype = bias_dtype
            self._packed_changed()
