/* float16 -> float32, AVX2 level: F16C vcvtph2ps, 8 per step. NaN lanes are rebuilt with
 * their payload unquieted, as NumPy gives. */
#include <immintrin.h>

#include "cast.h"
#include "cast-scalar.h"

MK_TARGET_AVX2 void mk_f16_f32_vcvt_ukernel__f16c_x8(size_t n, const void* input, void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n float16 */
    float* out = (float*)output;                 /* output: n float32 */
    const __m256i abs16 = _mm256_set1_epi32(0x7fff);
    const __m256i inf16 = _mm256_set1_epi32(0x7c00);
    const __m256i sign16 = _mm256_set1_epi32(0x8000);
    const __m256i payload16 = _mm256_set1_epi32(0x3ff);
    const __m256i exp32 = _mm256_set1_epi32(0x7f800000);
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i*)in);
        __m256 v = _mm256_cvtph_ps(h);
        const __m256i u = _mm256_cvtepu16_epi32(h);
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs16), inf16);
        if (_mm256_movemask_epi8(nan)) {
            const __m256i r = _mm256_or_si256(
                _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(u, sign16), 16), exp32),
                _mm256_slli_epi32(_mm256_and_si256(u, payload16), 13));
            v = _mm256_blendv_ps(v, _mm256_castsi256_ps(r), _mm256_castsi256_ps(nan));
        }
        _mm256_storeu_ps(out, v);
    }
    for (; n != 0; n--) *out++ = mk_f32_from_bits(mk_f16_to_f32_bits(*in++));
}
