/* f32 GEMM microkernel, 4x8 register block, portable C (the generic ISA level).
 * One instantiation of gemm-scalar.inc.h per weight storage:
 *   mk_f32_gemm_4x8__scalar: float32 weights
 *   mk_f32_f16w_gemm_4x8__scalar: float16 weights (exact software widening)
 *   mk_f32_bf16w_gemm_4x8__scalar: bfloat16 weights (widened by a 16-bit shift)
 * Chosen in gemm-config.c. */
#include "common/half.h"
#include "gemm.h"

#define MK_ACT_SCALAR(x, ep) mk_act_scalar_f32((x), (ep))

#define MK_FN mk_f32_gemm_4x8__scalar
#define MK_MR 4
#define MK_NR 8
#define MK_CT float
#define MK_WT float
#define MK_WCVT(x) (x)
#include "gemm-scalar.inc.h"

#define MK_FN mk_f32_f16w_gemm_4x8__scalar
#define MK_MR 4
#define MK_NR 8
#define MK_CT float
#define MK_WT uint16_t
#define MK_WCVT(x) mk_f16_to_f32(x)
#include "gemm-scalar.inc.h"

#define MK_FN mk_f32_bf16w_gemm_4x8__scalar
#define MK_MR 4
#define MK_NR 8
#define MK_CT float
#define MK_WT uint16_t
#define MK_WCVT(x) mk_bf16_to_f32(x)
#include "gemm-scalar.inc.h"
