/* Drivers: pick the row kernel for the ISA level once per call (the config table below is the
 * one place that chooses), then run the rows on up to nthreads OpenMP threads. */
#include <string.h>

#include "isa.h"
#include "common/team.h"
#include "mk_omp.h"
#include "ops.h"

typedef struct {
    mk_ln_row_f32 layernorm;
    mk_softmax_row_f32 softmax;
    void (*f16_widen)(size_t, const uint16_t *, float *, int);
    /* 16 x 16 float32 block, or NULL: the scalar block loop */
    void (*transpose16)(const float *, ptrdiff_t, float *, ptrdiff_t);
} mk_ops_config;

static const mk_ops_config ops_configs[MK_ISA_COUNT] = {
    [MK_ISA_GENERIC] = {mk_layernorm_row_f32_scalar, mk_softmax_row_f32_scalar,
                        mk_f16_widen_scalar, NULL},
#if MK_X86
    [MK_ISA_AVX2] = {mk_layernorm_row_f32_avx2, mk_softmax_row_f32_avx2,
                     mk_f16_widen_avx2, NULL},
    [MK_ISA_AVX512] = {mk_layernorm_row_f32_avx512, mk_softmax_row_f32_avx512,
                       mk_f16_widen_avx2, mk_x32_transpose_16x16_avx512},
#else /* never selected: mk_isa_detect() reports MK_ISA_GENERIC (see isa.h) */
    [MK_ISA_AVX2] = {mk_layernorm_row_f32_scalar, mk_softmax_row_f32_scalar,
                     mk_f16_widen_scalar, NULL},
    [MK_ISA_AVX512] = {mk_layernorm_row_f32_scalar, mk_softmax_row_f32_scalar,
                       mk_f16_widen_scalar, NULL},
#endif
};

static const mk_ops_config *ops_config(int isa)
{
    if (isa < 0 || isa >= MK_ISA_COUNT) isa = MK_ISA_GENERIC;
    return &ops_configs[isa];
}

mk_softmax_row_f32 mk_ops_softmax_row(int isa) { return ops_config(isa)->softmax; }

void mk_layernorm_f32(int isa, size_t rows, size_t n, const float *x, size_t ldx,
                      const float *res, size_t ldr, const float *gamma, const float *beta,
                      float eps, float *y, size_t ldy, int nthreads)
{
    const mk_ln_row_f32 row = ops_config(isa)->layernorm;
    ptrdiff_t r, nr = (ptrdiff_t)rows;
    MK_TEAM_FOR(nthreads, 4)
    for (r = 0; r < nr; r++)
        row(n, x + (size_t)r * ldx, res ? res + (size_t)r * ldr : NULL, gamma, beta, eps,
            y + (size_t)r * ldy);
    MK_TEAM_FOR_END
}

void mk_softmax_f32(int isa, size_t na, size_t nb, size_t nc, size_t n, float *x, ptrdiff_t sx0,
                    ptrdiff_t sx1, ptrdiff_t sx2, const float *mask, ptrdiff_t sm0,
                    ptrdiff_t sm1, ptrdiff_t sm2, float scale, int nthreads)
{
    const mk_softmax_row_f32 row = ops_config(isa)->softmax;
    const ptrdiff_t pb = (ptrdiff_t)nb, pc = (ptrdiff_t)nc;
    ptrdiff_t r, total = (ptrdiff_t)(na * nb * nc);
    MK_TEAM_FOR(nthreads, 4)
    for (r = 0; r < total; r++) {
        ptrdiff_t a = r / (pb * pc), b = (r / pc) % pb, c = r % pc;
        row(n, x + a * sx0 + b * sx1 + c * sx2, mask ? mask + a * sm0 + b * sm1 + c * sm2 : NULL,
            scale);
    }
    MK_TEAM_FOR_END
}

/* dst[j * ld + i] = src[i * ls + j], i < r, j < c: the scalar block loop (stores in order) */
#define MK_TRANSPOSE_BLOCK(T, NAME)                                                    \
    static void NAME(size_t r, size_t c, const T *src, ptrdiff_t ls, T *dst, ptrdiff_t ld) \
    {                                                                                  \
        for (size_t j = 0; j < c; j++)                                                 \
            for (size_t i = 0; i < r; i++) dst[(ptrdiff_t)j * ld + (ptrdiff_t)i] =      \
                src[(ptrdiff_t)i * ls + (ptrdiff_t)j];                                  \
    }
MK_TRANSPOSE_BLOCK(float, transpose_block_f32)
MK_TRANSPOSE_BLOCK(double, transpose_block_f64)

void mk_transpose(int isa, size_t esize, size_t batch, size_t rows, size_t cols,
                  const void *src, ptrdiff_t sb, ptrdiff_t sr, void *dst, ptrdiff_t db,
                  ptrdiff_t dr, int nthreads)
{
    enum { B = 16 };
    void (*const block)(const float *, ptrdiff_t, float *, ptrdiff_t) =
        ops_config(isa)->transpose16;
    const size_t ncb = (cols + B - 1) / B;
    ptrdiff_t it, items = (ptrdiff_t)(batch * ncb);
    MK_TEAM_FOR(nthreads, 4)
    for (it = 0; it < items; it++) {
        const ptrdiff_t b = it / (ptrdiff_t)ncb, j0 = (it % (ptrdiff_t)ncb) * B;
        const size_t nc = cols - (size_t)j0 < B ? cols - (size_t)j0 : B;
        for (size_t i0 = 0; i0 < rows; i0 += B) {
            const size_t nr = rows - i0 < B ? rows - i0 : B;
            const ptrdiff_t s = b * sb + (ptrdiff_t)i0 * sr + j0;
            const ptrdiff_t d = b * db + j0 * dr + (ptrdiff_t)i0;
            if (esize == 8)
                transpose_block_f64(nr, nc, (const double *)src + s, sr, (double *)dst + d, dr);
            else if (block && nr == B && nc == B)
                block((const float *)src + s, sr, (float *)dst + d, dr);
            else
                transpose_block_f32(nr, nc, (const float *)src + s, sr, (float *)dst + d, dr);
        }
    }
    MK_TEAM_FOR_END
}

/* One phase of one plane: d[o0 + q * st] = s[w0 + q] over the phase's box (see ops.h). */
#define MK_SCATTER_PHASE(T, NAME)                                                            \
    static void NAME(const T *s, const ptrdiff_t M[3], const ptrdiff_t w0[3],               \
                     const ptrdiff_t cnt[3], T *d, const ptrdiff_t O[3], const ptrdiff_t o0[3], \
                     const ptrdiff_t st[3])                                                  \
    {                                                                                        \
        for (ptrdiff_t z = 0; z < cnt[0]; z++)                                               \
            for (ptrdiff_t y = 0; y < cnt[1]; y++) {                                         \
                const T *sr = s + ((w0[0] + z) * M[1] + w0[1] + y) * M[2] + w0[2];           \
                T *dr = d + ((o0[0] + z * st[0]) * O[1] + o0[1] + y * st[1]) * O[2] + o0[2]; \
                if (st[2] == 1)                                                              \
                    memcpy(dr, sr, (size_t)cnt[2] * sizeof(T));                              \
                else                                                                         \
                    for (ptrdiff_t x = 0; x < cnt[2]; x++) dr[x * st[2]] = sr[x];            \
            }                                                                                \
    }
MK_SCATTER_PHASE(float, scatter_phase_f32)
MK_SCATTER_PHASE(double, scatter_phase_f64)
#undef MK_SCATTER_PHASE

void mk_scatter_phases(size_t esize, size_t outer, size_t cg, size_t nphase, const void *src,
                       const ptrdiff_t M[3], const ptrdiff_t *w0, const ptrdiff_t *cnt,
                       void *dst, const ptrdiff_t O[3], const ptrdiff_t *o0,
                       const ptrdiff_t st[3], int nthreads)
{
    const ptrdiff_t sp = M[0] * M[1] * M[2], dp = O[0] * O[1] * O[2], pc = (ptrdiff_t)cg;
    const ptrdiff_t planes = (ptrdiff_t)(outer * cg);
    ptrdiff_t it;
    MK_TEAM_FOR(nthreads, 4)
    for (it = 0; it < planes; it++) {
        const ptrdiff_t b = it / pc, c = it % pc;
        for (size_t i = 0; i < nphase; i++) {
            const ptrdiff_t s = ((b * (ptrdiff_t)nphase + (ptrdiff_t)i) * pc + c) * sp;
            if (esize == 8)
                scatter_phase_f64((const double *)src + s, M, w0 + 3 * i, cnt + 3 * i,
                                  (double *)dst + it * dp, O, o0 + 3 * i, st);
            else
                scatter_phase_f32((const float *)src + s, M, w0 + 3 * i, cnt + 3 * i,
                                  (float *)dst + it * dp, O, o0 + 3 * i, st);
        }
    }
    MK_TEAM_FOR_END
}

ptrdiff_t mk_ids_first_bad(const int64_t *ids, size_t n, int64_t rows)
{
    for (size_t i = 0; i < n; i++)
        if ((uint64_t)ids[i] >= (uint64_t)rows) return (ptrdiff_t)i;
    return -1;
}

/* dst[j] = src[j] (accumulate: +=), j < dim: one function per element type */
#define MK_COPY_ROW(T, NAME)                                                   \
    static void NAME(size_t dim, const T *src, T *dst, int accumulate)        \
    {                                                                         \
        if (accumulate)                                                       \
            for (size_t j = 0; j < dim; j++) dst[j] += src[j];                \
        else                                                                  \
            memcpy(dst, src, dim * sizeof(T));                                \
    }
MK_COPY_ROW(double, copy_row_f64)
MK_COPY_ROW(float, copy_row_f32)
#undef MK_COPY_ROW

void mk_gather(int isa, int table_dtype, size_t n, size_t dim, const int64_t *ids,
               const void *table, void *out, size_t ldo, int accumulate, int nthreads)
{
    const mk_ops_config *cfg = ops_config(isa);
    ptrdiff_t i, nn = (ptrdiff_t)n;
    MK_TEAM_FOR(nthreads, 4)
    for (i = 0; i < nn; i++) {
        const size_t row = (size_t)ids[i];
        size_t j;
        switch (table_dtype) {
        case MK_TABLE_F64:
            copy_row_f64(dim, (const double *)table + row * dim, (double *)out + (size_t)i * ldo,
                         accumulate);
            break;
        case MK_TABLE_F16:
            cfg->f16_widen(dim, (const uint16_t *)table + row * dim, (float *)out + (size_t)i * ldo,
                           accumulate);
            break;
        case MK_TABLE_BF16: {
            const uint16_t *src = (const uint16_t *)table + row * dim;
            float *dst = (float *)out + (size_t)i * ldo;
            for (j = 0; j < dim; j++) {
                uint32_t bits = (uint32_t)src[j] << 16;
                float f;
                memcpy(&f, &bits, 4);
                dst[j] = accumulate ? dst[j] + f : f;
            }
            break;
        }
        default:
            copy_row_f32(dim, (const float *)table + row * dim, (float *)out + (size_t)i * ldo,
                         accumulate);
        }
    }
    MK_TEAM_FOR_END
}

void mk_embed3_layernorm_f32(int isa, size_t n, size_t dim, const int64_t *ids0,
                             const float *t0, const int64_t *ids1, const float *t1,
                             const int64_t *ids2, const float *t2, const float *gamma,
                             const float *beta, float eps, float *out, int nthreads)
{
    const mk_ln_row_f32 row = ops_config(isa)->layernorm;
    ptrdiff_t i, nn = (ptrdiff_t)n;
    MK_TEAM_FOR(nthreads, 4)
    for (i = 0; i < nn; i++) {
        const float *a = t0 + (size_t)ids0[i] * dim, *b = t1 + (size_t)ids1[i] * dim;
        float *y = out + (size_t)i * dim;
        for (size_t j = 0; j < dim; j++) y[j] = a[j] + b[j];
        /* the layernorm row adds the third row as its residual, then normalises in place */
        row(dim, y, t2 + (size_t)ids2[i] * dim, gamma, beta, eps, y);
    }
    MK_TEAM_FOR_END
}
