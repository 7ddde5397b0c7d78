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

from modulekit.checkpoint._common import SUPPORTED_NP_DTYPES, fail
from modulekit.checkpoint._torch import TORCH_ITEMSIZE, Materializer, Storage, extract_tensors
from modulekit.checkpoint._zip import read_central_directory, record_array, record_bytes
from modulekit.checkpoint.unpickler import StorageType, Unpickler, _Reject

__all__ = ["read_torch_zip", "is_torch_zip"]


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


