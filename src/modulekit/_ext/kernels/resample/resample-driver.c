/* Drivers of the resampling kernels (see resample.h).
 *
 * Work is cut into chunks of consecutive rows (about 16 K output values each) that the team
 * takes from a shared counter (schedule(dynamic)): when the OS has descheduled a worker, the
 * calling thread goes on taking chunks instead of waiting for the worker's share. Every
 * region takes part in the contention back-off (common/team.h). */
#include <stdlib.h>
#include <string.h>

#include "common/team.h"
#include "mk_omp.h"
#include "resample.h"

#define MK_CHUNK_VALUES 16384

static size_t chunk_rows(size_t row_len)
{
    const size_t r = MK_CHUNK_VALUES / (row_len ? row_len : 1);
    return r ? r : 1;
}

/* The slot of cache holding input row r, or -1. */
static inline int slot_of(const ptrdiff_t tag[2], ptrdiff_t r)
{
    return tag[0] == r ? 0 : (tag[1] == r ? 1 : -1);
}

int mk_f32_bilinear2d(int isa, size_t planes, size_t ih, size_t iw, size_t oh, size_t ow,
                      const float *x, float *y, const int32_t *ys0, const int32_t *ys1,
                      const float *wy0, const float *wy1, const int32_t *xs0,
                      const int32_t *xs1, const float *wx0, const float *wx1, int nthreads)
{
    const mk_resample_config *cfg = mk_resample_config_for(isa);
    const size_t total = planes * oh, per = chunk_rows(ow);
    const ptrdiff_t nchunks = (ptrdiff_t)((total + per - 1) / per);
    const size_t ld = (ow + 15) & ~(size_t)15; /* cache slots 64-byte apart */
    mk_team_clock clk;
    const int nt = mk_team_begin(nthreads, &clk);
    float *caches = (float *)aligned_alloc(64, (size_t)nt * 2 * ld * sizeof(float));
    if (caches == NULL) return -1;
    #pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float *cache = caches + (size_t)omp_get_thread_num() * 2 * ld;
        ptrdiff_t tag[2] = {-1, -1};
        size_t plane = (size_t)-1;
        ptrdiff_t c;
        #pragma omp for schedule(dynamic, 1) nowait
        for (c = 0; c < nchunks; c++) {
            const size_t lo = (size_t)c * per, hi = lo + per < total ? lo + per : total;
            for (size_t r = lo; r < hi; r++) {
                const size_t p = r / oh, oy = r % oh;
                if (p != plane) { /* cached rows are rows of one plane */
                    plane = p;
                    tag[0] = tag[1] = -1;
                }
                const float *src = x + p * ih * iw;
                const ptrdiff_t a = ys0[oy], b = ys1[oy];
                int sa = slot_of(tag, a);
                if (sa < 0) {
                    sa = tag[0] == b ? 1 : 0; /* keep b's row if it is cached */
                    cfg->lerp(ow, src + (size_t)a * iw, xs0, xs1, wx0, wx1, cache + sa * ld);
                    tag[sa] = a;
                }
                int sb = slot_of(tag, b);
                if (sb < 0) {
                    sb = 1 - sa;
                    cfg->lerp(ow, src + (size_t)b * iw, xs0, xs1, wx0, wx1, cache + sb * ld);
                    tag[sb] = b;
                }
                cfg->blend(ow, cache + sa * ld, cache + sb * ld, wy0[oy], wy1[oy],
                           y + r * ow);
            }
        }
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    free(caches);
    return 0;
}

/* Rows [0, total) in chunks of per rows taken from the shared counter by up to nthreads
 * threads: rows(ctx, lo, hi) for each chunk. */
static void run_chunks(size_t total, size_t per, int nthreads,
                       void (*rows)(const void *ctx, size_t lo, size_t hi), const void *ctx)
{
    const ptrdiff_t nchunks = (ptrdiff_t)((total + per - 1) / per);
    mk_team_clock clk;
    nthreads = mk_team_begin(nthreads, &clk);
    #pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        ptrdiff_t c;
        #pragma omp for schedule(dynamic, 1) nowait
        for (c = 0; c < nchunks; c++) {
            const size_t lo = (size_t)c * per;
            rows(ctx, lo, lo + per < total ? lo + per : total);
        }
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
}

typedef struct {
    const mk_resample_config *cfg;
    size_t ih, iw, oh, ow;
    const float *x;
    float *y;
    const int32_t *ys, *xs;
} nearest_job;

static void nearest_rows(const void *ctx, size_t lo, size_t hi)
{
    const nearest_job *j = (const nearest_job *)ctx;
    const size_t oh = j->oh, ow = j->ow;
    for (size_t r = lo; r < hi; r++) {
        const size_t p = r / oh, oy = r % oh;
        float *out = j->y + r * ow;
        if (oy > 0 && r > lo && j->ys[oy] == j->ys[oy - 1])
            memcpy(out, out - ow, ow * sizeof(float));
        else
            j->cfg->gather(ow, j->x + p * j->ih * j->iw + (size_t)j->ys[oy] * j->iw, j->xs, out);
    }
}

void mk_f32_nearest2d(int isa, size_t planes, size_t ih, size_t iw, size_t oh, size_t ow,
                      const float *x, float *y, const int32_t *ys, const int32_t *xs, int nthreads)
{
    const nearest_job j = {mk_resample_config_for(isa), ih, iw, oh, ow, x, y, ys, xs};
    run_chunks(planes * oh, chunk_rows(ow), nthreads, nearest_rows, &j);
}

typedef struct {
    const mk_resample_config *cfg;
    size_t len, inner, out_len, ntaps;
    const float *x;
    float *y;
    const int32_t *idx;
    const float *w;
} taps_job;

static void taps_rows(const void *ctx, size_t lo, size_t hi)
{
    const taps_job *j = (const taps_job *)ctx;
    const size_t len = j->len, inner = j->inner, out_len = j->out_len;
    for (size_t r = lo; r < hi; r++) {
        if (inner == 1) {
            j->cfg->wgather(out_len, j->ntaps, j->x + r * len, j->idx, j->w, out_len,
                            j->y + r * out_len);
        } else {
            const size_t a = r / out_len, o = r % out_len;
            j->cfg->wsum(inner, j->ntaps, j->x + a * len * inner, inner, j->idx + o, j->w + o,
                         out_len, j->y + r * inner);
        }
    }
}

void mk_f32_taps_axis(int isa, size_t outer, size_t len, size_t inner, size_t out_len,
                      size_t ntaps, const float *x, float *y, const int32_t *idx, const float *w, int nthreads)
{
    const taps_job j = {mk_resample_config_for(isa), len, inner, out_len, ntaps, x, y, idx, w};
    /* inner == 1: rows of out_len weighted gathers, one per outer index; else rows of inner
     * values, one per (outer, output) pair */
    const size_t row_len = inner == 1 ? out_len : inner;
    const size_t total = inner == 1 ? outer : outer * out_len;
    run_chunks(total, chunk_rows(row_len), nthreads, taps_rows, &j);
}
