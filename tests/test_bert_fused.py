"""BERT's fused query/key/value GEMM: keys, hooks, re-packing and pickling unchanged."""

import copy
import pickle

import numpy as np
import pytest

from modulekit.models.bert import BertModel, _plain_layer
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


def _layer_modules(layer):
    return {
        "attention": layer.attention,
        "self": layer.attention.self,
        "attention.output": layer.attention.output,
        "attention.output.dense": layer.attention.output.dense,
        "attention.output.LayerNorm": layer.attention.output.LayerNorm,
        "intermediate": layer.intermediate,
        "intermediate.dense": layer.intermediate.dense,
        "output": layer.output,
        "output.dense": layer.output.dense,
        "output.LayerNorm": layer.output.LayerNorm,
    }


@pytest.mark.parametrize("name", list(_layer_modules(BertModel(CFG).encoder.layer[0])))
@pytest.mark.parametrize("mask_kind", ["ones", "padded"])
def test_hook_free_layer_fast_path_is_bit_identical_and_hooks_fire(name, mask_kind):
    """A layer without hooks runs its kernels back to back; a hook on any of its modules
    sends it through the module calls (the hook sees its call), with the same result."""
    m, _ = _model()
    ids, mask = _inputs()
    if mask_kind == "ones":
        mask = np.ones_like(mask)
    fast = m(ids, mask)
    layer = m.encoder.layer[1]
    assert _plain_layer(layer._modules) is not None
    seen = []
    handle = _layer_modules(layer)[name].register_forward_hook(
        lambda mod, args, out: seen.append(type(mod).__name__)
    )
    assert _plain_layer(layer._modules) is None
    slow = m(ids, mask)
    assert len(seen) == 1
    if name == "intermediate.dense":  # the hook sees the Linear's output: GELU on its own
        np.testing.assert_allclose(slow.last_hidden_state, fast.last_hidden_state, atol=1e-5)
    else:
        np.testing.assert_array_equal(slow.last_hidden_state, fast.last_hidden_state)
        np.testing.assert_array_equal(slow.pooler_output, fast.pooler_output)
    handle.remove()
    np.testing.assert_array_equal(m(ids, mask).last_hidden_state, fast.last_hidden_state)
    assert len(seen) == 1


def test_layer_fast_path_uses_a_replaced_module_and_float16_layer_norms():
    m, _ = _model()
    ids, mask = _inputs()
    want = m(ids, mask).last_hidden_state
    layer = m.encoder.layer[0]
    calls = []

    class Tagged(type(layer.intermediate)):  # a subclass: not the standard module
        def forward(self, x):
            calls.append(x.shape)
            return super().forward(x)

    tagged = Tagged.__new__(Tagged)
    tagged.__dict__.update(layer.intermediate.__dict__)
    layer.intermediate = tagged
    np.testing.assert_array_equal(m(ids, mask).last_hidden_state, want)
    assert calls == [(3 * 11, 48)]
    # float16 LayerNorm parameters: the module path (widened), close to the float32 result
    m2, _ = _model()
    m2.encoder.layer[1].output.LayerNorm.to("float16")
    np.testing.assert_allclose(m2(ids, mask).last_hidden_state, want, atol=5e-2)


def test_embeddings_fused_pass_matches_separate_steps():
    """Word + position + token-type rows and the LayerNorm in one pass equal the gathers,
    accumulations and LayerNorm done one after the other, bit for bit."""
    m, _ = _model()
    rng = np.random.default_rng(5)
    for b, s in ((1, 1), (2, 7), (3, 40)):
        ids = rng.integers(0, CFG["vocab_size"], (b, s))
        tt = rng.integers(0, 2, (b, s))
        emb = m.embeddings
        got = emb(ids, tt)
        seen = []
        h = emb.LayerNorm.register_forward_hook(lambda mod, args, out, seen=seen: seen.append(1))
        want = emb(ids, tt)  # hooked LayerNorm: the separate steps
        h.remove()
        assert seen == [1]
        assert got.shape == (b * s, 48)
        np.testing.assert_array_equal(got, want)
        # and a float64 reference
        w = {k: v.numpy().astype(np.float64) for k, v in emb.state_dict().items()}
        x = (
            w["word_embeddings.weight"][ids]
            + w["position_embeddings.weight"][np.arange(s)][None]
            + w["token_type_embeddings.weight"][tt]
        ).reshape(b * s, 48)
        mu, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
        ref = (x - mu) / np.sqrt(var + 1e-12) * w["LayerNorm.weight"] + w["LayerNorm.bias"]
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    # out-of-range ids still name the argument, non-contiguous ids are accepted
    with pytest.raises(IndexError, match=r"token_type_ids: .*index 2"):
        m(np.ones((1, 4), np.int64), token_type_ids=np.full((1, 4), 2))
    ids = rng.integers(0, CFG["vocab_size"], (4, 6))
    np.testing.assert_array_equal(
        m(ids[::2]).last_hidden_state, m(np.ascontiguousarray(ids[::2])).last_hidden_state
    )


@pytest.mark.parametrize(
    "name", ["word_embeddings", "position_embeddings", "token_type_embeddings"]
)
def test_hooked_or_replaced_embedding_table_is_called(name):
    """A hook on one of the three tables sees its call (the tables are then called as
    modules), with the fused pass's result; a replaced table is used."""
    m, _ = _model()
    rng = np.random.default_rng(6)
    ids = rng.integers(0, CFG["vocab_size"], (2, 5))
    tt = rng.integers(0, 2, (2, 5))
    want = m.embeddings(ids, tt)
    table = getattr(m.embeddings, name)
    seen = []
    h = table.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    np.testing.assert_array_equal(m.embeddings(ids, tt), want)
    h.remove()
    assert seen == [(2, 5, 48)]
    calls = []

    class Tagged(type(table)):
        def forward(self, x):
            calls.append(x.shape)
            return super().forward(x)

    tagged = Tagged.__new__(Tagged)
    tagged.__dict__.update(table.__dict__)
    setattr(m.embeddings, name, tagged)
    np.testing.assert_array_equal(m.embeddings(ids, tt), want)
    assert calls == [(2, 5)]


def test_rows_of_nbytes_reports_the_stacked_weights():
    m, _ = _model()
    ids, mask = _inputs()
    m(ids, mask)
    sa = m.encoder.layer[0].attention.self
    views = [sa.query._packed, sa.key._packed, sa.value._packed]
    assert all(isinstance(v, RowsOf) for v in views)
    stacked = views[0].fused
    assert stacked.nbytes > 0
    assert sum(v.nbytes for v in views) == stacked.nbytes
    for v in views:
        assert abs(v.nbytes - stacked.nbytes / 3) <= 1
    # a view used alone (hooked layer) also counts its own pack
    h = sa.key.register_forward_hook(lambda mod, args, out: None)
    m(ids, mask)
    h.remove()
    assert sa.key._packed.nbytes == stacked.nbytes // 3 + sa.key._packed._own.nbytes
    assert sa.key._packed._own.nbytes > 0


def test_multihead_attention_in_projection_views_report_their_bytes():
    from modulekit.nn import MultiheadAttention

    mha = MultiheadAttention(24, 3, batch_first=True)
    x = np.random.default_rng(0).standard_normal((2, 5, 24)).astype(np.float32)
    mha(x, x, x)
    views = mha._packed
    assert sum(v.nbytes for v in views) == views[0].fused.nbytes > 0
