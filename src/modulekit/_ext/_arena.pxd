# The activation memory cache (kernels/arena/arena.h): a caching NumPy memory handler that
# Module.__call__ makes current for the duration of a top-level call (see _arena.pyx).

cdef extern from "arena/arena.h" nogil:
    size_t MK_ARENA_MIN_BYTES

    ctypedef struct mk_arena_fallback:
        void *ctx
        void *(*malloc)(void *ctx, size_t size)
        void *(*calloc)(void *ctx, size_t nelem, size_t elsize)
        void *(*realloc)(void *ctx, void *ptr, size_t new_size)
        void (*free)(void *ctx, void *ptr, size_t size)

    ctypedef struct mk_arena_stats:
        unsigned long long hits
        unsigned long long misses
        unsigned long long evictions
        unsigned long long expired
        unsigned long long released
        size_t live_bytes
        size_t idle_bytes
        size_t idle_blocks
        size_t peak_bytes
        size_t limit_bytes
        int caching
        unsigned long long ticks
        unsigned long long max_idle_ticks

    int mk_arena_init(const mk_arena_fallback *fallback)
    void *mk_arena_malloc(void *ctx, size_t size)
    void *mk_arena_calloc(void *ctx, size_t nelem, size_t elsize)
    void *mk_arena_realloc(void *ctx, void *ptr, size_t new_size)
    void mk_arena_free(void *ctx, void *ptr, size_t size)
    size_t mk_arena_release()
    void mk_arena_tick()
    void mk_arena_set_max_idle_ticks(unsigned long long ticks)
    void mk_arena_set_limit(size_t nbytes)
    void mk_arena_set_caching(int on)
    void mk_arena_get_stats(mk_arena_stats *out)
    size_t mk_arena_block_capacity(const void *ptr)
    int mk_arena_is_large(const void *ptr)
