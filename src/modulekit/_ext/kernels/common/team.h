/* Contention back-off of every parallel region (docs/design.md, "Threads").
 *
 * When another process or another library's thread pool keeps a core busy, an OpenMP team
 * thread that is not scheduled makes the calling thread wait for it at the region's join or
 * at a barrier, up to a scheduler time slice (~100x a batch-1 MLP). Each threaded region
 * times how long its calling thread (team thread 0) waited for the team; a region that waited
 * longer than it worked (and over 20 us) is a strike, and two in a row (or one right after a
 * back-off) make every region of every kernel family run on the calling thread alone for a
 * while: 20 ms, doubled while the contention persists, up to 1 s; a clean parallel region
 * resets it. Only the team size changes, never a kernel's plan, so results do not depend
 * on it.
 *
 * A region:
 *
 *     mk_team_clock clk;
 *     nt = mk_team_begin(nt, &clk);             // nt, or 1 while backing off
 *     #pragma omp parallel num_threads(nt) if (nt > 1)
 *     {
 *         ... work; an inner barrier is MK_TEAM_BARRIER(&clk) ...
 *         MK_TEAM_DONE(&clk);                   // thread 0's work is over
 *     }
 *     mk_team_end(&clk);                        // a strike or a clean region
 *
 * One state for the process: every extension links its own copy of kernels/common, and each
 * binds its copy to the state of modulekit._ext._openmp_helpers at import (mk_team_bind;
 * _openmp_helpers.pxd's bind_team), so a strike seen by the GEMM also makes the convolutions,
 * attention and the row ops serial. The state is a heuristic shared with relaxed atomics.
 *
 * Worker placement (Linux): a sleeping worker that a region wakes can be placed on the
 * calling thread's CPU, where it waits until the caller stops spinning at the join (OpenMP's
 * spin: milliseconds on CPUs with a slow pause, so the first call after an idle pause took
 * 5-20x its steady time). So each worker registers its thread id with its calling thread's
 * at the end of its first region, and a calling thread that starts a region on another CPU
 * than before (or with new workers) first narrows its workers' CPU sets to the process's
 * CPUs but its own (two syscalls per worker, only then); a team of more threads than CPUs
 * gives them back every CPU. The calling thread is never bound. Not done when OpenMP binds
 * its threads (OMP_PROC_BIND) or for a process on one CPU. */
#ifndef MK_COMMON_TEAM_H
#define MK_COMMON_TEAM_H

#include "mk_omp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mk_team_state {
    long long serial_until; /* CLOCK_MONOTONIC ns: regions stay serial until then */
    long long backoff;      /* the current back-off, ns (0: none) */
    int strikes;            /* strikes since the last clean region or back-off */
    unsigned long long regions; /* parallel regions recorded (for tests) */
    int cpus_state;             /* worker placement: 0 unknown, 1 on, -1 off (see above) */
    unsigned long long placements; /* worker CPU sets narrowed (for tests) */
    unsigned char cpus[128];    /* the process's CPUs when first seen (a cpu_set_t's bytes) */
    int ncpus;                  /* how many */
    int nteam;                  /* slots of team[] taken */
    int generation;             /* bumped by each registration */
    struct {
        int master, worker;     /* thread ids: a worker and its calling thread (0: free) */
    } team[64];
} mk_team_state;

/* One region's timing: its start, when thread 0's work ended, thread 0's waits at inner
 * barriers, and its team size. */
typedef struct mk_team_clock {
    long long start, master_done, waited;
    int nt;
    int master_tid; /* the calling thread's id where workers are placed, else 0 */
} mk_team_clock;

/* CLOCK_MONOTONIC, ns. */
long long mk_now_ns(void);

/* Make this copy of kernels/common use *shared (NULL: its own state again); returns the state
 * now used. */
mk_team_state *mk_team_bind(mk_team_state *shared);

/* The state this copy uses now. */
mk_team_state *mk_team_current(void);

/* nthreads, or 1 while backing off; starts *clk. */
int mk_team_begin(int nthreads, mk_team_clock *clk);

/* After the region: records a strike or a clean region (nothing for a serial one). */
void mk_team_end(const mk_team_clock *clk);

/* Record a parallel region of start..end in which the calling thread waited `waited` ns. */
void mk_team_record(long long start, long long end, long long waited);

/* Whether regions run serially now. */
int mk_team_backing_off(void);

/* Forget strikes and back-off. */
void mk_team_reset(void);

/* By a worker at the end of its part of a region: register it with the calling thread
 * (see "Worker placement" above). */
void mk_team_worker_seen(int master_tid);

#define MK_PRAGMA(x) _Pragma(#x)

/* A loop on up to nthreads threads taking chunk iterations at a time from a shared counter
 * (a descheduled thread's iterations go to the others), in the contention back-off:
 *
 *     MK_TEAM_FOR(nthreads, 4)
 *     for (i = 0; i < n; i++) body;
 *     MK_TEAM_FOR_END
 *
 * The loop must be an OpenMP canonical loop, with nothing else between the two macros. */
#define MK_TEAM_FOR(nthreads, chunk)                                  \
    {                                                                 \
        mk_team_clock mk_clk_;                                        \
        const int mk_nt_ = mk_team_begin((nthreads), &mk_clk_);       \
        MK_PRAGMA(omp parallel num_threads(mk_nt_) if (mk_nt_ > 1))   \
        {                                                             \
            MK_PRAGMA(omp for schedule(dynamic, chunk) nowait)
#define MK_TEAM_FOR_END                                               \
            MK_TEAM_DONE(&mk_clk_);                                   \
        }                                                             \
        mk_team_end(&mk_clk_);                                        \
    }

/* Inside the region, by every thread: thread 0 notes that its work is over; a worker makes
 * itself known for placement. */
#define MK_TEAM_DONE(clk)                                          \
    do {                                                           \
        if (omp_get_thread_num() == 0) (clk)->master_done = mk_now_ns(); \
        else mk_team_worker_seen((clk)->master_tid);               \
    } while (0)

/* An inner barrier, with thread 0's wait counted. */
#define MK_TEAM_BARRIER(clk)                                                   \
    do {                                                                       \
        const long long mk_b0_ = omp_get_thread_num() == 0 ? mk_now_ns() : 0;  \
        _Pragma("omp barrier")                                                 \
        if (omp_get_thread_num() == 0) (clk)->waited += mk_now_ns() - mk_b0_;  \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif /* MK_COMMON_TEAM_H */
