"""BertModel against transformers.BertModel: checkpoints saved by save_pretrained
(safetensors and pytorch_model.bin) loaded by from_pretrained, outputs within 1e-4."""

import copy
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import modulekit as mk
from modulekit.models.bert import BertConfig, BertModel, mean_pool

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# the folder the tests import modulekit from (the installed package, or src/ of a checkout)
PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(mk.__file__)))
CONFIGS = {
    "small": dict(
        vocab_size=99,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=130,
        type_vocab_size=2,
    ),
    "wide": dict(
        vocab_size=120,
        hidden_size=384,
        num_hidden_layers=3,
        num_attention_heads=12,
        intermediate_size=512,
        max_position_embeddings=128,
        type_vocab_size=3,
        hidden_act="gelu_new",
        layer_norm_eps=1e-7,
    ),
}


def make_hf(name, seed=0):
    torch.manual_seed(seed)
    hf = transformers.BertModel(transformers.BertConfig(**CONFIGS[name])).eval()
    with torch.no_grad():  # non-trivial LayerNorm parameters and biases
        for key, p in hf.named_parameters():
            if "LayerNorm" in key or key.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return hf


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> (hf model, {format: directory})."""
    out = {}
    for name in CONFIGS:
        hf = make_hf(name)
        dirs = {}
        for fmt in ("safetensors", "bin"):
            d = tmp_path_factory.mktemp(f"{name}-{fmt}")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                hf.save_pretrained(d)
            if fmt == "bin":
                # transformers 5 dropped save_pretrained(safe_serialization=False); its
                # pytorch_model.bin was torch.save(state_dict()), which is what this writes
                os.remove(os.path.join(d, "model.safetensors"))
                torch.save(hf.state_dict(), os.path.join(d, "pytorch_model.bin"))
            dirs[fmt] = str(d)
        out[name] = (hf, dirs)
    return out


def inputs(cfg, batch, seq, rng):
    ids = rng.integers(0, cfg["vocab_size"], (batch, seq))
    tt = rng.integers(0, cfg["type_vocab_size"], (batch, seq))
    mask = np.ones((batch, seq), np.int64)
    for b in range(1, batch):  # padded rows of several lengths
        mask[b, rng.integers(1, seq + 1) :] = 0
    return ids, mask, tt


def hf_out(hf, ids, mask, tt):
    with torch.no_grad():
        r = hf(
            input_ids=torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask),
            token_type_ids=torch.from_numpy(tt),
        )
    return r.last_hidden_state.numpy(), r.pooler_output.numpy()


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_from_pretrained_matches_transformers(saved, name, fmt):
    hf, dirs = saved[name]
    m = BertModel.from_pretrained(dirs[fmt])
    assert set(m.state_dict()) == set(hf.state_dict()) - {
        "embeddings.position_ids",
        "embeddings.token_type_ids",
    }
    rng = np.random.default_rng(3)
    cases = [(1, 1), (1, 7), (4, 7), (4, 128)] if fmt == "safetensors" else [(4, 7)]
    for batch, seq in cases:
        ids, mask, tt = inputs(CONFIGS[name], batch, seq, rng)
        want_h, want_p = hf_out(hf, ids, mask, tt)
        got = m(ids, attention_mask=mask, token_type_ids=tt)
        assert got.last_hidden_state.shape == want_h.shape
        assert np.abs(got.last_hidden_state - want_h).max() <= 1e-4, (batch, seq)
        assert np.abs(got.pooler_output - want_p).max() <= 1e-4, (batch, seq)


def test_defaults_one_dimensional_input_and_mean_pool(saved):
    hf, dirs = saved["small"]
    m = BertModel.from_pretrained(dirs["safetensors"])
    ids = np.arange(1, 10)
    with torch.no_grad():
        r = hf(input_ids=torch.from_numpy(ids[None]))
    got = m(ids)
    assert np.abs(got.last_hidden_state - r.last_hidden_state.numpy()).max() <= 1e-4
    ids2, mask, _ = inputs(CONFIGS["small"], 3, 11, np.random.default_rng(5))
    h = m(ids2, mask).last_hidden_state
    th, tm = torch.from_numpy(h), torch.from_numpy(mask)
    # sentence-transformers' mean pooling
    expanded = tm.unsqueeze(-1).expand(th.size()).float()
    want = torch.sum(th * expanded, 1) / torch.clamp(expanded.sum(1), min=1e-9)
    np.testing.assert_allclose(mean_pool(h, mask), want.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(mean_pool(h), h.mean(1), rtol=1e-6)
    with pytest.raises(ValueError, match="attention_mask has shape"):
        mean_pool(h, mask[:, :3])


@pytest.mark.parametrize("dtype, tol", [("float16", 5e-3), ("bfloat16", 5e-2)])
def test_half_weight_storage(saved, dtype, tol):
    """16-bit storage is weight-only: against transformers running the same rounded weights
    in float32 the outputs agree within 1e-4; against the original float32 weights within the
    documented tolerance (docs/transformers.md)."""
    hf, dirs = saved["small"]
    m = BertModel.from_pretrained(dirs["safetensors"], dtype=dtype)
    assert m.embeddings.word_embeddings.weight.dtype.name == dtype
    rounded = copy.deepcopy(hf)
    tdt = getattr(torch, dtype)
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.to(tdt).float())
    ids, mask, tt = inputs(CONFIGS["small"], 4, 16, np.random.default_rng(9))
    got = m(ids, mask, tt)
    want_h, want_p = hf_out(rounded, ids, mask, tt)
    assert np.abs(got.last_hidden_state - want_h).max() <= 1e-4
    assert np.abs(got.pooler_output - want_p).max() <= 1e-4
    exact_h, _ = hf_out(hf, ids, mask, tt)
    assert np.abs(got.last_hidden_state - exact_h).max() <= tol


def test_task_model_checkpoint_and_config_dict(tmp_path):
    torch.manual_seed(4)
    cfg = transformers.BertConfig(**CONFIGS["small"])
    mlm = transformers.BertForMaskedLM(cfg).eval()  # keys prefixed "bert.", head "cls.*"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlm.save_pretrained(tmp_path)
    m = BertModel.from_pretrained(tmp_path)
    assert m.pooler is None  # BertForMaskedLM has no pooling layer
    built = BertModel(BertConfig(**CONFIGS["small"]))
    assert set(built.state_dict()) == set(m.state_dict()) | {
        k for k in built.state_dict() if k.startswith("pooler.")
    }
    ids = np.random.default_rng(0).integers(0, 99, (2, 5))
    with torch.no_grad():
        want = mlm.bert(input_ids=torch.from_numpy(ids)).last_hidden_state.numpy()
    got = m(ids)
    assert got.pooler_output is None
    assert np.abs(got.last_hidden_state - want).max() <= 1e-4


def test_bad_input_raises_clear_errors(saved):
    m = BertModel.from_pretrained(saved["small"][1]["safetensors"])
    ids = np.ones((2, 5), np.int64)
    # (the word embedding table names itself: the model is plain module code)
    with pytest.raises(IndexError,
                       match=r"Embedding\(99, .*index 99 at position \(1, 2\).*99 rows"):
        m(np.array([[1, 2, 3, 4, 5], [1, 2, 99, 4, 5]]))
    with pytest.raises(IndexError, match=r"Embedding\(99, .*index -1"):
        m(np.array([[-1, 2]]))
    with pytest.raises(IndexError, match=r"Embedding\(2, .*index 2"):
        m(ids, token_type_ids=np.full((2, 5), 2))
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 4\), expected \(2, 5\)"):
        m(ids, attention_mask=np.ones((2, 4)))
    with pytest.raises(ValueError, match=r"token_type_ids has shape \(5,\)"):
        m(ids, token_type_ids=np.zeros(5, np.int64))
    with pytest.raises(
        ValueError, match="sequence length 131 is longer than max_position_embeddings=130"
    ):
        m(np.ones((1, 131), np.int64))
    with pytest.raises(ValueError, match="no tokens"):
        m(np.zeros((2, 0), np.int64))
    with pytest.raises(TypeError, match=r"input_ids\).*must be integers"):
        m(np.ones((1, 3), np.float32))
    with pytest.raises(ValueError, match="divisible"):
        BertConfig(hidden_size=30, num_attention_heads=4)
    with pytest.raises(NotImplementedError, match="absolute"):
        BertConfig(position_embedding_type="relative_key")
    with pytest.raises(FileNotFoundError, match="config.json"):
        BertModel.from_pretrained(os.path.dirname(__file__))


def test_from_pretrained_needs_neither_torch_nor_transformers(saved):
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\nsys.modules['transformers'] = None\n"
        "import numpy as np\n"
        "from modulekit.models.bert import BertModel\n"
        "for d in sys.argv[1:]:\n"
        "    out = BertModel.from_pretrained(d)(np.array([[2, 3, 4]]))\n"
        "    print(out.last_hidden_state.shape)\n"
    )
    dirs = saved["small"][1]
    env = dict(os.environ, PYTHONPATH=PKG_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run(
        [sys.executable, "-c", code, dirs["safetensors"], dirs["bin"]],
        capture_output=True,
        text=True,
        env=env,
        cwd=PKG_ROOT,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:2] == ["(1, 3, 64)", "(1, 3, 64)"]


def test_float64_model_computes_in_float64(saved):
    hf, dirs = saved["small"]
    m = BertModel.from_pretrained(dirs["safetensors"], dtype="float64")
    ids, mask, tt = inputs(CONFIGS["small"], 2, 9, np.random.default_rng(2))
    want_h, _ = hf_out(copy.deepcopy(hf).double(), ids, mask, tt)
    got = m(ids, mask, tt).last_hidden_state
    assert got.dtype == np.float64
    assert np.abs(got - want_h).max() <= 1e-12
