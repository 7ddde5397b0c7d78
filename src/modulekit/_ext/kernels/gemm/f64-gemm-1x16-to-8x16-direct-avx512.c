/* f64 small-M GEMM microkernels, 1x16 .. 8x16, AVX512: A read in place (no packing),
 * MK_NP panels per call (2 for one row, else 1), the whole K in one pass (batch-1 .. batch-8 inference). One instantiation of
 * gemm-direct.inc.h per row count and weight storage:
 *   mk_f64_gemm_<m>x16d__avx512, m = 1..8
 * Chosen in gemm-config.c. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#define MK_OPS_AVX512_F64
#include "gemm-ops.h"

#define MK_FN mk_f64_gemm_1x16d__avx512
#define MK_SM 1
#define MK_NP 2
#define MK_NV 2
#define MK_WT double
#define MK_LOADW(p) MK_LOADW_F64(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f64_gemm_2x16d__avx512
#define MK_SM 2
#define MK_NP 1
#define MK_NV 2
#define MK_WT double
#define MK_LOADW(p) MK_LOADW_F64(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f64_gemm_3x16d__avx512
#define MK_SM 3
#define MK_NP 1
#define MK_NV 2
#define MK_WT double
#define MK_LOADW(p) MK_LOADW_F64(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f64_gemm_4x16d__avx512
#define MK_SM 4
#define MK_NP 1
#define MK_NV 2
#define MK_WT double
#define MK_LOADW(p) MK_LOADW_F64(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f64_gemm_5x16d__avx512
#define MK_SM 5
#define MK_NP 1
#define MK_NV 2
#define MK_WT double
#define MK_LOADW(p) MK_LOADW_F64(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f64_gemm_6x16d__avx512
#define MK_SM 6
#define MK_NP 1
#define MK_NV 2
#define MK_WT double
#define MK_LOADW(p) MK_LOADW_F64(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f64_gemm_7x16d__avx512
#define MK_SM 7
#define MK_NP 1
#define MK_NV 2
#define MK_WT double
#define MK_LOADW(p) MK_LOADW_F64(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f64_gemm_8x16d__avx512
#define MK_SM 8
#define MK_NP 1
#define MK_NV 2
#define MK_WT double
#define MK_LOADW(p) MK_LOADW_F64(p)
#include "gemm-direct.inc.h"

#endif /* MK_X86 */
