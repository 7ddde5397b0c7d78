cdef extern from "isa.h" nogil:
    ctypedef enum mk_isa:
        MK_ISA_GENERIC
        MK_ISA_AVX2
        MK_ISA_AVX512
        MK_ISA_COUNT
    mk_isa mk_isa_detect()
    int mk_cpu_has_avx512bf16()

# The instruction-set level every kernel dispatches on now (chosen once at import, forced by
# MODULEKIT_ISA, changed by set_isa for tests).
cdef mk_isa active_isa() noexcept nogil
