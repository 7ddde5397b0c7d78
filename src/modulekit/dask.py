"""Batch inference with Dask: a modulekit model over ``dask.array`` blocks and
``dask.dataframe`` partitions.

``scatter(model)`` pickles the model once on the client and installs it on every worker of the
cluster (and on every worker that joins later) as a worker plugin: each worker deserialises it
exactly once and every task on that worker looks that copy up by name. The model is not Dask data
on purpose: a ``client.scatter(..., broadcast=True)`` replica is "superfluous" to the Active
Memory Manager (``ReduceReplicas`` keeps one copy of a key nobody is waiting on), which drops it
between computations, and the next task on that worker fetches and unpickles the model again.
A model passed to ``predict`` directly is embedded in the task graph instead, and unpickled by
every task: right for the local schedulers, wasteful on a cluster, so ``predict`` scatters it
itself (as Dask data, which the graph keeps alive) when a ``distributed`` client is active.
Workers honour their thread limits: Dask's nanny starts workers with ``OMP_NUM_THREADS=1`` and
modulekit's kernels follow it; ``scatter(n_threads=...)`` sets modulekit's thread count on every
worker while the model is installed there, and ``release()`` puts back each worker's own count
(a worker in the caller's process, ``LocalCluster(processes=False)``, shares the caller's
count: the caller gets its own setting back exactly). See docs/distributed.md.

The model is a fitted modulekit estimator (``modulekit.sklearn``), any fitted scikit-learn
estimator or pipeline, or a :class:`~modulekit.Module` (``method=None`` calls it).
"""

from __future__ import annotations

import threading
import uuid
import weakref

import numpy as np

try:
    import dask.array  # noqa: F401  (dask.dataframe is imported when a DataFrame is given)
except ImportError as exc:
    raise ImportError(
        "modulekit.dask needs dask (with dask.array), which is not installed: install the "
        "extra with pip install 'modulekit[dask]'"
    ) from exc

try:
    from distributed.diagnostics.plugin import WorkerPlugin as _WorkerPlugin
except ImportError:  # dask without distributed: only the local schedulers
    _WorkerPlugin = object

__all__ = ["ScatteredModel", "predict", "scatter"]


# modulekit's thread count is process-wide; scatter(n_threads=...) sets it in each worker's
# process while the model is installed there. Several workers can share a process (and share
# it with the client: LocalCluster(processes=False)), so the overrides are kept per process:
# the process's own setting is saved when the first one starts and put back, exactly (set or
# unset), when the last one ends; meanwhile the most recent override applies.
_threads_lock = threading.Lock()
_threads_saved = 0  # modulekit.set_num_threads's count before the first override, 0: unset
_threads_active: dict = {}  # (id(plugin), id(worker)) -> count, in installation order


def _push_threads(key, n):
    from modulekit._ext import _openmp_helpers

    global _threads_saved
    with _threads_lock:
        if not _threads_active:
            _threads_saved = _openmp_helpers.user_threads()
        _threads_active[key] = n
        _openmp_helpers.set_num_threads(n)


def _pop_threads(key):
    from modulekit._ext import _openmp_helpers

    with _threads_lock:
        if _threads_active.pop(key, None) is None:
            return
        if _threads_active:
            _openmp_helpers.set_num_threads(next(reversed(_threads_active.values())))
        elif _threads_saved > 0:
            _openmp_helpers.set_num_threads(_threads_saved)
        else:
            _openmp_helpers.reset_num_threads()


class _ModelPlugin(_WorkerPlugin):
    """Worker side: holds one worker's copy of a scattered model (unpickled once, on install)
    and, with ``n_threads``, modulekit's thread count in the worker's process while installed."""

    def __init__(self, model, n_threads=None):
        self.model = model
        self.n_threads = n_threads

    def setup(self, worker):
        if self.n_threads is not None:
            _push_threads((id(self), id(worker)), self.n_threads)

    def teardown(self, worker):
        self.model = None
        _pop_threads((id(self), id(worker)))


class _ModelRef:
    """What a task receives for a :class:`ScatteredModel`: the plugin's name, nothing else.

    It pickles (into the graph) and tokenizes as the name alone; on the client it also holds
    the handle, so a collection built from a handle keeps the model on the workers.
    """

    __slots__ = ("name", "handle")

    def __init__(self, name, handle=None):
        self.name, self.handle = name, handle

    def __reduce__(self):
        return (_ModelRef, (self.name,))

    def __dask_tokenize__(self):
        return ("modulekit.dask._ModelRef", self.name)

    def resolve(self):
        """Worker side: this worker's copy of the model."""
        from distributed import get_worker

        try:
            worker = get_worker()
        except ValueError:
            raise RuntimeError(
                f"a ScatteredModel ({self.name}) runs only on the workers of its distributed "
                f"client; compute the collection with that client, or pass the model itself"
            ) from None
        plugin = worker.plugins.get(self.name)
        if plugin is None or plugin.model is None:
            raise RuntimeError(
                f"the scattered model {self.name} is not on worker {worker.address}: it was "
                f"released (ScatteredModel.release(), or the handle and every collection built "
                f"from it were garbage-collected before this task ran)"
            )
        return plugin.model


def _unregister_later(client, name):
    """Garbage-collection path of :meth:`ScatteredModel.release`: never blocks, never raises."""
    try:
        if client.status == "running":
            client.loop.add_callback(_unregister_quietly, client, name)
    except Exception:  # the client or its loop is already gone: so are its plugins' workers
        pass


async def _unregister_quietly(client, name):
    try:
        await client._unregister_worker_plugin(name)
    except Exception:  # the cluster closed meanwhile
        pass


class ScatteredModel:
    """A model installed once on every worker of a ``distributed`` cluster.

    Each worker (including workers that join later) deserialises the model once, when the
    handle is made; tasks look that copy up by :attr:`name`. The model stays on the workers
    until :meth:`release` is called (or the ``with`` block exits), or until this handle and
    every collection :func:`predict` built from it are garbage-collected: keep one of them
    alive until the results are computed (``persist()`` and ``client.compute`` results do not
    hold it).

    Attributes
    ----------
    name : str
        The worker plugin's name, unique per handle.
    model : object
        The local object (used on the client to work out output shapes and dtypes).
    client : distributed.Client
    """

    __slots__ = ("name", "model", "client", "_finalizer", "__weakref__")

    def __init__(self, name, model, client):
        self.name, self.model, self.client = name, model, client
        self._finalizer = weakref.finalize(self, _unregister_later, client, name)
        self._finalizer.atexit = False

    @property
    def released(self) -> bool:
        """Whether :meth:`release` removed the model from the workers."""
        return not self._finalizer.alive

    def release(self) -> None:
        """Remove the model from every worker now (idempotent)."""
        if self._finalizer.detach() is not None:
            self.client.unregister_worker_plugin(self.name)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.release()

    def __repr__(self) -> str:
        state = ", released" if self.released else ""
        return f"ScatteredModel({type(self.model).__name__}, name={self.name!r}{state})"


def _default_client():
    try:
        from distributed import default_client
    except ImportError:
        return None
    try:
        return default_client()
    except ValueError:  # no client in this process
        return None


def scatter(model, client=None, *, n_threads=None) -> ScatteredModel:
    """Install ``model`` on every worker once; return a handle for :func:`predict`.

    Parameters
    ----------
    model : estimator or Module
        Pickled once on the client and unpickled once per worker (a Module carries its raw
        weights; each worker re-packs them on first use).
    client : distributed.Client, optional
        Default: the current client.
    n_threads : int, optional
        modulekit's thread count on every worker (``modulekit.set_num_threads``) while the
        model is installed there, workers that join later included; releasing the model puts
        each worker's previous setting back. Workers in the caller's own process
        (``LocalCluster(processes=False)``) share its count: the caller runs with ``n_threads``
        too until the release, which restores the caller's setting exactly. Default: leave the
        workers' setting (one thread under Dask's nanny, which sets ``OMP_NUM_THREADS=1``).

    Returns
    -------
    ScatteredModel
        Release it with ``.release()`` or a ``with`` block, or let it be garbage-collected.
    """
    if n_threads is not None and (
        isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1
    ):
        raise ValueError(f"scatter: n_threads must be None or a positive int, got {n_threads!r}")
    if client is None:
        client = _default_client()
        if client is None:
            raise ValueError("scatter: no distributed client (pass client= or create a Client)")
    name = f"modulekit-model-{type(model).__name__}-{uuid.uuid4().hex}"
    client.register_plugin(_ModelPlugin(model, n_threads), name=name)
    return ScatteredModel(name, model, client)


def _call(model, method, x):
    if isinstance(model, _ModelRef):
        model = model.resolve()
    if method is None:
        if hasattr(x, "to_numpy"):  # a pandas partition: a Module takes arrays
            x = x.to_numpy()
        return np.asarray(model(x))
    return np.asarray(getattr(model, method)(x))


def _apply_block(block, model, method):
    """Worker side, dask.array: the model's output for one block of rows."""
    return _call(model, method, block)


def _apply_partition(part, model, method, columns, name):
    """Worker side, dask.dataframe: the model's output for one partition, indexed as it."""
    import pandas as pd

    out = _call(model, method, part)
    if out.ndim == 1:
        return pd.Series(out, index=part.index, name=name)
    return pd.DataFrame(out, index=part.index, columns=columns)


def _dask_dataframe():
    """``dask.dataframe``, or None where it cannot be imported (it needs pandas and pyarrow;
    arrays do not)."""
    try:
        import dask.dataframe as dd
    except ImportError:
        return None
    return dd


def _output_columns(model, method, width):
    """Column names of a 2-D output: classes for probabilities, feature names for transform."""
    if method in ("predict_proba", "predict_log_proba", "decision_function"):
        classes = getattr(model, "classes_", None)
        if classes is not None and len(classes) == width:
            return [str(c) for c in classes]
    if method == "transform" and hasattr(model, "get_feature_names_out"):
        try:
            names = list(model.get_feature_names_out())
        except Exception:  # an estimator that cannot name its outputs: positions instead
            names = None
        if names is not None and len(names) == width:
            return names
    return list(range(width))


def predict(model, data, *, method="predict", name=None):
    """Run ``model`` over the rows of a Dask collection, lazily.

    Parameters
    ----------
    model : ScatteredModel, estimator or Module
        A :func:`scatter` handle (recommended on a cluster), or the model itself: with an
        active ``distributed`` client it is scattered to every worker first, else embedded in
        the graph.
    data : dask.array.Array of shape (n_samples, n_features) or dask.dataframe.DataFrame
        Row blocks / partitions are processed independently; an array is rechunked to one
        block along the features.
    method : str or None, default="predict"
        The model's method to call (``"predict_proba"``, ``"transform"``, ...); ``None`` calls
        the model (a Module).
    name : str, optional
        Name of the resulting dask.dataframe Series (1-D outputs); default: ``method``.

    Returns
    -------
    dask.array.Array or dask.dataframe.Series / DataFrame
        Same row blocks / partitions (and index) as ``data``. Each block's rows equal what
        the model gives for those rows locally.
    """
    import dask.array as da

    dd = _dask_dataframe()
    if not isinstance(data, da.Array) and (dd is None or not isinstance(data, dd.DataFrame)):
        raise TypeError(
            f"predict: data must be a dask.array.Array or dask.dataframe.DataFrame, "
            f"got {type(data).__name__}"
        )
    local = model.model if isinstance(model, ScatteredModel) else model
    if method is None and not callable(local):
        raise TypeError(
            f"predict: method=None calls the model, but {type(local).__name__} is not callable"
        )
    if method is not None and not callable(getattr(local, method, None)):
        raise AttributeError(f"predict: {type(local).__name__} has no method {method!r}")
    if isinstance(model, ScatteredModel):
        if model.released:
            raise ValueError(f"predict: {model!r} was released")
        remote = _ModelRef(model.name, model)
    else:
        client = _default_client()
        remote = model if client is None else client.scatter(model, broadcast=True, hash=False)
    if isinstance(data, da.Array):
        return _predict_array(remote, local, data, method)
    return _predict_frame(remote, local, data, method, name)


def _predict_array(remote, local, X, method):
    if X.ndim != 2:
        raise ValueError(
            f"predict: expected a 2-D dask array (n_samples, n_features), got {X.ndim}-D"
        )
    if len(X.chunks[1]) != 1:
        X = X.rechunk({1: -1})
    probe = _call(local, method, np.zeros((1, X.shape[1]), dtype=X.dtype))
    if probe.ndim == 1:
        return X.map_blocks(
            _apply_block,
            remote,
            method,
            drop_axis=1,
            dtype=probe.dtype,
            meta=np.empty((0,), dtype=probe.dtype),
        )
    probe = probe.reshape(1, -1)
    return X.map_blocks(
        _apply_block,
        remote,
        method,
        chunks=(X.chunks[0], (probe.shape[1],)),
        dtype=probe.dtype,
        meta=np.empty((0, 0), dtype=probe.dtype),
    )


def _predict_frame(remote, local, df, method, name):
    import pandas as pd

    sample = df._meta
    sample = pd.DataFrame(
        np.zeros((1, sample.shape[1]), dtype=np.float64), columns=sample.columns
    ).astype(sample.dtypes.to_dict())
    probe = _call(local, method, sample)
    name = name if name is not None else (method or "output")
    if probe.ndim == 1:
        meta = pd.Series(np.empty(0, dtype=probe.dtype), name=name)
        columns = None
    else:
        probe = probe.reshape(1, -1)
        columns = _output_columns(local, method, probe.shape[1])
        meta = pd.DataFrame(np.empty((0, probe.shape[1]), dtype=probe.dtype), columns=columns)
    return df.map_partitions(_apply_partition, remote, method, columns, name, meta=meta)
