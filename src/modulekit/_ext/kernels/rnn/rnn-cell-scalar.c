/* Portable C recurrent cells (rnn.h): rnn-cell.inc.h on one lane, in float32 (common's float32
 * math: the same bits as the AVX2 and AVX-512 cells) and in float64 (the libm reference of
 * common/act.h; the float64 path at every ISA level). */
#include <stddef.h>

#include "common/act.h"
#include "rnn.h"

#include "common/vops-scalar.h"
#define MK_RNN_FN(kind) mk_f32_rnn_##kind##__scalar
#include "rnn-cell.inc.h"
#include "common/vmath-undef.h"

#define VM_F64
#include "common/vops-scalar.h"
#define MK_RNN_FN(kind) mk_f64_rnn_##kind##__scalar
#include "rnn-cell.inc.h"
#include "common/vmath-undef.h"
