"""scikit-learn estimators around modulekit models: inference inside pipelines and searches.

``ModuleTransformer``, ``ModuleClassifier`` and ``ModuleRegressor`` wrap a *pretrained* model:
``fit`` does not train anything. It validates the data and the parameters, builds the model
when given a factory (loading its checkpoint), initializes it (``Module.initialize``: packed
weights, fused calls), checks that the model's output fits the estimator's kind, and records
the fitted attributes. ``predict``/``transform`` then run the
model over the rows of ``X`` in chunks of ``batch_size``.

The model parameter ``module`` is either a built :class:`~modulekit.Module` (used as it is: it
must be in eval mode; the estimator changes nothing in it beyond its packed, kernel-ready
form) or a factory (any callable returning a Module, e.g. the class or a
``functools.partial``), called in ``fit``. A factory that accepts the keyword
``n_features_in`` (and, for the classifier and the regressor, ``n_outputs``) gets the sizes
taken from the data, so one factory can build models of any input width. ``checkpoint`` names
a file read with ``modulekit.load`` whose tensors are loaded into the built model
(``load_state_dict``, strict).

``clone`` (hence grid searches and cross-validation) shares the ``module`` object instead of
deep-copying its weights; the estimators never write to it. A pickled fitted estimator carries
the model's raw (unpacked) weights once and predicts identically after unpickling.
"""

from __future__ import annotations

import copy
import inspect
import numbers
import os
from contextlib import contextmanager

import numpy as np

try:
    from sklearn.base import (
        BaseEstimator,
        ClassifierMixin,
        ClassNamePrefixFeaturesOutMixin,
        RegressorMixin,
        TransformerMixin,
    )
    from sklearn.utils.multiclass import check_classification_targets, unique_labels
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as exc:
    raise ImportError(
        "modulekit.sklearn needs scikit-learn >= 1.6, which is not installed (or too old): "
        "install the extra with pip install 'modulekit[sklearn]'"
    ) from exc

from modulekit._ext import _openmp_helpers
from modulekit.module import Module

__all__ = ["ModuleClassifier", "ModuleRegressor", "ModuleTransformer"]

_PROBA = ("softmax", "sigmoid")


def _load_checkpoint(path):
    """``modulekit.load(path)``, imported at call time (the checkpoint readers are optional)."""
    import modulekit

    load = getattr(modulekit, "load", None)
    if load is None:
        try:
            from modulekit.checkpoint import load
        except ImportError as exc:
            raise ImportError(
                "checkpoint= needs modulekit's checkpoint readers (modulekit.load), which this "
                "build does not have"
            ) from exc
    return load(path)


@contextmanager
def _thread_count(n_threads):
    """Run modulekit's kernels with ``n_threads`` threads inside the block (None: unchanged).

    The count is process-wide (``modulekit.set_num_threads``) and restored on exit; a lower
    ``threadpoolctl`` limit or a fork-time serial fallback still applies.
    """
    if n_threads is None:
        yield
        return
    previous = _openmp_helpers.user_threads()
    _openmp_helpers.set_num_threads(n_threads)
    try:
        yield
    finally:
        if previous > 0:
            _openmp_helpers.set_num_threads(previous)
        else:
            _openmp_helpers.reset_num_threads()


def _accepts_keyword(factory, name: str) -> bool:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return False
    if name in params and params[name].kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    ):
        return True
    return False


class _ModuleEstimatorBase(BaseEstimator):
    """Shared parameters, validation, model building and chunked inference."""

    def __init__(self, module=None, *, checkpoint=None, batch_size=1024, n_threads=None):
        self.module = module
        self.checkpoint = checkpoint
        self.batch_size = batch_size
        self.n_threads = n_threads

    # ---------------------------------------------------------------- scikit-learn protocol
    def __sklearn_clone__(self):
        """An unfitted copy whose ``module`` is the SAME object (weights are shared, read-only);
        every other parameter is deep-copied, as :func:`sklearn.base.clone` does."""
        params = self.get_params(deep=False)
        module = params.pop("module")
        params = {name: copy.deepcopy(value) for name, value in params.items()}
        new = type(self)(module=module, **params)
        if hasattr(self, "_metadata_request"):
            new._metadata_request = copy.deepcopy(self._metadata_request)
        if hasattr(self, "_sklearn_output_config"):
            new._sklearn_output_config = copy.deepcopy(self._sklearn_output_config)
        return new

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.non_deterministic = False
        return tags

    # ---------------------------------------------------------------- fitting
    def _name(self) -> str:
        return type(self).__name__

    def _check_params(self) -> None:
        name = self._name()
        bs = self.batch_size
        if isinstance(bs, bool) or not isinstance(bs, numbers.Integral) or bs < 1:
            raise ValueError(f"{name}: batch_size must be a positive int, got {bs!r}")
        nt = self.n_threads
        if nt is not None and (
            isinstance(nt, bool) or not isinstance(nt, numbers.Integral) or nt < 1
        ):
            raise ValueError(f"{name}: n_threads must be None or a positive int, got {nt!r}")
        ckpt = self.checkpoint
        if ckpt is not None and not isinstance(ckpt, (str, os.PathLike)):
            raise TypeError(
                f"{name}: checkpoint must be None or a path (str or os.PathLike), "
                f"got {type(ckpt).__name__}"
            )
        if self.module is None:
            raise ValueError(
                f"{name}: module is None; pass a built modulekit Module or a factory returning one"
            )

    def _build_module(self, sizes: dict) -> Module:
        """The Module used for inference: the given one, or a new one from the factory."""
        name = self._name()
        module = self.module
        if isinstance(module, Module):
            if self.checkpoint is not None:
                raise ValueError(
                    f"{name}: checkpoint is only used with a factory; module is a built "
                    f"{type(module).__name__}, which is never modified (load the checkpoint "
                    f"into it yourself, or pass its class or a factory)"
                )
            training = [n or type(module).__name__ for n, m in module.named_modules() if m.training]
            if training:
                raise ValueError(
                    f"{name}: module is in training mode ({training[0]}.training is True); "
                    f"call module.eval() before wrapping it (the estimator never modifies the "
                    f"module it is given)"
                )
            return module
        if not callable(module):
            raise TypeError(
                f"{name}: module must be a modulekit Module or a callable returning one, "
                f"got {type(module).__name__}"
            )
        kwargs = {k: v for k, v in sizes.items() if _accepts_keyword(module, k)}
        built = module(**kwargs)
        if not isinstance(built, Module):
            raise TypeError(
                f"{name}: the factory {module!r} returned {type(built).__name__}, expected a "
                f"modulekit Module"
            )
        if self.checkpoint is not None:
            built.load_state_dict(_load_checkpoint(self.checkpoint))
        built.eval()
        return built

    def _validate_fit(self, X, y=None, *, y_required: bool):
        """Validate parameters and data (sets ``n_features_in_``/``feature_names_in_``)."""
        self._check_params()
        if y is None:
            if y_required:
                raise ValueError(
                    f"{self._name()} requires y to be passed, but the target y is None"
                )
            X = validate_data(self, X, dtype=(np.float64, np.float32), order="C")
            return X, None
        return validate_data(self, X, y, dtype=(np.float64, np.float32), order="C", **self._y_opts)

    _y_opts: dict = {}

    def _probe_output(self, X) -> np.ndarray:
        """Initialize the model (pack the weights, plan fused calls, start the kernels' threads)
        and run it on the first row of ``X``: the output must be a floating array with one row
        per input row. Returns it flattened to (1, width)."""
        try:
            with _thread_count(self.n_threads):
                self.module_.initialize()
                return self._forward(self.module_, X[:1], None)
        except (ValueError, TypeError) as exc:
            raise ValueError(
                f"{self._name()}: the model cannot take X with {X.shape[1]} features: {exc}"
            ) from exc

    def _forward(self, module, rows, n_threads) -> np.ndarray:
        out = module(rows)
        arr = np.asarray(out)
        if arr.dtype.kind != "f" or arr.ndim == 0 or arr.shape[0] != rows.shape[0]:
            raise ValueError(
                f"{self._name()}: the model must return a floating array with one row per "
                f"input row; for input shape {rows.shape} it returned "
                f"{type(out).__name__} of shape {arr.shape} and dtype {arr.dtype}"
            )
        return arr.reshape(arr.shape[0], -1)

    # ---------------------------------------------------------------- inference
    def _check_X(self, X):
        check_is_fitted(self)
        return validate_data(self, X, dtype=(np.float64, np.float32), order="C", reset=False)

    def _run(self, X) -> np.ndarray:
        """The model's output for every row of validated ``X``, as (n_samples, width),
        computed ``batch_size`` rows at a time."""
        module, bs = self.module_, int(self.batch_size)
        n = X.shape[0]
        with _thread_count(self.n_threads):
            first = self._forward(module, X[:bs], None)
            if first.shape[1] != self.n_outputs_:
                raise ValueError(
                    f"{self._name()}: the model returned {first.shape[1]} outputs per row, "
                    f"expected {self.n_outputs_} (as in fit)"
                )
            if n <= bs:
                return first
            out = np.empty((n, first.shape[1]), dtype=first.dtype)
            out[:bs] = first
            for start in range(bs, n, bs):
                out[start : start + bs] = self._forward(module, X[start : start + bs], None)
        return out


class ModuleTransformer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, _ModuleEstimatorBase):
    """The output of a pretrained modulekit model as features.

    Parameters
    ----------
    module : Module or callable, default=None
        A built Module in eval mode (used as it is, never modified), or a factory returning a
        Module, called in ``fit`` (with ``n_features_in=`` when it accepts that keyword).
    checkpoint : str or os.PathLike, default=None
        With a factory: a checkpoint file (``modulekit.load``) loaded into the built model.
    batch_size : int, default=1024
        Rows per forward call.
    n_threads : int, default=None
        Threads of modulekit's kernels during ``transform`` (None: modulekit's setting, which
        honours ``OMP_NUM_THREADS`` and ``threadpoolctl``).

    Attributes
    ----------
    module_ : Module
        The model used (the ``module`` object itself when one was given).
    n_outputs_ : int
        Features per row of the output (the model's output flattened per row).
    n_features_in_ : int
        Number of input features seen in ``fit``.
    feature_names_in_ : ndarray of str
        Input column names, when ``X`` in ``fit`` had string column names.

    Notes
    -----
    ``fit`` does not train the model. The output keeps the model's dtype (float32 for a
    float32 model). Feature names out are ``moduletransformer0``, ``moduletransformer1``, ...
    so ``set_output(transform="pandas")`` works.
    """

    def fit(self, X, y=None):
        """Validate ``X``, build the model if needed and record the output width.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        self : ModuleTransformer
        """
        X, _ = self._validate_fit(X, None, y_required=False)
        self.module_ = self._build_module({"n_features_in": self.n_features_in_})
        self.n_outputs_ = self._probe_output(X).shape[1]
        self._n_features_out = self.n_outputs_
        return self

    def transform(self, X):
        """The model's output for each row of ``X``, shape (n_samples, n_outputs_).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_)

        Returns
        -------
        ndarray of shape (n_samples, n_outputs_)
        """
        return self._run(self._check_X(X))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = _module_dtypes(self.module)
        return tags


def _module_dtypes(module) -> list[str]:
    """The output dtypes a built float32/float64 model preserves; [] when not known yet."""
    if not isinstance(module, Module):
        return []
    names = {p.dtype.name for p in module.parameters()}
    for m in module.modules():
        names.update(dt.name for _, (_, dt) in m._packed_keys().items())
    return sorted(names) if names and names <= {"float32", "float64"} and len(names) == 1 else []


class ModuleClassifier(ClassifierMixin, _ModuleEstimatorBase):
    """A pretrained modulekit classifier: the model returns logits.

    Parameters
    ----------
    module : Module or callable, default=None
        A built Module in eval mode (used as it is, never modified), or a factory returning a
        Module, called in ``fit`` (with ``n_features_in=`` and ``n_outputs=`` (the number of
        logits) when it accepts those keywords).
    checkpoint : str or os.PathLike, default=None
        With a factory: a checkpoint file (``modulekit.load``) loaded into the built model.
    classes : array-like, default=None
        The class label of each logit column. When None, the labels are the sorted unique
        values of ``y`` in ``fit``, or ``0 .. n_logits - 1`` when ``fit`` gets no ``y``.
    proba : {"softmax", "sigmoid"}, default="softmax"
        ``"softmax"``: the model returns one logit per class. ``"sigmoid"``: binary; the model
        returns one logit per row, the log-odds of ``classes_[1]``.
    batch_size : int, default=1024
        Rows per forward call.
    n_threads : int, default=None
        Threads of modulekit's kernels during prediction (None: modulekit's setting).

    Attributes
    ----------
    module_ : Module
    classes_ : ndarray of shape (n_classes,)
    n_outputs_ : int
        Logits per row.
    n_features_in_ : int
    feature_names_in_ : ndarray of str

    Notes
    -----
    ``fit`` does not train: when it gets ``y``, its labels must be among ``classes_``.
    ``decision_function`` returns the logits (binary: one score per row, positive for
    ``classes_[1]``); ``predict`` is the class of the largest logit.
    """

    _y_opts = {"y_numeric": False}

    def __init__(
        self,
        module=None,
        *,
        checkpoint=None,
        classes=None,
        proba="softmax",
        batch_size=1024,
        n_threads=None,
    ):
        super().__init__(module, checkpoint=checkpoint, batch_size=batch_size, n_threads=n_threads)
        self.classes = classes
        self.proba = proba

    def fit(self, X, y=None):
        """Validate the data and the model; set ``classes_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,), default=None
            Labels; optional when ``classes`` is given (nothing is learned from them).

        Returns
        -------
        self : ModuleClassifier
        """
        name = self._name()
        if self.proba not in _PROBA:
            raise ValueError(f"{name}: proba must be one of {_PROBA}, got {self.proba!r}")
        X, y = self._validate_fit(X, y, y_required=self.classes is None)
        if y is not None:
            check_classification_targets(y)
        if self.classes is not None:
            classes = np.asarray(self.classes)
            if classes.ndim != 1 or len(np.unique(classes)) != len(classes):
                raise ValueError(f"{name}: classes must be a 1-D list of distinct labels")
            if y is not None:
                unknown = np.setdiff1d(unique_labels(y), classes)
                if len(unknown):
                    raise ValueError(
                        f"{name}: y has labels {unknown[:5].tolist()} that are not in classes"
                    )
        else:
            classes = unique_labels(y)
        n_logits = 1 if self.proba == "sigmoid" else len(classes)
        if self.proba == "sigmoid" and len(classes) != 2:
            raise ValueError(
                f"{name}: Only binary classification is supported with proba='sigmoid' (one "
                f"logit per row); there are {len(classes)} classes, expected 2 (give classes=, "
                f"or use proba='softmax')"
            )
        self.module_ = self._build_module(
            {"n_features_in": self.n_features_in_, "n_outputs": n_logits}
        )
        width = self._probe_output(X).shape[1]
        if width != n_logits:
            raise ValueError(
                f"{name}: the model returns {width} logits per row, but there are "
                f"{len(classes)} classes (expected {n_logits} with proba={self.proba!r})"
            )
        self.classes_ = classes
        self.n_outputs_ = width
        return self

    def decision_function(self, X):
        """The logits: shape (n_samples,) for two classes (the score of ``classes_[1]``),
        else (n_samples, n_classes)."""
        logits = self._run(self._check_X(X))
        if self.proba == "sigmoid":
            return logits[:, 0]
        if len(self.classes_) == 2:
            return logits[:, 1] - logits[:, 0]
        return logits

    def predict_proba(self, X):
        """Class probabilities, shape (n_samples, n_classes): softmax of the logits, or for
        ``proba="sigmoid"`` ``[1 - s, s]`` with ``s`` the sigmoid of the logit."""
        logits = self._run(self._check_X(X))
        if self.proba == "sigmoid":
            z = logits[:, 0]
            p1 = np.empty_like(z)
            pos = z >= 0
            p1[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
            ez = np.exp(z[~pos])
            p1[~pos] = ez / (1.0 + ez)
            return np.stack([1.0 - p1, p1], axis=1)
        logits -= logits.max(axis=1, keepdims=True)
        np.exp(logits, out=logits)
        logits /= logits.sum(axis=1, keepdims=True)
        return logits

    def predict_log_proba(self, X):
        """Log of :meth:`predict_proba`."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X):
        """The class of the largest logit (sigmoid: ``classes_[1]`` when the logit is > 0)."""
        logits = self._run(self._check_X(X))
        if self.proba == "sigmoid":
            return self.classes_[(logits[:, 0] > 0).astype(np.intp)]
        return self.classes_[np.argmax(logits, axis=1)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.poor_score = True  # fit does not learn from the data
        tags.classifier_tags.multi_class = self.proba != "sigmoid"
        tags.target_tags.required = self.classes is None
        return tags


class ModuleRegressor(RegressorMixin, _ModuleEstimatorBase):
    """A pretrained modulekit regressor.

    Parameters
    ----------
    module : Module or callable, default=None
        A built Module in eval mode (used as it is, never modified), or a factory returning a
        Module, called in ``fit`` (with ``n_features_in=`` and ``n_outputs=`` (the number of
        targets) when it accepts those keywords).
    checkpoint : str or os.PathLike, default=None
        With a factory: a checkpoint file (``modulekit.load``) loaded into the built model.
    batch_size : int, default=1024
        Rows per forward call.
    n_threads : int, default=None
        Threads of modulekit's kernels during prediction (None: modulekit's setting).

    Attributes
    ----------
    module_ : Module
    n_outputs_ : int
        Targets per row.
    n_features_in_ : int
    feature_names_in_ : ndarray of str

    Notes
    -----
    ``fit`` does not train; ``y`` is optional and, when given, must have ``n_outputs_``
    columns. ``predict`` returns float64 (as scikit-learn regressors do): shape
    (n_samples,) for one target, else (n_samples, n_outputs_).
    """

    _y_opts = {"y_numeric": True, "multi_output": True}

    def fit(self, X, y=None):
        """Validate the data and the model.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets), default=None
            Only used for its number of targets (nothing is learned).

        Returns
        -------
        self : ModuleRegressor
        """
        X, y = self._validate_fit(X, y, y_required=False)
        sizes = {"n_features_in": self.n_features_in_}
        if y is not None:
            sizes["n_outputs"] = 1 if y.ndim == 1 else y.shape[1]
        self.module_ = self._build_module(sizes)
        width = self._probe_output(X).shape[1]
        if y is not None and width != sizes["n_outputs"]:
            raise ValueError(
                f"{self._name()}: the model returns {width} outputs per row, but y has "
                f"{sizes['n_outputs']} target(s)"
            )
        self.n_outputs_ = width
        self._single_target = y is None and width == 1 or y is not None and y.ndim == 1
        return self

    def predict(self, X):
        """The model's output as float64: (n_samples,) for one target, else
        (n_samples, n_outputs_)."""
        out = self._run(self._check_X(X)).astype(np.float64, copy=False)
        return out[:, 0] if self._single_target else out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.regressor_tags.poor_score = True  # fit does not learn from the data
        tags.target_tags.required = False
        tags.target_tags.multi_output = True
        return tags
