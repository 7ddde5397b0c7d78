/* f32 small-M GEMM microkernels, 1x32 .. 8x32, AVX512: A read in place (no packing),
 * MK_NP panels per call (2 for one row, else 1), the whole K in one pass (batch-1 .. batch-8 inference). One instantiation of
 * gemm-direct.inc.h per row count and weight storage:
 *   mk_f32_gemm_<m>x32d__avx512, m = 1..8
 *   mk_f32_f16w_gemm_<m>x32d__avx512, m = 1..8
 *   mk_f32_bf16w_gemm_<m>x32d__avx512, m = 1..8
 * Chosen in gemm-config.c. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#define MK_OPS_AVX512_F32
#include "gemm-ops.h"

#define MK_FN mk_f32_gemm_1x32d__avx512
#define MK_SM 1
#define MK_NP 2
#define MK_NV 2
#define MK_WT float
#define MK_LOADW(p) MK_LOADW_F32(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_gemm_2x32d__avx512
#define MK_SM 2
#define MK_NP 1
#define MK_NV 2
#define MK_WT float
#define MK_LOADW(p) MK_LOADW_F32(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_gemm_3x32d__avx512
#define MK_SM 3
#define MK_NP 1
#define MK_NV 2
#define MK_WT float
#define MK_LOADW(p) MK_LOADW_F32(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_gemm_4x32d__avx512
#define MK_SM 4
#define MK_NP 1
#define MK_NV 2
#define MK_WT float
#define MK_LOADW(p) MK_LOADW_F32(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_gemm_5x32d__avx512
#define MK_SM 5
#define MK_NP 1
#define MK_NV 2
#define MK_WT float
#define MK_LOADW(p) MK_LOADW_F32(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_gemm_6x32d__avx512
#define MK_SM 6
#define MK_NP 1
#define MK_NV 2
#define MK_WT float
#define MK_LOADW(p) MK_LOADW_F32(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_gemm_7x32d__avx512
#define MK_SM 7
#define MK_NP 1
#define MK_NV 2
#define MK_WT float
#define MK_LOADW(p) MK_LOADW_F32(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_gemm_8x32d__avx512
#define MK_SM 8
#define MK_NP 1
#define MK_NV 2
#define MK_WT float
#define MK_LOADW(p) MK_LOADW_F32(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_f16w_gemm_1x32d__avx512
#define MK_SM 1
#define MK_NP 2
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_F16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_f16w_gemm_2x32d__avx512
#define MK_SM 2
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_F16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_f16w_gemm_3x32d__avx512
#define MK_SM 3
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_F16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_f16w_gemm_4x32d__avx512
#define MK_SM 4
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_F16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_f16w_gemm_5x32d__avx512
#define MK_SM 5
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_F16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_f16w_gemm_6x32d__avx512
#define MK_SM 6
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_F16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_f16w_gemm_7x32d__avx512
#define MK_SM 7
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_F16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_f16w_gemm_8x32d__avx512
#define MK_SM 8
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_F16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_bf16w_gemm_1x32d__avx512
#define MK_SM 1
#define MK_NP 2
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_BF16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_bf16w_gemm_2x32d__avx512
#define MK_SM 2
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_BF16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_bf16w_gemm_3x32d__avx512
#define MK_SM 3
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_BF16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_bf16w_gemm_4x32d__avx512
#define MK_SM 4
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_BF16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_bf16w_gemm_5x32d__avx512
#define MK_SM 5
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_BF16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_bf16w_gemm_6x32d__avx512
#define MK_SM 6
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_BF16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_bf16w_gemm_7x32d__avx512
#define MK_SM 7
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_BF16(p)
#include "gemm-direct.inc.h"

#define MK_FN mk_f32_bf16w_gemm_8x32d__avx512
#define MK_SM 8
#define MK_NP 1
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_BF16(p)
#include "gemm-direct.inc.h"

#endif /* MK_X86 */
