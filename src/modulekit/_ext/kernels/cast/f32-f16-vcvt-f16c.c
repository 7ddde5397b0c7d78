/* float32 -> float16, AVX2 level: F16C vcvtps2ph (round-to-nearest-even), 8 per step.
 * The hardware quiets NaNs; NumPy keeps their payload, so NaN lanes are rebuilt. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>
#include "common/half.h"

static inline MK_TARGET_AVX2 __m128i mk_cvt8(__m256 v) {
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    if (_mm256_movemask_ps(nan)) {
        /* sign | 0x7c00 | top 10 payload bits, a zero payload made 1 */
        const __m256i u = _mm256_castps_si256(v);
        __m256i p = _mm256_and_si256(_mm256_srli_epi32(u, 13), _mm256_set1_epi32(0x3ff));
        p = _mm256_or_si256(p, _mm256_and_si256(_mm256_cmpeq_epi32(p, _mm256_setzero_si256()),
                                                _mm256_set1_epi32(1)));
        const __m256i r = _mm256_or_si256(
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)),
                            _mm256_set1_epi32(0x7c00)),
            p);
        const __m128i r16 =
            _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        const __m256i m = _mm256_castps_si256(nan);
        const __m128i m16 =
            _mm_packs_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
        h = _mm_blendv_epi8(h, r16, m16);
    }
    return h;
}

MK_TARGET_AVX2 void mk_f32_f16_vcvt_ukernel__f16c_x8(size_t n, const void* input, void* output) {
    const float* in = (const float*)input; /* input: n float32 */
    uint16_t* out = (uint16_t*)output;     /* output: n float16 (may alias input) */
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        _mm_storeu_si128((__m128i*)out, mk_cvt8(_mm256_loadu_ps(in)));
    }
    for (; n != 0; n--) *out++ = mk_f32_to_f16_bits(mk_f32_bits(*in++));
}

/* One 64-byte output line (32 elements), streamed (see MK_DEFINE_VCVT_NT in cast.h). */
static inline MK_TARGET_AVX2 void mk_stream_line(const float* in, uint16_t* out) {
    for (int k = 0; k < 4; k++) {
        _mm_stream_si128((__m128i*)out + k, mk_cvt8(_mm256_loadu_ps(in + 8 * k)));
    }
}
MK_DEFINE_VCVT_NT(mk_f32_f16_vcvt_ukernel__f16c_nt_x32, MK_TARGET_AVX2,
                  float, uint16_t, 32, mk_f32_f16_vcvt_ukernel__f16c_x8, mk_stream_line)

#endif /* MK_CAST_X86 */
