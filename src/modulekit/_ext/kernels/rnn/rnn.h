/* Recurrent cells (RNN, LSTM, GRU): the gate math of one time step, fused.
 *
 * A recurrent layer computes, per time step t, the recurrent GEMM G = h_{t-1} W_hh^T (+ b_hh)
 * with the packed GEMM engine (kernels/gemm), and then ONE call of a cell kernel here, which
 * reads the step's input projection X (x_t W_ih^T + biases, precomputed for the whole
 * sequence by one GEMM), the GEMM result G and the state, applies the gate nonlinearities,
 * updates the state and writes the new hidden state, all in one pass over the rows. The
 * whole sequence runs in one parallel region (kernels/gemm/gemm-recurrence.c): each thread
 * computes the GEMM columns of its hidden units and then their cell, one barrier per step:
 *
 *   LSTM (gates i, f, g, o, each h wide; X and G are m x 4h):
 *       i = sigmoid(X_i + G_i), f = sigmoid(X_f + G_f), g = tanh(X_g + G_g),
 *       o = sigmoid(X_o + G_o); c = f * c + i * g; h = o * tanh(c)
 *       X holds b_ih + b_hh, G holds no bias.
 *   GRU (gates r, z, n; X and G are m x 3h):
 *       r = sigmoid(X_r + G_r), z = sigmoid(X_z + G_z), n = tanh(X_n + r * G_n),
 *       h = n + z * (h - n)      (= (1 - z) n + z h)
 *       X holds b_ih, G holds b_hh (b_hn must stay inside r * (...)).
 *   RNN (m x h): h = tanh(X + G) or relu(X + G); X holds b_ih + b_hh.
 *
 * Arguments (element strides; m rows, lanes [0, w) of each: a range of hidden units, the
 * whole state or one thread's share of it, kernels/gemm/gemm-recurrence.c):
 *   gs:       the distance between gate blocks in x and g (the layer's hidden size)
 *   x, ldx:   the step's input projection rows (gate blocks gs apart)
 *   g, ldg:   the recurrent GEMM's rows (gate blocks gs apart)
 *   c, ldc:   LSTM cell state, read and written; unused (NULL) for GRU and RNN
 *   hp, ldp:  the previous hidden state (read by GRU; may be hs itself)
 *   hs, ldh:  the new hidden state (written)
 *   out, ldo: a second destination of the new hidden state (the layer's output rows), or NULL
 * The C functions only compute: the caller (modulekit/_ext/_rnn.pyx) checks every shape. */
#ifndef MK_RNN_H
#define MK_RNN_H

#include <stddef.h>

#include "isa.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MK_RNN_LSTM = 0,
    MK_RNN_GRU = 1,
    MK_RNN_TANH = 2,
    MK_RNN_RELU = 3,
    MK_RNN_KIND_COUNT = 4
} mk_rnn_kind;

typedef void mk_rnn_cell(size_t m, size_t w, size_t gs, const void *x, size_t ldx,
                         const void *g, size_t ldg, void *c, size_t ldc, const void *hp,
                         size_t ldp, void *hs, size_t ldh, void *out, size_t ldo);
typedef mk_rnn_cell *mk_rnn_cell_fn;

typedef struct {
    const char *name;             /* e.g. "f32-rnn-cell-avx512" */
    int isa;                      /* mk_isa */
    mk_rnn_cell_fn cell[MK_RNN_KIND_COUNT];
} mk_rnn_config;

/* The cell kernels for float32 (f64 = 0) or float64 (f64 = 1) at an ISA level. */
const mk_rnn_config *mk_rnn_get_config(int f64, int isa);

mk_rnn_cell mk_f32_rnn_lstm__scalar, mk_f32_rnn_gru__scalar, mk_f32_rnn_tanh__scalar,
    mk_f32_rnn_relu__scalar;
mk_rnn_cell mk_f64_rnn_lstm__scalar, mk_f64_rnn_gru__scalar, mk_f64_rnn_tanh__scalar,
    mk_f64_rnn_relu__scalar;
#if MK_X86
mk_rnn_cell mk_f32_rnn_lstm__avx2, mk_f32_rnn_gru__avx2, mk_f32_rnn_tanh__avx2,
    mk_f32_rnn_relu__avx2;
mk_rnn_cell mk_f32_rnn_lstm__avx512, mk_f32_rnn_gru__avx512, mk_f32_rnn_tanh__avx512,
    mk_f32_rnn_relu__avx512;
#endif

#ifdef __cplusplus
}
#endif
#endif /* MK_RNN_H */
