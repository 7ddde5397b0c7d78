/* common/vmath.inc.h on 16 float32 lanes (AVX-512 F/BW/VL/DQ): mk_exp_f32x16, ...,
 * mk_act_f32x16(v, act, lo, hi). Include in x86 kernel files only (MK_X86); the callers carry
 * MK_TARGET_AVX512. The vocabulary itself is common/vmath-ops-avx512.h (a kernel template's
 * instantiation includes that one). */
#ifndef MK_COMMON_VMATH_AVX512_H
#define MK_COMMON_VMATH_AVX512_H

#include "isa.h"
#if MK_X86
#include <immintrin.h>
#include <stddef.h>

#include "common/act.h"

#define MK_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

/* lanes [0, k) of 16 set (k >= 16: all) */
static inline __mmask16 mk_vm16_tail(size_t k) {
    return k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << k) - 1u);
}

/* the lanes' sum in double (each lane widened exactly), halves folded: lane i + lane i + 8,
 * then as _mm512_reduce_add_pd */
MK_TARGET_AVX512 static inline double mk_vm16_hsum_f64(__m512 v) {
    const __m512d d = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)),
                                    _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)));
    return _mm512_reduce_add_pd(d);
}

#include "common/vmath-ops-avx512.h"
#include "common/vmath.inc.h"
#include "common/vmath-undef.h"

#endif /* MK_X86 */
#endif /* MK_COMMON_VMATH_AVX512_H */
