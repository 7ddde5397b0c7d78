"""All or nothing: ``to()``, ``initialize()`` and ``load_state_dict()`` that fail part-way (out of
memory, for real under an address-space cap, or injected at every allocation step in turn)
leave every tensor, every packed kernel object and the model's answers as they were."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import modulekit as mk
import modulekit.module as module_py
from modulekit import nn
from modulekit._ext import _guard
from modulekit.nn._random import manual_seed
from modulekit.nn.modules import _packed, attention, container


class Net(nn.Module):
    """Every kind of state: packed layers (Linear, Conv2d, attention), norms with buffers, an
    embedding, a weight tied under two names, a fused Linear chain."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.conv = nn.Conv2d(2, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU())
        self.ln = nn.LayerNorm(8)
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.emb.weight  # tied

    def forward(self, ids, img):
        x = self.emb(ids)  # (B, L, 8)
        c = self.bn(self.conv(img)).mean(axis=(2, 3))  # (B, 8)
        x = x + c[:, None, :]
        x = x + self.attn(x, x, x, need_weights=False)[0]
        x = self.ln(x + self.mlp(x))
        return self.head(x)


IDS = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
IMG = np.random.default_rng(0).standard_normal((2, 2, 5, 5)).astype(np.float32)


def build(packed: bool, dtype=mk.float32):
    manual_seed(0)
    net = Net().eval()
    rng = np.random.default_rng(1)
    net.bn.running_mean.copy_(rng.standard_normal(8))
    net.bn.running_var.copy_(rng.uniform(0.5, 2.0, 8))
    net.to(dtype)
    if packed:
        net.initialize()
    return net


def fingerprint(net):
    """Every module's tensors (identity, dtype, bytes) and packed objects (identity)."""
    out = []
    for name, m in net.named_modules():
        for reg in ("_parameters", "_buffers"):
            for k, t in m.__dict__[reg].items():
                if t is not None:
                    out.append((name, k, id(t), t.dtype.name, t.numpy().tobytes()))
        for k in ("_packed", "_fused", "_fused_plan", "_bias_dtype"):
            if k in m.__dict__:
                out.append((name, k, id(m.__dict__[k])))
        out.append((name, tuple(sorted(m.__dict__["_parameters"])), str(m._packed_keys())))
    return out


class FailAt:
    """Make the k-th call of any of the patched functions raise MemoryError (k = None:
    only count)."""

    def __init__(self, k):
        self.k, self.n = k, 0

    def wrap(self, fn):
        def wrapper(*args, **kwargs):
            i, self.n = self.n, self.n + 1
            if i == self.k:
                raise MemoryError(f"injected at step {i}")
            return fn(*args, **kwargs)

        return wrapper


def _patch_to(monkeypatch, fail):
    """The steps of to(): each tensor's cast allocation and each layer's re-pack."""
    monkeypatch.setattr(module_py, "_cast_plan", fail.wrap(module_py._cast_plan))
    for cls in (_packed.PackedWeightLayer, attention.MultiheadAttention):
        monkeypatch.setattr(cls, "_repack", fail.wrap(cls._repack))


def _check_every_step(monkeypatch, make, patch, change):
    """Run ``change`` on a fresh model from ``make`` with the k-th step failing, for every k:
    it must raise and leave the model exactly as it was (state and answers)."""
    counter = FailAt(None)
    net = make()
    net(IDS, IMG)  # packs lazily
    with monkeypatch.context() as mp:
        patch(mp, counter)
        change(net)
    steps = counter.n
    assert steps >= 5
    for k in range(steps):
        net = make()
        want = net(IDS, IMG)
        before = fingerprint(net)  # after the forward (which packs lazily)
        with monkeypatch.context() as mp:
            patch(mp, FailAt(k))
            with pytest.raises(MemoryError, match=f"injected at step {k}"):
                change(net)
        assert fingerprint(net) == before, k
        np.testing.assert_array_equal(net(IDS, IMG), want)
        assert _guard.state() == (0, 0, False)
    return steps


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("src, dst", [("float32", "float64"), ("float32", "float16"),
                                      ("float64", "bfloat16")])
def test_to_failing_at_every_step_changes_nothing(monkeypatch, packed, src, dst):
    src, dst = mk.dtypes.as_dtype(src), mk.dtypes.as_dtype(dst)
    _check_every_step(monkeypatch, lambda: build(packed, src), _patch_to,
                      lambda net: net.to(dst))
    # and without a failure, everything is cast (the control)
    net = build(packed, src)
    net(IDS, IMG)
    net.to(dst)
    assert {t.dtype for t in net.parameters()} == {dst}
    for m in net.modules():
        assert all(dt == dst for _, dt in m._packed_keys().values())


def test_initialize_failing_at_every_step_changes_nothing(monkeypatch):
    def patch(mp, fail):
        for cls in (nn.Linear, nn.Conv2d):
            mp.setattr(cls, "_pack_kernel", fail.wrap(cls._pack_kernel))
        mp.setattr(attention.MultiheadAttention, "_pack_from",
                   fail.wrap(attention.MultiheadAttention._pack_from))
        mp.setattr(container, "linear_chain", fail.wrap(container.linear_chain))

    def make():
        return build(packed=False)

    counter = FailAt(None)
    with monkeypatch.context() as mp:
        patch(mp, counter)
        make().initialize()
    assert counter.n >= 5
    for k in range(counter.n):
        net = make()
        before = fingerprint(net)
        with monkeypatch.context() as mp:
            patch(mp, FailAt(k))
            with pytest.raises(MemoryError, match=f"injected at step {k}"):
                net.initialize()
        assert fingerprint(net) == before, k
        assert not any(m._packed_keys() for m in net.modules())
        np.testing.assert_array_equal(net(IDS, IMG), build(packed=False)(IDS, IMG))


@pytest.mark.parametrize("assign", [False, True])
def test_load_state_dict_failing_at_every_step_changes_nothing(monkeypatch, assign):
    from modulekit import _state_dict

    plain = build(packed=False)
    rng = np.random.default_rng(5)
    new = {k: (np.asarray(v) + rng.standard_normal(v.shape)).astype(np.asarray(v).dtype)
           for k, v in plain.state_dict().items()}

    def patch(mp, fail):
        for cls in (_packed.PackedWeightLayer, attention.MultiheadAttention):
            mp.setattr(cls, "_repack", fail.wrap(cls._repack))
        mp.setattr(_state_dict, "_assigned_tensor", fail.wrap(_state_dict._assigned_tensor))

    steps = _check_every_step(monkeypatch, lambda: build(packed=True), patch,
                              lambda net: net.load_state_dict(new, assign=assign))
    assert steps >= 4


_RLIMIT_SCRIPT = textwrap.dedent(
    """
    import copy, resource, sys
    import numpy as np
    import modulekit as mk
    import modulekit.module as module_py
    from modulekit import models, nn
    from modulekit.nn._random import manual_seed
    from modulekit.nn.modules._packed import PackedWeightLayer

    kind = sys.argv[1]


    def make():
        manual_seed(0)
        if kind == "resnet18":
            return models.resnet18(num_classes=10).eval()
        return nn.Sequential(*[m for _ in range(48) for m in (nn.Linear(256, 256), nn.ReLU())])


    if kind == "resnet18":
        x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    else:
        x = np.random.default_rng(0).standard_normal((2, 256)).astype(np.float32)
    net = make().eval()
    if kind == "mlp-packed":
        net.initialize()
    want = make().eval()(x)  # (a twin: a forward packs "mlp"'s layers, which must stay raw)

    def fingerprint():
        out = []
        for name, m in net.named_modules():
            for reg in ("_parameters", "_buffers"):
                for k, t in m.__dict__[reg].items():
                    if t is not None:
                        out.append((name, k, id(t), t.dtype.name, t.numpy().tobytes()))
            out.append((name, id(m.__dict__.get("_packed")), str(m._packed_keys())))
        return out

    before = fingerprint()
    need = sum(t.nbytes for t in net.parameters()) + sum(t.nbytes for t in net.buffers())
    for m in net.modules():
        p = m.__dict__.get("_packed")
        need += 0 if p is None else p.nbytes
    planned = [0]  # the steps of to(): a cast per tensor, a re-pack per packed layer
    plan, repack = module_py._cast_plan, PackedWeightLayer._repack

    def counting_plan(tensor, dtype):
        planned[0] += 1
        return plan(tensor, dtype)

    def counting_repack(self, values, dtype=None):
        planned[0] += 1
        return repack(self, values, dtype)

    module_py._cast_plan = counting_plan
    PackedWeightLayer._repack = counting_repack
    total = sum(1 for t in net.parameters()) + sum(1 for t in net.buffers()
                                                   if t.dtype.is_floating)
    total += sum(1 for m in net.modules() if m._packed_keys())

    def vm():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    partway = 0
    for frac in (0.2, 0.4, 0.6, 0.8, 1.0, 1.3, 1.7, 2.5, 4.0, 8.0):
        planned[0] = 0
        resource.setrlimit(resource.RLIMIT_AS, (vm() + int(frac * 2 * need), hard))
        try:
            net.to(mk.float64)
            ok = True
        except MemoryError:
            ok = False
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        if ok:
            break
        assert fingerprint() == before, frac
        # it still runs, with the same answer (on a copy: a forward packs "mlp"'s layers)
        assert np.array_equal(copy.deepcopy(net)(x), want), frac
        partway += 0 < planned[0] < total
    assert ok, "to(float64) never succeeded"
    assert planned[0] == total
    assert all(t.dtype == mk.float64 for t in net.parameters())
    assert all(dt == mk.float64 for m in net.modules() for _, dt in m._packed_keys().values())
    np.testing.assert_allclose(net(x.astype(np.float64)), want, rtol=1e-4, atol=1e-4)
    print("PARTWAY", partway)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc")
@pytest.mark.parametrize("kind", ["mlp", "mlp-packed", "resnet18"])
def test_to_out_of_memory_for_real_changes_nothing(kind):
    env = dict(os.environ, MODULEKIT_ARENA="0", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _RLIMIT_SCRIPT, kind], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    partway = int(out.stdout.split("PARTWAY")[1])
    assert partway >= 1, out.stdout  # some cap let the cast allocate part of the tree
