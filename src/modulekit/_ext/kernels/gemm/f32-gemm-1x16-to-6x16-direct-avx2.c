/* f32 small-M GEMM microkernels, 1x16 .. 6x16, AVX2: A read in place (no packing),
 * MK_NP panels per call (2 for one row, else 1), the whole K in one pass (batch-1 .. batch-6 inference). One instantiation of
 * gemm-direct.inc.h per row count and weight storage:
 *   mk_f32_gemm_<m>x16d__avx2, m = 1..6
 *   mk_f32_f16w_gemm_<m>x16d__avx2, m = 1..6
 *   mk_f32_bf16w_gemm_<m>x16d__avx2, m = 1..6
 * Chosen in gemm-config.c. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#define MK_OPS_AVX2_F32
#include "gemm-ops.h"

#define MK_FN mk_f32_gemm_1x16d__avx2
#define MK_SM 1
#define MK_NP 2
#define MK_NV 2
#define MK_WT float
#define MK_LOADW(p) MK_LOADW_F32(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_gemm_2x16d__avx2
#define MK_SM 2
#define MK_NP 1
#define MK_NV 2
#define MK_WT float
#define MK_LOADW(p) MK_LOADW_F32(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_gemm_3x16d__avx2
#define MK_SM 3
#define MK_NP 1
#define MK_NV 2
#define MK_WT float
#define MK_LOADW(p) MK_LOADW_F32(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_gemm_4x16d__avx2
#define MK_SM 4
#define MK_NP 1
#define MK_NV 2
#define MK_WT float
#define MK_LOADW(p) MK_LOADW_F32(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_gemm_5x16d__avx2
#define MK_SM 5
#define MK_NP 1
#define MK_NV 2
#define MK_WT float
#define MK_LOADW(p) MK_LOADW_F32(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_gemm_6x16d__avx2
#define MK_SM 6
#define MK_NP 1
#define MK_NV 2
#define MK_WT float
#define MK_LOADW(p) MK_LOADW_F32(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_f16w_gemm_1x16d__avx2
#define MK_SM 1
#define MK_NP 2
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_F16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_f16w_gemm_2x16d__avx2
#define MK_SM 2
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_F16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_f16w_gemm_3x16d__avx2
#define MK_SM 3
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_F16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_f16w_gemm_4x16d__avx2
#define MK_SM 4
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_F16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_f16w_gemm_5x16d__avx2
#define MK_SM 5
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_F16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_f16w_gemm_6x16d__avx2
#define MK_SM 6
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_F16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_bf16w_gemm_1x16d__avx2
#define MK_SM 1
#define MK_NP 2
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_BF16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_bf16w_gemm_2x16d__avx2
#define MK_SM 2
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_BF16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_bf16w_gemm_3x16d__avx2
#define MK_SM 3
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_BF16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_bf16w_gemm_4x16d__avx2
#define MK_SM 4
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_BF16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_bf16w_gemm_5x16d__avx2
#define MK_SM 5
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_BF16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_bf16w_gemm_6x16d__avx2
#define MK_SM 6
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_BF16(p)
#include "gemm-direct.inc.h"

#endif /* MK_X86 */
