cdef extern from "isa.h" nogil:
    ctypedef enum mk_isa:
        MK_ISA_GENERIC
        MK_ISA_AVX2
        MK_ISA_AVX512
        MK_ISA_COUNT
    mk_isa mk_isa_detect()
    int mk_cpu_has_avx512bf16()
    int mk_bf16_detect()
    int mk_bf16_default()
    int mk_amx_status()

# The instruction-set level every kernel dispatches on now (chosen once at import, forced by
# MODULEKIT_ISA, changed by set_isa for tests).
cdef mk_isa active_isa() noexcept nogil

# The bfloat16-compute path the GEMM engine dispatches on now (0 none, 1 AVX512-BF16, 2 AMX;
# mk_bf16_isa in gemm/gemm.h): the chosen path while the active level is avx512, else 0.
cdef int active_bf16() noexcept nogil
