"""``Tensor`` and ``Parameter``: module state as typed CPU arrays.

A :class:`Tensor` owns (or, through :meth:`Tensor.from_numpy`, shares) one C-contiguous,
aligned ``numpy.ndarray`` and a :class:`modulekit.DataType`. It exports the buffer protocol by
delegating to that array, so ``memoryview(t)`` and ``np.asarray(t)`` share its memory with no
copy. bfloat16 has no PEP 3118 buffer format (NumPy refuses it too): ``memoryview(t)`` raises
``BufferError`` for it while ``np.asarray(t)`` / ``t.numpy()`` give an ``ml_dtypes.bfloat16``
array over the same memory.

Casting in place (:meth:`Tensor._cast_`, what ``Module.to(dtype)`` uses) keeps the object's
identity; a narrowing cast (float32 -> float16, say) is done in the tensor's own memory and the
buffer shrunk when nothing else holds it, otherwise the values go to new memory and any
array or memoryview a user still holds keeps the old values alive and unchanged.
"""

from cpython.ref cimport PyObject, Py_REFCNT

import numpy as np

from modulekit.device import Device, as_device
from modulekit.dtypes import DataType, as_dtype, bfloat16, float32, is_bfloat16

from modulekit._ext._cast import cast as _fast_cast, cast_into as _fast_cast_into
from modulekit import _shared

__all__ = ["Tensor", "Parameter", "as_array"]

cdef extern from *:
    """
    /* Fill `view` from `exporter`'s buffer; `view->obj` arrives holding a reference to None
     * (Cython's __getbuffer__ convention) that is dropped on success and kept on failure. */
    static int mk_delegate_buffer(PyObject *exporter, Py_buffer *view, int flags) {
        PyObject *old = view->obj;
        int r = PyObject_GetBuffer(exporter, view, flags);
        if (r == 0) { Py_XDECREF(old); } else { view->obj = old; }
        return r;
    }
    """
    int mk_delegate_buffer(object exporter, Py_buffer *view, int flags) except -1

_FAST_FLOATS = frozenset(np.dtype(d) for d in (np.float32, np.float64, np.float16))


cdef inline bint _fast_float(dt) except -1:
    """Whether NumPy dtype ``dt`` is one the C casts convert (bfloat16 is checked by name
    first, so testing a float32 array never imports ml_dtypes)."""
    return dt in _FAST_FLOATS or is_bfloat16(dt)
_PY_FLOAT_DEFAULT = float32  # Tensor([1.0]) is float32, as torch.tensor([1.0])


def as_array(obj):
    """Return ``obj`` as an ndarray without copying when possible.

    Accepts a Tensor, an ndarray, anything with the buffer protocol or ``__array__`` (a torch
    CPU tensor included, bfloat16 ones too), and nested sequences of numbers.
    """
    if isinstance(obj, Tensor):
        return (<Tensor>obj)._array
    if isinstance(obj, np.ndarray):
        return obj
    if type(obj).__module__.partition(".")[0] == "torch" and hasattr(obj, "detach"):
        return _torch_to_numpy(obj)
    try:
        arr = np.asarray(obj)
    except (TypeError, ValueError, BufferError, OverflowError) as exc:
        # (not Exception: an error raised on purpose by the object's __array__, such as a
        # traced array's under compile(fullgraph=True), propagates as it is)
        raise TypeError(
            f"expected an array-like (ndarray, Tensor, buffer or __array__), got "
            f"{type(obj).__name__}: {exc}"
        ) from None
    if arr.dtype == object:
        raise TypeError(f"expected a numeric array-like, got {type(obj).__name__} of objects")
    return arr


def _torch_to_numpy(t):
    t = t.detach()
    if str(t.device) != "cpu":
        raise ValueError(f"expected a CPU torch tensor, got one on {t.device}")
    if str(t.dtype) == "torch.bfloat16":
        import torch  # only reached when the caller already holds a torch tensor
        return t.contiguous().view(torch.int16).numpy().view(bfloat16.numpy)
    return t.numpy()


cdef object _dtype_of(arr):
    found = DataType._by_numpy.get(arr.dtype)
    if found is None:
        return as_dtype(arr.dtype)      # bfloat16 before its first use, or a TypeError
    return found


cdef object _contiguous_copy(arr, dtype):
    """A new, owned, C-contiguous array of ``arr``'s values as ``dtype`` (a DataType)."""
    cdef object np_dt = dtype.numpy
    if _fast_float(arr.dtype) and _fast_float(np_dt):
        out = _fast_cast(arr, np_dt)
        if out is arr:
            out = out.copy()
        return out
    out = np.empty(arr.shape, dtype=np_dt)
    np.copyto(out, arr, casting="unsafe")
    return out


cdef bint _narrows_in_place(Tensor t, dt):
    """True when a cast of ``t`` to ``dt`` can reuse its own memory: a narrowing float cast
    of an array nothing else holds."""
    src = t._array
    # References to src: t._array and the local `src`; more means someone shares it.
    return (
        dt.itemsize < src.itemsize
        and _fast_float(src.dtype) and _fast_float(dt.numpy)
        and Py_REFCNT(src) == 2 and src.base is None and src.flags.owndata
        and src.flags.writeable and src.size > 0
    )


cdef class Tensor:
    """A CPU array with a :class:`~modulekit.DataType`: module state (weights, buffers).

    Parameters
    ----------
    data : array-like
        Values to copy: an ndarray, a Tensor, anything with the buffer protocol or
        ``__array__`` (a torch CPU tensor too), or nested sequences of numbers.
    dtype : DataType, str or numpy dtype, optional
        Element type. Default: the input's; Python floats become float32 (as in torch).

    Notes
    -----
    The constructor always copies (like ``torch.tensor``); :meth:`from_numpy` shares memory.
    """

    def __init__(self, data, dtype=None):
        if isinstance(data, Tensor) and dtype is None and type(self) is not Tensor:
            # Parameter(tensor): share the tensor's memory, as torch.nn.Parameter does
            self._array = (<Tensor>data)._array
            self._dtype = (<Tensor>data)._dtype
            return
        arr = as_array(data)
        if dtype is not None:
            dt = as_dtype(dtype)
        elif not isinstance(data, (np.ndarray, Tensor)) and not hasattr(data, "dtype") \
                and arr.dtype == np.float64:
            dt = _PY_FLOAT_DEFAULT
        else:
            dt = _dtype_of(arr)
        self._array = _contiguous_copy(arr, dt)
        self._dtype = dt

    @classmethod
    def from_numpy(cls, arr):
        """Wrap ``arr`` without copying: the Tensor and ``arr`` share memory.

        ``arr`` must be a C-contiguous, aligned, native-byte-order ndarray of a supported
        dtype.
        """
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(arr).__name__}")
        dt = _dtype_of(arr)
        if not arr.flags.c_contiguous or not arr.flags.aligned:
            raise ValueError(
                "from_numpy needs a C-contiguous, aligned array (got strides "
                f"{arr.strides} for shape {arr.shape}); Tensor(arr) copies instead"
            )
        cdef Tensor self = cls.__new__(cls)
        self._array = arr
        self._dtype = dt
        return self

    # ---- description -------------------------------------------------------------------
    @property
    def shape(self):
        """The shape, a tuple of ints."""
        return self._array.shape

    @property
    def dtype(self):
        """The :class:`~modulekit.DataType` of the elements."""
        return self._dtype

    @property
    def device(self):
        """Always ``Device("cpu")``."""
        return as_device("cpu")

    @property
    def ndim(self):
        return self._array.ndim

    @property
    def nbytes(self):
        """Bytes the values occupy."""
        return self._array.nbytes

    @property
    def is_floating_point(self):
        return self._dtype.is_floating

    @property
    def requires_grad(self):
        """Always False: modulekit has no autograd."""
        return False

    def numel(self):
        """Number of elements."""
        return self._array.size

    def dim(self):
        return self._array.ndim

    def size(self, dim=None):
        """The shape, or its length along ``dim`` (as ``torch.Tensor.size``)."""
        return self._array.shape if dim is None else self._array.shape[dim]

    def item(self):
        return self._array.item()

    def tolist(self):
        return self._array.tolist()

    def __len__(self):
        if self._array.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._array.shape[0]

    # ---- NumPy interop -----------------------------------------------------------------
    def numpy(self):
        """The values as an ndarray sharing this tensor's memory (no copy)."""
        return self._array

    def __array__(self, dtype=None, copy=None):
        arr = self._array
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            if copy is False:
                raise ValueError("a cast to another dtype needs a copy")
            return arr.astype(dtype)
        return arr.copy() if copy else arr

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        if self._dtype is bfloat16:
            raise BufferError(
                "bfloat16 has no PEP 3118 buffer format; use np.asarray(t) or t.numpy() "
                "for an ml_dtypes.bfloat16 array over the same memory"
            )
        mk_delegate_buffer(self._array, buffer, flags)

    def __getitem__(self, index):
        return self._array[index]

    def __setitem__(self, index, value):
        self._array[index] = as_array(value) if not np.isscalar(value) else value

    # ---- conversions -------------------------------------------------------------------
    def to(self, target=None, *, dtype=None, device=None):
        """Return a tensor on ``device`` with ``dtype``: self when nothing changes.

        ``target`` may be a Device or device name (only "cpu" exists) or a data type
        (DataType, name or NumPy dtype).
        """
        dt = self._dtype
        for value in (target, device):
            if value is None:
                continue
            if isinstance(value, Device) or (isinstance(value, str) and _is_device_name(value)):
                as_device(value)
            else:
                dt = as_dtype(value)
        if dtype is not None:
            dt = as_dtype(dtype)
        if dt is self._dtype:
            return self
        cdef Tensor out = Tensor.__new__(Tensor)
        out._array = _contiguous_copy(self._array, dt)
        out._dtype = dt
        return out

    def _cast_(self, dtype):
        """Cast the values to ``dtype`` in place: this object stays the same object.

        A narrowing float cast reuses this tensor's own memory (and gives the surplus back)
        when nothing else holds the array; otherwise the values go to new memory, leaving
        arrays and memoryviews taken earlier untouched.
        """
        dt = as_dtype(dtype)
        if dt is self._dtype:
            return self
        if _narrows_in_place(self, dt):
            src = self._array
            self._array = None      # drop our reference while we reshape the owner
            shape = src.shape
            n = src.size
            src.shape = (n,)        # C-contiguous and owning: a metadata-only reshape
            dst = src.view(np.uint8)[: n * dt.itemsize].view(dt.numpy)
            _fast_cast_into(src, dst)
            del dst
            # Give the tail back: realloc to ceil(n * new_size / old_size) old elements. A
            # shrink that fails keeps the whole block (the values are in its head): the cast
            # itself has happened and must not fail now (``_cast_commit_``).
            try:
                src.resize((-(-n * dt.itemsize // src.itemsize),), refcheck=False)
            except MemoryError:
                pass
            self._array = src.view(np.uint8)[: n * dt.itemsize].view(dt.numpy).reshape(shape)
        else:
            self._array = _contiguous_copy(self._array, dt)
        self._dtype = dt
        return self

    def _cast_plan(self, dtype):
        """The allocating half of an all-or-nothing cast (``Module.to``): the new array of
        the values cast to ``dtype``, or None when :meth:`_cast_commit_` needs no new memory
        (same dtype, or a narrowing cast done in this tensor's own memory). Changes nothing;
        a cast that runs out of memory raises here."""
        dt = as_dtype(dtype)
        if dt is self._dtype or _narrows_in_place(self, dt):
            return None
        return _contiguous_copy(self._array, dt)

    def _cast_commit_(self, dtype, arr):
        """The committing half: take ``arr`` from :meth:`_cast_plan` (no allocation, cannot
        fail), or, for None, narrow in place (no allocation, unless another thread took the
        array between the two halves, when the values are copied as :meth:`_cast_` does)."""
        if arr is None:
            self._cast_(dtype)
        else:
            self._array = arr
            self._dtype = as_dtype(dtype)

    def copy_(self, src):
        """Copy ``src`` (an array-like of exactly this shape) into this tensor's memory,
        cast to this tensor's dtype. Returns self."""
        arr = as_array(src)
        if arr.shape != self._array.shape:
            raise ValueError(
                f"copy_: shape mismatch: source has shape {tuple(arr.shape)}, this tensor "
                f"has shape {tuple(self._array.shape)}"
            )
        if not self._array.flags.writeable:
            raise ValueError("copy_: this tensor's memory is read-only")
        if (
            _fast_float(arr.dtype)
            and _fast_float(self._array.dtype) and arr.flags.c_contiguous
            and not np.may_share_memory(arr, self._array)
        ):
            _fast_cast_into(arr, self._array)
        else:
            np.copyto(self._array, arr, casting="unsafe")
        return self

    def _set_array_(self, arr):
        """Replace the values with ``arr`` (C-contiguous ndarray), keeping this object."""
        if not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous:
            raise ValueError("_set_array_ needs a C-contiguous ndarray")
        dt = _dtype_of(arr)
        self._array = arr
        self._dtype = dt

    def clone(self):
        """A copy with its own memory (same class: a Parameter clones to a Parameter)."""
        cdef Tensor out = type(self).__new__(type(self))
        out._array = self._array.copy()
        out._dtype = self._dtype
        return out

    def float(self):
        return self.to(float32)

    # ---- shared memory -----------------------------------------------------------------
    def share_memory_(self):
        """Move the values into a shared-memory segment (no-op when they are in one already);
        this object stays the same object. Returns self.

        Pickling a shared tensor then sends a handle to the segment, not the bytes: the
        receiving process maps the same memory (see ``modulekit/_shared.py``). Writes in place
        (:meth:`copy_`, ``load_state_dict``) are seen by every process that maps it; a cast
        to another dtype (:meth:`_cast_`, ``Module.to(dtype)``) moves the values to new,
        private memory.
        """
        self._array = _shared.copy_to_shared(self._array)
        return self

    def is_shared(self):
        """Whether the values live in shared memory (see :meth:`share_memory_`)."""
        return _shared.is_shared(self._array)

    # ---- Python protocols --------------------------------------------------------------
    def __repr__(self):
        return _format(self, "tensor")

    def __reduce__(self):
        handle = _shared.handle_of(self._array)
        if handle is not None:
            return (_rebuild_shared, (type(self), handle, self._dtype.name, self._array.shape))
        return (_rebuild, (type(self), self._array))

    def __copy__(self):
        cdef Tensor out = type(self).__new__(type(self))
        out._array = self._array
        out._dtype = self._dtype
        return out

    def __deepcopy__(self, memo):
        return self.clone()

    def __bool__(self):
        return bool(self._array)


cdef class Parameter(Tensor):
    """A :class:`Tensor` that is a learned weight of a module.

    Assigning a Parameter to a Module attribute registers it. ``Parameter(tensor)`` shares
    the tensor's memory (as ``torch.nn.Parameter``); any other array-like is copied.
    ``requires_grad`` is accepted so code written for torch runs, and ignored: modulekit has
    no autograd.
    """

    def __init__(self, data=None, dtype=None, requires_grad=None):
        if data is None:
            data = np.empty((0,), dtype=np.float32)
        Tensor.__init__(self, data, dtype)

    def __repr__(self):
        return "Parameter containing:\n" + _format(self, "tensor")


def _rebuild(cls, arr):
    cdef Tensor out = cls.__new__(cls)
    # (not np.ascontiguousarray, which makes a 0-d array 1-d)
    out._array = np.array(arr, order="C", copy=None)
    out._dtype = _dtype_of(out._array)
    return out


def _rebuild_shared(cls, handle, dtype, shape):
    """Unpickle a shared tensor: map the segment ``handle`` names (checked against ``dtype``
    and ``shape`` before any byte is read)."""
    if not (isinstance(cls, type) and issubclass(cls, Tensor)):
        raise TypeError(f"shared tensor: {cls!r:.100} is not a Tensor class")
    dt = as_dtype(dtype)
    if not isinstance(shape, tuple) or not all(
        type(d) is int and 0 <= d < 2 ** 48 for d in shape
    ):
        raise ValueError(f"shared tensor: shape must be a tuple of ints >= 0, got {shape!r:.100}")
    nbytes = dt.itemsize
    for d in shape:
        nbytes *= d
    if not isinstance(handle, tuple) or len(handle) != 4 or handle[3] != nbytes:
        raise ValueError(
            f"shared tensor: the handle {handle!r:.200} does not hold {nbytes} bytes "
            f"(shape {shape}, {dt.name})"
        )
    raw = _shared.attach(handle, "shared tensor")
    cdef Tensor out = cls.__new__(cls)
    out._array = raw.view(dt.numpy).reshape(shape)
    out._dtype = dt
    return out


cdef bint _is_device_name(str value):
    return value.partition(":")[0].strip().lower() in (
        "cpu", "cuda", "mps", "xpu", "ipu", "mtia", "meta", "hip", "xla", "vulkan", "hpu"
    )


_DEFAULT_REPR_DTYPES = ("float32", "int64", "bool")


cdef str _format(Tensor t, str name):
    arr = t._array
    prefix = name + "("
    if t._dtype is bfloat16:
        shown = arr.astype(np.float32)
    else:
        shown = arr
    body = np.array2string(
        shown, separator=", ", prefix=prefix, precision=4, floatmode="maxprec_equal",
        threshold=1000, edgeitems=3,
    )
    extra = ""
    if arr.size == 0 and arr.ndim != 1:
        extra += f", size={tuple(arr.shape)}"
    if t._dtype.name not in _DEFAULT_REPR_DTYPES:
        extra += f", dtype=modulekit.{t._dtype.name}"
    return f"{prefix}{body}{extra})"
