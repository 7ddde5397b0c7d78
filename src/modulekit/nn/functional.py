"""Stateless operations on NumPy arrays (the ``torch.nn.functional`` names).

Every function accepts any array-like (ndarray, :class:`~modulekit.Tensor`, an object with the
buffer protocol or ``__array__``) and returns an ``np.ndarray``. Floating inputs compute in
float32 (float16 and bfloat16 are widened) or float64 (float64 inputs); integer and bool inputs
compute in float32; complex, object and string inputs raise ``TypeError``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from modulekit._ext import _conv, _gemm, _ops
from modulekit.compile.tracer import traceable
from modulekit.nn._input import as_input
from modulekit.nn._random import default_generator

__all__ = [
    "linear",
    "relu",
    "relu6",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "softmax",
    "dropout",
    "flatten",
    "conv2d",
    "max_pool2d",
    "avg_pool2d",
    "adaptive_avg_pool2d",
    "hardswish",
]


_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype an op computes in for inputs of ``dtype``: float64 stays, the rest float32."""
    return _F64 if dtype == _F64 else _F32


def as_float_array(x, op: str) -> np.ndarray:
    """``x`` as an ndarray of its compute dtype (float32 or float64)."""
    arr = as_input(x, op)
    return arr.astype(compute_dtype(arr.dtype), copy=False)


def _inplace_target(x, arr: np.ndarray) -> bool:
    return arr is x and arr.dtype in (_F32, _F64) and arr.flags.writeable


@traceable
def linear(input, weight, bias=None) -> np.ndarray:
    """``input @ weight.T + bias`` for ``input`` of shape ``(*, in_features)`` and ``weight``
    of shape ``(out_features, in_features)``. Computes in float64 when ``weight`` is float64,
    else in float32."""
    x = as_input(input, "linear")
    w = as_input(weight, "linear")
    if w.ndim != 2:
        raise ValueError(f"linear: weight must be 2-D (out_features, in_features), got {w.shape}")
    if x.ndim == 0 or x.shape[-1] != w.shape[1]:
        raise ValueError(
            f"linear: input's last dimension {x.shape[-1] if x.ndim else '(scalar)'} does not "
            f"match in_features={w.shape[1]} of weight {w.shape}"
        )
    dt = compute_dtype(w.dtype)
    b = None
    if bias is not None:
        b = as_input(bias, "linear")
        if b.shape != (w.shape[0],):
            raise ValueError(f"linear: bias must have shape ({w.shape[0]},), got {b.shape}")
        b = b.astype(dt, copy=False)
    lead = x.shape[:-1]
    x2 = x.astype(dt, copy=False).reshape(-1, w.shape[1])
    y = _gemm.linear(x2, w.astype(dt, copy=False), b)  # packs the weight for this one call
    return y.reshape(lead + (w.shape[0],))


def _activation(input, name: str, op: str, inplace: bool = False, alpha: float = 0.0,
                beta: float = 0.0) -> np.ndarray:
    """``name(input)`` by the kernels' one activation math (``_ops.activation``): the bits the
    GEMM and convolution epilogues give for the same activation. With ``inplace`` a writable
    float32/float64 ndarray input is overwritten and returned."""
    arr = as_input(input, op)
    if inplace and _inplace_target(input, arr):
        if arr.flags.c_contiguous and arr.flags.aligned:
            return _ops.activation(arr, name, alpha, beta, out=arr)
        arr[...] = _ops.activation(arr, name, alpha, beta)
        return arr
    return _ops.activation(arr, name, alpha, beta)


@traceable
def relu(input, inplace: bool = False) -> np.ndarray:
    """``max(x, 0)`` (NaN kept). With ``inplace=True`` a writable float32/float64 ndarray input
    is overwritten and returned."""
    return _activation(input, "relu", "relu", inplace)


@traceable
def relu6(input, inplace: bool = False) -> np.ndarray:
    """``min(max(x, 0), 6)`` (NaN kept)."""
    return _activation(input, "relu6", "relu6", inplace)


@traceable
def gelu(input, approximate: str = "none") -> np.ndarray:
    """GELU: ``0.5 x (1 + erf(x / sqrt(2)))``, or with ``approximate='tanh'``
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

    float32 results come from the kernels' float32 math, with relative accuracy in the negative
    tail (docs/api.md, "Activation numerics"); float64 results from libm's ``erfc``.
    """
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _activation(input, "gelu" if approximate == "none" else "gelu_tanh", "gelu")


@traceable
def sigmoid(input) -> np.ndarray:
    """``1 / (1 + exp(-x))``, without overflow for large ``|x|``."""
    return _activation(input, "sigmoid", "sigmoid")


@traceable
def silu(input, inplace: bool = False) -> np.ndarray:
    """``x * sigmoid(x)``. With ``inplace=True`` a writable float32/float64 ndarray input is
    overwritten and returned."""
    return _activation(input, "silu", "silu", inplace)


@traceable
def tanh(input) -> np.ndarray:
    """Hyperbolic tangent."""
    return _activation(input, "tanh", "tanh")


def _softmax_dim(ndim: int) -> int:
    warnings.warn(
        "Implicit dimension choice for softmax has been deprecated. Change the call to "
        "include dim=X as an argument.",
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


@traceable
def softmax(input, dim: int | None = None) -> np.ndarray:
    """``exp(x) / sum(exp(x))`` along ``dim`` (torch's legacy choice with a warning when
    ``dim`` is None)."""
    x = as_float_array(input, "softmax")
    if dim is None:
        dim = _softmax_dim(x.ndim)
    ndim = max(x.ndim, 1)
    if not -ndim <= dim < ndim:
        raise IndexError(
            f"softmax: dim {dim} is out of range for an input with {x.ndim} dimension(s)"
        )
    if x.ndim == 0:
        return np.ones_like(x)
    if x.size == 0:  # torch: an empty input gives an empty result, whichever dim
        return np.empty_like(x)
    e = np.exp(x - np.max(x, axis=dim, keepdims=True))
    e /= np.sum(e, axis=dim, keepdims=True)
    return e


@traceable
def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False) -> np.ndarray:
    """Inverted dropout: in training, zero each element with probability ``p`` (NumPy's
    generator, seeded by :func:`modulekit.nn.manual_seed`) and scale the rest by
    ``1 / (1 - p)``; identity (the input array itself) when not training."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    arr = as_input(input, "dropout")
    if not training or p == 0.0:
        return arr
    x = arr.astype(compute_dtype(arr.dtype), copy=False)
    if p == 1.0:
        scale, keep = 0.0, np.zeros(x.shape, dtype=bool)
    else:
        scale, keep = 1.0 / (1.0 - p), default_generator().random(x.shape) >= p
    out = x if inplace and _inplace_target(input, arr) else None
    return np.multiply(x, keep * x.dtype.type(scale), out=out)


@traceable
def flatten(input, start_dim: int = 0, end_dim: int = -1) -> np.ndarray:
    """Merge dimensions ``start_dim..end_dim`` into one (a view when possible)."""
    x = as_input(input, "flatten")
    ndim = max(x.ndim, 1)
    for name, d in (("start_dim", start_dim), ("end_dim", end_dim)):
        if not -ndim <= d < ndim:
            raise IndexError(
                f"flatten: {name}={d} is out of range for an input with {x.ndim} dimension(s)"
            )
    if x.ndim == 0:
        return x.reshape(1)
    start, end = start_dim % ndim, end_dim % ndim
    if start > end:
        raise ValueError("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = x.shape[:start] + (math.prod(x.shape[start : end + 1]),) + x.shape[end + 1 :]
    return x.reshape(shape)


@traceable
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> np.ndarray:
    """``torch.nn.functional.conv2d``: packs ``weight`` for this one call (a layer packs once).

    float64 weights compute in float64, any other floating type in float32.
    """
    x = as_input(input, "conv2d")
    w = as_input(weight, "conv2d(weight)")
    storage = "float64" if w.dtype == _F64 else "float32"
    packed = _conv.pack_conv2d(w, bias, stride, padding, dilation, groups, storage)
    return packed.forward(x)


@traceable
def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False) -> np.ndarray:
    """2-D max pooling over an (N, C, H, W) or (C, H, W) input (NaN propagates), as
    ``torch.nn.functional.max_pool2d``; with ``return_indices=True``, ``(values, indices)``
    (int64 flat positions within each (sample, channel) plane, as torch)."""
    if return_indices:
        return _pool.max_pool(input, 2, kernel_size, stride, padding, dilation, ceil_mode,
                              True, what="max_pool2d")
    return _conv.max_pool2d(as_input(input, "max_pool2d"), kernel_size, stride, padding,
                            dilation, ceil_mode)


@traceable
def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None) -> np.ndarray:
    """2-D average pooling, as ``torch.nn.functional.avg_pool2d``."""
    return _conv.avg_pool2d(as_input(input, "avg_pool2d"), kernel_size, stride, padding,
                            ceil_mode, count_include_pad, divisor_override)


@traceable
def adaptive_avg_pool2d(input, output_size) -> np.ndarray:
    """2-D adaptive average pooling to ``output_size`` (an int, or a pair with None = keep)."""
    return _conv.adaptive_avg_pool2d(as_input(input, "adaptive_avg_pool2d"), output_size)


def matmul(a, b) -> np.ndarray:
    """``a @ b`` on the packed GEMM kernels: 2-D ``(M, K) @ (K, N)`` or batched 3-D (a 2-D
    operand broadcast), any strides; float64 when either operand is float64, else float32
    (float16/bfloat16/integer/bool operands are widened; byte-swapped ones are read in native
    order). ``modulekit.matmul`` is this function (not in ``__all__``: torch.nn.functional has
    no matmul)."""
    x = as_input(a, "matmul(a)")
    y = as_input(b, "matmul(b)")
    if x.dtype.kind in "iub" or y.dtype.kind in "iub":
        dt = _F64 if _F64 in (x.dtype, y.dtype) else _F32
        x, y = x.astype(dt, copy=False), y.astype(dt, copy=False)
    return _gemm.matmul(x, y)


@traceable
def hardswish(input) -> np.ndarray:
    """``x * relu6(x + 3) / 6`` element-wise (torch's operations in torch's order)."""
    return _activation(input, "hardswish", "hardswish")


# ---- layers: activations, norms, embeddings, distances, losses ----------------
# Implemented in modulekit/nn/_functional_act.py, _functional_norm.py, _functional_misc.py
# and _functional_loss.py (each @traceable), re-exported here under torch's names.
from modulekit.nn._functional_act import (  # noqa: E402
    celu,
    elu,
    glu,
    hardshrink,
    hardsigmoid,
    hardtanh,
    leaky_relu,
    log_softmax,
    logsigmoid,
    mish,
    prelu,
    rrelu,
    selu,
    softmin,
    softplus,
    softshrink,
    softsign,
    tanhshrink,
    threshold,
)

__all__ += [
    "celu", "elu", "glu", "hardshrink", "hardsigmoid", "hardtanh", "leaky_relu", "log_softmax",
    "logsigmoid", "mish", "prelu", "rrelu", "selu", "softmin", "softplus", "softshrink",
    "softsign", "tanhshrink", "threshold",
]
from modulekit.nn._functional_loss import (  # noqa: E402
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cosine_embedding_loss,
    cross_entropy,
    ctc_loss,
    gaussian_nll_loss,
    hinge_embedding_loss,
    huber_loss,
    kl_div,
    l1_loss,
    margin_ranking_loss,
    mse_loss,
    multi_margin_loss,
    multilabel_margin_loss,
    multilabel_soft_margin_loss,
    nll_loss,
    poisson_nll_loss,
    smooth_l1_loss,
    soft_margin_loss,
    triplet_margin_loss,
    triplet_margin_with_distance_loss,
)

__all__ += [
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_embedding_loss",
    "cross_entropy", "ctc_loss", "gaussian_nll_loss", "hinge_embedding_loss", "huber_loss",
    "kl_div", "l1_loss", "margin_ranking_loss", "mse_loss", "multi_margin_loss",
    "multilabel_margin_loss", "multilabel_soft_margin_loss", "nll_loss", "poisson_nll_loss",
    "smooth_l1_loss", "soft_margin_loss", "triplet_margin_loss",
    "triplet_margin_with_distance_loss",
]
from modulekit.nn._functional_norm import (  # noqa: E402
    batch_norm,
    group_norm,
    instance_norm,
    layer_norm,
    local_response_norm,
    normalize,
    rms_norm,
)

__all__ += [
    "batch_norm", "group_norm", "instance_norm", "layer_norm", "local_response_norm",
    "normalize", "rms_norm",
]
from modulekit.nn._functional_misc import (  # noqa: E402
    alpha_dropout,
    bilinear,
    cosine_similarity,
    dropout1d,
    dropout2d,
    dropout3d,
    embedding,
    embedding_bag,
    feature_alpha_dropout,
    one_hot,
    pairwise_distance,
)

__all__ += [
    "alpha_dropout", "bilinear", "cosine_similarity", "dropout1d", "dropout2d", "dropout3d",
    "embedding", "embedding_bag", "feature_alpha_dropout", "one_hot", "pairwise_distance",
]


# ---- pooling, resampling, padding and shape ops (nn/_pool.py, nn/_interp.py, nn/_shape.py)
from modulekit.nn import _interp, _pool, _shape  # noqa: E402


def _fn(impl, name: str, doc: str):
    """``impl`` under torch's name ``name``, traceable (a capture records one call)."""
    impl.__name__ = impl.__qualname__ = name
    impl.__module__ = __name__
    impl.__doc__ = doc
    return traceable(impl)


def _max_pool_fn(d: int):
    def impl(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
             return_indices=False):
        return _pool.max_pool(input, d, kernel_size, stride, padding, dilation, ceil_mode,
                              return_indices, what=f"max_pool{d}d")
    return _fn(impl, f"max_pool{d}d",
               f"{d}-D max pooling as ``torch.nn.functional.max_pool{d}d`` (NaN propagates); "
               "with ``return_indices=True``, ``(values, indices)``: int64 flat positions "
               "within each (sample, channel) plane of the input.")


def _avg_pool_fn(d: int):
    if d == 1:
        def impl(input, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):
            return _pool.avg_pool(input, 1, kernel_size, stride, padding, ceil_mode,
                                  count_include_pad, None, what="avg_pool1d")
    else:
        def impl(input, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
            return _pool.avg_pool(input, d, kernel_size, stride, padding, ceil_mode,
                                  count_include_pad, divisor_override, what=f"avg_pool{d}d")
    return _fn(impl, f"avg_pool{d}d",
               f"{d}-D average pooling as ``torch.nn.functional.avg_pool{d}d``.")


def _adaptive_avg_fn(d: int):
    def impl(input, output_size):
        return _pool.adaptive_avg_pool(input, d, output_size, what=f"adaptive_avg_pool{d}d")
    return _fn(impl, f"adaptive_avg_pool{d}d",
               f"{d}-D adaptive average pooling to ``output_size`` (None keeps a size).")


def _adaptive_max_fn(d: int):
    def impl(input, output_size, return_indices=False):
        return _pool.adaptive_max_pool(input, d, output_size, return_indices,
                                       what=f"adaptive_max_pool{d}d")
    return _fn(impl, f"adaptive_max_pool{d}d",
               f"{d}-D adaptive max pooling to ``output_size``; ``(values, indices)`` with "
               "``return_indices=True``.")


def _lp_pool_fn(d: int):
    def impl(input, norm_type, kernel_size, stride=None, ceil_mode=False):
        return _pool.lp_pool(input, d, norm_type, kernel_size, stride, ceil_mode,
                             what=f"lp_pool{d}d")
    return _fn(impl, f"lp_pool{d}d",
               f"{d}-D power-average pooling: ``(sum of x ** norm_type over the window) ** "
               "(1 / norm_type)``.")


def _max_unpool_fn(d: int):
    def impl(input, indices, kernel_size, stride=None, padding=0, output_size=None):
        return _pool.max_unpool(input, indices, d, kernel_size, stride, padding, output_size,
                                what=f"max_unpool{d}d")
    return _fn(impl, f"max_unpool{d}d",
               f"Partial inverse of ``max_pool{d}d``: zeros with each value at its index.")


max_pool1d, max_pool3d = _max_pool_fn(1), _max_pool_fn(3)
avg_pool1d, avg_pool3d = _avg_pool_fn(1), _avg_pool_fn(3)
adaptive_avg_pool1d, adaptive_avg_pool3d = _adaptive_avg_fn(1), _adaptive_avg_fn(3)
adaptive_max_pool1d, adaptive_max_pool2d, adaptive_max_pool3d = (
    _adaptive_max_fn(1), _adaptive_max_fn(2), _adaptive_max_fn(3))
lp_pool1d, lp_pool2d, lp_pool3d = _lp_pool_fn(1), _lp_pool_fn(2), _lp_pool_fn(3)
max_unpool1d, max_unpool2d, max_unpool3d = (
    _max_unpool_fn(1), _max_unpool_fn(2), _max_unpool_fn(3))


def _max_pool_with_indices_fn(d: int):
    def impl(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
             return_indices=False):
        return _pool.max_pool(input, d, kernel_size, stride, padding, dilation, ceil_mode,
                              True, what=f"max_pool{d}d_with_indices")
    return _fn(impl, f"max_pool{d}d_with_indices",
               f"``max_pool{d}d`` returning ``(values, indices)`` whatever ``return_indices``"
               " says, as torch's.")


def _adaptive_max_with_indices_fn(d: int):
    def impl(input, output_size, return_indices=False):
        return _pool.adaptive_max_pool(input, d, output_size, True,
                                       what=f"adaptive_max_pool{d}d_with_indices")
    return _fn(impl, f"adaptive_max_pool{d}d_with_indices",
               f"``adaptive_max_pool{d}d`` returning ``(values, indices)``, as torch's.")


max_pool1d_with_indices, max_pool2d_with_indices, max_pool3d_with_indices = (
    _max_pool_with_indices_fn(1), _max_pool_with_indices_fn(2), _max_pool_with_indices_fn(3))
(adaptive_max_pool1d_with_indices, adaptive_max_pool2d_with_indices,
 adaptive_max_pool3d_with_indices) = (_adaptive_max_with_indices_fn(1),
                                      _adaptive_max_with_indices_fn(2),
                                      _adaptive_max_with_indices_fn(3))


def _fractional_max_pool(*args, **kwargs):
    raise NotImplementedError(
        "fractional_max_pool: not supported: its windows are drawn at random on every call "
        "(torch's random samples), so no inference result is reproducible")


fractional_max_pool2d = _fn(_fractional_max_pool, "fractional_max_pool2d",
                            "Refused: random pooling windows (see docs/api.md).")


def _fractional_max_pool3d(*args, **kwargs):
    return _fractional_max_pool(*args, **kwargs)


fractional_max_pool3d = _fn(_fractional_max_pool3d, "fractional_max_pool3d",
                            "Refused: random pooling windows (see docs/api.md).")


@traceable
def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False) -> np.ndarray:
    """Resample an ``(N, C, L)``, ``(N, C, H, W)`` or ``(N, C, D, H, W)`` input to ``size`` or
    by ``scale_factor``, as ``torch.nn.functional.interpolate``: ``mode`` nearest,
    nearest-exact, linear (3-D), bilinear / bicubic (4-D), trilinear (5-D) or area;
    ``align_corners`` for the interpolating modes; ``antialias`` for bilinear and bicubic.
    float32 4-D nearest and bilinear run vectorised C kernels."""
    return _interp.interpolate(input, size, scale_factor, mode, align_corners,
                               recompute_scale_factor, antialias)


@traceable
def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated torch alias of :func:`interpolate`."""
    return _interp.interpolate(input, size, scale_factor, mode, align_corners, what="upsample")


@traceable
def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated torch alias: ``interpolate(..., mode='nearest')``."""
    return _interp.interpolate(input, size, scale_factor, "nearest", what="upsample_nearest")


@traceable
def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated torch alias: ``interpolate(..., mode='bilinear', align_corners=True)``."""
    return _interp.interpolate(input, size, scale_factor, "bilinear", True,
                               what="upsample_bilinear")


@traceable
def pad(input, pad, mode="constant", value=None) -> np.ndarray:
    """Pad (or, with negative amounts, crop) ``input`` as ``torch.nn.functional.pad``: ``pad``
    lists (left, right) pairs from the last dimension backwards; modes constant (any
    dimension, ``value`` or 0), reflect, replicate, circular (the last 1-3 dimensions of a 2-D
    to 5-D input). Keeps floating dtypes; integer and bool inputs give float32."""
    return _shape.pad(input, pad, mode, value)


@traceable
def pixel_shuffle(input, upscale_factor) -> np.ndarray:
    """``(*, C r^2, H, W) -> (*, C, H r, W r)``."""
    return _shape.pixel_shuffle(input, upscale_factor)


@traceable
def pixel_unshuffle(input, downscale_factor) -> np.ndarray:
    """``(*, C, H r, W r) -> (*, C r^2, H, W)``."""
    return _shape.pixel_unshuffle(input, downscale_factor)


@traceable
def channel_shuffle(input, groups) -> np.ndarray:
    """Interleave the channels of ``groups`` groups (ShuffleNet)."""
    return _shape.channel_shuffle(input, groups)


native_channel_shuffle = channel_shuffle


@traceable
def unfold(input, kernel_size, dilation=1, padding=0, stride=1) -> np.ndarray:
    """im2col: ``(N, C, H, W) -> (N, C kh kw, L)`` sliding blocks."""
    return _shape.unfold(input, kernel_size, dilation, padding, stride)


@traceable
def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1) -> np.ndarray:
    """col2im: ``(N, C kh kw, L) -> (N, C, H, W)``, overlapping values summed."""
    return _shape.fold(input, output_size, kernel_size, dilation, padding, stride)


__all__ += [  # noqa: PLE0604
    "max_pool1d", "max_pool3d", "avg_pool1d", "avg_pool3d", "adaptive_avg_pool1d",
    "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
    "lp_pool1d", "lp_pool2d", "lp_pool3d", "max_unpool1d", "max_unpool2d", "max_unpool3d",
    "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
    "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices",
    "adaptive_max_pool3d_with_indices",
    "fractional_max_pool2d", "fractional_max_pool3d", "interpolate", "upsample",
    "upsample_nearest", "upsample_bilinear", "pad", "pixel_shuffle", "pixel_unshuffle",
    "channel_shuffle", "native_channel_shuffle", "unfold", "fold",
]
# ---- convolution (conv1d, conv3d, conv_transpose1d/2d/3d: modulekit/nn/modules/conv_nd.py)
__all__ += ["conv1d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"]


@traceable
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> np.ndarray:
    """``torch.nn.functional.conv1d`` over an (N, C_in, L) or (C_in, L) input; ``weight``
    (C_out, C_in/groups, K), ``padding`` an int, a 1-tuple, 'valid' or 'same'. Packs
    ``weight`` for this one call (a :class:`~modulekit.nn.Conv1d` packs once); float64
    weights compute in float64, any other floating type in float32."""
    from modulekit.nn.modules.conv_nd import conv_functional

    return conv_functional(1, input, weight, bias, stride, padding, dilation, groups)


@traceable
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> np.ndarray:
    """``torch.nn.functional.conv3d`` over an (N, C_in, D, H, W) or (C_in, D, H, W) input;
    ``weight`` (C_out, C_in/groups, KD, KH, KW). See :func:`conv1d`."""
    from modulekit.nn.modules.conv_nd import conv_functional

    return conv_functional(3, input, weight, bias, stride, padding, dilation, groups)


@traceable
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1) -> np.ndarray:
    """``torch.nn.functional.conv_transpose1d`` over an (N, C_in, L) or (C_in, L) input;
    ``weight`` (C_in, C_out/groups, K); ``output_padding`` smaller than the stride or the
    dilation. Packs ``weight`` into its stride phases for this one call."""
    from modulekit.nn.modules.conv_nd import conv_transpose_functional

    return conv_transpose_functional(1, input, weight, bias, stride, padding, output_padding,
                                     groups, dilation)


@traceable
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1) -> np.ndarray:
    """``torch.nn.functional.conv_transpose2d``; ``weight`` (C_in, C_out/groups, KH, KW).
    See :func:`conv_transpose1d`."""
    from modulekit.nn.modules.conv_nd import conv_transpose_functional

    return conv_transpose_functional(2, input, weight, bias, stride, padding, output_padding,
                                     groups, dilation)


@traceable
def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1) -> np.ndarray:
    """``torch.nn.functional.conv_transpose3d``; ``weight`` (C_in, C_out/groups, KD, KH, KW).
    See :func:`conv_transpose1d`."""
    from modulekit.nn.modules.conv_nd import conv_transpose_functional

    return conv_transpose_functional(3, input, weight, bias, stride, padding, output_padding,
                                     groups, dilation)
# ---- transformers (attention)
__all__ += ["scaled_dot_product_attention"]


@traceable
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None,
                                 enable_gqa: bool = False) -> np.ndarray:
    """``softmax(query @ key^T * scale + mask) @ value``, as
    ``torch.nn.functional.scaled_dot_product_attention``, on the fused attention kernel.

    Parameters
    ----------
    query : array (..., L, E)
    key : array (..., S, E)
    value : array (..., S, Ev)
        The same leading dimensions (with ``enable_gqa``, key/value may have fewer heads,
        dimension -3, a divisor of query's: each serves consecutive query heads, as torch).
    attn_mask : array or None
        Broadcastable to ``(..., L, S)``: bool (True = the position takes part) or floating
        (added to the scaled scores).
    dropout_p : float
        Must be 0: inference applies no dropout (torch would drop even in eval mode).
    is_causal : bool
        Query ``i`` attends to keys ``0..i`` (the top-left aligned lower triangle); cannot be
        combined with ``attn_mask``.
    scale : float, optional
        Defaults to ``1 / sqrt(E)``.

    Returns
    -------
    ndarray (..., L, Ev): float64 when any input is float64, else float32.
    """
    q = as_float_array(query, "scaled_dot_product_attention(query)")
    k = as_float_array(key, "scaled_dot_product_attention(key)")
    v = as_float_array(value, "scaled_dot_product_attention(value)")
    if dropout_p:
        raise ValueError(
            f"scaled_dot_product_attention: dropout_p must be 0 for inference, got {dropout_p}"
        )
    if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise ValueError(
            "scaled_dot_product_attention: query, key and value must have the same number of "
            f"dimensions (at least 2), got shapes {q.shape}, {k.shape}, {v.shape}"
        )
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        hq, hk = q.shape[-3], k.shape[-3]
        if hk == 0 or hq % hk or v.shape[-3] != hk:
            raise ValueError(
                f"scaled_dot_product_attention: with enable_gqa, key/value heads ({hk}, "
                f"{v.shape[-3]}) must be equal and divide query heads ({hq})"
            )
        k = np.repeat(k, hq // hk, axis=-3)
        v = np.repeat(v, hq // hk, axis=-3)
    lead, (L, E), S, Ev = q.shape[:-2], q.shape[-2:], k.shape[-2], v.shape[-1]
    if k.shape[:-2] != lead or v.shape[:-2] != lead or k.shape[-1] != E or v.shape[-2] != S:
        raise ValueError(
            "scaled_dot_product_attention: expected query (..., L, E), key (..., S, E), value "
            f"(..., S, Ev) with the same leading dimensions, got {q.shape}, {k.shape}, {v.shape}"
        )
    dt = _F64 if _F64 in (q.dtype, k.dtype, v.dtype) else _F32
    n = math.prod(lead)
    mask = None
    if is_causal:
        if attn_mask is not None:
            raise ValueError("scaled_dot_product_attention: is_causal=True cannot be combined "
                             "with attn_mask")
        mask = np.triu(np.full((L, S), -np.inf, dtype=dt), 1)
    elif attn_mask is not None:
        m = as_input(attn_mask, "scaled_dot_product_attention(attn_mask)")
        if m.dtype == np.bool_:
            mask = np.where(m, dt.type(0), dt.type(-np.inf))
        elif m.dtype.kind == "f":
            mask = m.astype(dt, copy=False)
        else:
            raise TypeError("scaled_dot_product_attention: attn_mask must be bool or floating, "
                            f"got dtype {m.dtype}")
    if mask is not None:
        try:
            mask = np.broadcast_to(mask, lead + (L, S))
        except ValueError:
            raise ValueError(
                f"scaled_dot_product_attention: attn_mask of shape {np.shape(mask)} cannot be "
                f"broadcast to {lead + (L, S)}"
            ) from None
        mask = mask.reshape(n, 1, L, S)
    from modulekit._ext import _ops

    out = _ops.attention(
        q.astype(dt, copy=False).reshape(n, L, E), k.astype(dt, copy=False).reshape(n, S, E),
        v.astype(dt, copy=False).reshape(n, S, Ev), 1, mask,
        1.0 / math.sqrt(E) if scale is None and E else (1.0 if scale is None else float(scale)),
    )[0]
    return out.reshape(lead + (L, Ev))
