/* float64 -> float16, AVX2 level, 4 per step: vcvtpd2ps, corrected to round-to-odd
 * (f64-rto-avx2.h), then F16C vcvtps2ph: one correct rounding, as NumPy's direct double ->
 * half conversion. A step holding a NaN goes through the scalar reference (NumPy's NaN rule). */
#include "cast.h"
#include "f64-rto-avx2.h"

#if MK_CAST_X86
#include "common/half.h"

static inline MK_TARGET_AVX2 __m128i mk_rto_to_f16(__m128i t) {
    return _mm_cvtps_ph(_mm_castsi128_ps(t), _MM_FROUND_TO_NEAREST_INT);
}

MK_DEFINE_F64_X16_VCVT_AVX2(mk_f64_f16_vcvt_ukernel__f16c_x4, mk_f64_to_f16_bits, mk_rto_to_f16)

#endif /* MK_CAST_X86 */
