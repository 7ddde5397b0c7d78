"""Reader for the legacy (non-zip) ``torch.save`` format, without torch.

``torch.save(obj, f, _use_new_zipfile_serialization=False)`` writes five pickles in a row and
then the raw storages: the magic number ``0x1950a86a20f9469cfc6c``, the protocol version
``1001``, a ``sys_info`` dict, the object (persistent ids ``('storage', StorageType, key,
location, numel, view_metadata)``), and the sorted list of storage keys. Each storage follows
as an 8-byte little-endian element count and the element bytes, little-endian. All five
pickles go through the allowlist-only unpickler. Storages are views of the file buffer when
their offset is aligned for their dtype, aligned copies otherwise. The old tar format
(PyTorch < 0.4) is not read.
"""

from __future__ import annotations

from modulekit.checkpoint._common import SUPPORTED_NP_DTYPES, fail
from modulekit.checkpoint._torch import TORCH_ITEMSIZE, Materializer, Storage, extract_tensors
from modulekit.checkpoint.unpickler import StorageType, Unpickler, _Reject

__all__ = ["read_torch_legacy", "MAGIC_NUMBER", "PROTOCOL_VERSION"]

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001


class _Pending:
    """A storage named by the pickle, before its bytes are located after the pickles."""

    __slots__ = ("key", "dtype", "numel", "storage")
    is_storage = True

    def __init__(self, key, dtype, numel):
        self.key = key
        self.dtype = dtype
        self.numel = numel
        self.storage = None


class _View:
    """An old-style storage view (``view_metadata``): a slice of a root storage."""

    __slots__ = ("root", "offset", "numel", "key", "dtype", "storage")
    is_storage = True

    def __init__(self, root, offset, numel, key):
        self.storage = None
        self.root = root
        self.offset = offset
        self.numel = numel
        self.key = key
        self.dtype = root.dtype


def _itemsize(dtype):
    dt = SUPPORTED_NP_DTYPES.get(dtype)
    return dt.itemsize if dt is not None else TORCH_ITEMSIZE.get(dtype, 1)


def read_torch_legacy(buf):
    """Return ``{key: (TensorRef, ndarray)}`` for the legacy torch file in ``buf``."""
    path = buf.path
    data = buf.data
    end = buf.size

    def run(pos, what, persistent_load=None):
        return Unpickler(data, pos, end, path, what, persistent_load).load()

    magic, pos = run(0, "magic number pickle")
    if magic != MAGIC_NUMBER:
        raise fail(path, "offset 0", "not a torch.save file (bad magic number)")
    version, pos = run(pos, "protocol version pickle")
    if version != PROTOCOL_VERSION:
        raise fail(path, f"offset {pos}", f"unsupported legacy protocol version {version!r}")
    sys_info, pos = run(pos, "sys_info pickle")
    if not isinstance(sys_info, dict):
        raise fail(path, f"offset {pos}", "sys_info must be a dict")

    pending = {}
    views = {}

    def persistent_load(pid):
        if len(pid) != 6 or pid[0] != "storage":
            raise _Reject("persistent id must be ('storage', type, key, location, numel, view)")
        _, stype, key, location, numel, view = pid
        if not isinstance(stype, StorageType):
            raise _Reject("persistent id names no storage type")
        if type(key) is not str or type(location) is not str:
            raise _Reject("storage key and location must be strings")
        if type(numel) is not int or numel < 0:
            raise _Reject("storage size must be a non-negative int")
        root = pending.get(key)
        if root is None:
            # at most the rest of the file can back it: check before trusting numel
            if numel * _itemsize(stype.dtype) > end:
                raise _Reject(f"storage {key!r} claims {numel} elements, more than the file "
                              "holds")
            root = pending[key] = _Pending(key, stype.dtype, numel)
        elif root.dtype != stype.dtype or root.numel != numel:
            raise _Reject(f"storage {key!r} is described twice with different types or sizes")
        if view is None:
            return root
        if (not isinstance(view, tuple) or len(view) != 3 or type(view[0]) is not str
                or type(view[1]) is not int or type(view[2]) is not int
                or view[1] < 0 or view[2] < 0 or view[1] + view[2] > root.numel):
            raise _Reject("storage view metadata must be (key, offset, numel) inside the root")
        found = views.get(view[0])
        if found is None:
            found = views[view[0]] = _View(root, view[1], view[2], view[0])
        return found

    obj, pos = run(pos, "object pickle", persistent_load)
    keys, pos = run(pos, "storage key list pickle")
    if not isinstance(keys, list) or not all(type(k) is str for k in keys):
        raise fail(path, f"offset {pos}", "the storage key list must be a list of strings")
    if len(set(keys)) != len(keys) or set(keys) != set(pending):
        raise fail(path, f"offset {pos}",
                   f"the storage key list names {len(keys)} storages, the object uses "
                   f"{len(pending)} (they must match)")
    for key in keys:
        st = pending[key]
        (numel,) = buf.unpack("<q", pos, f"the size of storage {key!r}")
        if numel != st.numel:
            raise fail(path, f"offset {pos}",
                       f"storage {key!r} has {numel} elements, the pickle says {st.numel}")
        pos += 8
        nbytes = numel * _itemsize(st.dtype)
        if pos + nbytes > end:
            raise fail(path, f"offset {pos}",
                       f"storage {key!r} needs {nbytes} bytes, the file has {end - pos} left")
        st.storage = Storage(key, st.dtype, numel, buf.u8[pos:pos + nbytes])
        pos += nbytes
    if pos != end:
        raise fail(path, f"offset {pos}", f"{end - pos} bytes after the last storage")

    for v in views.values():
        size = _itemsize(v.dtype)
        raw = v.root.storage.raw[v.offset * size:(v.offset + v.numel) * size]
        v.storage = Storage(v.key, v.dtype, v.numel, raw)
    refs = extract_tensors(obj, path)
    for ref in refs.values():
        if isinstance(ref.storage, (_Pending, _View)):
            ref.storage = ref.storage.storage
    mat = Materializer(path)
    return {key: (ref, mat(ref, key)) for key, ref in refs.items()}
