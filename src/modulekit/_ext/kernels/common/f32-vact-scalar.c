/* f32-vact-scalar: y = act(x), one float at a time (the generic ISA level). */
#include "common/act.h"

#define MK_VACT_LOOP(FN) \
    for (; i < n; i++) y[i] = FN(x[i]);
#define VM_FN(name) mk_##name##_f32x1

void mk_f32_vact__scalar(size_t n, const float *x, float *y, int act, float lo, float hi) {
#include "common/f32-vact.inc.h"
}
