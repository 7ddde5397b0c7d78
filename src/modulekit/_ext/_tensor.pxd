# Tensor: module state, a C-contiguous ndarray with a modulekit DataType.

cdef class Tensor:
    cdef object _array      # C-contiguous, aligned numpy.ndarray holding the values
    cdef object _dtype      # modulekit.DataType matching _array.dtype
    cdef object __weakref__

    cdef inline object array(self):
        return self._array


cdef class Parameter(Tensor):
    pass
