"""Recurrent layers (RNN, LSTM, GRU, the cells) and packed sequences against torch."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import modulekit
import modulekit.nn as mnn
from modulekit._ext import _isa, _ops, _rnn
from modulekit._ext._gemm import pack_linear
from modulekit.nn.utils import rnn as mrnn

torch = pytest.importorskip("torch")

RTOL, ATOL = 1e-4, 1e-5


def _pair(cls_name, *args, seed=0, dtype=torch.float32, **kwargs):
    """A torch module with randomised weights (larger than torch's initialisation, so that
    gates saturate, but bounded so that a ReLU RNN does not explode) and the modulekit module
    holding them."""
    torch.manual_seed(seed)
    tm = getattr(torch.nn, cls_name)(*args, **kwargs).to(dtype).eval()
    bound = min(0.6, 2.0 / np.sqrt(args[1]))
    with torch.no_grad():
        for p in tm.parameters():
            p.uniform_(-bound, bound)
    mk = getattr(mnn, cls_name)(*args, **kwargs)
    if dtype == torch.float64:
        mk = mk.to("float64")
    mk.load_state_dict(tm.state_dict())
    return tm.eval(), mk.eval()


def _np(t):
    return t.detach().numpy()


def _check(got, want, rtol=RTOL, atol=ATOL):
    if isinstance(want, torch.nn.utils.rnn.PackedSequence):  # (a tuple: test it first)
        assert isinstance(got, mrnn.PackedSequence)
        _check(got.data, want.data, rtol, atol)
        np.testing.assert_array_equal(got.batch_sizes, _np(want.batch_sizes))
        for g, w in ((got.sorted_indices, want.sorted_indices),
                     (got.unsorted_indices, want.unsorted_indices)):
            assert (g is None) == (w is None)
            if w is not None:
                np.testing.assert_array_equal(g, _np(w))
        return
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want):
            _check(g, w, rtol, atol)
        return
    want = _np(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


LAYERS = [
    ("RNN", {"nonlinearity": "tanh"}),
    ("RNN", {"nonlinearity": "relu"}),
    ("LSTM", {}),
    ("LSTM", {"proj_size": 5}),
    ("GRU", {}),
]
LAYER_IDS = ["rnn_tanh", "rnn_relu", "lstm", "lstm_proj", "gru"]


@pytest.mark.parametrize("name,extra", LAYERS, ids=LAYER_IDS)
@pytest.mark.parametrize("num_layers,bidirectional,batch_first,bias",
                         list(itertools.product((1, 2), (False, True), (False, True),
                                                (True, False))))
def test_layer_options_match_torch(name, extra, num_layers, bidirectional, batch_first, bias):
    tm, mk = _pair(name, 7, 19, num_layers=num_layers, bidirectional=bidirectional,
                   batch_first=batch_first, bias=bias, **extra)
    rng = np.random.default_rng(1)
    shape = (3, 6, 7) if batch_first else (6, 3, 7)
    x = rng.standard_normal(shape).astype(np.float32)
    with torch.no_grad():
        want = tm(torch.from_numpy(x))
    _check(mk(x), want)


@pytest.mark.parametrize("name,extra", LAYERS, ids=LAYER_IDS)
def test_every_isa_path(isa, name, extra):
    # hidden sizes around the vector widths (8, 16 lanes): full vectors and masked tails
    for hidden in (1, 8, 21, 48):
        ex = dict(extra)
        if "proj_size" in ex:
            if hidden == 1:
                continue
            ex["proj_size"] = hidden // 2 + 1 if hidden > 2 else 1
        tm, mk = _pair(name, 5, hidden, num_layers=2, bidirectional=True, **ex)
        x = np.random.default_rng(hidden).standard_normal((9, 4, 5)).astype(np.float32) * 3
        with torch.no_grad():
            want = tm(torch.from_numpy(x))
        _check(mk(x), want)


@pytest.mark.parametrize("name,extra", LAYERS, ids=LAYER_IDS)
@pytest.mark.parametrize("threads", [1, 2])
def test_fused_time_loop_is_the_step_by_step_loop(isa, name, extra, threads):
    # hidden sizes that are whole GEMM panels on every path (8, 16, 32 columns) take the
    # fused time loop (gemm-recurrence.c: one parallel region, each thread the GEMM columns
    # and the cell of its units); it gives the bits of a GEMM call and a cell call per step,
    # for packed sequences of several lengths (rows dropping out), both directions, h0 given
    hidden = 64
    tm, mk = _pair(name, 6, hidden, num_layers=2, bidirectional=True, **extra)
    rng = np.random.default_rng(4)
    lengths = [9, 9, 6, 3, 1]
    x = rng.standard_normal((9, 5, 6)).astype(np.float32) * 2
    hout = extra.get("proj_size", hidden)
    h0 = rng.standard_normal((4, 5, hout)).astype(np.float32)
    c0 = rng.standard_normal((4, 5, hidden)).astype(np.float32)
    state = (h0, c0) if name == "LSTM" else h0
    tstate = tuple(map(torch.from_numpy, state)) if name == "LSTM" else torch.from_numpy(h0)
    tp = torch.nn.utils.rnn.pack_padded_sequence(torch.from_numpy(x), torch.tensor(lengths))
    mp = mrnn.pack_padded_sequence(x, lengths)
    with threadpool_limits(threads):
        fused = [mk(x), mk(mp, state)]
        was = _rnn._set_fused(False)
        try:
            stepwise = [mk(x), mk(mp, state)]
        finally:
            _rnn._set_fused(was)
    for f, s in zip(fused, stepwise):
        np.testing.assert_array_equal(f[0].data if hasattr(f[0], "data") else f[0],
                                      s[0].data if hasattr(s[0], "data") else s[0])
        for fh, sh in zip(f[1] if name == "LSTM" else (f[1],),
                          s[1] if name == "LSTM" else (s[1],)):
            np.testing.assert_array_equal(fh, sh)
    with torch.no_grad():
        _check(fused[0], tm(torch.from_numpy(x)))
        _check(fused[1], tm(tp, tstate))


@pytest.mark.parametrize("name,extra", LAYERS, ids=LAYER_IDS)
def test_initial_states_and_unbatched(name, extra):
    tm, mk = _pair(name, 4, 6, num_layers=2, bidirectional=True, **extra)
    rng = np.random.default_rng(2)
    hout = extra.get("proj_size", 6)
    x = rng.standard_normal((5, 3, 4)).astype(np.float32)
    h0 = rng.standard_normal((4, 3, hout)).astype(np.float32)
    c0 = rng.standard_normal((4, 3, 6)).astype(np.float32)
    hx = (h0, c0) if name == "LSTM" else h0
    thx = tuple(map(torch.from_numpy, hx)) if name == "LSTM" else torch.from_numpy(h0)
    with torch.no_grad():
        _check(mk(x, hx), tm(torch.from_numpy(x), thx))
        # unbatched: (T, input_size) with (L * D, H) states
        hx1 = (h0[:, 0], c0[:, 0]) if name == "LSTM" else h0[:, 0]
        thx1 = tuple(map(torch.from_numpy, hx1)) if name == "LSTM" else torch.from_numpy(hx1)
        _check(mk(x[:, 0], hx1), tm(torch.from_numpy(x[:, 0].copy()), thx1))
        _check(mk(x[:, 0]), tm(torch.from_numpy(x[:, 0].copy())))


def test_initial_state_not_modified():
    tm, mk = _pair("LSTM", 3, 4)
    h0 = np.ones((1, 2, 4), np.float32)
    c0 = np.ones((1, 2, 4), np.float32)
    mk(np.ones((3, 2, 3), np.float32), (h0, c0))
    assert (h0 == 1).all() and (c0 == 1).all()


@pytest.mark.parametrize("name,extra", LAYERS, ids=LAYER_IDS)
@pytest.mark.parametrize("enforce_sorted", [True, False])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_packed_sequences_match_torch(name, extra, enforce_sorted, bidirectional):
    tm, mk = _pair(name, 3, 10, num_layers=2, bidirectional=bidirectional, **extra)
    rng = np.random.default_rng(3)
    lengths = [7, 7, 5, 2, 1] if enforce_sorted else [2, 7, 1, 5, 7]
    x = rng.standard_normal((7, 5, 3)).astype(np.float32)
    tp = torch.nn.utils.rnn.pack_padded_sequence(torch.from_numpy(x), torch.tensor(lengths),
                                                 enforce_sorted=enforce_sorted)
    mp = mrnn.pack_padded_sequence(x, lengths, enforce_sorted=enforce_sorted)
    _check(mp, tp, 0, 0)
    if not enforce_sorted:
        np.testing.assert_array_equal(mp.sorted_indices, _np(tp.sorted_indices))
        np.testing.assert_array_equal(mp.unsorted_indices, _np(tp.unsorted_indices))
    d = 2 if bidirectional else 1
    hout = extra.get("proj_size", 10)
    h0 = rng.standard_normal((2 * d, 5, hout)).astype(np.float32)
    c0 = rng.standard_normal((2 * d, 5, 10)).astype(np.float32)
    with torch.no_grad():
        want = tm(tp)
        if name == "LSTM":
            want_h = tm(tp, (torch.from_numpy(h0), torch.from_numpy(c0)))
            got_h = mk(mp, (h0, c0))
        else:
            want_h = tm(tp, torch.from_numpy(h0))
            got_h = mk(mp, h0)
    got = mk(mp)
    _check(got, want)
    _check(got_h, want_h)
    # and back to padded
    tpad, tlen = torch.nn.utils.rnn.pad_packed_sequence(want[0], batch_first=True,
                                                        total_length=9, padding_value=-1.0)
    mpad, mlen = mrnn.pad_packed_sequence(got[0], batch_first=True, total_length=9,
                                          padding_value=-1.0)
    _check(mpad, tpad)
    np.testing.assert_array_equal(mlen, _np(tlen))


def test_sequence_utilities_match_torch():
    rng = np.random.default_rng(4)
    seqs = [rng.standard_normal((n, 2)).astype(np.float32) for n in (3, 5, 1)]
    tseqs = [torch.from_numpy(s) for s in seqs]
    for bf in (False, True):
        for side in ("right", "left"):
            _check(mrnn.pad_sequence(seqs, batch_first=bf, padding_value=2.0, padding_side=side),
                   torch.nn.utils.rnn.pad_sequence(tseqs, batch_first=bf, padding_value=2.0,
                                                   padding_side=side), 0, 0)
    with pytest.raises(RuntimeError, match="sorted in decreasing order"):
        mrnn.pack_sequence(seqs)
    mp = mrnn.pack_sequence(seqs, enforce_sorted=False)
    tp = torch.nn.utils.rnn.pack_sequence(tseqs, enforce_sorted=False)
    _check(mp, tp, 0, 0)
    for got, want in zip(mrnn.unpack_sequence(mp), seqs):
        np.testing.assert_array_equal(got, want)
    padded = mrnn.pad_sequence(seqs, batch_first=True)
    for got, want in zip(mrnn.unpad_sequence(padded, [3, 5, 1], batch_first=True), seqs):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="greater than 0"):
        mrnn.pack_padded_sequence(np.zeros((3, 2, 1)), [3, 0])
    with pytest.raises(ValueError, match="exceeds"):
        mrnn.pack_padded_sequence(np.zeros((3, 2, 1)), [4, 1])
    with pytest.raises(ValueError, match="at least the length"):
        mrnn.pad_packed_sequence(mp, total_length=2)


@pytest.mark.parametrize("name,extra", LAYERS, ids=LAYER_IDS)
def test_float64(name, extra):
    tm, mk = _pair(name, 4, 9, num_layers=2, bidirectional=True, dtype=torch.float64, **extra)
    x = np.random.default_rng(5).standard_normal((6, 2, 4))
    with torch.no_grad():
        want = tm(torch.from_numpy(x))
    got = mk(x)
    _check(got, want, rtol=1e-10, atol=1e-12)
    assert _rnn.cell_kernel(np.float64) == "f64-rnn-cell-scalar"


def test_non_contiguous_and_other_dtypes():
    tm, mk = _pair("LSTM", 4, 12, batch_first=True)
    base = np.random.default_rng(6).standard_normal((3, 10, 8))
    x = base[:, ::2, ::2]  # non-contiguous float64 view
    with torch.no_grad():
        want = tm(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)))
    _check(mk(x), want)
    xi = (base * 3).astype(np.int32)[:, :, :4]
    with torch.no_grad():
        want = tm(torch.from_numpy(xi.astype(np.float32)))
    _check(mk(xi), want)


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
@pytest.mark.parametrize("bias", [True, False])
def test_cells_match_torch(isa, name, bias):
    tm, mk = _pair(name, 6, 17, bias=bias)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    h = rng.standard_normal((4, 17)).astype(np.float32)
    c = rng.standard_normal((4, 17)).astype(np.float32)
    hx = (h, c) if name == "LSTMCell" else h
    thx = (torch.from_numpy(h), torch.from_numpy(c)) if name == "LSTMCell" else torch.from_numpy(h)
    with torch.no_grad():
        _check(mk(x, hx), tm(torch.from_numpy(x), thx))
        _check(mk(x), tm(torch.from_numpy(x)))
        hx1 = (h[0], c[0]) if name == "LSTMCell" else h[0]
        thx1 = (torch.from_numpy(h[0]), torch.from_numpy(c[0])) if name == "LSTMCell" else \
            torch.from_numpy(h[0])
        _check(mk(x[0], hx1), tm(torch.from_numpy(x[0]), thx1))


def test_rnn_cell_relu():
    tm, mk = _pair("RNNCell", 3, 5, nonlinearity="relu")
    x = np.random.default_rng(8).standard_normal((2, 3)).astype(np.float32)
    with torch.no_grad():
        _check(mk(x), tm(torch.from_numpy(x)))
    assert "nonlinearity=relu" in repr(mk)


def test_saturation_and_nan():
    tm, mk = _pair("LSTM", 3, 20)
    x = np.random.default_rng(9).standard_normal((4, 2, 3)).astype(np.float32) * 200
    with torch.no_grad():
        _check(mk(x), tm(torch.from_numpy(x)))
    x[1, 0, 0] = np.nan
    out, (h, c) = mk(x)
    assert np.isnan(out[1:, 0]).all() and np.isfinite(out[:, 1]).all()


def test_state_dict_keys_pack_and_reload():
    tm, mk = _pair("LSTM", 4, 6, num_layers=2, bidirectional=True, proj_size=3)
    keys = list(tm.state_dict())
    fresh = mnn.LSTM(4, 6, num_layers=2, bidirectional=True, proj_size=3)
    assert list(fresh.state_dict()) == keys
    assert [n for n, _ in fresh.named_parameters()] == [n for n, _ in tm.named_parameters()]
    x = np.random.default_rng(10).standard_normal((5, 2, 4)).astype(np.float32)
    mk(x)  # packs: the weights leave the state dict, and come back exactly when asked
    assert list(mk.state_dict()) == []
    full = mk.state_dict(include_packed=True)
    assert list(full) == keys
    for k, v in tm.state_dict().items():
        np.testing.assert_array_equal(np.asarray(full[k]), _np(v))
    # the arrays handed out are copies: writing into them changes nothing in the layer
    before = mk(x)[0]
    for v in full.values():
        np.asarray(v)[...] = 0
    np.testing.assert_array_equal(mk(x)[0], before)
    # a packed layer re-packs from a new checkpoint
    tm2, _ = _pair("LSTM", 4, 6, num_layers=2, bidirectional=True, proj_size=3, seed=1)
    mk.load_state_dict(tm2.state_dict())
    with torch.no_grad():
        _check(mk(x), tm2(torch.from_numpy(x)))
    # to(float64) re-packs in float64
    mk.to("float64")
    out = mk(x)
    assert out[0].dtype == np.float64
    with torch.no_grad():
        _check(out, tm2.double()(torch.from_numpy(x.astype(np.float64))), rtol=1e-4,
               atol=1e-5)
    # unpickling keeps the weights
    import pickle

    mk2 = pickle.loads(pickle.dumps(mk))
    np.testing.assert_array_equal(mk2(x)[0], out[0])


def test_float16_storage():
    tm, mk = _pair("GRU", 8, 16)
    mk.to("float16")
    x = np.random.default_rng(11).standard_normal((4, 2, 8)).astype(np.float32)
    with torch.no_grad():
        tm16 = tm.half().float()  # the same rounded weights, computed in float32
        _check(mk(x), tm16(torch.from_numpy(x)), rtol=1e-3, atol=1e-4)


def test_initialize_and_repr():
    mk = mnn.GRU(3, 4, num_layers=2, batch_first=True, dropout=0.5, bidirectional=True)
    assert repr(mk) == ("GRU(3, 4, num_layers=2, batch_first=True, dropout=0.5, "
                        "bidirectional=True)")
    assert repr(mnn.LSTM(3, 4, proj_size=2, bias=False)) == "LSTM(3, 4, proj_size=2, bias=False)"
    assert repr(mnn.RNN(3, 4, nonlinearity="relu")) == "RNN(3, 4, nonlinearity='relu')"
    mk.initialize()
    assert list(mk.state_dict()) == []


def test_dropout_only_in_training():
    mnn.manual_seed(0)
    mk = mnn.LSTM(3, 8, num_layers=2, dropout=0.5)
    x = np.random.default_rng(12).standard_normal((5, 2, 3)).astype(np.float32)
    mk.eval()
    a, b = mk(x)[0], mk(x)[0]
    np.testing.assert_array_equal(a, b)
    mk.train()
    c, d = mk(x)[0], mk(x)[0]
    assert not np.array_equal(c, a) and not np.array_equal(c, d)
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        mnn.GRU(3, 4, dropout=0.2)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="proj_size has to be smaller"):
        mnn.LSTM(3, 4, proj_size=4)
    with pytest.raises(ValueError, match="only supported for LSTM"):
        mnn.GRU(3, 4, proj_size=2)
    with pytest.raises(ValueError, match="dropout should be a number"):
        mnn.LSTM(3, 4, dropout=1.5)
    with pytest.raises(ValueError, match="hidden_size must be greater than zero"):
        mnn.RNN(3, 0)
    with pytest.raises(TypeError, match="hidden_size should be of type int"):
        mnn.RNN(3, 2.5)
    with pytest.raises(ValueError, match="Unknown nonlinearity"):
        mnn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="Unknown nonlinearity"):
        mnn.RNNCell(3, 4, nonlinearity="gelu")
    with pytest.raises(ValueError, match="cpu"):
        mnn.LSTM(3, 4, device="cuda")


def test_bad_inputs_name_the_layer():
    mk = mnn.LSTM(3, 4, num_layers=2)
    x = np.zeros((5, 2, 3), np.float32)
    with pytest.raises(ValueError, match=r"LSTM: input.size\(-1\) must be equal to input_size. "
                                         r"Expected 3, got 5"):
        mk(np.zeros((5, 2, 5), np.float32))
    with pytest.raises(ValueError, match="LSTM: Expected sequence length to be larger than 0"):
        mk(np.zeros((0, 2, 3), np.float32))
    assert mk(np.zeros((4, 0, 3), np.float32))[0].shape == (4, 0, 4)  # an empty batch: as torch
    with pytest.raises(ValueError, match="LSTM: Expected input to be 2D or 3D, got 4D"):
        mk(np.zeros((1, 5, 2, 3), np.float32))
    with pytest.raises(ValueError, match=r"LSTM: Expected hidden size \(2, 2, 4\), got "
                                         r"\(2, 3, 4\)"):
        mk(x, (np.zeros((2, 3, 4)), np.zeros((2, 3, 4))))
    with pytest.raises(ValueError, match="unbatched 2-D input, hx should also be 2-D"):
        mk(x[:, 0], (np.zeros((2, 2, 4)), np.zeros((2, 2, 4))))
    with pytest.raises(ValueError, match="batched 3-D input, hx should also be 3-D"):
        mk(x, (np.zeros((2, 4)), np.zeros((2, 4))))
    with pytest.raises(TypeError, match=r"LSTM: hx must be a tuple \(h_0, c_0\)"):
        mk(x, np.zeros((2, 2, 4)))
    with pytest.raises(TypeError, match="LSTM"):
        mk(x.astype(np.complex64))
    g = mnn.GRU(3, 4)
    with pytest.raises(ValueError, match="GRU: Expected hidden size"):
        g(x, np.zeros((1, 2, 5)))
    cell = mnn.GRUCell(3, 4)
    with pytest.raises(ValueError, match="GRUCell: input has inconsistent input_size"):
        cell(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="GRUCell: Expected input to be 1D or 2D"):
        cell(np.zeros((1, 2, 3)))
    with pytest.raises(ValueError, match="GRUCell: hidden has shape"):
        cell(np.zeros((2, 3)), np.zeros((2, 5)))
    with pytest.raises(TypeError, match="LSTMCell: hx must be a tuple"):
        mnn.LSTMCell(3, 4)(np.zeros((2, 3)), np.zeros((2, 4)))
    bad = mrnn.PackedSequence(np.zeros((4, 3), np.float32), [2, 3])
    with pytest.raises(ValueError, match="non-increasing"):
        mk(bad)
    bad = mrnn.PackedSequence(np.zeros((4, 3), np.float32), [2, 1])
    with pytest.raises(ValueError, match="sum to 3"):
        mk(bad)


def test_failed_load_leaves_layer_unchanged():
    tm, mk = _pair("GRU", 3, 4)
    x = np.random.default_rng(13).standard_normal((3, 1, 3)).astype(np.float32)
    before = mk(x)[0]
    sd = {k: _np(v) for k, v in tm.state_dict().items()}
    sd["weight_hh_l0"] = np.zeros((12, 5), np.float32)
    with pytest.raises(modulekit.StateDictError, match="weight_hh_l0"):
        mk.load_state_dict(sd)
    np.testing.assert_array_equal(mk(x)[0], before)


def test_recurrence_validates():
    hh = pack_linear(np.zeros((8, 2), np.float32))
    xg = np.zeros((3, 8), np.float32)
    out = np.zeros((3, 2), np.float32)
    h = np.zeros((1, 2), np.float32)
    c = np.zeros((1, 2), np.float32)
    steps = np.arange(3, dtype=np.int64)
    ones = np.ones(3, dtype=np.int64)
    _rnn.recurrence("lstm", hh, None, xg, 0, out, 0, h, c, steps, ones)
    with pytest.raises(ValueError, match="kind must be one of"):
        _rnn.recurrence("lstmx", hh, None, xg, 0, out, 0, h, c, steps, ones)
    with pytest.raises(ValueError, match="needs the cell state"):
        _rnn.recurrence("lstm", hh, None, xg, 0, out, 0, h, None, steps, ones)
    with pytest.raises(ValueError, match="out of the 3 rows"):
        _rnn.recurrence("lstm", hh, None, xg, 0, out, 0, h, c, steps + 1, ones)
    with pytest.raises(ValueError, match="non-increasing"):
        _rnn.recurrence("lstm", hh, None, xg, 0, out, 0, h, c, steps, np.array([0, 1, 1]))
    with pytest.raises(ValueError, match="columns"):
        _rnn.recurrence("lstm", hh, None, xg, 1, out, 0, h, c, steps, ones)
    with pytest.raises(ValueError, match="must not overlap"):
        _rnn.recurrence("lstm", hh, None, xg, 0, out, 0, out[:1], c, steps, ones)
    with pytest.raises(TypeError, match="dtype float32"):
        _rnn.recurrence("lstm", hh, None, xg.astype(np.float64), 0, out, 0, h, c, steps, ones)
    with pytest.raises(ValueError, match="C-contiguous"):
        _rnn.recurrence("lstm", hh, None, np.zeros((8, 3), np.float32).T, 0, out, 0, h, c,
                        steps, ones)


def test_cell_kernel_per_isa(isa):
    name = _rnn.cell_kernel(np.float32)
    assert name == {"generic": "f32-rnn-cell-scalar", "avx2": "f32-rnn-cell-avx2",
                    "avx512": "f32-rnn-cell-avx512"}[isa]


def _cell_once(kind, xg, h_out, c=None):
    """One step of ``kind`` with a zero recurrent weight: the cell kernel on ``xg`` alone."""
    n = h_out.shape[1]
    g = {"lstm": 4, "gru": 3}.get(kind, 1)
    hh = pack_linear(np.zeros((g * n, n), xg.dtype), storage=xg.dtype.name)
    out = np.empty_like(h_out)
    steps = np.zeros(1, np.int64)
    rows = np.full(1, xg.shape[0], np.int64)
    _rnn.recurrence(kind, hh, None, xg, 0, out, 0, h_out, c, steps, rows)
    return out


def test_cell_nonlinearities_accuracy(isa):
    # tanh (RNN cell) and sigmoid (the LSTM cell state with g saturated at 1 and c_0 = 0)
    # over the whole float range that matters, to a few float32 ulp of the exact values
    mag = np.logspace(-8, 2.3, 1500)
    x = np.concatenate([-mag[::-1], [0.0], mag]).astype(np.float32)
    n = x.size
    t = _cell_once("rnn_tanh", x[None].copy(), np.zeros((1, n), np.float32))
    np.testing.assert_allclose(t[0], np.tanh(x.astype(np.float64)), rtol=5e-7, atol=0)
    xg = np.zeros((1, 4 * n), np.float32)
    xg[0, :n] = x          # input gate i = sigmoid(x)
    xg[0, 2 * n:3 * n] = 30.0  # g = tanh(30) = 1
    c = np.zeros((1, n), np.float32)
    _cell_once("lstm", xg, np.zeros((1, n), np.float32), c)
    want = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(c[0], want, rtol=5e-7, atol=2e-38)
    # NaN propagates, ReLU keeps its sign rules
    t = _cell_once("rnn_tanh", np.array([[np.nan, np.inf, -np.inf]], np.float32),
                   np.zeros((1, 3), np.float32))
    assert np.isnan(t[0, 0]) and t[0, 1] == 1 and t[0, 2] == -1
    r = _cell_once("rnn_relu", np.array([[np.nan, -2.0, 3.0]], np.float32),
                   np.zeros((1, 3), np.float32))
    assert np.isnan(r[0, 0]) and r[0, 1] == 0 and r[0, 2] == 3


def test_cells_are_the_common_math():
    """The cells evaluate the activations of kernels/common: their sigmoid and tanh give
    nn.functional's bits, and every ISA path gives the same cell outputs, bit for bit."""
    mag = np.logspace(-8, 2.3, 997)  # 1994 lanes: whole vectors and a partial one
    x = np.concatenate([-mag[::-1], mag]).astype(np.float32)
    n = x.size
    rng = np.random.default_rng(11)
    xg = {k: (rng.standard_normal((3, g * n)) * 4).astype(np.float32)
          for k, g in _rnn.KINDS.items()}
    h0 = rng.standard_normal((3, n)).astype(np.float32)
    c0 = rng.standard_normal((3, n)).astype(np.float32)

    def bits(a):
        return np.ascontiguousarray(a).view(np.uint32)

    results = {}
    for level in _isa.available_isas():
        previous = _isa.set_isa(level)
        try:
            t = _cell_once("rnn_tanh", x[None].copy(), np.zeros((1, n), np.float32))
            np.testing.assert_array_equal(bits(t[0]), bits(_ops.activation(x, "tanh")))
            gates = np.zeros((1, 4 * n), np.float32)
            gates[0, :n] = x  # c = sigmoid(x) * tanh(30), tanh(30) = 1
            gates[0, 2 * n:3 * n] = 30.0
            c = np.zeros((1, n), np.float32)
            _cell_once("lstm", gates, np.zeros((1, n), np.float32), c)
            np.testing.assert_array_equal(bits(c[0]), bits(_ops.activation(x, "sigmoid")))
            for kind in _rnn.KINDS:
                h, c = h0.copy(), (c0.copy() if kind == "lstm" else None)
                out = _cell_once(kind, xg[kind], h, c)
                results.setdefault(kind, []).append((level, out, h, c))
        finally:
            _isa.set_isa(previous)
    for kind, runs in results.items():
        _, *first = runs[0]
        for level, *other in runs[1:]:
            for got, want in zip(other, first):
                if want is not None:  # out, h, and the LSTM's c
                    np.testing.assert_array_equal(bits(got), bits(want), f"{kind} {level}")
