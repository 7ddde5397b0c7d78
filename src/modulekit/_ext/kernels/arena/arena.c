/* The activation memory cache (see arena.h). */
#include "arena.h"

#include <string.h>

#ifdef _WIN32
#  include <windows.h>
#else
#  include <pthread.h>
#  include <sys/mman.h>
#  include <unistd.h>
#endif

#define MK_MAGIC_LARGE 0x6d6b6172656e614cULL   /* "mkarenaL" */
#define MK_MAGIC_SMALL 0x6d6b6172656e6153ULL   /* "mkarenaS" */
#define MK_MIN_LOG2 18                          /* log2(MK_ARENA_MIN_BYTES) */
#define MK_MAX_LOG2 47                          /* classes up to 2^47 (larger: not cached) */
#define MK_NCLS ((MK_MAX_LOG2 - MK_MIN_LOG2 + 1) * 8)
#define MK_HUGE_BYTES ((size_t)4 << 20)         /* madvise huge pages from here (as NumPy) */
#define MK_HUGE_ALIGN ((size_t)2 << 20)
#define MK_DEFAULT_LIMIT ((size_t)1 << 30)
#define MK_DEFAULT_MAX_IDLE_TICKS 16
#define MK_SWEEP_EVERY 8                        /* ticks between sweeps for stale blocks */

/* The 64 bytes below a large block's data. */
typedef struct mk_blk {
    void *base;             /* the mapping */
    size_t map_len;
    size_t cap;             /* usable bytes from the data pointer (the size class) */
    struct mk_blk *next;    /* free-list link */
    int32_t cls;            /* size class, -1: never cached */
    uint32_t pad0;
    uint64_t free_tick;     /* the tick count when it was last freed */
    uint64_t pad1;
    uint64_t magic;         /* MK_MAGIC_LARGE, at data - 8 */
} mk_blk;

/* The 16 bytes below a small block's data. */
typedef struct {
    size_t size;
    uint64_t magic;         /* MK_MAGIC_SMALL, at data - 8 */
} mk_small;

typedef char mk_blk_is_64_bytes[sizeof(mk_blk) == 64 ? 1 : -1];
typedef char mk_small_is_16_bytes[sizeof(mk_small) == 16 ? 1 : -1];

static mk_arena_fallback fb;
static mk_blk *free_lists[MK_NCLS];
static mk_arena_stats st = {.limit_bytes = MK_DEFAULT_LIMIT, .caching = 1,
                            .max_idle_ticks = MK_DEFAULT_MAX_IDLE_TICKS};

/* ------------------------------------------------------------------ lock */
#ifdef _WIN32
static SRWLOCK lock = SRWLOCK_INIT;
static void lock_acquire(void) { AcquireSRWLockExclusive(&lock); }
static void lock_release(void) { ReleaseSRWLockExclusive(&lock); }
#else
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void lock_acquire(void) { pthread_mutex_lock(&lock); }
static void lock_release(void) { pthread_mutex_unlock(&lock); }
/* A child forked while another thread held the lock would deadlock on it: start it afresh
 * (the cached blocks stay valid in the child, copy-on-write). */
static void after_fork_child(void) { pthread_mutex_init(&lock, NULL); }
#endif

/* ------------------------------------------------------------------ mappings */
static void *map_pages(size_t len)
{
#ifdef _WIN32
    return VirtualAlloc(NULL, len, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
#else
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
#endif
}

static void unmap_pages(void *p, size_t len)
{
#ifdef _WIN32
    (void)len;
    VirtualFree(p, 0, MEM_RELEASE);
#else
    munmap(p, len);
#endif
}

static size_t page_size(void)
{
#ifdef _WIN32
    return 65536;
#else
    static size_t ps = 0;
    if (!ps) {
        long v = sysconf(_SC_PAGESIZE);
        ps = v > 0 ? (size_t)v : 4096;
    }
    return ps;
#endif
}

/* A new block of cap usable bytes: a fresh (zero) mapping of cap + 64 bytes rounded to pages.
 * From MK_HUGE_BYTES the mapping starts on a 2 MiB boundary and is madvised MADV_HUGEPAGE so
 * its whole 2 MiB pages are huge pages (the sub-2 MiB tail stays on small pages). */
static mk_blk *map_block(size_t cap, int cls)
{
    size_t ps = page_size();
    if (cap > SIZE_MAX - sizeof(mk_blk) - MK_HUGE_ALIGN - ps) return NULL;
    size_t len = (cap + sizeof(mk_blk) + ps - 1) / ps * ps;
    char *base;
#if !defined(_WIN32) && defined(MADV_HUGEPAGE)
    if (cap >= MK_HUGE_BYTES) {
        size_t over = len + MK_HUGE_ALIGN - ps;
        char *raw = (char *)map_pages(over);
        if (!raw) return NULL;
        base = (char *)(((uintptr_t)raw + MK_HUGE_ALIGN - 1) & ~(uintptr_t)(MK_HUGE_ALIGN - 1));
        if (base > raw) munmap(raw, (size_t)(base - raw));
        if (raw + over > base + len) munmap(base + len, (size_t)(raw + over - (base + len)));
        madvise(base, len, MADV_HUGEPAGE);
    } else
#endif
    {
        base = (char *)map_pages(len);
        if (!base) return NULL;
    }
    mk_blk *b = (mk_blk *)base;
    b->base = base;
    b->map_len = len;
    b->cap = len - sizeof(mk_blk);
    b->next = NULL;
    b->cls = cls;
    b->magic = MK_MAGIC_LARGE;
    return b;
}

static void unmap_list(mk_blk *b)
{
    while (b) {
        mk_blk *next = b->next;
        unmap_pages(b->base, b->map_len);
        b = next;
    }
}

static inline int floor_log2(size_t n)   /* n > 0 */
{
#if defined(_MSC_VER)
    unsigned long i;
    _BitScanReverse64(&i, (unsigned long long)n);
    return (int)i;
#else
    return 63 - __builtin_clzll((unsigned long long)n);
#endif
}

/* The size class of a request of n >= MK_ARENA_MIN_BYTES: 8 classes per power of two;
 * *cap gets the class size. -1 for requests above the largest class. */
static int size_class(size_t n, size_t *cap)
{
    int p = floor_log2(n);
    if (p > MK_MAX_LOG2) {
        *cap = n;
        return -1;
    }
    size_t step = (size_t)1 << (p - 3);
    size_t c = (n + step - 1) & ~(step - 1);
    int q = floor_log2(c);   /* p, or p + 1 when c == 2^(p+1) */
    if (q > MK_MAX_LOG2) {
        *cap = n;
        return -1;
    }
    *cap = c;
    return (q - MK_MIN_LOG2) * 8 + (int)((c >> (q - 3)) - 8);
}

static inline mk_blk *large_header(const void *ptr) { return (mk_blk *)ptr - 1; }
static inline mk_small *small_header(const void *ptr) { return (mk_small *)ptr - 1; }
static inline uint64_t block_magic(const void *ptr) { return ((const uint64_t *)ptr)[-1]; }

/* Unlink the idle block at *link onto the list *out, counting it in *counter (lock held). */
static void detach(mk_blk **link, mk_blk **out, uint64_t *counter)
{
    mk_blk *b = *link;
    *link = b->next;
    st.idle_bytes -= b->map_len;
    st.idle_blocks--;
    (*counter)++;
    b->next = *out;
    *out = b;
}

/* Detach idle blocks, largest first, until idle_bytes <= limit; returns them (lock held). */
static mk_blk *evict_over_limit(void)
{
    mk_blk *out = NULL;
    for (int c = MK_NCLS - 1; c >= 0 && st.idle_bytes > st.limit_bytes; c--)
        while (free_lists[c] && st.idle_bytes > st.limit_bytes)
            detach(&free_lists[c], &out, &st.evictions);
    return out;
}

/* Detach the idle blocks not reused for more than max_idle_ticks ticks (lock held). */
static mk_blk *expire_stale(void)
{
    mk_blk *out = NULL;
    for (int c = 0; c < MK_NCLS; c++) {
        mk_blk **link = &free_lists[c];
        while (*link) {
            if (st.ticks - (*link)->free_tick > st.max_idle_ticks)
                detach(link, &out, &st.expired);
            else
                link = &(*link)->next;
        }
    }
    return out;
}

/* Detach every idle block (lock held). */
static mk_blk *detach_all(void)
{
    mk_blk *out = NULL;
    for (int c = 0; c < MK_NCLS; c++)
        while (free_lists[c])
            detach(&free_lists[c], &out, &st.released);
    return out;
}

/* ------------------------------------------------------------------ small blocks */
static void *small_alloc(size_t size, int zero)
{
    if (size > SIZE_MAX - sizeof(mk_small)) return NULL;
    mk_small *h = (mk_small *)(zero ? fb.calloc(fb.ctx, 1, size + sizeof(mk_small))
                                    : fb.malloc(fb.ctx, size + sizeof(mk_small)));
    if (!h) return NULL;
    h->size = size;
    h->magic = MK_MAGIC_SMALL;
    return h + 1;
}

static void small_free(void *ptr)
{
    mk_small *h = small_header(ptr);
    size_t size = h->size;
    h->magic = 0;
    fb.free(fb.ctx, h, size + sizeof(mk_small));
}

/* ------------------------------------------------------------------ large blocks */
static void *large_alloc(size_t size, int *fresh)
{
    size_t cap;
    int cls = size_class(size, &cap);
    mk_blk *b = NULL;
    if (cls >= 0) {
        lock_acquire();
        b = free_lists[cls];
        if (b) {
            free_lists[cls] = b->next;
            st.idle_bytes -= b->map_len;
            st.idle_blocks--;
            st.live_bytes += b->map_len;
            st.hits++;
        }
        lock_release();
    }
    if (b) {
        b->next = NULL;
        *fresh = 0;
        return b + 1;
    }
    b = map_block(cap, cls);
    if (!b) return NULL;
    lock_acquire();
    st.misses++;
    st.live_bytes += b->map_len;
    if (st.live_bytes + st.idle_bytes > st.peak_bytes) st.peak_bytes = st.live_bytes + st.idle_bytes;
    lock_release();
    *fresh = 1;
    return b + 1;
}

static void large_free(void *ptr)
{
    mk_blk *b = large_header(ptr);
    mk_blk *drop = NULL;
    lock_acquire();
    st.live_bytes -= b->map_len;
    if (st.caching && b->cls >= 0 && b->map_len <= st.limit_bytes) {
        b->free_tick = st.ticks;
        b->next = free_lists[b->cls];
        free_lists[b->cls] = b;
        st.idle_bytes += b->map_len;
        st.idle_blocks++;
        drop = evict_over_limit();
    } else {
        b->next = NULL;
        drop = b;
    }
    lock_release();
    unmap_list(drop);
}

/* ------------------------------------------------------------------ entry points */
int mk_arena_init(const mk_arena_fallback *fallback)
{
    fb = *fallback;
#ifndef _WIN32
    if (pthread_atfork(NULL, NULL, after_fork_child) != 0) return -1;
#endif
    return 0;
}

void *mk_arena_malloc(void *ctx, size_t size)
{
    (void)ctx;
    if (size < MK_ARENA_MIN_BYTES) return small_alloc(size, 0);
    int fresh;
    return large_alloc(size, &fresh);
}

void *mk_arena_calloc(void *ctx, size_t nelem, size_t elsize)
{
    (void)ctx;
    if (elsize && nelem > SIZE_MAX / elsize) return NULL;
    size_t size = nelem * elsize;
    if (size < MK_ARENA_MIN_BYTES) return small_alloc(size, 1);
    int fresh;
    void *p = large_alloc(size, &fresh);
    if (p && !fresh) memset(p, 0, size);   /* a fresh mapping is already zero */
    return p;
}

void mk_arena_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    (void)size;   /* the header knows; NumPy's figure is the array's nbytes */
    if (!ptr) return;
    if (block_magic(ptr) == MK_MAGIC_LARGE) large_free(ptr);
    else small_free(ptr);
}

void *mk_arena_realloc(void *ctx, void *ptr, size_t new_size)
{
    if (!ptr) return mk_arena_malloc(ctx, new_size);
    if (block_magic(ptr) == MK_MAGIC_LARGE) {
        mk_blk *b = large_header(ptr);
        if (new_size <= b->cap && new_size >= MK_ARENA_MIN_BYTES) return ptr;
        void *q = mk_arena_malloc(ctx, new_size);
        if (!q) return NULL;
        memcpy(q, ptr, new_size < b->cap ? new_size : b->cap);
        large_free(ptr);
        return q;
    }
    mk_small *h = small_header(ptr);
    if (new_size < MK_ARENA_MIN_BYTES) {
        mk_small *n = (mk_small *)fb.realloc(fb.ctx, h, new_size + sizeof(mk_small));
        if (!n) return NULL;
        n->size = new_size;
        return n + 1;
    }
    void *q = mk_arena_malloc(ctx, new_size);
    if (!q) return NULL;
    memcpy(q, ptr, h->size);
    small_free(ptr);
    return q;
}

size_t mk_arena_release(void)
{
    lock_acquire();
    size_t bytes = st.idle_bytes;
    mk_blk *drop = detach_all();
    lock_release();
    unmap_list(drop);
    return bytes;
}

void mk_arena_set_limit(size_t bytes)
{
    lock_acquire();
    st.limit_bytes = bytes;
    mk_blk *drop = evict_over_limit();
    lock_release();
    unmap_list(drop);
}

void mk_arena_set_caching(int on)
{
    mk_blk *drop = NULL;
    lock_acquire();
    st.caching = on != 0;
    if (!on) drop = detach_all();
    lock_release();
    unmap_list(drop);
}

void mk_arena_tick(void)
{
    mk_blk *drop = NULL;
    lock_acquire();
    st.ticks++;
    if (st.ticks % MK_SWEEP_EVERY == 0) drop = expire_stale();
    lock_release();
    unmap_list(drop);
}

void mk_arena_set_max_idle_ticks(uint64_t ticks)
{
    mk_blk *drop;
    lock_acquire();
    st.max_idle_ticks = ticks;
    drop = expire_stale();
    lock_release();
    unmap_list(drop);
}

void mk_arena_get_stats(mk_arena_stats *out)
{
    lock_acquire();
    *out = st;
    lock_release();
}

size_t mk_arena_block_capacity(const void *ptr)
{
    if (!ptr) return 0;
    if (block_magic(ptr) == MK_MAGIC_LARGE) return large_header(ptr)->cap;
    return small_header(ptr)->size;
}

int mk_arena_is_large(const void *ptr)
{
    return ptr && block_magic(ptr) == MK_MAGIC_LARGE;
}
