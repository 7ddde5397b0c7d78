"""safetensors reader and writer, without the safetensors package.

Layout (huggingface/safetensors): an 8-byte little-endian header length ``N``, ``N`` bytes of
UTF-8 JSON (``{...}``, trailing spaces allowed), then the data. Each tensor entry is
``{"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}`` relative to the data start;
the optional ``"__metadata__"`` maps str to str.

The reader validates as strictly as the reference implementation (``src/tensor.rs``): header
length cap of 100 MB, the header is UTF-8 JSON starting with ``{``, no duplicate keys, shape
entries are non-negative integers, ``end - begin == numel * itemsize``, and the entries cover
the data exactly: no overlap, no hole, nothing after the last tensor. Tensors are views of the
file buffer (zero-copy through the memory map).

The writer pads the header with spaces to a multiple of 8 bytes, lays the data out by
decreasing item size then key (every tensor aligned to its item size, order deterministic),
and writes tied tensors (the same object, or ndarrays with the same memory, shape, strides
and dtype) once, recording the other keys in ``__metadata__["modulekit.aliases"]`` as a JSON
object ``{alias: stored_key}``; the reader restores them as the same object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from modulekit.checkpoint._common import (
    SUPPORTED_NP_DTYPES,
    atomic_write,
    check_shape,
    fail,
    memory_identity,
    numel_of,
    saveable_array,
)

__all__ = ["read_safetensors", "write_safetensors", "ALIASES_KEY", "MAX_HEADER_SIZE"]

MAX_HEADER_SIZE = 100_000_000
ALIASES_KEY = "modulekit.aliases"

# Every dtype the format defines, and the modulekit/NumPy type of those modulekit has.
_ST_TO_NAME = {
    "F32": "float32", "F64": "float64", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I8": "int8", "U8": "uint8", "BOOL": "bool",
}
_ST_UNSUPPORTED = {
    "I16", "U16", "U32", "U64", "C64", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F6_E2M3", "F6_E3M2",
    "F4",
}
_NAME_TO_ST = {v: k for k, v in _ST_TO_NAME.items()}


def _no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise _DuplicateKey(k)
        d[k] = v
    return d


class _DuplicateKey(Exception):
    pass


def read_header(buf):
    """Parse and validate the header of the safetensors file in ``buf``.

    Returns ``(entries, metadata, data_start)`` where ``entries`` is a list of
    ``(key, st_dtype, shape, begin, end)`` in file order.
    """
    path = buf.path
    if buf.size < 8:
        raise fail(path, "offset 0", f"file of {buf.size} bytes is too short for a header length")
    (n,) = buf.unpack("<Q", 0, "the header length")
    if n > MAX_HEADER_SIZE:
        raise fail(path, "offset 0", f"header length {n} exceeds the {MAX_HEADER_SIZE} byte cap")
    if 8 + n > buf.size:
        raise fail(path, "offset 0",
                   f"header length {n} runs past the end of the file ({buf.size} bytes)")
    raw = buf.bytes_at(8, n, "the header")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(path, f"header byte {8 + exc.start}", "the header is not valid UTF-8") \
            from None
    if not text.startswith("{"):
        raise fail(path, "offset 8", "the header must be a JSON object starting with '{'")
    try:
        header = json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        raise fail(path, "header", f"duplicate key {exc.args[0]!r}") from None
    except json.JSONDecodeError as exc:
        raise fail(path, f"header byte {8 + exc.pos}", f"malformed JSON: {exc.msg}") from None
    except (RecursionError, ValueError) as exc:
        raise fail(path, "header", f"malformed JSON: {type(exc).__name__}") from None
    if not isinstance(header, dict):
        raise fail(path, "header", "the header must be a JSON object")
    data_start = 8 + n
    data_len = buf.size - data_start

    metadata = header.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise fail(path, "header key '__metadata__'", "must map strings to strings")

    entries = []
    for key, info in header.items():
        where = f"tensor {key!r}"
        if not isinstance(info, dict):
            raise fail(path, where, "entry must be an object with dtype, shape, data_offsets")
        for field in ("dtype", "shape", "data_offsets"):
            if field not in info:
                raise fail(path, where, f"entry lacks {field!r}")
        st = info["dtype"]
        if not isinstance(st, str):
            raise fail(path, where, "dtype must be a string")
        if st not in _ST_TO_NAME:
            if st in _ST_UNSUPPORTED:
                raise fail(path, where,
                           f"dtype {st} is not supported by modulekit (supported: "
                           f"{', '.join(_ST_TO_NAME)})")
            raise fail(path, where, f"unknown dtype {st!r}")
        shape = check_shape(info["shape"], path, where)
        offs = info["data_offsets"]
        if (
            not isinstance(offs, list) or len(offs) != 2
            or any(type(o) is not int or o < 0 for o in offs)
        ):
            raise fail(path, where, "data_offsets must be two non-negative integers")
        begin, end = offs
        if end < begin:
            raise fail(path, where, f"data_offsets [{begin}, {end}] end before they begin")
        itemsize = SUPPORTED_NP_DTYPES[_ST_TO_NAME[st]].itemsize
        expected = numel_of(shape) * itemsize
        if end - begin != expected:
            raise fail(path, where,
                       f"holds {end - begin} bytes but shape {list(shape)} of {st} needs "
                       f"{expected}")
        entries.append((key, st, shape, begin, end))

    # Coverage: sorted by offsets, each tensor starts where the previous ended.
    pos = 0
    for key, _st, _shape, begin, end in sorted(entries, key=lambda e: (e[3], e[4])):
        if begin != pos:
            what = "overlaps the previous tensor" if begin < pos else "leaves a hole before it"
            raise fail(path, f"tensor {key!r} at data offset {begin}",
                       f"{what} (previous data ends at {pos})")
        pos = end
    if pos != data_len:
        raise fail(path, f"offset {data_start + pos}",
                   f"the tensors cover {pos} data bytes but the file holds {data_len}")
    return entries, metadata, data_start


def read_safetensors(buf):
    """Read every tensor of the safetensors file in ``buf``.

    Returns ``(arrays, aliases, metadata)``: ``arrays`` maps key to an ndarray view of the
    buffer, ``aliases`` maps an alias key to the stored key it shares (from
    ``__metadata__["modulekit.aliases"]``, validated), ``metadata`` is the rest of
    ``__metadata__``.
    """
    entries, metadata, data_start = read_header(buf)
    arrays = {}
    for key, st, shape, begin, _end in entries:
        dtype = SUPPORTED_NP_DTYPES[_ST_TO_NAME[st]]
        arrays[key] = buf.array(data_start + begin, _end - begin, dtype, shape,
                                f"tensor {key!r} at offset {data_start + begin}")
    aliases = {}
    if ALIASES_KEY in metadata:
        metadata = dict(metadata)
        text = metadata.pop(ALIASES_KEY)
        where = f"__metadata__[{ALIASES_KEY!r}]"
        try:
            aliases = json.loads(text, object_pairs_hook=_no_duplicates)
        except (_DuplicateKey, ValueError, RecursionError):
            raise fail(buf.path, where, "is not a JSON object without duplicate keys") from None
        if not isinstance(aliases, dict):
            raise fail(buf.path, where, "must be a JSON object {alias: stored_key}")
        for alias, target in aliases.items():
            if alias == "__metadata__":
                raise fail(buf.path, where, "alias '__metadata__' is reserved by the format")
            if not isinstance(target, str) or target not in arrays:
                raise fail(buf.path, where,
                           f"alias {alias!r} refers to {target!r}, which is not a stored tensor")
            if alias in arrays:
                raise fail(buf.path, where, f"alias {alias!r} is also a stored tensor")
    return arrays, aliases, metadata


# ---------------------------------------------------------------------------------------------
# Writing


def write_safetensors(state, path, metadata=None):
    """Write ``state`` (str -> Tensor/ndarray/array-like) to ``path`` as safetensors.

    The file is written to a temporary name in the same directory and renamed into place,
    so a failure never leaves a half-written checkpoint under ``path``.
    """
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a mapping of str to tensors, got {type(state).__name__}")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise TypeError("metadata must be a mapping of str to str")
    if ALIASES_KEY in metadata:
        raise ValueError(f"metadata key {ALIASES_KEY!r} is reserved for tied tensors")

    stored = {}  # key -> (array, dtype name)
    aliases = {}
    by_object = {}
    by_memory = {}
    for key in sorted(state, key=lambda k: (not isinstance(k, str), str(k))):
        if not isinstance(key, str):
            raise TypeError(f"state keys must be str, got {type(key).__name__} {key!r}")
        if key == "__metadata__":
            raise ValueError("'__metadata__' is reserved by the safetensors format")
        value = state[key]
        owner = by_object.get(id(value))
        if owner is not None and state[owner] is value:
            aliases[key] = owner
            continue
        arr, name = saveable_array(key, value)
        ident = memory_identity(arr)
        if ident is not None and ident in by_memory:
            aliases[key] = by_memory[ident]
            continue
        by_object[id(value)] = key
        if ident is not None:
            by_memory[ident] = key
        stored[key] = (arr, name)

    order = sorted(stored, key=lambda k: (-stored[k][0].dtype.itemsize, k))
    header = {}
    meta = dict(metadata)
    if aliases:
        meta[ALIASES_KEY] = json.dumps(aliases, sort_keys=True, separators=(",", ":"))
    if meta:
        header["__metadata__"] = {k: meta[k] for k in sorted(meta)}
    pos = 0
    for key in order:
        arr, name = stored[key]
        header[key] = {
            "dtype": _NAME_TO_ST[name],
            "shape": list(arr.shape),
            "data_offsets": [pos, pos + arr.nbytes],
        }
        pos += arr.nbytes
    hbytes = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    hbytes += b" " * (-(8 + len(hbytes)) % 8)

    def write(f):
        f.write(len(hbytes).to_bytes(8, "little"))
        f.write(hbytes)
        for key in order:
            arr = np.ascontiguousarray(stored[key][0])
            if arr.nbytes:
                f.write(memoryview(arr.reshape(-1).view(np.uint8)))

    atomic_write(path, write)
