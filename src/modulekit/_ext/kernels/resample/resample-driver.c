/* Drivers of the 2-D resampling (see resample.h): the rows (plane, output row) split into one
 * contiguous range per thread, so consecutive output rows of a plane stay on one thread and
 * share its row cache. */
#include <stdlib.h>
#include <string.h>

#include "mk_omp.h"
#include "resample.h"

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
    const size_t total = planes * oh;
    const size_t ld = (ow + 15) & ~(size_t)15; /* cache slots 64-byte apart */
    int failed = 0;
    #pragma omp parallel num_threads(nthreads) if (nthreads > 1) reduction(| : failed)
    {
        const size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        const size_t lo = total * t / nt, hi = total * (t + 1) / nt;
        float *cache = lo < hi ? (float *)aligned_alloc(64, 2 * ld * sizeof(float)) : NULL;
        if (lo < hi && cache == NULL) {
            failed = 1;
        } else if (lo < hi) {
            ptrdiff_t tag[2] = {-1, -1};
            size_t plane = (size_t)-1;
            for (size_t r = lo; r < hi; r++) {
                const size_t p = r / oh, oy = r % oh;
                if (p != plane) {
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
        free(cache);
    }
    return failed ? -1 : 0;
}

void mk_f32_nearest2d(int isa, size_t planes, size_t ih, size_t iw, size_t oh, size_t ow,
                      const float *x, float *y, const int32_t *ys, const int32_t *xs,
                      int nthreads)
{
    const mk_resample_config *cfg = mk_resample_config_for(isa);
    const size_t total = planes * oh;
    #pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        const size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        const size_t lo = total * t / nt, hi = total * (t + 1) / nt;
        for (size_t r = lo; r < hi; r++) {
            const size_t p = r / oh, oy = r % oh;
            float *out = y + r * ow;
            if (oy > 0 && r > lo && ys[oy] == ys[oy - 1])
                memcpy(out, out - ow, ow * sizeof(float));
            else
                cfg->gather(ow, x + p * ih * iw + (size_t)ys[oy] * iw, xs, out);
        }
    }
}

void mk_f32_taps_axis(int isa, size_t outer, size_t len, size_t inner, size_t out_len,
                      size_t ntaps, const float *x, float *y, const int32_t *idx, const float *w,
                      int nthreads)
{
    const mk_resample_config *cfg = mk_resample_config_for(isa);
    if (inner == 1) {
        ptrdiff_t a, na = (ptrdiff_t)outer;
        #pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1)
        for (a = 0; a < na; a++)
            cfg->wgather(out_len, ntaps, x + (size_t)a * len, idx, w, out_len,
                         y + (size_t)a * out_len);
        return;
    }
    ptrdiff_t r, nr = (ptrdiff_t)(outer * out_len);
    #pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1)
    for (r = 0; r < nr; r++) {
        const size_t a = (size_t)r / out_len, o = (size_t)r % out_len;
        cfg->wsum(inner, ntaps, x + a * len * inner, inner, idx + o, w + o, out_len,
                  y + (size_t)r * inner);
    }
}
