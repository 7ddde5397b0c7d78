"""Batch inference with Dask: a modulekit model over ``dask.array`` blocks and
``dask.dataframe`` partitions.

``scatter(model)`` sends the model to every worker of the client once (``broadcast=True``); each
worker deserialises it once and every task on that worker uses that copy. A model passed to
``predict`` directly is embedded in the task graph instead, and unpickled by every task: right
for the local schedulers, wasteful on a cluster, so ``predict`` scatters it itself when a
``distributed`` client is active. Workers honour their thread limits: Dask's nanny starts
workers with ``OMP_NUM_THREADS=1`` and modulekit's kernels follow it; ``scatter(n_threads=...)``
sets modulekit's thread count on every worker instead. See docs/distributed.md.

The model is a fitted modulekit estimator (``modulekit.sklearn``), any fitted scikit-learn
estimator or pipeline, or a :class:`~modulekit.Module` (``method=None`` calls it).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ScatteredModel", "predict", "scatter"]


class ScatteredModel:
    """A model sent once to every worker of a ``distributed`` client.

    Attributes
    ----------
    future : distributed.Future
        The workers' copy; tasks receive the object it points to.
    model : object
        The local object (used on the client to work out output shapes and dtypes).
    client : distributed.Client
    """

    __slots__ = ("future", "model", "client")

    def __init__(self, future, model, client):
        self.future, self.model, self.client = future, model, client

    def __repr__(self) -> str:
        return f"ScatteredModel({type(self.model).__name__}, key={self.future.key!r})"


def _default_client():
    try:
        from distributed import default_client
    except ImportError:
        return None
    try:
        return default_client()
    except ValueError:  # no client in this process
        return None


def _set_threads(n):
    from modulekit._ext import _openmp_helpers

    if n is None:
        _openmp_helpers.reset_num_threads()
    else:
        _openmp_helpers.set_num_threads(n)
    return _openmp_helpers.get_num_threads()


def scatter(model, client=None, *, n_threads=None) -> ScatteredModel:
    """Send ``model`` to every worker once; return a handle for :func:`predict`.

    Parameters
    ----------
    model : estimator or Module
        Pickled once (a Module carries its raw weights; each worker re-packs them on first use).
    client : distributed.Client, optional
        Default: the current client.
    n_threads : int, optional
        modulekit's thread count on every worker (``modulekit.set_num_threads``). Default: leave
        the workers' setting (one thread under Dask's nanny, which sets ``OMP_NUM_THREADS=1``).

    Returns
    -------
    ScatteredModel
    """
    if n_threads is not None and (
        isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1
    ):
        raise ValueError(f"scatter: n_threads must be None or a positive int, got {n_threads!r}")
    if client is None:
        client = _default_client()
        if client is None:
            raise ValueError("scatter: no distributed client (pass client= or create a Client)")
    future = client.scatter(model, broadcast=True, hash=False)
    if n_threads is not None:
        client.run(_set_threads, n_threads)
    return ScatteredModel(future, model, client)


def _call(model, method, x):
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
    import dask.dataframe as dd

    if not isinstance(data, (da.Array, dd.DataFrame)):
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
        remote = model.future
    else:
        client = _default_client()
        remote = model if client is None else scatter(model, client).future
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
