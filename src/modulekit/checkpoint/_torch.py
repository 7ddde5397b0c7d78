"""What the two torch.save formats share: storages, tensor views, picking the state dict."""

from __future__ import annotations

import numpy as np

from modulekit.checkpoint._common import SUPPORTED_NP_DTYPES, fail, numel_of, view_bytes
from modulekit.checkpoint.unpickler import TensorRef

__all__ = ["Storage", "Materializer", "extract_tensors", "STATE_DICT_KEYS", "TORCH_ITEMSIZE"]

#: Keys under which a training checkpoint keeps the model's state dict; picked in this order.
STATE_DICT_KEYS = ("state_dict", "model_state_dict")
# Non-contiguous tensors are copied; the copies together may use at most this many times the
# bytes of the storages they come from (plus the floor below). Only an expanded (stride-0)
# view can need more than 1x, so this bounds what a hostile file can make us allocate.
COPY_BUDGET_FACTOR = 4
COPY_BUDGET_FLOOR = 64 << 20
# Element sizes of the torch storage types modulekit refuses (to check record sizes).
TORCH_ITEMSIZE = {
    "int16": 2, "complex64": 8, "complex128": 16, "qint8": 1, "quint8": 1, "qint32": 4,
    "quint4x2": 1, "quint2x4": 1,
}


class Storage:
    """One torch storage: raw little-endian bytes (a uint8 ndarray) and its element type."""

    __slots__ = ("key", "dtype", "numel", "raw", "big_endian", "_typed")
    is_storage = True

    def __init__(self, key, dtype, numel, raw, big_endian=False):
        self.key = key
        self.dtype = dtype  # modulekit dtype name, or torch's name if modulekit lacks it
        self.numel = numel
        self.raw = raw
        self.big_endian = big_endian
        self._typed = {}

    def typed(self, dtype_name, path, where):
        """The storage as a 1-D array of ``dtype_name`` (cached; zero-copy when possible)."""
        arr = self._typed.get(dtype_name)
        if arr is None:
            dt = SUPPORTED_NP_DTYPES[dtype_name]
            raw = self.raw
            if raw.size % dt.itemsize:
                raise fail(path, where, f"storage {self.key!r} of {raw.size} bytes is not a "
                                        f"whole number of {dtype_name} elements")
            if self.big_endian and dt.itemsize > 1:
                raw = raw.reshape(-1, dt.itemsize)[:, ::-1].copy().reshape(-1)
            arr = view_bytes(raw, dt, (raw.size // dt.itemsize,), path,
                             f"{where} (storage {self.key!r})")
            self._typed[dtype_name] = arr
        return arr


class Materializer:
    """Turns :class:`TensorRef` records into C-contiguous ndarrays, one per record.

    Contiguous views share the storage's memory; non-contiguous ones are copied within a
    budget proportional to the storages' size.
    """

    def __init__(self, path):
        self.path = path
        self.done = {}
        self.storage_bytes = 0
        self._seen_storages = set()
        self.copied = 0

    def __call__(self, ref, key):
        found = self.done.get(id(ref))
        if found is not None:
            return found[1]
        arr = self._materialize(ref, key)
        self.done[id(ref)] = (ref, arr)
        return arr

    def _materialize(self, ref, key):
        path = self.path
        where = f"tensor {key!r}"
        st = ref.storage
        if id(st) not in self._seen_storages:
            self._seen_storages.add(id(st))
            self.storage_bytes += st.raw.size
        name = ref.dtype or st.dtype
        if name not in SUPPORTED_NP_DTYPES:
            raise fail(path, where, f"dtype {name} is not supported by modulekit (supported: "
                                    f"{', '.join(SUPPORTED_NP_DTYPES)})")
        if ref.dtype is not None and st.dtype not in (ref.dtype, "uint8"):
            raise fail(path, where, f"a {ref.dtype} tensor on a {st.dtype} storage")
        dt = SUPPORTED_NP_DTYPES[name]
        size, stride, offset = ref.size, ref.stride, ref.offset
        n = numel_of(size)
        if n == 0:
            try:
                return np.empty(size, dtype=dt)
            except ValueError as exc:  # a zero dimension beside absurd ones
                raise fail(path, where, f"bad empty tensor shape {list(size)[:8]}: {exc}") \
                    from None
        typed = st.typed(name, path, where)
        last = offset + sum((s - 1) * t for s, t in zip(size, stride))
        if last >= typed.size:
            raise fail(path, where,
                       f"view (offset {offset}, size {list(size)}, stride {list(stride)}) "
                       f"reaches element {last} of a storage of {typed.size}")
        expected = 1
        contiguous = True
        for s, t in zip(reversed(size), reversed(stride)):
            if s != 1 and t != expected:
                contiguous = False
                break
            expected *= s
        if contiguous:
            return typed[offset:offset + n].reshape(size)
        nbytes = n * dt.itemsize
        budget = max(COPY_BUDGET_FACTOR * self.storage_bytes, COPY_BUDGET_FLOOR)
        if self.copied + nbytes > budget:
            raise fail(path, where,
                       f"non-contiguous view of {nbytes} bytes would bring the copies to "
                       f"{self.copied + nbytes} bytes, over the limit of {budget} "
                       f"({COPY_BUDGET_FACTOR}x the storages)")
        self.copied += nbytes
        view = np.lib.stride_tricks.as_strided(
            typed[offset:], shape=size, strides=[t * dt.itemsize for t in stride],
            writeable=False)
        return np.ascontiguousarray(view)


def extract_tensors(obj, path):
    """Pick the flat ``{key: TensorRef}`` out of what the checkpoint pickle held.

    A dict with a ``"state_dict"`` (or ``"model_state_dict"``) entry that is a dict yields that
    entry. Otherwise nested dicts, lists and tuples are flattened with dotted keys
    (``{"a": {"b": t}}`` gives ``"a.b"``); non-tensor leaves (numbers, strings, ...) are left
    out.
    """
    if isinstance(obj, TensorRef):
        raise fail(path, "top-level object", "the file holds a single tensor, not a dict of "
                                             "tensors")
    if not isinstance(obj, (dict, list, tuple)):
        raise fail(path, "top-level object",
                   f"expected a dict of tensors, got {type(obj).__name__}")
    if isinstance(obj, dict):
        for key in STATE_DICT_KEYS:
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
    out = {}
    try:
        _flatten(obj, "", out, path)
    except RecursionError:
        raise fail(path, "top-level object", "containers nested too deeply") from None
    return out


def _flatten(obj, prefix, out, path):
    items = obj.items() if isinstance(obj, dict) else enumerate(obj)
    for k, v in items:
        if isinstance(k, str):
            name = prefix + k
        elif type(k) is int:
            name = prefix + str(k)
        else:
            continue  # a key that cannot name a tensor; its value is not state
        if isinstance(v, TensorRef):
            if name in out:
                raise fail(path, f"key {name!r}", "two tensors flatten to the same key")
            out[name] = v
        elif isinstance(v, (dict, list, tuple)):
            _flatten(v, name + ".", out, path)
