"""Module: registration, attribute protocol, traversal (compared with torch), apply/train,
repr, path lookups, pickling, refused methods. One test or more per sentence of the spec."""

import pickle

import numpy as np
import pytest

import modulekit.nn as nn
from modulekit._ext._tensor import Parameter, Tensor
from modulekit.hooks import RemovableHandle
from modulekit.module import Module

torch = pytest.importorskip("torch")
tnn = torch.nn


# --------------------------------------------------------------------------- helpers
def build(lib, P):
    """The same tree in torch (lib=torch.nn, P=tensor factory) and modulekit: shared
    submodules, a shared parameter, non-persistent buffers, nested containers, None entries."""
    shared = lib.Linear(3, 3)

    class Block(lib.Module):
        def __init__(self):
            super().__init__()
            self.fc = lib.Linear(3, 4)
            self.register_buffer("stat", P(np.arange(4.0)))
            self.register_buffer("scratch", P(np.zeros(2)), persistent=False)
            self.register_buffer("nothing", None)
            self.register_parameter("absent", None)
            self.empty = None

    class Net(lib.Module):
        def __init__(self):
            super().__init__()
            self.a = shared
            self.blocks = lib.ModuleList([Block(), Block()])
            self.seq = lib.Sequential(shared, lib.ReLU(), lib.Sequential(lib.Linear(3, 2)))
            self.heads = lib.ModuleDict({"x": lib.Linear(2, 2), "y": self.seq})
            self.tied = self.blocks[0].fc.weight  # the same Parameter under two names

    return Net()


def mk_param(a):
    return Parameter(np.asarray(a, dtype=np.float32))


def torch_param(a):
    return torch.nn.Parameter(torch.as_tensor(np.asarray(a, dtype=np.float32)))


def mk_buf(a):
    return Tensor(np.asarray(a, dtype=np.float32))


def torch_buf(a):
    return torch.as_tensor(np.asarray(a, dtype=np.float32))


@pytest.fixture
def pair():
    return build(tnn, torch_buf), build(nn, mk_buf)


# --------------------------------------------------------------------------- traversal vs torch
def names(it):
    return [n for n, _ in it]


@pytest.mark.parametrize("remove_duplicate", [True, False])
def test_named_modules_match_torch(pair, remove_duplicate):
    t, m = pair
    tn = names(t.named_modules(remove_duplicate=remove_duplicate))
    mn = names(m.named_modules(remove_duplicate=remove_duplicate))
    assert mn == tn
    assert names(m.named_modules(prefix="top")) == names(t.named_modules(prefix="top"))


def test_named_modules_yields_shared_module_once_first_path_wins(pair):
    _, m = pair
    found = [n for n, mod in m.named_modules() if mod is m.a]
    assert found == ["a"]
    assert next(iter(m.named_modules()))[1] is m  # self first


@pytest.mark.parametrize("recurse", [True, False])
@pytest.mark.parametrize("remove_duplicate", [True, False])
def test_named_parameters_and_buffers_match_torch(pair, recurse, remove_duplicate):
    t, m = pair
    kw = dict(recurse=recurse, remove_duplicate=remove_duplicate)
    assert names(m.named_parameters(**kw)) == names(t.named_parameters(**kw))
    assert names(m.named_buffers(**kw)) == names(t.named_buffers(**kw))
    assert names(m.named_parameters("p", **kw)) == names(t.named_parameters("p", **kw))


def test_shared_parameter_yields_once_first_name_wins(pair):
    _, m = pair
    hits = [n for n, p in m.named_parameters() if p is m.tied]
    assert hits == ["tied"]
    assert len(list(m.parameters())) == len(names(m.named_parameters()))


def test_children_modules_parameters_buffers_match_torch(pair):
    t, m = pair
    assert names(m.named_children()) == names(t.named_children())
    assert [type(c).__name__ for c in m.children()] == [type(c).__name__ for c in t.children()]
    assert [type(c).__name__ for c in m.modules()] == [type(c).__name__ for c in t.modules()]
    assert [tuple(p.shape) for p in m.parameters()] == [tuple(p.shape) for p in t.parameters()]
    assert [tuple(b.shape) for b in m.buffers()] == [tuple(b.shape) for b in t.buffers()]
    assert len(list(m.buffers(recurse=False))) == 0


def test_state_dict_keys_match_torch(pair):
    t, m = pair
    assert list(m.state_dict()) == list(t.state_dict())
    assert list(m.state_dict(prefix="model.")) == list(t.state_dict(prefix="model."))


def test_spec_signature_positional_forms(pair):
    _, m = pair
    # the specification's named_modules(prefix, _memo) and named_parameters(recurse)
    assert names(m.named_modules("p")) == names(m.named_modules(prefix="p"))
    assert names(m.named_parameters(False)) == names(m.named_parameters(recurse=False))
    assert names(m.named_buffers(True)) == names(m.named_buffers(recurse=True))
    memo = set()
    assert names(m.named_modules(prefix="", _memo=memo))[0] == ""
    assert m in memo


def test_named_modules_identical_to_torch_sequential_of_same_layer():
    lt = tnn.Linear(2, 2)
    lm = nn.Linear(2, 2)
    assert names(nn.Sequential(lm, lm).named_modules()) == names(
        tnn.Sequential(lt, lt).named_modules()
    )
    assert list(nn.Sequential(lm, lm).state_dict()) == list(tnn.Sequential(lt, lt).state_dict())


# --------------------------------------------------------------------------- registration
class Plain(Module):
    def __init__(self):
        super().__init__()


def test_setattr_registers_parameters_modules_and_plain_attributes():
    m = Plain()
    p = mk_param([1.0, 2.0])
    m.w = p
    m.child = nn.ReLU()
    m.x = 3
    assert m._parameters == {"w": p} and m.w is p
    assert m._modules["child"] is m.child
    assert m.__dict__["x"] == 3 and "x" not in m._parameters
    # as torch: a Module cannot take a parameter's name, a Parameter takes a module's name
    with pytest.raises(TypeError, match="parameter 'w'"):
        m.w = nn.Identity()
    m.child2 = nn.Identity()
    m.child2 = mk_param([0.0])
    assert "child2" not in m._modules and "child2" in m._parameters
    m.x2 = 5
    m.x2 = nn.ReLU()
    assert "x2" not in m.__dict__ and "x2" in m._modules
    m.child = None
    assert m._modules["child"] is None


def test_register_buffer_and_replacement_by_assignment():
    m = Plain()
    m.register_buffer("b", np.arange(3, dtype=np.int64))
    assert isinstance(m.b, Tensor) and m.b.dtype.name == "int64"
    m.b = [1.5, 2.5]  # assigning to a buffer's name replaces the buffer (array-like -> Tensor)
    assert isinstance(m._buffers["b"], Tensor) and m.b.shape == (2,)
    t = Tensor(np.ones(2, np.float32))
    m.b = t
    assert m._buffers["b"] is t
    m.b = None
    assert m._buffers["b"] is None and "b" not in m.state_dict()
    m.register_buffer("np_", np.zeros(1), persistent=False)
    m.np_ = np.ones(1)  # stays non-persistent when replaced
    assert "np_" in m._non_persistent_buffers and "np_" not in m.state_dict()
    with pytest.raises(TypeError, match="buffer 'b'"):
        m.b = "text"
    with pytest.raises(TypeError, match="buffer 'c'"):
        m.register_buffer("c", {"a": 1})
    with pytest.raises(TypeError, match="buffer 'u'"):
        m.register_buffer("u", np.zeros(2, np.uint16))
    m.register_buffer("f", [1.5, 2.5])  # Python floats become float32, as torch.tensor
    assert m.f.dtype.name == "float32"


def test_persistent_buffers_in_state_dict_non_persistent_kept_out():
    m = Plain()
    m.register_buffer("keep", np.zeros(2))
    m.register_buffer("skip", np.zeros(2), persistent=False)
    assert list(m.state_dict()) == ["keep"]
    assert sorted(n for n, _ in m.named_buffers()) == ["keep", "skip"]


def test_assigning_non_parameter_to_parameter_name_is_type_error():
    m = Plain()
    m.w = mk_param([1.0])
    with pytest.raises(TypeError, match="parameter 'w'"):
        m.w = np.ones(1)
    with pytest.raises(TypeError, match="parameter 'w'"):
        m.w = Tensor(np.ones(1, np.float32))
    m.w = None
    assert m._parameters["w"] is None
    m.c = nn.ReLU()
    with pytest.raises(TypeError, match="child module 'c'"):
        m.c = 3


def test_assignment_before_super_init_names_class_and_fix():
    class Early(Module):
        def __init__(self):
            self.lin = nn.Linear(1, 1)
            super().__init__()

    class EarlyParam(Module):
        def __init__(self):
            self.w = mk_param([1.0])

    with pytest.raises(AttributeError, match=r"Early.*super\(\).__init__\(\) first"):
        Early()
    with pytest.raises(AttributeError, match=r"EarlyParam.*super\(\).__init__\(\) first"):
        EarlyParam()

    class EarlyBuffer(Module):
        def __init__(self):
            self.register_buffer("b", np.zeros(1))

    with pytest.raises(AttributeError, match="super"):
        EarlyBuffer()


@pytest.mark.parametrize(
    "name, exc",
    [
        ("", KeyError),
        ("a.b", KeyError),
        ("forward", KeyError),
        ("training", KeyError),
        (1, TypeError),
    ],
)
def test_bad_names_refused_as_torch(name, exc):
    for register in (
        lambda m: m.register_parameter(name, mk_param([1.0])),
        lambda m: m.register_buffer(name, np.zeros(1)),
        lambda m: m.add_module(name, nn.ReLU()),
    ):
        with pytest.raises(exc):
            register(Plain())
    tm = tnn.Module()
    with pytest.raises(exc):
        tm.register_buffer(name, torch.zeros(1))


def test_add_module_and_register_module():
    m = Plain()
    with pytest.raises(TypeError, match="not a Module subclass"):
        m.add_module("x", np.zeros(1))
    r = nn.ReLU()
    m.register_module("r", r)
    m.add_module("none", None)
    assert m._modules == {"r": r, "none": None}
    with pytest.raises(TypeError):
        m.register_parameter("p", np.zeros(1))


def test_getattr_delattr_dir():
    m = Plain()
    m.w = mk_param([1.0])
    m.register_buffer("b", np.zeros(1), persistent=False)
    m.c = nn.ReLU()
    assert {"w", "b", "c", "forward", "training"} <= set(dir(m))
    del m.w, m.b, m.c
    assert not m._parameters and not m._buffers and not m._modules
    assert "b" not in m._non_persistent_buffers
    with pytest.raises(AttributeError, match="'Plain' object has no attribute 'zz'"):
        m.zz  # noqa: B018
    m.q = 1
    del m.q
    assert not hasattr(m, "q")


def test_module_init_takes_no_arguments():
    with pytest.raises(TypeError):
        Module(1)


# --------------------------------------------------------------------------- apply / train
def test_apply_children_first_then_self_returns_self():
    net = nn.Sequential(nn.Sequential(nn.ReLU(), nn.Tanh()), nn.Sigmoid())
    order = []
    assert net.apply(lambda mod: order.append(type(mod).__name__)) is net
    tnet = tnn.Sequential(tnn.Sequential(tnn.ReLU(), tnn.Tanh()), tnn.Sigmoid())
    torder = []
    tnet.apply(lambda mod: torder.append(type(mod).__name__))
    assert order == torder == ["ReLU", "Tanh", "Sequential", "Sigmoid", "Sequential"]


def test_train_eval_flip_whole_tree(pair):
    _, m = pair
    assert all(mod.training for mod in m.modules())
    assert m.eval() is m
    assert not any(mod.training for mod in m.modules())
    assert m.train() is m and all(mod.training for mod in m.modules())
    m.train(False)
    assert not m.blocks[1].fc.training
    with pytest.raises(ValueError, match="boolean"):
        m.train("yes")


# --------------------------------------------------------------------------- forward / call
def test_forward_is_required_and_call_runs_forward():
    with pytest.raises(NotImplementedError, match='missing the required "forward"'):
        Plain()(1)

    class Add(Module):
        def forward(self, a, b=1):
            return a + b

    assert Add()(1, b=2) == 3


# --------------------------------------------------------------------------- repr
def test_repr_matches_torch(pair):
    t, m = pair
    assert repr(m).replace("modulekit", "") == repr(t).replace("Net", "Net")


def test_repr_of_layers_and_extra_repr_multiline():
    cases = [
        (nn.Linear(2, 3), tnn.Linear(2, 3)),
        (nn.Linear(2, 3, bias=False), tnn.Linear(2, 3, bias=False)),
        (
            nn.ModuleList([nn.Linear(2, 2)] * 3 + [nn.ReLU()]),
            tnn.ModuleList([tnn.Linear(2, 2)] * 3 + [tnn.ReLU()]),
        ),
        (nn.ModuleList(), tnn.ModuleList()),
        (nn.ModuleDict({"a": nn.ReLU()}), tnn.ModuleDict({"a": tnn.ReLU()})),
        (nn.Softmax(1), tnn.Softmax(1)),
        (nn.GELU("tanh"), tnn.GELU("tanh")),
        (nn.Dropout(0.2), tnn.Dropout(0.2)),
        (nn.Flatten(0, 2), tnn.Flatten(0, 2)),
        (nn.ReLU(inplace=True), tnn.ReLU(inplace=True)),
        (nn.ReLU6(), tnn.ReLU6()),
        (nn.Identity(3, k=1), tnn.Identity(3, k=1)),
    ]
    for ours, theirs in cases:
        assert repr(ours) == repr(theirs)

    class Multi(Module):
        def __init__(self):
            super().__init__()
            self.c = nn.ReLU()

        def extra_repr(self):
            return "a=1\nb=2"

    class TMulti(tnn.Module):
        def __init__(self):
            super().__init__()
            self.c = tnn.ReLU()

        def extra_repr(self):
            return "a=1\nb=2"

    assert repr(Multi()).replace("Multi", "X") == repr(TMulti()).replace("TMulti", "X")


def test_repr_of_packed_linear_keeps_geometry():
    lin = nn.Linear(2, 3).initialize()
    assert repr(lin) == "Linear(in_features=2, out_features=3, bias=True)"


# --------------------------------------------------------------------------- path lookups
def test_get_submodule_parameter_buffer(pair):
    _, m = pair
    assert m.get_submodule("") is m
    assert m.get_submodule("blocks.1.fc") is m.blocks[1].fc
    assert m.get_parameter("blocks.0.fc.bias") is m.blocks[0].fc.bias
    assert m.get_buffer("blocks.1.stat") is m.blocks[1].stat
    with pytest.raises(AttributeError, match="has no attribute `nope`"):
        m.get_submodule("blocks.nope")
    with pytest.raises(AttributeError, match="is not a Module"):
        m.get_submodule("tied")
    with pytest.raises(AttributeError, match="not a Parameter"):
        m.get_parameter("blocks.0.stat")
    with pytest.raises(AttributeError, match="not a buffer"):
        m.get_buffer("blocks.0.fc.weight")
    with pytest.raises(AttributeError):
        m.get_parameter("blocks.0.fc.nope")


def test_set_submodule(pair):
    _, m = pair
    new = nn.Linear(3, 4)
    m.set_submodule("blocks.0.fc", new)
    assert m.blocks[0].fc is new
    with pytest.raises(ValueError, match="without a target"):
        m.set_submodule("", new)
    with pytest.raises(ValueError, match="not a Module"):
        m.set_submodule("blocks.0.fc", 3)
    with pytest.raises(AttributeError):
        m.set_submodule("nope.fc", new)
    with pytest.raises(AttributeError, match="has no attribute"):
        m.set_submodule("blocks.0.other", new, strict=True)
    m.set_submodule("blocks.0.other", new)
    assert m.blocks[0].other is new
    with pytest.raises(AttributeError, match="not a Module"):
        m.set_submodule("tied", new)


# --------------------------------------------------------------------------- pickling
def test_pickle_roundtrip_keeps_values_and_flags():
    net = nn.Sequential(nn.Linear(3, 2), nn.Dropout(0.1)).eval()
    net[0].register_buffer("counter", np.arange(3))
    x = np.random.default_rng(0).random((4, 3), dtype=np.float32)
    y = net(x)  # packs the Linear: pickling must ship the raw weights
    clone = pickle.loads(pickle.dumps(net))
    assert not clone.training
    assert list(clone.state_dict()) == ["0.weight", "0.bias", "0.counter"]
    np.testing.assert_array_equal(clone(x), y)
    assert net[0]._packed is not None  # the live module stayed packed


def test_pickle_with_hooks_of_module_level_functions():
    m = nn.Identity()
    m.register_forward_hook(_double_output)
    clone = pickle.loads(pickle.dumps(m))
    assert clone(2) == 4


def _double_output(module, args, out):
    return out * 2


# --------------------------------------------------------------------------- refused methods
@pytest.mark.parametrize("name", ["cuda", "ipu", "xpu", "mtia"])
def test_accelerator_methods_refused(name):
    with pytest.raises(ValueError, match="CPU only"):
        getattr(nn.Linear(1, 1), name)()


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.register_backward_hook(print),
        lambda m: m.register_full_backward_hook(print),
        lambda m: m.register_full_backward_pre_hook(print),
        lambda m: m.requires_grad_(),
        lambda m: m.save("x.pt"),  # uncompiled: no graph to save
    ],
)
def test_autograd_torchscript_methods_refused(call):
    with pytest.raises(NotImplementedError, match="modulekit"):
        call(nn.Linear(1, 1))


@pytest.mark.parametrize("name", ["code", "code_with_constants", "graph", "inlined_graph"])
def test_torchscript_attributes_absent_with_reason(name):
    m = nn.Linear(1, 1)  # not compiled: nothing captured to describe
    with pytest.raises(AttributeError, match="compile"):
        getattr(m, name)
    assert not hasattr(m, name)


def test_meaningful_no_ops():
    m = nn.Linear(1, 1)
    assert m.requires_grad_(False) is m
    assert m.zero_grad() is None
    assert m.cpu() is m


def test_removable_handle_is_weak_and_idempotent():
    m = nn.Identity()
    h = m.register_forward_hook(_double_output)
    assert isinstance(h, RemovableHandle)
    h.remove()
    h.remove()
    assert m(3) == 3
    h2 = nn.Identity().register_forward_hook(_double_output)
    h2.remove()  # owner collected: a no-op


def test_forward_called_directly_skips_hooks_call_runs_them():
    m = nn.Identity()
    m.register_forward_hook(_double_output)
    assert m.forward(3) == 3
    assert m(3) == 6


def test_round_trip_contract_build_then_load():
    src = nn.Sequential(nn.Linear(4, 3), nn.GELU(), nn.Linear(3, 2))
    exported = {k: np.array(v) for k, v in src.state_dict().items()}
    x = np.random.default_rng(5).random((2, 4), dtype=np.float32)
    expected = src(x)
    fresh = nn.Sequential(nn.Linear(4, 3), nn.GELU(), nn.Linear(3, 2))
    assert fresh.load_state_dict(exported) == ([], [])
    np.testing.assert_array_equal(fresh(x), expected)


def test_add_module_and_register_parameter_equal_attribute_assignment():
    by_call, by_assign = Plain(), Plain()
    child, param = nn.ReLU(), mk_param([1.0])
    by_call.add_module("c", child)
    by_call.register_parameter("p", param)
    by_assign.c = child
    by_assign.p = param
    for m in (by_call, by_assign):
        assert m._modules == {"c": child} and m._parameters == {"p": param}
        assert m.c is child and m.p is param


def test_nn_namespace_reexports_the_core_classes():
    import modulekit

    assert nn.Module is Module
    assert nn.Parameter is modulekit.Parameter is Parameter
    assert set(nn.functional.__all__) >= {
        "linear",
        "relu",
        "relu6",
        "gelu",
        "silu",
        "sigmoid",
        "tanh",
        "softmax",
        "dropout",
        "flatten",
        "conv2d",
        "max_pool2d",
        "avg_pool2d",
        "adaptive_avg_pool2d",
        "hardswish",
    }
