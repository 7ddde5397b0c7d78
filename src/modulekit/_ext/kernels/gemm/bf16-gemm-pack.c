/* Packing for the bfloat16-compute GEMM (layouts in gemm.h):
 *   mk_bf16_pack_w_pairs: one panel's weights (already bfloat16) into VNNI pairs, K padded
 *     with zeros to a multiple of 32; shared by the AVX512-BF16 and AMX configurations.
 *   mk_bf16_pack_a_pairs__avx512bf16: float32 activations -> bfloat16 (round to nearest even,
 *     vcvtne2ps2bf16) in MR-row micro-panels of pairs: 32-bit word (k / 2) * MR + i holds
 *     rows i's elements k, k + 1 (the vdpbf16ps kernel broadcasts one word per row).
 *   mk_bf16_pack_a_tiles__amx: float32 -> bfloat16 in MR-row micro-panels of AMX A tiles:
 *     element (i, k) at ((k / 32) * MR + i) * 32 + k % 32 (rows of 64 bytes, one tile per 16
 *     rows and 32 k).
 * The activation micro-panels sit ceil(kc / 32) * 32 * MR elements apart, as the driver
 * addresses them (asize = 2, kpad = 32 in gemm-config.c). vcvtne2ps2bf16 rounds to nearest
 * even and quiets NaN; it flushes float32 denormals (|x| < 2^-126) to zero. */
#include <string.h>

#include "gemm.h"

#define MK_BF16_KPAD 32

static size_t mk_rup(size_t x, size_t m) { return (x + m - 1) / m * m; }

void mk_bf16_pack_w_pairs(size_t ncols, size_t k, size_t nr, const void *b_, ptrdiff_t rs,
                          ptrdiff_t cs, void *w_) {
    const uint16_t *b = (const uint16_t *)b_; /* in: element (kk, j) at b[kk * rs + j * cs] */
    uint16_t *w = (uint16_t *)w_;             /* out: kp x nr x 2 */
    const size_t kp = mk_rup(k, MK_BF16_KPAD);
    memset(w, 0, kp * nr * sizeof(uint16_t));
    if ((cs < 0 ? -cs : cs) >= (rs < 0 ? -rs : rs)) { /* torch layout: rows of K contiguous */
        for (size_t j = 0; j < ncols; j++) {
            const uint16_t *src = b + (ptrdiff_t)j * cs;
            for (size_t kk = 0; kk < k; kk++)
                w[(kk / 2) * nr * 2 + j * 2 + (kk & 1)] = src[(ptrdiff_t)kk * rs];
        }
    } else {
        for (size_t kk = 0; kk < k; kk++) {
            const uint16_t *src = b + (ptrdiff_t)kk * rs;
            uint16_t *dst = w + (kk / 2) * nr * 2 + (kk & 1);
            for (size_t j = 0; j < ncols; j++) dst[j * 2] = src[(ptrdiff_t)j * cs];
        }
    }
}

#if MK_X86
#include "common/bf16-pairs-avx512bf16.h"

#define MK_TARGET_BF16 MK_TARGET_AVX512BF16

/* 32 consecutive-k elements of one row (n valid, the rest zero) -> 32 bfloat16. */
MK_TARGET_BF16 static inline __m512i mk_row32(const float *src, ptrdiff_t cs, size_t n) {
    if (cs == 1) return mk_bf16_row32(src, n);
    float tmp[32];
    for (size_t q = 0; q < 32; q++) tmp[q] = q < n ? src[(ptrdiff_t)q * cs] : 0.0f;
    return mk_bf16_row32(tmp, 32);
}

MK_TARGET_BF16 void mk_bf16_pack_a_tiles__amx(size_t mc, size_t kc, size_t mr, const void *a_,
                                              ptrdiff_t rs, ptrdiff_t cs, void *dst_) {
    const float *a = (const float *)a_;
    uint16_t *dst = (uint16_t *)dst_;
    const size_t kp = mk_rup(kc, MK_BF16_KPAD), nkb = kp / MK_BF16_KPAD;
    for (size_t ib = 0; ib < mc; ib += mr) {
        const size_t rows = mc - ib < mr ? mc - ib : mr;
        uint16_t *d = dst + ib * kp;
        for (size_t i = 0; i < mr; i++) {
            const float *src = a + (ptrdiff_t)(ib + i) * rs;
            for (size_t kb = 0; kb < nkb; kb++) {
                uint16_t *t = d + (kb * mr + i) * MK_BF16_KPAD;
                const size_t k0 = kb * MK_BF16_KPAD;
                if (i < rows)
                    _mm512_storeu_si512(t, mk_row32(src + (ptrdiff_t)k0 * cs, cs,
                                                    kc - k0 < 32 ? kc - k0 : 32));
                else
                    _mm512_storeu_si512(t, _mm512_setzero_si512());
            }
        }
    }
}

MK_TARGET_BF16 void mk_bf16_pack_a_pairs__avx512bf16(size_t mc, size_t kc, size_t mr,
                                                     const void *a_, ptrdiff_t rs,
                                                     ptrdiff_t cs, void *dst_) {
    const float *a = (const float *)a_;
    uint32_t *dst = (uint32_t *)dst_; /* pairs: 32-bit words */
    const size_t kp = mk_rup(kc, MK_BF16_KPAD), nkb = kp / MK_BF16_KPAD;
    for (size_t ib = 0; ib < mc; ib += mr) {
        const size_t rows = mc - ib < mr ? mc - ib : mr;
        uint32_t *d = dst + ib * kp / 2;
        for (size_t i = 0; i < mr; i++) {
            const float *src = a + (ptrdiff_t)(ib + i) * rs;
            for (size_t kb = 0; kb < nkb; kb++) {
                const size_t k0 = kb * MK_BF16_KPAD;
                uint32_t w[16];
                if (i < rows)
                    _mm512_storeu_si512(w, mk_row32(src + (ptrdiff_t)k0 * cs, cs,
                                                    kc - k0 < 32 ? kc - k0 : 32));
                else
                    memset(w, 0, sizeof w);
                uint32_t *o = d + (k0 / 2) * mr + i;
                for (size_t q = 0; q < 16; q++) o[q * mr] = w[q];
            }
        }
    }
}

#endif /* MK_X86 */
