"""TransformerDecoderLayer, TransformerDecoder and Transformer against torch."""

from __future__ import annotations

import numpy as np
import pytest

import modulekit.nn as mnn

torch = pytest.importorskip("torch")


def _load(mk, tm):
    mk.load_state_dict(tm.state_dict())
    return mk.eval()


def _randomise(tm, seed=0):
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in tm.parameters():
            p.uniform_(-0.5, 0.5)
    return tm.eval()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_layer_matches_torch(norm_first, batch_first, activation):
    kw = dict(dim_feedforward=24, dropout=0.1, activation=activation, batch_first=batch_first,
              norm_first=norm_first)
    tm = _randomise(torch.nn.TransformerDecoderLayer(8, 2, **kw))
    mk = _load(mnn.TransformerDecoderLayer(8, 2, **kw), tm)
    rng = np.random.default_rng(0)
    tgt = rng.standard_normal((3, 5, 8) if batch_first else (5, 3, 8)).astype(np.float32)
    mem = rng.standard_normal((3, 7, 8) if batch_first else (7, 3, 8)).astype(np.float32)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5)
    tkpm = np.zeros((3, 5), bool)
    tkpm[1, 3:] = True
    mkpm = np.zeros((3, 7), bool)
    mkpm[2, 5:] = True
    mmask = rng.standard_normal((5, 7)).astype(np.float32)
    with torch.no_grad():
        want = tm(torch.from_numpy(tgt), torch.from_numpy(mem), tgt_mask=causal,
                  memory_mask=torch.from_numpy(mmask),
                  tgt_key_padding_mask=torch.from_numpy(tkpm),
                  memory_key_padding_mask=torch.from_numpy(mkpm), tgt_is_causal=True)
        plain = tm(torch.from_numpy(tgt), torch.from_numpy(mem))
    got = mk(tgt, mem, tgt_mask=causal.numpy(), memory_mask=mmask, tgt_key_padding_mask=tkpm,
             memory_key_padding_mask=mkpm, tgt_is_causal=True)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mk(tgt, mem), plain.numpy(), rtol=1e-4, atol=1e-5)
    # tgt_is_causal without a mask applies the causal mask
    np.testing.assert_allclose(mk(tgt, mem, tgt_is_causal=True),
                               mk(tgt, mem, tgt_mask=causal.numpy()), rtol=1e-6, atol=1e-7)
    # unbatched
    t1 = tgt[0] if batch_first else tgt[:, 0]
    m1 = mem[0] if batch_first else mem[:, 0]
    with torch.no_grad():
        want1 = tm(torch.from_numpy(np.ascontiguousarray(t1)),
                   torch.from_numpy(np.ascontiguousarray(m1)))
    np.testing.assert_allclose(mk(t1, m1), want1.numpy(), rtol=1e-4, atol=1e-5)


def test_decoder_stack_and_transformer_match_torch():
    layer = torch.nn.TransformerDecoderLayer(8, 4, 16, dropout=0.0)
    tdec = _randomise(torch.nn.TransformerDecoder(layer, 2, torch.nn.LayerNorm(8)), 1)
    mdec = _load(mnn.TransformerDecoder(mnn.TransformerDecoderLayer(8, 4, 16), 2,
                                        mnn.LayerNorm(8)), tdec)
    assert list(mdec.state_dict()) == list(tdec.state_dict())
    rng = np.random.default_rng(1)
    tgt = rng.standard_normal((4, 2, 8)).astype(np.float32)
    mem = rng.standard_normal((6, 2, 8)).astype(np.float32)
    with torch.no_grad():
        want = tdec(torch.from_numpy(tgt), torch.from_numpy(mem))
    np.testing.assert_allclose(mdec(tgt, mem), want.numpy(), rtol=1e-4, atol=1e-5)

    for batch_first in (False, True):
        tt = _randomise(torch.nn.Transformer(8, 2, 2, 2, 16, dropout=0.0,
                                             batch_first=batch_first), 2)
        mt = _load(mnn.Transformer(8, 2, 2, 2, 16, batch_first=batch_first), tt)
        assert list(mt.state_dict()) == list(tt.state_dict())
        src = rng.standard_normal((2, 6, 8) if batch_first else (6, 2, 8)).astype(np.float32)
        tgt = rng.standard_normal((2, 4, 8) if batch_first else (4, 2, 8)).astype(np.float32)
        skpm = np.zeros((2, 6), bool)
        skpm[1, 4:] = True
        tmask = mnn.Transformer.generate_square_subsequent_mask(4)
        np.testing.assert_array_equal(
            tmask, torch.nn.Transformer.generate_square_subsequent_mask(4).numpy())
        with torch.no_grad():
            want = tt(torch.from_numpy(src), torch.from_numpy(tgt),
                      tgt_mask=torch.from_numpy(tmask),
                      src_key_padding_mask=torch.from_numpy(skpm),
                      memory_key_padding_mask=torch.from_numpy(skpm))
            # torch zero-fills the padded memory rows here (its nested-tensor fast path)
            want_nomask = tt(torch.from_numpy(src), torch.from_numpy(tgt),
                             src_key_padding_mask=torch.from_numpy(skpm))
        got = mt(src, tgt, tgt_mask=tmask, src_key_padding_mask=skpm,
                 memory_key_padding_mask=skpm)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(mt(src, tgt, src_key_padding_mask=skpm),
                                   want_nomask.numpy(), rtol=1e-4, atol=1e-5)


def test_float64_and_bad_input():
    tm = _randomise(torch.nn.TransformerDecoderLayer(4, 2, 8, dropout=0.0)).double()
    mk = _load(mnn.TransformerDecoderLayer(4, 2, 8, dtype="float64"), tm)
    rng = np.random.default_rng(3)
    tgt, mem = rng.standard_normal((3, 2, 4)), rng.standard_normal((5, 2, 4))
    with torch.no_grad():
        want = tm(torch.from_numpy(tgt), torch.from_numpy(mem))
    np.testing.assert_allclose(mk(tgt, mem), want.numpy(), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="TransformerDecoderLayer: tgt .* and memory"):
        mk(tgt, rng.standard_normal((5, 3, 4)))
    with pytest.raises(ValueError, match="TransformerDecoderLayer: tgt must be 2-D"):
        mk(tgt[None], mem)
    with pytest.raises(TypeError, match="decoder_layer must be a TransformerDecoderLayer"):
        mnn.TransformerDecoder(mnn.Linear(2, 2), 2)
    with pytest.raises(RuntimeError, match="activation should be relu/gelu"):
        mnn.TransformerDecoderLayer(4, 2, activation="tanh")
    t = mnn.Transformer(4, 2, 1, 1, 8)
    with pytest.raises(RuntimeError, match="batch number of src and tgt"):
        t(np.zeros((3, 2, 4)), np.zeros((3, 1, 4)))
    with pytest.raises(RuntimeError, match="feature number"):
        t(np.zeros((3, 2, 5)), np.zeros((3, 2, 5)))


@pytest.mark.parametrize("kdim,vdim", [(None, None), (5, 3)])
@pytest.mark.parametrize("add_bias_kv", [False, True])
@pytest.mark.parametrize("add_zero_attn", [False, True])
def test_multihead_attention_options_match_torch(kdim, vdim, add_bias_kv, add_zero_attn):
    kw = dict(kdim=kdim, vdim=vdim, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn,
              batch_first=True)
    tm = _randomise(torch.nn.MultiheadAttention(8, 2, **kw), 4)
    mk = mnn.MultiheadAttention(8, 2, **kw)
    assert list(mk.state_dict()) == list(tm.state_dict())
    _load(mk, tm)
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 3, 8)).astype(np.float32)
    k = rng.standard_normal((2, 4, kdim or 8)).astype(np.float32)
    v = rng.standard_normal((2, 4, vdim or 8)).astype(np.float32)
    kpm = np.array([[False, False, False, True], [False, True, False, False]])
    am = rng.standard_normal((3, 4)).astype(np.float32)
    with torch.no_grad():
        want = tm(*map(torch.from_numpy, (q, k, v)), key_padding_mask=torch.from_numpy(kpm),
                  attn_mask=torch.from_numpy(am), average_attn_weights=False)
    got = mk(q, k, v, key_padding_mask=kpm, attn_mask=am, average_attn_weights=False)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5)
    # packed: the keys come back exactly, a reload re-packs, float64 re-packs
    full = mk.state_dict(include_packed=True)
    for name, value in tm.state_dict().items():
        np.testing.assert_array_equal(np.asarray(full[name]), value.numpy())
    tm2 = _randomise(torch.nn.MultiheadAttention(8, 2, **kw), 6)
    mk.load_state_dict(tm2.state_dict())
    with torch.no_grad():
        want2 = tm2(*map(torch.from_numpy, (q, k, v)))
    np.testing.assert_allclose(mk(q, k, v)[0], want2[0].numpy(), rtol=1e-4, atol=1e-5)
    mk.to("float64")
    with torch.no_grad():
        want64 = tm2.double()(*(torch.from_numpy(a.astype(np.float64)) for a in (q, k, v)))
    np.testing.assert_allclose(mk(q, k, v)[0], want64[0].numpy(), rtol=1e-10, atol=1e-12)
    if kdim is not None:
        with pytest.raises(ValueError, match="key must be 3-D with last dimension kdim=5"):
            mk(q, v, v)


class _SelfAttend(mnn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.attn = mnn.MultiheadAttention(8, 2, batch_first=True, **kw)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


def test_compiled_save_refuses_mha_options_it_cannot_record(tmp_path):
    x = np.random.default_rng(7).standard_normal((1, 3, 8)).astype(np.float32)
    plain = _SelfAttend().eval()
    plain.compile()
    plain(x)
    plain.save(tmp_path / "ok.mk")  # the plain layer saves
    m = _SelfAttend(add_zero_attn=True).eval()
    m.compile()
    m(x)
    with pytest.raises(NotImplementedError, match="add_zero_attn"):
        m.save(tmp_path / "m.mk")
