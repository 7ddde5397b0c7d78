/* The one table that chooses the group normalisation's kernels for each instruction-set level
 * (as kernels/gemm/gemm-config.c does for the GEMM). */
#include "isa.h"
#include "norm.h"

#include <stddef.h>

static const mk_norm_config norm_configs[MK_ISA_COUNT] = {
    [MK_ISA_GENERIC] = {"f32-moments-4-scalar", mk_moments_f32_scalar, mk_affine_f32_scalar,
                        NULL, NULL},
#if MK_X86
    [MK_ISA_AVX2] = {"f32-moments-32-avx2", mk_moments_f32_avx2, mk_affine_f32_avx2, NULL,
                     NULL},
    [MK_ISA_AVX512] = {"f32-moments-64-avx512", mk_moments_f32_avx512, mk_affine_f32_avx512,
                       mk_affine_f32_avx512_nt, mk_norm_sfence_avx512},
#else /* never selected: mk_isa_detect() reports MK_ISA_GENERIC (see isa.h) */
    [MK_ISA_AVX2] = {"f32-moments-4-scalar", mk_moments_f32_scalar, mk_affine_f32_scalar, NULL,
                     NULL},
    [MK_ISA_AVX512] = {"f32-moments-4-scalar", mk_moments_f32_scalar, mk_affine_f32_scalar,
                       NULL, NULL},
#endif
};

/* 16 MiB: well past the last-level cache share of one core here (measured: bench/norm.py and
 * bench/performance_notes.md, "GroupNorm"). */
static size_t streaming_min_bytes = (size_t)16 << 20;

size_t mk_norm_streaming_min_bytes(void) { return streaming_min_bytes; }

size_t mk_norm_set_streaming_min_bytes(size_t bytes)
{
    size_t previous = streaming_min_bytes;
    streaming_min_bytes = bytes;
    return previous;
}

const mk_norm_config *mk_norm_config_for(int isa)
{
    if (isa < 0 || isa >= MK_ISA_COUNT) isa = MK_ISA_GENERIC;
    return &norm_configs[isa];
}
