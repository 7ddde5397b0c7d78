/* float32 -> float64, AVX-512: vcvtps2pd zmm (exact; NaNs quieted, as NumPy's C cast),
 * 8 per step, masked tail. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>

MK_TARGET_AVX512 void mk_f32_f64_vcvt_ukernel__avx512_x8(size_t n, const void* input,
                                                         void* output) {
    const float* in = (const float*)input; /* input: n float32 */
    double* out = (double*)output;         /* output: n float64 */
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        _mm512_storeu_pd(out, _mm512_cvtps_pd(_mm256_loadu_ps(in)));
    }
    if (n != 0) {
        const __mmask8 m = (__mmask8)((1u << n) - 1u);
        _mm512_mask_storeu_pd(out, m, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, in)));
    }
}

#endif /* MK_CAST_X86 */
