"""Saving a compiled module (graph + weights, no pickle) and loading it without its class;
hostile saved-module files are refused before anything is built."""

import io
import json
import pickle

import numpy as np
import pytest
import user_models as um
from test_compile import Small, X, _bn_stats, _same

import modulekit as mk
from modulekit import nn
from modulekit.checkpoint import CheckpointError
from modulekit.checkpoint._common import FileBuffer
from modulekit.checkpoint.safetensors import read_safetensors, write_safetensors
from modulekit.compile import CompileError, serialize


def _compiled_small():
    m = Small().eval().initialize()
    m.compile()
    m(X)
    ref = m(X)  # the plan's result (Conv2d + BatchNorm2d folded)
    return m, ref


@pytest.fixture
def saved(tmp_path):
    m, ref = _compiled_small()
    path = tmp_path / "small.safetensors"
    m.save(path)
    return path, ref


def test_roundtrip_bit_identical_without_the_class(saved):
    path, ref = saved
    loaded = mk.load_module(path)
    assert type(loaded).__name__ == "LoadedModule"
    _same(loaded(X), ref)
    x5 = np.random.default_rng(9).standard_normal((5, 3, 8, 8)).astype(np.float32)
    eager = Small().eval()
    eager.load_state_dict({k: np.asarray(v) for k, v in mk.load(path).items()})
    np.testing.assert_allclose(loaded(x5), eager(x5), rtol=1e-5, atol=1e-6)  # symbolic batch
    assert {"conv.weight", "conv.bias", "bn.running_mean", "fc.weight"} <= set(
        loaded.state_dict()) | {k for k in mk.load(path)}
    assert "call_module[conv]" in loaded.graph and "def forward(x):" in loaded.code
    with pytest.raises(ValueError, match="expected an ndarray of float32"):
        loaded(X.astype(np.float64))


def test_file_objects():
    m, ref = _compiled_small()
    buf = io.BytesIO()
    m.save(buf)
    buf.seek(0)
    _same(mk.load_module(buf)(X), ref)


@pytest.mark.parametrize("build, args", [
    (lambda: _bn_stats(um.ResNet(num_classes=10)),
     (np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32),)),
    (lambda: _bn_stats(um.MobileNetV2(num_classes=10)),
     (np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32),)),
    (lambda: um.BertModel(um.BERT_CONFIG),
     (np.random.default_rng(0).integers(0, 1000, (2, 9)), np.ones((2, 9), np.int64))),
])
def test_user_models_roundtrip(build, args, tmp_path):
    m = build().eval().initialize()
    m.compile()
    m(*args)  # (captures: the eager call)
    ref = m(*args)  # the plan, which the loaded module runs too
    path = tmp_path / "m.safetensors"
    m.save(path)
    out = mk.load_module(path)(*args)
    _same(out, ref)


def test_save_refusals(tmp_path):
    with pytest.raises(NotImplementedError, match="compiled"):
        Small().save(tmp_path / "x")
    m, _ = _compiled_small()
    h = m.bn.register_forward_hook(lambda *a: None)
    m(X)
    with pytest.raises(CompileError, match="hooks"):
        m.save(tmp_path / "x")
    h.remove()

    class MyLinear(nn.Linear):
        pass

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = MyLinear(3, 2)

        def forward(self, x):
            return self.fc(x)

    w = Wrap()
    w.compile()
    w(np.ones((1, 3), np.float32))
    with pytest.raises(CompileError, match="only modulekit.nn layers"):
        w.save(tmp_path / "x")


# ------------------------------------------------------------------ hostile files
def _rewrite(path, out, edit=None, tensors=None):
    arrays, aliases, meta = read_safetensors(FileBuffer(path, use_mmap=False))
    header = json.loads(meta["modulekit.module"])
    if edit is not None:
        edit(header)
    arrays = {k: np.array(v) for k, v in arrays.items()}
    if tensors is not None:
        tensors(arrays)
    write_safetensors(arrays, out, {"modulekit.module": json.dumps(header)})
    return out


@pytest.fixture
def never_build(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("a hostile file got as far as building modules")

    monkeypatch.setattr(serialize, "_build", boom)


def _first(header, op):
    return next(n for n in header["nodes"] if n["op"] == op)


def _set(field, value, op):
    def edit(h):
        _first(h, op)[field] = value
    return edit


HOSTILE = {
    "unknown op": (_set("op", "exec", "call_module"), None, "unknown op"),
    "eval function": (_set("target", "builtins.eval", "call_function"), None,
                      "not one a saved module may call"),
    "os.system": (_set("target", "os.system", "call_function"), None, "not one"),
    "dunder method": (_set("target", "__reduce__", "call_method"), None, "not allowed"),
    "unknown class": (lambda h: h["modules"]["conv"].__setitem__("class", "subprocess.Popen"),
                      None, "is not one a saved module may build"),
    "pickle in class": (lambda h: h["modules"]["fc"].__setitem__(
        "class", pickle.dumps(print).decode("latin1")), None, "not one a saved module"),
    "huge layer": (lambda h: h["modules"]["fc"]["args"].update(in_features=1 << 40,
                                                              out_features=1 << 40),
                   None, "needs \\(1099511627776, 1099511627776\\)"),
    "bad arg type": (lambda h: h["modules"]["fc"]["args"].update(bias="yes"), None,
                     "not valid"),
    "extra arg": (lambda h: h["modules"]["fc"]["args"].update(evil=1), None, "unexpected"),
    "wrong shape": (None, lambda t: t.__setitem__("fc.weight", np.zeros((3, 3), np.float32)),
                    "has shape"),
    "missing tensor": (None, lambda t: t.pop("conv.weight"), "does not hold"),
    "stray tensor": (None, lambda t: t.__setitem__("evil", np.zeros(3)), "belongs to no"),
    "forward reference": (lambda h: _first(h, "call_module")["args"].__setitem__(
        0, {"node": "output"}), None, "not an earlier node"),
    "unknown encoding": (lambda h: _first(h, "call_module")["args"].__setitem__(
        0, {"pickle": "gASV"}), None, "not a valid encoding"),
    "deep nesting": (lambda h: _first(h, "call_module")["args"].append(
        json.loads("[" * 40 + "]" * 40)), None, "nested too deeply"),
    "huge list": (lambda h: _first(h, "call_module")["args"].append(list(range(5000))), None,
                  "too long"),
    "huge int": (lambda h: _first(h, "call_method")["args"].append(1 << 70), None,
                 "integer argument"),
    "bad module ref": (lambda h: _first(h, "call_module").__setitem__("target", "nowhere"),
                       None, "not a saved module"),
    "unknown format": (lambda h: h.__setitem__("version", 99), None, "unknown format"),
    "bad path": (lambda h: h["modules"].__setitem__("../etc", h["modules"].pop("fc")), None,
                 "dotted name"),
    "no output last": (lambda h: h["nodes"].pop(), None, "output"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_files_refused(case, saved, tmp_path, never_build):
    path, _ = saved
    edit, tensors, match = HOSTILE[case]
    bad = _rewrite(path, tmp_path / "bad.safetensors", edit, tensors)
    with pytest.raises(CheckpointError, match=match):
        mk.load_module(bad)


def test_truncated_and_garbage_files(saved, tmp_path, never_build):
    path, _ = saved
    data = path.read_bytes()
    for n in (0, 4, 9, 100, len(data) // 2, len(data) - 1):
        p = tmp_path / f"cut{n}"
        p.write_bytes(data[:n])
        with pytest.raises(CheckpointError):
            mk.load_module(p)
    p = tmp_path / "huge"
    p.write_bytes((1 << 60).to_bytes(8, "little") + b"{}")
    with pytest.raises(CheckpointError, match="header length"):
        mk.load_module(p)


def test_pickles_and_plain_checkpoints_refused(tmp_path, never_build):
    p = tmp_path / "p.pkl"
    p.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(CheckpointError, match="not a saved module"):
        mk.load_module(p)
    torch = pytest.importorskip("torch")
    t = tmp_path / "t.pt"
    torch.save({"w": torch.zeros(2)}, t)
    with pytest.raises(CheckpointError, match="not a saved module"):
        mk.load_module(t)
    s = tmp_path / "plain.safetensors"
    mk.save({"w": np.zeros(2, np.float32)}, s)
    with pytest.raises(CheckpointError, match="plain checkpoint"):
        mk.load_module(s)


def test_json_tricks_refused(saved, tmp_path, never_build):
    path, _ = saved
    arrays, _, meta = read_safetensors(FileBuffer(path, use_mmap=False))
    arrays = {k: np.array(v) for k, v in arrays.items()}
    text = meta["modulekit.module"]
    for bad_text, match in ((text.replace('"version":1', '"version":1,"version":1'),
                             "duplicate"),
                            (text.replace('"exact_shapes":false', '"exact_shapes":NaN'),
                             "non-finite"),
                            (text[:-5], "not valid JSON")):
        p = tmp_path / "j.safetensors"
        write_safetensors(arrays, p, {"modulekit.module": bad_text})
        with pytest.raises(CheckpointError, match=match):
            mk.load_module(p)


def test_functional_pooling_saved(tmp_path):
    class Pool(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            y = mk.nn.functional.max_pool2d(self.conv(x), 2, 2, 0, 1, False)
            return mk.nn.functional.adaptive_avg_pool2d(y, 1).reshape(x.shape[0], -1)

    m = Pool().eval()
    m.compile()
    ref = m(X)
    assert "F.max_pool2d" in m.code
    m.save(tmp_path / "p")
    _same(mk.load_module(tmp_path / "p")(X), ref)
