/* Weight packing: B[K x N] (any strides) -> NR-column panels [bias[NR]][K x NR], zero padded,
 * each panel 64-byte aligned (see gemm.h). Elements are moved as raw bytes of the storage
 * dtype: conversion to float16/bfloat16 happens before, in the caller. */
#include <string.h>

#include "gemm.h"
#include "common/team.h"
#include "mk_omp.h"

static size_t mk_min(size_t a, size_t b) { return a < b ? a : b; }

static size_t mk_round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

size_t mk_gemm_panel_stride(const mk_gemm_config *cfg, size_t k) {
    if (cfg->kpad > 1) k = mk_round_up(k, cfg->kpad); /* bfloat16 pair / tile layouts */
    return mk_round_up(cfg->nr * cfg->esize + k * cfg->nr * cfg->wsize, 64);
}

size_t mk_gemm_packed_size(const mk_gemm_config *cfg, size_t n, size_t k) {
    const size_t panels = (n + cfg->nr - 1) / cfg->nr;
    return (panels ? panels : 1) * mk_gemm_panel_stride(cfg, k);
}

/* One panel's K x ncols weights; the loop nest follows the source's contiguous direction.
 * Padding columns and the tail of the panel are zeroed (the bias slot by the caller). */
#define MK_PACK_LOOP(T)                                                                   \
    do {                                                                                  \
        const T *src = (const T *)b + (ptrdiff_t)n0 * cs;                                 \
        T *w = (T *)(panel + nr * cfg->esize);                                            \
        if (cs == 1 && ncols * sizeof(T) == 128) {                                        \
            /* full panel rows of 128 bytes (NR = 32 float32, 16 float64, 64 16-bit):     \
             * a fixed-size copy the compiler inlines instead of a memcpy call per row */  \
            for (size_t kk = 0; kk < k; kk++)                                             \
                memcpy(w + kk * nr, src + (ptrdiff_t)kk * rs, 128);                       \
        } else if (cs == 1 && ncols * sizeof(T) == 64) {                                  \
            for (size_t kk = 0; kk < k; kk++)                                             \
                memcpy(w + kk * nr, src + (ptrdiff_t)kk * rs, 64);                        \
        } else if (cs == 1) {                                                             \
            for (size_t kk = 0; kk < k; kk++) {                                           \
                memcpy(w + kk * nr, src + (ptrdiff_t)kk * rs, ncols * sizeof(T));         \
                if (ncols < nr) memset(w + kk * nr + ncols, 0, (nr - ncols) * sizeof(T)); \
            }                                                                             \
        } else {                                                                          \
            if (ncols < nr) memset(w, 0, k * nr * sizeof(T));                             \
            if ((cs < 0 ? -cs : cs) <= (rs < 0 ? -rs : rs)) {                             \
                for (size_t kk = 0; kk < k; kk++)                                         \
                    for (size_t j = 0; j < ncols; j++)                                    \
                        w[kk * nr + j] = src[(ptrdiff_t)kk * rs + (ptrdiff_t)j * cs];     \
            } else {                                                                      \
                for (size_t j = 0; j < ncols; j++)                                        \
                    for (size_t kk = 0; kk < k; kk++)                                     \
                        w[kk * nr + j] = src[(ptrdiff_t)kk * rs + (ptrdiff_t)j * cs];     \
            }                                                                             \
        }                                                                                 \
    } while (0)

void mk_gemm_pack(const mk_gemm_config *cfg, size_t n, size_t k, const void *b, ptrdiff_t rs,
                  ptrdiff_t cs, const void *bias, void *dst, int nthreads) {
    const size_t nr = cfg->nr, ps = mk_gemm_panel_stride(cfg, k);
    const size_t panels = (n + nr - 1) / nr;
    const size_t kp = cfg->kpad > 1 ? mk_round_up(k, cfg->kpad) : k;
    const size_t used = nr * cfg->esize + kp * nr * cfg->wsize;
    if (panels == 0) {
        memset(dst, 0, ps);
        return;
    }
    if (nthreads < 1 || (double)n * (double)k < (double)(1u << 18)) nthreads = 1;
    MK_TEAM_FOR(nthreads, 1)
    for (size_t p = 0; p < panels; p++) {
        unsigned char *panel = (unsigned char *)dst + p * ps; /* out */
        const size_t n0 = p * nr, ncols = n - n0 < nr ? n - n0 : nr;
        memset(panel, 0, nr * cfg->esize);
        if (bias != NULL)
            memcpy(panel, (const unsigned char *)bias + n0 * cfg->esize, ncols * cfg->esize);
        if (ps > used) memset(panel + used, 0, ps - used);
        if (cfg->pack_w != NULL) { /* bfloat16 pair layout (bf16-gemm-pack.c) */
            cfg->pack_w(ncols, k, nr, (const unsigned char *)b + (ptrdiff_t)n0 * cs * (ptrdiff_t)cfg->wsize,
                        rs, cs, panel + nr * cfg->esize);
            continue;
        }
        switch (cfg->wsize) {
            case 2:
                MK_PACK_LOOP(uint16_t);
                break;
            case 4:
                MK_PACK_LOOP(uint32_t);
                break;
            default:
                MK_PACK_LOOP(uint64_t);
                break;
        }
    }
    MK_TEAM_FOR_END
}

#define MK_UNPACK_LOOP(T)                                                        \
    do {                                                                         \
        T *dstw = (T *)weight;                                                   \
        const T *w = (const T *)(panel + nr * cfg->esize);                       \
        for (size_t j = 0; j < ncols; j++)                                       \
            for (size_t kk = 0; kk < k; kk++) dstw[(n0 + j) * k + kk] = w[kk * nr + j]; \
    } while (0)

void mk_gemm_unpack(const mk_gemm_config *cfg, size_t n, size_t k, const void *packed,
                    void *weight, void *bias) {
    const size_t nr = cfg->nr, ps = mk_gemm_panel_stride(cfg, k);
    const size_t panels = (n + nr - 1) / nr;
    for (size_t p = 0; p < panels; p++) {
        const unsigned char *panel = (const unsigned char *)packed + p * ps; /* in */
        const size_t n0 = p * nr, ncols = n - n0 < nr ? n - n0 : nr;
        if (bias != NULL)
            memcpy((unsigned char *)bias + n0 * cfg->esize, panel, ncols * cfg->esize);
        switch (cfg->wsize) {
            case 2:
                MK_UNPACK_LOOP(uint16_t);
                break;
            case 4:
                MK_UNPACK_LOOP(uint32_t);
                break;
            default:
                MK_UNPACK_LOOP(uint64_t);
                break;
        }
    }
}

/* Pack rows [0, mc) x columns [0, kc) of A (element (i, k) at a[i * rs + k * cs]) into
 * MR-row micro-panels, k-major: dst[(i / MR) * MR * kc + k * MR + i % MR]; rows past mc
 * are zero. */
#define MK_PACK_A(N, T)                                                                      \
    void mk_gemm_pack_a_##N(size_t mc, size_t kc, size_t mr_, const void *a_, ptrdiff_t rs,   \
                            ptrdiff_t cs, void *dst_) {                                   \
        const T *a = (const T *)a_;                                                       \
        T *dst = (T *)dst_;                                     \
        for (size_t ib = 0; ib < mc; ib += mr_) {                                         \
            const size_t rows = mk_min(mr_, mc - ib);                                     \
            T *d = dst + ib * kc;                                                         \
            for (size_t i = 0; i < rows; i++) {                                           \
                const T *src = a + (ptrdiff_t)(ib + i) * rs;                              \
                if (cs == 1) {                                                            \
                    for (size_t k = 0; k < kc; k++) d[k * mr_ + i] = src[k];              \
                } else {                                                                  \
                    for (size_t k = 0; k < kc; k++) d[k * mr_ + i] = src[(ptrdiff_t)k * cs]; \
                }                                                                         \
            }                                                                             \
            for (size_t i = rows; i < mr_; i++)                                           \
                for (size_t k = 0; k < kc; k++) d[k * mr_ + i] = (T)0;                    \
        }                                                                                 \
    }
MK_PACK_A(f32, float)
MK_PACK_A(f64, double)
