/* The resampling configuration table: for each ISA level the row kernels the drivers run.
 * This is the ONLY place where they are chosen. */
#include "isa.h"
#include "resample.h"

static const mk_resample_config resample_configs[MK_ISA_COUNT] = {
    [MK_ISA_GENERIC] = {mk_f32_lerp_row__scalar, mk_f32_blend_row__scalar,
                        mk_f32_gather_row__scalar, mk_f32_wsum_rows__scalar,
                        mk_f32_wgather_row__scalar},
#if MK_X86
    [MK_ISA_AVX2] = {mk_f32_lerp_row__avx2, mk_f32_blend_row__avx2, mk_f32_gather_row__avx2,
                     mk_f32_wsum_rows__avx2, mk_f32_wgather_row__avx2},
    [MK_ISA_AVX512] = {mk_f32_lerp_row__avx512, mk_f32_blend_row__avx512,
                       mk_f32_gather_row__avx512, mk_f32_wsum_rows__avx512,
                       mk_f32_wgather_row__avx512},
#else /* never selected: mk_isa_detect() reports MK_ISA_GENERIC (see isa.h) */
    [MK_ISA_AVX2] = {mk_f32_lerp_row__scalar, mk_f32_blend_row__scalar,
                     mk_f32_gather_row__scalar, mk_f32_wsum_rows__scalar,
                     mk_f32_wgather_row__scalar},
    [MK_ISA_AVX512] = {mk_f32_lerp_row__scalar, mk_f32_blend_row__scalar,
                       mk_f32_gather_row__scalar, mk_f32_wsum_rows__scalar,
                       mk_f32_wgather_row__scalar},
#endif
};

const mk_resample_config *mk_resample_config_for(int isa)
{
    if (isa < 0 || isa >= MK_ISA_COUNT) isa = MK_ISA_GENERIC;
    return &resample_configs[isa];
}
