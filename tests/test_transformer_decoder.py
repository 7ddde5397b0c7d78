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
