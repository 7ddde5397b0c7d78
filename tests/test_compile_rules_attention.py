"""The planner's transformer rules (compile/rules/attention.py, compile/rules/linear.py):
dropout_identity, linear_stack, attention, layer_norm_residual, linear_chain,
linear_activation on GELU/Tanh. Torch is the oracle; each rule's bits or tolerance is checked
against the unfused steps it replaces."""

import copy
import importlib
import math
import sys
import warnings

import numpy as np
import pytest

from modulekit import nn
from modulekit.compile.compiled import CompileWarning
from modulekit.compile.passes import optimize
from modulekit.compile.plan import Plan
from modulekit.nn import functional as F

torch = pytest.importorskip("torch")
rules_attention = importlib.import_module("modulekit.compile.rules.attention")
rules_linear = importlib.import_module("modulekit.compile.rules.linear")
RTOL, ATOL = rules_attention.ATTENTION_RTOL, rules_attention.ATTENTION_ATOL


# ------------------------------------------------------------------ models
class SelfAttention(nn.Module):
    """Hugging Face's BertSelfAttention + BertSelfOutput, written with modulekit.nn."""

    def __init__(self, hidden=48, heads=4, sdpa=False, mul_scale=False, swap=False):
        super().__init__()
        self.heads, self.head_size = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.out_dropout = nn.Dropout(0.1)
        self.sdpa, self.mul_scale, self.swap = sdpa, mul_scale, swap

    def split(self, x):
        new_shape = x.shape[:-1] + (self.heads, self.head_size)
        return x.reshape(new_shape).transpose(0, 2, 1, 3)

    def forward(self, hidden, mask=None):
        q = self.split(self.query(hidden))
        k = self.split(self.key(hidden))
        v = self.split(self.value(hidden))
        if self.sdpa:
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            kt = np.swapaxes(k, -1, -2) if self.swap else k.transpose(0, 1, 3, 2)
            if self.mul_scale:
                scores = (q @ kt) * (1.0 / math.sqrt(self.head_size))
            else:
                scores = q @ kt / math.sqrt(self.head_size)
            if mask is not None:
                scores = scores + mask
            probs = self.dropout(F.softmax(scores, dim=-1))
            ctx = probs @ v
        ctx = ctx.transpose(0, 2, 1, 3)
        ctx = ctx.reshape(ctx.shape[:-2] + (self.heads * self.head_size,))
        return self.LayerNorm(self.out_dropout(self.dense(ctx)) + hidden)


def torch_self_attention(m, hidden, mask):
    """The same block in torch, from ``m``'s weights."""
    sd = {}
    for name in ("query", "key", "value", "dense", "LayerNorm"):
        layer = getattr(m, name)
        packed = getattr(layer, "_packed", None)
        w, b = packed.unpack() if packed is not None else (layer.weight, layer.bias)
        sd[name + ".weight"] = torch.from_numpy(np.array(w, dtype=np.float64))
        sd[name + ".bias"] = torch.from_numpy(np.array(b, dtype=np.float64))
    x = torch.from_numpy(np.asarray(hidden, dtype=np.float64))
    lin = torch.nn.functional.linear
    B, L, E = x.shape

    def split(t):
        return t.reshape(B, L, m.heads, m.head_size).permute(0, 2, 1, 3)

    q = split(lin(x, sd["query.weight"], sd["query.bias"]))
    k = split(lin(x, sd["key.weight"], sd["key.bias"]))
    v = split(lin(x, sd["value.weight"], sd["value.bias"]))
    s = q @ k.transpose(-1, -2) / math.sqrt(m.head_size)
    if mask is not None:
        s = s + torch.from_numpy(np.asarray(mask, dtype=np.float64))
    ctx = (torch.softmax(s, dim=-1) @ v).permute(0, 2, 1, 3).reshape(B, L, E)
    y = lin(ctx, sd["dense.weight"], sd["dense.bias"]) + x
    return torch.nn.functional.layer_norm(y, (E,), sd["LayerNorm.weight"],
                                          sd["LayerNorm.bias"], 1e-12).numpy()


def _randomize(m, seed=0, scale=0.2):
    rng = np.random.default_rng(seed)
    m.load_state_dict({k: rng.standard_normal(v.shape).astype(np.float32) * scale
                       for k, v in m.state_dict().items()})
    return m.eval()


def _compile(m, *args):
    """``m`` compiled, its plan captured on ``args``; returns the planned graph."""
    m.eval().initialize()
    m.compile()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        m(*args)
    return m._compiled.last.plan.graph


def _plan_output(m, *args):
    """A call that runs the plan (the first, capturing call ran eagerly)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        out = m(*args)
    assert m._compiled.captures == 1
    return out


def _hf_mask(b, seq, rng, dtype=np.float32):
    keep = np.ones((b, seq), np.int64)
    for i in range(b):
        keep[i, rng.integers(1, seq + 1):] = 0  # padding at the end of each row
    return ((1.0 - keep[:, None, None, :].astype(dtype)) * np.finfo(dtype).min).astype(dtype)


def _planned_with(m, graph, pipeline, params):
    g = graph.copy()
    fired = optimize(g, m, pipeline=pipeline)
    return Plan(g, params), fired


# ------------------------------------------------------------------ attention
@pytest.mark.parametrize("b", [1, 8])
@pytest.mark.parametrize("seq", [1, 7, 13, 33])
@pytest.mark.parametrize("mask_kind", ["none", "padding", "float_lq_lk", "bool"])
def test_attention_matches_torch(b, seq, mask_kind, isa):
    rng = np.random.default_rng(seq * 10 + b)
    m = _randomize(SelfAttention())
    x = rng.standard_normal((b, seq, 48)).astype(np.float32)
    if mask_kind == "none":
        mask = None
    elif mask_kind == "padding":
        mask = _hf_mask(b, seq, rng)
    elif mask_kind == "float_lq_lk":  # a causal additive mask (Lq, Lk), broadcast to all
        mask = np.triu(np.full((seq, seq), -1e9, np.float32), 1)
    else:  # a bool mask added to the scores: True adds 1.0, in NumPy as in the kernel
        mask = rng.random((b, 1, seq, seq)) > 0.5
    args = (x,) if mask is None else (x, mask)
    eager = m(*args)
    graph = _compile(m, *args)
    assert graph.meta["rules"]["attention"] == 1
    assert graph.meta["rules"]["linear_stack"] == 1
    assert graph.meta["rules"]["layer_norm_residual"] == 1
    assert not [n for n in graph.nodes if n.target in ("operator.matmul",
                                                       "modulekit.nn.functional.softmax")]
    out = _plan_output(m, *args)
    np.testing.assert_allclose(out, eager, rtol=RTOL, atol=ATOL)
    ref_mask = None if mask is None else mask.astype(np.float64)
    np.testing.assert_allclose(out, torch_self_attention(m, x, ref_mask), rtol=RTOL,
                               atol=ATOL)


@pytest.mark.parametrize("variant", [{"sdpa": True}, {"mul_scale": True}, {"swap": True}])
def test_attention_variants(variant):
    rng = np.random.default_rng(3)
    m = _randomize(SelfAttention(**variant))
    x = rng.standard_normal((2, 9, 48)).astype(np.float32)
    mask = _hf_mask(2, 9, rng)
    graph = _compile(m, x, mask)
    assert graph.meta["rules"]["attention"] == 1
    np.testing.assert_allclose(_plan_output(m, x, mask), torch_self_attention(m, x, mask),
                               rtol=RTOL, atol=ATOL)


def test_attention_mask_before_scores_and_fully_masked_rows():
    # mask + scores (operands swapped), and a row whose every key is masked (finfo.min)
    class Swapped(SelfAttention):
        def forward(self, hidden, mask):
            q, k, v = (self.split(f(hidden)) for f in (self.query, self.key, self.value))
            probs = F.softmax(mask + q @ k.transpose(0, 1, 3, 2) / 4.0, dim=-1)
            ctx = (probs @ v).transpose(0, 2, 1, 3)
            return ctx.reshape(ctx.shape[0], ctx.shape[1], -1)

    rng = np.random.default_rng(4)
    m = _randomize(Swapped(hidden=48, heads=3))
    x = rng.standard_normal((3, 6, 48)).astype(np.float32)
    mask = _hf_mask(3, 6, rng)
    mask[1] = np.finfo(np.float32).min
    eager = m(x, mask)
    graph = _compile(m, x, mask)
    assert graph.meta["rules"]["attention"] == 1
    np.testing.assert_allclose(_plan_output(m, x, mask), eager, rtol=RTOL, atol=ATOL)


def test_attention_float64_and_noncontiguous_input():
    rng = np.random.default_rng(5)
    m = _randomize(SelfAttention()).to("float64")
    x = np.asfortranarray(rng.standard_normal((4, 11, 48)))[:, ::1, :]
    xt = rng.standard_normal((11, 4, 48)).transpose(1, 0, 2)  # a transposed view
    mask = _hf_mask(4, 11, rng, np.float64)
    graph = _compile(m, xt, mask)
    assert graph.meta["rules"]["attention"] == 1
    assert graph.meta["rules"]["linear_stack"] == 1
    for inp in (xt, x):
        np.testing.assert_allclose(_plan_output(m, inp, mask), torch_self_attention(m, inp, mask),
                                   rtol=1e-10, atol=1e-12)


def test_attention_dynamic_sequence_length_reuses_the_plan():
    rng = np.random.default_rng(6)
    m = _randomize(SelfAttention())
    _compile(m, rng.standard_normal((2, 5, 48)).astype(np.float32))
    for b, seq in ((1, 3), (8, 17), (3, 1)):
        x = rng.standard_normal((b, seq, 48)).astype(np.float32)
        np.testing.assert_allclose(_plan_output(m, x), torch_self_attention(m, x, None),
                                   rtol=RTOL, atol=ATOL)


def test_attention_probs_read_outside_are_not_fused():
    class Exposed(SelfAttention):
        def forward(self, hidden, mask):
            q, k, v = (self.split(f(hidden)) for f in (self.query, self.key, self.value))
            probs = F.softmax(q @ k.transpose(0, 1, 3, 2) / 4.0 + mask, dim=-1)
            ctx = (probs @ v).transpose(0, 2, 1, 3)
            return ctx.reshape(ctx.shape[0], ctx.shape[1], -1), probs

    rng = np.random.default_rng(7)
    m = _randomize(Exposed())
    x = rng.standard_normal((2, 5, 48)).astype(np.float32)
    mask = _hf_mask(2, 5, rng)
    eager = m(x, mask)
    graph = _compile(m, x, mask)
    assert graph.meta["rules"]["attention"] == 0
    assert graph.meta["rules"]["linear_stack"] == 1
    for got, want in zip(_plan_output(m, x, mask), eager):
        np.testing.assert_array_equal(got, want)  # no rule changed a bit


def test_mask_that_promotes_or_broadcasts_is_not_fused():
    rng = np.random.default_rng(8)
    m = _randomize(SelfAttention())
    x = rng.standard_normal((1, 5, 48)).astype(np.float32)
    for mask in (_hf_mask(1, 5, rng, np.float64),  # float64 + float32 scores -> float64
                 np.zeros((3, 1, 5, 5), np.float32)):  # broadcasts the scores' batch up
        mm = copy.deepcopy(m)
        eager = mm(x, mask)
        mm.compile()
        mm(x, mask)
        assert mm._compiled.last.plan.graph.meta["rules"]["attention"] == 0
        np.testing.assert_array_equal(mm(x, mask), eager)


def test_hooked_projection_is_a_boundary():
    rng = np.random.default_rng(9)
    m = _randomize(SelfAttention())
    x = rng.standard_normal((2, 5, 48)).astype(np.float32)
    seen = []
    m.key.register_forward_hook(lambda mod, inp, out: seen.append(out.shape))
    eager = m(x)
    graph = _compile(m, x)
    # key runs alone with its hook; query and value still share one GEMM
    stacked = [n for n in graph.nodes if n.meta.get("rule") == "linear_stack"]
    assert [s.meta["modules"] for s in stacked] == [["query", "value"]]
    assert graph.meta["rules"]["attention"] == 1
    seen.clear()
    np.testing.assert_allclose(_plan_output(m, x), eager, rtol=RTOL, atol=ATOL)
    assert seen == [(2, 5, 48)]


# ------------------------------------------------------------------ linear_stack
def test_linear_stack_is_bit_identical(isa):
    rng = np.random.default_rng(10)
    m = _randomize(SelfAttention(hidden=40, heads=5))
    x = rng.standard_normal((3, 7, 40)).astype(np.float32)
    key_weight = m.key.weight.numpy().copy()
    graph = _compile(m, x)
    captured = m._compiled.last.graph
    plain, _ = _planned_with(m, captured, (), ["hidden"])
    stacked, fired = _planned_with(m, captured, (rules_linear.linear_stack,), ["hidden"])
    assert fired == {"linear_stack": 1}
    np.testing.assert_array_equal(stacked.run(x), plain.run(x))
    # the layers hold views of the stacked kernel (weights held once), their weights unchanged
    kernel = m.query._packed.fused
    assert m.key._packed.fused is kernel and m.value._packed.fused is kernel
    np.testing.assert_array_equal(m.key._packed.unpack()[0], key_weight)
    bias = m.key._packed.unpack()[1]
    want = torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(key_weight),
                                      torch.from_numpy(np.array(bias))).numpy()
    np.testing.assert_allclose(m.key(x), want, rtol=1e-4, atol=1e-5)  # the layer alone
    assert graph.meta["rules"]["linear_stack"] == 1


def test_linear_stack_reuses_the_stack_and_follows_a_load():
    rng = np.random.default_rng(11)
    m = _randomize(SelfAttention())
    x = rng.standard_normal((2, 4, 48)).astype(np.float32)
    _compile(m, x)
    kernel = m.query._packed.fused
    m(x, None)  # another signature (mask=None given): a second plan, the same stack
    assert m._compiled.captures == 2
    assert m.query._packed.fused is kernel
    # the capture's eager call ran each layer alone; the stack serves them again after it
    assert all(lin._packed._own is None for lin in (m.query, m.key, m.value))
    new = {k: v.numpy() * 0.5 for k, v in SelfAttention().state_dict().items()}
    m.load_state_dict(new)  # a load re-packs: the next capture stacks the new weights
    np.testing.assert_allclose(m(x), torch_self_attention(m, x, None), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(m(x), torch_self_attention(m, x, None), rtol=RTOL, atol=ATOL)
    assert m.query._packed.fused is not kernel


# ------------------------------------------------------------------ layer_norm_residual
def test_layer_norm_residual_is_bit_identical(isa):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(24, 24)
            self.LayerNorm = nn.LayerNorm(24)

        def forward(self, x, r):
            return self.LayerNorm(self.dense(x) + r), self.LayerNorm(np.add(r, x))

    rng = np.random.default_rng(12)
    m = _randomize(Block())
    x, r = (rng.standard_normal((5, 3, 24)).astype(np.float32) for _ in range(2))
    _compile(m, x, r)
    captured = m._compiled.last.graph
    plain, _ = _planned_with(m, captured, (), ["x", "r"])
    fused, fired = _planned_with(m, captured, (rules_attention.layer_norm_residual,),
                                 ["x", "r"])
    assert fired == {"layer_norm_residual": 2}
    for got, want in zip(fused.run(x, r), plain.run(x, r)):
        np.testing.assert_array_equal(got, want)
    t = torch.nn.functional.layer_norm(torch.from_numpy(m.dense(x) + r), (24,),
                                       torch.from_numpy(m.LayerNorm.weight.numpy()),
                                       torch.from_numpy(m.LayerNorm.bias.numpy()))
    np.testing.assert_allclose(fused.run(x, r)[0], t.numpy(), rtol=1e-4, atol=1e-5)


def test_layer_norm_of_a_broadcast_add_is_not_fused():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.LayerNorm = nn.LayerNorm(8)

        def forward(self, x, r):
            return self.LayerNorm(x + r)

    rng = np.random.default_rng(13)
    m = Block()
    x = rng.standard_normal((4, 8)).astype(np.float32)
    r = rng.standard_normal((8,)).astype(np.float32)
    graph = _compile(m, x, r)
    assert graph.meta["rules"]["layer_norm_residual"] == 0
    np.testing.assert_array_equal(_plan_output(m, x, r), Block.forward(m, x, r))


# ------------------------------------------------------------------ dropout_identity
def test_dropout_removed_in_eval_only():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return F.dropout(self.drop(self.fc(x)), 0.3, training=self.training)

    x = np.ones((2, 8), np.float32)
    m = _randomize(Net())
    graph = _compile(m, x)
    assert graph.meta["rules"]["dropout_identity"] == 2
    np.testing.assert_array_equal(_plan_output(m, x), m.fc(x))
    m.train()
    m(x)
    graph = m._compiled.last.plan.graph
    assert graph.meta["rules"]["dropout_identity"] == 0


# ------------------------------------------------------------------ Linear + GELU / Tanh
@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "F.gelu", "tanh"])
def test_linear_gelu_tanh_in_the_epilogue_bit_for_bit(act, isa):
    acts = {"gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh"), "tanh": nn.Tanh()}

    class FFN(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(64, 256)
            self.act = acts.get(act, nn.Identity())

        def forward(self, x):
            h = self.dense(x)
            return F.gelu(h) if act == "F.gelu" else self.act(h)

    rng = np.random.default_rng(14)
    m = _randomize(FFN(), scale=0.5)
    x = rng.standard_normal((3, 17, 64)).astype(np.float32)
    eager = m(x)
    graph = _compile(m, x)
    assert graph.meta["rules"]["linear_activation"] == 1
    out = _plan_output(m, x)
    np.testing.assert_array_equal(out, eager)  # the one activation math of kernels/common
    h = torch.from_numpy(m.dense(x).astype(np.float64))
    t = {"gelu": torch.nn.functional.gelu(h), "F.gelu": torch.nn.functional.gelu(h),
         "gelu_tanh": torch.nn.functional.gelu(h, approximate="tanh"), "tanh": torch.tanh(h)}
    np.testing.assert_allclose(out, t[act].numpy(), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ linear_chain
def test_linear_chain_on_2d_input_is_bit_identical(isa):
    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.act1 = nn.Linear(32, 64), nn.ReLU()
            self.fc2, self.act2 = nn.Linear(64, 48), nn.ReLU6()
            self.fc3 = nn.Linear(48, 10)

        def forward(self, x):
            return self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))

    rng = np.random.default_rng(15)
    m = _randomize(MLP())
    x = rng.standard_normal((9, 32)).astype(np.float32)
    eager = m(x)
    graph = _compile(m, x)
    assert graph.meta["rules"]["linear_chain"] == 1
    (step,) = [n for n in graph.nodes if n.op == "call_fused"]
    assert step.meta["modules"] == ["fc1", "act1", "fc2", "act2", "fc3"]
    np.testing.assert_array_equal(_plan_output(m, x), eager)
    x3 = rng.standard_normal((2, 9, 32)).astype(np.float32)  # 3-D: not a chain
    out = m(x3)
    assert m._compiled.last.plan.graph.meta["rules"]["linear_chain"] == 0
    np.testing.assert_array_equal(out, MLP.forward(m, x3))


# ------------------------------------------------------------------ user BERT
@pytest.mark.parametrize("b, seq", [(1, 128), (8, 128), (2, 37)])
def test_user_bert_plan_matches_transformers(b, seq):
    transformers = pytest.importorskip("transformers")
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import user_models as um

    cfg = dict(um.BERT_CONFIG)
    hf = transformers.BertModel(transformers.BertConfig(**cfg, hidden_act="gelu")).eval()
    m = um.BertModel(cfg)
    state = {k: v.numpy() for k, v in hf.state_dict().items() if k in m.state_dict()}
    m.load_state_dict(state)
    rng = np.random.default_rng(b * 1000 + seq)
    ids = rng.integers(0, 1000, (b, seq))
    am = np.ones((b, seq), np.int64)
    am[0, seq // 2:] = 0
    graph = _compile(m, ids, am)
    rules = graph.meta["rules"]
    assert rules["linear_stack"] == rules["attention"] == 2
    # two per layer, and the embeddings' LayerNorm(word + type + position) at batch 1 (the
    # position rows (1, L, H) broadcast over a larger batch: not fused there)
    assert rules["layer_norm_residual"] == 4 + (b == 1)
    assert rules["linear_activation"] == 3  # two FFNs and the pooler
    last, pooled = _plan_output(m, ids, am)
    with torch.no_grad():
        want = hf(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(am))
    np.testing.assert_allclose(last, want.last_hidden_state.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(pooled, want.pooler_output.numpy(), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ embedding_layer_norm
class Embeddings(nn.Module):
    def __init__(self, vocab=30, width=24):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, width)
        self.token_type_embeddings = nn.Embedding(2, width)
        self.position_embeddings = nn.Embedding(16, width)
        self.LayerNorm = nn.LayerNorm(width, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, ids, types, positions):
        x = self.word_embeddings(ids) + self.token_type_embeddings(types)
        x = self.position_embeddings(positions) + x
        return self.dropout(self.LayerNorm(x))


@pytest.mark.parametrize("b, seq", [(1, 1), (8, 13)])
def test_embedding_layer_norm_is_bit_identical(b, seq):
    rng = np.random.default_rng(16)
    m = _randomize(Embeddings(), scale=1.0)
    ids, types = rng.integers(0, 30, (b, seq)), rng.integers(0, 2, (b, seq))
    pos = np.tile(np.arange(seq), (b, 1))
    eager = m(ids, types, pos)
    graph = _compile(m, ids, types, pos)
    assert graph.meta["rules"]["embedding_layer_norm"] == 1
    (step,) = [n for n in graph.nodes if n.op == "call_fused"]
    assert step.meta["modules"] == ["word_embeddings", "token_type_embeddings",
                                    "position_embeddings", "LayerNorm"]
    np.testing.assert_array_equal(_plan_output(m, ids, types, pos), eager)
    np.testing.assert_array_equal(m(ids[:, ::-1], types, pos),  # non-contiguous ids
                                  Embeddings.forward(m, ids[:, ::-1], types, pos))
    w = {k: torch.from_numpy(v.numpy()) for k, v in m.state_dict().items()}
    t = (w["word_embeddings.weight"][torch.from_numpy(ids)]
         + w["token_type_embeddings.weight"][torch.from_numpy(types)]
         + w["position_embeddings.weight"][torch.from_numpy(pos)])
    t = torch.nn.functional.layer_norm(t, (24,), w["LayerNorm.weight"], w["LayerNorm.bias"],
                                       1e-12)
    np.testing.assert_allclose(eager, t.numpy(), rtol=1e-4, atol=1e-5)
    # an index out of range: the table's own error, from the plan as from eager mode
    bad = ids.copy()
    bad[-1, -1] = 30
    with pytest.raises(IndexError, match=r"Embedding\(30, 24\).*index 30"):
        m(bad, types, pos)


def test_embedding_rows_broadcast_are_not_fused():
    rng = np.random.default_rng(17)
    m = _randomize(Embeddings(), scale=1.0)
    ids, types = rng.integers(0, 30, (3, 5)), rng.integers(0, 2, (3, 5))
    pos = np.arange(5)[None]  # (1, L): broadcast over the batch
    graph = _compile(m, ids, types, pos)
    assert graph.meta["rules"]["embedding_layer_norm"] == 0
    np.testing.assert_array_equal(_plan_output(m, ids, types, pos),
                                  Embeddings.forward(m, ids, types, pos))
