/* f32-vact-avx512: y = act(x), 16 lanes at a time, masked tail. */
#include "common/vmath-avx512.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#define MK_VACT_LOOP(FN)                                                                  \
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, FN(_mm512_loadu_ps(x + i)));    \
    if (i < n) {                                                                          \
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);                            \
        _mm512_mask_storeu_ps(y + i, m, FN(_mm512_maskz_loadu_ps(m, x + i)));             \
    }
#define VM_FN(name) mk_##name##_f32x16

MK_TARGET_AVX512 void mk_f32_vact__avx512(size_t n, const float *x, float *y, int act, float lo,
                                          float hi) {
#include "common/f32-vact.inc.h"
}

#endif /* MK_X86 */
