/* MobileNetV2's inverted residual block over NHWC bytes, in bands of output rows (qgemm.h,
 * mk_qinvres): the int8 counterpart of conv/f32-invres-driver.c.
 *
 * Each thread takes a contiguous range of the n * oh output rows and computes it band by
 * band: the expand's rows for the band into E (bytes), the depthwise rows from E into D
 * (bytes), the project's rows from D (and the residual's rows of x) into y. The expanded
 * tensor never leaves the thread's caches, and there is one parallel region for the block
 * instead of three. Consecutive bands of a thread share the expanded rows of a window's
 * overlap (two for stride 1, one for stride 2): they are moved to the front of E, not
 * recomputed, so only a thread's first band recomputes rows another thread also computes.
 * Every value is computed by the kernels the three steps run, row by row (the tiles'
 * results do not depend on how rows are grouped), so the block gives the three steps' bits. */
#include <stdlib.h>
#include <string.h>

#include "common/team.h"
#include "mk_omp.h"
#include "qgemm.h"

/* E and D of a band within this many bytes: they stay in L2 between the three steps */
#define MK_QINVRES_BAND_BYTES (256 * 1024)

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

int mk_qinvres_run(const mk_qinvres *b, const uint8_t *x, void *y, int nthreads) {
    const size_t s = b->stride, H = b->h, W = b->w, chid = b->chid, cin = b->cin;
    if ((s != 1 && s != 2) || b->n == 0 || H == 0 || W == 0 || chid == 0 ||
        (b->pe == NULL && chid != cin) || (b->residual && (s != 1 || cin != b->cout)))
        return -2;
    const size_t OH = (H - 1) / s + 1, OW = (W - 1) / s + 1, rows = b->n * OH;
    /* R output rows a band: E holds their R * s + 2 input rows (at most), D their R rows */
    const size_t per_row = s * W * chid + OW * chid, fixed = 2 * W * chid;
    size_t R = MK_QINVRES_BAND_BYTES > fixed + per_row
                   ? (MK_QINVRES_BAND_BYTES - fixed) / per_row
                   : 1;
    R = R < OH ? R : OH;
    const size_t e_bytes = b->pe != NULL ? round64((R * s + 2) * W * chid) : 0;
    const size_t d_bytes = round64(R * OW * chid), width = b->ep_p.out_u8 ? 1 : sizeof(float);
    mk_qconv_geom band; /* the depthwise over a band's rows of E (h, oh, ph set per band) */
    band.n = 1;
    band.h = R * s + 2;
    band.w = W;
    band.cin = band.cout = chid;
    band.oh = R;
    band.ow = OW;
    band.kh = band.kw = 3;
    band.sh = band.sw = s;
    band.ph = band.pw = 1;
    band.dh = band.dw = 1;
    const size_t scratch = mk_qdw_scratch_bytes(b->isa, &band);
    int nt = nthreads < 1 ? 1 : (size_t)nthreads > rows ? (int)rows : nthreads;
    int failed = 0;
    mk_team_clock clk;
    nt = mk_team_begin(nt, &clk);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const size_t tid = (size_t)omp_get_thread_num(), team = (size_t)omp_get_num_threads();
        const size_t t0 = rows * tid / team, t1 = rows * (tid + 1) / team;
        uint8_t *E = e_bytes ? (uint8_t *)aligned_alloc(64, e_bytes) : NULL;
        uint8_t *D = (uint8_t *)aligned_alloc(64, d_bytes);
        float *acc = (float *)aligned_alloc(64, scratch);
        if ((e_bytes && E == NULL) || D == NULL || acc == NULL) {
#pragma omp atomic write
            failed = 1;
        } else {
            mk_qconv_geom g = band;
            size_t held = (size_t)-1, k0 = 0, k1 = 0; /* E holds rows [k0, k1) of image held */
            for (size_t t = t0; t < t1;) {
                const size_t img = t / OH, y0 = t % OH;
                size_t y1 = y0 + R < OH ? y0 + R : OH;
                if (img * OH + y1 > t1) y1 = t1 - img * OH;
                /* the input rows the band's windows read: [e0, e1) */
                const size_t e0 = y0 > 0 ? y0 * s - 1 : 0;
                const size_t e1 = (y1 - 1) * s + 2 < H ? (y1 - 1) * s + 2 : H;
                const uint8_t *xi = x + img * H * W * cin, *rows_e = xi + e0 * W * cin;
                if (b->pe != NULL) {
                    size_t from = e0;
                    if (held == img && k0 <= e0 && e0 < k1) { /* the rows the last band shares */
                        memmove(E, E + (e0 - k0) * W * chid, (k1 - e0) * W * chid);
                        from = k1;
                    }
                    mk_qconv_pointwise_rows(b->cfg, (e1 - from) * W, cin, chid,
                                            xi + from * W * cin, b->e_scale, b->pe, NULL,
                                            &b->ep_e, E + (from - e0) * W * chid);
                    held = img;
                    k0 = e0;
                    k1 = e1;
                    rows_e = E;
                }
                g.h = e1 - e0;
                g.oh = y1 - y0;
                g.ph = 1 + e0 - y0 * s; /* 1 at the image's top, else 0 */
                mk_qdw_rows(b->isa, &g, rows_e, b->d_zp, b->d_scale, b->pd, NULL, &b->ep_d, D,
                            0, y1 - y0, acc);
                mk_qconv_pointwise_rows(b->cfg, (y1 - y0) * OW, chid, b->cout, D, b->p_scale,
                                        b->pp, b->residual ? xi + y0 * W * cin : NULL, &b->ep_p,
                                        (char *)y + (img * OH + y0) * OW * b->cout * width);
                t = img * OH + y1;
            }
        }
        free(E);
        free(D);
        free(acc);
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    return failed ? -1 : 0;
}
