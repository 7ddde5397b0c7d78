"""Checkpoint files without torch: ``load`` and ``save``.

``load`` reads safetensors, ``torch.save`` files (zip and legacy) and ``.npz`` archives,
recognised from the file's bytes, and returns ``{key: Tensor}``; ``save`` writes safetensors,
``.npz`` or torch's zip format, as the file's extension says.
See ``docs/checkpoints.md``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from modulekit._ext._tensor import Parameter, Tensor
from modulekit.checkpoint._common import CheckpointError, FileBuffer, fail
from modulekit.checkpoint._zip import is_zip, read_central_directory
from modulekit.checkpoint.npz import read_npz, write_npz
from modulekit.checkpoint.safetensors import MAX_HEADER_SIZE, read_safetensors, write_safetensors
from modulekit.checkpoint.torch_legacy import read_torch_legacy
from modulekit.checkpoint.torch_zip import is_torch_zip, read_torch_zip, write_torch_zip

__all__ = ["CheckpointError", "detect_format", "load", "save"]

CheckpointError.__module__ = __name__  # documented as modulekit.checkpoint.CheckpointError

FORMATS = ("safetensors", "torch-zip", "torch-legacy", "npz")


def _sniff(buf):
    """Return ``(format, zip_entries_or_None)`` from the bytes of ``buf``."""
    path = buf.path
    if buf.size >= 9 and buf.data[8] == 0x7B:  # '{' right after an 8-byte length
        return "safetensors", None
    if is_zip(buf):
        entries = read_central_directory(buf)
        if is_torch_zip(entries):
            return "torch-zip", entries
        if all(name.endswith(".npy") for name in entries):
            return "npz", entries
        shown = ", ".join(repr(n) for n in list(entries)[:3])
        raise fail(path, "archive", f"a ZIP archive that is neither a torch.save checkpoint "
                                    f"(no '<root>/data.pkl') nor an .npz (records {shown})")
    head = buf.bytes_at(0, min(buf.size, 16), "the magic number")
    if head[0] == 0x80:  # pickle PROTO: the legacy torch.save stream
        return "torch-legacy", None
    if head.startswith(b"\x93NUMPY"):
        raise fail(path, "offset 0", "a single .npy array, not a checkpoint of named tensors "
                                     "(use numpy.load)")
    if buf.size > 262 and bytes(buf.data[257:262]) == b"ustar":
        raise fail(path, "offset 257", "the tar format of PyTorch < 0.4 is not supported")
    if buf.size >= 8:
        (n,) = buf.unpack("<Q", 0, "the header length")
        if 8 + n <= buf.size and n <= MAX_HEADER_SIZE:
            return "safetensors", None  # a plausible header length: let the parser say more
    raise fail(path, "offset 0", f"unrecognised checkpoint format (first bytes {head.hex()}): "
                                 f"expected safetensors, torch.save (zip or legacy) or .npz")


def detect_format(path: str | os.PathLike) -> str:
    """Name the checkpoint format of ``path`` from its bytes.

    Returns one of ``"safetensors"``, ``"torch-zip"``, ``"torch-legacy"``, ``"npz"``; raises
    :class:`CheckpointError` for anything else.
    """
    return _sniff(FileBuffer(path, use_mmap=True))[0]


def load(
    path: str | os.PathLike, *, mmap: bool = True, metadata: bool = False
) -> dict[str, Tensor] | tuple[dict[str, Tensor], dict[str, str]]:
    """Load the tensors of a checkpoint file as ``{key: Tensor}``.

    Parameters
    ----------
    path : str or os.PathLike
        A safetensors file, a ``torch.save`` file (zip or legacy format) or an ``.npz``
        archive; the format is recognised from the bytes, never from the name.
    mmap : bool, default True
        Map the file (private, copy-on-write: the tensors are writable and writing to them
        never touches the file) and return tensors that are views of the map wherever the
        format stores them aligned and uncompressed: nothing is copied until it is used.
        ``False`` reads the whole file into memory first.
    metadata : bool, default False
        Also return the file's string metadata: safetensors' ``__metadata__`` (without the
        entry modulekit uses for tied tensors); ``{}`` for the other formats.

    Returns
    -------
    dict[str, Tensor] or tuple[dict[str, Tensor], dict[str, str]]
        Keys in file order. Tensors that were one object when saved (tied weights) are one
        :class:`~modulekit.Tensor` object under each key; torch ``Parameter`` s load as
        :class:`~modulekit.Parameter`. For a torch checkpoint that is a dict with a
        ``"state_dict"`` (or ``"model_state_dict"``) dict entry, that entry is returned;
        otherwise nested containers are flattened to dotted keys and non-tensor values
        are left out.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    CheckpointError
        The file is corrupt, hostile, or not a supported checkpoint; the message names the
        file, the record or byte offset, and what was wrong.
    """
    buf = FileBuffer(path, use_mmap=mmap)
    fmt, entries = _sniff(buf)
    meta = {}
    out = {}
    if fmt == "safetensors":
        arrays, aliases, meta = read_safetensors(buf)
        for key, arr in arrays.items():
            out[key] = Tensor.from_numpy(arr)
        for alias, target in aliases.items():
            out[alias] = out[target]
    elif fmt == "npz":
        for key, arr in read_npz(buf, entries).items():
            out[key] = Tensor.from_numpy(arr)
    else:
        pairs = read_torch_zip(buf, entries) if fmt == "torch-zip" else read_torch_legacy(buf)
        made = {}
        for key, (ref, arr) in pairs.items():
            t = made.get(id(ref))
            if t is None:
                t = (Parameter if ref.is_parameter else Tensor).from_numpy(arr)
                made[id(ref)] = t
            out[key] = t
    for key in out:
        _check_key(buf.path, key, "key")
    for key, value in meta.items():
        _check_key(buf.path, key, "metadata key")
        _check_key(buf.path, value, f"metadata value of {key!r}")
    return (out, meta) if metadata else out


#: What :func:`save` writes, by file-name extension (lower case).
SAVE_FORMATS = {
    ".safetensors": "safetensors",
    ".npz": "npz",
    ".pt": "torch-zip",
    ".pth": "torch-zip",
    ".bin": "torch-zip",
}
_WRITERS = {"safetensors": write_safetensors, "npz": write_npz, "torch-zip": write_torch_zip}


def _save_format(path: str, format: str | None) -> str:
    if format is not None:
        if format not in _WRITERS:
            raise ValueError(
                f"save: unknown format {format!r}: expected one of {', '.join(_WRITERS)}"
            )
        return format
    ext = os.path.splitext(path)[1].lower()
    found = SAVE_FORMATS.get(ext)
    if found is None:
        shown = ", ".join(f"{e} ({f})" for e, f in SAVE_FORMATS.items())
        raise ValueError(
            f"save: cannot tell the format from the name {os.path.basename(path)!r} "
            f"(extension {ext or 'none'!r}): modulekit writes {shown}; rename the file or "
            "pass format='safetensors' / 'npz' / 'torch-zip'"
        )
    return found


_EMPTY_STATE = (
    "save: refusing to write a checkpoint with no tensors in it. If this came from "
    "model.state_dict() after model.initialize() or a first forward, the layers packed their "
    "weights into the kernels' layout and state_dict() no longer lists them; export the "
    "complete checkpoint with modulekit.save(model.state_dict(include_packed=True), path) "
    "(or save before the first forward)"
)


def _check_key(path, text: str, what: str) -> None:
    """Refuse a key that is no Unicode text: a lone surrogate (a JSON ``\\ud800`` escape or
    a pickle's surrogatepass string) cannot be printed, encoded or saved again."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise fail(path, f"{what} {text!r}", f"holds a lone surrogate (character {exc.start}): "
                                             "not valid Unicode text") from None


def save(
    state: Mapping[str, Any],
    path: str | os.PathLike,
    *,
    metadata: Mapping[str, str] | None = None,
    format: str | None = None,
) -> None:
    """Write ``state`` to ``path`` in the format its extension names.

    Parameters
    ----------
    state : Mapping[str, Tensor | numpy.ndarray | array-like]
        The tensors, e.g. ``module.state_dict()`` (``state_dict(include_packed=True)`` once
        layers are packed). Values of any dtype modulekit has (float32/64, float16, bfloat16,
        int64/32/8, uint8, bool; no bfloat16 in ``.npz``). An empty mapping is refused.
    path : str or os.PathLike
        ``.safetensors``: safetensors; ``.npz``: an uncompressed NumPy archive
        (``numpy.load(path, allow_pickle=False)`` reads it); ``.pt``, ``.pth``, ``.bin``:
        ``torch.save``'s zip format (``torch.load(path, weights_only=True)`` reads it, no
        torch needed to write it). Any other extension is refused unless ``format`` is given.
        Written through a temporary file in the same directory and renamed into place.
    metadata : Mapping[str, str], optional
        Stored as safetensors ``__metadata__``; the key ``"modulekit.aliases"`` is reserved.
        The other formats have no place for it: refused there.
    format : {"safetensors", "npz", "torch-zip"}, optional
        Overrides the extension (e.g. a safetensors file named ``model.bin``).

    Raises
    ------
    ValueError
        ``state`` is empty (the message says how to export packed layers), the extension is
        not one of the above and no ``format`` is given, or ``metadata`` is given for a
        format other than safetensors.
    TypeError
        ``state`` is not a mapping of str, or a value is not an array of a dtype modulekit
        has (the message names the key). Nothing is written when anything is refused.

    Notes
    -----
    All three formats load back bit-exactly with :func:`load`. Tied values (the same
    object, or ndarrays with the same memory, shape, strides and dtype) are written once in
    safetensors and torch files and load as one object; ``.npz`` stores each key's copy.
    safetensors keys are laid out in a deterministic order (item size, then key), each tensor
    aligned to its item size, the header padded to 8 bytes.
    """
    path = os.fspath(path)
    fmt = _save_format(path, format)
    if isinstance(state, Mapping) and len(state) == 0:
        raise ValueError(_EMPTY_STATE)
    if fmt == "safetensors":
        write_safetensors(state, path, metadata)
        return
    if metadata is not None:
        raise ValueError(
            f"save: metadata is stored only in safetensors files, not {fmt} "
            f"({os.path.basename(path)!r}); save as .safetensors to keep it"
        )
    _WRITERS[fmt](state, path)
