/* Layer-chain driver: a Sequential's run of packed Linear layers (with their fused
 * activations) as one call. Batch-1 MLPs are bound by streaming the weights and by fixed
 * costs per layer (a Python call, an OpenMP region, an output allocation); here the whole
 * chain opens at most one parallel region, and the threads meet at a barrier between layers.
 * Above MK_SMALLM_MAX rows the layers run one mk_gemm_run each (their compute dwarfs those
 * costs, and mk_gemm_run balances row tiles dynamically), still from the reused buffers.
 *
 * Each layer uses the thread count mk_gemm_run would give it alone, split by mk_gemm_part (a
 * fixed share per thread: panels for few rows, rows for many): threads past a layer's count
 * wait at the barrier. The partition never changes how an output element is computed, so
 * the chain is bit-identical to the per-layer path. Threads keep their share of the weights from call to call, so with two
 * threads each core streams its half from its own L2. The calling thread times its waits at
 * the barriers for the contention back-off (gemm.h). */
#include "common/team.h"
#include "gemm.h"
#include "mk_omp.h"

int mk_gemm_chain_plan_threads(size_t nl, const mk_gemm_chain_layer *layers, size_t m,
                               int nthreads) {
    int nt = 1;
    for (size_t i = 0; i < nl && nt < nthreads; i++) {
        const int t = mk_gemm_plan_threads(layers[i].cfg, m, layers[i].n, layers[i].k, nthreads);
        if (t > nt) nt = t;
    }
    return nt;
}

/* Layer i's problem: its input is a (i == 0) or the previous layer's buffer. */
static void mk_chain_problem(mk_gemm_problem *pr, size_t nl, const mk_gemm_chain_layer *layers,
                             size_t i, size_t m, const void *a, ptrdiff_t lda, void *c,
                             void *const bufs[2]) {
    const mk_gemm_chain_layer *L = &layers[i];
    const void *x = i == 0 ? a : bufs[(i - 1) & 1];
    const ptrdiff_t ldx = i == 0 ? lda : (ptrdiff_t)L->k;
    void *y = i + 1 == nl ? c : bufs[i & 1];
    mk_gemm_problem_init(pr, L->cfg, m, L->n, L->k, x, ldx, 1, L->packed, y, L->n, &L->ep);
}

int mk_gemm_chain_run(size_t nl, const mk_gemm_chain_layer *layers, size_t m, const void *a,
                      ptrdiff_t lda, void *c, void *buf0, void *buf1, int nthreads) {
    if (m == 0 || nl == 0) return 0;
    void *const bufs[2] = {buf0, buf1};
    int nt = mk_gemm_chain_plan_threads(nl, layers, m, nthreads);
    int status = 0;
    if (nt > 1 && m > MK_SMALLM_MAX) {
        /* Many rows: the layers' compute dwarfs a region's fixed cost, and mk_gemm_run's own
         * regions hand row tiles over dynamically (a fixed split with barriers would make
         * every layer wait for a thread slowed by another process). */
        for (size_t i = 0; i < nl; i++) {
            mk_gemm_problem pr;
            mk_chain_problem(&pr, nl, layers, i, m, a, lda, c, bufs);
            if (mk_gemm_run(pr.cfg, m, pr.n, pr.k, pr.a, pr.rsa, 1, pr.packed, pr.c, pr.ldc,
                            pr.ep, nthreads) != 0)
                status = -1;
        }
        return status;
    }
    mk_team_clock clk;
    nt = mk_team_begin(nt, &clk);
    if (nt <= 1) {
        for (size_t i = 0; i < nl; i++) {
            mk_gemm_problem pr;
            size_t m0, m1, p0, p1;
            mk_chain_problem(&pr, nl, layers, i, m, a, lda, c, bufs);
            mk_gemm_part(&pr, 0, 1, &m0, &m1, &p0, &p1);
            if (mk_gemm_range(&pr, m0, m1, p0, p1) != 0) status = -1;
        }
        return status;
    }
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), team = omp_get_num_threads();
        for (size_t i = 0; i < nl; i++) {
            const mk_gemm_chain_layer *L = &layers[i];
            int lt = mk_gemm_plan_threads(L->cfg, m, L->n, L->k, nthreads);
            if (lt > team) lt = team; /* the runtime may give fewer threads than asked */
            if (t < lt) {
                mk_gemm_problem pr;
                size_t m0, m1, p0, p1;
                mk_chain_problem(&pr, nl, layers, i, m, a, lda, c, bufs);
                mk_gemm_part(&pr, t, lt, &m0, &m1, &p0, &p1);
                if (mk_gemm_range(&pr, m0, m1, p0, p1) != 0) {
#pragma omp atomic write
                    status = -1;
                }
            }
            if (i + 1 < nl) MK_TEAM_BARRIER(&clk);
        }
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    return status;
}
