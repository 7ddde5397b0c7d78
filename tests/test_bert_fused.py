"""The built-in BERT served by compile(): its plan (stacked query/key/value GEMM, attention
kernel, GELU epilogue, LayerNorm with residual) matches the eager modules; keys, hooks,
re-packing, replaced modules and pickling unchanged."""

import copy
import pickle

import numpy as np
import pytest

from modulekit.compile import CompileWarning
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
    # (initialize: every layer packed now; a layer packed lazily later, anywhere in the
    # process, moves the structure epoch and the next call captures again)
    return m.eval().initialize(), sd


def _inputs(b=3, s=11, seed=1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, CFG["vocab_size"], (b, s))
    mask = np.ones((b, s), np.int64)
    mask[1, 5:] = 0
    return ids, mask


#: the plan against the eager modules: the attention kernel is not bit-identical
#: (compile.rules.attention.ATTENTION_RTOL/ATOL)
TOL = dict(rtol=1e-4, atol=1e-5)


def _unfused(sd):
    """Reference: the same model run eagerly (its parts not compiled)."""
    m = BertModel(CFG)
    m.load_state_dict(sd)
    m.embeddings.compile(disable=True)
    m.encoder.compile(disable=True)
    return m.eval().initialize()


def test_fused_matches_unfused_and_keeps_keys():
    m, sd = _model()
    ids, mask = _inputs()
    m(ids, mask)  # (captures)
    got = m(ids, mask).last_hidden_state
    rules = m.encoder._compiled.last.plan.graph.meta["rules"]
    assert rules["linear_stack"] == rules["attention"] == 2
    assert rules["layer_norm_residual"] == 4 and rules["linear_activation"] == 2
    sa = m.encoder.layer[0].attention.self
    assert isinstance(sa.query._packed, RowsOf)  # one stacked GEMM, views in the layers
    ref = _unfused(sd)
    np.testing.assert_allclose(got, ref(ids, mask).last_hidden_state, **TOL)
    assert set(m.state_dict()) == set(ref.state_dict())
    # every key still loads, and a new value for one projection reaches the fused GEMM
    sd2 = dict(sd)
    key = "encoder.layer.0.attention.self.key.weight"
    sd2[key] = sd[key][::-1].copy()
    m.load_state_dict(sd2)
    np.testing.assert_allclose(
        m(ids, mask).last_hidden_state, _unfused(sd2)(ids, mask).last_hidden_state, **TOL
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
    assert seen[0][1] == (3, 11, 48)
    np.testing.assert_allclose(out, _unfused(sd)(ids, mask).last_hidden_state, **TOL)
    for h in handles:
        h.remove()
    seen.clear()
    m(ids, mask)
    assert seen == []


def test_direct_call_unpack_pickle_and_cast():
    m, sd = _model()
    ids, mask = _inputs()
    m(ids, mask)
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
        assert clone.encoder._compiled is not None  # a copy is compiled again
        clone.initialize()
        clone(ids, mask)
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
    m(ids, mask)
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
    np.testing.assert_allclose(m(ids, mask).last_hidden_state, want, **TOL)
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
    np.testing.assert_allclose(got, _unfused(sd2)(ids, mask).last_hidden_state, **TOL)


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
def test_hook_on_any_layer_module_fires_and_is_a_plan_boundary(name, mask_kind):
    """A hook on any module of a layer makes that module a boundary of the plan (called as
    it is, the hook seeing its call), with the same result within the plan's tolerance."""
    m, sd = _model()
    ids, mask = _inputs()
    if mask_kind == "ones":
        mask = np.ones_like(mask)
    m(ids, mask)
    fast = m(ids, mask)
    layer = m.encoder.layer[1]
    seen = []
    handle = _layer_modules(layer)[name].register_forward_hook(
        lambda mod, args, out: seen.append(type(mod).__name__)
    )
    slow = m(ids, mask)  # (captures again: the hook moved the structure epoch)
    assert len(seen) == 1
    m(ids, mask)
    assert len(seen) == 2
    ref = _unfused(sd)(ids, mask)
    np.testing.assert_allclose(slow.last_hidden_state, ref.last_hidden_state, **TOL)
    np.testing.assert_allclose(slow.pooler_output, ref.pooler_output, **TOL)
    handle.remove()
    m(ids, mask)
    np.testing.assert_array_equal(m(ids, mask).last_hidden_state, fast.last_hidden_state)
    assert len(seen) == 2


def test_replaced_module_is_used_and_float16_layer_norms():
    m, sd = _model()
    ids, mask = _inputs()
    want = m(ids, mask).last_hidden_state
    layer = m.encoder.layer[0]

    class Doubled(type(layer.intermediate)):  # a subclass: traced through, not the original
        def forward(self, x):
            return super().forward(x) * 2.0

    doubled = Doubled.__new__(Doubled)
    doubled.__dict__.update(layer.intermediate.__dict__)
    layer.intermediate = doubled
    ref = _unfused(sd)
    ref_layer = ref.encoder.layer[0]
    ref_doubled = Doubled.__new__(Doubled)
    ref_doubled.__dict__.update(ref_layer.intermediate.__dict__)
    ref_layer.intermediate = ref_doubled
    got = m(ids, mask).last_hidden_state
    np.testing.assert_allclose(got, ref(ids, mask).last_hidden_state, **TOL)
    assert np.abs(got - want).max() > 1e-2
    # float16 LayerNorm parameters: widened in the module, close to the float32 result
    m2, _ = _model()
    m2.encoder.layer[1].output.LayerNorm.to("float16")
    np.testing.assert_allclose(m2(ids, mask).last_hidden_state,
                               _model()[0](ids, mask).last_hidden_state, atol=5e-2)


def test_embeddings_plan_matches_separate_steps():
    """Word + token-type + position rows and the LayerNorm (its residual add fused) equal the
    gathers, sums and LayerNorm done one after the other, bit for bit."""
    m, _ = _model()
    rng = np.random.default_rng(5)
    emb = m.embeddings
    for b, s in ((1, 1), (2, 7), (3, 40)):
        ids = rng.integers(0, CFG["vocab_size"], (b, s))
        tt = rng.integers(0, 2, (b, s))
        pos = np.tile(np.arange(s), (b, 1))
        emb(ids, tt, pos)
        got = emb(ids, tt, pos)
        want = type(emb).forward(emb, ids, tt, pos)  # the modules one by one
        assert got.shape == (b, s, 48)
        np.testing.assert_array_equal(got, want)
        # and a float64 reference
        w = {k: v.numpy().astype(np.float64) for k, v in emb.state_dict().items()}
        x = (
            w["word_embeddings.weight"][ids]
            + w["position_embeddings.weight"][np.arange(s)][None]
            + w["token_type_embeddings.weight"][tt]
        )
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        ref = (x - mu) / np.sqrt(var + 1e-12) * w["LayerNorm.weight"] + w["LayerNorm.bias"]
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    # out-of-range ids raise the table's error, non-contiguous ids are accepted
    with pytest.raises(IndexError, match=r"index 2"):
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
    pos = np.tile(np.arange(5), (2, 1))
    want = m.embeddings(ids, tt, pos)
    table = getattr(m.embeddings, name)
    seen = []
    h = table.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    np.testing.assert_array_equal(m.embeddings(ids, tt, pos), want)
    np.testing.assert_array_equal(m.embeddings(ids, tt, pos), want)
    h.remove()
    assert seen == [(2, 5, 48)] * 2

    class Scaled(type(table)):  # a subclass: its own forward used (it reads the ids'
        def forward(self, x):  # memory in Embedding's kernel: the capture breaks, eager)
            return super().forward(x) * 2.0

    scaled = Scaled.__new__(Scaled)
    scaled.__dict__.update(table.__dict__)
    setattr(m.embeddings, name, scaled)
    with pytest.warns(CompileWarning, match="not traced"):
        m.embeddings(ids, tt, pos)
    got = m.embeddings(ids, tt, pos)
    assert np.abs(got - want).max() > 1e-3
    np.testing.assert_array_equal(got, type(m.embeddings).forward(m.embeddings, ids, tt, pos))


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
