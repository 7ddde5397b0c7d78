/* Recurrence driver: a recurrent layer's time loop (RNN, LSTM, GRU) in ONE parallel region.
 *
 * Step s computes the recurrent GEMM G = H_{s-1} W^T (the first rows[s] rows of the state; W
 * packed for cfg, gate blocks of h columns side by side) and then the layer's cell (the
 * step callback: gate math, state update, output write). Each thread owns a range of hidden
 * units [u0, u1), whole panels of every gate block, and computes the GEMM columns of those
 * units' gates and then their cell while the columns are in its caches: no second region for
 * the cell, no thread waiting for another's columns. One barrier per step: the next step's
 * GEMM reads every unit of the state.
 *
 * The state is double-buffered (state, spare): a step reads H_{s-1} from one buffer and the
 * cell writes H_s to the other, so no thread overwrites units another still reads. Rows that
 * drop out (fewer rows next step: sequences that ended) keep their final state in `state`:
 * when the step wrote them to `spare`, the threads owning their units copy them after the
 * step's barrier (before it, `state` is the step's GEMM operand, which the other threads may
 * still be reading); the last step's rows likewise. Rows that join (more rows next step: the
 * reverse direction of sequences of several lengths) get their initial state from `state`
 * (rows past this step's, which its GEMM does not read) before the barrier that precedes their
 * first step. The partition never changes how an element is computed (mk_gemm_range computes
 * each column as mk_gemm_run does), so the result is bit-identical to a GEMM call and a cell
 * call per step.
 * The calling thread times its waits at the barriers for the contention back-off (gemm.h). */
#include <string.h>

#include "common/team.h"
#include "gemm.h"
#include "mk_omp.h"

/* Rows [i0, i1) of state buffer `from`, units [u0, u1), into state buffer `to`. */
static void recurrence_copy(const mk_gemm_recurrence *r, unsigned char *to,
                            const unsigned char *from, size_t i0, size_t i1, size_t u0,
                            size_t u1) {
    const size_t h = r->h, es = r->cfg->esize;
    for (size_t i = i0; i < i1; i++)
        memcpy(to + (i * h + u0) * es, from + (i * h + u0) * es, (u1 - u0) * es);
}

/* Thread t of team: steps of units [u0, u1), a barrier after each (clk: the team's clock;
 * NULL when the calling thread runs alone). Returns 0 or -1 (a packing buffer). */
static int recurrence_thread(const mk_gemm_recurrence *r, size_t u0, size_t u1,
                             mk_team_clock *clk) {
    const mk_gemm_config *cfg = r->cfg;
    const size_t h = r->h, n = r->gates * h, nr = cfg->nr;
    unsigned char *bufs[2] = {(unsigned char *)r->state, (unsigned char *)r->spare};
    int cur = 0, status = 0;
    size_t end0 = 0, end1 = 0; /* rows of bufs[cur] that ended at the last step run */
    for (size_t s = 0; s < r->steps; s++) {
        const size_t m = r->rows[s];
        if (m == 0) continue;
        /* rows that ended: no thread reads them now (this step's rows are fewer) */
        recurrence_copy(r, bufs[0], bufs[cur], end0, end1, u0, u1);
        unsigned char *prev = bufs[cur], *next = bufs[cur ^ 1];
        /* the rows of the next step that runs (0: none) */
        size_t after = 0;
        for (size_t q = s + 1; q < r->steps && after == 0; q++) after = r->rows[q];
        if (u0 < u1) {
            mk_gemm_problem pr;
            mk_gemm_problem_init(&pr, cfg, m, n, h, prev, (ptrdiff_t)h, 1, r->packed, r->g, n,
                                 r->ep);
            for (size_t k = 0; k < r->gates; k++)
                if (mk_gemm_range(&pr, 0, m, (k * h + u0) / nr, (k * h + u1) / nr) != 0)
                    status = -1;
            r->step(r->ctx, s, m, u0, u1, prev, next);
            if (next != bufs[0]) /* rows that join next: their initial one */
                recurrence_copy(r, next, bufs[0], m, after, u0, u1);
        }
        end0 = after;
        end1 = next != bufs[0] && after < m ? m : after;
        cur ^= 1;
        if (clk != NULL) MK_TEAM_BARRIER(clk);
    }
    recurrence_copy(r, bufs[0], bufs[cur], end0, end1, u0, u1); /* after the last barrier */
    return status;
}

int mk_gemm_recurrence_run(const mk_gemm_recurrence *r, int nthreads) {
    const size_t nr = r->cfg->nr, blocks = r->h / nr;
    if (r->h % nr != 0) return -2;
    size_t m = 0;
    for (size_t s = 0; s < r->steps && m == 0; s++) m = r->rows[s];
    if (m == 0) return 0;
    int nt = mk_gemm_plan_threads(r->cfg, m, r->gates * r->h, r->h, nthreads);
    if ((size_t)nt > blocks) nt = (int)blocks;
    mk_team_clock clk;
    nt = mk_team_begin(nt, &clk);
    if (nt <= 1) return recurrence_thread(r, 0, r->h, NULL);
    int status = 0;
#pragma omp parallel num_threads(nt)
    {
        const size_t t = (size_t)omp_get_thread_num(), team = (size_t)omp_get_num_threads();
        const size_t u0 = blocks * t / team * nr, u1 = blocks * (t + 1) / team * nr;
        if (recurrence_thread(r, u0, u1, &clk) != 0) {
#pragma omp atomic write
            status = -1;
        }
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    return status;
}
