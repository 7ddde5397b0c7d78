/* modulekit's thread pool: parallel loops whose caller never waits for a thread that has not
 * started.
 *
 * parallel_for(fn, ctx, n, threads) runs fn(ctx, i) for every i in [0, n) on the calling
 * thread and up to threads - 1 pool workers, and returns once all n calls returned, with the
 * nanoseconds the caller spent waiting for items other threads had started (the GEMM
 * engine's contention back-off reads it).
 * Items are claimed one at a time from a shared counter, by the caller first: a worker that
 * the OS has descheduled (or that is still waking up) simply claims nothing, and the caller
 * only ever waits for items that some thread has already started. OpenMP's regions instead
 * end at a barrier that every team thread must reach, so one descheduled thread stalls the
 * call for a scheduler time slice (ONNX Runtime's and XNNPACK's pools avoid that the same
 * way).
 *
 * Workers spin briefly after a loop (MK_POOL_SPIN_NS) so back-to-back layers find them
 * awake, then sleep on a condition variable; they are started on first use, never bound to
 * cores, and the caller's own affinity is left alone. A loop called while another thread's
 * loop runs, or from inside a loop item, runs serially on its caller. After fork() the child
 * starts with no workers (they are started again there on first use).
 *
 * The extensions export no C symbols to each other: the pool lives in _threadpool, which hands
 * this table to the others at import in a PyCapsule (_threadpool._api_capsule). */
#ifndef MK_THREADPOOL_H
#define MK_THREADPOOL_H

#include <stddef.h>

typedef void (*mk_pool_task)(void *ctx, size_t item);

typedef struct {
    long long (*parallel_for)(mk_pool_task fn, void *ctx, size_t n, int threads);
    /* workers started so far (they persist) */
    int (*workers)(void);
} mk_pool_api;

/* The most items one loop may have; more are refused by running serially. */
#define MK_POOL_MAX_ITEMS ((size_t)1 << 20)
#define MK_POOL_MAX_THREADS 256
#define MK_POOL_SPIN_NS 200000LL

const mk_pool_api *mk_pool_get_api(void);

#endif /* MK_THREADPOOL_H */
