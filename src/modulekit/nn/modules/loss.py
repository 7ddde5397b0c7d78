"""Loss classes of torch.nn, evaluated forward: torch names, constructor signatures
(the deprecated ``size_average`` / ``reduce`` included) and state-dict keys (a class weight is
the buffer ``weight``, ``BCEWithLogitsLoss``'s ``pos_weight`` the buffer ``pos_weight``).
Each ``forward`` calls its :mod:`modulekit.nn.functional` function; errors name the class."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from modulekit._ext._tensor import Tensor
from modulekit.module import Module
from modulekit.nn import _functional_loss as FL
from modulekit.nn.modules.container import ModuleList, Sequential
from modulekit.nn.modules.linear import Linear

__all__ = [
    "AdaptiveLogSoftmaxWithLoss",
    "BCELoss",
    "BCEWithLogitsLoss",
    "CTCLoss",
    "CosineEmbeddingLoss",
    "CrossEntropyLoss",
    "GaussianNLLLoss",
    "HingeEmbeddingLoss",
    "HuberLoss",
    "KLDivLoss",
    "L1Loss",
    "LinearCrossEntropyLoss",
    "MSELoss",
    "MarginRankingLoss",
    "MultiLabelMarginLoss",
    "MultiLabelSoftMarginLoss",
    "MultiMarginLoss",
    "NLLLoss",
    "PoissonNLLLoss",
    "SmoothL1Loss",
    "SoftMarginLoss",
    "TripletMarginLoss",
    "TripletMarginWithDistanceLoss",
]


def _as_buffer(value, cls: str, name: str):
    if value is None:
        return None
    arr = np.asarray(value.numpy() if isinstance(value, Tensor) else value)
    if arr.dtype.kind not in "fiub":
        raise TypeError(f"{cls}: {name} must hold real numbers, got dtype {arr.dtype}")
    if arr.dtype.kind != "f":
        arr = arr.astype(np.float32)
    return Tensor(np.array(arr, order="C"))  # (ascontiguousarray would make 0-d 1-d)


class _Loss(Module):
    _extra_reductions: tuple[str, ...] = ()

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean") -> None:
        super().__init__()
        reduction = FL.legacy_reduction(size_average, reduce, reduction)
        allowed = ("none", "mean", "sum") + self._extra_reductions
        if reduction not in allowed:
            raise ValueError(f"{type(self).__name__}: {reduction!r} is not a valid value for "
                             f"reduction; expected one of {', '.join(map(repr, allowed))}")
        self.reduction = reduction

    def _call(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ValueError, TypeError, IndexError) as exc:
            raise type(exc)(f"{type(self).__name__}: {exc}") from None


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None,
                 reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", _as_buffer(weight, type(self).__name__, "weight"))

    def _weight(self):
        return None if self.weight is None else self.weight.numpy()


class L1Loss(_Loss):
    """Mean absolute error, as ``torch.nn.L1Loss``."""

    def forward(self, input, target):
        return self._call(FL.l1_loss, input, target, reduction=self.reduction)


class MSELoss(_Loss):
    """Mean squared error, as ``torch.nn.MSELoss``."""

    def forward(self, input, target):
        return self._call(FL.mse_loss, input, target, reduction=self.reduction)


class HuberLoss(_Loss):
    """Huber loss with threshold ``delta``, as ``torch.nn.HuberLoss``."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return self._call(FL.huber_loss, input, target, reduction=self.reduction,
                          delta=self.delta)


class SmoothL1Loss(_Loss):
    """Smooth L1 loss with threshold ``beta``, as ``torch.nn.SmoothL1Loss``."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 beta: float = 1.0) -> None:
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return self._call(FL.smooth_l1_loss, input, target, reduction=self.reduction,
                          beta=self.beta)


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of log-probabilities at class indices, as ``torch.nn.NLLLoss``."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean") -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return self._call(FL.nll_loss, input, target, weight=self._weight(),
                          ignore_index=self.ignore_index, reduction=self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    """Cross entropy of logits against class indices or class probabilities, with
    ``weight``, ``ignore_index`` and ``label_smoothing``, as ``torch.nn.CrossEntropyLoss``."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"CrossEntropyLoss: label_smoothing must be in [0, 1], got "
                             f"{label_smoothing}")
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return self._call(FL.cross_entropy, input, target, weight=self._weight(),
                          ignore_index=self.ignore_index, reduction=self.reduction,
                          label_smoothing=self.label_smoothing)


class BCELoss(_WeightedLoss):
    """Binary cross entropy of probabilities, as ``torch.nn.BCELoss``."""

    def forward(self, input, target):
        return self._call(FL.binary_cross_entropy, input, target, weight=self._weight(),
                          reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross entropy of logits (stable), with ``weight`` and ``pos_weight``, as
    ``torch.nn.BCEWithLogitsLoss``."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean",
                 pos_weight=None) -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", _as_buffer(weight, "BCEWithLogitsLoss", "weight"))
        self.register_buffer("pos_weight",
                             _as_buffer(pos_weight, "BCEWithLogitsLoss", "pos_weight"))

    def forward(self, input, target):
        w = None if self.weight is None else self.weight.numpy()
        pw = None if self.pos_weight is None else self.pos_weight.numpy()
        return self._call(FL.binary_cross_entropy_with_logits, input, target, weight=w,
                          reduction=self.reduction, pos_weight=pw)


class KLDivLoss(_Loss):
    """Kullback-Leibler divergence (``reduction`` may also be ``'batchmean'``), as
    ``torch.nn.KLDivLoss``."""

    _extra_reductions = ("batchmean",)

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 log_target: bool = False) -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return self._call(FL.kl_div, input, target, reduction=self.reduction,
                          log_target=self.log_target)


class PoissonNLLLoss(_Loss):
    """Poisson negative log-likelihood, as ``torch.nn.PoissonNLLLoss``."""

    def __init__(self, log_input: bool = True, full: bool = False, size_average=None,
                 eps: float = 1e-8, reduce=None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return self._call(FL.poisson_nll_loss, log_input, target, log_input=self.log_input,
                          full=self.full, eps=self.eps, reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    """Gaussian negative log-likelihood with predicted variances, as
    ``torch.nn.GaussianNLLLoss``."""

    def __init__(self, *, full: bool = False, eps: float = 1e-6,
                 reduction: str = "mean") -> None:
        super().__init__(reduction=reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return self._call(FL.gaussian_nll_loss, input, target, var, full=self.full,
                          eps=self.eps, reduction=self.reduction)


class _MarginLoss(_Loss):
    _default_margin = 0.0

    def __init__(self, margin: float | None = None, size_average=None, reduce=None,
                 reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = self._default_margin if margin is None else margin


class CosineEmbeddingLoss(_MarginLoss):
    """Cosine embedding loss, as ``torch.nn.CosineEmbeddingLoss``."""

    def forward(self, input1, input2, target):
        return self._call(FL.cosine_embedding_loss, input1, input2, target, margin=self.margin,
                          reduction=self.reduction)


class MarginRankingLoss(_MarginLoss):
    """Margin ranking loss, as ``torch.nn.MarginRankingLoss``."""

    def forward(self, input1, input2, target):
        return self._call(FL.margin_ranking_loss, input1, input2, target, margin=self.margin,
                          reduction=self.reduction)


class HingeEmbeddingLoss(_MarginLoss):
    """Hinge embedding loss (default margin 1), as ``torch.nn.HingeEmbeddingLoss``."""

    _default_margin = 1.0

    def forward(self, input, target):
        return self._call(FL.hinge_embedding_loss, input, target, margin=self.margin,
                          reduction=self.reduction)


class SoftMarginLoss(_Loss):
    """Two-class logistic loss ``log(1 + exp(-y x))``, as ``torch.nn.SoftMarginLoss``."""

    def forward(self, input, target):
        return self._call(FL.soft_margin_loss, input, target, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_WeightedLoss):
    """Multi-label one-versus-all logistic loss, as ``torch.nn.MultiLabelSoftMarginLoss``."""

    def forward(self, input, target):
        return self._call(FL.multilabel_soft_margin_loss, input, target, weight=self._weight(),
                          reduction=self.reduction)


class MultiMarginLoss(_WeightedLoss):
    """Multi-class hinge loss (``p`` 1 or 2), as ``torch.nn.MultiMarginLoss``."""

    def __init__(self, p: int = 1, margin: float = 1.0, weight=None, size_average=None,
                 reduce=None, reduction: str = "mean") -> None:
        if p not in (1, 2):
            raise ValueError(f"MultiMarginLoss: only p == 1 and p == 2 are supported, got {p}")
        super().__init__(weight, size_average, reduce, reduction)
        self.p, self.margin = p, margin

    def forward(self, input, target):
        return self._call(FL.multi_margin_loss, input, target, p=self.p, margin=self.margin,
                          weight=self._weight(), reduction=self.reduction)


class MultiLabelMarginLoss(_Loss):
    """Multi-label hinge loss over class-index targets ended by -1, as
    ``torch.nn.MultiLabelMarginLoss``."""

    def forward(self, input, target):
        return self._call(FL.multilabel_margin_loss, input, target, reduction=self.reduction)


class TripletMarginLoss(_Loss):
    """Triplet margin loss with the pairwise ``p``-norm distance, as
    ``torch.nn.TripletMarginLoss``."""

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                 swap: bool = False, size_average=None, reduce=None,
                 reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginLoss: margin must be greater than 0, got {margin}")
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        return self._call(FL.triplet_margin_loss, anchor, positive, negative,
                          margin=self.margin, p=self.p, eps=self.eps, swap=self.swap,
                          reduction=self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    """Triplet margin loss with any distance function (default: pairwise Euclidean), as
    ``torch.nn.TripletMarginWithDistanceLoss``; ``distance_function`` receives the arrays in
    the compute dtype and returns one distance per row."""

    def __init__(self, *, distance_function=None, margin: float = 1.0, swap: bool = False,
                 reduction: str = "mean") -> None:
        super().__init__(reduction=reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginWithDistanceLoss: margin must be greater than 0, "
                             f"got {margin}")
        self.distance_function, self.margin, self.swap = distance_function, margin, swap

    def forward(self, anchor, positive, negative):
        return self._call(FL.triplet_margin_with_distance_loss, anchor, positive, negative,
                          distance_function=self.distance_function, margin=self.margin,
                          swap=self.swap, reduction=self.reduction)


class CTCLoss(_Loss):
    """Connectionist temporal classification loss, as ``torch.nn.CTCLoss``."""

    def __init__(self, blank: int = 0, reduction: str = "mean",
                 zero_infinity: bool = False) -> None:
        super().__init__(reduction=reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return self._call(FL.ctc_loss, log_probs, targets, input_lengths, target_lengths,
                          blank=self.blank, reduction=self.reduction,
                          zero_infinity=self.zero_infinity)


class LinearCrossEntropyLoss(_WeightedLoss):
    """Cross entropy of ``linear(input)`` against ``target``, as
    ``torch.nn.LinearCrossEntropyLoss``: the child ``linear`` (``in_features`` to
    ``num_classes * prod(out_features)``, keys ``linear.weight`` / ``linear.bias``) gives logits
    of shape (N, C, *out_features), then :func:`~modulekit.nn.functional.cross_entropy` with
    ``weight``, ``ignore_index`` (None: -100) and ``label_smoothing``. ``options`` (torch's
    chunking strategy, which bounds training memory) does not change the values and is kept
    only for the signature: the projection runs on the packed GEMM in one piece."""

    def __init__(self, in_features: int, num_classes: int, *, out_features=(),
                 bias: bool = False, device=None, dtype=None, reduction: str = "mean",
                 weight=None, ignore_index: int | None = None, label_smoothing: float = 0.0,
                 options=None) -> None:
        if weight is not None and np.shape(weight) != (num_classes,):
            raise ValueError(f"LinearCrossEntropyLoss: expected weight shape {(num_classes,)}, "
                             f"got {tuple(np.shape(weight))}")
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"LinearCrossEntropyLoss: label_smoothing must be in [0, 1], got "
                             f"{label_smoothing}")
        super().__init__(weight, reduction=reduction)
        self.num_classes = int(num_classes)
        self.out_features = tuple(int(d) for d in out_features)
        self.ignore_index, self.label_smoothing, self.options = (ignore_index, label_smoothing,
                                                                 options)
        width = self.num_classes
        for d in self.out_features:
            width *= d
        self.linear = Linear(in_features, width, bias=bias, device=device, dtype=dtype)

    def forward(self, input, target):
        name = "LinearCrossEntropyLoss"
        x = FL.as_input(input, name)
        if x.ndim not in (1, 2) or (self.out_features and x.ndim != 2):
            raise ValueError(f"{name}: expected an input of shape (in_features,) or (N, "
                             f"in_features) (batched when out_features is set), got {x.shape}")
        logits = self.linear(x)
        logits = logits.reshape(logits.shape[:-1] + (self.num_classes,) + self.out_features)
        ignore = -100 if self.ignore_index is None else self.ignore_index
        return self._call(FL.cross_entropy, logits, target, weight=self._weight(),
                          ignore_index=ignore, reduction=self.reduction,
                          label_smoothing=self.label_smoothing)

    def extra_repr(self) -> str:
        return (f"in_features={self.linear.in_features}, num_classes={self.num_classes}, "
                f"out_features={self.out_features}, bias={self.linear._has_bias()}, "
                f"reduction={self.reduction}, ignore_index={self.ignore_index}, "
                f"label_smoothing={self.label_smoothing}, options={self.options}")


class _ASMoutput(NamedTuple):
    output: np.ndarray
    loss: np.ndarray


def _log_softmax_rows(z: np.ndarray) -> np.ndarray:
    m = z.max(axis=1, keepdims=True)
    m = np.where(np.isneginf(m), 0, m)
    s = z - m
    with np.errstate(divide="ignore"):
        return s - np.log(np.exp(s).sum(axis=1, keepdims=True))


class AdaptiveLogSoftmaxWithLoss(Module):
    """Efficient softmax over many classes (Grave et al.), as
    ``torch.nn.AdaptiveLogSoftmaxWithLoss``: a ``head`` Linear over the shortlist and one
    entry per cluster, and per cluster a ``tail`` of two bias-free Linears (``in_features`` to
    ``in_features // div_value**(i + 1)`` to the cluster's size); state-dict keys as torch's.

    ``forward(input, target)`` returns ``(output, loss)``: each target's log-probability and
    their negated mean; :meth:`log_prob` gives every class's log-probability and
    :meth:`predict` the most likely class.
    """

    def __init__(self, in_features: int, n_classes: int, cutoffs, div_value: float = 4.0,
                 head_bias: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        cutoffs = [int(c) for c in cutoffs]
        if (len(cutoffs) == 0 or cutoffs != sorted(cutoffs) or min(cutoffs) <= 0
                or max(cutoffs) > n_classes - 1 or len(set(cutoffs)) != len(cutoffs)):
            raise ValueError("AdaptiveLogSoftmaxWithLoss: cutoffs should be a sequence of unique, "
                             "positive integers sorted in an increasing order, where each value "
                             f"is between 1 and n_classes-1 ({n_classes - 1}), got {cutoffs}")
        self.in_features, self.n_classes = int(in_features), int(n_classes)
        self.cutoffs = cutoffs + [self.n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        kw = dict(device=device, dtype=dtype)
        self.head = Linear(self.in_features, self.head_size, bias=head_bias, **kw)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hsz = int(self.in_features // (div_value ** (i + 1)))
            osz = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(self.in_features, hsz, bias=False, **kw),
                                        Linear(hsz, osz, bias=False, **kw)))

    def _input(self, input) -> tuple[np.ndarray, bool]:
        x = FL.as_input(input, "AdaptiveLogSoftmaxWithLoss")
        if x.ndim not in (1, 2) or x.shape[-1] != self.in_features:
            raise ValueError(f"AdaptiveLogSoftmaxWithLoss: expected an input of shape "
                             f"({self.in_features},) or (N, {self.in_features}), got {x.shape}")
        return (x, True) if x.ndim == 2 else (x[None], False)

    def forward(self, input, target) -> _ASMoutput:
        name = "AdaptiveLogSoftmaxWithLoss"
        x, batched = self._input(input)
        y = FL.as_indices(target, f"{name}(target)").astype(np.int64)
        if y.ndim != (1 if batched else 0) or (batched and y.shape[0] != x.shape[0]):
            raise ValueError(f"{name}: expected a target of shape ({x.shape[0]},) for input of "
                             f"shape {x.shape[1:] if not batched else x.shape}, got {y.shape}")
        y = y.reshape(-1)
        if ((y < 0) | (y >= self.n_classes)).any():
            bad = y[(y < 0) | (y >= self.n_classes)]
            raise IndexError(f"{name}: target values should be in [0, {self.n_classes - 1}], "
                             f"but values in range [{bad.min()}, {bad.max()}] were found")
        h = np.asarray(self.head(x))
        dt = h.dtype  # float64 for a float64 layer or input, else float32
        head = _log_softmax_rows(h.astype(np.float64))
        gather = y.copy()
        output = np.zeros(y.shape[0], dtype=np.float64)
        for i in range(self.n_clusters):
            lo, hi = self.cutoffs[i], self.cutoffs[i + 1]
            rows = np.nonzero((y >= lo) & (y < hi))[0]
            if rows.size == 0:
                continue
            cluster = _log_softmax_rows(np.asarray(self.tail[i](x[rows]), dtype=np.float64))
            output[rows] = cluster[np.arange(rows.size), y[rows] - lo]
            gather[rows] = self.shortlist_size + i
        output += head[np.arange(y.shape[0]), gather]
        loss = np.asarray((-output).mean(), dtype=dt)
        output = output.astype(dt)
        return _ASMoutput(output if batched else output.reshape(()), loss)

    def log_prob(self, input) -> np.ndarray:
        """Log-probabilities of every class: (N, n_classes), or (n_classes,) for one input."""
        x, batched = self._input(input)
        head = np.asarray(self.head(x))
        dt = head.dtype
        head = _log_softmax_rows(head.astype(np.float64))
        out = np.empty((x.shape[0], self.n_classes), dtype=np.float64)
        out[:, : self.shortlist_size] = head[:, : self.shortlist_size]
        for i in range(self.n_clusters):
            cluster = _log_softmax_rows(np.asarray(self.tail[i](x), dtype=np.float64))
            out[:, self.cutoffs[i]:self.cutoffs[i + 1]] = \
                cluster + head[:, self.shortlist_size + i, None]
        out = out.astype(dt)
        return out if batched else out[0]

    def predict(self, input) -> np.ndarray:
        """The most likely class of each input (int64)."""
        return np.argmax(self.log_prob(input), axis=-1).astype(np.int64)
