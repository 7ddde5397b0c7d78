/* The phase copy's rows, AVX-512 (f32-conv-driver.c): the stride-2 split and the stride-1 row.
 *
 * A convolution with column stride 2 reads its input through two column-phase sub-images:
 * r0[j] = padded column 2j, r1[j] = padded column 2j + 1 (padded column p = input column
 * p - pl, padv outside the row). Per 16 outputs of each this is two loads of 32 consecutive
 * input columns (masked to the columns inside the row, padv elsewhere) and two permutes to the
 * even and odd lanes: the scalar loop it replaces (ResNet's stem, pl = 3, went through a
 * per-phase strided gather) was 5% of the 7x7 stem's time on one thread and 12% of
 * MobileNetV2's first 3x3. A copy, so the phase image is the same bits either way. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "conv.h"
#include "conv-simd.h"

/* Outputs [j, j + 16) (clipped to Wq) of both phases, reading only the columns inside the row
 * (padv elsewhere: masked-off lanes are not read, their addresses may lie outside the row). */
MK_T512 static inline void split_step(const float *x, int W, int pl, float *r0, float *r1,
                                      int Wq, __m512 pv, __m512i even, __m512i odd, int j) {
    const int c0 = 2 * j - pl; /* input column of the first of the 32 padded columns */
    const __mmask16 m0 = mk_lanes16(-c0, W - c0), m1 = mk_lanes16(-c0 - 16, W - c0 - 16);
    const __m512 v0 = _mm512_mask_loadu_ps(pv, m0, x + c0);
    const __m512 v1 = _mm512_mask_loadu_ps(pv, m1, x + c0 + 16);
    const __mmask16 st = mk_lanes16(0, Wq - j);
    _mm512_mask_storeu_ps(r0 + j, st, _mm512_permutex2var_ps(v0, even, v1));
    _mm512_mask_storeu_ps(r1 + j, st, _mm512_permutex2var_ps(v0, odd, v1));
}

/*   x     : input row, W floats, unit stride                      input
 *   pl    : left padding (padded column p is input column p - pl)
 *   r0, r1: the even and odd padded columns, Wq floats each       output
 *   padv  : value outside the row
 * Steps whose 32 columns lie inside the row use plain loads and stores (masked ones only at
 * the row's ends: the all-masked version was slower on rows read from memory). */
MK_T512 void mk_f32_phase_row_s2_avx512(const float *x, int W, int pl, float *r0, float *r1,
                                        int Wq, float padv) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const __m512 pv = _mm512_set1_ps(padv);
    int j = 0;
    for (; j < Wq && 2 * j < pl; j += 16) split_step(x, W, pl, r0, r1, Wq, pv, even, odd, j);
    for (; j + 16 <= Wq && 2 * j - pl + 32 <= W; j += 16) {
        const __m512 v0 = _mm512_loadu_ps(x + 2 * j - pl);
        const __m512 v1 = _mm512_loadu_ps(x + 2 * j - pl + 16);
        _mm512_storeu_ps(r0 + j, _mm512_permutex2var_ps(v0, even, v1));
        _mm512_storeu_ps(r1 + j, _mm512_permutex2var_ps(v0, odd, v1));
    }
    for (; j < Wq; j += 16) split_step(x, W, pl, r0, r1, Wq, pv, even, odd, j);
}

/* One input row into its padded phase row (column stride 1): row[j] = padded column j, Wq
 * of them, 16 at a time, masked at the row's ends (the per-row memcpy and the padding's two
 * memsets it replaces were 5% of a DCGAN transposed convolution's 16-column rows). */
MK_T512 void mk_f32_phase_row_s1_avx512(const float *x, int W, int pl, float *row, int Wq,
                                        float padv) {
    const __m512 pv = _mm512_set1_ps(padv);
    for (int j = 0; j < Wq; j += 16) {
        const int c0 = j - pl; /* input column of padded column j */
        const __mmask16 m = mk_lanes16(-c0, W - c0), st = mk_lanes16(0, Wq - j);
        if (m == 0xffff && st == 0xffff)
            _mm512_storeu_ps(row + j, _mm512_loadu_ps(x + c0));
        else
            _mm512_mask_storeu_ps(row + j, st, _mm512_mask_loadu_ps(pv, m, x + c0));
    }
}

/* The inverse for a transposed convolution's phases (mk_conv2d_shifted_f32 placing its
 * blocks): dst[l * step] = src[l], l < n; step 2 (the stride-2 phases) by two permutes and
 * masked stores a 16 values, other steps by a scatter. */
MK_T512 void mk_f32_place_row_avx512(const float *src, int n, float *dst, int step) {
    const __m512i lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                             11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(step));
    for (int l = 0; l < n; l += 16) {
        const __mmask16 m = mk_lanes16(0, n - l);
        const __m512 v = _mm512_maskz_loadu_ps(m, src + l);
        float *d = dst + (ptrdiff_t)l * step;
        if (step == 2) {
            const __mmask16 even = 0x5555;
            _mm512_mask_storeu_ps(d, even & mk_lanes16(0, 2 * (n - l)),
                                  _mm512_permutexvar_ps(lo, v));
            _mm512_mask_storeu_ps(d + 16, even & mk_lanes16(0, 2 * (n - l) - 16),
                                  _mm512_permutexvar_ps(hi, v));
        } else {
            _mm512_mask_i32scatter_ps(d, m, idx, v, 4);
        }
    }
}

#endif /* MK_X86 */
