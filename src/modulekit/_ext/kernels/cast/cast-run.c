/* The cast driver: picks the kernel from cast-config.c, stays serial for small casts,
 * otherwise splits the elements over OpenMP threads. In-place narrowing (dst == src, dst
 * elements narrower) runs in rounds so that no thread overwrites source elements another
 * thread has not read yet. Without OpenMP (mk_omp.h) the regions run once, serially. */
#include "cast.h"
#include "common/team.h"
#include "mk_omp.h"

#if defined(__linux__)
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif
#endif

/* Chunk boundaries are multiples of this many elements (whole cache lines of output). */
#define MK_CAST_CHUNK_ALIGN 64
/* In-place narrowing converts this share (1/4) of the elements serially first, at least
 * MK_CAST_INPLACE_FIRST_MIN of them; the rest goes in parallel rounds, each ending at a
 * barrier: 2 rounds when the elements halve, 1 when they quarter. Few rounds, because on
 * a loaded machine every barrier can wait out a descheduled thread (1/32 and 5 rounds
 * measured about 2x slower than this under load), and the serial in-place pass is already
 * quick: its writes land on lines it has just read. */
#define MK_CAST_INPLACE_FIRST_SHIFT 2
#define MK_CAST_INPLACE_FIRST_MIN 4096

/* Thread t's share [*lo, *hi) of [begin, end) split into nt aligned chunks. */
static inline void mk_cast_slice(size_t begin, size_t end, int t, int nt, size_t* lo,
                                 size_t* hi) {
    const size_t len = end - begin;
    size_t per = (len + (size_t)nt - 1) / (size_t)nt;
    per = (per + MK_CAST_CHUNK_ALIGN - 1) / MK_CAST_CHUNK_ALIGN * MK_CAST_CHUNK_ALIGN;
    const size_t a = per * (size_t)t, b = per * (size_t)(t + 1);
    *lo = begin + (a < len ? a : len);
    *hi = begin + (b < len ? b : len);
}

int mk_cast_run(const void* src, int src_code, void* dst, int dst_code, size_t n, int nthreads,
                mk_isa isa) {
    mk_vcvt_ukernel_fn ukernel = mk_cast_select(src_code, dst_code, isa);
    if (ukernel == NULL) return -1;
    if (n == 0 || (src == dst && src_code == dst_code)) return 0;
    const size_t ss = mk_dtype_size(src_code), ds = mk_dtype_size(dst_code);
    if (src != dst && n * (ss + ds) >= mk_cast_stream_min_bytes()) {
        const mk_vcvt_ukernel_fn stream = mk_cast_select_stream(src_code, dst_code, isa);
        if (stream != NULL) ukernel = stream;
    }
    const char* s = (const char*)src; /* input: n elements of ss bytes */
    char* d = (char*)dst;             /* output: n elements of ds bytes */

    if (nthreads <= 1 || n * (ss + ds) < mk_cast_parallel_min_bytes()) {
        ukernel(n, s, d);
        return 0;
    }
    if (s != (const char*)d || ds == ss) {
        /* Disjoint buffers, or same-size elements in place: every thread writes exactly the
         * bytes it reads, so a plain static split is safe. */
        mk_team_clock clk;
        nthreads = mk_team_begin(nthreads, &clk);
        #pragma omp parallel num_threads(nthreads) if (nthreads > 1)
        {
            size_t lo, hi;
            mk_cast_slice(0, n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
            if (hi > lo) ukernel(hi - lo, s + lo * ss, d + lo * ds);
            MK_TEAM_DONE(&clk);
        }
        mk_team_end(&clk);
        return 0;
    }

    /* In-place narrowing (ds < ss; sizes are powers of two, ratio 2 or 4). A round converts
     * [a, b) with b * ds <= a * ss: its writes land on source bytes of elements before a,
     * all read in earlier rounds, and the barrier ends every read of a round before the
     * next round writes. */
    const size_t ratio = ss / ds;
    size_t first = n >> MK_CAST_INPLACE_FIRST_SHIFT;
    if (first < MK_CAST_INPLACE_FIRST_MIN) first = MK_CAST_INPLACE_FIRST_MIN;
    if (first > n) first = n;
    ukernel(first, s, d);
    if (first == n) return 0;
    mk_team_clock clk;
    nthreads = mk_team_begin(nthreads, &clk);
    #pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        size_t a = first;
        while (a < n) {
            const size_t b = a > n / ratio ? n : a * ratio;
            size_t lo, hi;
            mk_cast_slice(a, b, t, nt, &lo, &hi);
            if (hi > lo) ukernel(hi - lo, s + lo * ss, d + lo * ds);
            MK_TEAM_BARRIER(&clk);
            a = b;
        }
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    return 0;
}

/* Populate the whole pages of [p, p + bytes) for writing; 0 on success, -1 where the system
 * cannot (not Linux, a kernel before 5.14). The partial pages at either end are left to the
 * cast's own first touch. */
static int mk_populate_write(void* p, size_t bytes) {
#if defined(__linux__)
    const long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return -1;
    const uintptr_t ps = (uintptr_t)page;
    const uintptr_t lo = ((uintptr_t)p + ps - 1) / ps * ps, hi = ((uintptr_t)p + bytes) / ps * ps;
    if (hi <= lo) return 0;
    return madvise((void*)lo, hi - lo, MADV_POPULATE_WRITE) == 0 ? 0 : -1;
#else
    (void)p;
    (void)bytes;
    return -1;
#endif
}

int mk_cast_run_fresh(const void* src, int src_code, void* dst, int dst_code, size_t n,
                      int nthreads, mk_isa isa) {
    const size_t ss = mk_dtype_size(src_code), ds = mk_dtype_size(dst_code);
    if (n * (ss + ds) >= mk_cast_parallel_min_bytes() && mk_populate_write(dst, n * ds) != 0)
        nthreads = 1;
    return mk_cast_run(src, src_code, dst, dst_code, n, nthreads, isa);
}
