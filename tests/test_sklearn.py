"""modulekit.sklearn: results, pipelines, searches, pandas, pickling, memmaps, threads."""

import pickle

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold, cross_val_predict
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

import modulekit as mk
from modulekit._ext import _openmp_helpers
from modulekit.nn import _random
from modulekit.sklearn import ModuleClassifier, ModuleRegressor, ModuleTransformer


@pytest.fixture(scope="module", autouse=True)
def _restore_layer_rng():
    """These tests reseed modulekit's initialisation generator: give the next module the
    generator they found."""
    saved = _random.default_generator()
    yield
    _random._generator = saved


CLASSES = np.array(["cat", "dog", "eel"])


def mlp(n_in=4, n_out=3, hidden=16, dtype="float32", seed=0):
    mk.nn.manual_seed(seed)
    return mk.nn.Sequential(
        mk.nn.Linear(n_in, hidden, dtype=dtype),
        mk.nn.ReLU(),
        mk.nn.Linear(hidden, n_out, dtype=dtype),
    ).eval()


def reference_logits(model, X):
    """The same MLP in plain NumPy float64, from the model's own weights."""
    sd = {k: np.asarray(v, dtype=np.float64) for k, v in _raw_state(model).items()}
    h = np.maximum(X @ sd["0.weight"].T + sd["0.bias"], 0.0)
    return h @ sd["2.weight"].T + sd["2.bias"]


def _raw_state(model):
    return pickle.loads(pickle.dumps(model)).state_dict()


@pytest.fixture
def data():
    rng = np.random.default_rng(42)
    X = rng.normal(size=(60, 4)).astype(np.float32)
    y = CLASSES[rng.integers(0, 3, size=60)]
    return X, y


@pytest.fixture(autouse=True)
def _reset_threads():
    yield
    _openmp_helpers.reset_num_threads()


# ------------------------------------------------------------------ results
def test_classifier_outputs_match_the_model(data):
    X, y = data
    model = mlp()
    clf = ModuleClassifier(model, classes=CLASSES).fit(X, y)
    logits = reference_logits(model, X.astype(np.float64))
    np.testing.assert_allclose(clf.decision_function(X), logits, rtol=1e-4, atol=1e-5)
    e = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(
        clf.predict_proba(X), e / e.sum(1, keepdims=True), rtol=1e-4, atol=1e-6
    )
    assert clf.predict_proba(X).dtype == np.float32
    np.testing.assert_array_equal(clf.predict(X), CLASSES[np.argmax(clf.decision_function(X), 1)])
    np.testing.assert_allclose(np.exp(clf.predict_log_proba(X)), clf.predict_proba(X), rtol=1e-5)
    assert clf.module_ is model and clf.n_outputs_ == 3 and clf.n_features_in_ == 4


def test_binary_sigmoid_and_softmax_conventions(data):
    X, _ = data
    sig = ModuleClassifier(mlp(n_out=1), classes=["no", "yes"], proba="sigmoid").fit(X)
    z = reference_logits(sig.module_, X.astype(np.float64))[:, 0]
    np.testing.assert_allclose(sig.decision_function(X), z, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(sig.predict_proba(X)[:, 1], 1 / (1 + np.exp(-z)), rtol=1e-4)
    np.testing.assert_array_equal(sig.predict(X), np.where(z > 0, "yes", "no"))
    soft = ModuleClassifier(mlp(n_out=2), classes=[0, 1]).fit(X)
    logits = reference_logits(soft.module_, X.astype(np.float64))
    np.testing.assert_allclose(soft.decision_function(X), logits[:, 1] - logits[:, 0], atol=1e-4)
    np.testing.assert_array_equal(soft.predict(X), (logits[:, 1] > logits[:, 0]).astype(int))


def test_regressor_and_transformer(data):
    X, _ = data
    reg = ModuleRegressor(mlp(n_out=1)).fit(X)
    pred = reg.predict(X)
    assert pred.shape == (60,) and pred.dtype == np.float64
    np.testing.assert_allclose(
        pred, reference_logits(reg.module_, X.astype(np.float64))[:, 0], rtol=1e-4, atol=1e-5
    )
    multi = ModuleRegressor(mlp(n_out=2)).fit(X, np.zeros((60, 2)))
    assert multi.predict(X).shape == (60, 2)
    tr = ModuleTransformer(mlp(n_out=5)).fit(X)
    assert tr.transform(X).shape == (60, 5) and tr.transform(X).dtype == np.float32
    assert list(tr.get_feature_names_out()) == [f"moduletransformer{i}" for i in range(5)]


def test_predicts_in_chunks_of_batch_size(data):
    X, y = data
    model = mlp(dtype="float64")
    calls = []
    handle = model.register_forward_hook(lambda m, args, out: calls.append(args[0].shape[0]))
    full = ModuleClassifier(model, classes=CLASSES, batch_size=1000).fit(X, y)
    calls.clear()
    expected = full.predict_proba(X)
    assert calls == [60]
    small = ModuleClassifier(model, classes=CLASSES, batch_size=7).fit(X, y)
    calls.clear()
    got = small.predict_proba(X)
    assert calls == [7] * 8 + [4]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    handle.remove()


def test_n_threads_applies_during_prediction_only(data):
    X, y = data
    model = mlp()
    seen = []
    model.register_forward_hook(lambda m, a, o: seen.append(mk.get_num_threads()))
    clf = ModuleClassifier(model, classes=CLASSES, n_threads=1).fit(X, y)
    mk.set_num_threads(3)
    before = mk.get_num_threads()  # 3, or lower under an OpenMP limit set in this thread
    seen.clear()
    clf.predict(X)
    assert seen == [1]
    assert _openmp_helpers.user_threads() == 3 and mk.get_num_threads() == before  # restored
    _openmp_helpers.reset_num_threads()
    clf.predict(X)
    assert _openmp_helpers.user_threads() == 0  # "not set" is restored as "not set"


# ------------------------------------------------------------------ validation in fit
@pytest.mark.parametrize(
    "params, error, match",
    [
        ({"batch_size": 0}, ValueError, "batch_size must be a positive int"),
        ({"batch_size": 2.5}, ValueError, "batch_size must be a positive int"),
        ({"n_threads": 0}, ValueError, "n_threads must be None or a positive int"),
        ({"proba": "relu"}, ValueError, "proba must be one of"),
        ({"module": None}, ValueError, "module is None"),
        ({"module": "mlp.pt"}, TypeError, "callable returning one"),
        ({"module": lambda: np.eye(3)}, TypeError, "returned ndarray, expected a modulekit Module"),
        ({"checkpoint": 3}, TypeError, "checkpoint must be None or a path"),
        ({"checkpoint": "x.safetensors"}, ValueError, "checkpoint is only used with a factory"),
        ({"classes": ["a", "b"]}, ValueError, "returns 3 logits per row, but there are 2 classes"),
        ({"classes": ["a", "a", "b"]}, ValueError, "distinct labels"),
    ],
)
def test_fit_validates_parameters(data, params, error, match):
    X, _ = data
    params = {"module": mlp(), "classes": CLASSES, **params}
    est = ModuleClassifier(**params)
    assert est.get_params()["batch_size"] == params.get("batch_size", 1024)  # stored unchanged
    with pytest.raises(error, match=match):
        est.fit(X)


def test_fit_refuses_a_module_in_training_mode_and_never_modifies_it(data):
    X, _ = data
    model = mlp().train()
    with pytest.raises(ValueError, match=r"training mode .*call module.eval\(\)"):
        ModuleRegressor(model).fit(X)
    assert model.training


def test_fit_refuses_wrong_widths_and_labels(data):
    X, y = data
    with pytest.raises(ValueError, match="cannot take X with 3 features"):
        ModuleTransformer(mlp()).fit(X[:, :3])
    with pytest.raises(ValueError, match="not in classes"):
        ModuleClassifier(mlp(), classes=["cat", "dog", "fox"]).fit(X, y)
    with pytest.raises(ValueError, match="y has 2 target"):
        ModuleRegressor(mlp(n_out=1)).fit(X, np.zeros((60, 2)))
    clf = ModuleClassifier(mlp(), classes=CLASSES).fit(X, y)
    with pytest.raises(ValueError, match="X has 3 features, but ModuleClassifier is expecting 4"):
        clf.predict(X[:, :3])


def test_factory_gets_the_sizes_it_asks_for(data):
    X, y = data
    got = {}

    def factory(n_features_in, n_outputs):
        got.update(n_features_in=n_features_in, n_outputs=n_outputs)
        return mlp(n_in=n_features_in, n_out=n_outputs)

    clf = ModuleClassifier(factory).fit(X, y)
    assert got == {"n_features_in": 4, "n_outputs": 3}
    np.testing.assert_array_equal(clf.classes_, CLASSES)
    ModuleClassifier(lambda: mlp(n_out=3)).fit(X, y)  # a factory taking nothing gets nothing


def test_checkpoint_is_loaded_into_the_factory_model(data, tmp_path):
    load = getattr(mk, "load", None)
    save = getattr(mk, "save", None)
    if load is None or save is None:
        pytest.skip("modulekit.load / modulekit.save (checkpoint readers) not in this build")
    X, y = data
    trained = mlp(seed=7)
    path = tmp_path / "mlp.safetensors"
    save(_raw_state(trained), path)
    clf = ModuleClassifier(lambda: mlp(seed=1), checkpoint=path, classes=CLASSES).fit(X, y)
    ref = ModuleClassifier(trained, classes=CLASSES).fit(X, y)
    np.testing.assert_array_equal(clf.predict_proba(X), ref.predict_proba(X))


# ------------------------------------------------------------------ scikit-learn machinery
def test_clone_shares_the_weights(data):
    X, y = data
    model = mlp()
    clf = ModuleClassifier(model, classes=list(CLASSES), batch_size=32).fit(X, y)
    twin = clone(clf)
    assert twin.module is model
    assert twin.classes == clf.classes and twin.classes is not clf.classes  # deep-copied
    assert not hasattr(twin, "classes_")
    tr = ModuleTransformer(model).set_output(transform="pandas")
    assert isinstance(clone(tr).fit(X).transform(X), pd.DataFrame)  # output config kept


def test_pipeline_grid_search_and_cross_val_predict(data):
    X, y = data
    model = mlp()
    pipe = Pipeline(
        [("scale", StandardScaler()), ("clf", ModuleClassifier(model, classes=CLASSES))]
    )
    pipe.fit(X, y)
    Xs = StandardScaler().fit_transform(X)
    direct = ModuleClassifier(model, classes=CLASSES).fit(Xs, y)
    np.testing.assert_allclose(pipe.predict_proba(X), direct.predict_proba(Xs), rtol=1e-6)
    search = GridSearchCV(pipe, {"clf__batch_size": [8, 64]}, cv=3).fit(X, y)
    assert search.best_params_["clf__batch_size"] in (8, 64)
    assert search.best_estimator_.named_steps["clf"].module_ is model
    scores = search.cv_results_["mean_test_score"]
    assert scores[0] == scores[1]  # chunking does not change predictions
    # cross_val_predict(method="predict_proba") re-encodes y as 0..n_classes-1 before fitting:
    # the model's classes must then be those integers (docs/sklearn.md)
    yi = np.searchsorted(CLASSES, y)
    pipe.set_params(clf__classes=[0, 1, 2])
    proba = cross_val_predict(pipe, X, yi, cv=KFold(3), method="predict_proba")
    assert proba.shape == (60, 3)
    for train, test in KFold(3).split(X):
        fold = clone(pipe).fit(X[train], yi[train])
        np.testing.assert_allclose(proba[test], fold.predict_proba(X[test]), rtol=1e-6)


def test_pandas_input_and_output(data):
    X, y = data
    df = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    tr = ModuleTransformer(mlp(n_out=2)).set_output(transform="pandas").fit(df)
    np.testing.assert_array_equal(tr.feature_names_in_, ["a", "b", "c", "d"])
    out = tr.transform(df)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == ["moduletransformer0", "moduletransformer1"]
    assert out.index.equals(df.index)
    np.testing.assert_array_equal(out.to_numpy(), tr.set_output(transform="default").transform(df))
    clf = ModuleClassifier(mlp(), classes=CLASSES).fit(df, pd.Series(y))
    plain = ModuleClassifier(clf.module, classes=CLASSES).fit(X, y)
    np.testing.assert_array_equal(clf.predict(df), plain.predict(X))
    with pytest.raises(ValueError, match="feature names"):
        clf.predict(df.rename(columns={"a": "z"}))


def test_pickle_round_trip_predicts_identically(data):
    X, y = data
    clf = ModuleClassifier(mlp(), classes=CLASSES).fit(X, y)
    expected = clf.predict_proba(X)  # packs the weights
    blob = pickle.dumps(clf)
    back = pickle.loads(blob)
    np.testing.assert_array_equal(back.predict_proba(X), expected)
    np.testing.assert_array_equal(back.predict(X), clf.predict(X))
    # the module is pickled once (module and module_ are the same object) as raw weights
    assert back.module is back.module_
    raw = sum(p.nbytes for p in _raw_state(clf.module_).values())
    assert raw < len(blob) < raw + 6000


def test_module_pickle_carries_raw_weights_and_repacks_lazily():
    model = mlp()
    x = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    y = model(x)  # packs every Linear
    assert all(m._packed is not None for m in model if isinstance(m, mk.nn.Linear))
    assert model.state_dict() == {}  # packed weights leave the registry
    back = pickle.loads(pickle.dumps(model))
    assert all(m._packed is not None for m in model if isinstance(m, mk.nn.Linear))  # live: kept
    assert all(m._packed is None for m in back if isinstance(m, mk.nn.Linear))
    assert sorted(back.state_dict()) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    np.testing.assert_array_equal(back(x), y)
    assert all(m._packed is not None for m in back if isinstance(m, mk.nn.Linear))


def test_float32_memmap_input(data, tmp_path):
    X, y = data
    path = tmp_path / "X.f32"
    X.tofile(path)
    mm = np.memmap(path, dtype=np.float32, mode="r", shape=X.shape)
    clf = ModuleClassifier(mlp(), classes=CLASSES, batch_size=16).fit(mm, y)
    np.testing.assert_array_equal(clf.predict_proba(mm), clf.predict_proba(X))
    tr = ModuleTransformer(mlp(n_out=2)).fit(mm)
    np.testing.assert_array_equal(tr.transform(mm), tr.transform(X))
