# Alignment at the extensions' boundary (inline: no module of its own, compiled into each
# extension that cimports it).
#
# The C kernels read and write memory aligned for its element type: their scalar code
# (tails, epilogues, the generic path) dereferences `const float *` and the like, which is
# undefined behaviour on a misaligned address (UBSan reports it; docs/testing.md,
# "Sanitizers"). NumPy arrays can be misaligned: a view at an odd byte offset of a buffer or a
# memory map, `np.frombuffer(buf[1:], np.float32)`, a structured field; NumPy flags them not
# ALIGNED (the address, and every stride of a dimension longer than 1, a multiple of the
# dtype's alignment). So every entry point's validation passes each input through `aligned`
# (an aligned C-contiguous copy of a misaligned array: rare, so cheap overall) and refuses a
# misaligned output or in-place argument with `check_aligned`, as it refuses a non-contiguous
# one. Weights are packed from aligned arrays the same way; the kernels' internal buffers are
# allocated aligned.

cimport numpy as cnp


cdef inline object aligned(object a):
    """The ndarray ``a`` itself when NumPy flags it ALIGNED, else an aligned C-contiguous copy
    (same shape, dtype and values)."""
    if cnp.PyArray_ISALIGNED(<cnp.ndarray>a):
        return a
    return cnp.PyArray_NewCopy(<cnp.ndarray>a, cnp.NPY_CORDER)


cdef inline int check_aligned(object a, str what) except -1:
    """Raise ValueError naming ``what`` unless the ndarray ``a`` is ALIGNED."""
    if cnp.PyArray_ISALIGNED(<cnp.ndarray>a):
        return 0
    dt = (<object>a).dtype
    raise ValueError(
        f"{what} must be aligned: its address and strides multiples of {dt.alignment} bytes "
        f"for {dt} (got address offset {<size_t>cnp.PyArray_DATA(<cnp.ndarray>a) % dt.alignment},"
        f" strides {(<object>a).strides}); pass an aligned array (a copy is one)"
    )
