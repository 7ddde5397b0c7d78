"""scikit-learn pipeline benchmark: ``Pipeline(StandardScaler(), ModuleClassifier(mlp))``.

The same MLP (``n_features -> 512 -> 256 -> 10``, ReLU, softmax; float32 weights) is run as

* ``modulekit``: ``Pipeline(StandardScaler(), modulekit.sklearn.ModuleClassifier(mlp))``;
* ``scikit-learn``: ``Pipeline(StandardScaler(), MLPClassifier)`` whose ``coefs_`` and
  ``intercepts_`` are set by hand to the same weights (``predict_proba``);
* ``torch``: the same scaler, then ``torch.nn.Sequential`` + softmax under
  ``torch.inference_mode()`` (skipped when torch is not installed).

Each case times ``predict_proba`` of the whole pipeline on a batch of rows (many rows:
throughput; one row: per-call latency, with the default threads and with every library
limited to one thread), interleaved, after checking that the three agree.
Run ``python bench/pipeline.py [--quick]`` or ``python -m modulekit.bench pipeline``.
"""

from __future__ import annotations

import sys
import warnings
from contextlib import contextmanager

import numpy as np

from modulekit.bench._timing import interleaved, report

HIDDEN = (512, 256)
N_CLASSES = 10


def _weights(n_features, rng):
    dims = (n_features, *HIDDEN, N_CLASSES)
    layers = []
    for n_in, n_out in zip(dims[:-1], dims[1:]):
        bound = 1.0 / np.sqrt(n_in)
        w = rng.uniform(-bound, bound, (n_out, n_in)).astype(np.float32)
        b = rng.uniform(-bound, bound, n_out).astype(np.float32)
        layers.append((w, b))
    return layers


def _modulekit_pipeline(layers, X):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    import modulekit as mk
    from modulekit.sklearn import ModuleClassifier

    mods = []
    for i, (w, b) in enumerate(layers):
        lin = mk.nn.Linear(w.shape[1], w.shape[0])
        lin.load_state_dict({"weight": w, "bias": b})
        mods.append(lin)
        if i < len(layers) - 1:
            mods.append(mk.nn.ReLU())
    model = mk.nn.Sequential(*mods).eval()
    clf = ModuleClassifier(model, classes=np.arange(N_CLASSES))
    return make_pipeline(StandardScaler(), clf).fit(X)


def _sklearn_pipeline(layers, X):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    mlp = MLPClassifier(hidden_layer_sizes=HIDDEN, activation="relu", max_iter=1)
    y = np.arange(len(X)) % N_CLASSES
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pipe = make_pipeline(StandardScaler(), mlp).fit(X, y)  # sets shapes and classes_
    mlp.coefs_ = [np.ascontiguousarray(w.T) for w, _ in layers]
    mlp.intercepts_ = [b.copy() for _, b in layers]
    return pipe


def _torch_predict(layers, scaler):
    import torch

    mods = []
    for i, (w, b) in enumerate(layers):
        lin = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.copy_(torch.from_numpy(b))
        mods.append(lin)
        if i < len(layers) - 1:
            mods.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*mods).eval()

    def predict_proba(X):
        with torch.inference_mode():
            x = torch.from_numpy(scaler.transform(X))
            return torch.softmax(model(x), dim=1).numpy()

    return predict_proba


@contextmanager
def _one_thread(enabled):
    """Limit modulekit (through OpenMP), NumPy's BLAS and torch to one thread inside."""
    if not enabled:
        yield
        return
    from threadpoolctl import threadpool_limits

    try:
        import torch
    except ImportError:
        torch = None
    before = torch.get_num_threads() if torch is not None else None
    with threadpool_limits(1):
        if torch is not None:
            torch.set_num_threads(1)
        try:
            yield
        finally:
            if torch is not None:
                torch.set_num_threads(before)


def run(quick=False):
    """Time the three pipelines; returns rows (suite, case, impl, seconds, low, high, ...)."""
    rng = np.random.default_rng(0)
    n_features = 256
    n_rows = 2048 if quick else 16384
    X = rng.normal(size=(n_rows, n_features)).astype(np.float32)
    layers = _weights(n_features, rng)
    ours = _modulekit_pipeline(layers, X)
    theirs = _sklearn_pipeline(layers, X)
    impls = {"modulekit": ours.predict_proba, "scikit-learn": theirs.predict_proba}
    try:
        impls["torch"] = _torch_predict(layers, ours[0])
    except ImportError:
        print("torch is not installed: no torch peer for the pipeline benchmark")
    # all three compute the same probabilities (float32 rounding apart)
    expected = impls["scikit-learn"](X[:256])
    for name, fn in impls.items():
        got = fn(X[:256])
        if not np.allclose(got, expected, rtol=1e-3, atol=1e-5):
            raise AssertionError(
                f"pipeline bench: {name} disagrees with scikit-learn's MLPClassifier "
                f"(max difference {np.abs(got - expected).max():.3g})"
            )
    dims = " -> ".join(map(str, (n_features, *HIDDEN, N_CLASSES)))
    rows = []
    cases = (  # rows, calls per round, rounds, one thread for every library
        (n_rows, 2 if quick else 3, 5 if quick else 9, False),
        (1, 200 if quick else 2000, 5 if quick else 9, False),
        (1, 200 if quick else 2000, 5 if quick else 9, True),
    )
    for rows_in, number, rounds, single in cases:
        batch = X[:rows_in]
        funcs = {name: (lambda fn=fn, b=batch: fn(b)) for name, fn in impls.items()}
        with _one_thread(single):
            res = interleaved(funcs, rounds=rounds, number=number)
        case = f"StandardScaler + MLP {dims} predict_proba, {rows_in} row(s)"
        case += ", 1 thread" if single else ""
        flops = 2.0 * rows_in * sum(w.size for w, _ in layers)
        for name, r in res.items():
            rows.append(
                {
                    "suite": "pipeline",
                    "case": case,
                    "impl": name,
                    "gflops": flops / r["seconds"] / 1e9,
                    **r,
                }
            )
    return rows


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    report(run(quick="--quick" in argv))


if __name__ == "__main__":
    main()
