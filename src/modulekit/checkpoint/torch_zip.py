"""Reader for ``torch.save`` zip archives (PyTorch >= 1.6), without torch.

An archive holds ``<root>/data.pkl`` (the pickled object), ``<root>/byteorder`` (``little``
or ``big``; absent means little), and one ``<root>/data/<key>`` record of raw bytes per
storage, stored uncompressed at 64-byte aligned offsets. The root name is whatever the writer
chose (``archive``, the file's stem, ...): it is taken from the ``data.pkl`` record's name.
The pickle is run by the allowlist-only :class:`~modulekit.checkpoint.unpickler.Unpickler`;
its persistent ids ``('storage', StorageType, key, location, numel)`` resolve to views of the
records (zero-copy through the memory map when stored), every tensor to a view of its storage.
"""

from __future__ import annotations

import struct

import numpy as np

from modulekit.checkpoint._common import (
    SUPPORTED_NP_DTYPES,
    atomic_write,
    checked_items,
    fail,
    memory_identity,
    saveable_array,
)
from modulekit.checkpoint._torch import TORCH_ITEMSIZE, Materializer, Storage, extract_tensors
from modulekit.checkpoint._zip import read_central_directory, record_array, record_bytes
from modulekit.checkpoint.unpickler import StorageType, Unpickler, _Reject

__all__ = ["read_torch_zip", "is_torch_zip", "write_torch_zip"]


def _find_root(names):
    roots = [n[: -len("/data.pkl")] for n in names if n.endswith("/data.pkl")]
    roots = [r for r in roots if r and "/" not in r]
    return roots


def is_torch_zip(entries):
    return bool(_find_root(entries))


def read_torch_zip(buf, entries=None):
    """Return ``{key: (TensorRef, ndarray)}`` for the torch zip archive in ``buf``."""
    path = buf.path
    if entries is None:
        entries = read_central_directory(buf)
    roots = _find_root(entries)
    if len(roots) != 1:
        raise fail(path, "archive", f"expected one '<root>/data.pkl' record, found {len(roots)}")
    root = roots[0]
    if f"{root}/constants.pkl" in entries or f"{root}/code/" in entries:
        raise fail(path, f"record '{root}/constants.pkl'",
                   "this is a TorchScript archive (torch.jit.save), not a torch.save checkpoint")
    big_endian = False
    bo = entries.get(f"{root}/byteorder")
    if bo is not None:
        if bo.usize > 16:
            raise fail(path, f"record {bo.name!r}", "byteorder record is too long")
        order = record_bytes(buf, bo)
        if order not in (b"little", b"big"):
            raise fail(path, f"record {bo.name!r}",
                       f"byteorder must be 'little' or 'big', got {order[:16]!r}")
        big_endian = order == b"big"

    storages = {}

    def persistent_load(pid):
        if len(pid) != 5 or pid[0] != "storage":
            raise _Reject("persistent id must be ('storage', type, key, location, numel)")
        _, stype, key, location, numel = pid
        if not isinstance(stype, StorageType):
            raise _Reject("persistent id names no storage type")
        if type(key) is not str or type(location) is not str:
            raise _Reject("storage key and location must be strings")
        if type(numel) is not int or numel < 0:
            raise _Reject("storage size must be a non-negative int")
        found = storages.get(key)
        if found is not None:
            if found.dtype != stype.dtype or found.numel != numel:
                raise _Reject(f"storage {key!r} is described twice with different types or "
                              "sizes")
            return found
        entry = entries.get(f"{root}/data/{key}")
        if entry is None:
            raise _Reject(f"no record '{root}/data/{key}' for storage {key!r}")
        dt = SUPPORTED_NP_DTYPES.get(stype.dtype)
        itemsize = dt.itemsize if dt is not None else TORCH_ITEMSIZE.get(stype.dtype, 1)
        if entry.usize != numel * itemsize:
            raise _Reject(f"record {entry.name!r} holds {entry.usize} bytes, storage "
                          f"{key!r} needs {numel} x {itemsize}")
        st = Storage(key, stype.dtype, numel, record_array(buf, entry), big_endian)
        storages[key] = st
        return st

    pkl = entries[f"{root}/data.pkl"]
    data = record_bytes(buf, pkl)
    obj, end = Unpickler(data, 0, len(data), path, f"record {pkl.name!r}",
                         persistent_load).load()
    if end != len(data):
        raise fail(path, f"record {pkl.name!r}, pickle byte {end}", "data after STOP")
    refs = extract_tensors(obj, path)
    mat = Materializer(path)
    return {key: (ref, mat(ref, key)) for key, ref in refs.items()}




# ---------------------------------------------------------------------------------------------
# Writing

#: torch's storage class of each modulekit dtype (what the pickle names as the storage type).
_STORAGE_CLASS = {
    "float32": "FloatStorage", "float64": "DoubleStorage", "float16": "HalfStorage",
    "bfloat16": "BFloat16Storage", "int64": "LongStorage", "int32": "IntStorage",
    "int8": "CharStorage", "uint8": "ByteStorage", "bool": "BoolStorage",
}
#: Records start at multiples of this (torch's own alignment: the data can be mapped).
_ALIGN = 64


class _PickleWriter:
    """The handful of protocol-2 pickle opcodes a state dict needs, emitted by hand, so the
    stream names only what ``torch.load(weights_only=True)`` allows: ``collections.
    OrderedDict``, ``torch._utils._rebuild_tensor_v2`` and the ``torch.<X>Storage`` classes
    (as persistent ids)."""

    def __init__(self):
        self.out = bytearray(b"\x80\x02")  # PROTO 2
        self._memo = 0
        self._globals = {}

    def put(self) -> int:
        """Memoize the top of the stack; return its memo index."""
        i = self._memo
        self._memo += 1
        self.out += b"q" + bytes([i]) if i < 256 else b"r" + struct.pack("<I", i)
        return i

    def get(self, i: int) -> None:
        self.out += b"h" + bytes([i]) if i < 256 else b"j" + struct.pack("<I", i)

    def global_(self, module: str, name: str) -> None:
        i = self._globals.get((module, name))
        if i is not None:
            self.get(i)
            return
        self.out += b"c" + module.encode() + b"\n" + name.encode() + b"\n"
        self._globals[module, name] = self.put()

    def str_(self, s: str) -> None:
        data = s.encode("utf-8", "surrogatepass")
        self.out += b"X" + struct.pack("<I", len(data)) + data

    def int_(self, v: int) -> None:
        if 0 <= v < 256:
            self.out += b"K" + bytes([v])
        elif -(1 << 31) <= v < (1 << 31):
            self.out += b"J" + struct.pack("<i", v)
        else:
            data = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
            self.out += b"\x8a" + bytes([len(data)]) + data  # LONG1

    def int_tuple(self, values) -> None:
        if not values:
            self.out += b")"  # EMPTY_TUPLE
            return
        self.out += b"("  # MARK
        for v in values:
            self.int_(v)
        self.out += b"t"  # TUPLE

    def ordered_dict(self) -> None:
        """``OrderedDict()`` on the stack."""
        self.global_("collections", "OrderedDict")
        self.out += b")R"  # EMPTY_TUPLE, REDUCE


def _contiguous_strides(shape):
    """torch's strides (in elements) of a contiguous tensor of ``shape``."""
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def write_torch_zip(state, path):
    """Write ``state`` (str -> Tensor/ndarray/array-like) to ``path`` in ``torch.save``'s zip
    format, without torch: ``torch.load(path, weights_only=True)`` gives back an
    ``OrderedDict`` of CPU tensors (``modulekit.load`` reads it too).

    The archive is what ``torch.save(state_dict)`` writes: ``archive/data.pkl`` (a protocol-2
    pickle of an ``OrderedDict`` whose values are ``torch._utils._rebuild_tensor_v2`` calls on
    ``('storage', torch.<X>Storage, key, 'cpu', numel)`` persistent ids), ``archive/byteorder``
    (``little``), one stored (uncompressed) ``archive/data/<key>`` record per tensor starting
    at a 64-byte aligned offset, and ``archive/version`` (``3``). Values that are one object,
    or ndarrays over the very same memory (tied weights), are written once and load as one
    tensor. Written through a temporary file renamed into place.
    """
    import zipfile

    storages = []  # (array, storage key)
    p = _PickleWriter()
    p.ordered_dict()
    p.put()
    p.out += b"("  # MARK: the items, closed by SETITEMS
    by_object = {}
    by_memory = {}
    for key, value in checked_items(state):
        p.str_(key)
        memo = by_object.get(id(value))
        if memo is not None and memo[0] is value:
            p.get(memo[1])
            continue
        arr, name = saveable_array(key, value)
        ident = memory_identity(arr)
        if ident is not None and ident in by_memory:
            p.get(by_memory[ident])
            continue
        arr = arr if arr.flags.c_contiguous else arr.copy(order="C")  # (keeps 0-d)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        skey = str(len(storages))
        storages.append((arr, skey))
        p.global_("torch._utils", "_rebuild_tensor_v2")
        p.out += b"(("  # MARK args, MARK persistent id
        p.str_("storage")
        p.global_("torch", _STORAGE_CLASS[name])
        p.str_(skey)
        p.str_("cpu")
        p.int_(arr.size)
        p.out += b"tQ"  # TUPLE, BINPERSID
        p.int_(0)  # storage offset
        p.int_tuple(arr.shape)
        p.int_tuple(_contiguous_strides(arr.shape))
        p.out += b"\x89"  # NEWFALSE: requires_grad
        p.ordered_dict()  # backward hooks
        p.out += b"tR"  # TUPLE, REDUCE
        i = p.put()
        by_object[id(value)] = (value, i)
        if ident is not None:
            by_memory[ident] = i
    p.out += b"u."  # SETITEMS, STOP

    def record(zf, name, data):
        info = zipfile.ZipInfo(f"archive/{name}", date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_STORED
        nbytes = len(data) if isinstance(data, bytes) else data.nbytes
        info.file_size = nbytes
        zip64 = nbytes * 1.05 > zipfile.ZIP64_LIMIT  # (zipfile's own rule)
        # local header: 30 bytes, the name, our padding field, zipfile's ZIP64 field
        start = zf.fp.tell() + 30 + len(info.filename.encode()) + (20 if zip64 else 0) + 4
        pad = -start % _ALIGN
        info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad  # torch's padding field id
        with zf.open(info, "w", force_zip64=zip64) as out:
            if nbytes:
                out.write(data if isinstance(data, bytes) else memoryview(data.reshape(-1)
                                                                          .view(np.uint8)))

    def write(f):
        with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
            record(zf, "data.pkl", bytes(p.out))
            record(zf, "byteorder", b"little")
            for arr, skey in storages:
                record(zf, f"data/{skey}", arr)
            record(zf, "version", b"3\n")

    atomic_write(path, write)
