"""``Module.share_memory()``: weights and packed weights in POSIX shared memory, pickled as
segment handles; a spawn-context Pool worker maps the same pages; no segment outlives its
owner; hostile handles are refused."""

import gc
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import modulekit as mk
from modulekit import _shared
from modulekit._ext._gemm import _attach_linear, pack_linear
from modulekit._ext._tensor import _rebuild_shared
from modulekit.models.bert import BertConfig, BertModel

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/dev/shm") or _shared._posixshmem is None,
    reason="needs POSIX shared memory in /dev/shm",
)

PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(mk.__file__)))


def _segments():
    return {f for f in os.listdir("/dev/shm") if f.startswith("mk_")}


def _small_bert():
    mk.nn.manual_seed(0)
    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, vocab_size=100)
    return BertModel(cfg).eval()


IDS = np.array([[1, 5, 7, 9, 3, 2]], dtype=np.int64)


def _packed_kernels(model):
    return [m._packed for m in model.modules() if getattr(m, "_packed", None) is not None]


def test_share_memory_moves_everything_and_keeps_outputs():
    model = _small_bert()
    ref = model(IDS).last_hidden_state
    params = dict(model.named_parameters())
    assert not any(p.is_shared() for p in params.values())
    assert model.share_memory() is model
    # the same Parameter objects, now over shared segments
    assert all(params[k] is v for k, v in model.named_parameters())
    for name, t in model.state_dict().items():
        assert t.is_shared(), name
    kernels = _packed_kernels(model)
    assert len(kernels) == 2 * 6 + 1  # q, k, v, 3 dense per layer, the pooler
    assert all(k.is_shared for k in kernels)
    for layer in model.encoder.layer:  # query/key/value run as one shared stacked kernel
        sa = layer.attention.self
        stacked = sa.query._packed.fused
        assert stacked.is_shared
        assert all(k.fused is stacked for k in (sa.key._packed, sa.value._packed))
    np.testing.assert_array_equal(model(IDS).last_hidden_state, ref)
    assert model.share_memory() is model  # idempotent
    np.testing.assert_array_equal(model(IDS).last_hidden_state, ref)


def test_pickle_sends_handles_and_maps_the_same_memory():
    model = _small_bert().share_memory()
    ref = model(IDS).last_hidden_state
    data = pickle.dumps(model)
    assert len(data) < 20_000  # handles, not the ~0.4 MB of weights
    twin = pickle.loads(data)
    np.testing.assert_array_equal(twin(IDS).last_hidden_state, ref)
    w = model.embeddings.LayerNorm.weight
    w2 = twin.embeddings.LayerNorm.weight
    assert w2.is_shared() and w2 is not w
    w.numpy()[0] = 3.0  # a write through one mapping is read through the other
    assert w2.numpy()[0] == 3.0
    # packed layers arrive packed and shared: no re-pack, and the stack is adopted
    assert all(k.is_shared for k in _packed_kernels(twin))
    sa = twin.encoder.layer[0].attention.self
    stacked = sa.query._packed.fused
    twin(IDS)
    assert sa.key._packed.fused is stacked and sa.value._packed.fused is stacked


def test_unshared_pickle_unchanged():
    model = _small_bert()
    model(IDS)
    twin = pickle.loads(pickle.dumps(model))
    assert not any(t.is_shared() for t in twin.state_dict().values())
    assert "weight" in twin.encoder.layer[0].attention.self.query._parameters  # raw weights
    np.testing.assert_array_equal(twin(IDS).last_hidden_state, model(IDS).last_hidden_state)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_tensor_and_packed_linear_round_trip(dtype):
    t = mk.Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), dtype=dtype)
    values = np.asarray(t).copy()
    assert t.share_memory_() is t and t.is_shared()
    back = pickle.loads(pickle.dumps(t))
    assert back.dtype is t.dtype and back.is_shared()
    np.testing.assert_array_equal(np.asarray(back), values)
    owner = mk.Parameter(mk.Tensor(values, dtype=dtype)).share_memory_()  # (the owner must
    p = pickle.loads(pickle.dumps(owner))  # hold its segment while a pickle is in flight)
    assert type(p) is mk.Parameter
    # a view at an unaligned offset of a segment is pickled by value (and still loads)
    view = mk.Tensor.from_numpy(owner.numpy().reshape(-1)[1:])
    assert view.is_shared() and not pickle.loads(pickle.dumps(view)).is_shared()
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((19, 33)), rng.standard_normal(19)
    packed = pack_linear(w, b, dtype)
    shared = packed.shared_copy()
    assert not packed.is_shared and shared.is_shared and shared.shared_copy() is shared
    x = rng.standard_normal((5, 33)).astype(packed.compute_dtype)
    for k in (shared, pickle.loads(pickle.dumps(shared))):
        np.testing.assert_array_equal(k.forward(x, "gelu"), packed.forward(x, "gelu"))
        np.testing.assert_array_equal(k.unpack()[0], packed.unpack()[0])


def test_received_under_another_isa_repacks_privately(isa):
    from modulekit._ext import _isa

    rng = np.random.default_rng(1)
    w, b = rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal(40)
    x = rng.standard_normal((7, 24)).astype(np.float32)
    ref = pack_linear(w, b).forward(x)  # packed for the path under test
    for other in _isa.available_isas():
        previous = _isa.set_isa(other)
        try:
            owner = pack_linear(w, b).shared_copy()
            data = pickle.dumps(owner)
        finally:
            _isa.set_isa(previous)
        got = pickle.loads(data)
        assert got.is_shared
        np.testing.assert_array_equal(got.forward(x), ref)


def test_writes_after_share_memory():
    model = _small_bert().share_memory()
    twin = pickle.loads(pickle.dumps(model))
    state = {k: np.asarray(v) * 0.5 for k, v in model.state_dict().items()}
    state.update({k: np.asarray(v) * 0.5 for k, v in _raw_state(model).items()})
    model.load_state_dict(state)
    # plain tensors were written in place: still shared, and the twin sees the values
    for k, v in model.state_dict().items():
        assert v.is_shared(), k
    np.testing.assert_array_equal(
        twin.embeddings.word_embeddings.weight.numpy(),
        model.embeddings.word_embeddings.weight.numpy(),
    )
    # packed layers re-packed into new shared segments (not seen by the twin)
    assert all(k.is_shared for k in _packed_kernels(model))
    # the next call re-stacks query/key/value (a new capture) as one shared stack, sent as
    # one handle
    out = model(IDS).last_hidden_state
    again = pickle.loads(pickle.dumps(model))
    for sa, sb in zip(model.encoder.layer, again.encoder.layer):
        a, b = sa.attention.self.query._packed, sb.attention.self.query._packed
        assert a.fused.is_shared and b.fused.__reduce__()[1][0] == a.fused.__reduce__()[1][0]
    fresh = _small_bert()
    fresh.load_state_dict(state)
    np.testing.assert_array_equal(out, fresh(IDS).last_hidden_state)
    # a cast moves everything to private memory; share_memory() shares it again
    model.to(mk.float16)
    assert not any(v.is_shared() for v in model.state_dict().values())
    assert not any(k.is_shared for k in _packed_kernels(model))
    half = model(IDS).last_hidden_state
    model.share_memory()
    assert all(v.is_shared() for v in model.state_dict().values())
    assert all(k.is_shared for k in _packed_kernels(model))
    np.testing.assert_array_equal(model(IDS).last_hidden_state, half)
    model.initialize()
    assert all(k.is_shared for k in _packed_kernels(model))


def _raw_state(model):
    """The packed layers' weights and biases, unpacked (they are not in state_dict())."""
    out = {}
    for name, m in model.named_modules():
        packed = getattr(m, "_packed", None)
        if packed is not None:
            w, b = packed.unpack()
            out[f"{name}.weight"] = w
            if b is not None:
                out[f"{name}.bias"] = b
    return out


def test_failure_part_way_changes_nothing(monkeypatch):
    model = _small_bert()
    model.initialize()
    ref = model(IDS).last_hidden_state
    before = _segments()
    real, calls = _shared.copy_to_shared, []

    def failing(arr):
        calls.append(1)
        if len(calls) == 5:
            raise OSError(28, "No space left on device")
        return real(arr)

    monkeypatch.setattr(_shared, "copy_to_shared", failing)
    with pytest.raises(OSError, match="No space"):
        model.share_memory()
    monkeypatch.undo()
    assert not any(v.is_shared() for v in model.state_dict().values())
    assert not any(k.is_shared for k in _packed_kernels(model))
    np.testing.assert_array_equal(model(IDS).last_hidden_state, ref)
    gc.collect()
    assert _segments() <= before  # the segments made before the failure are gone


def test_segments_released_with_the_model():
    before = _segments()
    model = _small_bert().share_memory()
    made = _segments() - before
    assert made
    data = pickle.dumps(model)
    del model
    gc.collect()
    assert not (made & _segments())
    with pytest.raises(FileNotFoundError, match="released it"):
        pickle.loads(data)  # a stale handle: the owner has released the segments


class _Reduce:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def test_hostile_handles_are_refused():
    good = mk.Tensor(np.ones((4, 4), np.float32)).share_memory_()
    name, size, offset, nbytes = _shared.handle_of(good.numpy())
    packed = pack_linear(np.ones((8, 8), np.float32)).shared_copy()
    fn, args = packed.__reduce__()
    cases = [
        (_rebuild_shared, (mk.Tensor, ("../../etc/passwd", 64, 0, 64), "float32", (4, 4)),
         ValueError, "expected 'mk_'"),
        (_rebuild_shared, (mk.Tensor, ("mk_" + "0" * 24, 64, 0, 64), "float32", (4, 4)),
         FileNotFoundError, "does not exist"),
        (_rebuild_shared, (mk.Tensor, (name, size + 4096, 0, 64), "float32", (4, 4)),
         ValueError, "has .* bytes, the handle says"),
        (_rebuild_shared, (mk.Tensor, (name, size, 0, 64), "float32", (40, 40)),
         ValueError, "does not hold 6400 bytes"),
        (_rebuild_shared, (mk.Tensor, (name, 64, 64, 64), "float32", (4, 4)),
         ValueError, "do not fit"),
        (_rebuild_shared, (mk.Tensor, (name, size, -64, 64), "float32", (4, 4)),
         ValueError, "offset must be an int"),
        (_rebuild_shared, (mk.Tensor, (name, size, 0, 64), "float32", (4, -4)),
         ValueError, "shape must be"),
        (_rebuild_shared, (dict, (name, size, 0, 64), "float32", (4, 4)),
         TypeError, "not a Tensor class"),
        (_rebuild_shared, (mk.Tensor, [name, size, 0, 64], "float32", (4, 4)),
         ValueError, "does not hold"),
        # a packed layer whose geometry needs more bytes than the segment holds
        (_attach_linear, (args[0], 4096, 4096) + args[3:], ValueError, "does not hold"),
        (_attach_linear, (args[0], 2**30, 2**30) + args[3:], ValueError, "too large"),
        (_attach_linear, (args[0], 8, 8, "int8") + args[4:], ValueError, "unknown storage"),
        (_attach_linear, args[:5] + (7,), ValueError, "instruction-set level"),
        (_attach_linear, args[:4] + (1,) + args[5:], ValueError, "has_bias must be a bool"),
        (_attach_linear, ((name, size, 0, 64),) + args[1:], ValueError, "does not hold"),
    ]
    for fn_, args_, exc, match in cases:
        with pytest.raises(exc, match=match):
            pickle.loads(pickle.dumps(_Reduce(fn_, args_)))
    assert fn is _attach_linear
    assert pickle.loads(pickle.dumps(packed)).is_shared  # the genuine one still loads


WORKER_SCRIPT = textwrap.dedent(
    """
    import json, multiprocessing as mp, os, pickle, sys
    import numpy as np
    import modulekit as mk
    from modulekit.models.bert import BertConfig, BertModel

    def mapping_of(addr):
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                lo, hi = (int(v, 16) for v in parts[0].split("-"))
                if lo <= addr < hi:
                    return parts[5] if len(parts) > 5 else ""
        return None

    def work(args):
        model, ids, probe = args
        out = model(ids).last_hidden_state
        tensors = {k: (v.is_shared(), mapping_of(v.numpy().ctypes.data))
                   for k, v in model.state_dict().items()}
        packed = {n: (m._packed.is_shared, type(m._packed).__name__)
                  for n, m in model.named_modules() if getattr(m, "_packed", None) is not None}
        segs = sorted({m._packed.fused.__reduce__()[1][0][0] for m in model.modules()
                       if hasattr(getattr(m, "_packed", None), "fused")})
        probe.numpy()[0] = 7.0  # written through the worker's mapping
        return {"out": out.tolist(), "tensors": tensors, "packed": packed, "stacks": segs,
                "pid": os.getpid()}

    if __name__ == "__main__":
        before = {f for f in os.listdir("/dev/shm") if f.startswith("mk_")}
        mk.nn.manual_seed(0)
        cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=128, vocab_size=100)
        model = BertModel(cfg).eval().share_memory()
        ids = np.array([[1, 5, 7, 9, 3, 2]], dtype=np.int64)
        ref = model(ids).last_hidden_state
        probe = mk.Tensor(np.zeros(4, np.float32)).share_memory_()
        stacks = sorted({m._packed.fused.__reduce__()[1][0][0] for m in model.modules()
                         if hasattr(getattr(m, "_packed", None), "fused")})
        with mp.get_context(sys.argv[1]).Pool(1) as pool:
            res = pool.map(work, [(model, ids, probe)])[0]
        made = sorted({f for f in os.listdir("/dev/shm") if f.startswith("mk_")} - before)
        print(json.dumps({
            "same": bool(np.array_equal(np.array(res["out"], np.float32), ref)),
            "tensors": res["tensors"], "packed": res["packed"], "stacks": res["stacks"],
            "parent_stacks": stacks, "probe": float(probe.numpy()[0]), "made": made,
        }))
        # exits with the model alive: the owner's exit must remove the segments
    """
)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_spawn_pool_worker_maps_the_segments_and_nothing_leaks(tmp_path, method):
    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    proc = subprocess.run([sys.executable, str(script), method], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "leaked" not in proc.stderr and "resource_tracker" not in proc.stderr, proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["same"]  # bit-identical outputs
    assert res["probe"] == 7.0  # the worker wrote into the parent's memory
    made = set(res["made"])
    for key, (shared, path) in res["tensors"].items():
        assert shared, key
        assert os.path.basename(path) in made, (key, path)  # a mapping of our segment
    assert all(shared for shared, _ in res["packed"].values())
    assert res["stacks"] == res["parent_stacks"]  # the stacked qkv kernels, not re-stacked
    # (c) no segment outlives the processes
    assert not (made & _segments())


def test_fork_child_exit_does_not_unlink(tmp_path):
    # a pre-fork server's worker exiting (sys.exit: atexit and finalizers run) leaves the
    # segments to the parent that made them
    script = tmp_path / "forked.py"
    script.write_text(textwrap.dedent(
        """
        import os, pickle, sys
        import numpy as np
        import modulekit as mk
        from modulekit.models.bert import BertConfig, BertModel
        cfg = BertConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                         intermediate_size=128, vocab_size=100)
        model = BertModel(cfg).eval().share_memory()
        ids = np.array([[1, 2, 3]])
        mine = {f for f in os.listdir("/dev/shm") if f.startswith("mk_")}
        pid = os.fork()
        if pid == 0:
            model(ids)
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        kept = mine <= {f for f in os.listdir("/dev/shm") if f.startswith("mk_")}
        twin = pickle.loads(pickle.dumps(model))
        same = np.array_equal(twin(ids).last_hidden_state, model(ids).last_hidden_state)
        print(status, kept, same)
        """
    ))
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "True", "True"]


def test_killed_owner_leaves_no_segment(tmp_path):
    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent(
        """
        import os, signal, sys
        import numpy as np
        import modulekit as mk
        t = mk.Tensor(np.ones(1000, np.float32)).share_memory_()
        from modulekit import _shared
        print(_shared.handle_of(t.numpy())[0], flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    ))
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == -signal.SIGKILL
    name = proc.stdout.strip()
    assert name.startswith("mk_")
    for _ in range(100):  # the resource tracker notices the owner's death and unlinks
        if name not in _segments():
            break
        time.sleep(0.1)
    assert name not in _segments()


CONV_CASES = [
    dict(weight=(8, 3, 3, 3), bias=True, stride=1, padding=1, groups=1, storage="float32"),
    dict(weight=(8, 1, 3, 3), bias=True, stride=2, padding=1, groups=8, storage="float32"),
    dict(weight=(6, 2, 1, 1), bias=False, stride=1, padding=0, groups=2, storage="float16"),
    dict(weight=(4, 3, 3, 3), bias=True, stride=1, padding=(1, 0), groups=1, storage="float64"),
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_packed_conv2d_shared_and_pickled(case):
    from modulekit._ext._conv import pack_conv2d

    rng = np.random.default_rng(2)
    w = rng.standard_normal(case["weight"])
    b = rng.standard_normal(case["weight"][0]) if case["bias"] else None
    packed = pack_conv2d(w, b, case["stride"], case["padding"], 1, case["groups"],
                         case["storage"])
    cin = case["weight"][1] * case["groups"]
    x = rng.standard_normal((2, cin, 9, 9)).astype(
        np.float64 if case["storage"] == "float64" else np.float32)
    ref = packed.forward(x)
    shared = packed.shared_copy()
    assert shared.is_shared and not packed.is_shared and shared.shared_copy() is shared
    copies = [shared, pickle.loads(pickle.dumps(shared)), pickle.loads(pickle.dumps(packed))]
    assert [c.is_shared for c in copies] == [True, True, False]
    assert len(pickle.dumps(shared)) < 2000
    for c in copies:
        np.testing.assert_array_equal(c.forward(x), ref)


def test_cnn_share_memory_and_pickle():
    mk.nn.manual_seed(1)
    nn = mk.nn
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Conv2d(8, 4, 1), nn.Flatten(),
        nn.Linear(4 * 36, 5),
    ).eval()
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32)
    ref = model.initialize()(x)  # (Conv+BN folded, as share_memory() leaves it)
    model.share_memory()
    kernels = _packed_kernels(model)
    assert len(kernels) == 4 and all(k.is_shared for k in kernels)
    assert all(t.is_shared() for t in model.state_dict().values())  # BatchNorm's buffers
    np.testing.assert_array_equal(model(x), ref)
    twin = pickle.loads(pickle.dumps(model))
    assert all(k.is_shared for k in _packed_kernels(twin))
    np.testing.assert_array_equal(twin(x), ref)


def test_hostile_conv_handles_are_refused():
    from modulekit._ext._conv import _attach_conv2d, pack_conv2d

    owner = pack_conv2d(np.ones((4, 3, 3, 3), np.float32), np.ones(4, np.float32)).shared_copy()
    fn, args = owner.__reduce__()
    assert fn is _attach_conv2d
    bad = [
        ((4096, 4096) + args[2:], ValueError, "cannot hold"),
        (args[:1] + (64,) + args[2:], ValueError, "does not hold"),
        (args[:2] + (0,) + args[3:], ValueError, "groups"),
        (args[:7] + ("int8",) + args[8:], ValueError, "storage"),
        (args[:11] + (args[10],), ValueError, "bias handle where none"),
        (args[:9] + ("fast",) + args[10:], ValueError, "algorithm"),
        (args[:10] + (("mk_" + "1" * 24, 4096, 0, 64), None), FileNotFoundError, "exist"),
    ]
    for a, exc, match in bad:
        with pytest.raises(exc, match=match):
            pickle.loads(pickle.dumps(_Reduce(fn, a)))
    assert pickle.loads(pickle.dumps(owner)).is_shared


def test_bench_script_measures_the_saving(tmp_path):
    script = os.path.join(os.path.dirname(os.path.dirname(__file__)), "bench", "share_memory.py")
    if not os.path.exists(script) or not os.path.exists("/proc/self/smaps_rollup"):
        pytest.skip("needs the repository's bench/ and Linux /proc")
    out = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    proc = subprocess.run(
        [sys.executable, script, "--quick", "--workers", "1", "--modes", "shared,private",
         "--json", str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    shared, private = json.loads(out.read_text())
    weights = shared["weight_bytes"]
    assert shared["payload_bytes"] < 100_000 < weights < private["payload_bytes"] + 1
    # a worker of the shared model holds about one copy of the weights less
    uss_s, uss_p = shared["steps"][0]["worker_uss"], private["steps"][0]["worker_uss"]
    assert uss_s < uss_p - weights // 2


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_cnn_models_shared_and_pickled_bit_identical(name):
    from modulekit import models

    model = getattr(models, name)().eval().initialize()
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    ref = model(x)
    model.share_memory()
    np.testing.assert_array_equal(model(x), ref)
    data = pickle.dumps(model)
    assert len(data) < 200_000  # handles; the weights are megabytes
    twin = pickle.loads(data)
    assert all(k.is_shared for k in _packed_kernels(twin))
    np.testing.assert_array_equal(twin(x), ref)
