# The CPU's data caches as the kernels' block sizes see them (kernels/common/caches.h),
# cimported by _isa (the report), _gemm and _conv (their test hooks). Declarations only.
cdef extern from "common/caches.h" nogil:
    ctypedef struct mk_caches:
        size_t l1d
        size_t l2
        size_t l3
    const mk_caches *mk_cpu_caches()
    mk_caches mk_cpu_caches_set(mk_caches c)
    size_t mk_l2_scaled(size_t ref)


cdef inline size_t set_l2_bytes(size_t n) noexcept nogil:
    """Replace this extension's copy of the detected L2 size (0: keep it); the value before."""
    cdef mk_caches c
    c.l1d = 0
    c.l2 = n
    c.l3 = 0
    return mk_cpu_caches_set(c).l2
