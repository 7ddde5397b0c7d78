/* The thread pool (see threadpool.h).
 *
 * One 64-bit word describes the running loop: generation (24 bits) | n (20) | next item (20).
 * A thread claims an item with a compare-and-swap that succeeds only while the word's
 * generation is the one it joined and next < n, so a worker arriving late (its loop already
 * finished, or a newer loop posted) can never take an item of another loop. The caller posts
 * a loop (task in the generation's slot, counters reset, then the word), claims items itself
 * and then waits until `done` reaches n: only items already started are waited for. The loop
 * that follows reuses the state only after that, so no item of an older generation is in
 * flight when it is reset. */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>

#define GEN_BITS 24
#define N_BITS 20
#define IDX_MASK ((1ull << N_BITS) - 1)
#define GEN_OF(w) ((uint32_t)((w) >> (2 * N_BITS)))
#define N_OF(w) ((size_t)(((w) >> N_BITS) & IDX_MASK))
#define NEXT_OF(w) ((size_t)((w) & IDX_MASK))

typedef struct {
    mk_pool_task fn;
    void *ctx;
} mk_slot;

static uint64_t mk_word;        /* atomic: the running loop */
static uint32_t mk_done;        /* atomic: items of the running loop that returned */
static uint64_t mk_joined;      /* atomic: generation << 32 | workers that joined its loop */
static int mk_limit;            /* atomic: how many workers the running loop takes */
static mk_slot mk_slots[4];     /* the task of generation g is mk_slots[g & 3] */
static uint32_t mk_gen;         /* the last generation posted (callers hold mk_caller) */
static int mk_nworkers;         /* started workers (callers hold mk_caller) */
static int mk_sleeping;         /* atomic: workers waiting on mk_cv */
static pthread_mutex_t mk_caller = PTHREAD_MUTEX_INITIALIZER; /* one loop at a time */
static pthread_mutex_t mk_mu = PTHREAD_MUTEX_INITIALIZER;     /* for mk_cv */
static pthread_cond_t mk_cv = PTHREAD_COND_INITIALIZER;
static _Thread_local int mk_in_loop; /* inside an item, or a worker: nested loops run serially */
static pthread_once_t mk_once = PTHREAD_ONCE_INIT;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Claim the next item of generation gen: 1 and *item, or 0 when it has none left. */
static int claim(uint32_t gen, size_t *item) {
    uint64_t w = __atomic_load_n(&mk_word, __ATOMIC_ACQUIRE);
    for (;;) {
        if (GEN_OF(w) != gen || NEXT_OF(w) >= N_OF(w)) return 0;
        if (__atomic_compare_exchange_n(&mk_word, &w, w + 1, 1, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            *item = NEXT_OF(w);
            return 1;
        }
    }
}

static void run_items(uint32_t gen) {
    const mk_slot slot = mk_slots[gen & 3]; /* written before the word was published */
    size_t item;
    while (claim(gen, &item)) {
        slot.fn(slot.ctx, item);
        __atomic_add_fetch(&mk_done, 1, __ATOMIC_RELEASE);
    }
}

static void *worker(void *arg) {
    (void)arg;
    mk_in_loop = 1;
    uint32_t seen = GEN_OF(__atomic_load_n(&mk_word, __ATOMIC_ACQUIRE));
    for (;;) {
        /* wait for a new generation: spin, then sleep */
        uint32_t gen = GEN_OF(__atomic_load_n(&mk_word, __ATOMIC_ACQUIRE));
        if (gen == seen) {
            const long long until = now_ns() + MK_POOL_SPIN_NS;
            unsigned spins = 0;
            while ((gen = GEN_OF(__atomic_load_n(&mk_word, __ATOMIC_ACQUIRE))) == seen) {
                cpu_relax();
                if (++spins % 64 == 0 && now_ns() > until) break;
            }
        }
        if (gen == seen) {
            pthread_mutex_lock(&mk_mu);
            __atomic_add_fetch(&mk_sleeping, 1, __ATOMIC_SEQ_CST);
            while ((gen = GEN_OF(__atomic_load_n(&mk_word, __ATOMIC_SEQ_CST))) == seen)
                pthread_cond_wait(&mk_cv, &mk_mu);
            __atomic_sub_fetch(&mk_sleeping, 1, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&mk_mu);
        }
        seen = gen;
        /* join unless the loop has its threads already; a worker that saw an older
         * generation counts for none */
        uint64_t j = __atomic_load_n(&mk_joined, __ATOMIC_ACQUIRE);
        const uint64_t limit = (uint64_t)__atomic_load_n(&mk_limit, __ATOMIC_ACQUIRE);
        while ((uint32_t)(j >> 32) == gen && (j & 0xffffffffu) < limit) {
            if (__atomic_compare_exchange_n(&mk_joined, &j, j + 1, 1, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
                run_items(gen);
                break;
            }
        }
    }
    return NULL;
}

static void after_fork_child(void) {
    /* the parent's workers do not exist here; the locks may have been held by them */
    pthread_mutex_init(&mk_caller, NULL);
    pthread_mutex_init(&mk_mu, NULL);
    pthread_cond_init(&mk_cv, NULL);
    mk_nworkers = 0;
    mk_sleeping = 0;
}

static void init_once(void) { pthread_atfork(NULL, NULL, after_fork_child); }

/* Start workers up to `want` (callers hold mk_caller); stops quietly when the OS refuses. */
static void grow(int want) {
    while (mk_nworkers < want) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const int rc = pthread_create(&t, &attr, worker, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        __atomic_store_n(&mk_nworkers, mk_nworkers + 1, __ATOMIC_RELAXED);
    }
}

static void serial(mk_pool_task fn, void *ctx, size_t n) {
    const int outer = mk_in_loop;
    mk_in_loop = 1;
    for (size_t i = 0; i < n; i++) fn(ctx, i);
    mk_in_loop = outer;
}

static long long parallel_for(mk_pool_task fn, void *ctx, size_t n, int threads) {
    if (n == 0) return 0;
    if (threads > MK_POOL_MAX_THREADS) threads = MK_POOL_MAX_THREADS;
    if (threads <= 1 || n == 1 || n > MK_POOL_MAX_ITEMS || mk_in_loop ||
        pthread_mutex_trylock(&mk_caller) != 0) {
        serial(fn, ctx, n);
        return 0;
    }
    pthread_once(&mk_once, init_once);
    grow(threads - 1);
    const uint32_t gen = mk_gen = (mk_gen + 1) & ((1u << GEN_BITS) - 1);
    mk_slots[gen & 3] = (mk_slot){fn, ctx};
    __atomic_store_n(&mk_done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&mk_limit, threads - 1, __ATOMIC_RELAXED);
    __atomic_store_n(&mk_joined, (uint64_t)gen << 32, __ATOMIC_RELAXED);
    __atomic_store_n(&mk_word, ((uint64_t)gen << (2 * N_BITS)) | ((uint64_t)n << N_BITS),
                     __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&mk_sleeping, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&mk_mu);
        pthread_cond_broadcast(&mk_cv);
        pthread_mutex_unlock(&mk_mu);
    }
    mk_in_loop = 1;
    run_items(gen);
    mk_in_loop = 0;
    /* only items another thread has started are left: wait for them */
    long long waited = 0;
    if (__atomic_load_n(&mk_done, __ATOMIC_ACQUIRE) < n) {
        const long long t0 = now_ns();
        for (unsigned spins = 0; __atomic_load_n(&mk_done, __ATOMIC_ACQUIRE) < n; spins++) {
            if (spins < 2048)
                cpu_relax();
            else
                sched_yield();
        }
        waited = now_ns() - t0;
    }
    pthread_mutex_unlock(&mk_caller);
    return waited;
}

static int workers(void) { return __atomic_load_n(&mk_nworkers, __ATOMIC_RELAXED); }

static const mk_pool_api mk_pool = {parallel_for, workers};

const mk_pool_api *mk_pool_get_api(void) { return &mk_pool; }
