/* The vector vocabulary of common/vmath.inc.h (listed there) on 16 float32 lanes (__m512) and
 * 8 float64 lanes (__m512d), AVX-512 F/BW/VL/DQ. For x86 kernel files only (MK_X86). No
 * include guard: each inclusion defines the vocabulary again, and common/vmath-undef.h ends
 * it. */
#ifndef MK_COMMON_VOPS_AVX512_FNS
#define MK_COMMON_VOPS_AVX512_FNS
#include <immintrin.h>
#include <stddef.h>

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
#endif

#define VM_TARGET MK_TARGET_AVX512
#define VM_ATTR MK_TARGET_AVX512 static inline
#define VM_T __m512
#define VM_ELEM float
#define VM_W 16
#define VM_FN(name) mk_##name##_f32x16
#define VM_LOAD(p) _mm512_loadu_ps(p)
#define VM_STORE(p, v) _mm512_storeu_ps((p), (v))
#define VM_LOADN(p, n) _mm512_maskz_loadu_ps((__mmask16)((1u << (n)) - 1u), (p))
#define VM_STOREN(p, v, n) _mm512_mask_storeu_ps((p), (__mmask16)((1u << (n)) - 1u), (v))
#define VM_SET1(c) _mm512_set1_ps(c)
#define VM_ADD _mm512_add_ps
#define VM_SUB _mm512_sub_ps
#define VM_MUL _mm512_mul_ps
#define VM_DIV _mm512_div_ps
#define VM_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define VM_FNMA(a, b, c) _mm512_fnmadd_ps((a), (b), (c))
#define VM_FMS(a, b, c) _mm512_fmsub_ps((a), (b), (c))
#define VM_MAX _mm512_max_ps
#define VM_MIN _mm512_min_ps
#define VM_ABS(v) _mm512_abs_ps(v)
#define VM_ROUND(v) _mm512_roundscale_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VM_SCALE2(p, n) _mm512_scalef_ps((p), (n)) /* p * 2^n, one rounding */
#define VM_SEL_LT(a, b, x, y) \
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask((a), (b), _CMP_LT_OQ), (y), (x))
#define VM_SEL_GE(a, b, x, y) \
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask((a), (b), _CMP_GE_OQ), (y), (x))
#define VM_SIGN_OF(v, s) _mm512_or_ps((v), _mm512_and_ps((s), _mm512_set1_ps(-0.0f)))
#define VD_T __m512d
#define VD_FN(name) mk_##name##_f64x8
#define VD_SET1(c) _mm512_set1_pd(c)
#define VD_ADD _mm512_add_pd
#define VD_SUB _mm512_sub_pd
#define VD_MUL _mm512_mul_pd
#define VD_DIV _mm512_div_pd
#define VD_FMA(a, b, c) _mm512_fmadd_pd((a), (b), (c))
#define VD_FNMA(a, b, c) _mm512_fnmadd_pd((a), (b), (c))
#define VD_MAX _mm512_max_pd
#define VD_MIN _mm512_min_pd
#define VD_ABS(v) _mm512_abs_pd(v)
#define VD_ROUND(v) _mm512_roundscale_pd((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VD_SCALE2(p, n) _mm512_scalef_pd((p), (n))
#define VD_SEL_LT(a, b, x, y) \
    _mm512_mask_blend_pd(_mm512_cmp_pd_mask((a), (b), _CMP_LT_OQ), (y), (x))
#define VD_SIGN_OF(v, s) _mm512_or_pd((v), _mm512_and_pd((s), _mm512_set1_pd(-0.0)))
#define VM_WIDEN(x, lo, hi)                                                                \
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x)),                         \
                  hi = _mm512_cvtps_pd(                                                    \
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))
#define VM_NARROW(lo, hi) \
    _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1)
#define VM_M __mmask16
#define VM_ZERO() _mm512_setzero_ps()
#define VM_STREAM(p, v) _mm512_stream_ps((p), (v))
#define VM_TAIL(k) mk_vm16_tail(k)
#define VM_MASKLOAD(p, m) _mm512_maskz_loadu_ps((m), (p))
#define VM_MASKSTORE(p, m, v) _mm512_mask_storeu_ps((p), (m), (v))
#define VM_MASKZ(m, v) _mm512_maskz_mov_ps((m), (v))
#define VM_MASK_MAX(acc, m, v) _mm512_mask_max_ps((acc), (m), (acc), (v))
#define VM_HSUM(v) _mm512_reduce_add_ps(v)
#define VM_HMAX(v) _mm512_reduce_max_ps(v)
#define VM_HSUM_F64(v) mk_vm16_hsum_f64(v)
#define VM_GATHER(base, idx) _mm512_i32gather_ps(_mm512_loadu_si512(idx), (base), 4)
#define VM_MASKGATHER(base, idx, m)                                                      \
    _mm512_mask_i32gather_ps(_mm512_setzero_ps(), (m), _mm512_maskz_loadu_epi32((m), (idx)), \
                             (base), 4)

