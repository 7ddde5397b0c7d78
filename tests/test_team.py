"""The contention back-off every parallel region takes part in (kernels/common/team.h).

A region whose calling thread waited for its team longer than it worked is a strike; two in
a row make every kernel family's regions run on the calling thread for a while. One state
for the process: each extension binds its copy of kernels/common to _openmp_helpers' state.
On Linux the regions also keep their workers off the calling thread's CPU.
"""

import importlib
import os
import sys

import numpy as np
import pytest

import modulekit
from modulekit import nn
from modulekit._ext import _openmp_helpers as omp
from modulekit.nn import functional as F

pytestmark = pytest.mark.skipif(not omp.openmp_enabled(), reason="built without OpenMP")

RNG = np.random.default_rng(7)
EXTENSIONS = ("_cast", "_conv", "_gemm", "_norm", "_ops", "_qgemm", "_resample", "_rnn")


@pytest.fixture
def two_threads():
    """Two threads and a clean back-off state; both restored afterwards."""
    omp.set_num_threads(2)
    omp._reset_backoff()
    yield
    omp._reset_backoff()
    omp.reset_num_threads()


def _back_off():
    omp._record_parallel_call(5_000, 900_000)
    omp._record_parallel_call(5_000, 900_000)
    assert omp._backing_off()


def test_strikes():
    """Two strikes in a row back off; a clean region resets the count; short waits never
    count."""
    omp._reset_backoff()
    try:
        omp._record_parallel_call(5_000, 1_000)  # clean
        omp._record_parallel_call(5_000, 900_000)  # one strike: not yet
        assert not omp._backing_off()
        omp._record_parallel_call(5_000, 5_000)  # a clean region resets the strikes
        omp._record_parallel_call(5_000, 900_000)
        assert not omp._backing_off()
        omp._record_parallel_call(5_000, 900_000)  # two in a row: back off
        assert omp._backing_off()
        omp._reset_backoff()
        omp._record_parallel_call(1_000, 15_000)  # waits under 20 us never count
        omp._record_parallel_call(1_000, 15_000)
        assert not omp._backing_off()
    finally:
        omp._reset_backoff()


@pytest.mark.parametrize("name", EXTENSIONS)
def test_one_state_for_the_process(name):
    """Every extension's kernels use _openmp_helpers' state, so a strike seen by one kernel
    family sends all of them to one thread."""
    mod = importlib.import_module(f"modulekit._ext.{name}")
    assert mod._TEAM == omp._team_address()


def _linear_int8():
    from modulekit import quantization

    model = nn.Sequential(nn.Linear(512, 512)).eval()
    q = quantization.quantize_dynamic(model, dtype=modulekit.int8)
    x = RNG.standard_normal((256, 512)).astype(np.float32)
    return lambda: q(x)


def _cast():
    from modulekit._ext import _cast

    x = RNG.standard_normal(1 << 22).astype(np.float32)
    out = np.empty(x.shape, np.float16)  # (a new array's cast stays on one thread)

    def run():
        _cast.cast_into(x, out)
        return out.copy()

    return run


def _call(f, *shapes, **kwargs):
    """f on random float32 arrays of these shapes (and the keyword arguments)."""
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    return lambda: f(*arrays, **kwargs)


def _attention():
    from modulekit._ext import _ops

    q = RNG.standard_normal((4, 128, 384)).astype(np.float32)
    return lambda: _ops.attention(q, q, q, 12)[0]


FAMILIES = {
    "gemm": lambda: _call(F.linear, (256, 512), (512, 512)),
    "matmul": lambda: _call(modulekit.matmul, (300, 400), (400, 500)),
    "conv igemm": lambda: _call(F.conv2d, (2, 16, 64, 64), (32, 16, 3, 3), stride=2),
    "conv winograd": lambda: _call(F.conv2d, (1, 64, 56, 56), (64, 64, 3, 3), padding=1),
    "conv 1x1": lambda: _call(F.conv2d, (1, 256, 56, 56), (64, 256, 1, 1)),
    "depthwise": lambda: _call(F.conv2d, (1, 64, 56, 56), (64, 1, 3, 3), padding=1,
                               groups=64),
    "max pool": lambda: _call(F.max_pool2d, (2, 64, 112, 112), kernel_size=3, stride=2,
                              padding=1),
    "attention": _attention,
    "layer norm": lambda: _call(F.layer_norm, (64, 128, 384), normalized_shape=(384,)),
    "group norm": lambda: _call(F.group_norm, (8, 64, 56, 56), num_groups=8),
    "bilinear": lambda: _call(F.interpolate, (2, 8, 128, 128), scale_factor=2,
                              mode="bilinear"),
    "bicubic": lambda: _call(F.interpolate, (2, 8, 64, 64), scale_factor=2, mode="bicubic"),
    "int8 linear": _linear_int8,
    "cast": _cast,
}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_takes_part(two_threads, family):
    """A threaded call of each kernel family records its regions in the process's state;
    while backing off it runs them on the calling thread (nothing recorded) with the same
    result."""
    fn = FAMILIES[family]()
    before = omp._team_regions()
    want = fn()
    assert omp._team_regions() > before, f"{family}: no parallel region recorded"
    omp._reset_backoff()
    _back_off()
    before = omp._team_regions()
    got = fn()
    assert omp._team_regions() == before, f"{family}: a region ran parallel while backing off"
    np.testing.assert_array_equal(got, want)


def test_linear_chain_while_backing_off(two_threads):
    """A layer chain (one region, a barrier per layer) computes the same on the calling
    thread."""
    model = nn.Sequential(nn.Linear(300, 300), nn.ReLU(), nn.Linear(300, 9)).eval()
    model.initialize()
    x = RNG.standard_normal((2, 300)).astype(np.float32)
    want = model(x)
    _back_off()
    np.testing.assert_array_equal(model(x), want)


def _thread_cpus(tid):
    """The CPUs thread ``tid`` of this process may run on (Linux)."""
    with open(f"/proc/self/task/{tid}/status") as f:
        line = next(ln for ln in f if ln.startswith("Cpus_allowed_list:"))
    cpus = set()
    for part in line.split(":", 1)[1].strip().split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _narrowed(mine):
    """This process's threads whose CPU set is ``mine`` less one CPU."""
    return [tid for tid in os.listdir("/proc/self/task")
            if _thread_cpus(tid) < mine and len(_thread_cpus(tid)) == len(mine) - 1]


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(os, "sched_getaffinity")
                    or len(os.sched_getaffinity(0)) < 2 or os.environ.get("OMP_PROC_BIND"),
                    reason="worker placement: Linux, 2 or more CPUs, OpenMP not binding")
def test_workers_keep_off_the_calling_threads_cpu(two_threads):
    """After a region the worker's CPU set is the process's CPUs but one (the calling thread's
    when the region started); the calling thread's own set is left alone; the results are
    those of the other kernels' tests."""
    mine = os.sched_getaffinity(0)
    x = RNG.standard_normal((1, 64, 56, 56)).astype(np.float32)
    w = RNG.standard_normal((64, 64, 3, 3)).astype(np.float32)
    want = F.conv2d(x, w, padding=1)
    for _ in range(3):  # the first region registers the worker, a later one places it
        np.testing.assert_array_equal(F.conv2d(x, w, padding=1), want)
    assert os.sched_getaffinity(0) == mine
    assert omp._team_placements() > 0
    assert _narrowed(mine), "no worker thread keeps off a CPU"
    # a team of more threads than CPUs: its workers get every CPU back (each call from a
    # clean back-off state: such a team waits for its descheduled workers, and a back-off
    # would run the calls on the calling thread alone, placing no worker)
    omp.set_num_threads(len(mine) + 1)
    for _ in range(3):
        omp._reset_backoff()
        np.testing.assert_array_equal(F.conv2d(x, w, padding=1), want)
    assert not _narrowed(mine)
    assert os.sched_getaffinity(0) == mine
