"""scikit-learn's estimator checks on every modulekit wrapper.

The full suite runs against a shape-adaptive test model (its factory is sized from X and y in
``fit``); the API checks run against wrappers of pretrained (fixed-shape) models, with each
expected failure listed and its reason.
"""

import functools

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

import modulekit as mk
from modulekit.nn import _random
from modulekit.sklearn import ModuleClassifier, ModuleRegressor, ModuleTransformer


@pytest.fixture(scope="module", autouse=True)
def _restore_layer_rng():
    """These tests reseed modulekit's initialisation generator: give the next module the
    generator they found."""
    saved = _random.default_generator()
    yield
    _random._generator = saved


def adaptive_mlp(n_features_in, n_outputs=3, hidden=8, dtype="float64"):
    """A deterministic MLP sized from the data (a fixed seed: fit twice, same model)."""
    mk.nn.manual_seed(0)
    return mk.nn.Sequential(
        mk.nn.Linear(n_features_in, hidden, dtype=dtype),
        mk.nn.Tanh(),
        mk.nn.Linear(hidden, n_outputs, dtype=dtype),
    )


def pretrained_mlp(n_features_in, n_outputs):
    return adaptive_mlp(n_features_in, n_outputs, dtype="float32").eval()


ADAPTIVE = [
    ModuleClassifier(adaptive_mlp),
    ModuleClassifier(adaptive_mlp, proba="sigmoid"),
    ModuleRegressor(adaptive_mlp),
    ModuleTransformer(adaptive_mlp),
    ModuleClassifier(functools.partial(adaptive_mlp, dtype="float32"), batch_size=5),
    ModuleTransformer(functools.partial(adaptive_mlp, dtype="float32"), batch_size=5),
]


@parametrize_with_checks(ADAPTIVE)
def test_full_suite_on_shape_adaptive_models(estimator, check):
    check(estimator)


# The API checks fit on random data of 2-4 features (and labels 0..2); a pretrained model
# takes exactly the features (and predicts exactly the classes) it was trained on, so the
# checks that fit on such data fail by nature, with the model's own refusal.
_WRONG_WIDTH = (
    "the check fits on random data whose feature count differs from the pretrained model's "
    "fixed input width (4); fit refuses it with a ValueError naming both"
)
_WRONG_LABELS = (
    "the check fits with labels 0..2, which are not the pretrained model's classes "
    "('cat', 'dog', 'eel'); fit refuses them with a ValueError"
)
_FIT_CHECKS = (
    "check_fit_score_takes_y",
    "check_estimators_overwrite_params",
    "check_dont_overwrite_parameters",
    "check_estimators_fit_returns_self",
    "check_readonly_memmap_input",
    "check_n_features_in_after_fitting",
    "check_positive_only_tag_during_fit",
)


def _expected_failures(estimator):
    if isinstance(estimator, ModuleClassifier):
        failures = dict.fromkeys(_FIT_CHECKS, _WRONG_LABELS)
    else:
        failures = dict.fromkeys(_FIT_CHECKS[:5], _WRONG_WIDTH)
    return failures


PRETRAINED = [
    ModuleClassifier(pretrained_mlp(4, 3), classes=["cat", "dog", "eel"]),
    ModuleRegressor(pretrained_mlp(4, 1)),
    ModuleTransformer(pretrained_mlp(4, 5)),
]


@parametrize_with_checks(PRETRAINED, legacy=False, expected_failed_checks=_expected_failures)
def test_api_checks_on_pretrained_models(estimator, check):
    check(estimator)


@pytest.mark.parametrize("estimator", PRETRAINED, ids=lambda e: type(e).__name__)
def test_the_expected_failures_are_the_refusals_named(estimator):
    """Each listed reason holds: fitting on 2 random features is refused as described."""
    import numpy as np

    X = np.random.default_rng(0).normal(size=(10, 2))
    y = np.arange(10) % 3
    with pytest.raises(ValueError) as info:
        estimator.fit(X, y)
    if isinstance(estimator, ModuleClassifier):
        assert "not in classes" in str(info.value)
        X4 = np.random.default_rng(0).normal(size=(10, 4))
        with pytest.raises(ValueError, match="not in classes"):
            estimator.fit(X4, y)
        assert estimator.fit(X4, np.array(["cat", "eel"] * 5)) is estimator
    else:
        assert "cannot take X with 2 features" in str(info.value)
