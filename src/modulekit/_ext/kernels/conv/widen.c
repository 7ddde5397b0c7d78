/* 16-bit weight storage widened to float32 (generic, AVX2/F16C, AVX-512 paths). */
#include "common/half.h"
#include "conv-simd.h"
#include "isa.h"

#if MK_X86
MK_T256 static void widen_f16_avx2(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = mk_f16_to_f32(src[i]);
}

MK_T512 static void widen_f16_avx512(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i,
                         _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++) dst[i] = mk_f16_to_f32(src[i]);
}
#endif /* MK_X86 */

void mk_widen_f16_f32(const uint16_t *src, float *dst, size_t n, int isa) {
#if MK_X86
    if (isa >= MK_ISA_AVX512) {
        widen_f16_avx512(src, dst, n);
        return;
    }
    if (isa >= MK_ISA_AVX2) {
        widen_f16_avx2(src, dst, n);
        return;
    }
#endif
    (void)isa;
    for (size_t i = 0; i < n; i++) dst[i] = mk_f16_to_f32(src[i]);
}

void mk_widen_bf16_f32(const uint16_t *src, float *dst, size_t n, int isa) {
    (void)isa; /* a shift: the compiler vectorises the portable loop */
    uint32_t *d = (uint32_t *)dst;
    for (size_t i = 0; i < n; i++) d[i] = (uint32_t)src[i] << 16;
}
