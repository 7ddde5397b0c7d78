/* Winograd F(2x2, 3x3) input/output transforms, scalar: the template of
 * f32-winograd-transform.inc.h compiled for this instruction set. */
#include "conv.h"

#define WINO_M 2
#define WINO_VL 4
#define WINO_TARGET
#define WINO_IN mk_f32_wino_in_2x2_scalar
#define WINO_OUT mk_f32_wino_out_2x2_scalar
#include "f32-winograd-transform.inc.h"
