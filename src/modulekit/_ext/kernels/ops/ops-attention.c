/* Fused multi-head attention, float32: per (batch, head) task, on one thread,
 *     Kt = scale K_h^T (packed, zero-padded), S = Q_h Kt, S = softmax(S + mask), O_h = S V_h
 * so each thread holds one head's scores (Lq x Lk) at a time, in a private buffer that stays
 * in L2 (or in the caller's attention-weights array when it wants them). V_h is copied into a
 * contiguous buffer first: the rows of a head inside a wide (Q|K|V) projection are
 * 4-5 KiB apart, which maps them onto a few L1 sets, and the PV block re-reads them per
 * row block. The QK and PV blocks
 * come from the per-ISA table below; the softmax row kernel from ops-driver.c's table.
 * Tasks are handed out dynamically: on a busy machine a thread that starts late (or is
 * descheduled) leaves its share to the others instead of holding the whole call back. */
#include <stdlib.h>
#include <string.h>

#include "isa.h"
#include "common/team.h"
#include "mk_omp.h"
#include "ops.h"

#define ATT_T float
#define ATT_ATTR
#define ATT_NAME(op) att_##op##_generic
#include "attention-generic.inc.h"
#undef ATT_ATTR
#undef ATT_NAME

#if MK_X86
#define ATT_ATTR __attribute__((target("avx2,fma")))
#define ATT_NAME(op) att_##op##_avx2
#include "attention-generic.inc.h"
#undef ATT_ATTR
#undef ATT_NAME
#endif
#undef ATT_T

#define ATT_T double
#define ATT_ATTR
#define ATT_NAME(op) att_##op##_f64
#include "attention-generic.inc.h"
#undef ATT_ATTR
#undef ATT_NAME
#undef ATT_T

/* Kt[c][j] = scale * K[j][c] (portable) */
static void att_pack_kt_generic(size_t lk, size_t d, const float *k, ptrdiff_t ksr, float scale,
                                float *kt, size_t ldk)
{
    for (size_t j = 0; j < lk; j++) {
        const float *kj = k + (ptrdiff_t)j * ksr;
        for (size_t c = 0; c < d; c++) kt[c * ldk + j] = kj[c] * scale;
    }
}

typedef void (*att_kt_fn)(size_t, size_t, const float *, ptrdiff_t, float, float *, size_t);
typedef void (*att_qk_fn)(size_t, size_t, size_t, const float *, ptrdiff_t, const float *, size_t,
                          float *, size_t);
typedef void (*att_pv_fn)(size_t, size_t, size_t, const float *, size_t, const float *, ptrdiff_t,
                          float *, ptrdiff_t);

static const struct {
    att_qk_fn qk;
    att_pv_fn pv;
    att_kt_fn pack_kt;
    size_t kt_align; /* Kt row length is a multiple of this (the QK kernel's column block) */
} att_configs[MK_ISA_COUNT] = {
    [MK_ISA_GENERIC] = {att_qk_generic, att_pv_generic, att_pack_kt_generic, 16},
#if MK_X86
    [MK_ISA_AVX2] = {att_qk_avx2, att_pv_avx2, att_pack_kt_generic, 16},
    [MK_ISA_AVX512] = {mk_attention_qk_f32_avx512, mk_attention_pv_f32_avx512,
                        mk_attention_pack_kt_f32_avx512, 32}, /* 8x32 blocks, gathers */
#else /* never selected: mk_isa_detect() reports MK_ISA_GENERIC */
    [MK_ISA_AVX2] = {att_qk_generic, att_pv_generic, att_pack_kt_generic, 16},
    [MK_ISA_AVX512] = {att_qk_generic, att_pv_generic, att_pack_kt_generic, 16},
#endif
};

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* Task t (batch t / nh, head t % nh): element offsets of its q/k columns, v and output
 * columns, and its mask plane. */
typedef struct {
    ptrdiff_t q, k, v, o, m;
} head_offsets;

static head_offsets head_of(ptrdiff_t t, size_t nh, size_t d, size_t dv, ptrdiff_t qsb,
                            ptrdiff_t ksb, ptrdiff_t vsb, ptrdiff_t osb, ptrdiff_t msb,
                            ptrdiff_t msh)
{
    const ptrdiff_t b = t / (ptrdiff_t)nh, h = t % (ptrdiff_t)nh;
    const head_offsets o = {b * qsb + h * (ptrdiff_t)d, b * ksb + h * (ptrdiff_t)d,
                            b * vsb + h * (ptrdiff_t)dv, b * osb + h * (ptrdiff_t)dv,
                            b * msb + h * msh};
    return o;
}

static void *alloc64(size_t bytes)
{
    void *p = NULL;
    bytes = (bytes + 63) & ~(size_t)63;
    if (bytes == 0) bytes = 64;
    if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    return p;
}

int mk_attention_f32(int isa, int bf16, size_t nb, size_t nh, size_t lq, size_t lk, size_t d,
                     size_t dv, const float *q, ptrdiff_t qsb, ptrdiff_t qsr, const float *k,
                     ptrdiff_t ksb, ptrdiff_t ksr, const float *v, ptrdiff_t vsb, ptrdiff_t vsr,
                     const float *mask, ptrdiff_t msb, ptrdiff_t msh, ptrdiff_t msr, float scale,
                     float *out, ptrdiff_t osb, ptrdiff_t osr, float *weights, int nthreads)
{
    if (isa < 0 || isa >= MK_ISA_COUNT) isa = MK_ISA_GENERIC;
    const att_qk_fn qk = att_configs[isa].qk;
    const att_pv_fn pv = att_configs[isa].pv;
    const att_kt_fn pack_kt = att_configs[isa].pack_kt;
    const mk_softmax_row_f32 softmax = mk_ops_softmax_row(isa);
    const size_t al = att_configs[isa].kt_align;
    const size_t ldk = (lk + al - 1) / al * al;
    const ptrdiff_t tasks = (ptrdiff_t)(nb * nh);
    int failed = 0;
    if (tasks < nthreads) nthreads = (int)(tasks > 0 ? tasks : 1);
#if !MK_X86
    bf16 = 0;
#endif
    if (isa != MK_ISA_AVX512) bf16 = 0;
    /* bfloat16 pair words: Q_h (lq rows of dp words), Kt (dp pair rows of ldk words), P (lq
     * rows of lp words), V_h (lp pair rows of dv words); on AMX zero-padded to whole tiles
     * (bf16-attention-32x32-amx.c): rows to 32, words a row to 16 (A) or 32 (B), pair rows
     * to 16. Word counts a row: wq, wkt, wp, wv; rows: rq (Q_h and P), rd, rl (pair rows). */
    const int amx = bf16 == 2;
    const size_t dp = (d + 1) / 2, lp = (lk + 1) / 2;
    const size_t rq = amx ? round_up(lq, 32) : lq, rd = amx ? round_up(dp, 16) : dp;
    const size_t rl = amx ? round_up(lp, 16) : lp;
    const size_t wq = rd, wkt = amx ? round_up(ldk, 32) : ldk, wp = rl;
    const size_t wv = amx ? round_up(dv, 32) : dv;
    const size_t words16 = bf16 ? rq * wq + rd * wkt + rq * wp + rl * wv : 0;
    void (*const dot)(size_t, size_t, size_t, const uint32_t *, size_t, const uint32_t *,
                      size_t, float *, ptrdiff_t) =
#if MK_X86
        amx ? mk_attention_dot_bf16_amx : mk_attention_dot_bf16;
#else
        NULL;
#endif

    mk_team_clock clk;
    nthreads = mk_team_begin(nthreads, &clk);
    #pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        float *kt = (float *)alloc64(d * ldk * sizeof(float));
        float *vbuf = bf16 ? NULL : (float *)alloc64(lk * dv * sizeof(float));
        float *sbuf = weights ? NULL : (float *)alloc64(lq * lk * sizeof(float));
        uint32_t *q16 = bf16 ? (uint32_t *)alloc64(words16 * sizeof(uint32_t)) : NULL;
        const int ok = kt != NULL && (bf16 ? q16 != NULL : vbuf != NULL) &&
                       (weights != NULL || sbuf != NULL);
        if (ok) memset(kt, 0, d * ldk * sizeof(float)); /* the padding columns stay zero */
        if (ok && amx) memset(q16, 0, words16 * sizeof(uint32_t)); /* so do the tiles' */
#if MK_X86
        if (ok && amx) mk_attention_amx_begin();
#endif
        ptrdiff_t t;
        #pragma omp for schedule(dynamic) nowait
        for (t = 0; t < tasks; t++) {
            if (!ok) {
                #pragma omp atomic write
                failed = 1;
                continue;
            }
            const head_offsets o = head_of(t, nh, d, dv, qsb, ksb, vsb, osb, msb, msh);
            const float *qh = q + o.q, *kh = k + o.k, *vh = v + o.v;
            const float *mrow = mask ? mask + o.m : NULL;
            float *oh = out + o.o, *s = weights ? weights + (size_t)t * lq * lk : sbuf;
            pack_kt(lk, d, kh, ksr, scale, kt, ldk); /* Kt = scale K_h^T: S comes out scaled */
            if (bf16) { /* (x86 only: bf16 is 0 elsewhere) */
#if MK_X86
                uint32_t *kt16 = q16 + rq * wq; /* pair words: Q_h, then Kt (see above) */
                mk_attention_bf16_rows(lq, d, qh, qsr, q16, wq);
                mk_attention_bf16_pairs(d, ldk, kt, (ptrdiff_t)ldk, kt16, wkt);
                dot(lq, lk, rd, q16, wq, kt16, wkt, s, (ptrdiff_t)lk);
#endif
            } else {
                for (size_t j = 0; j < lk; j++) /* V_h rows, contiguous */
                    memcpy(vbuf + j * dv, vh + (ptrdiff_t)j * vsr, dv * sizeof(float));
                qk(lq, lk, d, qh, qsr, kt, ldk, s, lk);
            }
            for (size_t i = 0; i < lq; i++)
                softmax(lk, s + i * lk, mrow ? mrow + (ptrdiff_t)i * msr : NULL, 1.0f);
            if (bf16) {
#if MK_X86
                uint32_t *p16 = q16 + rq * wq + rd * wkt, *v16 = p16 + rq * wp; /* P, V_h */
                mk_attention_bf16_rows(lq, lk, s, (ptrdiff_t)lk, p16, wp);
                mk_attention_bf16_pairs(lk, dv, vh, vsr, v16, wv);
                dot(lq, dv, rl, p16, wp, v16, wv, oh, osr);
#endif
            } else {
                pv(lq, lk, dv, s, lk, vbuf, (ptrdiff_t)dv, oh, osr);
            }
        }
#if MK_X86
        if (ok && amx) mk_attention_amx_end();
#endif
        free(kt);
        free(vbuf);
        free(sbuf);
        free(q16);
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    return failed ? -1 : 0;
}

int mk_attention_f64(size_t nb, size_t nh, size_t lq, size_t lk, size_t d, size_t dv,
                     const double *q, ptrdiff_t qsb, ptrdiff_t qsr, const double *k,
                     ptrdiff_t ksb, ptrdiff_t ksr, const double *v, ptrdiff_t vsb, ptrdiff_t vsr,
                     const double *mask, ptrdiff_t msb, ptrdiff_t msh, ptrdiff_t msr,
                     double scale, double *out, ptrdiff_t osb, ptrdiff_t osr, double *weights,
                     int nthreads)
{
    const ptrdiff_t tasks = (ptrdiff_t)(nb * nh);
    int failed = 0;
    if (tasks < nthreads) nthreads = (int)(tasks > 0 ? tasks : 1);

    mk_team_clock clk;
    nthreads = mk_team_begin(nthreads, &clk);
    #pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        double *kt = (double *)alloc64(d * lk * sizeof(double));
        double *sbuf = weights ? NULL : (double *)alloc64(lq * lk * sizeof(double));
        const int ok = kt != NULL && (weights != NULL || sbuf != NULL);
        if (!ok) {
            #pragma omp atomic write
            failed = 1;
        }
        ptrdiff_t t;
        #pragma omp for schedule(dynamic) nowait
        for (t = 0; t < tasks; t++) {
            if (!ok) continue; /* (the call fails) */
            const head_offsets o = head_of(t, nh, d, dv, qsb, ksb, vsb, osb, msb, msh);
            const double *qh = q + o.q, *kh = k + o.k, *vh = v + o.v;
            const double *mrow = mask ? mask + o.m : NULL;
            double *oh = out + o.o, *s = weights ? weights + (size_t)t * lq * lk : sbuf;
            for (size_t j = 0; j < lk; j++) {
                const double *kj = kh + (ptrdiff_t)j * ksr;
                for (size_t c = 0; c < d; c++) kt[c * lk + j] = kj[c];
            }
            att_qk_f64(lq, lk, d, qh, qsr, kt, lk, s, lk);
            for (size_t i = 0; i < lq; i++)
                mk_softmax_row_f64(lk, s + i * lk, mrow ? mrow + (ptrdiff_t)i * msr : NULL, scale);
            att_pv_f64(lq, lk, dv, s, lk, vh, vsr, oh, osr);
        }
        free(kt);
        free(sbuf);
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    return failed ? -1 : 0;
}
