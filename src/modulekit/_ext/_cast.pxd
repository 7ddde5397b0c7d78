# Fast element-type conversions between float32, float64, float16 and bfloat16
# (C kernels in kernels/cast/, one per conversion and instruction set).

cdef extern from "cast/cast.h" nogil:
    # Element-type codes taken by cast_buffer (and the C driver).
    ctypedef enum mk_dtype_code:
        MK_DT_F32     # 0: float32
        MK_DT_F64     # 1: float64
        MK_DT_F16     # 2: float16
        MK_DT_BF16    # 3: bfloat16 (ml_dtypes.bfloat16)
        MK_DT_COUNT
    size_t mk_dtype_size(int code)
    size_t mk_cast_parallel_min_bytes()
    void mk_cast_set_parallel_min_bytes(size_t nbytes)
    size_t mk_cast_stream_min_bytes()
    void mk_cast_set_stream_min_bytes(size_t nbytes)

# The type code of NumPy dtype `dtype` (native byte order only), or -1 when it is none of the
# four floating types.
cdef int dtype_code(object dtype) except -2

# Convert n elements of type src_code at src into dst_code at dst with up to nthreads threads
# (pass effective_threads() from modulekit._ext._openmp_helpers), on the active instruction
# set. dst may equal src when dst's elements are not wider than src's (in-place narrowing,
# also in parallel); any other overlap is the caller's error. Returns 0, or -1 for an unknown
# type code (nothing written). Callable without the GIL; validate everything before.
cdef int cast_buffer(const void* src, int src_code, void* dst, int dst_code, Py_ssize_t n,
                     int nthreads) noexcept nogil
