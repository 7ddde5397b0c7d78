/* f64 GEMM microkernel, 4x4 register block, portable C (the generic ISA level):
 *   mk_f64_gemm_4x4__scalar: float64 weights, float64 compute.
 * Chosen in gemm-config.c. */
#include "gemm.h"

#define MK_ACT_SCALAR(x, ep) mk_act_scalar_f64((x), (ep))

#define MK_FN mk_f64_gemm_4x4__scalar
#define MK_MR 4
#define MK_NR 4
#define MK_CT double
#define MK_WT double
#define MK_WCVT(x) (x)
#include "gemm-scalar.inc.h"
