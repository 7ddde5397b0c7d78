"""The activation memory cache (modulekit/_ext/_arena.pyx, kernels/arena/arena.c)."""

import io
import os
import pickle
import subprocess
import sys
import threading

import numpy as np
import pytest

import modulekit as mk
from modulekit import memory, nn
from modulekit._ext import _arena
from modulekit.models import BertModel, mobilenet_v2, resnet18

try:
    from numpy._core.multiarray import get_handler_name
except ImportError:  # NumPy 1.x
    from numpy.core.multiarray import get_handler_name

ARENA = "modulekit_arena"
BIG = 1 << 20          # cached (>= 256 KiB)
SMALL = 1000           # NumPy's default behind the small header


@pytest.fixture(autouse=True)
def fresh_cache():
    """Each test starts enabled, with the default limit and nothing cached, and leaves it so."""
    enabled = memory.set_enabled(True)
    limit = memory.get_limit()
    idle_calls = memory.stats()["max_idle_calls"]
    memory.empty_cache()
    try:
        yield
    finally:
        memory.set_enabled(enabled)
        memory.set_limit(limit)
        _arena._set_max_idle_calls(idle_calls)
        memory.empty_cache()


class Alloc(mk.Module):
    """A module with a child (so calls are scoped) that returns ``make()``'s array."""

    def __init__(self, make):
        super().__init__()
        self.child = nn.Identity()
        self.make = make

    def forward(self, *args):
        return self.child(self.make(*args))


def addr(a):
    return a.__array_interface__["data"][0]


def test_scope_only_during_module_calls():
    inside = {}

    def make():
        inside["handler"] = get_handler_name()
        return np.empty(BIG, np.uint8)

    out = Alloc(make)()
    assert inside["handler"] == ARENA
    assert get_handler_name(out) == ARENA
    # user code outside the call, and a bare leaf call, keep NumPy's default
    assert get_handler_name() == "default_allocator"
    assert get_handler_name(np.empty(BIG, np.uint8)) == "default_allocator"
    assert get_handler_name(nn.ReLU()(np.ones(BIG // 4, np.float32))) == "default_allocator"


def test_reuse_same_block_after_free():
    m = Alloc(lambda: np.empty(3 * BIG + 123, np.uint8))
    a = m()
    p, before = addr(a), memory.stats()
    assert p % 64 == 0
    assert _arena._block_capacity(a) >= a.nbytes
    del a
    assert memory.stats()["idle_blocks"] == before["idle_blocks"] + 1
    b = m()
    after = memory.stats()
    assert addr(b) == p
    assert after["hits"] == before["hits"] + 1
    assert after["misses"] == before["misses"]


def test_size_classes_reuse_nearby_sizes_only_within_class():
    m = Alloc(lambda n: np.empty(n, np.uint8))
    a = m(BIG)
    p = addr(a)
    del a
    # 1 MiB + 1 rounds up to the next class (1.125 MiB): a different block
    b = m(BIG + 1)
    assert addr(b) != p
    c = m(BIG - 4096)   # same class as 1 MiB: the idle block
    assert addr(c) == p


def test_small_arrays_use_default_allocator_behind_header():
    live = memory.stats()["live_bytes"]  # (scratch caches of earlier tests may hold blocks)
    m = Alloc(lambda: np.arange(SMALL, dtype=np.int64))
    a = m()
    assert get_handler_name(a) == ARENA
    assert _arena._block_capacity(a) == 0
    np.testing.assert_array_equal(a, np.arange(SMALL))
    assert memory.stats()["live_bytes"] == live


def test_calloc_reuse_gives_zeros():
    dirty = Alloc(lambda: np.full(BIG // 8, 7.0))()
    p = addr(dirty)
    del dirty
    z = Alloc(lambda: np.zeros(BIG // 8))()
    assert addr(z) == p
    assert not z.any()


def test_realloc_keeps_contents():
    def grow():
        a = np.arange(100_000, dtype=np.int32)       # 400 kB: cached block
        a.resize(1_000_000, refcheck=False)          # grows past its class: new block
        return a

    a = Alloc(grow)()
    np.testing.assert_array_equal(a[:100_000], np.arange(100_000))
    assert not a[100_000:].any()
    a.resize(10, refcheck=False)                     # shrinks to a small block
    np.testing.assert_array_equal(a, np.arange(10))
    b = Alloc(lambda: np.arange(10, dtype=np.int64))()
    b.resize(200_000, refcheck=False)                # small -> large
    np.testing.assert_array_equal(b[:10], np.arange(10))
    assert _arena._block_capacity(b) >= b.nbytes


def test_arrays_outlive_scope_and_cache_release():
    kept = [Alloc(lambda i=i: np.full(BIG // 4, i, np.float32))() for i in range(5)]
    for _ in range(3):
        Alloc(lambda: np.ones(BIG // 4, np.float32))()
    memory.empty_cache()
    memory.set_enabled(False)
    memory.set_enabled(True)
    for i, a in enumerate(kept):
        assert get_handler_name(a) == ARENA
        assert (a == i).all()
    live = memory.stats()["live_bytes"]
    del kept
    s = memory.stats()
    assert s["live_bytes"] < live
    assert s["idle_blocks"] >= 1


def test_pickle_and_save_returned_arrays():
    a = Alloc(lambda: np.arange(BIG // 8, dtype=np.float64).reshape(-1, 8))()
    b = pickle.loads(pickle.dumps(a, protocol=5))
    np.testing.assert_array_equal(a, b)
    buf = io.BytesIO()
    np.save(buf, a)
    buf.seek(0)
    np.testing.assert_array_equal(np.load(buf), a)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(a[::3, 1:])), a[::3, 1:])


def test_empty_cache_releases_memory():
    m = Alloc(lambda: [np.ones(4 * BIG, np.uint8) for _ in range(4)])
    del m()[:]
    s = memory.stats()
    assert s["idle_bytes"] >= 16 * BIG and s["idle_blocks"] >= 4
    released = memory.empty_cache()
    assert released == s["idle_bytes"]
    s2 = memory.stats()
    assert s2["idle_bytes"] == 0 and s2["idle_blocks"] == 0
    assert s2["released"] >= s["released"] + 4
    assert memory.empty_cache() == 0


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_empty_cache_returns_pages_to_the_os():
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    a = Alloc(lambda: np.ones(64 * BIG, np.uint8))()
    del a
    before = rss()
    memory.empty_cache()
    assert before - rss() >= 48 * BIG


def test_limit_evicts_largest_first():
    m = Alloc(lambda: [np.ones(n, np.uint8) for n in (BIG, 8 * BIG)])
    arrays = m()
    small_p = addr(arrays[0])
    del arrays
    s = memory.stats()
    assert s["idle_bytes"] >= 9 * BIG
    memory.set_limit(2 * BIG)
    s2 = memory.stats()
    assert s2["idle_bytes"] <= 2 * BIG
    assert s2["evictions"] == s["evictions"] + 1   # only the 8 MiB block went
    assert addr(Alloc(lambda: np.empty(BIG, np.uint8))()) == small_p
    memory.set_limit(0)
    assert memory.stats()["idle_bytes"] == 0
    Alloc(lambda: np.empty(BIG, np.uint8))()
    assert memory.stats()["idle_bytes"] == 0      # nothing kept at limit 0


def test_blocks_not_reused_expire():
    """A block only one call needed is released after max_idle_calls further calls; a block
    every call reuses stays."""
    assert memory.stats()["max_idle_calls"] == 16
    _arena._set_max_idle_calls(3)
    Alloc(lambda: np.ones(6 * BIG, np.uint8))()         # needed once
    steady = Alloc(lambda: np.ones(BIG, np.uint8))
    steady()
    first = memory.stats()
    for _ in range(16):
        steady()
    s = memory.stats()
    assert s["calls"] == first["calls"] + 16
    assert s["expired"] == first["expired"] + 1
    assert s["misses"] == first["misses"]                # the steady block never went
    assert 0 < s["idle_bytes"] < 2 * BIG
    Alloc(lambda: None)()                                 # one more call: the steady
    _arena._set_max_idle_calls(0)                         # block is now idle for one call
    assert memory.stats()["idle_bytes"] == 0


def test_limit_argument_forms():
    previous = memory.set_limit("3M")
    assert memory.get_limit() == 3 << 20
    assert memory.set_limit(1 << 30) == 3 << 20
    memory.set_limit(previous)
    with pytest.raises(ValueError):
        memory.set_limit(-1)
    with pytest.raises(ValueError):
        memory.set_limit("lots")


def test_disabled():
    memory.set_enabled(False)
    assert not memory.is_enabled() and not memory.stats()["enabled"]
    inside = {}

    def make():
        inside["handler"] = get_handler_name()
        return np.ones(BIG, np.uint8)

    before = memory.stats()
    out = Alloc(make)()
    assert inside["handler"] == "default_allocator"
    assert get_handler_name(out) == "default_allocator"
    after = memory.stats()
    assert (after["hits"], after["misses"]) == (before["hits"], before["misses"])


def test_disabling_frees_blocks_in_use_on_release():
    a = Alloc(lambda: np.ones(2 * BIG, np.uint8))()
    memory.set_enabled(False)
    del a
    assert memory.stats()["idle_bytes"] == 0


def test_env_disable_and_limit():
    code = (
        "from modulekit import memory; s = memory.stats();"
        "print(memory.is_enabled(), s['limit_bytes'])"
    )
    env = dict(os.environ, MODULEKIT_ARENA="0", MODULEKIT_ARENA_LIMIT="64M")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", str(64 << 20)]


def test_exception_restores_handler():
    def boom():
        np.empty(BIG, np.uint8)
        raise KeyError("x")

    with pytest.raises(KeyError):
        Alloc(boom)()
    assert get_handler_name() == "default_allocator"


def test_hooked_leaf_is_scoped():
    lin = nn.ReLU()
    seen = []
    lin.register_forward_hook(lambda m, a, out: seen.append(get_handler_name()))
    out = lin(np.ones(BIG // 4, np.float32))
    assert seen == [ARENA] and get_handler_name(out) == ARENA


def test_per_thread_scope():
    """A thread inside a module call does not change the handler of another thread."""
    entered, release = threading.Event(), threading.Event()

    def make():
        entered.set()
        release.wait(10)
        return np.empty(BIG, np.uint8)

    t = threading.Thread(target=Alloc(make))
    t.start()
    try:
        assert entered.wait(10)
        assert get_handler_name() == "default_allocator"
        assert get_handler_name(np.empty(BIG, np.uint8)) == "default_allocator"
    finally:
        release.set()
        t.join()


def _resnet(batch=2, size=64):
    m = resnet18(num_classes=10).eval()
    x = np.random.default_rng(0).standard_normal((batch, 3, size, size)).astype(np.float32)
    return m, x


@pytest.mark.parametrize("build", ["resnet18", "mobilenet_v2", "bert"])
def test_models_identical_with_and_without_cache(build, isa):
    rng = np.random.default_rng(1)
    if build == "bert":
        # large enough that the intermediate activations (6 x 61 x 512) are cached blocks
        cfg = dict(vocab_size=50, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=512, max_position_embeddings=64)
        m = BertModel(cfg).eval()
        ids = rng.integers(0, 50, (6, 61))
        mask = np.ones((6, 61), np.int64)
        mask[1, 50:] = 0
        m.initialize(ids, attention_mask=mask)  # (compiled parts: every call below a plan)

        def run():
            o = m(ids, attention_mask=mask)
            return np.concatenate([o.last_hidden_state.ravel(), o.pooler_output.ravel()])
    else:
        m = (resnet18 if build == "resnet18" else mobilenet_v2)(num_classes=10).eval()
        # large enough that activations between the fused layers are cached blocks
        x = rng.standard_normal((3, 3, 97, 97)).astype(np.float32)

        def run():
            return m(x)

    memory.set_enabled(False)
    ref = run()
    memory.set_enabled(True)
    first = run()
    hits = memory.stats()["hits"]
    second = run()
    assert memory.stats()["hits"] > hits    # the second call reused blocks
    np.testing.assert_array_equal(first, ref)
    np.testing.assert_array_equal(second, ref)


def test_threads_calling_forward():
    m, _ = _resnet()
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((2, 3, 64, 64)).astype(np.float32) for _ in range(4)]
    memory.set_enabled(False)
    refs = [m(x) for x in xs]
    memory.set_enabled(True)
    errors, outs = [], [[] for _ in xs]

    def work(i):
        try:
            for _ in range(6):
                outs[i].append(m(xs[i]))
                if len(outs[i]) > 2:
                    outs[i].pop(0)      # freed here, while other threads allocate
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, ref in enumerate(refs):
        for out in outs[i]:
            np.testing.assert_array_equal(out, ref)
    s = memory.stats()
    assert s["hits"] > 0
    # freed from another thread than the one that allocated it
    box = []
    t = threading.Thread(target=lambda: box.append(Alloc(lambda: np.ones(BIG, np.uint8))()))
    t.start()
    t.join()
    idle = memory.stats()["idle_blocks"]
    box.clear()
    assert memory.stats()["idle_blocks"] == idle + 1


def test_repeated_resnet_forward_maps_nothing_new():
    """The point of the cache: a repeated forward maps no new memory."""
    m, x = _resnet(batch=4, size=96)
    m(x)
    m(x)
    before = memory.stats()
    m(x)
    after = memory.stats()
    assert after["misses"] == before["misses"]
    assert after["hits"] > before["hits"]


def _child_forward(q):
    q.put(float(Alloc(lambda: np.ones(BIG, np.float32))().sum()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_uses_cache():
    import multiprocessing as mp

    kept = Alloc(lambda: np.ones(BIG, np.float32))()   # a block in use across the fork
    Alloc(lambda: np.ones(2 * BIG, np.uint8))()         # and an idle one
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_forward, args=(q,))
    p.start()
    try:
        assert q.get(timeout=60) == BIG
    finally:
        p.join(60)
    assert p.exitcode == 0
    assert kept.sum() == BIG
