/* float64 -> bfloat16, AVX2, 4 per step: vcvtpd2ps corrected to round-to-odd
 * (f64-rto-avx2.h), then the software round-to-nearest-even to bfloat16: one correct
 * rounding, as ml_dtypes. A step holding a NaN goes through the scalar reference. */
#include "cast.h"
#include "f64-rto-avx2.h"

#if MK_CAST_X86
#include "common/half.h"

/* float32 bits (round-to-odd) -> bfloat16, round-to-nearest-even, in the low 64 bits */
static inline MK_TARGET_AVX2 __m128i mk_rto_to_bf16(__m128i t) {
    const __m128i lsb = _mm_and_si128(_mm_srli_epi32(t, 16), _mm_set1_epi32(1));
    const __m128i r = _mm_srli_epi32(_mm_add_epi32(t, _mm_add_epi32(_mm_set1_epi32(0x7fff), lsb)), 16);
    return _mm_packus_epi32(r, r);
}

MK_DEFINE_F64_X16_VCVT_AVX2(mk_f64_bf16_vcvt_ukernel__avx2_x4, mk_f64_to_bf16_bits, mk_rto_to_bf16)

#endif /* MK_CAST_X86 */
