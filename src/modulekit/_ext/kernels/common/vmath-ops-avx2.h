/* The VM_* / VD_* vector vocabulary on __m256 / __m256d (AVX2 + FMA; see common/vmath.inc.h):
 * vmath-avx2.h includes it to instantiate the math; a kernel template's instantiation
 * (norm/f32-norm-avx2.c, ...) includes it before the template, and common/vmath-undef.h
 * after. No include guard. Include in x86 kernel files only (MK_X86). */
#include "common/vmath-avx2.h" /* the helpers (and the math: mk_exp_f32x8, ...) */
#if MK_X86

#define VM_TARGET MK_TARGET_AVX2
#define VM_ATTR MK_TARGET_AVX2 static inline
#define VM_T __m256
#define VM_FN(name) mk_##name##_f32x8
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
#define VM_N 8
#define VM_M __m256i
#define VM_ZERO() _mm256_setzero_ps()
#define VM_LOADU(p) _mm256_loadu_ps(p)
#define VM_STOREU(p, v) _mm256_storeu_ps((p), (v))
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

#endif /* MK_X86 */
