/* float16 -> float64, AVX2 level: F16C vcvtph2ps then vcvtps2pd (both exact), 8 per step.
 * A step holding a NaN goes through the scalar reference (payload kept, as NumPy). */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>
#include "common/half.h"

MK_TARGET_AVX2 void mk_f16_f64_vcvt_ukernel__f16c_x8(size_t n, const void* input, void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n float16 */
    double* out = (double*)output;               /* output: n float64 */
    const __m128i abs16 = _mm_set1_epi16(0x7fff);
    const __m128i inf16 = _mm_set1_epi16(0x7c00);
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i*)in);
        if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, abs16), inf16))) {
            for (int k = 0; k < 8; k++) out[k] = mk_f16_to_f64(in[k]);
            continue;
        }
        const __m256 f = _mm256_cvtph_ps(h);
        _mm256_storeu_pd(out, _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
        _mm256_storeu_pd(out + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
    }
    for (; n != 0; n--) *out++ = mk_f16_to_f64(*in++);
}

#endif /* MK_CAST_X86 */
