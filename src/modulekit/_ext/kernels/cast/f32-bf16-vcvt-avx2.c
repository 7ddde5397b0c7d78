/* float32 -> bfloat16, AVX2: software round-to-nearest-even (u + 0x7fff + lsb) >> 16,
 * NaNs made the canonical quiet NaN with their sign (ml_dtypes), 8 per step. Not the
 * hardware vcvtneps2bf16, which flushes subnormal inputs to zero. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>
#include "common/half.h"

static inline MK_TARGET_AVX2 __m128i mk_cvt8(__m256i u) {
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i canon =
        _mm256_or_si256(_mm256_and_si256(hi, _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x7fc0));
    r = _mm256_blendv_epi8(r, canon, nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

MK_TARGET_AVX2 void mk_f32_bf16_vcvt_ukernel__avx2_x8(size_t n, const void* input, void* output) {
    const uint32_t* in = (const uint32_t*)input; /* input: n float32 */
    uint16_t* out = (uint16_t*)output;           /* output: n bfloat16 (may alias input) */
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        _mm_storeu_si128((__m128i*)out, mk_cvt8(_mm256_loadu_si256((const __m256i*)in)));
    }
    for (; n != 0; n--) *out++ = mk_f32_to_bf16_bits(*in++);
}

/* One 64-byte output line (32 elements), streamed (see MK_DEFINE_VCVT_NT in cast.h). */
static inline MK_TARGET_AVX2 void mk_stream_line(const uint32_t* in, uint16_t* out) {
    for (int k = 0; k < 4; k++) {
        _mm_stream_si128((__m128i*)out + k,
                         mk_cvt8(_mm256_loadu_si256((const __m256i*)(in + 8 * k))));
    }
}
MK_DEFINE_VCVT_NT(mk_f32_bf16_vcvt_ukernel__avx2_nt_x32, MK_TARGET_AVX2,
                  uint32_t, uint16_t, 32, mk_f32_bf16_vcvt_ukernel__avx2_x8, mk_stream_line)

#endif /* MK_CAST_X86 */
