/* The one table that chooses the group normalisation's kernels for each instruction-set level
 * (as kernels/gemm/gemm-config.c does for the GEMM). */
#include "isa.h"
#include "norm.h"

static const mk_norm_config norm_configs[MK_ISA_COUNT] = {
    [MK_ISA_GENERIC] = {"f32-moments-4-scalar", mk_moments_f32_scalar, mk_affine_f32_scalar},
#if MK_X86
    [MK_ISA_AVX2] = {"f32-moments-32-avx2", mk_moments_f32_avx2, mk_affine_f32_avx2},
    [MK_ISA_AVX512] = {"f32-moments-64-avx512", mk_moments_f32_avx512, mk_affine_f32_avx512},
#else /* never selected: mk_isa_detect() reports MK_ISA_GENERIC (see isa.h) */
    [MK_ISA_AVX2] = {"f32-moments-4-scalar", mk_moments_f32_scalar, mk_affine_f32_scalar},
    [MK_ISA_AVX512] = {"f32-moments-4-scalar", mk_moments_f32_scalar, mk_affine_f32_scalar},
#endif
};

const mk_norm_config *mk_norm_config_for(int isa)
{
    if (isa < 0 || isa >= MK_ISA_COUNT) isa = MK_ISA_GENERIC;
    return &norm_configs[isa];
}
