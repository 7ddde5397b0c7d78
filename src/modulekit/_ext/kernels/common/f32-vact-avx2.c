/* f32-vact-avx2: y = act(x), 8 lanes at a time, masked tail. */
#include "common/vmath-avx2.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#define MK_VACT_LOOP(FN)                                                                  \
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, FN(_mm256_loadu_ps(x + i)));      \
    if (i < n) {                                                                          \
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)),             \
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));  \
        _mm256_maskstore_ps(y + i, m, FN(_mm256_maskload_ps(x + i, m)));                  \
    }
#define VM_FN(name) mk_##name##_f32x8

MK_TARGET_AVX2 void mk_f32_vact__avx2(size_t n, const float *x, float *y, int act, float lo,
                                      float hi) {
#include "common/f32-vact.inc.h"
}

#endif /* MK_X86 */
