"""modulekit.dask: batch inference on a LocalCluster(n_workers=2, processes=True).

The model is scattered once per worker (counted by a class-level counter in ``__setstate__``,
read on each worker with ``client.run``), also across a pass of the Active Memory Manager, and
the results equal the local ones exactly. ``scatter(n_threads=...)`` on a cluster whose workers
share the caller's process leaves the caller's thread setting as it found it.

Only the DataFrame tests need ``dask.dataframe`` (pandas and pyarrow, in the test extra): they
alone are skipped without it.
"""

import os

import numpy as np
import pytest

import modulekit as mk
from modulekit._ext import _openmp_helpers
from modulekit.nn import _random
from modulekit.sklearn import ModuleClassifier, ModuleTransformer

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
import modulekit.dask as mkd  # noqa: E402  (after the skip: it needs dask.array)

try:
    import dask.dataframe as dd
    import pandas as pd
except ImportError:  # dask.dataframe needs pyarrow
    dd = pd = None
needs_dataframe = pytest.mark.skipif(
    dd is None, reason="dask.dataframe cannot be imported (it needs pandas and pyarrow)"
)

BATCH = 16


@pytest.fixture(scope="module", autouse=True)
def _restore_layer_rng():
    """These tests reseed modulekit's initialisation generator: give the next module the
    generator they found."""
    saved = _random.default_generator()
    yield
    _random._generator = saved


class CountingMLP(mk.nn.Sequential):
    """An MLP that counts how often this process unpickled one."""

    loads = 0

    def __setstate__(self, state):
        type(self).loads += 1
        super().__setstate__(state)


def loads_here():
    return CountingMLP.loads


def make_model():
    mk.nn.manual_seed(3)
    return CountingMLP(mk.nn.Linear(6, 16), mk.nn.ReLU(), mk.nn.Linear(16, 3)).eval()


@pytest.fixture(scope="module")
def X():
    return np.random.default_rng(0).normal(size=(6 * BATCH, 6)).astype(np.float32)


@pytest.fixture(scope="module")
def estimator(X):
    return ModuleClassifier(make_model(), classes=["a", "b", "c"], batch_size=BATCH).fit(X)


def test_local_scheduler_without_a_client(X, estimator):
    # runs before the cluster fixture exists: no client, the model is embedded in the graph
    assert mkd._default_client() is None
    dX = da.from_array(X, chunks=(2 * BATCH, 6))
    got = mkd.predict(estimator, dX, method="predict_proba").compute(scheduler="threads")
    np.testing.assert_array_equal(got, estimator.predict_proba(X))


@pytest.fixture(scope="module")
def client():
    # the workers import this file's models (tests/) and the modulekit this process imported
    here = os.path.dirname(os.path.abspath(__file__))
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(mk.__file__)))
    env = {"PYTHONPATH": os.pathsep.join([here, package_root])}
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            env=env,
        ) as cluster,
        distributed.Client(cluster, timeout=30) as client,
    ):
        yield client


def test_array_results_equal_local_and_model_loads_once_per_worker(client, X, estimator):
    before = client.run(loads_here)
    handle = mkd.scatter(estimator, client)
    # blocks are whole batches, so every block runs the same products as the local call
    dX = da.from_array(X, chunks=(BATCH, 6))
    proba = mkd.predict(handle, dX, method="predict_proba")
    assert proba.chunks == (dX.chunks[0], (3,))
    np.testing.assert_array_equal(proba.compute(), estimator.predict_proba(X))
    # the Active Memory Manager drops replicas of Dask data nobody waits on (every 2 s): the
    # workers' copies must survive a pass of it between computations
    client.amm.run_once()
    labels = mkd.predict(handle, dX).compute()
    np.testing.assert_array_equal(labels, estimator.predict(X))

    # 6 + 6 tasks, two workers: each unpickled the model exactly once
    after = client.run(loads_here)
    assert sorted(after[w] - before[w] for w in after) == [1, 1], (before, after)

    handle.release()
    handle.release()  # idempotent
    assert set(client.run(has_plugin, handle.name).values()) == {False}
    with pytest.raises(ValueError, match="was released"):
        mkd.predict(handle, dX)


@needs_dataframe
def test_dataframe_results_equal_local_and_model_loads_once_per_worker(client, X, estimator):
    before = client.run(loads_here)
    handle = mkd.scatter(estimator, client)
    frame = pd.DataFrame(X, index=pd.RangeIndex(1000, 1000 + len(X)))
    ddf = dd.from_pandas(frame, npartitions=3)
    out = mkd.predict(handle, ddf, method="predict_proba").compute()
    assert list(out.columns) == ["a", "b", "c"]
    assert out.index.equals(frame.index)
    np.testing.assert_array_equal(out.to_numpy(), estimator.predict_proba(X))
    series = mkd.predict(handle, ddf, name="label").compute()
    assert series.name == "label" and series.index.equals(frame.index)
    np.testing.assert_array_equal(series.to_numpy(), estimator.predict(X))

    # 3 + 3 tasks, two workers: each unpickled the model exactly once
    after = client.run(loads_here)
    assert sorted(after[w] - before[w] for w in after) == [1, 1], (before, after)
    handle.release()
    assert set(client.run(has_plugin, handle.name).values()) == {False}


def has_plugin(name, dask_worker):
    return name in dask_worker.plugins


def test_released_model_is_a_clear_task_error(client, X, estimator):
    handle = mkd.scatter(estimator, client)
    proba = mkd.predict(handle, da.from_array(X, chunks=(BATCH, 6)), method="predict_proba")
    handle.release()
    with pytest.raises(RuntimeError, match="was released"):
        proba.compute()
    with mkd.scatter(estimator, client) as handle:
        assert set(client.run(has_plugin, handle.name).values()) == {True}
    assert handle.released
    assert set(client.run(has_plugin, handle.name).values()) == {False}


def test_module(client, X):
    model = make_model()
    dX = da.from_array(X, chunks=(BATCH, 6))
    got = mkd.predict(mkd.scatter(model, client), dX, method=None).compute()
    np.testing.assert_array_equal(got, model(X))


@needs_dataframe
def test_transformer_with_pandas_output(client, X):
    model = make_model()
    tr = ModuleTransformer(model, batch_size=BATCH).set_output(transform="pandas")
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(6)])
    tr.fit(frame)
    ddf = dd.from_pandas(frame, npartitions=2)
    out = mkd.predict(tr, ddf, method="transform").compute()  # scattered by predict itself
    pd.testing.assert_frame_equal(out, tr.transform(frame))


def test_workers_honour_thread_limits(client, X, estimator):
    # Dask's nanny starts workers with OMP_NUM_THREADS=1: modulekit follows it
    assert set(client.run(mk.get_num_threads).values()) == {1}
    with mkd.scatter(estimator, client, n_threads=2):
        assert set(client.run(mk.get_num_threads).values()) == {2}
    # released: each worker is back to its own setting (unset: OMP_NUM_THREADS=1)
    assert set(client.run(_openmp_helpers.user_threads).values()) == {0}
    assert set(client.run(mk.get_num_threads).values()) == {1}


def _task_threads(block):
    return np.full((block.shape[0],), mk.get_num_threads())


@pytest.mark.skipif(not mk.threads.openmp_enabled(), reason="built without OpenMP")
@pytest.mark.parametrize("own", [0, 1], ids=["caller-unset", "caller-set-to-1"])
def test_scatter_n_threads_in_process_leaves_the_callers_setting(X, estimator, own):
    # workers in this process share modulekit's process-wide count with the caller: scatter
    # sets it while the model is installed; release puts the caller's own setting back, set
    # or unset, exactly
    if own:
        mk.set_num_threads(own)
    try:
        with (
            distributed.LocalCluster(
                n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
            ) as cluster,
            distributed.Client(cluster, timeout=30) as client,
        ):
            first = mkd.scatter(estimator, client, n_threads=2)
            second = mkd.scatter(estimator, client, n_threads=3)  # the latest one applies
            seen = da.from_array(X, chunks=(BATCH, 6)).map_blocks(
                _task_threads, drop_axis=1, dtype=np.int64
            )
            assert set(seen.compute().tolist()) == {3}
            second.release()
            assert mk.get_num_threads() == 2
            got = mkd.predict(first, da.from_array(X, chunks=(BATCH, 6)), method="predict")
            np.testing.assert_array_equal(got.compute(), estimator.predict(X))
            first.release()
            assert _openmp_helpers.user_threads() == own
            # a handle that is never released: closing the cluster tears the plugin down (the
            # handle is kept: dropped, the garbage-collection path would release it at once,
            # racing the check below)
            kept = mkd.scatter(estimator, client, n_threads=2)
            assert mk.get_num_threads() == 2
        assert _openmp_helpers.user_threads() == own
        del kept  # the cluster is closed: nothing left for it to release
    finally:
        _openmp_helpers.reset_num_threads()


def test_refusals(X, estimator):
    with pytest.raises(TypeError, match="dask.array.Array or dask.dataframe.DataFrame"):
        mkd.predict(estimator, X)
    with pytest.raises(AttributeError, match="no method 'transform'"):
        mkd.predict(estimator, da.from_array(X), method="transform")
    with pytest.raises(ValueError, match="n_threads must be None or a positive int"):
        mkd.scatter(estimator, object(), n_threads=0)


def worker_model_is_shared(name, dask_worker):
    model = dask_worker.plugins[name].model
    return all(t.is_shared() for t in model.state_dict().values()) and all(
        m._packed.is_shared for m in model.modules() if getattr(m, "_packed", None) is not None
    )


def test_shared_model_maps_the_clients_segments(client, X):
    # share_memory(): the workers (processes on this machine) map the client's segments
    model = make_model().share_memory()
    dX = da.from_array(X, chunks=(BATCH, 6))
    with mkd.scatter(model, client) as handle:
        assert set(client.run(worker_model_is_shared, handle.name).values()) == {True}
        got = mkd.predict(handle, dX, method=None).compute()
    np.testing.assert_array_equal(got, model(X))
