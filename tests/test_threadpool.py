"""modulekit's thread pool (kernels/threadpool/threadpool.h): every item runs exactly once,
whatever the thread count, item count, concurrent callers or a fork in between."""

import multiprocessing
import threading

import numpy as np
import pytest

from modulekit._ext import _gemm, _threadpool


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000, 100_000])
def test_every_item_runs_once(threads, n):
    counts = _threadpool._selftest(n, threads)
    assert counts.shape == (n,) and (counts == 1).all()


def test_slow_items_and_more_threads_than_cores():
    counts = _threadpool._selftest(64, 16, item_seconds=20e-6)
    assert (counts == 1).all()
    assert _threadpool.workers() >= 1


def test_concurrent_callers_each_get_all_their_items():
    # one caller runs on the pool, the others run theirs serially meanwhile: no item lost
    bad = []

    def caller():
        for n in (1, 5, 333, 4096) * 30:
            counts = _threadpool._selftest(n, 2)
            if not (counts == 1).all():
                bad.append(n)

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def _child(queue):
    queue.put(bool((_threadpool._selftest(2000, 2) == 1).all()))


def test_fork_child_starts_its_own_workers():
    _threadpool._selftest(1000, 2)  # the parent's workers exist
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue,))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0 and queue.get(timeout=1)


def test_bad_arguments():
    with pytest.raises(ValueError):
        _threadpool._selftest(-1, 2)
    with pytest.raises(ValueError):
        _threadpool._selftest(10, 0)
    with pytest.raises(ValueError):
        _threadpool._selftest(_threadpool.MAX_ITEMS + 1, 2)


def test_gemm_on_the_pool_is_bit_identical_to_one_thread(rng):
    import modulekit as mk

    for k, n, m in ((1024, 1024, 300), (512, 700, 3), (96, 2000, 64)):
        packed = _gemm.pack_linear(rng.standard_normal((n, k)).astype(np.float32),
                                   rng.standard_normal(n).astype(np.float32))
        x = rng.standard_normal((m, k)).astype(np.float32)
        old = mk.get_num_threads()
        try:
            mk.set_num_threads(1)
            one = packed.forward(x, "relu")
            mk.set_num_threads(2)
            two = packed.forward(x, "relu")
        finally:
            mk.set_num_threads(old)
        np.testing.assert_array_equal(one, two)
