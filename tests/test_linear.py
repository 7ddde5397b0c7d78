"""Linear and Identity: torch's constructor, init, key names and outputs; the packed form."""

import pickle

import ml_dtypes
import numpy as np
import pytest

import modulekit.nn as nn
import modulekit.nn.functional as F
from modulekit._ext._tensor import Tensor
from modulekit.dtypes import bfloat16, float16, float32, float64
from modulekit.module import StateDictError

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(1234)


def pair(k, n, bias=True):
    t = torch.nn.Linear(k, n, bias=bias)
    m = nn.Linear(k, n, bias=bias)
    m.load_state_dict(t.state_dict())
    return t, m


def torch_out(t, x):
    with torch.no_grad():
        return t(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))).numpy()


def test_constructor_geometry_keys_and_dtypes():
    m = nn.Linear(5, 3)
    assert (m.in_features, m.out_features) == (5, 3)
    assert m.weight.shape == (3, 5) and m.bias.shape == (3,)
    assert m.weight.dtype is float32
    assert list(m.state_dict()) == list(torch.nn.Linear(5, 3).state_dict())
    nb = nn.Linear(5, 3, bias=False)
    assert nb.bias is None and list(nb.state_dict()) == ["weight"]
    assert nn.Linear(2, 2, dtype="float64").weight.dtype is float64
    assert nn.Linear(2, 2, device="cpu", dtype=bfloat16).bias.dtype is bfloat16
    with pytest.raises(ValueError, match="CPU"):
        nn.Linear(2, 2, device="cuda")
    with pytest.raises(TypeError, match="floating"):
        nn.Linear(2, 2, dtype="int64")
    with pytest.raises(ValueError, match="in_features"):
        nn.Linear(-1, 2)
    with pytest.raises(ValueError, match="out_features"):
        nn.Linear(2, 2.5)


def test_default_init_is_torch_kaiming_uniform_bound():
    nn.manual_seed(0)
    m = nn.Linear(400, 300)
    bound = 1 / np.sqrt(400)
    w, b = np.asarray(m.weight), np.asarray(m.bias)
    for a in (w, b):
        assert np.all(np.abs(a) <= bound)
    assert np.abs(w).max() > 0.99 * bound  # spans the interval
    assert abs(w.std() - bound / np.sqrt(3)) < 0.02 * bound  # uniform's std
    nn.manual_seed(0)
    np.testing.assert_array_equal(np.asarray(nn.Linear(400, 300).weight), w)  # seedable


@pytest.mark.parametrize("shape", [(7,), (1, 7), (6, 7), (2, 3, 7), (2, 1, 2, 7), (0, 7)])
@pytest.mark.parametrize("bias", [True, False])
def test_outputs_match_torch_for_nd_inputs(shape, bias):
    t, m = pair(7, 5, bias)
    x = RNG.standard_normal(shape).astype(np.float32)
    y = m(x)
    assert y.shape == shape[:-1] + (5,) and y.dtype == np.float32
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, torch_out(t, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.int32, np.bool_]
)
def test_input_dtypes_compute_float32(dtype):
    t, m = pair(4, 3)
    x = (RNG.standard_normal((5, 4)) * 3).astype(dtype)
    y = m(x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, torch_out(t, x.astype(np.float32)), rtol=1e-5, atol=1e-5)


def test_float64_module_computes_float64():
    t = torch.nn.Linear(6, 4).double()
    m = nn.Linear(6, 4, dtype="float64")
    m.load_state_dict(t.state_dict())
    x = RNG.standard_normal((3, 6))
    y = m(x.astype(np.float32))
    assert y.dtype == np.float64
    with torch.no_grad():
        ref = t(torch.from_numpy(x.astype(np.float32).astype(np.float64))).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("make", [Tensor, list, memoryview, lambda a: torch.from_numpy(a)])
def test_any_array_like_input(make):
    t, m = pair(3, 2)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(m(make(x)), torch_out(t, x), rtol=1e-6, atol=1e-6)


def test_non_contiguous_inputs():
    t, m = pair(5, 4)
    x = RNG.standard_normal((5, 8)).astype(np.float32)
    for view in (x.T, x[:, ::2].T[:, :5], np.asfortranarray(x[:4, :5])):
        np.testing.assert_allclose(m(view), torch_out(t, view), rtol=1e-5, atol=1e-6)


def test_wrong_last_dim_and_bad_dtypes_refused():
    m = nn.Linear(4, 3)
    with pytest.raises(ValueError, match=r"Linear\(in_features=4, out_features=3\).*is 5.*4"):
        m(np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match="scalar"):
        m(np.float32(1))
    with pytest.raises(TypeError, match="complex"):
        m(np.zeros((2, 4), np.complex64))
    with pytest.raises(TypeError, match="object"):
        m(np.array([[None] * 4], dtype=object))
    with pytest.raises(TypeError):
        m("abcd")


def test_packs_lazily_on_first_forward_and_at_initialize():
    m = nn.Linear(3, 2)
    assert m._packed is None and m._packed_keys() == {}
    m(np.ones(3, np.float32))
    assert m._packed is not None
    assert m._packed_keys() == {"weight": ((2, 3), float32), "bias": ((2,), float32)}
    assert m.state_dict() == {}
    m2 = nn.Linear(3, 2, bias=False).initialize()
    assert m2._packed_keys() == {"weight": ((2, 3), float32)}
    assert m2.bias is None  # the None slot stays readable


def test_unpack_restores_equal_values_as_new_parameters():
    m = nn.Linear(3, 2)
    w = m.weight
    before = np.asarray(w).copy(), np.asarray(m.bias).copy()
    m.initialize()
    m._unpack()
    assert m.weight is not w and m._packed is None
    np.testing.assert_array_equal(np.asarray(m.weight), before[0])
    np.testing.assert_array_equal(np.asarray(m.bias), before[1])
    assert list(m.state_dict()) == ["weight", "bias"]


@pytest.mark.parametrize("packed_first", [False, True])
@pytest.mark.parametrize("storage, tol", [(float16, 1e-3), (bfloat16, 1e-2)])
def test_to_16bit_stores_weights_16bit_and_computes_float32(packed_first, storage, tol):
    t, m = pair(16, 8)
    if packed_first:
        m.initialize()
    m.to(storage)
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    y = m(x)
    assert y.dtype == np.float32
    assert m._packed.storage == storage.name
    assert m._packed_keys()["weight"][1] is storage
    # reference from the ROUNDED weights, in float32
    tw = t.weight.detach().numpy().astype(storage.numpy).astype(np.float32)
    tb = t.bias.detach().numpy().astype(storage.numpy).astype(np.float32)
    np.testing.assert_allclose(y, x @ tw.T + tb, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, torch_out(t, x), rtol=tol * 10, atol=tol * 10)
    # state survives a pickle in its 16-bit form
    clone = pickle.loads(pickle.dumps(m))
    assert clone.weight.dtype is storage
    np.testing.assert_array_equal(clone(x), y)


def test_load_into_packed_linear_from_torch_bfloat16_and_float64():
    t = torch.nn.Linear(5, 3)
    m = nn.Linear(5, 3).initialize()
    m.load_state_dict(t.to(torch.bfloat16).state_dict())
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    ref = x @ t.weight.detach().float().numpy().T + t.bias.detach().float().numpy()
    np.testing.assert_allclose(m(x), ref, rtol=1e-5, atol=1e-6)
    m.load_state_dict({"weight": np.zeros((5, 3)).T, "bias": np.arange(3.0)})
    np.testing.assert_array_equal(m(x), np.tile(np.arange(3.0, dtype=np.float32), (2, 1)))
    with pytest.raises(StateDictError, match="bias"):
        m.load_state_dict({"weight": np.zeros((3, 5)), "bias": np.zeros(4)})


def test_state_dict_both_ways_with_torch():
    m = nn.Linear(4, 2)
    t = torch.nn.Linear(4, 2)
    t.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in m.state_dict().items()})
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(m(x), torch_out(t, x), rtol=1e-6, atol=1e-6)


def test_functional_linear_matches_torch():
    w = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.standard_normal(3).astype(np.float32)
    x = RNG.standard_normal((2, 5, 4)).astype(np.float32)
    ref = torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b))
    np.testing.assert_allclose(F.linear(x, w, b), ref.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(F.linear(x, w), x @ w.T, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="in_features=4"):
        F.linear(x[..., :3], w)
    with pytest.raises(ValueError, match="bias"):
        F.linear(x, w, b[:2])


def test_identity_passes_input_through_unchanged():
    x = np.arange(3)
    m = nn.Identity(54, unused="x")
    assert m(x) is x
    assert list(m.state_dict()) == []


def test_functional_linear_and_matmul_on_the_gemm_kernels(rng):
    torch = pytest.importorskip("torch")
    import modulekit as mk
    from modulekit.nn import functional as F

    x = rng.standard_normal((2, 5, 33)).astype(np.float32)
    w = rng.standard_normal((17, 33)).astype(np.float32)
    b = rng.standard_normal(17).astype(np.float32)
    expected = torch.nn.functional.linear(*map(torch.from_numpy, (x, w, b))).numpy()
    np.testing.assert_allclose(F.linear(x, w, b), expected, rtol=1e-5, atol=1e-5)
    assert F.linear(x, w.astype(np.float64)).dtype == np.float64
    with pytest.raises(ValueError, match="in_features=33"):
        F.linear(x[..., :5], w)
    a, c = rng.standard_normal((3, 7, 11)), rng.standard_normal((11, 4))
    np.testing.assert_allclose(mk.matmul(a, c), a @ c, rtol=1e-12)
    np.testing.assert_allclose(mk.matmul(a[:, ::2].astype(np.float32), c.astype(np.float32)),
                               (a[:, ::2] @ c), rtol=1e-4, atol=1e-5)
