/* The vector vocabulary of common/vmath.inc.h (listed there) on 8 float32 lanes (__m256) and
 * 4 float64 lanes (__m256d), AVX2 + FMA. For x86 kernel files only (MK_X86). No include
 * guard: each inclusion defines the vocabulary again, and common/vmath-undef.h ends it. */
#ifndef MK_COMMON_VOPS_AVX2_FNS
#define MK_COMMON_VOPS_AVX2_FNS
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#define MK_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))

/* p * 2^n in two exact power-of-two steps (a subnormal result rounded once, by the second) */
MK_TARGET_AVX2 static inline __m256 mk_vm8_scale2(__m256 p, __m256 n) {
    const __m256i k = _mm256_cvtps_epi32(n);
    const __m256i k1 = _mm256_srai_epi32(k, 1), k2 = _mm256_sub_epi32(k, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* the same for doubles: n in [-2044, 2046] (+inf past 1024) */
MK_TARGET_AVX2 static inline __m256d mk_vd4_scale2(__m256d p, __m256d n) {
    const __m128i k = _mm256_cvtpd_epi32(n);
    const __m128i k1 = _mm_srai_epi32(k, 1), k2 = _mm_sub_epi32(k, k1);
    const __m256i bias = _mm256_set1_epi64x(1023);
    const __m256d s1 = _mm256_castsi256_pd(
        _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(k1), bias), 52));
    const __m256d s2 = _mm256_castsi256_pd(
        _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(k2), bias), 52));
    return _mm256_mul_pd(_mm256_mul_pd(p, s1), s2);
}

/* lanes [0, k) of 8 set (k >= 8: all): one load from a window of the table (cheaper than a
 * broadcast and compare in the loops that mask every vector, softmax's) */
MK_TARGET_AVX2 static inline __m256i mk_vm8_tail(size_t k) {
    static const int32_t bits[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(bits + 8 - (k < 8 ? k : 8)));
}

/* the lanes' sum, halves folded: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) */
MK_TARGET_AVX2 static inline float mk_vm8_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* the lanes' maximum, halves folded as mk_vm8_hsum */
MK_TARGET_AVX2 static inline float mk_vm8_hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* the lanes' sum in double (each lane widened exactly), halves folded as mk_vm8_hsum */
MK_TARGET_AVX2 static inline double mk_vm8_hsum_f64(__m256 v) {
    const __m256d d = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                                    _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    const __m128d e = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
    return _mm_cvtsd_f64(_mm_add_sd(e, _mm_unpackhi_pd(e, e)));
}

#endif

#define VM_TARGET MK_TARGET_AVX2
#define VM_ATTR MK_TARGET_AVX2 static inline
#define VM_T __m256
#define VM_ELEM float
#define VM_W 8
#define VM_FN(name) mk_##name##_f32x8
#define VM_LOAD(p) _mm256_loadu_ps(p)
#define VM_STORE(p, v) _mm256_storeu_ps((p), (v))
#define VM_LOADN(p, n) _mm256_maskload_ps((p), mk_vm8_tail(n))
#define VM_STOREN(p, v, n) _mm256_maskstore_ps((p), mk_vm8_tail(n), (v))
#define VM_SET1(c) _mm256_set1_ps(c)
#define VM_ADD _mm256_add_ps
#define VM_SUB _mm256_sub_ps
#define VM_MUL _mm256_mul_ps
#define VM_DIV _mm256_div_ps
#define VM_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define VM_FNMA(a, b, c) _mm256_fnmadd_ps((a), (b), (c))
#define VM_FMS(a, b, c) _mm256_fmsub_ps((a), (b), (c))
#define VM_MAX _mm256_max_ps
#define VM_MIN _mm256_min_ps
#define VM_ABS(v) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), (v))
#define VM_ROUND(v) _mm256_round_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VM_SCALE2(p, n) mk_vm8_scale2((p), (n))
#define VM_SEL_LT(a, b, x, y) _mm256_blendv_ps((y), (x), _mm256_cmp_ps((a), (b), _CMP_LT_OQ))
#define VM_SEL_GE(a, b, x, y) _mm256_blendv_ps((y), (x), _mm256_cmp_ps((a), (b), _CMP_GE_OQ))
#define VM_SIGN_OF(v, s) _mm256_or_ps((v), _mm256_and_ps((s), _mm256_set1_ps(-0.0f)))
#define VD_T __m256d
#define VD_FN(name) mk_##name##_f64x4
#define VD_SET1(c) _mm256_set1_pd(c)
#define VD_ADD _mm256_add_pd
#define VD_SUB _mm256_sub_pd
#define VD_MUL _mm256_mul_pd
#define VD_DIV _mm256_div_pd
#define VD_FMA(a, b, c) _mm256_fmadd_pd((a), (b), (c))
#define VD_FNMA(a, b, c) _mm256_fnmadd_pd((a), (b), (c))
#define VD_MAX _mm256_max_pd
#define VD_MIN _mm256_min_pd
#define VD_ABS(v) _mm256_andnot_pd(_mm256_set1_pd(-0.0), (v))
#define VD_ROUND(v) _mm256_round_pd((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VD_SCALE2(p, n) mk_vd4_scale2((p), (n))
#define VD_SEL_LT(a, b, x, y) _mm256_blendv_pd((y), (x), _mm256_cmp_pd((a), (b), _CMP_LT_OQ))
#define VD_SIGN_OF(v, s) _mm256_or_pd((v), _mm256_and_pd((s), _mm256_set1_pd(-0.0)))
#define VM_WIDEN(x, lo, hi)                                              \
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x)),       \
                  hi = _mm256_cvtps_pd(_mm256_extractf128_ps((x), 1))
#define VM_NARROW(lo, hi) \
    _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1)
#define VM_M __m256i
#define VM_ZERO() _mm256_setzero_ps()
#define VM_STREAM(p, v) _mm256_stream_ps((p), (v))
#define VM_TAIL(k) mk_vm8_tail(k)
#define VM_MASKLOAD(p, m) _mm256_maskload_ps((p), (m))
#define VM_MASKSTORE(p, m, v) _mm256_maskstore_ps((p), (m), (v))
#define VM_MASKZ(m, v) _mm256_and_ps((v), _mm256_castsi256_ps(m))
#define VM_MASK_MAX(acc, m, v) \
    _mm256_max_ps((acc), _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), (v), _mm256_castsi256_ps(m)))
#define VM_HSUM(v) mk_vm8_hsum(v)
#define VM_HMAX(v) mk_vm8_hmax(v)
#define VM_HSUM_F64(v) mk_vm8_hsum_f64(v)
#define VM_GATHER(base, idx) \
    _mm256_i32gather_ps((base), _mm256_loadu_si256((const __m256i *)(idx)), 4)
#define VM_MASKGATHER(base, idx, m)                                                          \
    _mm256_mask_i32gather_ps(_mm256_setzero_ps(), (base), _mm256_maskload_epi32((idx), (m)), \
                             _mm256_castsi256_ps(m), 4)

