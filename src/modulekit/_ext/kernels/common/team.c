/* Contention back-off of every parallel region: see team.h. */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getcpu, CPU_* */
#endif
#include "common/team.h"

#include <string.h>
#include <time.h>
#if defined(__linux__)
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define MK_WAIT_MIN_NS 20000LL          /* shorter waits never count */
#define MK_BACKOFF_MIN_NS 20000000LL    /* the first back-off */
#define MK_BACKOFF_MAX_NS 1000000000LL  /* the longest */

static mk_team_state own_state;
static mk_team_state *state = &own_state;

long long mk_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

mk_team_state *mk_team_bind(mk_team_state *shared) {
    state = shared != NULL ? shared : &own_state;
    return state;
}

mk_team_state *mk_team_current(void) { return state; }

int mk_team_backing_off(void) {
    return mk_now_ns() < __atomic_load_n(&state->serial_until, __ATOMIC_RELAXED);
}

/* Whether workers are placed (see team.h); the first call records the process's CPUs (the
 * calling thread's set: the workers inherit it when OpenMP creates them). */
static int mk_placing(void) {
#if defined(__linux__) && MK_OPENMP
    mk_team_state *s = state;
    int on = __atomic_load_n(&s->cpus_state, __ATOMIC_ACQUIRE);
    if (on != 0) return on > 0;
    cpu_set_t cpus;
    on = omp_get_proc_bind() == omp_proc_bind_false && sizeof cpus <= sizeof s->cpus &&
                 sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) > 1
             ? 1
             : -1;
    if (on > 0) {
        memcpy(s->cpus, &cpus, sizeof cpus);
        s->ncpus = CPU_COUNT(&cpus);
    }
    __atomic_store_n(&s->cpus_state, on, __ATOMIC_RELEASE);
    return on > 0;
#else
    return 0;
#endif
}

#if defined(__linux__)
static _Thread_local int mk_tid = 0; /* this thread's id, once asked */

static int mk_gettid(void) {
    if (mk_tid == 0) mk_tid = (int)syscall(SYS_gettid);
    return mk_tid;
}

/* A calling thread's last placement: the CPU avoided (-1: none) and the registrations it
 * covered (per copy of kernels/common: each extension may place the same workers once more).
 * The first placement always runs (no generation is -1). */
static _Thread_local int mk_placed_cpu = -1, mk_placed_generation = -1;

/* Set the CPU sets of master's workers to the process's CPUs but the one master runs on now
 * (avoid), or to all of them (not avoid, or that CPU unknown), unless done for that CPU and
 * these workers already. */
static void mk_team_place(int master, int avoid) {
    mk_team_state *s = state;
    int cpu = avoid ? sched_getcpu() : -1;
    const int gen = __atomic_load_n(&s->generation, __ATOMIC_ACQUIRE);
    cpu_set_t cpus;
    memcpy(&cpus, s->cpus, sizeof cpus);
    if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &cpus))
        cpu = -1; /* unknown, or the caller runs outside the set: nothing to avoid */
    if (cpu == mk_placed_cpu && gen == mk_placed_generation) return;
    mk_placed_cpu = cpu;
    mk_placed_generation = gen;
    if (cpu >= 0) CPU_CLR(cpu, &cpus);
    const int n = __atomic_load_n(&s->nteam, __ATOMIC_ACQUIRE), pid = (int)getpid();
    for (int i = 0; i < n && i < 64; i++) {
        if (__atomic_load_n(&s->team[i].master, __ATOMIC_ACQUIRE) != master) continue;
        const int w = __atomic_load_n(&s->team[i].worker, __ATOMIC_RELAXED);
        /* a worker that has exited (its id no longer in this process) leaves its slot */
        if (w == 0 || syscall(SYS_tgkill, pid, w, 0) != 0) {
            __atomic_store_n(&s->team[i].master, 0, __ATOMIC_RELEASE);
            continue;
        }
        if (sched_setaffinity(w, sizeof cpus, &cpus) == 0)
            __atomic_add_fetch(&s->placements, 1, __ATOMIC_RELAXED);
    }
}

/* The worker's registration in this copy of kernels/common (its calling thread's id). */
static _Thread_local int mk_seen_master = 0;
#endif

void mk_team_worker_seen(int master) {
#if defined(__linux__)
    if (master == 0 || master == mk_seen_master) return;
    mk_seen_master = master;
    mk_team_state *s = state;
    const int w = mk_gettid();
    const int n = __atomic_load_n(&s->nteam, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n && i < 64; i++) /* known (from another extension's copy) */
        if (__atomic_load_n(&s->team[i].worker, __ATOMIC_RELAXED) == w &&
            __atomic_load_n(&s->team[i].master, __ATOMIC_ACQUIRE) == master)
            return;
    const int slot = __atomic_fetch_add(&s->nteam, 1, __ATOMIC_ACQ_REL);
    if (slot >= 64) return; /* full (slots are not reused): this worker is not placed */
    __atomic_store_n(&s->team[slot].worker, w, __ATOMIC_RELAXED);
    __atomic_store_n(&s->team[slot].master, master, __ATOMIC_RELEASE);
    __atomic_add_fetch(&s->generation, 1, __ATOMIC_RELEASE);
#else
    (void)master;
#endif
}

int mk_team_begin(int nthreads, mk_team_clock *clk) {
    clk->waited = 0;
    clk->nt = 1;
    clk->master_tid = 0;
    if (nthreads <= 1) return 1; /* a serial call reads no clock */
    clk->start = clk->master_done = mk_now_ns();
    if (clk->start >= __atomic_load_n(&state->serial_until, __ATOMIC_RELAXED)) clk->nt = nthreads;
#if defined(__linux__)
    if (clk->nt > 1 && mk_placing()) {
        clk->master_tid = mk_gettid();
        /* a team of more threads than CPUs keeps every CPU: its workers would otherwise
         * crowd onto the others while the caller's idles once its share is done */
        mk_team_place(clk->master_tid, clk->nt <= state->ncpus);
    }
#endif
    return clk->nt;
}

void mk_team_end(const mk_team_clock *clk) {
    if (clk->nt <= 1) return;
    const long long end = mk_now_ns();
    mk_team_record(clk->start, end, clk->waited + (end - clk->master_done));
}

void mk_team_record(long long start, long long end, long long waited) {
    mk_team_state *s = state;
    const long long worked = end - start - waited;
    __atomic_add_fetch(&s->regions, 1, __ATOMIC_RELAXED);
    if (waited > MK_WAIT_MIN_NS && waited > worked) {
        long long backoff = __atomic_load_n(&s->backoff, __ATOMIC_RELAXED);
        const int strikes = __atomic_add_fetch(&s->strikes, 1, __ATOMIC_RELAXED);
        if (strikes >= (backoff > 0 ? 1 : 2)) {
            backoff = backoff > 0 ? 2 * backoff : MK_BACKOFF_MIN_NS;
            if (backoff > MK_BACKOFF_MAX_NS) backoff = MK_BACKOFF_MAX_NS;
            __atomic_store_n(&s->backoff, backoff, __ATOMIC_RELAXED);
            __atomic_store_n(&s->serial_until, end + backoff, __ATOMIC_RELAXED);
            __atomic_store_n(&s->strikes, 0, __ATOMIC_RELAXED);
        }
    } else if (__atomic_load_n(&s->strikes, __ATOMIC_RELAXED) != 0 ||
               __atomic_load_n(&s->backoff, __ATOMIC_RELAXED) != 0) {
        __atomic_store_n(&s->strikes, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&s->backoff, 0, __ATOMIC_RELAXED);
    }
}

void mk_team_reset(void) {
    __atomic_store_n(&state->serial_until, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&state->backoff, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&state->strikes, 0, __ATOMIC_RELAXED);
}
