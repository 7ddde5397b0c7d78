"""The lazy convolutions (``modulekit.nn.LazyConv1d`` ... ``LazyConvTranspose3d``) against torch."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import modulekit
import modulekit.nn as nn
from modulekit.nn import StateDictError

torch = pytest.importorskip("torch")

# (name, spatial dims, transposed)
CLASSES = [
    ("LazyConv1d", 1, False),
    ("LazyConv2d", 2, False),
    ("LazyConv3d", 3, False),
    ("LazyConvTranspose1d", 1, True),
    ("LazyConvTranspose2d", 2, True),
    ("LazyConvTranspose3d", 3, True),
]
CONCRETE = {name: name.replace("Lazy", "") for name, _, _ in CLASSES}
RTOL, ATOL = 1e-4, 1e-5


def _state(tm):
    return {k: v.detach().numpy().copy() for k, v in tm.state_dict().items()}


def _torch_out(tm, x):
    with torch.no_grad():
        return tm(torch.from_numpy(np.ascontiguousarray(x))).numpy()


def _pair(name, out_channels, kernel_size, **kw):
    torch.manual_seed(0)
    return getattr(torch.nn, name)(out_channels, kernel_size, **kw), \
        getattr(nn, name)(out_channels, kernel_size, **kw)


def _input(nd, cin, batch, rng, size=6, dtype=np.float32):
    shape = ((batch,) if batch is not None else ()) + (cin,) + (size,) * nd
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("name, nd, transposed", CLASSES)
@pytest.mark.parametrize("batch", [2, None], ids=["batched", "unbatched"])
def test_load_before_first_call_matches_torch(name, nd, transposed, batch, rng):
    kw = dict(stride=2, padding=1, groups=2, dilation=1)
    if transposed:
        kw["output_padding"] = 1
    tm, mk = _pair(name, 6, 3, **kw)
    x = _input(nd, 4, batch, rng)
    want = _torch_out(tm, x)  # materialises torch's layer (it becomes its concrete class)
    assert type(tm).__name__ == CONCRETE[name]
    result = mk.load_state_dict(_state(tm))
    assert not result.missing_keys and not result.unexpected_keys
    # loaded: in_channels from the weight's shape, still the lazy class until its first call
    assert type(mk).__name__ == name and not mk.has_uninitialized_params()
    assert mk.in_channels == 4 and tuple(mk.weight.shape) == tuple(tm.weight.shape)
    got = mk(x)
    assert type(mk).__name__ == CONCRETE[name] and type(mk) is getattr(nn, CONCRETE[name])
    assert mk.in_channels == tm.in_channels
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(mk(x), want, rtol=RTOL, atol=ATOL)  # the concrete class now


@pytest.mark.parametrize("name, nd, transposed", CLASSES)
@pytest.mark.parametrize("batch", [3, None], ids=["batched", "unbatched"])
def test_first_call_materialises_as_the_concrete_class(name, nd, transposed, batch, rng):
    tm, mk = _pair(name, 4, 2, groups=2, bias=True)
    assert mk.has_uninitialized_params() and mk.in_channels == 0
    x = _input(nd, 6, batch, rng, size=5)
    y = mk(x)
    assert type(mk) is getattr(nn, CONCRETE[name]) and isinstance(mk, nn.Module)
    assert not hasattr(mk, "has_uninitialized_params")
    assert mk.in_channels == 6
    _torch_out(tm, x)
    sd = mk.state_dict(include_packed=True)
    assert {k: tuple(v.shape) for k, v in sd.items()} == \
        {k: tuple(v.shape) for k, v in tm.state_dict().items()}
    # the concrete class's initialisation: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    w = sd["weight"].numpy()
    bound = 1 / np.sqrt(w.shape[1] * int(np.prod(w.shape[2:])))
    assert np.abs(w).max() <= bound and np.abs(sd["bias"].numpy()).max() <= bound
    assert np.unique(w).size > 1
    assert y.shape == _torch_out(tm, x).shape
    mk.load_state_dict(_state(tm))  # a concrete layer now: reloads as one
    np.testing.assert_allclose(mk(x), _torch_out(tm, x), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("name, nd", [("LazyConv1d", 1), ("LazyConv2d", 2), ("LazyConv3d", 3)])
def test_padding_modes_and_padding_strings(name, nd, mode, rng):
    for padding in (1, "same", "valid"):
        tm, mk = _pair(name, 3, 3, padding=padding, padding_mode=mode, bias=False)
        x = _input(nd, 2, 2, rng, size=5)
        want = _torch_out(tm, x)
        mk.load_state_dict(_state(tm))
        np.testing.assert_allclose(mk(x), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name, nd", [("LazyConvTranspose1d", 1), ("LazyConvTranspose2d", 2)])
def test_transposed_output_size_on_the_first_call(name, nd, rng):
    tm, mk = _pair(name, 2, 3, stride=2)
    x = _input(nd, 3, 1, rng, size=4)
    size = (10,) * nd
    with torch.no_grad():
        want = tm(torch.from_numpy(x), output_size=size).numpy()
    mk.load_state_dict(_state(tm))
    got = mk(x, output_size=size)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_depthwise_float64_and_non_contiguous_input(rng):
    tm, mk = _pair("LazyConv2d", 6, 3, groups=6, padding=1)
    base = rng.standard_normal((2, 6, 7, 9))
    x = base[:, :, :, ::2].transpose(0, 1, 3, 2)  # non-contiguous, float64
    assert not x.flags.c_contiguous
    tm = tm.double()
    want = _torch_out(tm, x)
    mk.double()  # a float64 layer computes in float64 (as Conv2d)
    mk.load_state_dict(_state(tm))
    got = mk(x)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_to_dtype_before_materialising_sets_the_parameters_dtype(rng):
    mk = nn.LazyConv1d(3, 2).to(modulekit.float64)
    mk.initialize_parameters(np.zeros((2, 4, 5), np.float32))
    assert mk.weight.dtype == modulekit.float64 and mk.bias.dtype == modulekit.float64
    assert type(mk) is nn.LazyConv1d  # parameters created; the class changes on the first call
    assert mk.in_channels == 4 and tuple(mk.weight.shape) == (3, 4, 2)
    mk.initialize_parameters(np.zeros((2, 8, 5)))  # no-op once they exist
    assert mk.in_channels == 4
    tm = torch.nn.Conv1d(4, 3, 2).double()
    mk.load_state_dict(_state(tm))
    x = rng.standard_normal((2, 4, 5))
    np.testing.assert_allclose(mk(x), _torch_out(tm, x), rtol=1e-10, atol=1e-12)
    assert type(mk) is nn.Conv1d


def test_state_dict_and_parameters_before_materialising():
    mk = nn.LazyConvTranspose2d(4, 3)
    # torch lists UninitializedParameter placeholders; modulekit has no tensor without storage
    assert mk.state_dict() == {} and mk.state_dict(include_packed=True) == {}
    assert list(mk.parameters()) == []
    with pytest.raises(AttributeError, match="LazyConvTranspose2d.weight does not exist yet"):
        _ = mk.weight
    assert nn.LazyConv1d(2, 3, bias=False).bias is None
    assert repr(mk) == repr(torch.nn.LazyConvTranspose2d(4, 3))
    assert repr(nn.LazyConv1d(2, 3, bias=False, groups=2)) == \
        repr(torch.nn.LazyConv1d(2, 3, bias=False, groups=2))
    # keys a load does not give are missing (strict refuses, nothing changes)
    result = mk.load_state_dict({}, strict=False)
    assert result.missing_keys == ["weight", "bias"] and mk.has_uninitialized_params()
    with pytest.raises(StateDictError, match="Missing key"):
        mk.load_state_dict({})
    assert mk.has_uninitialized_params()


def test_torch_lazy_state_dict_loads_as_nothing():
    tm = torch.nn.LazyConv2d(4, 3)
    mk = nn.LazyConv2d(4, 3)
    result = mk.load_state_dict(dict(tm.state_dict()))  # UninitializedParameter values
    assert not result.missing_keys and not result.unexpected_keys
    assert mk.has_uninitialized_params() and mk.in_channels == 0


def test_load_with_assign_before_materialising(rng):
    tm, mk = _pair("LazyConv1d", 4, 3)
    x = _input(1, 5, 2, rng)
    want = _torch_out(tm, x)
    state = _state(tm)
    mk.load_state_dict(state, assign=True)
    np.testing.assert_allclose(mk(x), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name, nd, transposed", CLASSES)
def test_inconsistent_load_is_refused_and_nothing_changes(name, nd, transposed):
    mk = getattr(nn, name)(4, 3, groups=2)
    k = (3,) * nd
    bad_weights = [
        (4, 2, 5) + k[1:],            # kernel size
        (4, 2) + k + (1,),            # rank
        (3, 2) + k,                   # out_channels (in_channels for transposed: odd)
    ]
    for shape in bad_weights:
        with pytest.raises(StateDictError, match="size mismatch for weight") as info:
            mk.load_state_dict({"weight": np.zeros(shape), "bias": np.zeros(4)})
        assert "Unexpected" not in str(info.value)
        assert mk.has_uninitialized_params() and mk.in_channels == 0
        assert list(mk._parameters) == [] and mk.state_dict() == {}
    # in_channels 6 (transposed: (in_channels, out_channels/groups, *k)), or 2*2 = 4
    # (convolution: (out_channels, in_channels/groups, *k))
    good = ((6, 2) if transposed else (4, 2)) + k
    with pytest.raises(StateDictError, match="size mismatch for bias"):
        mk.load_state_dict({"weight": np.zeros(good), "bias": np.zeros(3)})
    assert mk.has_uninitialized_params() and mk.in_channels == 0 and mk.state_dict() == {}
    with pytest.raises(StateDictError, match="without weight"):
        mk.load_state_dict({"bias": np.zeros(4)}, strict=False)
    with pytest.raises(StateDictError, match='parameter named "weight", expected a Tensor'):
        mk.load_state_dict({"weight": "not an array", "bias": np.zeros(4)})
    assert mk.has_uninitialized_params()
    mk.load_state_dict({"weight": np.ones(good), "bias": np.zeros(4)})
    assert mk.in_channels == (6 if transposed else 4)


def test_refused_load_elsewhere_in_the_tree_leaves_the_lazy_layer_unmaterialised():
    model = nn.Sequential(nn.LazyConv2d(4, 3), nn.Conv2d(4, 2, 1))
    before = model[1].state_dict(include_packed=True)["weight"].numpy().copy()
    state = {"0.weight": np.ones((4, 3, 3, 3)), "0.bias": np.ones(4),
             "1.weight": np.ones((2, 5, 1, 1)), "1.bias": np.ones(2)}  # 1.weight: wrong shape
    with pytest.raises(StateDictError, match="size mismatch for 1.weight"):
        model.load_state_dict(state)
    assert model[0].has_uninitialized_params() and model[0].in_channels == 0
    assert model[0].state_dict() == {}
    np.testing.assert_array_equal(model[1].state_dict(include_packed=True)["weight"].numpy(),
                                  before)
    # a post-hook that raises rolls the materialisation back too
    state["1.weight"] = np.ones((2, 4, 1, 1))

    def hook(module, keys):
        raise RuntimeError("refused by the hook")

    handle = model.register_load_state_dict_post_hook(hook)
    with pytest.raises(RuntimeError, match="refused by the hook"):
        model.load_state_dict(state)
    assert model[0].has_uninitialized_params() and model[0].state_dict() == {}
    handle.remove()
    model.load_state_dict(state)
    assert model[0].in_channels == 3
    y = model(np.ones((1, 3, 5, 5), np.float32))
    assert y.shape == (1, 2, 3, 3) and type(model[0]) is nn.Conv2d


@pytest.mark.parametrize("name, nd, transposed", CLASSES)
def test_bad_first_input_is_refused_and_nothing_changes(name, nd, transposed):
    mk = getattr(nn, name)(4, 3, groups=2)
    for shape in [(6,) * (nd + 3), (4,) * nd, (2, 3) + (6,) * nd, (2, 0) + (6,) * nd]:
        with pytest.raises(ValueError, match=name):
            mk(np.zeros(shape, np.float32))
        assert type(mk).__name__ == name and mk.has_uninitialized_params()
        assert mk.in_channels == 0 and list(mk.parameters()) == []
    with pytest.raises(ValueError, match="expected a"):
        mk.initialize_parameters(np.zeros((4,) * nd))
    with pytest.raises(TypeError, match=name):
        mk(np.zeros((2, 4) + (6,) * nd, np.complex64))
    assert mk.has_uninitialized_params()


def test_a_first_call_that_raises_leaves_the_layer_lazy():
    mk = nn.LazyConv1d(2, 5)
    with pytest.raises(ValueError, match="smaller than the dilated kernel"):
        mk(np.zeros((1, 3, 2), np.float32))  # channels fine, too short for the kernel
    assert type(mk) is nn.LazyConv1d and mk.has_uninitialized_params() and mk.in_channels == 0
    # loaded, then a first call with the wrong channel count: stays lazy, loaded
    tm = torch.nn.Conv1d(3, 2, 5)
    mk.load_state_dict(_state(tm))
    with pytest.raises(ValueError):
        mk(np.zeros((1, 4, 8), np.float32))
    assert type(mk) is nn.LazyConv1d and not mk.has_uninitialized_params()
    np.testing.assert_array_equal(mk.weight.numpy(), tm.weight.detach().numpy())
    x = np.ones((1, 3, 8), np.float32)
    np.testing.assert_allclose(mk(x), _torch_out(tm, x), rtol=RTOL, atol=ATOL)
    assert type(mk) is nn.Conv1d


def test_constructor_checks_as_the_concrete_class():
    with pytest.raises(ValueError, match="groups must be a positive int"):
        nn.LazyConv2d(4, 3, groups=0)
    with pytest.raises(ValueError, match="out_channels must be divisible by groups"):
        nn.LazyConv1d(3, 3, groups=2)
    with pytest.raises(ValueError, match="zeros"):
        nn.LazyConvTranspose1d(3, 3, padding_mode="reflect")
    with pytest.raises(ValueError, match="padding must be an int"):
        nn.LazyConvTranspose2d(3, 3, padding="same")
    with pytest.raises(ValueError, match="strided"):
        nn.LazyConv3d(3, 3, stride=2, padding="same")


def test_initialize_pickle_and_copy_before_materialising(rng):
    mk = nn.LazyConv2d(3, 3, padding=1)
    assert mk.initialize() is mk and mk.has_uninitialized_params()  # nothing to pack yet
    for twin in (pickle.loads(pickle.dumps(mk)), copy.deepcopy(mk)):
        assert type(twin) is nn.LazyConv2d and twin.has_uninitialized_params()
        twin(np.zeros((1, 2, 4, 4), np.float32))
        assert type(twin) is nn.Conv2d and twin.in_channels == 2
    assert mk.has_uninitialized_params()
    x = rng.standard_normal((1, 5, 4, 4)).astype(np.float32)
    mk.initialize(x)  # the example's call materialises it
    assert type(mk) is nn.Conv2d and mk.in_channels == 5
    tm = torch.nn.Conv2d(5, 3, 3, padding=1)
    mk.load_state_dict(_state(tm))
    np.testing.assert_allclose(mk(x), _torch_out(tm, x), rtol=RTOL, atol=ATOL)


def test_in_a_sequential_with_hooks(rng):
    torch.manual_seed(1)
    tmodel = torch.nn.Sequential(torch.nn.LazyConv1d(4, 3), torch.nn.ReLU(),
                                 torch.nn.LazyConvTranspose1d(2, 3, stride=2))
    model = nn.Sequential(nn.LazyConv1d(4, 3), nn.ReLU(), nn.LazyConvTranspose1d(2, 3, stride=2))
    seen = []
    # as torch, the pre-hooks see the materialised concrete layer (and can fail the call)
    model[0].register_forward_pre_hook(lambda m, args: seen.append((type(m).__name__,
                                                                   m.in_channels)))
    model[0].register_forward_hook(lambda m, args, out: seen.append(type(m).__name__))
    x = rng.standard_normal((2, 3, 9)).astype(np.float32)
    want = _torch_out(tmodel, x)
    model.load_state_dict(_state(tmodel))
    np.testing.assert_allclose(model(x), want, rtol=RTOL, atol=ATOL)
    assert seen == [("Conv1d", 3), "Conv1d"]
    assert [type(m).__name__ for m in model] == ["Conv1d", "ReLU", "ConvTranspose1d"]


def test_concurrent_first_calls_materialise_once(rng):
    import threading

    mk = nn.LazyConv2d(4, 3, padding=1)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    outs, errors = [None] * 4, []
    barrier = threading.Barrier(4)

    def run(i):
        try:
            barrier.wait()
            outs[i] = mk(x)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and type(mk) is nn.Conv2d
    for y in outs[1:]:
        np.testing.assert_array_equal(y, outs[0])  # one set of weights
    np.testing.assert_array_equal(mk(x), outs[0])


def test_a_refused_load_undoes_what_any_pre_hook_rebound():
    """The mechanism the lazy layers rely on, for any module: ``load_state_dict`` snapshots a
    module before its pre-hooks run and restores it when the load is refused."""
    lin = nn.Linear(2, 2)
    old = lin.weight

    def hook(module, state, prefix, *rest):
        module.weight = nn.Parameter(np.zeros((2, 2), np.float32))  # rebinds
        module.tag = "changed"

    lin.register_load_state_dict_pre_hook(hook)
    with pytest.raises(StateDictError, match="size mismatch for bias"):
        lin.load_state_dict({"weight": np.ones((2, 2)), "bias": np.ones(3)})
    assert lin.weight is old and not hasattr(lin, "tag")
    lin.load_state_dict({"weight": np.ones((2, 2)), "bias": np.ones(2)})
    assert lin.weight is not old and lin.tag == "changed"


def test_a_pre_hook_that_raises_on_the_first_call_leaves_the_layer_lazy():
    mk = nn.LazyConv1d(2, 3)

    def refuse(module, args):
        raise RuntimeError("not now")

    handle = mk.register_forward_pre_hook(refuse)
    with pytest.raises(RuntimeError, match="not now"):
        mk(np.ones((1, 4, 5), np.float32))
    assert type(mk) is nn.LazyConv1d and mk.has_uninitialized_params()
    handle.remove()
    assert mk(np.ones((1, 4, 5), np.float32)).shape == (1, 2, 3)
