# cython: language_level=3
"""Recurrent layers' time loop: per step, the recurrent GEMM (packed GEMM engine) and ONE
fused cell kernel (kernels/rnn: gate nonlinearities, state update, output write), the whole
sequence in one ``nogil`` call and one parallel region (``kernels/gemm/gemm-recurrence.c``:
each thread computes the GEMM columns of its share of the hidden units, then their cell).

The layer (``modulekit/nn/modules/rnn.py``) computes the input projection of every time step
at once (one packed GEMM over all rows, biases folded in) and calls :func:`recurrence` once
per layer and direction. Rows are addressed as in a packed sequence: time step ``t`` owns
rows ``offsets[t] .. offsets[t] + batch_sizes[t]`` of the projection and of the output, and
its ``batch_sizes[t]`` sequences are the first rows of the state (sequences sorted by
decreasing length, as ``PackedSequence`` keeps them); a padded batch is the special case
``offsets[t] = t * B``, ``batch_sizes[t] = B``.
"""

cimport numpy as cnp
from libc.string cimport memcpy

import numpy as np

from modulekit._ext._align cimport check_aligned
from modulekit._ext._gemm cimport PackedLinear, make_epilogue, mk_epilogue, mk_gemm_recurrence
from modulekit._ext._isa cimport active_isa
from modulekit._ext._openmp_helpers cimport bind_team, effective_threads

_TEAM = bind_team()  # the kernels' contention back-off: the process's state

cnp.import_array()

__all__ = ["KINDS", "recurrence", "cell_kernel"]

cdef extern from "rnn/rnn.h" nogil:
    ctypedef void (*mk_rnn_cell_fn)(size_t m, size_t w, size_t gs, const void *x, size_t ldx,
                                    const void *g, size_t ldg, void *c, size_t ldc,
                                    const void *hp, size_t ldp, void *hs, size_t ldh,
                                    void *out, size_t ldo)
    ctypedef struct mk_rnn_config:
        const char *name
        int isa
        mk_rnn_cell_fn cell[4]
    const mk_rnn_config *mk_rnn_get_config(int f64, int isa)

cdef bint _fused = True


def _set_fused(bint on):
    """Whether :func:`recurrence` runs the fused time loop where it can (True, the default)
    or a GEMM call and a cell call per step; returns the previous setting. Both give the
    same bits: for tests and benchmarks."""
    global _fused
    cdef bint was = _fused
    _fused = on
    return was


# One step's cell for a thread's hidden units [u0, u1) (mk_gemm_step_fn of the recurrence
# driver): step s is time step s (T - 1 - s in reverse); the units' lanes of every operand.
ctypedef struct _StepCtx:
    mk_rnn_cell_fn cell
    size_t H, G, X, O, es
    const long long *off
    Py_ssize_t T
    bint reverse
    const char *xp      # xg at column xcol
    char *op            # out at column ocol
    char *cp            # c, or NULL
    char *gp            # the GEMM's rows


cdef void _cell_step(void *ctx, size_t s, size_t m, size_t u0, size_t u1, const void *prev,
                     void *nxt) noexcept nogil:
    cdef _StepCtx *k = <_StepCtx *>ctx
    cdef size_t tt = <size_t>(k.T - 1) - s if k.reverse else s
    cdef size_t r0 = <size_t>k.off[tt], es = k.es, H = k.H
    k.cell(m, u1 - u0, H, k.xp + (r0 * k.X + u0) * es, k.X, k.gp + u0 * es, k.G * H,
           k.cp + u0 * es if k.cp != NULL else NULL, H, <const char *>prev + u0 * es, H,
           <char *>nxt + u0 * es, H, k.op + (r0 * k.O + u0) * es, k.O)


#: The cell kinds and their gate counts.
KINDS = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
cdef dict _KIND_INDEX = {"lstm": 0, "gru": 1, "rnn_tanh": 2, "rnn_relu": 3}


def cell_kernel(dtype):
    """Name of the cell kernel configuration the active instruction set uses for ``dtype``
    (float32 or float64)."""
    dt = np.dtype(dtype)
    if dt != np.float32 and dt != np.float64:
        raise TypeError(f"recurrent cells compute in float32 or float64, not {dt}")
    return mk_rnn_get_config(dt == np.float64, <int>active_isa()).name.decode()


cdef int _check_array(object a, str what, object dt, int ndim, bint writeable) except -1:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"recurrence: {what} must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype != dt:
        raise TypeError(f"recurrence: {what} must have dtype {dt}, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"recurrence: {what} must have {ndim} dimensions, got shape {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"recurrence: {what} must be C-contiguous")
    if writeable and not a.flags.writeable:
        raise ValueError(f"recurrence: {what} must be writeable")
    check_aligned(a, "recurrence: " + what)
    return 0


def recurrence(str kind, PackedLinear hh, PackedLinear hr, object xg, Py_ssize_t xcol,
               object out, Py_ssize_t ocol, object h, object c,
               object offsets, object batch_sizes, bint reverse=False):
    """Run one direction of one recurrent layer over a sequence, in place.

    Parameters
    ----------
    kind : {"lstm", "gru", "rnn_tanh", "rnn_relu"}
    hh : PackedLinear
        The recurrent weight ``W_hh`` (``G * hidden`` x ``hidden_out``; G = 4, 3, 1 gates),
        with ``b_hh`` as its bias for "gru" (no bias otherwise: it is folded into ``xg``).
    hr : PackedLinear or None
        LSTM projection ``W_hr`` (``hidden_out`` x ``hidden``), or None (``hidden_out`` is
        then ``hidden``).
    xg : ndarray, shape (N, X)
        Input projections of every row (C-contiguous, the compute dtype); this direction's
        gates are columns ``xcol .. xcol + G * hidden``.
    out : ndarray, shape (N, O)
        Output rows; this direction writes columns ``ocol .. ocol + hidden_out``.
    h : ndarray, shape (B, hidden_out)
        Initial hidden state, overwritten with the final one (C-contiguous).
    c : ndarray, shape (B, hidden), or None
        LSTM initial cell state, overwritten with the final one; None for the others.
    offsets, batch_sizes : ndarray of int64, shape (T,)
        First row and row count of each time step; ``batch_sizes`` non-increasing, at most B.
    reverse : bool
        Run the steps from last to first (the reverse direction of a bidirectional layer).

    Returns
    -------
    None. A sequence's final state stays in its row of ``h`` (and ``c``) once its last step
    ran: for packed sequences of several lengths, ``h`` ends as torch's ``h_n``.
    """
    cdef int k = _KIND_INDEX.get(kind, -1)
    if k < 0:
        raise ValueError(f"recurrence: kind must be one of {sorted(KINDS)}, got {kind!r}")
    cdef Py_ssize_t G = KINDS[kind]
    dt = hh.compute_dtype
    hh.ensure_ready()
    if hh.out_features % G != 0:
        raise ValueError(f"recurrence: W_hh has {hh.out_features} rows, not a multiple of {G}")
    cdef Py_ssize_t H = hh.out_features // G
    cdef Py_ssize_t Hout = hh.in_features
    if hr is not None:
        if k != 0:
            raise ValueError("recurrence: a projection (hr) is for LSTM only")
        hr.ensure_ready()
        if hr.compute_dtype != dt or hr.in_features != H or hr.out_features != Hout:
            raise ValueError(
                f"recurrence: W_hr must map {H} to {Hout} features in {dt}; got "
                f"{hr.in_features} -> {hr.out_features} in {hr.compute_dtype}")
    elif Hout != H:
        raise ValueError(f"recurrence: W_hh is {hh.out_features} x {Hout}, expected "
                         f"{hh.out_features} x {H} without a projection")
    _check_array(xg, "xg", dt, 2, False)
    _check_array(out, "out", dt, 2, True)
    _check_array(h, "h", dt, 2, True)
    _check_array(offsets, "offsets", np.dtype(np.int64), 1, False)
    _check_array(batch_sizes, "batch_sizes", np.dtype(np.int64), 1, False)
    cdef Py_ssize_t N = xg.shape[0], X = xg.shape[1], O = out.shape[1], B = h.shape[0]
    cdef Py_ssize_t T = offsets.shape[0]
    if out.shape[0] != N:
        raise ValueError(f"recurrence: out has {out.shape[0]} rows, xg {N}")
    if xcol < 0 or xcol + G * H > X:
        raise ValueError(f"recurrence: xg columns {xcol}..{xcol + G * H} out of its {X}")
    if ocol < 0 or ocol + Hout > O:
        raise ValueError(f"recurrence: out columns {ocol}..{ocol + Hout} out of its {O}")
    if h.shape[1] != Hout:
        raise ValueError(f"recurrence: h must have shape ({B}, {Hout}), got {h.shape}")
    if k == 0:
        if c is None:
            raise ValueError("recurrence: an LSTM needs the cell state c")
        _check_array(c, "c", dt, 2, True)
        if c.shape[0] != B or c.shape[1] != H:
            raise ValueError(f"recurrence: c must have shape ({B}, {H}), got {c.shape}")
    elif c is not None:
        raise ValueError(f"recurrence: {kind} has no cell state")
    if batch_sizes.shape[0] != T:
        raise ValueError("recurrence: offsets and batch_sizes differ in length")
    cdef const long long[::1] off = offsets
    cdef const long long[::1] bs = batch_sizes
    cdef Py_ssize_t t
    for t in range(T):
        if bs[t] < 0 or bs[t] > B or (t > 0 and bs[t] > bs[t - 1]):
            raise ValueError("recurrence: batch_sizes must be non-increasing, between 0 and "
                             f"{B}; got {batch_sizes.tolist()}")
        if off[t] < 0 or off[t] + bs[t] > N:
            raise ValueError(f"recurrence: step {t} rows {off[t]}..{off[t] + bs[t]} out of "
                             f"the {N} rows")
    for name, a in (("xg", xg), ("h", h), ("c", c)):
        if a is not None and np.may_share_memory(out, a):
            raise ValueError(f"recurrence: out must not overlap {name}")
    if np.may_share_memory(h, xg) or (c is not None and (np.may_share_memory(c, xg)
                                                          or np.may_share_memory(c, h))):
        raise ValueError("recurrence: h, c and xg must not overlap")

    cdef mk_epilogue ep
    make_epilogue("none", 0.0, 0.0, &ep)
    cdef const mk_rnn_config *cfg = mk_rnn_get_config(dt == np.float64, <int>active_isa())
    cdef mk_rnn_cell_fn cell = cfg.cell[k]
    cdef cnp.ndarray gates = np.empty((max(B, 1), G * H), dtype=dt)
    cdef cnp.ndarray hfull = np.empty((max(B, 1), H), dtype=dt) if hr is not None else None
    cdef size_t es = dt.itemsize
    cdef char *xp = <char *>cnp.PyArray_DATA(<cnp.ndarray>xg)
    cdef char *op = <char *>cnp.PyArray_DATA(<cnp.ndarray>out)
    cdef char *hp = <char *>cnp.PyArray_DATA(<cnp.ndarray>h)
    cdef char *cp = <char *>cnp.PyArray_DATA(<cnp.ndarray>c) if c is not None else NULL
    cdef char *gp = <char *>cnp.PyArray_DATA(gates)
    cdef char *fp = <char *>cnp.PyArray_DATA(hfull) if hr is not None else NULL
    cdef int nthreads = effective_threads()
    cdef int rc = -2
    cdef Py_ssize_t s, m, r, tt
    cdef char *xrow
    cdef char *orow
    cdef _StepCtx ctx
    cdef mk_gemm_recurrence rec
    cdef cnp.ndarray rows, spare
    if hr is None and _fused:
        # the fused time loop (gemm-recurrence.c); -2 when H is not a multiple of the GEMM's
        # panel width: then the loop below
        rows = np.ascontiguousarray(batch_sizes[::-1] if reverse else batch_sizes, np.uintp)
        spare = np.empty((max(B, 1), H), dtype=dt)
        ctx.cell, ctx.H, ctx.G, ctx.X, ctx.O, ctx.es = cell, H, G, X, O, es
        ctx.off, ctx.T, ctx.reverse = &off[0] if T else NULL, T, reverse
        ctx.xp, ctx.op, ctx.cp, ctx.gp = xp + xcol * es, op + ocol * es, cp, gp
        rec.ep = &ep
        rec.gates, rec.h, rec.steps = G, H, T
        rec.rows = <const size_t *>cnp.PyArray_DATA(rows)
        rec.state, rec.spare, rec.g = hp, cnp.PyArray_DATA(spare), gp
        rec.step, rec.ctx = _cell_step, &ctx
        with nogil:
            rc = hh.recurrence(&rec, nthreads)
    if rc == -2:
        rc = 0
        with nogil:
            for s in range(T):
                tt = T - 1 - s if reverse else s
                m = <Py_ssize_t>bs[tt]
                if m == 0:
                    continue
                rc = hh.gemm(<size_t>m, hp, Hout, 1, gp, <size_t>(G * H), &ep, nthreads)
                if rc != 0:
                    break
                xrow = xp + (<size_t>off[tt] * <size_t>X + <size_t>xcol) * es
                orow = op + (<size_t>off[tt] * <size_t>O + <size_t>ocol) * es
                if hr is None:
                    cell(<size_t>m, <size_t>H, <size_t>H, xrow, <size_t>X, gp, <size_t>(G * H),
                         cp, <size_t>H, hp, <size_t>Hout, hp, <size_t>Hout, orow, <size_t>O)
                else:
                    cell(<size_t>m, <size_t>H, <size_t>H, xrow, <size_t>X, gp, <size_t>(G * H),
                         cp, <size_t>H, fp, <size_t>H, fp, <size_t>H, NULL, 0)
                    rc = hr.gemm(<size_t>m, fp, H, 1, hp, <size_t>Hout, &ep, nthreads)
                    if rc != 0:
                        break
                    for r in range(m):
                        memcpy(orow + <size_t>r * <size_t>O * es,
                               hp + <size_t>r * <size_t>Hout * es, <size_t>Hout * es)
    if rc != 0:
        raise MemoryError("recurrence: cannot allocate the GEMM packing buffer")
