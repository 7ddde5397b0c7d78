"""What ``Module.save`` needs to write, and ``modulekit.load_module`` to rebuild, the other
layers (activations, norms, embeddings, distances, dropout variants): per class, its
constructor arguments as JSON and the tensor shapes those arguments imply, and a validator per
argument (``modulekit.compile.serialize`` checks a file against them before building anything).
The loss classes are not in the table: a saved plan is an inference graph.
"""

from __future__ import annotations

import math

__all__ = ["layers_ext", "SIGNATURES_EXT"]

_MAX = 1 << 62


def _real(v) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def _opt_real(v) -> bool:
    return v is None or _real(v)


def _dim(v) -> bool:
    return type(v) is int and -64 <= v < 64


def _opt_dim(v) -> bool:
    return v is None or _dim(v)


def _prob(v) -> bool:
    return type(v) in (int, float) and 0 <= v <= 1


def _shape(v) -> bool:
    return type(v) is list and 0 < len(v) <= 8 and all(type(e) is int and 0 <= e <= _MAX
                                                       for e in v)


_BOOL, _PINT, _INT = "bool", "pint", "int"

#: class -> argument -> validator (a name of serialize's _ARG_TYPES, or a callable)
SIGNATURES_EXT = {
    "LeakyReLU": {"negative_slope": _real, "inplace": _BOOL},
    "PReLU": {"num_parameters": _PINT},
    "RReLU": {"lower": _real, "upper": _real, "inplace": _BOOL},
    "ELU": {"alpha": _real, "inplace": _BOOL},
    "CELU": {"alpha": lambda v: _real(v) and v != 0, "inplace": _BOOL},
    "SELU": {"inplace": _BOOL},
    "Hardtanh": {"min_val": _real, "max_val": _real, "inplace": _BOOL},
    "Hardsigmoid": {"inplace": _BOOL},
    "Mish": {"inplace": _BOOL},
    "Softplus": {"beta": _real, "threshold": _real},
    "Softsign": {}, "LogSigmoid": {}, "Tanhshrink": {}, "Softmax2d": {},
    "Hardshrink": {"lambd": _real},
    "Softshrink": {"lambd": lambda v: _real(v) and v >= 0},
    "Threshold": {"threshold": _real, "value": _real, "inplace": _BOOL},
    "LogSoftmax": {"dim": _opt_dim},
    "Softmin": {"dim": _opt_dim},
    "GLU": {"dim": _dim},
    "GroupNorm": {"num_groups": _PINT, "num_channels": _PINT, "eps": _real, "affine": _BOOL,
                  "bias": _BOOL},
    "RMSNorm": {"normalized_shape": _shape, "eps": _opt_real, "elementwise_affine": _BOOL},
    "LocalResponseNorm": {"size": _PINT, "alpha": _real, "beta": _real, "k": _real},
    "Bilinear": {"in1_features": _PINT, "in2_features": _PINT, "out_features": _PINT,
                 "bias": _BOOL},
    "CosineSimilarity": {"dim": _dim, "eps": _real},
    "PairwiseDistance": {"p": _real, "eps": _real, "keepdim": _BOOL},
    "EmbeddingBag": {"num_embeddings": _INT, "embedding_dim": _INT, "max_norm": _opt_real,
                     "norm_type": _real, "mode": lambda v: v in ("sum", "mean", "max"),
                     "include_last_offset": _BOOL,
                     "padding_idx": lambda v: v is None or (type(v) is int and 0 <= v <= _MAX)},
}
for _name in ("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "BatchNorm3d"):
    SIGNATURES_EXT[_name] = {"num_features": _PINT, "eps": _real, "momentum": _opt_real,
                             "affine": _BOOL, "track_running_stats": _BOOL, "bias": _BOOL}
for _name in ("Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"):
    SIGNATURES_EXT[_name] = {"p": _prob, "inplace": _BOOL}
del _name


def _norm_args(m) -> dict:
    return dict(num_features=m.num_features, eps=m.eps, momentum=m.momentum,
                affine=bool(m.affine), track_running_stats=bool(m.track_running_stats),
                bias=m.bias is not None)


def _norm_shapes(a) -> dict:
    n, s = a["num_features"], {}
    if a["affine"]:
        s["weight"] = (n,)
        if a["bias"]:
            s["bias"] = (n,)
    if a["track_running_stats"]:
        s.update(running_mean=(n,), running_var=(n,), num_batches_tracked=())
    return s


def _attrs(*names):
    return lambda m: {n: getattr(m, n) for n in names}


def layers_ext() -> dict:
    """class name -> (class, JSON arguments of an instance, tensor shapes from arguments)."""
    from modulekit import nn

    none = lambda a: {}  # noqa: E731
    sig = SIGNATURES_EXT
    table = {}
    for name, args in sig.items():
        table[name] = (getattr(nn, name), _attrs(*args), none)
    table["PReLU"] = (nn.PReLU, _attrs("num_parameters"),
                      lambda a: {"weight": (a["num_parameters"],)})
    table["GroupNorm"] = (nn.GroupNorm, lambda m: dict(
        num_groups=m.num_groups, num_channels=m.num_channels, eps=m.eps, affine=m.affine,
        bias=m.bias is not None),
        lambda a: {} if not a["affine"] else {"weight": (a["num_channels"],),
                                              **({"bias": (a["num_channels"],)} if a["bias"]
                                                 else {})})
    for name in ("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "BatchNorm3d"):
        table[name] = (getattr(nn, name), _norm_args, _norm_shapes)
    table["RMSNorm"] = (nn.RMSNorm, lambda m: dict(
        normalized_shape=list(m.normalized_shape), eps=m.eps,
        elementwise_affine=m.elementwise_affine),
        lambda a: {"weight": tuple(a["normalized_shape"])} if a["elementwise_affine"] else {})
    table["Bilinear"] = (nn.Bilinear, lambda m: dict(
        in1_features=m.in1_features, in2_features=m.in2_features,
        out_features=m.out_features, bias=m.bias is not None),
        lambda a: {"weight": (a["out_features"], a["in1_features"], a["in2_features"]),
                   **({"bias": (a["out_features"],)} if a["bias"] else {})})
    table["PairwiseDistance"] = (nn.PairwiseDistance, lambda m: dict(
        p=m.norm, eps=m.eps, keepdim=m.keepdim), none)
    table["EmbeddingBag"] = (nn.EmbeddingBag, _attrs(*sig["EmbeddingBag"]),
                             lambda a: {"weight": (a["num_embeddings"], a["embedding_dim"])})
    return table
