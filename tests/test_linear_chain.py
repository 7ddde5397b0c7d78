"""Chained Linear layers: ``_gemm.linear_chain`` (one kernel call, one OpenMP region for a
run of packed layers) and ``nn.Sequential``'s use of it after ``initialize()``.

The chain must be bit-identical to running the layers one by one (same kernels, same
partition of every layer), so most checks are exact equality against the per-layer path;
one test compares with torch."""

import copy
import pickle
import threading

import numpy as np
import pytest

import modulekit as mk
from modulekit import nn
from modulekit._ext import _gemm, _isa, _openmp_helpers
from modulekit.nn.modules.container import _LinearChain


@pytest.fixture
def threads():
    """Restore modulekit's thread count after a test changes it."""
    yield _openmp_helpers.set_num_threads
    _openmp_helpers.reset_num_threads()


def _packs(rng, widths, storage="float32"):
    cdt = np.float64 if storage == "float64" else np.float32
    return [
        _gemm.pack_linear(
            rng.standard_normal((widths[i + 1], widths[i])) / np.sqrt(widths[i]),
            rng.standard_normal(widths[i + 1]).astype(cdt),
            storage,
        )
        for i in range(len(widths) - 1)
    ]


def _per_layer(packs, acts, x):
    for p, a in zip(packs, acts):
        x = p.forward(x, *((a, 0.0, 0.0) if isinstance(a, str) else a))
    return x


# widths: 1, primes, and remainders of every register block width (8, 16, 32 columns);
# 300 x 300 float32 weights (352 KiB) are above the small-M threading threshold
WIDTHS = [(7, 1, 13), (37, 33, 65, 5), (300, 300, 97, 17), (64, 300, 300, 3)]
ACTS = ["relu", ("clamp", -0.25, 0.5), "gelu", "none"]


@pytest.mark.parametrize("storage", ["float32", "float64", "float16", "bfloat16"])
def test_chain_bit_identical(isa, storage, threads):
    rng = np.random.default_rng(1)
    cdt = np.float64 if storage == "float64" else np.float32
    for widths in WIDTHS:
        packs = _packs(rng, widths, storage)
        acts = (ACTS * 2)[: len(packs)]
        chain = _gemm.linear_chain(packs, acts)
        assert chain.in_features == widths[0] and chain.out_features == widths[-1]
        for m in (1, 2, 5, 8, 9, 37):
            x = rng.standard_normal((m, widths[0])).astype(cdt)
            for nt in (1, 2):
                threads(nt)
                want = _per_layer(packs, acts, x)
                got = chain(x)
                assert got.dtype == cdt and got.shape == (m, widths[-1])
                assert got.flags.c_contiguous
                np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not _openmp_helpers.openmp_enabled(), reason="built without OpenMP")
def test_chain_threads(threads):
    rng = np.random.default_rng(2)
    packs = _packs(rng, (300, 300, 7))
    chain = _gemm.linear_chain(packs, ["relu", "none"])
    threads(2)
    # the 300 x 300 layer splits (360 KB of weights) where a small-M kernel serves one row;
    # the portable path (MODULEKIT_ISA=generic) splits by multiply-adds and stays serial
    split = 1 if _isa.get_isa() == "generic" else 2
    assert _gemm._chain_planned_threads(chain, 1) == split
    threads(1)
    assert _gemm._chain_planned_threads(chain, 1) == 1
    small = _gemm.linear_chain(_packs(rng, (8, 8, 8)))
    threads(2)
    assert _gemm._chain_planned_threads(small, 1) == 1  # tiny chains stay serial
    x = rng.standard_normal((3, 300)).astype(np.float32)
    ref = chain(x)
    threads(1)
    np.testing.assert_array_equal(chain(x), ref)


def test_chain_inputs(isa):
    rng = np.random.default_rng(3)
    packs = _packs(rng, (33, 17, 9))
    chain = _gemm.linear_chain(packs, ["silu", "none"])
    base = rng.standard_normal((6, 33)).astype(np.float32)
    want = _per_layer(packs, ["silu", "none"], base)
    for x in (np.asfortranarray(base), base[::-1][::-1], base.astype(np.float64),
              base.astype(np.float16).astype(np.float32), base.tolist()):
        np.testing.assert_array_equal(chain(x), _per_layer(packs, ["silu", "none"], x))
    np.testing.assert_array_equal(chain(base), want)
    wide = np.zeros((6, 66), np.float32)
    wide[:, ::2] = base
    np.testing.assert_array_equal(chain(wide[:, ::2]), want)  # column stride 2
    assert chain(np.zeros((0, 33), np.float32)).shape == (0, 9)
    with pytest.raises(ValueError, match="33"):
        chain(np.zeros((2, 32), np.float32))
    with pytest.raises(ValueError, match="2-D"):
        chain(np.zeros(33, np.float32))
    with pytest.raises(TypeError):
        chain(np.zeros((2, 33), np.complex64))


def test_chain_validation():
    rng = np.random.default_rng(4)
    a, b = _packs(rng, (5, 6, 7))
    with pytest.raises(ValueError, match="in_features"):
        _gemm.linear_chain([b, a])
    with pytest.raises(ValueError, match="at least one"):
        _gemm.linear_chain([])
    with pytest.raises(ValueError, match="activations"):
        _gemm.linear_chain([a, b], ["relu"])
    with pytest.raises(ValueError, match="unknown activation"):
        _gemm.linear_chain([a, b], ["relu", "nope"])
    (c,) = _packs(rng, (6, 7), "float64")
    with pytest.raises(ValueError, match="computes in"):
        _gemm.linear_chain([a, c])
    with pytest.raises(TypeError, match="PackedLinear"):
        _gemm.linear_chain([a, "b"])
    with pytest.raises(TypeError, match="linear_chain"):
        _gemm.PackedChain()
    assert "5->6 relu" in repr(_gemm.linear_chain([a, b], ["relu", "none"]))


def test_chain_concurrent_calls():
    rng = np.random.default_rng(5)
    packs = _packs(rng, (40, 64, 64, 10))
    chain = _gemm.linear_chain(packs, ["relu", "relu", "none"])
    xs = [rng.standard_normal((m, 40)).astype(np.float32) for m in (1, 3, 20, 50)]
    want = [_per_layer(packs, ["relu", "relu", "none"], x) for x in xs]
    errors = []

    def work(i):
        try:
            for _ in range(200):
                np.testing.assert_array_equal(chain(xs[i]), want[i])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []


# ------------------------------------------------------------------ nn.Sequential


def _mlp(*widths, act=nn.ReLU):
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(act())
    return nn.Sequential(*layers)


def _unfused(model, x):
    for m in model:
        x = m(x)
    return x


def _chained(model):
    plan = model._fused_plan
    return plan is not None and any(type(s) is _LinearChain for s in plan[1])


@pytest.mark.parametrize("nt", [1, 2])
def test_sequential_chain_matches_unfused(isa, nt, threads):
    threads(nt)
    rng = np.random.default_rng(6)
    model = _mlp(300, 300, 31, 7).initialize()
    assert _chained(model) and model._fused_plan[2] is not None
    for m in (1, 4, 9, 40):
        x = rng.standard_normal((m, 300)).astype(np.float32)
        np.testing.assert_array_equal(model(x), _unfused(model, x))


def test_sequential_chain_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    model = _mlp(784, 256, 256, 10)
    ref = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 10))
    ref.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in
                         model.state_dict().items()})
    model.initialize()
    assert _chained(model)
    for m in (1, 3, 64):
        x = rng.standard_normal((m, 784)).astype(np.float32)
        with torch.no_grad():
            want = ref(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-5)


def test_sequential_chain_falls_back_for_hooks():
    rng = np.random.default_rng(8)
    model = _mlp(20, 30, 30, 5).initialize()
    x = rng.standard_normal((2, 20)).astype(np.float32)
    want = model(x)
    seen = []
    h = model[2].register_forward_hook(lambda mod, args, out: seen.append(out.copy()))
    np.testing.assert_array_equal(model(x), want)
    assert len(seen) == 1 and seen[0].shape == (2, 30)
    h.remove()
    h = model.register_forward_pre_hook(lambda mod, args: (args[0] * 0,))
    np.testing.assert_array_equal(model(x), _unfused(model, x * 0))
    h.remove()
    h = model[1].register_forward_hook(lambda mod, args, out: out * 2)  # doubles the ReLU
    doubled = model(x)
    h.remove()
    np.testing.assert_array_equal(doubled, _unfused_with(model, x, 1, 2.0))
    np.testing.assert_array_equal(model(x), want)  # chained again once the hooks are gone


def _unfused_with(model, x, index, factor):
    for i, m in enumerate(model):
        x = m(x)
        if i == index:
            x = x * factor
    return x


def test_sequential_chain_follows_reloads_and_dtype(isa):
    rng = np.random.default_rng(9)
    model = _mlp(12, 16, 16, 3).initialize()
    x = rng.standard_normal((3, 12)).astype(np.float32)
    model(x)
    state = {k: rng.standard_normal(v.shape) for k, v in _mlp(12, 16, 16, 3).state_dict().items()}
    model.load_state_dict(state)
    fresh = _mlp(12, 16, 16, 3)
    fresh.load_state_dict(state)
    np.testing.assert_array_equal(model(x), _unfused(fresh, x))
    np.testing.assert_array_equal(model(x), _unfused(model, x))
    model.to(mk.float64)
    y64 = model(x.astype(np.float64))
    assert y64.dtype == np.float64
    np.testing.assert_array_equal(y64, _unfused(model, x.astype(np.float64)))
    np.testing.assert_array_equal(model(x), _unfused(model, x))  # float32 input, float64 model
    model.to(mk.bfloat16)
    y = model(x)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, _unfused(model, x))


def test_sequential_chain_other_inputs():
    rng = np.random.default_rng(10)
    model = _mlp(6, 8, 8, 4).initialize()
    x = rng.standard_normal((2, 3, 6)).astype(np.float32)
    np.testing.assert_array_equal(model(x), _unfused(model, x))  # N-D: per layer
    np.testing.assert_array_equal(model(x[0, 0]), _unfused(model, x[0, 0]))  # 1-D
    xi = np.arange(12).reshape(2, 6)
    np.testing.assert_array_equal(model(xi), _unfused(model, xi))  # integers
    np.testing.assert_array_equal(model(x[0].tolist()), _unfused(model, x[0].tolist()))
    with pytest.raises(ValueError, match="in_features=6"):
        model(np.zeros((2, 5), np.float32))


def test_sequential_chain_activation_changes():
    rng = np.random.default_rng(11)
    model = nn.Sequential(nn.Linear(9, 9), nn.GELU(), nn.Linear(9, 4)).initialize()
    x = rng.standard_normal((3, 9)).astype(np.float32)
    assert _chained(model)
    exact = model(x)
    model[1].approximate = "tanh"
    tanh = model(x)
    np.testing.assert_array_equal(tanh, _unfused(model, x))
    assert not np.array_equal(tanh, exact)
    model[1] = nn.Sigmoid()
    np.testing.assert_array_equal(model(x), _unfused(model, x))  # children changed


def test_sequential_chain_pickle_and_copy():
    rng = np.random.default_rng(12)
    model = _mlp(10, 20, 20, 3).initialize()
    x = rng.standard_normal((2, 10)).astype(np.float32)
    want = model(x)
    for clone in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        np.testing.assert_array_equal(clone(x), want)
        np.testing.assert_array_equal(clone(x), want)  # the chain rebuilt from the new packs
        assert clone._fused_plan[2].chain is not None
    np.testing.assert_array_equal(model(x), want)


def test_sequential_partial_chains():
    rng = np.random.default_rng(13)
    model = nn.Sequential(nn.Linear(8, 8), nn.Softmax(dim=-1), nn.Linear(8, 8), nn.ReLU(),
                          nn.Linear(8, 8), nn.Linear(8, 2), nn.Dropout())
    model.eval().initialize()
    steps = model._fused_plan[1]
    assert [type(s) is _LinearChain for s in steps] == [False, False, True, False]
    assert model._fused_plan[2] is None  # not the whole forward
    x = rng.standard_normal((5, 8)).astype(np.float32)
    np.testing.assert_array_equal(model(x), _unfused(model, x))

    class Scaled(nn.Sequential):
        def forward(self, input):
            return super().forward(input) * 2

    scaled = Scaled(nn.Linear(8, 8), nn.Linear(8, 2)).initialize()
    assert scaled._fused_plan[2] is None
    np.testing.assert_array_equal(scaled(x), _unfused(scaled, x) * 2)


def test_sequential_instance_forward_respected():
    model = _mlp(6, 8, 3).initialize()
    x = np.ones((2, 6), np.float32)
    want = model(x)
    model.forward = lambda input: np.zeros((len(input), 3), np.float32)
    np.testing.assert_array_equal(model(x), np.zeros((2, 3)))
    del model.forward
    np.testing.assert_array_equal(model(x), want)
