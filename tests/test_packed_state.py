"""No silent loss of weights once layers are packed (issue #15 item 6): strict loads expect
the packed layers' keys, ``save`` refuses an empty state and says how to export, and
``state_dict(include_packed=True)`` exports exactly what the unpacked model would."""

import os

import numpy as np
import pytest

import modulekit as mk
from modulekit import StateDictError, nn
from modulekit.models import BertModel, resnet18

BERT = dict(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=16, type_vocab_size=2)


def mlp():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def describe(state):
    return [(k, tuple(v.shape), v.dtype) for k, v in state.items()]


def raw(state):
    return {k: np.asarray(v).tobytes() for k, v in state.items()}


def test_strict_load_of_nothing_into_a_packed_model_raises_and_changes_nothing():
    model = mlp().initialize()
    assert model.state_dict() == {}
    before = model.state_dict(include_packed=True)
    with pytest.raises(StateDictError, match=r'Missing key\(s\).*"0\.weight"') as info:
        model.load_state_dict({})
    assert info.value.result.missing_keys == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert raw(model.state_dict(include_packed=True)) == raw(before)
    result = model.load_state_dict({}, strict=False)
    assert result.missing_keys == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_packed_and_unpacked_models_report_the_same_missing_keys():
    lazy, packed = resnet18(), resnet18().eval().initialize()
    state = lazy.state_dict()
    partial = {k: v for k, v in state.items() if not k.startswith("layer2.")}
    assert (packed.load_state_dict(partial, strict=False)
            == lazy.load_state_dict(partial, strict=False))


def test_save_refuses_an_empty_state_and_points_at_the_export(tmp_path):
    model = mlp()
    model(np.ones((1, 4), np.float32))  # the first forward packs, as initialize() does
    for name in ("m.safetensors", "m.pt", "m.npz"):
        with pytest.raises(ValueError,
                           match=r"no tensors.*packed.*state_dict\(include_packed=True\)"):
            mk.save(model.state_dict(), tmp_path / name)
    with pytest.raises(ValueError, match="no tensors"):
        mk.save({}, tmp_path / "n.safetensors")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_export_matches_the_unpacked_model_and_leaves_the_model_packed(dtype):
    model = mlp().to(dtype)
    unpacked = model.state_dict()
    expected, values = describe(unpacked), raw(unpacked)
    model.initialize()
    exported = model.state_dict(include_packed=True)
    assert describe(exported) == expected
    assert raw(exported) == values  # the weights themselves, bit for bit
    assert all(isinstance(v, mk.Parameter) for v in exported.values())
    assert model.state_dict() == {}  # still packed
    assert all(m._packed is not None for m in model if isinstance(m, nn.Linear))
    exported["0.weight"].numpy()[...] = 0  # copies: the model does not see this
    assert raw(model.state_dict(include_packed=True)) == values


@pytest.mark.parametrize("build", [resnet18, lambda: BertModel(BERT),
                                   lambda: nn.MultiheadAttention(8, 2)])
def test_export_keys_order_shapes_dtypes_match_a_fresh_model(build):
    model = build().eval()
    expected = describe(model.state_dict())
    values = raw(model.state_dict())
    model.initialize()
    assert len(model.state_dict()) < len(expected)  # something was packed
    exported = model.state_dict(include_packed=True)
    assert describe(exported) == expected
    assert raw(exported) == values


def test_exported_checkpoint_round_trips_through_every_format(tmp_path):
    model = mlp().initialize()
    x = np.random.default_rng(0).standard_normal((2, 4), dtype=np.float32)
    y = model(x)
    for name in ("m.safetensors", "m.pt", "m.npz"):
        mk.save(model.state_dict(include_packed=True), tmp_path / name)
        fresh = mlp()
        assert fresh.load_state_dict(mk.load(tmp_path / name)) == mk.LoadResult([], [])
        np.testing.assert_array_equal(fresh(x), y)
