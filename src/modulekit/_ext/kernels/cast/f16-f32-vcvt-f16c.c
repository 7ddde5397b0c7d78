/* float16 -> float32, AVX2 level: F16C vcvtph2ps, 8 per step. NaN lanes are rebuilt with
 * their payload unquieted, as NumPy gives. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>
#include "common/half.h"

static inline MK_TARGET_AVX2 __m256 mk_cvt8(__m128i h) {
    __m256 v = _mm256_cvtph_ps(h);
    const __m256i u = _mm256_cvtepu16_epi32(h);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fff)),
                                           _mm256_set1_epi32(0x7c00));
    if (_mm256_movemask_epi8(nan)) {
        const __m256i r = _mm256_or_si256(
            _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x8000)), 16),
                            _mm256_set1_epi32(0x7f800000)),
            _mm256_slli_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x3ff)), 13));
        v = _mm256_blendv_ps(v, _mm256_castsi256_ps(r), _mm256_castsi256_ps(nan));
    }
    return v;
}

MK_TARGET_AVX2 void mk_f16_f32_vcvt_ukernel__f16c_x8(size_t n, const void* input, void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n float16 */
    float* out = (float*)output;                 /* output: n float32 */
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        _mm256_storeu_ps(out, mk_cvt8(_mm_loadu_si128((const __m128i*)in)));
    }
    for (; n != 0; n--) *out++ = mk_f32_from_bits(mk_f16_to_f32_bits(*in++));
}

/* One 64-byte output line (16 elements), streamed (see MK_DEFINE_VCVT_NT in cast.h). */
static inline MK_TARGET_AVX2 void mk_stream_line(const uint16_t* in, float* out) {
    _mm256_stream_ps(out, mk_cvt8(_mm_loadu_si128((const __m128i*)in)));
    _mm256_stream_ps(out + 8, mk_cvt8(_mm_loadu_si128((const __m128i*)(in + 8))));
}
MK_DEFINE_VCVT_NT(mk_f16_f32_vcvt_ukernel__f16c_nt_x16, MK_TARGET_AVX2,
                  uint16_t, float, 16, mk_f16_f32_vcvt_ukernel__f16c_x8, mk_stream_line)

#endif /* MK_CAST_X86 */
