/* float32 -> float64, AVX2: vcvtps2pd (exact; NaNs quieted, as NumPy's C cast), 4 per step. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>

MK_TARGET_AVX2 void mk_f32_f64_vcvt_ukernel__avx2_x4(size_t n, const void* input, void* output) {
    const float* in = (const float*)input; /* input: n float32 */
    double* out = (double*)output;         /* output: n float64 */
    for (; n >= 4; n -= 4, in += 4, out += 4) {
        _mm256_storeu_pd(out, _mm256_cvtps_pd(_mm_loadu_ps(in)));
    }
    for (; n != 0; n--) *out++ = (double)*in++;
}

#endif /* MK_CAST_X86 */
