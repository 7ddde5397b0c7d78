/* Packed GEMM engine: C[M x N] = act(A[M x K] * W[K x N] + bias), W pre-packed.
 *
 * Packed weight layout (XNNPACK style): ceil(N / NR) column panels, panel p at byte offset
 * p * panel_stride of a 64-byte aligned buffer:
 *     [bias[NR] in the compute dtype][W[K x NR] in the storage dtype, k-major]
 * zero-padded past N; panel_stride is a multiple of 64 bytes. NR and the storage dtype come
 * from the configuration (gemm-config.c), the ONLY place where microkernels, register blocks
 * and cache blocks are chosen.
 *
 * The C functions only compute: every shape, stride and dtype check happens in the caller
 * (modulekit/_ext/_gemm.pyx) before any of them runs. */
#ifndef MK_GEMM_H
#define MK_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "common/act.h"
#include "isa.h"
#include "wino-eng-api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Compute dtypes (inputs, accumulators, outputs). */
typedef enum { MK_COMPUTE_F32 = 0, MK_COMPUTE_F64 = 1 } mk_compute;

/* Weight storage dtypes. F16/BF16 are weight-only storage: widened to float32 in the kernel. */
typedef enum {
    MK_STORAGE_F32 = 0,
    MK_STORAGE_F64 = 1,
    MK_STORAGE_F16 = 2,
    MK_STORAGE_BF16 = 3,
    MK_STORAGE_COUNT = 4
} mk_storage;

/* Epilogue activations: the mk_act codes of common/act.h. RELU and CLAMP run on the
 * accumulators in registers (MK_ACT_IN_REGISTERS); the others run on the output tile right
 * after it is stored, while it is in L1 (mk_gemm_config.act_tile). */
#define MK_ACT_IN_REGISTERS(act) ((act) == MK_ACT_RELU || (act) == MK_ACT_CLAMP)
#define MK_ACT_ON_TILE(act) ((act) > MK_ACT_CLAMP)

typedef struct {
    int act;            /* mk_act */
    float lo32, hi32;   /* clamp bounds for float32 compute (RELU: 0, +inf) */
    double lo, hi;      /* clamp bounds for float64 compute */
} mk_epilogue;

/* Main microkernel: C[mr x nc] = (init ? init : C) + A_packed[MR x kc] * W[kc x NR],
 *   a:    packed activations, a[k * MR + i], rows >= mr zero or ignored
 *   w:    kc x NR weights of one panel (storage dtype), k-major
 *   c:    output rows, row stride ldc elements; reads C when init == NULL
 *   init: NR values (compute dtype) to start the accumulators from (the bias), or NULL
 *   ep:   NULL for a partial k block; else the epilogue to apply before storing.
 * 1 <= mr <= MR, 1 <= nc <= NR, kc >= 0. */
typedef void (*mk_gemm_ukernel)(size_t mr, size_t nc, size_t kc, const void *a, const void *w,
                                void *c, size_t ldc, const void *init, const mk_epilogue *ep);

/* Small-M microkernel (one per row count m = 1..MK_SMALLM_MAX): the whole K, A read in place.
 *   a: m rows, row stride lda elements (any sign), unit stride along K;
 *   panel: the first of smallm_np[m] adjacent packed panels ([bias[NR]][K x NR]), ps bytes
 *   apart; c: m rows of stride ldc; nc <= smallm_np[m] * NR columns; ep never NULL;
 *   pf, pfl: pfl 64-byte lines from pf to prefetch into L2, spread evenly over the k loop
 *   (the weights a later call reads, so their DRAM stream overlaps this call's FMAs; pf is
 *   only prefetched, never read; pfl 0 for none). */
typedef void (*mk_gemm_smallm_ukernel)(size_t nc, size_t k, const void *a, ptrdiff_t lda,
                                       const void *panel, size_t ps, void *c, size_t ldc,
                                       const mk_epilogue *ep, const void *pf, size_t pfl);

/* Activation packing: rows [0, mc) x columns [0, kc) of A (element (i, k) at
 * a + i * rs + k * cs, strides in elements) into MR-row micro-panels, k-major:
 * dst[(i / MR) * MR * kc + k * MR + i % MR]; rows past mc are zero. */
typedef void (*mk_gemm_pack_a_fn)(size_t mc, size_t kc, size_t mr, const void *a, ptrdiff_t rs,
                                  ptrdiff_t cs, void *dst);
void mk_gemm_pack_a_f32(size_t mc, size_t kc, size_t mr, const void *a, ptrdiff_t rs,
                        ptrdiff_t cs, void *dst);
void mk_gemm_pack_a_f64(size_t mc, size_t kc, size_t mr, const void *a, ptrdiff_t rs,
                        ptrdiff_t cs, void *dst);

/* Activation of a stored tile in place: rows x nc elements, row stride ldc. */
typedef void (*mk_act_tile_fn)(size_t rows, size_t nc, void *c, size_t ldc,
                               const mk_epilogue *ep);

#define MK_SMALLM_MAX 8

typedef struct {
    const char *name;        /* e.g. "f32-gemm-8x32-avx512" */
    int isa;                 /* mk_isa */
    int compute;             /* mk_compute */
    int storage;             /* mk_storage */
    size_t mr, nr;           /* register block */
    size_t kc, mc, nc;       /* cache blocks (elements): KC x NR in L1, MC x KC in L2 */
    size_t esize, wsize;     /* bytes per compute / storage element */
    mk_gemm_ukernel ukernel;
    mk_gemm_pack_a_fn pack_a;  /* activation packing for ukernel (weights: mk_gemm_pack) */
    mk_gemm_smallm_ukernel smallm[MK_SMALLM_MAX + 1]; /* [m], m = 1..MK_SMALLM_MAX */
    size_t smallm_np[MK_SMALLM_MAX + 1];              /* panels per smallm[m] call */
    mk_act_tile_fn act_tile; /* transcendental activations on a stored tile */
    /* bfloat16 compute (zero in the float32/float64 entries): the packed layouts round K up
     * to a multiple of kpad (0: no rounding), packed activations have asize bytes per
     * element (0: esize) and pack_w, when set, writes a panel's weights instead of the
     * row-copy of mk_gemm_pack (a configuration with pack_w has no mk_gemm_unpack). */
    size_t kpad, asize;
    void (*pack_w)(size_t ncols, size_t k, size_t nr, const void *b, ptrdiff_t rs,
                   ptrdiff_t cs, void *w);
    /* when set, called by a thread before / after each run of its ukernel calls
     * (mk_gemm_range): AMX loads its tile configuration once there instead of in every call,
     * and releases the tiles after (their state back to init: context switches stop saving
     * 8 KiB of tile data for the thread) */
    void (*begin)(void);
    void (*end)(void);
} mk_gemm_config;

/* The MC of cfg on this CPU (its table value scaled to the CPU's L2; gemm-config.c). */
size_t mk_gemm_mc(const mk_gemm_config *cfg);

/* The configuration for (compute, storage, isa); NULL for an unsupported pair
 * (float64 compute needs float64 storage and vice versa). */
const mk_gemm_config *mk_gemm_get_config(int compute, int storage, int isa);

/* ---- bfloat16 compute: float32 inputs, outputs, bias and accumulation; weights and
 * activations rounded to bfloat16 (round to nearest even) for the multiplies. Weights are
 * packed once into [bias[NR] f32][ceil(K / 32) * 16 pair rows x NR x 2 bf16] panels (VNNI
 * pairs: element (k, n) at ((k / 2) * NR + n) * 2 + k % 2), zero-padded to a multiple of 32 in
 * K, the layout both the AVX512-BF16 (vdpbf16ps) and the AMX (tdpbf16ps) kernels stream, so
 * switching between them needs no re-pack. Activations are rounded while they are packed. */
typedef enum {
    MK_BF16_NONE = 0,       /* no bfloat16 kernels: "medium" computes in float32 */
    MK_BF16_AVX512BF16 = 1, /* AVX512-BF16 vdpbf16ps */
    MK_BF16_AMX = 2,        /* AMX-BF16 tiles (the OS granted the tile state) */
    MK_BF16_COUNT = 3
} mk_bf16_isa;

/* The bfloat16-compute configuration for a bf16 path, or NULL (MK_BF16_NONE). */
const mk_gemm_config *mk_gemm_get_bf16_config(int bf16_isa);

/* float32 matmul precision (torch's set_float32_matmul_precision): a process-wide value and
 * a per-thread override (-1: none), read by the caller of the engine before it dispatches. */
typedef enum { MK_PREC_HIGHEST = 0, MK_PREC_HIGH = 1, MK_PREC_MEDIUM = 2 } mk_precision;
int mk_gemm_precision(void);              /* the calling thread's effective value */
void mk_gemm_set_precision(int p);        /* the process-wide value */
int mk_gemm_get_global_precision(void);
int mk_gemm_set_thread_precision(int p);  /* the calling thread's override; returns the old */

/* Bytes of one packed panel and of the whole packed buffer for K and N. */
size_t mk_gemm_panel_stride(const mk_gemm_config *cfg, size_t k);
size_t mk_gemm_packed_size(const mk_gemm_config *cfg, size_t n, size_t k);

/* Pack B[K x N] (element (k, n) at b + k * rs + n * cs, strides in elements, elements of
 * cfg->wsize bytes, already in the storage dtype) and bias[N] (compute dtype, or NULL for
 * zeros) into dst (mk_gemm_packed_size bytes, 64-byte aligned). A torch Linear weight (N, K)
 * C-contiguous is B with rs = 1, cs = K. Large packs use up to nthreads OpenMP threads. */
void mk_gemm_pack(const mk_gemm_config *cfg, size_t n, size_t k, const void *b, ptrdiff_t rs,
                  ptrdiff_t cs, const void *bias, void *dst, int nthreads);

/* Inverse of mk_gemm_pack: weight (N, K) C-contiguous in the storage dtype, bias (N,) in
 * the compute dtype (bias may be NULL). */
void mk_gemm_unpack(const mk_gemm_config *cfg, size_t n, size_t k, const void *packed,
                    void *weight, void *bias);

/* C[M x N] = act(A * W + bias). A element (i, k) at a + i * rsa + k * csa (elements, any sign),
 * c row stride ldc elements (unit column stride). nthreads >= 1 is the most threads to use;
 * small problems run on the calling thread. Returns 0, or -1 when a packing buffer could not be
 * allocated (C is then undefined). */
int mk_gemm_run(const mk_gemm_config *cfg, size_t m, size_t n, size_t k, const void *a,
                 ptrdiff_t rsa, ptrdiff_t csa, const void *packed, void *c, size_t ldc,
                 const mk_epilogue *ep, int nthreads);

/* Driver internals, shared with the layer-chain driver (gemm-chain.c). A problem is one
 * C = act(A * W + bias); mk_gemm_part gives thread t of nt its rows [m0, m1) and panels
 * [p0, p1) and mk_gemm_range computes them (0, or -1 when the per-thread packing buffer could
 * not be allocated). The direct small-M path needs csa == 1 (mk_gemm_run copies A otherwise;
 * callers of these functions must pass such an A). */
typedef struct {
    const mk_gemm_config *cfg;
    size_t m, n, k, ps;
    const unsigned char *a;
    ptrdiff_t rsa, csa;
    const unsigned char *packed;
    unsigned char *c;
    size_t ldc;
    const mk_epilogue *ep;
    int direct;    /* small-M path */
    int rowdirect; /* more rows, unit-stride A: MR-row direct kernels, A not packed */
} mk_gemm_problem;

void mk_gemm_problem_init(mk_gemm_problem *pr, const mk_gemm_config *cfg, size_t m, size_t n,
                          size_t k, const void *a, ptrdiff_t rsa, ptrdiff_t csa,
                          const void *packed, void *c, size_t ldc, const mk_epilogue *ep);
void mk_gemm_part(const mk_gemm_problem *pr, int t, int nt, size_t *m0, size_t *m1, size_t *p0,
                  size_t *p1);
int mk_gemm_range(const mk_gemm_problem *pr, size_t m0, size_t m1, size_t p0, size_t p1);

/* A chain of packed layers run as one call (gemm-chain.c): layer i computes
 * act_i(X_i * W_i + bias_i) with X_0 the input and X_{i+1} the output of layer i. */
typedef struct {
    const mk_gemm_config *cfg;  /* the configuration layer i's weights are packed for */
    size_t n, k;                /* out and in features; k equals the previous layer's n */
    const void *packed;         /* mk_gemm_pack layout */
    mk_epilogue ep;
} mk_gemm_chain_layer;

/* A recurrent layer's time loop as one call (gemm-recurrence.c): for s < steps, the GEMM
 * G = H * W^T + bias over the first rows[s] rows of the state H (h columns, row stride h),
 * W packed for cfg (gates * h outputs, h inputs; h a multiple of cfg->nr), into g (row stride
 * gates * h), then step(ctx, s, m, u0, u1, prev, next) for each thread's units [u0, u1):
 * the cell reads G's gate columns of those units and prev's (H_{s-1}) and writes next's
 * (H_s), which the next step reads. state holds H_0 in and the final state out (rows past
 * a step's count keep theirs until they join, and from the step they end); spare is a
 * second buffer of its size. */
typedef void (*mk_gemm_step_fn)(void *ctx, size_t s, size_t m, size_t u0, size_t u1,
                                const void *prev, void *next);
typedef struct {
    const mk_gemm_config *cfg;
    const void *packed;
    const mk_epilogue *ep;
    size_t gates, h, steps;
    const size_t *rows;
    void *state, *spare, *g;
    mk_gemm_step_fn step;
    void *ctx;
} mk_gemm_recurrence;
/* Returns 0, -1 when a packing buffer could not be allocated, -2 (nothing done) when h is
 * not a multiple of the panel width. */
int mk_gemm_recurrence_run(const mk_gemm_recurrence *r, int nthreads);

/* Threads mk_gemm_chain_run would use: the most any of its layers would use alone. */
int mk_gemm_chain_plan_threads(size_t nl, const mk_gemm_chain_layer *layers, size_t m,
                               int nthreads);

/* Run nl >= 1 layers (one compute dtype) on m rows: a is m x layers[0].k with row stride lda
 * elements and unit column stride; c is m x layers[nl - 1].n, C-contiguous. The
 * intermediate results go to buf0, buf1, buf0, ... (m * max intermediate n elements each,
 * C-contiguous; buf1 unused when nl <= 2). With more than one thread and at most
 * MK_SMALLM_MAX rows, ONE OpenMP parallel region runs every layer, each thread computing its
 * share of a layer's output tiles, with a barrier between layers; more rows run one
 * mk_gemm_run per layer. Every output element is computed exactly as mk_gemm_run computes
 * it, so results are bit-identical to running the layers one by one, for any thread count.
 * Returns 0, or -1 when a packing buffer could not be allocated. */
int mk_gemm_chain_run(size_t nl, const mk_gemm_chain_layer *layers, size_t m, const void *a,
                      ptrdiff_t lda, void *c, void *buf0, void *buf1, int nthreads);

/* C[M x N] = A * B with B NOT pre-packed (element (k, n) at b + k * rsb + n * csb, elements,
 * any sign, compute-dtype storage): matmul. With more than one thread, ONE parallel region
 * packs B (chunks of panels taken from a shared counter; a thread goes on as soon as every
 * chunk is packed, with no barrier that would wait for a thread not yet scheduled; it
 * yields its core after a short spin) and then computes tiles taken from a shared counter;
 * on the row-direct path with row tiles, packing is pipelined with the compute instead:
 * chunk j + 1 .. j + 2 are packed while the team computes MC-row tiles of chunk j.
 * Subject to the contention back-off below. The packed B (the mk_gemm_pack layout, zero
 * bias) goes to a buffer the calling thread keeps between calls (up to 32 MiB; a larger one
 * is freed after the call). Returns 0, or -1 when a buffer could not be allocated (C is
 * then undefined). */
int mk_gemm_matmul(const mk_gemm_config *cfg, size_t m, size_t n, size_t k, const void *a,
                   ptrdiff_t rsa, ptrdiff_t csa, const void *b, ptrdiff_t rsb, ptrdiff_t csb,
                   void *c, size_t ldc, int nthreads);

/* Every threaded GEMM, layer chain, matmul and recurrence takes part in the contention
 * back-off of common/team.h. */



/* Whether problems with more than MK_SMALLM_MAX rows and a unit-stride A run the MR-row
 * direct kernels on A in place (1, the default) or pack A (0); returns the previous setting.
 * Both give bit-identical results: for tests and benchmarks. */
int mk_gemm_set_rowdirect(int on);

/* Threads mk_gemm_run would use for this problem (for tests and benchmarks). */
int mk_gemm_plan_threads(const mk_gemm_config *cfg, size_t m, size_t n, size_t k, int nthreads);

/* Start OpenMP's thread team now (so the first real call does not pay for it). */
void mk_gemm_warm_threads(int nthreads);

/* Epilogue activations (gemm-act.c over common/act.h): per element, and on a stored tile. */
float mk_act_scalar_f32(float x, const mk_epilogue *ep);
double mk_act_scalar_f64(double x, const mk_epilogue *ep);
void mk_act_tile_f32_scalar(size_t rows, size_t nc, void *c, size_t ldc, const mk_epilogue *ep);
void mk_act_tile_f64_scalar(size_t rows, size_t nc, void *c, size_t ldc, const mk_epilogue *ep);
void mk_act_tile_f32_avx2(size_t rows, size_t nc, void *c, size_t ldc, const mk_epilogue *ep);
void mk_act_tile_f32_avx512(size_t rows, size_t nc, void *c, size_t ldc, const mk_epilogue *ep);

/* The entry points the convolution's Winograd GEMM stage uses (gemm-wino-api.c), handed to
 * the _conv extension at import (wino-eng-api.h). */
extern const mk_wino_eng_api mk_gemm_wino_api;

#ifdef __cplusplus
}
#endif
#endif /* MK_GEMM_H */
