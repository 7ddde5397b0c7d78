"""Activations, Softmax, Dropout, Flatten and their functional forms against torch."""

import ml_dtypes
import numpy as np
import pytest

import modulekit.nn as nn
import modulekit.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

RNG = np.random.default_rng(7)
X32 = np.concatenate(
    [RNG.standard_normal(200) * 4, [0.0, -0.0, 1e-8, -1e-8, 30.0, -30.0, 100.0, -100.0]]
).astype(np.float32)


def ref(fn, x, **kw):
    with torch.no_grad():
        return fn(torch.from_numpy(np.asarray(x)), **kw).numpy()


@pytest.mark.parametrize(
    "layer, functional, torch_fn, kw",
    [
        (nn.ReLU, F.relu, TF.relu, {}),
        (nn.ReLU6, F.relu6, TF.relu6, {}),
        (nn.SiLU, F.silu, TF.silu, {}),
        (nn.Sigmoid, F.sigmoid, torch.sigmoid, {}),
        (nn.Tanh, F.tanh, torch.tanh, {}),
        (nn.GELU, F.gelu, TF.gelu, {}),
        (
            lambda: nn.GELU("tanh"),
            lambda x: F.gelu(x, approximate="tanh"),
            TF.gelu,
            {"approximate": "tanh"},
        ),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activations_match_torch(layer, functional, torch_fn, kw, dtype):
    x = X32.astype(dtype).reshape(13, 16)
    expected = ref(torch_fn, x, **kw)
    rtol = 2e-6 if dtype == np.float32 else 1e-12
    # below that, float32 denormals; torch's GELU forms 1 + erf(x) (or 1 + tanh), which loses
    # the negative tail to cancellation (we evaluate it without cancellation, in float64)
    atol = 1e-37 if dtype == np.float32 else 1e-300
    if torch_fn is TF.gelu:
        atol = 1e-6 if dtype == np.float32 else 1e-15
    for out in (layer()(x), functional(x)):
        assert out.dtype == dtype and out.shape == x.shape
        np.testing.assert_allclose(out, expected, rtol=rtol, atol=atol)


def test_gelu_negative_tail_is_accurate():
    mpmath = pytest.importorskip("mpmath")  # torch's dependency (through sympy)

    x = np.linspace(-9, 0, 1001).astype(np.float32).astype(np.float64)
    with mpmath.workdps(40):  # exact: erfc of a rounded x/sqrt(2) is off by 2 z^2 ulp
        exact = np.array([float(mpmath.mpf(v) * mpmath.erfc(-mpmath.mpf(v) / mpmath.sqrt(2)) / 2)
                          for v in x])
    np.testing.assert_allclose(F.gelu(x.astype(np.float32)), exact, rtol=1e-6, atol=1e-44)
    np.testing.assert_allclose(F.gelu(x), exact, rtol=1e-15, atol=0)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.int64, np.bool_])
def test_activations_widen_to_float32(dtype):
    x = (X32[:16] * 2).astype(dtype)
    for fn in (F.relu, F.relu6, F.gelu, F.silu, F.sigmoid, F.tanh):
        out = fn(x)
        assert out.dtype == np.float32
    np.testing.assert_allclose(F.sigmoid(x), ref(torch.sigmoid, x.astype(np.float32)), rtol=1e-6)


def test_inplace_variants_write_into_float_input():
    x = X32.copy()
    out = nn.ReLU(inplace=True)(x)
    assert out is x and (x >= 0).all()
    y = X32.copy()
    assert F.silu(y, inplace=True) is y
    np.testing.assert_allclose(y, ref(TF.silu, X32), rtol=2e-6, atol=1e-37)
    ints = np.array([-1, 2])
    assert F.relu(ints, inplace=True) is not ints  # not a float array: a new result


def test_bad_inputs_refused():
    for fn in (F.relu, F.gelu, F.softmax, F.tanh):
        with pytest.raises(TypeError, match="real numbers"):
            fn(np.zeros(3, np.complex64))
    with pytest.raises(TypeError):
        F.sigmoid(["a", "b"])
    with pytest.raises(ValueError, match="approximate"):
        nn.GELU("fast")


@pytest.mark.parametrize("dim", [0, 1, -1, 2])
def test_softmax_matches_torch(dim):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32) * 10
    np.testing.assert_allclose(
        nn.Softmax(dim)(x), ref(TF.softmax, x, dim=dim), rtol=1e-6, atol=1e-7
    )


@pytest.mark.parametrize("shape", [(4,), (3, 4), (2, 3, 4), (2, 3, 4, 5)])
def test_softmax_implicit_dim_as_torch_with_warning(shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    with pytest.warns(UserWarning, match="Implicit dimension"):
        out = nn.Softmax()(x)
    with pytest.warns(UserWarning):
        expected = ref(TF.softmax, x)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    with pytest.raises(IndexError, match="out of range"):
        F.softmax(x, dim=len(shape))


def test_dropout_identity_in_eval_and_inverted_in_training():
    x = np.ones((200, 50), np.float32)
    d = nn.Dropout(0.3)
    assert repr(d) == "Dropout(p=0.3, inplace=False)"
    nn.manual_seed(1)
    y = d(x)
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.7)}
    assert abs((y == 0).mean() - 0.3) < 0.02
    nn.manual_seed(1)
    np.testing.assert_array_equal(d(x), y)  # reproducible after manual_seed
    d.eval()
    assert d(x) is x
    assert F.dropout(x, 0.5, training=False) is x
    assert (F.dropout(x, 1.0) == 0).all()
    assert F.dropout(x, 0.0) is x
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, -0.1)
    z = np.ones(10, np.float32)
    assert F.dropout(z, 0.5, inplace=True) is z


@pytest.mark.parametrize("start, end", [(1, -1), (0, -1), (0, 1), (2, 3), (-2, -1), (1, 1)])
def test_flatten_matches_torch(start, end):
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    out = nn.Flatten(start, end)(x)
    expected = torch.flatten(torch.from_numpy(x), start, end).numpy()
    np.testing.assert_array_equal(out, expected)
    assert np.shares_memory(out, x)  # a view, no copy
    np.testing.assert_array_equal(F.flatten(x, start, end), expected)


def test_flatten_errors_and_defaults():
    x = np.zeros((2, 3, 4))
    assert nn.Flatten()(x).shape == (2, 12)
    assert F.flatten(x).shape == (24,)
    assert F.flatten(np.float32(3)).shape == (1,)
    with pytest.raises(IndexError):
        nn.Flatten(0, 5)(x)
    with pytest.raises(ValueError, match="start_dim"):
        F.flatten(x, 2, 1)


def test_layers_compose_like_torch():
    seq = nn.Sequential(
        nn.Linear(6, 5),
        nn.GELU(),
        nn.Dropout(0.5),
        nn.Linear(5, 4),
        nn.SiLU(),
        nn.Flatten(0),
        nn.Softmax(0),
    ).eval()
    tseq = torch.nn.Sequential(
        torch.nn.Linear(6, 5),
        torch.nn.GELU(),
        torch.nn.Dropout(0.5),
        torch.nn.Linear(5, 4),
        torch.nn.SiLU(),
        torch.nn.Flatten(0),
        torch.nn.Softmax(0),
    ).eval()
    seq.load_state_dict(tseq.state_dict())
    assert repr(seq) == repr(tseq)
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    np.testing.assert_allclose(seq(x), ref(tseq, x), rtol=1e-5, atol=1e-7)
