/* GEMM driver: cache blocking (BLIS loop order), activation packing, the small-M path and
 * OpenMP over output tiles. Block sizes and kernels come from the configuration only.
 *
 * Per thread, on its rows [m0, m1) and panels [p0, p1):
 *   for jc over panels in NC-column blocks          (KC x NC weight block: L2/L3)
 *     for pc over K in KC blocks                     (first block starts from the bias,
 *       for ic over rows in MC blocks                  the last applies the epilogue)
 *         pack A[ic:ic+MC, pc:pc+KC] into MR-row micro-panels     (MC x KC block: L2)
 *         for jr over panels: for ir over MR rows: microkernel    (KC x NR micro-panel: L1)
 * The split of rows and panels over threads never changes how one output element is
 * computed, so the result does not depend on the thread count. */
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "mk_omp.h"

/* Below this many multiply-adds a call stays on the calling thread (a libgomp region costs
 * 1-2 us while its team spins and much more after idling; OpenBLAS uses 2^18). */
#define MK_GEMM_PARALLEL_MIN_MACS (1u << 19)
/* Small-M calls are bound by reading the weights: split them over the threads once they
 * exceed this many bytes, so each core streams its share from its own L2. */
#define MK_GEMM_PARALLEL_MIN_WEIGHT_BYTES (256u << 10)

static size_t mk_min(size_t a, size_t b) { return a < b ? a : b; }

/* Per-thread packing buffer, kept between calls (OpenMP worker threads persist). */
static _Thread_local void *mk_tl_buf = NULL;
static _Thread_local size_t mk_tl_cap = 0;

static void *mk_tl_buffer(size_t bytes) {
    if (bytes > mk_tl_cap) {
        free(mk_tl_buf);
        const size_t cap = (bytes + 4095) / 4096 * 4096;
        mk_tl_buf = aligned_alloc(64, cap);
        mk_tl_cap = mk_tl_buf != NULL ? cap : 0;
    }
    return mk_tl_buf;
}

int mk_gemm_range(const mk_gemm_problem *pr, size_t m0, size_t m1, size_t p0, size_t p1) {
    const mk_gemm_config *cfg = pr->cfg;
    const size_t nr = cfg->nr, mr = cfg->mr, es = cfg->esize, ws = cfg->wsize;
    if (m0 >= m1 || p0 >= p1) return 0;

    if (pr->direct) {
        const mk_gemm_smallm_ukernel kern = cfg->smallm[pr->m];
        const size_t np = cfg->smallm_np[pr->m];
        for (size_t p = p0; p < p1; p += np) {
            const size_t cols = mk_min(mk_min(np, p1 - p) * nr, pr->n - p * nr);
            kern(cols, pr->k, pr->a, pr->rsa, pr->packed + p * pr->ps, pr->ps,
                 pr->c + p * nr * es, pr->ldc, pr->ep);
        }
        return 0;
    }

    const size_t KC = cfg->kc, MC = cfg->mc, NCP = cfg->nc / nr ? cfg->nc / nr : 1;
    const size_t mc_max = (mk_min(MC, m1 - m0) + mr - 1) / mr * mr;
    unsigned char *abuf = (unsigned char *)mk_tl_buffer(mc_max * mk_min(KC, pr->k ? pr->k : 1) * es);
    if (abuf == NULL) return -1;

    for (size_t jc = p0; jc < p1; jc += NCP) {
        const size_t jend = mk_min(jc + NCP, p1);
        size_t pc = 0;
        do {
            const size_t kc = mk_min(KC, pr->k - pc);
            const int first = pc == 0, last = pc + kc >= pr->k;
            for (size_t ic = m0; ic < m1; ic += MC) {
                const size_t mc = mk_min(MC, m1 - ic);
                const unsigned char *ablk = pr->a + ((ptrdiff_t)ic * pr->rsa + (ptrdiff_t)pc * pr->csa) * (ptrdiff_t)es;
                cfg->pack_a(mc, kc, mr, ablk, pr->rsa, pr->csa, abuf);
                for (size_t jr = jc; jr < jend; jr++) {
                    const unsigned char *panel = pr->packed + jr * pr->ps;
                    const unsigned char *w = panel + nr * es + pc * nr * ws;
                    const size_t ncols = mk_min(nr, pr->n - jr * nr);
                    unsigned char *cblk = pr->c + (ic * pr->ldc + jr * nr) * es;
                    for (size_t ir = 0; ir < mc; ir += mr) {
                        cfg->ukernel(mk_min(mr, mc - ir), ncols, kc, abuf + ir * kc * es, w,
                                     cblk + ir * pr->ldc * es, pr->ldc, first ? panel : NULL,
                                     last ? pr->ep : NULL);
                    }
                }
            }
            pc += kc;
        } while (pc < pr->k);
    }
    return 0;
}

static int mk_use_direct(const mk_gemm_config *cfg, size_t m, ptrdiff_t csa) {
    (void)csa; /* A with a non-unit column stride is copied first */
    return m <= MK_SMALLM_MAX && cfg->smallm[m] != NULL;
}

void mk_gemm_problem_init(mk_gemm_problem *pr, const mk_gemm_config *cfg, size_t m, size_t n,
                          size_t k, const void *a, ptrdiff_t rsa, ptrdiff_t csa,
                          const void *packed, void *c, size_t ldc, const mk_epilogue *ep) {
    pr->cfg = cfg;
    pr->m = m;
    pr->n = n;
    pr->k = k;
    pr->ps = mk_gemm_panel_stride(cfg, k);
    pr->a = (const unsigned char *)a;
    pr->rsa = rsa;
    pr->csa = csa;
    pr->packed = (const unsigned char *)packed;
    pr->c = (unsigned char *)c;
    pr->ldc = ldc;
    pr->ep = ep;
    pr->direct = mk_use_direct(cfg, m, csa);
}

int mk_gemm_plan_threads(const mk_gemm_config *cfg, size_t m, size_t n, size_t k,
                         int nthreads) {
    const int direct = mk_use_direct(cfg, m, 1);
    if (nthreads <= 1) return 1;
    if (direct ? (double)n * (double)k * (double)cfg->wsize < MK_GEMM_PARALLEL_MIN_WEIGHT_BYTES
               : (double)m * (double)n * (double)k < MK_GEMM_PARALLEL_MIN_MACS)
        return 1;
    const size_t panels = (n + cfg->nr - 1) / cfg->nr, mtiles = (m + cfg->mr - 1) / cfg->mr;
    const size_t units = direct ? panels : panels * mtiles;
    return (size_t)nthreads < units ? nthreads : (int)units;
}

/* Thread t of nt: its rows and panels. Rows are split (in MR multiples) when there are
 * enough row tiles and A is not much smaller than the weights (BLIS: the threads share the
 * weight panels, each packs its own rows); otherwise panels are split, so each thread
 * streams only its share of the weights (batch-1 .. batch-64 style problems). */
void mk_gemm_part(const mk_gemm_problem *pr, int t, int nt, size_t *m0, size_t *m1, size_t *p0,
                  size_t *p1) {
    const size_t mr = pr->cfg->mr, nr = pr->cfg->nr;
    const size_t panels = (pr->n + nr - 1) / nr, mtiles = (pr->m + mr - 1) / mr;
    int tm = 1;
    if (!pr->direct && (2 * pr->m >= pr->n || panels < (size_t)(2 * nt))) {
        for (int d = nt; d >= 1; d--) {
            if (nt % d == 0 && (d == 1 || mtiles >= (size_t)(2 * d))) {
                tm = d;
                break;
            }
        }
    }
    const int tn = nt / tm, ti = t / tn, tj = t % tn;
    const size_t r0 = mtiles * (size_t)ti / (size_t)tm, r1 = mtiles * (size_t)(ti + 1) / (size_t)tm;
    *m0 = mk_min(r0 * mr, pr->m);
    *m1 = mk_min(r1 * mr, pr->m);
    *p0 = panels * (size_t)tj / (size_t)tn;
    *p1 = panels * (size_t)(tj + 1) / (size_t)tn;
}

int mk_gemm_run(const mk_gemm_config *cfg, size_t m, size_t n, size_t k, const void *a,
                ptrdiff_t rsa, ptrdiff_t csa, const void *packed, void *c, size_t ldc,
                const mk_epilogue *ep, int nthreads) {
    if (m == 0 || n == 0) return 0;
    mk_gemm_problem pr;
    mk_gemm_problem_init(&pr, cfg, m, n, k, a, rsa, csa, packed, c, ldc, ep);
    if (pr.direct && csa != 1 && k > 1) {
        /* the direct kernels read rows with unit stride: copy the (at most 8) rows */
        unsigned char *buf = (unsigned char *)mk_tl_buffer(m * k * cfg->esize);
        if (buf == NULL) return -1;
        for (size_t i = 0; i < m; i++)
            for (size_t kk = 0; kk < k; kk++)
                memcpy(buf + (i * k + kk) * cfg->esize,
                       pr.a + ((ptrdiff_t)i * rsa + (ptrdiff_t)kk * csa) * (ptrdiff_t)cfg->esize,
                       cfg->esize);
        pr.a = buf;
        pr.rsa = (ptrdiff_t)k;
        pr.csa = 1;
    }
    const int nt = mk_gemm_plan_threads(cfg, m, n, k, nthreads);
    if (nt <= 1) {
        size_t m0, m1, p0, p1;
        mk_gemm_part(&pr, 0, 1, &m0, &m1, &p0, &p1);
        return mk_gemm_range(&pr, m0, m1, p0, p1);
    }
    int status = 0;
#pragma omp parallel num_threads(nt)
    {
        size_t m0, m1, p0, p1;
        mk_gemm_part(&pr, omp_get_thread_num(), omp_get_num_threads(), &m0, &m1, &p0, &p1);
        if (mk_gemm_range(&pr, m0, m1, p0, p1) != 0) {
#pragma omp atomic write
            status = -1;
        }
    }
    return status;
}

void mk_gemm_warm_threads(int nthreads) {
    if (nthreads <= 1) return;
    volatile int sink = 0;
#pragma omp parallel num_threads(nthreads)
    {
        if (omp_get_thread_num() == 0) sink = omp_get_num_threads();
    }
    (void)sink;
}
