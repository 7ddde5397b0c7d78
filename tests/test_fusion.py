"""initialize() folds a Linear and the activation after it into one kernel call."""

import numpy as np
import pytest

import modulekit as mk
from modulekit import nn

ACTS = [nn.ReLU, nn.ReLU6, nn.GELU, lambda: nn.GELU("tanh"), nn.SiLU, nn.Sigmoid, nn.Tanh,
        lambda: nn.ReLU(inplace=True)]


def _count_forward_calls(module):
    calls = []
    original = module.forward
    module.forward = lambda x: calls.append(1) or original(x)
    return calls


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype", [mk.float32, mk.float64, mk.bfloat16])
def test_fused_outputs_unchanged(act, dtype, isa, rng):
    m = nn.Sequential(nn.Linear(37, 50), act(), nn.Linear(50, 7)).to(dtype)
    x = (rng.standard_normal((9, 37)) * 3).astype(np.float64 if dtype is mk.float64
                                                   else np.float32)
    plain = m(x)
    m.initialize()
    assert m._fused_plan is not None
    calls = _count_forward_calls(m[1])
    fused = m(x)
    assert calls == []  # the activation ran inside the Linear's kernel
    tol = 1e-12 if dtype is mk.float64 else 2e-6
    np.testing.assert_allclose(fused, plain, rtol=tol, atol=tol)


def test_fused_mlp_matches_torch(rng):
    torch = pytest.importorskip("torch")
    m = nn.Sequential(nn.Linear(31, 64), nn.GELU(), nn.Linear(64, 64), nn.SiLU(),
                      nn.Linear(64, 5), nn.Tanh())
    ref = torch.nn.Sequential(torch.nn.Linear(31, 64), torch.nn.GELU(), torch.nn.Linear(64, 64),
                              torch.nn.SiLU(), torch.nn.Linear(64, 5), torch.nn.Tanh())
    ref.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in m.state_dict().items()})
    m.initialize()
    x = rng.standard_normal((13, 31)).astype(np.float32)
    with torch.no_grad():
        expected = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(m(x), expected, rtol=1e-5, atol=1e-6)


def test_state_dict_and_repr_unchanged_by_fusion():
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    keys_before = list(m.state_dict())
    text_before = repr(m)
    m.initialize()
    assert repr(m) == text_before
    assert keys_before == ["0.weight", "0.bias"] and list(m.state_dict()) == []


def test_hooks_see_every_call_unfused():
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).initialize()
    seen = []
    handle = m[1].register_forward_hook(lambda mod, args, out: seen.append(out.copy()))
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    y = m(x)
    assert len(seen) == 1 and np.array_equal(seen[0], y)
    handle.remove()
    calls = _count_forward_calls(m[1])
    m(x)
    assert calls == []  # fused again once the hook is gone


def test_plan_dropped_when_children_change():
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).initialize()
    m[1] = nn.Tanh()
    x = np.ones((1, 4), np.float32)
    calls = _count_forward_calls(m[1])
    m(x)
    assert calls == [1]  # runs unfused (and correct) until the next initialize()
    m.initialize()
    m(x)
    assert calls == [1]


def test_linear_alone_applies_no_activation():
    lin = nn.Linear(3, 3)
    lin.load_state_dict({"weight": np.eye(3), "bias": np.zeros(3)})
    nn.Sequential(lin, nn.ReLU()).initialize()
    y = lin(-np.ones((1, 3), np.float32))
    np.testing.assert_array_equal(y, -np.ones((1, 3)))  # the fused ReLU does not leak into lin


def test_unfusable_followers_left_alone():
    m = nn.Sequential(nn.Linear(4, 4), nn.Softmax(dim=-1), nn.Linear(4, 2), nn.Dropout())
    m.eval().initialize()
    assert m._fused_plan is None
