"""Embedding, LayerNorm, MultiheadAttention, TransformerEncoderLayer/Encoder against torch:
keys, every mask combination, layouts, packing, 16-bit weight storage, bad input."""

import itertools
import pickle
import warnings

import numpy as np
import pytest

import modulekit.nn as nn

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)
E, H = 32, 4


def to_np(t):
    return t.detach().numpy()


def loaded(ours, theirs):
    ours.load_state_dict(theirs.state_dict())
    return ours


# ----------------------------------------------------------------------------- Embedding
def test_embedding_matches_torch_keys_padding_and_errors():
    t = torch.nn.Embedding(20, 6, padding_idx=-2)
    m = nn.Embedding(20, 6, padding_idx=-2)
    assert m.padding_idx == 18 and list(m.state_dict()) == ["weight"]
    assert np.all(m.weight.numpy()[18] == 0)
    assert repr(m) == repr(t)
    loaded(m, t)
    ids = RNG.integers(0, 20, (3, 4))
    np.testing.assert_array_equal(m(ids), to_np(t(torch.from_numpy(ids))))
    with pytest.raises(IndexError, match=r"index 20 at position \(0,\)"):
        m(np.array([20, 1]))
    with pytest.raises(TypeError, match="integers"):
        m(np.array([1.5]))
    # max_norm renormalises the looked-up rows in place, as torch (tests/test_layers_ext.py)
    assert nn.Embedding(3, 2, max_norm=1.0).max_norm == 1.0
    w = RNG.standard_normal((4, 3))
    fp = nn.Embedding.from_pretrained(w)
    assert fp.weight.dtype.name == "float64"
    np.testing.assert_array_equal(fp([3, 0]), w[[3, 0]])


def test_embedding_half_storage():
    m = nn.Embedding(30, 8).to("bfloat16")
    ids = RNG.integers(0, 30, 7)
    want = m.weight.numpy().astype(np.float32)[ids]
    np.testing.assert_array_equal(m(ids), want)


# ----------------------------------------------------------------------------- LayerNorm
@pytest.mark.parametrize(
    "shape, kwargs",
    [
        ((E,), {}),
        ((4, 8), {"eps": 1e-3}),
        ((E,), {"bias": False}),
        ((E,), {"elementwise_affine": False}),
    ],
)
def test_layer_norm_matches_torch(shape, kwargs):
    t = torch.nn.LayerNorm(shape, **kwargs)
    with torch.no_grad():
        for p in t.parameters():
            p.copy_(torch.randn_like(p))
    m = loaded(nn.LayerNorm(shape, **kwargs), t)
    assert list(m.state_dict()) == list(t.state_dict()) and repr(m) == repr(t)
    x = RNG.standard_normal((2, 5) + shape).astype(np.float32) * 3 + 2
    np.testing.assert_allclose(m(x), to_np(t(torch.from_numpy(x))), atol=2e-6)
    with pytest.raises(ValueError, match="does not end with normalized_shape"):
        m(np.zeros((2, 3), np.float32))


def test_layer_norm_float64_and_residual():
    m = nn.LayerNorm(10, dtype="float64")
    x, r = RNG.standard_normal((3, 10)), RNG.standard_normal((3, 10))
    y = m(x.astype(np.float32), residual=r)
    assert y.dtype == np.float64
    z = x.astype(np.float32).astype(np.float64) + r
    want = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, want, atol=1e-12)


# ----------------------------------------------------------------------------- attention
def mha_pair(batch_first, bias=True):
    torch.manual_seed(0)
    t = torch.nn.MultiheadAttention(E, H, bias=bias, batch_first=batch_first).eval()
    with torch.no_grad():
        for p in t.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    m = loaded(nn.MultiheadAttention(E, H, bias=bias, batch_first=batch_first), t)
    return t, m


def test_mha_keys_shapes_and_packing():
    t, m = mha_pair(False)
    assert list(m.state_dict()) == list(t.state_dict())
    assert {k: tuple(v.shape) for k, v in m.state_dict().items()} == {
        k: tuple(v.shape) for k, v in t.state_dict().items()
    }
    m.initialize()
    assert "in_proj_weight" not in m.state_dict()  # packed
    x = RNG.standard_normal((5, 2, E)).astype(np.float32)
    before = m(x, x, x)[0]
    m.load_state_dict(t.state_dict())  # re-packs the same values
    np.testing.assert_array_equal(m(x, x, x)[0], before)
    clone = pickle.loads(pickle.dumps(m))
    np.testing.assert_array_equal(clone(x, x, x)[0], before)
    tb, mb = mha_pair(True, bias=False)
    assert list(mb.state_dict()) == list(tb.state_dict())


KPM = [None, "bool", "float"]
ATTN = [None, "bool2d", "float2d", "bool3d", "float3d"]


def make_masks(kind_kpm, kind_attn, N, L, S, rng):
    kpm = am = None
    if kind_kpm:
        b = rng.random((N, S)) < 0.3
        b[:, 0] = False  # no row masked everywhere (torch gives NaN there)
        kpm = b if kind_kpm == "bool" else np.where(b, -1e4, rng.standard_normal((N, S)))
    if kind_attn:
        shape = (L, S) if kind_attn.endswith("2d") else (N * H, L, S)
        b = rng.random(shape) < 0.3
        b[..., 0] = False
        am = b if kind_attn.startswith("bool") else rng.standard_normal(shape)
    return kpm, am


def as_torch(a):
    if a is None:
        return None
    t = torch.from_numpy(np.asarray(a))
    return t if t.dtype == torch.bool else t.float()


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("kind_kpm, kind_attn", list(itertools.product(KPM, ATTN)))
def test_mha_every_mask_combination_matches_torch(batch_first, kind_kpm, kind_attn):
    t, m = mha_pair(batch_first)
    N, L, S = 3, 5, 6
    rng = np.random.default_rng(hash((kind_kpm, kind_attn)) % 2**32)
    kpm, am = make_masks(kind_kpm, kind_attn, N, L, S, rng)
    if kind_kpm and kind_attn and (kind_kpm == "bool") != kind_attn.startswith("bool"):
        pass  # mixed bool/float masks: torch merges them too (with a deprecation warning)
    lay = (lambda n, s: (n, s, E)) if batch_first else (lambda n, s: (s, n, E))
    q = rng.standard_normal(lay(N, L)).astype(np.float32)
    kv = rng.standard_normal(lay(N, S)).astype(np.float32)
    for need_weights, average in [(True, True), (True, False), (False, True)]:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ro, rw = t(
                torch.from_numpy(q),
                torch.from_numpy(kv),
                torch.from_numpy(kv),
                key_padding_mask=as_torch(kpm),
                attn_mask=as_torch(am),
                need_weights=need_weights,
                average_attn_weights=average,
            )
        o, w = m(
            q,
            kv,
            kv,
            key_padding_mask=kpm,
            attn_mask=am,
            need_weights=need_weights,
            average_attn_weights=average,
        )
        np.testing.assert_allclose(o, to_np(ro), atol=2e-5)
        if need_weights:
            assert w.shape == tuple(rw.shape)
            np.testing.assert_allclose(w, to_np(rw), atol=2e-6)
        else:
            assert w is None


def test_mha_self_attention_unbatched_and_bad_masks():
    t, m = mha_pair(False)
    x = RNG.standard_normal((7, E)).astype(np.float32)
    kpm = np.zeros(7, bool)
    kpm[5:] = True
    with torch.no_grad():
        ro, rw = t(*(torch.from_numpy(x),) * 3, key_padding_mask=torch.from_numpy(kpm))
    o, w = m(x, x, x, key_padding_mask=kpm)
    np.testing.assert_allclose(o, to_np(ro), atol=2e-5)
    np.testing.assert_allclose(w, to_np(rw), atol=2e-6)
    xb = RNG.standard_normal((7, 2, E)).astype(np.float32)
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(2, 7\)"):
        m(xb, xb, xb, key_padding_mask=np.zeros((2, 6), bool))
    with pytest.raises(ValueError, match=r"attn_mask must have shape \(7, 7\) or \(8, 7, 7\)"):
        m(xb, xb, xb, attn_mask=np.zeros((7, 6), bool))
    with pytest.raises(ValueError, match="last dimension embed_dim=32"):
        m(xb, xb[..., :8], xb)
    with pytest.raises(TypeError, match="bool or floating mask"):
        m(xb, xb, xb, attn_mask=np.zeros((7, 7), np.int32))
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(30, 4)


def test_mha_half_storage_within_tolerance():
    t, m = mha_pair(True)
    x = RNG.standard_normal((2, 9, E)).astype(np.float32)
    ref = m(x, x, x)[0]
    for dt, tol in (("float16", 5e-3), ("bfloat16", 4e-2)):
        m16 = loaded(nn.MultiheadAttention(E, H, batch_first=True), t).to(dt)
        np.testing.assert_allclose(m16(x, x, x)[0], ref, atol=tol * np.abs(ref).max())


# ----------------------------------------------------------------------------- encoder layers
def layer_pair(norm_first, activation, batch_first):
    torch.manual_seed(1)
    t_act = {
        "gelu_tanh": torch.nn.GELU(approximate="tanh"),
        "silu": torch.nn.SiLU(),
        "tanh": torch.tanh,
    }.get(activation, activation)
    m_act = {"gelu_tanh": nn.GELU(approximate="tanh"), "silu": nn.SiLU(), "tanh": np.tanh}.get(
        activation, activation
    )
    kw = dict(dim_feedforward=48, norm_first=norm_first, batch_first=batch_first, dropout=0.0)
    t = torch.nn.TransformerEncoderLayer(E, H, activation=t_act, **kw).eval()
    m = loaded(nn.TransformerEncoderLayer(E, H, activation=m_act, **kw), t)
    return t, m


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh", "silu", "tanh"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_encoder_layer_matches_torch(norm_first, activation, batch_first):
    t, m = layer_pair(norm_first, activation, batch_first)
    assert list(m.state_dict()) == list(t.state_dict())
    N, S = 3, 8
    x = RNG.standard_normal((N, S, E) if batch_first else (S, N, E)).astype(np.float32)
    kpm = np.zeros((N, S), bool)
    kpm[1, 5:] = True
    causal = np.triu(np.full((S, S), -np.inf, np.float32), 1)
    for src_mask, key_pad in [(None, None), (None, kpm), (causal, None), (causal, kpm)]:
        # grad enabled: torch's reference (math) path; its no-grad fast path computes
        # GELU(approximate="tanh") as the exact GELU
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = t(
                torch.from_numpy(x),
                src_mask=as_torch(src_mask),
                src_key_padding_mask=as_torch(key_pad),
            )
        got = m(x, src_mask=src_mask, src_key_padding_mask=key_pad)
        np.testing.assert_allclose(got, to_np(ref), atol=3e-5)


def test_encoder_stack_with_final_norm_and_unbatched_input():
    torch.manual_seed(2)
    tl = torch.nn.TransformerEncoderLayer(E, H, 40, dropout=0.0, batch_first=True)
    t = torch.nn.TransformerEncoder(
        tl, 2, norm=torch.nn.LayerNorm(E), enable_nested_tensor=False
    ).eval()
    ml = nn.TransformerEncoderLayer(E, H, 40, dropout=0.0, batch_first=True)
    m = loaded(nn.TransformerEncoder(ml, 2, norm=nn.LayerNorm(E)), t)
    assert list(m.state_dict()) == list(t.state_dict())
    assert m.layers[0] is not m.layers[1]
    x = RNG.standard_normal((2, 6, E)).astype(np.float32)
    kpm = np.array([[False] * 6, [False] * 4 + [True] * 2])
    with torch.no_grad():
        ref = t(torch.from_numpy(x), src_key_padding_mask=torch.from_numpy(kpm))
    np.testing.assert_allclose(m(x, src_key_padding_mask=kpm), to_np(ref), atol=3e-5)
    with torch.no_grad():
        ref1 = t(torch.from_numpy(x[0]))
    np.testing.assert_allclose(m(x[0]), to_np(ref1), atol=3e-5)


def test_encoder_layer_bad_activation_and_input():
    with pytest.raises(RuntimeError, match="relu/gelu"):
        nn.TransformerEncoderLayer(E, H, activation="swish")
    m = nn.TransformerEncoderLayer(E, H, 16)
    with pytest.raises(ValueError, match="2-D or 3-D"):
        m(np.zeros((1, 2, 3, E), np.float32))


def test_mha_float64_module_computes_in_float64():
    t, _ = mha_pair(True)
    t = t.double()
    m = loaded(nn.MultiheadAttention(E, H, batch_first=True, dtype="float64"), t)
    x = RNG.standard_normal((2, 5, E))
    kpm = np.array([[False] * 5, [False] * 3 + [True] * 2])
    with torch.no_grad():
        ro, rw = t(*(torch.from_numpy(x),) * 3, key_padding_mask=torch.from_numpy(kpm))
    o, w = m(x, x, x, key_padding_mask=kpm)
    assert o.dtype == np.float64
    np.testing.assert_allclose(o, to_np(ro), atol=1e-12)
    np.testing.assert_allclose(w, to_np(rw), atol=1e-13)


@pytest.mark.parametrize("batch_first", [False, True])
def test_mha_self_attention_stacked_gemm_equals_separate_projections(batch_first):
    """query is key is value: one stacked in-projection GEMM; the same values passed as three
    arrays take the per-projection path; both match torch, keys and pickling unchanged."""
    t, m = mha_pair(batch_first)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 3, E) if not batch_first else (3, 4, E)).astype(np.float32)
    fused, _ = m(x, x, x, need_weights=False)
    sep, _ = m(x, x.copy(), x.copy(), need_weights=False)
    np.testing.assert_allclose(fused, sep, rtol=0, atol=1e-6)
    with torch.no_grad():
        ref = t(*(torch.from_numpy(x),) * 3, need_weights=False)[0].numpy()
    np.testing.assert_allclose(fused, ref, atol=2e-5)
    unb, _ = m(x[0], x[0], x[0], need_weights=False)
    np.testing.assert_allclose(unb, m(x[0], x[0].copy(), x[0].copy(), need_weights=False)[0],
                               atol=1e-6)
    assert set(m._packed_keys()) == {"in_proj_weight", "in_proj_bias"}
    clone = pickle.loads(pickle.dumps(m))
    np.testing.assert_array_equal(clone(x, x, x, need_weights=False)[0], fused)
    m.load_state_dict({k: v.numpy() for k, v in t.state_dict().items()})
    np.testing.assert_array_equal(m(x, x, x, need_weights=False)[0], fused)
