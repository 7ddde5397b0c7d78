"""BERT's fused query/key/value GEMM: keys, hooks, re-packing and pickling unchanged."""

import copy
import pickle

import numpy as np
import pytest

from modulekit.models.bert import BertModel
from modulekit.nn.modules._fused_linear import RowsOf

CFG = dict(
    vocab_size=50,
    hidden_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=96,
    max_position_embeddings=40,
    type_vocab_size=2,
)


def _model(seed=0):
    rng = np.random.default_rng(seed)
    m = BertModel(CFG)
    sd = {
        k: rng.standard_normal(v.shape).astype(np.float32) * 0.2
        for k, v in m.state_dict().items()
    }
    m.load_state_dict(sd)
    return m, sd


def _inputs(b=3, s=11, seed=1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, CFG["vocab_size"], (b, s))
    mask = np.ones((b, s), np.int64)
    mask[1, 5:] = 0
    return ids, mask


def _unfused(sd):
    """Reference: the same model with the fusion switched off (query hooked everywhere)."""
    m = BertModel(CFG)
    m.load_state_dict(sd)
    for layer in m.encoder.layer:
        layer.attention.self.query.register_forward_hook(lambda mod, args, out: None)
    return m


def test_fused_matches_unfused_and_keeps_keys():
    m, sd = _model()
    ids, mask = _inputs()
    got = m(ids, mask).last_hidden_state
    sa = m.encoder.layer[0].attention.self
    assert isinstance(sa.query._packed, RowsOf)  # one stacked GEMM, views in the layers
    ref = _unfused(sd)
    np.testing.assert_allclose(got, ref(ids, mask).last_hidden_state, rtol=0, atol=2e-6)
    assert set(m.state_dict()) == set(ref.state_dict())
    # every key still loads, and a new value for one projection reaches the fused GEMM
    sd2 = dict(sd)
    key = "encoder.layer.0.attention.self.key.weight"
    sd2[key] = sd[key][::-1].copy()
    m.load_state_dict(sd2)
    np.testing.assert_allclose(
        m(ids, mask).last_hidden_state, _unfused(sd2)(ids, mask).last_hidden_state, atol=2e-6
    )
    assert isinstance(sa.key._packed, RowsOf)  # re-stacked after the re-pack


def test_hooks_on_projections_fire():
    m, sd = _model()
    ids, mask = _inputs()
    m(ids, mask)  # fused once
    seen = []
    sa = m.encoder.layer[1].attention.self
    handles = [
        lin.register_forward_hook(lambda mod, args, out, n=n: seen.append((n, out.shape)))
        for n, lin in (("q", sa.query), ("k", sa.key), ("v", sa.value))
    ]
    out = m(ids, mask).last_hidden_state
    assert [n for n, _ in seen] == ["q", "k", "v"]
    assert seen[0][1] == (3 * 11, 48)
    np.testing.assert_allclose(out, _unfused(sd)(ids, mask).last_hidden_state, atol=2e-6)
    for h in handles:
        h.remove()
    seen.clear()
    m(ids, mask)
    assert seen == []


def test_direct_call_unpack_pickle_and_cast():
    m, sd = _model()
    ids, mask = _inputs()
    ref = m(ids, mask).last_hidden_state
    sa = m.encoder.layer[0].attention.self
    x = np.random.default_rng(2).standard_normal((5, 48)).astype(np.float32)
    w = sd["encoder.layer.0.attention.self.value.weight"]
    b = sd["encoder.layer.0.attention.self.value.bias"]
    np.testing.assert_allclose(sa.value(x), x @ w.T + b, rtol=1e-5, atol=1e-5)
    w2, b2 = sa.value._packed.unpack()
    np.testing.assert_array_equal(w2, w)
    np.testing.assert_array_equal(b2, b)
    for clone in (pickle.loads(pickle.dumps(m)), copy.deepcopy(m)):
        np.testing.assert_array_equal(clone(ids, mask).last_hidden_state, ref)
        assert set(clone.state_dict()) == set(m.state_dict())
    m.to("float16")
    assert m.encoder.layer[0].attention.self.query._packed.storage == "float16"
    np.testing.assert_allclose(m(ids, mask).last_hidden_state, ref, atol=5e-2)
    m.to("float32")
    np.testing.assert_allclose(m(ids, mask).last_hidden_state, ref, atol=5e-2)


@pytest.mark.parametrize("mask_kind", ["ones", "none", "padded"])
def test_all_ones_mask_is_skipped_exactly(mask_kind):
    m, _ = _model()
    ids, mask = _inputs()
    ones = np.ones_like(mask)
    want = m(ids, None).last_hidden_state
    if mask_kind == "ones":
        np.testing.assert_array_equal(m(ids, ones).last_hidden_state, want)
    elif mask_kind == "none":
        np.testing.assert_array_equal(m(ids).last_hidden_state, want)
    else:
        assert np.abs(m(ids, mask).last_hidden_state - want).max() > 1e-3


def test_hooks_on_every_linear_fire_and_replaced_projection_is_used():
    m, sd = _model()
    ids, mask = _inputs()
    want = m(ids, mask).last_hidden_state
    layer = m.encoder.layer[0]
    seen = []
    lins = {
        "dense": layer.attention.output.dense,
        "inter": layer.intermediate.dense,
        "out": layer.output.dense,
    }
    kept = {}
    handles = [
        lin.register_forward_hook(
            lambda mod, args, out, n=n: (seen.append(n), kept.setdefault(n, out.copy()))
            and None
        )
        for n, lin in lins.items()
    ]
    inter_out = []
    h2 = lins["inter"].register_forward_hook(lambda mod, args, out: inter_out.append(out))
    np.testing.assert_allclose(m(ids, mask).last_hidden_state, want, atol=2e-6)
    assert seen == ["dense", "inter", "out"]
    # the intermediate Linear's hook saw its own output (pre-activation), left unmodified
    np.testing.assert_array_equal(inter_out[0], kept["inter"])
    assert (inter_out[0] < -0.5).any()
    h2.remove()
    for h in handles:
        h.remove()
    # a projection replaced by a new Linear is what the (re-stacked) GEMM uses
    from modulekit.nn import Linear

    sa = layer.attention.self
    new = Linear(48, 48)
    zeros = {"weight": np.zeros((48, 48), np.float32), "bias": np.zeros(48, np.float32)}
    new.load_state_dict(zeros)
    sa.value = new
    got = m(ids, mask).last_hidden_state
    assert sa.value._packed.__class__.__name__ == "RowsOf"
    sd2 = dict(sd)
    sd2["encoder.layer.0.attention.self.value.weight"] = np.zeros((48, 48), np.float32)
    sd2["encoder.layer.0.attention.self.value.bias"] = np.zeros(48, np.float32)
    np.testing.assert_allclose(got, _unfused(sd2)(ids, mask).last_hidden_state, atol=2e-6)
