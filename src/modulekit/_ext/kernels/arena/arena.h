/* The activation memory cache: a size-bucketed caching allocator behind a NumPy memory
 * handler (NEP 49), made current by modulekit/_ext/_arena.pyx for the duration of a top-level
 * Module call.
 *
 * Blocks of at least MK_ARENA_MIN_BYTES are rounded up to a size class (8 classes per power of
 * two, at most 12.5% over the request), mapped with their own mmap (64-byte aligned data, the
 * mapping 2 MiB aligned and madvised MADV_HUGEPAGE from 4 MiB), and on free kept on a per-class
 * LIFO list instead of being unmapped, so the next forward's array of the same size reuses
 * pages that are already faulted in. The idle (cached, not in use) bytes are capped: past the
 * limit the largest idle blocks are unmapped first; idle blocks not reused within the last 16
 * top-level calls (mk_arena_tick) are unmapped too. Smaller blocks go to NumPy's default
 * handler (its own small-block cache) behind a 16-byte header.
 *
 * Every block carries a header just below its data; its last word (data - 8) tells a large
 * block from a small one, so free/realloc never rely on the size NumPy passes. All entry points
 * are thread-safe (one mutex around the lists and counters; mmap/munmap run outside it).
 */
#ifndef MK_ARENA_H
#define MK_ARENA_H

#include <stddef.h>
#include <stdint.h>

#define MK_ARENA_MIN_BYTES ((size_t)256 << 10)   /* smaller requests: NumPy's default */

/* NumPy's default allocator (PyDataMemAllocator's layout), used for the small blocks. */
typedef struct {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr, size_t size);
} mk_arena_fallback;

typedef struct {
    uint64_t hits;          /* large requests served from the cache */
    uint64_t misses;        /* large requests that mapped a new block */
    uint64_t evictions;     /* idle blocks unmapped to respect the limit */
    uint64_t expired;       /* idle blocks unmapped for not being reused for max_idle_ticks */
    uint64_t released;      /* idle blocks unmapped by mk_arena_release */
    size_t live_bytes;      /* mapped bytes of large blocks in use */
    size_t idle_bytes;      /* mapped bytes of large blocks cached, not in use */
    size_t idle_blocks;
    size_t peak_bytes;      /* largest live_bytes + idle_bytes seen */
    size_t limit_bytes;     /* cap on idle_bytes */
    int caching;            /* 0: frees of large blocks unmap at once */
    uint64_t ticks;         /* mk_arena_tick calls (top-level module calls) */
    uint64_t max_idle_ticks;
} mk_arena_stats;

/* Set the small-block allocator; returns 0, or -1 if the lock cannot be created. Call once
 * before anything else. */
int mk_arena_init(const mk_arena_fallback *fallback);

/* The PyDataMemAllocator entry points (ctx is ignored). */
void *mk_arena_malloc(void *ctx, size_t size);
void *mk_arena_calloc(void *ctx, size_t nelem, size_t elsize);
void *mk_arena_realloc(void *ctx, void *ptr, size_t new_size);
void mk_arena_free(void *ctx, void *ptr, size_t size);

/* One top-level module call ended. Every MK_SWEEP_EVERY ticks the idle blocks not reused
 * (freed again) within the last max_idle_ticks ticks are unmapped: memory that only the first
 * call needed (weights packed on first use, scratch that grew layer by layer) or that a model
 * no longer run held is returned, while the blocks each call reuses stay. */
void mk_arena_tick(void);
void mk_arena_set_max_idle_ticks(uint64_t ticks);
/* Unmap every idle block; returns the bytes released. */
size_t mk_arena_release(void);
/* Cap the idle bytes (evicting largest-first now if over). */
void mk_arena_set_limit(size_t bytes);
/* 0: stop caching (idle blocks released, later frees unmap); 1: cache again. */
void mk_arena_set_caching(int on);
void mk_arena_get_stats(mk_arena_stats *out);
/* Usable bytes of the block holding ptr (its size class for a large block, the request for a
 * small one); 0 when ptr is NULL. For tests. */
size_t mk_arena_block_capacity(const void *ptr);
/* 1 if ptr is the data of a large (cached) block. */
int mk_arena_is_large(const void *ptr);

#endif
