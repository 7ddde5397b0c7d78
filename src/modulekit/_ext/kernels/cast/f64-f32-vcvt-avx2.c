/* float64 -> float32, AVX2: vcvtpd2ps (round-to-nearest-even, as NumPy's C cast), 4 per step. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>

MK_TARGET_AVX2 void mk_f64_f32_vcvt_ukernel__avx2_x4(size_t n, const void* input, void* output) {
    const double* in = (const double*)input; /* input: n float64 */
    float* out = (float*)output;             /* output: n float32 (may alias input) */
    for (; n >= 4; n -= 4, in += 4, out += 4) {
        _mm_storeu_ps(out, _mm256_cvtpd_ps(_mm256_loadu_pd(in)));
    }
    for (; n != 0; n--) *out++ = (float)*in++;
}

#endif /* MK_CAST_X86 */
