/* The CPU's data caches, as the kernels' block sizes are chosen against them.
 *
 * The tables (gemm-config.c, conv-config.c, the Winograd driver) keep the block sizes measured
 * on the reference machine, an AMD EPYC Zen 5 / Zen 4 with a 1 MiB L2 per core; the sizes
 * that are an L2 budget (the GEMM's MC x KC activation block, the Winograd tile block, the
 * fused max pool's and the fused inverted residual blocks' row bands, the Winograd cost
 * model's and the AMX pair image's "fits L2") follow this CPU's L2 (mk_l2_scaled, or a share
 * of mk_cpu_caches()->l2), so a 2 MiB L2 (the Xeons) doubles them and a 512 KiB one halves
 * them, and the reference machine keeps its measured values.
 *
 * Detection, once per process (every extension links its own copy of kernels/common: each
 * detects the same values): Linux sysfs (cpu0's cache/index*), else sysconf, else the
 * reference machine's. */
#ifndef MK_COMMON_CACHES_H
#define MK_COMMON_CACHES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the reference machine's L2 per core, which the tables' L2 budgets were measured against */
#define MK_REF_L2_BYTES ((size_t)1 << 20)

typedef struct {
    size_t l1d, l2, l3; /* bytes: L1 data and L2 per core, the last level (shared) */
} mk_caches;

/* This CPU's caches (detected at the first call; never zero). */
const mk_caches *mk_cpu_caches(void);

/* A budget of ref bytes on the reference machine, for this CPU: ref * L2 / MK_REF_L2_BYTES,
 * within [ref / 4, 4 * ref]. */
size_t mk_l2_scaled(size_t ref);

/* Replace the detected values (tests and tuning runs; zero fields keep theirs). Not
 * synchronised with running kernels: call it while none runs. Returns the values before. */
mk_caches mk_cpu_caches_set(mk_caches c);

#ifdef __cplusplus
}
#endif

#endif
