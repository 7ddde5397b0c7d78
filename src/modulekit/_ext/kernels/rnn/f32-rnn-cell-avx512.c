/* Fused float32 recurrent cells (rnn.h), AVX-512: rnn-cell.inc.h on 16 lanes. */
#include "common/vmath-avx512.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "rnn.h"

#include "common/vops-avx512.h"
#define MK_RNN_FN(kind) mk_f32_rnn_##kind##__avx512
#include "rnn-cell.inc.h"
#include "common/vmath-undef.h"

#endif /* MK_X86 */
