"""Variable-length batches for the recurrent layers, as ``torch.nn.utils.rnn``.

A :class:`PackedSequence` holds a batch of sequences of different lengths without padding:
``data`` stacks, time step after time step, the rows of the sequences still running at that
step (longest first), and ``batch_sizes[t]`` says how many there are. ``RNN``, ``LSTM`` and
``GRU`` accept one and return one; every sequence then stops at its own length (its final
hidden state is the one after its last step, not after padding).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from modulekit.nn._input import as_input

__all__ = [
    "PackedSequence",
    "invert_permutation",
    "pack_padded_sequence",
    "pack_sequence",
    "pad_packed_sequence",
    "pad_sequence",
    "unpack_sequence",
    "unpad_sequence",
]


def _int64_vector(value, what: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu" or arr.ndim != 1:
        raise TypeError(f"{what} must be a 1-D array of integers, got {arr.dtype} of shape "
                        f"{arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def invert_permutation(permutation):
    """The inverse of an index permutation (None stays None), as torch's helper."""
    if permutation is None:
        return None
    perm = _int64_vector(permutation, "permutation")
    out = np.empty_like(perm)
    out[perm] = np.arange(perm.size, dtype=np.int64)
    return out


_PackedSequenceBase = namedtuple(
    "_PackedSequenceBase", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"]
)


class PackedSequence(_PackedSequenceBase):
    """A batch of variable-length sequences, packed (``torch.nn.utils.rnn.PackedSequence``).

    Attributes
    ----------
    data : ndarray, shape (sum of lengths, *)
        The rows of every sequence, time step by time step; within a step, sequences in
        decreasing order of length.
    batch_sizes : ndarray of int64, shape (longest length,)
        How many sequences run at each time step (non-increasing).
    sorted_indices : ndarray of int64 or None
        ``sorted_indices[i]`` is the original batch position of the i-th longest sequence;
        None when the batch was already sorted (``enforce_sorted=True``).
    unsorted_indices : ndarray of int64 or None
        The inverse permutation of ``sorted_indices``.

    Notes
    -----
    Build one with :func:`pack_padded_sequence` or :func:`pack_sequence` rather than by hand;
    constructed directly, ``unsorted_indices`` defaults to the inverse of ``sorted_indices``.
    """

    __slots__ = ()

    def __new__(cls, data, batch_sizes, sorted_indices=None, unsorted_indices=None):
        batch_sizes = _int64_vector(batch_sizes, "PackedSequence: batch_sizes")
        if sorted_indices is not None:
            sorted_indices = _int64_vector(sorted_indices, "PackedSequence: sorted_indices")
            if unsorted_indices is None:
                unsorted_indices = invert_permutation(sorted_indices)
        if unsorted_indices is not None:
            unsorted_indices = _int64_vector(unsorted_indices, "PackedSequence: unsorted_indices")
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    @property
    def is_cuda(self) -> bool:
        """Always False: modulekit runs on the CPU."""
        return False

    def is_pinned(self) -> bool:
        """Always False (no pinned host memory without a GPU)."""
        return False


def _lengths(lengths, batch: int) -> np.ndarray:
    arr = np.asarray(lengths)
    if arr.dtype.kind not in "iu" or arr.ndim != 1:
        raise TypeError(f"lengths must be a 1-D array of integers, got {arr.dtype} of shape "
                        f"{arr.shape}")
    if arr.shape[0] != batch:
        raise ValueError(f"lengths has {arr.shape[0]} entries for a batch of {batch} sequences")
    arr = arr.astype(np.int64)
    if arr.size and arr.min() <= 0:
        raise ValueError("Length of all samples has to be greater than 0, but found an element "
                         f"in 'lengths' that is <= 0 (lengths {arr.tolist()})")
    return arr


def pack_padded_sequence(input, lengths, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded batch of variable-length sequences.

    Parameters
    ----------
    input : array_like, shape (T, B, *) (or (B, T, *) when ``batch_first``)
        The padded batch.
    lengths : array_like of int, shape (B,)
        Each sequence's length, each in ``1 .. T``.
    batch_first : bool
        Whether ``input`` is batch-major.
    enforce_sorted : bool
        True: ``lengths`` must be non-increasing (an error otherwise). False: the sequences
        are sorted here (a stable sort, longest first) and the permutation recorded.

    Returns
    -------
    PackedSequence
    """
    x = as_input(input, "pack_padded_sequence")
    if x.ndim < 2:
        raise ValueError(f"pack_padded_sequence: input must have at least 2 dimensions "
                         f"(time and batch), got shape {x.shape}")
    if batch_first:
        x = np.swapaxes(x, 0, 1)
    steps, batch = x.shape[0], x.shape[1]
    lens = _lengths(lengths, batch)
    if lens.size and lens.max() > steps:
        raise ValueError(f"pack_padded_sequence: a length ({lens.max()}) exceeds the input's "
                         f"{steps} time steps")
    if enforce_sorted:
        if np.any(lens[1:] > lens[:-1]):
            raise RuntimeError(
                "`lengths` array must be sorted in decreasing order when `enforce_sorted` is "
                "True. You can pass `enforce_sorted=False` to pack_padded_sequence and/or "
                "pack_sequence to sidestep this requirement if you do not need ONNX "
                "exportability."
            )
        sorted_indices = None
        order = np.arange(batch)
    else:
        order = np.argsort(-lens, kind="stable").astype(np.int64)
        sorted_indices = order
        lens = lens[order]
    max_len = int(lens[0]) if lens.size else 0
    batch_sizes = (lens[None, :] > np.arange(max_len)[:, None]).sum(axis=1).astype(np.int64)
    x = x[:max_len][:, order]
    mask = np.arange(max_len)[:, None] < lens[None, :]
    data = np.ascontiguousarray(x[mask])  # row-major over (t, b): step by step
    return PackedSequence(data, batch_sizes, sorted_indices, invert_permutation(sorted_indices))


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value: float = 0.0, total_length: int | None = None):
    """Pad a packed batch back to a rectangle (the inverse of :func:`pack_padded_sequence`).

    Returns
    -------
    padded : ndarray, shape (T, B, *) (or (B, T, *) when ``batch_first``)
        ``T`` is the longest length, or ``total_length`` when given (at least the longest).
    lengths : ndarray of int64, shape (B,)
        Each sequence's length, in the original batch order.
    """
    if not isinstance(sequence, PackedSequence):
        raise TypeError(f"pad_packed_sequence: expected a PackedSequence, got "
                        f"{type(sequence).__name__}")
    data = np.asarray(sequence.data)
    bs = sequence.batch_sizes
    max_len = bs.shape[0]
    batch = int(bs[0]) if max_len else 0
    if total_length is not None:
        if total_length < max_len:
            raise ValueError(
                "Expected total_length to be at least the length of the longest sequence in "
                f"input, but got total_length={total_length} and max sequence length being "
                f"{max_len}"
            )
        max_len = int(total_length)
    padded = np.full((max_len, batch) + data.shape[1:], padding_value, dtype=data.dtype)
    lens = (bs[None, :] > np.arange(batch)[:, None]).sum(axis=1).astype(np.int64)
    mask = np.arange(max_len)[:, None] < lens[None, :]
    padded[mask] = data
    if sequence.unsorted_indices is not None:
        padded = padded[:, sequence.unsorted_indices]
        lens = lens[sequence.unsorted_indices]
    if batch_first:
        padded = np.ascontiguousarray(np.swapaxes(padded, 0, 1))
    return padded, lens


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> np.ndarray:
    """Stack sequences of shape (L_i, *) into one padded array (T, B, *), or (B, T, *)."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"pad_sequence: padding_side must be 'left' or 'right', got "
                         f"{padding_side!r}")
    seqs = [as_input(s, "pad_sequence") for s in sequences]
    if not seqs:
        raise ValueError("pad_sequence: received an empty list of sequences")
    tail = seqs[0].shape[1:]
    for s in seqs:
        if s.ndim < 1 or s.shape[1:] != tail:
            raise ValueError(f"pad_sequence: every sequence must have shape (L, *{tail}), got "
                             f"{[x.shape for x in seqs]}")
    dtype = np.result_type(*seqs)
    max_len = max(s.shape[0] for s in seqs)
    out = np.full((len(seqs), max_len) + tail, padding_value, dtype=dtype)
    for i, s in enumerate(seqs):
        if padding_side == "right":
            out[i, : s.shape[0]] = s
        else:
            out[i, max_len - s.shape[0]:] = s
    return out if batch_first else np.ascontiguousarray(np.swapaxes(out, 0, 1))


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of sequences of shape (L_i, *) (``pad_sequence`` then
    ``pack_padded_sequence``)."""
    seqs = list(sequences)
    lengths = np.array([np.shape(s)[0] for s in seqs], dtype=np.int64)
    return pack_padded_sequence(pad_sequence(seqs), lengths, enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first: bool = False) -> list[np.ndarray]:
    """Split a padded batch into its sequences (the inverse of :func:`pad_sequence`)."""
    x = as_input(padded_sequences, "unpad_sequence")
    if not batch_first:
        x = np.swapaxes(x, 0, 1)
    lens = _lengths(lengths, x.shape[0])
    return [x[i, : int(n)].copy() for i, n in enumerate(lens)]


def unpack_sequence(packed_sequences: PackedSequence) -> list[np.ndarray]:
    """Split a packed batch into its sequences, in the original order."""
    padded, lens = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lens, batch_first=True)
