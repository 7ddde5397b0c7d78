/* f64 small-M GEMM microkernels, 1x8 .. 6x8, AVX2: A read in place (no packing),
 * MK_NP panels per call (2 for one row, else 1), the whole K in one pass (batch-1 .. batch-6 inference). One instantiation of
 * gemm-direct.inc.h per row count and weight storage:
 *   mk_f64_gemm_<m>x8d__avx2, m = 1..6
 * Chosen in gemm-config.c. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#define MK_OPS_AVX2_F64
#include "gemm-ops.h"

#define MK_FN mk_f64_gemm_1x8d__avx2
#define MK_SM 1
#define MK_NP 2
#define MK_NV 2
#define MK_WT double
#define MK_LOADW(p) MK_LOADW_F64(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f64_gemm_2x8d__avx2
#define MK_SM 2
#define MK_NP 1
#define MK_NV 2
#define MK_WT double
#define MK_LOADW(p) MK_LOADW_F64(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f64_gemm_3x8d__avx2
#define MK_SM 3
#define MK_NP 1
#define MK_NV 2
#define MK_WT double
#define MK_LOADW(p) MK_LOADW_F64(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f64_gemm_4x8d__avx2
#define MK_SM 4
#define MK_NP 1
#define MK_NV 2
#define MK_WT double
#define MK_LOADW(p) MK_LOADW_F64(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f64_gemm_5x8d__avx2
#define MK_SM 5
#define MK_NP 1
#define MK_NV 2
#define MK_WT double
#define MK_LOADW(p) MK_LOADW_F64(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f64_gemm_6x8d__avx2
#define MK_SM 6
#define MK_NP 1
#define MK_NV 2
#define MK_WT double
#define MK_LOADW(p) MK_LOADW_F64(p)
#include "gemm-direct.inc.h"

#endif /* MK_X86 */
