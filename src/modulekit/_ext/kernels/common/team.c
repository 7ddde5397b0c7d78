/* Contention back-off of every parallel region: see team.h. */
#include "common/team.h"

#include <time.h>

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

int mk_team_begin(int nthreads, mk_team_clock *clk) {
    clk->waited = 0;
    clk->nt = 1;
    if (nthreads <= 1) return 1; /* a serial call reads no clock */
    clk->start = clk->master_done = mk_now_ns();
    if (clk->start >= __atomic_load_n(&state->serial_until, __ATOMIC_RELAXED)) clk->nt = nthreads;
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
