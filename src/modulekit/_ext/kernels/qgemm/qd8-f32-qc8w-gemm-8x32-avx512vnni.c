/* AVX512-VNNI qd8-f32-qc8w kernels (see qgemm.h): the row quantizer, 16 floats a step, and
 * the 8x32 GEMM tile: per group of 4 k, two 64-byte weight loads and, per row, one broadcast
 * of the row's 4 bytes and two vpdpbusd (u8 x s8, summed in fours into int32, exact). The
 * epilogue (qgemm-epilogue-avx512.h) is the portable one's arithmetic, so the results are
 * bit-identical to mk_qd8_f32_qc8w_gemm_4x16__scalar. */
#include "isa.h"
#if MK_X86
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "qgemm.h"
#include "qgemm-epilogue-avx512.h"

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,avx512vnni")))
#define NR 32

TARGET float mk_qd8_quantize__avx512vnni(size_t n, size_t kp, const float *x, uint8_t *q) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 vmax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_and_ps(_mm512_loadu_ps(x + i), absmask);
        bad |= _mm512_cmp_ps_mask(v, _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
        vmax = _mm512_max_ps(v, vmax);
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_and_ps(_mm512_maskz_loadu_ps(m, x + i), absmask);
        bad |= _mm512_mask_cmp_ps_mask(m, v, _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
        vmax = _mm512_max_ps(v, vmax);
    }
    if (bad) return NAN;
    const float amax = _mm512_reduce_max_ps(vmax);
    const float inv = 127.0f / amax;
    if (!(inv <= FLT_MAX)) {
        memset(q, 128, kp);
        return 1.0f;
    }
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    const __m512i off = _mm512_set1_epi32(128);
    for (i = 0; i + 16 <= n; i += 16) {
        __m512i r = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv));
        r = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(r, lo), hi), off);
        _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtepi32_epi8(r));
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512i r = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vinv));
        r = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(r, lo), hi), off);
        _mm_mask_storeu_epi8(q + i, m, _mm512_cvtepi32_epi8(r));
    }
    for (i = n; i < kp; i++) q[i] = 128;
    return amax / 127.0f;
}

/* acc += the 4-byte dot products of u8 av and s8 w per int32 lane. In inline assembly: GCC 12
 * copies the accumulator of the _mm512_dpbusd_epi32 intrinsic to another register and back
 * on every call (16 extra moves per k group in this tile). */
#define DPBUSD(acc, av, w) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(av), "v"(w))

/* One accumulator pair per row, as named variables (GCC shuffles an array of vectors between
 * registers every iteration); rows past ROWS fold away at compile time. */
#define ROW_DECL(r)                                                                           \
    __m512i acc##r##a = _mm512_setzero_si512(), acc##r##b = _mm512_setzero_si512();           \
    const uint8_t *a##r = a + (ROWS > r ? r : 0) * lda;
#define ROW_STEP(r)                                                                           \
    if (ROWS > r) {                                                                           \
        int32_t four;                                                                         \
        memcpy(&four, a##r + 4 * g, 4);                                                       \
        const __m512i av = _mm512_set1_epi32(four);                                           \
        DPBUSD(acc##r##a, av, w0);                                                            \
        DPBUSD(acc##r##b, av, w1);                                                            \
    }
#define ROW_STORE(r)                                                                          \
    if (ROWS > r)                                                                             \
        mk_qepi_row(acc##r##a, acc##r##b, ascale[r * ep->ascale_step], &pc,                   \
                    res != NULL ? res + r * ep->ldr : NULL, (char *)c + r * ldc * width, ep);

TARGET static inline __attribute__((always_inline)) void
tile(const size_t ROWS, size_t nc, size_t kp, const uint8_t *a, size_t lda,
     const float *ascale, const void *panel, void *c, size_t ldc, const uint8_t *res,
     const mk_qgemm_epilogue *ep) {
    const int8_t *w = (const int8_t *)panel + NR * 12;
    ROW_DECL(0) ROW_DECL(1) ROW_DECL(2) ROW_DECL(3)
    ROW_DECL(4) ROW_DECL(5) ROW_DECL(6) ROW_DECL(7)
    for (size_t g = 0; g < kp / 4; g++) {
        const __m512i w0 = _mm512_load_si512((const void *)(w + g * 4 * NR));
        const __m512i w1 = _mm512_load_si512((const void *)(w + g * 4 * NR + 64));
        ROW_STEP(0) ROW_STEP(1) ROW_STEP(2) ROW_STEP(3)
        ROW_STEP(4) ROW_STEP(5) ROW_STEP(6) ROW_STEP(7)
    }
    const mk_qepi_panel pc = mk_qepi_load(panel, NR, nc, ascale, ep);
    const size_t width = ep->out_u8 ? 1 : sizeof(float);
    ROW_STORE(0) ROW_STORE(1) ROW_STORE(2) ROW_STORE(3)
    ROW_STORE(4) ROW_STORE(5) ROW_STORE(6) ROW_STORE(7)
}

#define ROWS_FN(R)                                                                            \
    TARGET static void tile_##R(size_t nc, size_t kp, const uint8_t *a, size_t lda,          \
                                const float *ascale, const void *panel, void *c, size_t ldc,  \
                                const uint8_t *res, const mk_qgemm_epilogue *ep) {            \
        tile(R, nc, kp, a, lda, ascale, panel, c, ldc, res, ep);                              \
    }
ROWS_FN(1) ROWS_FN(2) ROWS_FN(3) ROWS_FN(4) ROWS_FN(5) ROWS_FN(6) ROWS_FN(7) ROWS_FN(8)

void mk_qd8_f32_qc8w_gemm_8x32__avx512vnni(size_t rows, size_t nc, size_t kp, const uint8_t *a,
                                            size_t lda, const float *ascale, const void *panel,
                                            void *c, size_t ldc, const uint8_t *res,
                                            const mk_qgemm_epilogue *ep) {
    switch (rows) {
    case 1: tile_1(nc, kp, a, lda, ascale, panel, c, ldc, res, ep); break;
    case 2: tile_2(nc, kp, a, lda, ascale, panel, c, ldc, res, ep); break;
    case 3: tile_3(nc, kp, a, lda, ascale, panel, c, ldc, res, ep); break;
    case 4: tile_4(nc, kp, a, lda, ascale, panel, c, ldc, res, ep); break;
    case 5: tile_5(nc, kp, a, lda, ascale, panel, c, ldc, res, ep); break;
    case 6: tile_6(nc, kp, a, lda, ascale, panel, c, ldc, res, ep); break;
    case 7: tile_7(nc, kp, a, lda, ascale, panel, c, ldc, res, ep); break;
    default: tile_8(nc, kp, a, lda, ascale, panel, c, ldc, res, ep); break;
    }
}
#endif /* MK_X86 */
