/* GEMM driver: cache blocking (BLIS loop order), activation packing, the small-M path and
 * OpenMP over output tiles. Block sizes and kernels come from the configuration only.
 *
 * Per thread, on its rows [m0, m1) and panels [p0, p1) (a fixed share, or tiles taken from a
 * shared counter when there are many rows):
 *   for jc over panels in NC-column blocks          (KC x NC weight block: L2/L3)
 *     for pc over K in KC blocks                     (first block starts from the bias,
 *       for ic over rows in MC blocks                  the last applies the epilogue)
 *         pack A[ic:ic+MC, pc:pc+KC] into MR-row micro-panels     (MC x KC block: L2)
 *         for jr over panels: for ir over MR rows: microkernel    (KC x NR micro-panel: L1)
 * The split of rows and panels over threads never changes how one output element is
 * computed, so the result does not depend on the thread count. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "common/team.h"
#include "gemm.h"
#include "mk_omp.h"

/* Below this many multiply-adds a call stays on the calling thread (a libgomp region costs
 * 1-2 us while its team spins and much more after idling; OpenBLAS uses 2^18). */
#define MK_GEMM_PARALLEL_MIN_MACS (1u << 19)
/* Small-M calls are bound by reading the weights: split them over the threads once they
 * exceed this many bytes, so each core streams its share from its own L2. */
#define MK_GEMM_PARALLEL_MIN_WEIGHT_BYTES (256u << 10)

static size_t mk_min(size_t a, size_t b) { return a < b ? a : b; }

/* A thread's buffer *buf of *cap bytes, grown (whole pages) to hold `bytes`; NULL when it
 * could not be. */
static void *mk_grow(void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        free(*buf);
        const size_t want = (bytes + 4095) / 4096 * 4096;
        *buf = aligned_alloc(64, want);
        *cap = *buf != NULL ? want : 0;
    }
    return *buf;
}

/* Per-thread packing buffer, kept between calls (OpenMP worker threads persist). */
static _Thread_local void *mk_tl_buf = NULL;
static _Thread_local size_t mk_tl_cap = 0;

static void *mk_tl_buffer(size_t bytes) { return mk_grow(&mk_tl_buf, &mk_tl_cap, bytes); }

static int mk_rowdirect_on = 1;

/* Unit-stride A with more than MK_SMALLM_MAX rows: the MR-row direct kernel straight from the
 * rows of A (no packing, the whole K in one pass), panel by panel over an MC-row block; the
 * rows past the last MR multiple use the small-M kernel for their count, over the same pair
 * of panels (the 1-row kernel takes two per call). Each element is accumulated as the packed
 * path accumulates it (bias, then k in order), so the results are bit-identical to it.
 * While the calls on one pair of panels run, they prefetch the pair that comes next into L2
 * in equal slices (the first pair of the block again when another row block follows): the
 * first row group of a pair no longer waits for DRAM. */
static void mk_gemm_range_rows(const mk_gemm_problem *pr, size_t m0, size_t m1, size_t p0,
                               size_t p1) {
    const mk_gemm_config *cfg = pr->cfg;
    const size_t nr = cfg->nr, mr = cfg->mr, es = cfg->esize;
    const size_t MC = mk_gemm_mc(cfg), NCP = cfg->nc / nr ? cfg->nc / nr : 1;
    const mk_gemm_smallm_ukernel kmr = cfg->smallm[mr];
    for (size_t jc = p0; jc < p1; jc += NCP) {
        const size_t jend = mk_min(jc + NCP, p1);
        for (size_t ic = m0; ic < m1; ic += MC) {
            const size_t iend = mk_min(ic + MC, m1);
            const size_t ifull = ic + (iend - ic) / mr * mr, rem = iend - ifull;
            for (size_t jr = jc; jr < jend; jr += 2) {
                const size_t pend = mk_min(jr + 2, jend);
                const size_t np = rem ? cfg->smallm_np[rem] : 1;
                const size_t q0 = pend < jend ? pend : (iend < m1 ? jc : jend);
                const size_t q1 = q0 < p1 ? mk_min(q0 + 2, p1) : q0;
                const size_t lines = (q1 - q0) * pr->ps / 64;
                const size_t calls =
                    (ifull - ic) / mr * (pend - jr) + (rem ? (pend - jr + np - 1) / np : 0);
                const unsigned char *pf = pr->packed + q0 * pr->ps;
                size_t call = 0, done = 0;
                for (size_t ir = ic; ir < ifull; ir += mr) {
                    const unsigned char *arow =
                        pr->a + (ptrdiff_t)ir * pr->rsa * (ptrdiff_t)es;
                    for (size_t p = jr; p < pend; p++) {
                        const size_t to = lines * ++call / calls;
                        kmr(mk_min(nr, pr->n - p * nr), pr->k, arow, pr->rsa,
                            pr->packed + p * pr->ps, pr->ps,
                            pr->c + (ir * pr->ldc + p * nr) * es, pr->ldc, pr->ep,
                            pf + done * 64, to - done);
                        done = to;
                    }
                }
                if (rem) {
                    const mk_gemm_smallm_ukernel kr = cfg->smallm[rem];
                    const unsigned char *arow =
                        pr->a + (ptrdiff_t)ifull * pr->rsa * (ptrdiff_t)es;
                    for (size_t p = jr; p < pend; p += np) {
                        const size_t to = lines * ++call / calls;
                        kr(mk_min(mk_min(np, pend - p) * nr, pr->n - p * nr), pr->k, arow,
                           pr->rsa, pr->packed + p * pr->ps, pr->ps,
                           pr->c + (ifull * pr->ldc + p * nr) * es, pr->ldc, pr->ep,
                           pf + done * 64, to - done);
                        done = to;
                    }
                }
            }
        }
    }
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
            /* no software prefetch here: prefetching the next call's panels made 3-8 rows
             * 23-26% faster with the weights in DRAM (MiniLM-size layers) but 10-29% slower
             * with them in L3 (a 1024 x 1024 layer), and one row slower in both */
            kern(cols, pr->k, pr->a, pr->rsa, pr->packed + p * pr->ps, pr->ps,
                 pr->c + p * nr * es, pr->ldc, pr->ep, NULL, 0);
        }
        return 0;
    }

    const size_t KC = cfg->kc, MC = mk_gemm_mc(cfg), NCP = cfg->nc / nr ? cfg->nc / nr : 1;

    if (pr->rowdirect) {
        mk_gemm_range_rows(pr, m0, m1, p0, p1);
        return 0;
    }

    /* packed A: asize bytes per element, K rounded up to kpad (bfloat16 configurations) */
    const size_t as = cfg->asize ? cfg->asize : es, kq = cfg->kpad > 1 ? cfg->kpad : 1;
    const size_t mc_max = (mk_min(MC, m1 - m0) + mr - 1) / mr * mr;
    const size_t kc_max = (mk_min(KC, pr->k ? pr->k : 1) + kq - 1) / kq * kq;
    unsigned char *abuf = (unsigned char *)mk_tl_buffer(mc_max * kc_max * as);
    if (abuf == NULL) return -1;
    if (cfg->begin != NULL) cfg->begin(); /* AMX: this thread's tile configuration */

    for (size_t jc = p0; jc < p1; jc += NCP) {
        const size_t jend = mk_min(jc + NCP, p1);
        size_t pc = 0;
        do {
            const size_t kc = mk_min(KC, pr->k - pc), kcp = (kc + kq - 1) / kq * kq;
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
                        cfg->ukernel(mk_min(mr, mc - ir), ncols, kc, abuf + ir * kcp * as, w,
                                     cblk + ir * pr->ldc * es, pr->ldc, first ? panel : NULL,
                                     last ? pr->ep : NULL);
                    }
                }
            }
            pc += kc;
        } while (pc < pr->k);
    }
    if (cfg->end != NULL) cfg->end(); /* AMX: release the tiles */
    return 0;
}

static int mk_use_direct(const mk_gemm_config *cfg, size_t m, ptrdiff_t csa) {
    (void)csa; /* A with a non-unit column stride is copied first */
    return m <= MK_SMALLM_MAX && cfg->smallm[m] != NULL;
}

/* More rows than the small-M path takes: the MR-row direct kernel on unit-stride rows of A
 * (every count below MR has its small-M kernel too), or else packing. */
int mk_gemm_set_rowdirect(int on) {
    return __atomic_exchange_n(&mk_rowdirect_on, on != 0, __ATOMIC_RELAXED);
}

static int mk_use_rowdirect(const mk_gemm_config *cfg, ptrdiff_t csa) {
    if (csa != 1 || cfg->mr > MK_SMALLM_MAX || !__atomic_load_n(&mk_rowdirect_on, __ATOMIC_RELAXED))
        return 0;
    for (size_t r = 1; r <= cfg->mr; r++)
        if (cfg->smallm[r] == NULL) return 0;
    return cfg->smallm_np[cfg->mr] == 1;
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
    pr->rowdirect = !pr->direct && mk_use_rowdirect(cfg, csa);
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

/* Inside a parallel region of team threads: the output tiles of pr (not the direct path)
 * from a shared counter (an orphaned omp for, no barrier at its end). Tiles are row blocks
 * (whole N) when there are enough row tiles and A is not much smaller than the weights,
 * else panel blocks (all rows); their count is a multiple of the team and at least 4 per
 * thread, so a thread that loses its core to another process leaves its tiles to the
 * others instead of making them all wait. */
static int mk_gemm_row_tiles(const mk_gemm_problem *pr, int team) {
    const size_t mr = pr->cfg->mr, nr = pr->cfg->nr;
    const size_t panels = (pr->n + nr - 1) / nr, mtiles = (pr->m + mr - 1) / mr;
    return !pr->direct && mtiles >= (size_t)(4 * team) &&
           (2 * pr->m >= pr->n || panels < 2 * (size_t)team);
}

/* The tiling mk_gemm_tiles hands out: units, and each unit's rows (rows_per, 0: all) or
 * panels (panels_per). */
static size_t mk_gemm_tiling(const mk_gemm_problem *pr, int team, size_t *rows_per,
                             size_t *panels_per) {
    const size_t mr = pr->cfg->mr, nr = pr->cfg->nr;
    const size_t panels = (pr->n + nr - 1) / nr, mtiles = (pr->m + mr - 1) / mr;
    const size_t want = (size_t)(4 * team);
    *rows_per = 0;
    *panels_per = panels;
    if (mk_gemm_row_tiles(pr, team)) {
        const size_t mc = mk_gemm_mc(pr->cfg);
        size_t u = (pr->m + mc - 1) / mc;
        if (u < want) u = want;
        u = (u + (size_t)team - 1) / (size_t)team * (size_t)team;
        if (u > mtiles) u = mtiles;
        *rows_per = (mtiles + u - 1) / u * mr;
        return (pr->m + *rows_per - 1) / *rows_per;
    }
    size_t u = want < panels ? want : panels;
    *panels_per = (panels + u - 1) / u;
    return (panels + *panels_per - 1) / *panels_per;
}

static int mk_gemm_tile(const mk_gemm_problem *pr, size_t u, size_t rows_per,
                        size_t panels_per) {
    const size_t panels = (pr->n + pr->cfg->nr - 1) / pr->cfg->nr;
    size_t m0 = 0, m1 = pr->m, p0 = 0, p1 = panels;
    if (rows_per) {
        m0 = u * rows_per;
        m1 = mk_min(pr->m, m0 + rows_per);
    } else {
        p0 = u * panels_per;
        p1 = mk_min(panels, p0 + panels_per);
    }
    return mk_gemm_range(pr, m0, m1, p0, p1);
}

static int mk_gemm_tiles(const mk_gemm_problem *pr, int team) {
    size_t rows_per, panels_per;
    const size_t units = mk_gemm_tiling(pr, team, &rows_per, &panels_per);
    int status = 0;
#pragma omp for schedule(dynamic, 1) nowait
    for (size_t u = 0; u < units; u++)
        if (mk_gemm_tile(pr, u, rows_per, panels_per) != 0) status = -1;
    return status;
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
    mk_team_clock clk;
    const int nt = mk_team_begin(mk_gemm_plan_threads(cfg, m, n, k, nthreads), &clk);
    if (nt <= 1) {
        size_t m0, m1, p0, p1;
        mk_gemm_part(&pr, 0, 1, &m0, &m1, &p0, &p1);
        return mk_gemm_range(&pr, m0, m1, p0, p1);
    }
    int status = 0;
#pragma omp parallel num_threads(nt)
    {
        const int team = omp_get_num_threads();
        int rc;
        if (mk_gemm_row_tiles(&pr, team)) {
            /* many rows: row tiles from a shared counter (every thread reads all the weights
             * anyway; a thread slowed by another process hands its tiles over) */
            rc = mk_gemm_tiles(&pr, team);
        } else {
            /* a fixed share of the weights per thread, the same from call to call, so each
             * core keeps streaming its share from its own cache */
            size_t m0, m1, p0, p1;
            mk_gemm_part(&pr, omp_get_thread_num(), team, &m0, &m1, &p0, &p1);
            rc = mk_gemm_range(&pr, m0, m1, p0, p1);
        }
        if (rc != 0) {
#pragma omp atomic write
            status = -1;
        }
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    return status;
}

/* ---------------------------------------------------------------- matmul (B not packed) */

/* Panels per packing chunk of mk_gemm_matmul. */
#define MK_MM_PACK_CHUNK 4

/* The calling thread's packed-B buffer, kept between calls up to this size: a fresh
 * allocation of megabytes is a fresh mapping, and touching its pages costs about as much as
 * packing into them. */
#define MK_MM_KEEP_BYTES ((size_t)32 << 20)
static _Thread_local void *mk_tl_bbuf = NULL;
static _Thread_local size_t mk_tl_bcap = 0;

static void *mk_mm_buffer(size_t bytes) {
    if (bytes > MK_MM_KEEP_BYTES) return aligned_alloc(64, (bytes + 63) / 64 * 64);
    return mk_grow(&mk_tl_bbuf, &mk_tl_bcap, bytes);
}

static void mk_mm_release(void *buf) {
    if (buf != mk_tl_bbuf) free(buf);
}

/* Spin until *flag is nonzero (pause, then yield: the thread it waits for may need this
 * core). */
static void mk_mm_wait(const size_t *flag) {
    for (unsigned spins = 0; !__atomic_load_n(flag, __ATOMIC_ACQUIRE); spins++) {
        if (spins < 4096) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        } else {
            sched_yield();
        }
    }
}

/* Panels per chunk of the pipelined matmul (at most MK_MM_PIPE_MAX chunks), and how many
 * chunks packing may run ahead of the chunk being computed. */
#define MK_MM_PIPE_CHUNK 4
#define MK_MM_PIPE_MAX 256
#define MK_MM_PIPE_AHEAD 2

/* The row-direct matmul on a team of nt threads, packing B pipelined with the compute:
 * B is packed in chunks of panels, claimed in order from a shared counter up to
 * MK_MM_PIPE_AHEAD chunks past the one being computed; as soon as chunk j is packed, the
 * threads compute it in MC-row tiles from its own counter, and a thread moves on to chunk
 * j + 1 without waiting for the others. Every element is computed by the same kernel call
 * sequence over the whole K as in mk_gemm_run, so the result is bit-identical to it.
 * Returns the time the master spent waiting for packed chunks (ns). */
static void mk_mm_pipelined(const mk_gemm_problem *pr, const void *b, ptrdiff_t rsb,
                            ptrdiff_t csb, int nt, mk_team_clock *clk, int *status) {
    const mk_gemm_config *cfg = pr->cfg;
    const size_t nr = cfg->nr, mr = cfg->mr, ws = cfg->wsize;
    const size_t panels = (pr->n + nr - 1) / nr;
    size_t cp = (panels + MK_MM_PIPE_MAX - 1) / MK_MM_PIPE_MAX;
    if (cp < MK_MM_PIPE_CHUNK) cp = MK_MM_PIPE_CHUNK;
    const size_t nch = (panels + cp - 1) / cp;
    const size_t rows_per = (mk_gemm_mc(cfg) + mr - 1) / mr * mr;
    const size_t units = (pr->m + rows_per - 1) / rows_per;
    size_t ready[MK_MM_PIPE_MAX], next[MK_MM_PIPE_MAX], claimed = 0;
    memset(ready, 0, nch * sizeof ready[0]);
    memset(next, 0, nch * sizeof next[0]);
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num();
        int rc = 0;
        for (size_t j = 0; j < nch; j++) {
            for (;;) { /* pack ahead */
                size_t ch = __atomic_load_n(&claimed, __ATOMIC_RELAXED);
                if (ch >= nch || ch > j + MK_MM_PIPE_AHEAD) break;
                if (!__atomic_compare_exchange_n(&claimed, &ch, ch + 1, 0, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED))
                    continue;
                const size_t p0 = ch * cp, n0 = p0 * nr;
                mk_gemm_pack(cfg, mk_min(cp * nr, pr->n - n0), pr->k,
                             (const unsigned char *)b + (ptrdiff_t)n0 * csb * (ptrdiff_t)ws,
                             rsb, csb, NULL, (unsigned char *)pr->packed + p0 * pr->ps, 1);
                __atomic_store_n(&ready[ch], 1, __ATOMIC_RELEASE);
            }
            if (!__atomic_load_n(&ready[j], __ATOMIC_ACQUIRE)) {
                const long long w0 = t == 0 ? mk_now_ns() : 0;
                mk_mm_wait(&ready[j]);
                if (t == 0) clk->waited += mk_now_ns() - w0;
            }
            const size_t p0 = j * cp, p1 = mk_min(panels, p0 + cp);
            for (;;) {
                const size_t u = __atomic_fetch_add(&next[j], 1, __ATOMIC_RELAXED);
                if (u >= units) break;
                const size_t m0 = u * rows_per;
                if (mk_gemm_range(pr, m0, mk_min(pr->m, m0 + rows_per), p0, p1) != 0) rc = -1;
            }
        }
        if (rc != 0) {
#pragma omp atomic write
            *status = -1;
        }
        MK_TEAM_DONE(clk);
    }
}

int mk_gemm_matmul(const mk_gemm_config *cfg, size_t m, size_t n, size_t k, const void *a,
                   ptrdiff_t rsa, ptrdiff_t csa, const void *b, ptrdiff_t rsb, ptrdiff_t csb,
                   void *c, size_t ldc, int nthreads) {
    if (m == 0 || n == 0) return 0;
    const size_t nr = cfg->nr, ws = cfg->wsize, ps = mk_gemm_panel_stride(cfg, k);
    const size_t panels = (n + nr - 1) / nr;
    unsigned char *packed = (unsigned char *)mk_mm_buffer(mk_gemm_packed_size(cfg, n, k));
    if (packed == NULL) return -1;
    const mk_epilogue ep = {MK_ACT_NONE, 0.0f, 0.0f, 0.0, 0.0};
    int status = 0;
    const int direct = mk_use_direct(cfg, m, csa);
    mk_team_clock clk;
    const int nt = direct ? 1 : mk_team_begin(mk_gemm_plan_threads(cfg, m, n, k, nthreads), &clk);
    if (direct || nt <= 1) {
        /* one thread, or the direct path (its own threading over panels) */
        mk_gemm_pack(cfg, n, k, b, rsb, csb, NULL, packed, nthreads);
        status = mk_gemm_run(cfg, m, n, k, a, rsa, csa, packed, c, ldc, &ep, nthreads);
        mk_mm_release(packed);
        return status;
    }
    mk_gemm_problem pr;
    mk_gemm_problem_init(&pr, cfg, m, n, k, a, rsa, csa, packed, c, ldc, &ep);
    if (pr.rowdirect && mk_gemm_row_tiles(&pr, nt)) {
        mk_mm_pipelined(&pr, b, rsb, csb, nt, &clk, &status);
        mk_team_end(&clk);
        mk_mm_release(packed);
        return status;
    }
    const size_t chunks = (panels + MK_MM_PACK_CHUNK - 1) / MK_MM_PACK_CHUNK;
    size_t packed_chunks = 0;
#pragma omp parallel num_threads(nt)
    {
        /* Pack B: chunks of panels from a shared counter, no barrier after; a thread goes on
         * as soon as every chunk is packed, even when another thread has not been scheduled
         * yet (a barrier would wait for it). */
#pragma omp for schedule(dynamic, 1) nowait
        for (size_t ch = 0; ch < chunks; ch++) {
            const size_t p0 = ch * MK_MM_PACK_CHUNK, n0 = p0 * nr;
            const size_t ncols = mk_min(MK_MM_PACK_CHUNK * nr, n - n0);
            mk_gemm_pack(cfg, ncols, k,
                         (const unsigned char *)b + (ptrdiff_t)n0 * csb * (ptrdiff_t)ws, rsb,
                         csb, NULL, packed + p0 * ps, 1);
            /* release: this chunk's packed panels before the count that announces them */
            __atomic_add_fetch(&packed_chunks, 1, __ATOMIC_RELEASE);
        }
        const int t = omp_get_thread_num();
        const long long w0 = t == 0 ? mk_now_ns() : 0;
        for (unsigned spins = 0;; spins++) {
            /* acquire: every chunk counted is packed and visible before the tiles read it
             * (OpenMP's atomic read / update are relaxed: no order for the panels) */
            const size_t done = __atomic_load_n(&packed_chunks, __ATOMIC_ACQUIRE);
            if (done == chunks) break;
            if (spins < 4096) {
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#endif
            } else {
                sched_yield(); /* the packing thread may be waiting for this core */
            }
        }
        if (t == 0) clk.waited += mk_now_ns() - w0;
        if (mk_gemm_tiles(&pr, omp_get_num_threads()) != 0) {
#pragma omp atomic write
            status = -1;
        }
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    mk_mm_release(packed);
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
