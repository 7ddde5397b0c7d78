"""The structure epoch (modulekit.module._epoch): every change that can alter what a forward
computes advances it (MobileNetV2 keeps its checked forward plan while it holds); calls,
reads and traversals leave it alone."""

import pickle

import numpy as np
import pytest

import modulekit.nn as nn
from modulekit import module as mm
from modulekit._ext._tensor import Parameter, Tensor


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.lst = nn.ModuleList([nn.Identity(), nn.Identity()])
        self.dct = nn.ModuleDict({"a": nn.Identity()})
        self.bn = nn.BatchNorm2d(4)
        self.register_buffer("stat", Tensor(np.zeros(2, np.float32)))

    def forward(self, x):
        return self.seq(self.fc(x))


def _hook_handle(n, kind):
    if kind == "pre":
        return n.fc.register_forward_pre_hook(lambda m, a: None)
    return n.fc.register_forward_hook(lambda m, a, o: None)


MUTATIONS = {
    "setattr child": lambda n: setattr(n, "fc", nn.Linear(3, 4)),
    "setattr child None": lambda n: setattr(n, "fc", None),
    "setattr new child": lambda n: setattr(n, "extra", nn.Identity()),
    "setattr parameter": lambda n: setattr(
        n.fc, "bias", Parameter(np.zeros(4, np.float32))
    ),
    "setattr parameter None": lambda n: setattr(n.fc, "bias", None),
    "setattr buffer": lambda n: setattr(n, "stat", Tensor(np.ones(2, np.float32))),
    "setattr buffer None": lambda n: setattr(n.bn, "running_mean", None),
    "setattr plain attribute": lambda n: setattr(n.bn, "eps", 0.5),
    "setattr training": lambda n: setattr(n.fc, "training", False),
    "delattr child": lambda n: delattr(n, "fc"),
    "delattr buffer": lambda n: delattr(n, "stat"),
    "delattr parameter": lambda n: delattr(n.fc, "bias"),
    "delattr plain attribute": lambda n: delattr(n.bn, "eps"),
    "register_buffer": lambda n: n.register_buffer("other", Tensor(np.zeros(1))),
    "register_parameter": lambda n: n.register_parameter("p", Parameter(np.zeros(1))),
    "add_module": lambda n: n.add_module("other", nn.Identity()),
    "register_module": lambda n: n.register_module("other", nn.Identity()),
    "forward hook": lambda n: _hook_handle(n, "post"),
    "forward pre-hook": lambda n: _hook_handle(n, "pre"),
    "train": lambda n: n.train(),
    "eval": lambda n: n.eval(),
    "train child": lambda n: n.seq.train(False),
    "load_state_dict": lambda n: n.load_state_dict(n.state_dict()),
    "load_state_dict assign": lambda n: n.load_state_dict(
        {k: np.array(v) for k, v in n.state_dict().items()}, assign=True
    ),
    "to float64": lambda n: n.to(np.float64),
    "double": lambda n: n.double(),
    "half": lambda n: n.half(),
    "initialize": lambda n: n.initialize(),
    "set_submodule": lambda n: n.set_submodule("seq.1", nn.Identity()),
    "Sequential setitem": lambda n: n.seq.__setitem__(1, nn.Identity()),
    "Sequential delitem": lambda n: n.seq.__delitem__(1),
    "Sequential delitem slice": lambda n: n.seq.__delitem__(slice(0, 1)),
    "Sequential append": lambda n: n.seq.append(nn.Identity()),
    "Sequential extend": lambda n: n.seq.extend([nn.Identity()]),
    "Sequential insert": lambda n: n.seq.insert(0, nn.Identity()),
    "Sequential pop": lambda n: n.seq.pop(0),
    "ModuleList setitem": lambda n: n.lst.__setitem__(0, nn.ReLU()),
    "ModuleList delitem": lambda n: n.lst.__delitem__(0),
    "ModuleList append": lambda n: n.lst.append(nn.ReLU()),
    "ModuleList insert": lambda n: n.lst.insert(1, nn.ReLU()),
    "ModuleDict setitem": lambda n: n.dct.__setitem__("b", nn.ReLU()),
    "ModuleDict delitem": lambda n: n.dct.__delitem__("a"),
    "ModuleDict pop": lambda n: n.dct.pop("a"),
    "ModuleDict clear": lambda n: n.dct.clear(),
    "ModuleDict update": lambda n: n.dct.update({"c": nn.ReLU()}),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutation_advances_epoch(name):
    n = Net()
    before = mm.structure_epoch()
    MUTATIONS[name](n)
    assert mm.structure_epoch() > before, name


@pytest.mark.parametrize("kind", ["pre", "post"])
def test_hook_removal_advances_epoch(kind):
    n = Net()
    handle = _hook_handle(n, kind)
    before = mm.structure_epoch()
    handle.remove()
    assert mm.structure_epoch() > before
    with _hook_handle(n, kind):
        before = mm.structure_epoch()
    assert mm.structure_epoch() > before  # the context manager's exit removes it


def test_failed_load_advances_epoch():
    """A load undone by a failing post hook (the values written, then restored)."""
    n = Net()

    def bad(module, result):
        raise RuntimeError("no")

    n.register_load_state_dict_post_hook(bad)
    sd = {k: np.array(v) + 1 for k, v in n.state_dict().items() if k != "bn.num_batches_tracked"}
    before = mm.structure_epoch()
    with pytest.raises(RuntimeError):
        n.load_state_dict(sd, strict=False)
    assert mm.structure_epoch() > before


def test_unpickled_module_advances_epoch():
    n = Net()
    data = pickle.dumps(n)
    before = mm.structure_epoch()
    pickle.loads(data)
    assert mm.structure_epoch() > before


def test_calls_and_reads_keep_epoch():
    n = Net().eval().initialize()
    x = np.ones((2, 3), np.float32)
    n(x)  # a first call may pack lazily
    before = mm.structure_epoch()
    for _ in range(3):
        n(x)
        nn.Identity()(x)
    n.state_dict()
    list(n.modules())
    list(n.named_parameters())
    list(n.buffers())
    repr(n)
    _ = n.fc.in_features, n.stat, n.seq[0], n.dct["a"], len(n.lst)
    assert mm.structure_epoch() == before
