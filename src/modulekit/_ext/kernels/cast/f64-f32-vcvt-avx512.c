/* float64 -> float32, AVX-512: vcvtpd2ps zmm (round-to-nearest-even, as NumPy's C cast),
 * 8 per step, masked tail. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>

MK_TARGET_AVX512 void mk_f64_f32_vcvt_ukernel__avx512_x8(size_t n, const void* input,
                                                         void* output) {
    const double* in = (const double*)input; /* input: n float64 */
    float* out = (float*)output;             /* output: n float32 (may alias input) */
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        _mm256_storeu_ps(out, _mm512_cvtpd_ps(_mm512_loadu_pd(in)));
    }
    if (n != 0) {
        const __mmask8 m = (__mmask8)((1u << n) - 1u);
        _mm256_mask_storeu_ps(out, m, _mm512_cvtpd_ps(_mm512_maskz_loadu_pd(m, in)));
    }
}

#endif /* MK_CAST_X86 */
