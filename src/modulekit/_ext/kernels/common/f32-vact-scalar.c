/* f32-vact-scalar: y = act(x), one float at a time (the generic ISA level). */
#include "common/act.h"

#include "common/vops-scalar.h"
#define MK_VACT_NAME mk_f32_vact__scalar
#include "common/f32-vact.inc.h"
#include "common/vmath-undef.h"
