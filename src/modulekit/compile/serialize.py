"""``save(f)`` of a compiled module and :func:`load_module`: graph + weights, no pickle.

The file is a safetensors file (``modulekit.checkpoint.safetensors``): the tensors are the
state of every module the graph calls (under their paths, as ``state_dict`` names them, packed
weights unpacked) and the graph's constant arrays (``__constants__.<name>``); the safetensors
``__metadata__`` entry ``"modulekit.module"`` holds the graph as JSON::

    {"format": "modulekit.module", "version": 1,
     "modules": {path: {"class": "Conv2d", "args": {...}, "training": false}},
     "inputs": [{"name": "x", "dtype": "float32", "shape": [1, 3, 224, 224]}],
     "exact_shapes": false,
     "nodes": [{"name": ..., "op": ..., "target": ..., "args": [...], "kwargs": {...}}]}

Loading is safe on an untrusted file, to the standard of the checkpoint readers: the
safetensors reader validates the container (a pickle, a torch file or a zip is refused before
anything is read from it); the JSON is parsed with a size cap and no duplicate keys; every
field is type-checked; ops are :data:`~modulekit.compile.graph.OPS`; functions come from a
closed table (NumPy ufuncs and a list of NumPy array functions, Python operators,
``modulekit.nn.functional``), methods from a closed list; module classes from
:data:`LAYERS` (modulekit.nn classes), their constructor arguments validated, and the tensor
shapes each class needs computed from its arguments and checked against the file's tensors
BEFORE any module is built (a hostile size cannot allocate); nodes may only read earlier
nodes. Nothing in the file is executed or imported: it names entries of tables.
"""

from __future__ import annotations

import json
import math
import operator
import os
import re
import tempfile

import numpy as np

from modulekit.checkpoint._common import CheckpointError, FileBuffer
from modulekit.checkpoint.safetensors import read_safetensors, write_safetensors
from modulekit.compile.graph import OPS, Graph, Node
from modulekit.compile.passes import planned
from modulekit.compile.plan import Plan
from modulekit.compile.tracer import _METHODS, CompileError
from modulekit.module import Module

__all__ = ["LAYERS", "load_module", "save_compiled"]

FORMAT = "modulekit.module"
META_KEY = "modulekit.module"
CONST_PREFIX = "__constants__."
MAX_NODES = 100_000
MAX_DEPTH = 16
MAX_ITEMS = 4096
MAX_INT = 1 << 62
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_PATH = re.compile(r"^[A-Za-z0-9_]{1,128}(\.[A-Za-z0-9_]{1,128}){0,31}$")
_DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int8", "uint8",
           "bool")


# ---------------------------------------------------------------------------------------------
# the closed tables
def _mha_args(m):
    """A MultiheadAttention's constructor arguments for a saved plan (rnn: the kdim/vdim,
    add_bias_kv and add_zero_attn options are not in the format yet: refused, never dropped)."""
    if not m._qkv_same_embed_dim or m.bias_k is not None or m.add_zero_attn:
        raise NotImplementedError(
            "save: a MultiheadAttention with kdim/vdim, add_bias_kv or add_zero_attn cannot "
            "be saved in a compiled plan yet; save the model's state_dict() instead")
    return dict(embed_dim=m.embed_dim, num_heads=m.num_heads, bias=m.out_proj._has_bias(),
                batch_first=bool(m.batch_first))


def _layers() -> dict:
    """class name -> (class, arguments of an instance, tensor shapes from the arguments)."""
    from modulekit import nn

    def conv_shapes(a):
        kh, kw = a["kernel_size"]
        s = {"weight": (a["out_channels"], a["in_channels"] // a["groups"], kh, kw)}
        if a["bias"]:
            s["bias"] = (a["out_channels"],)
        return s

    def bn_shapes(a):
        n, s = a["num_features"], {}
        if a["affine"]:
            s["weight"] = (n,)
            if a["bias"]:
                s["bias"] = (n,)
        if a["track_running_stats"]:
            s.update(running_mean=(n,), running_var=(n,), num_batches_tracked=())
        return s

    def ln_shapes(a):
        shape = tuple(a["normalized_shape"])
        if not a["elementwise_affine"]:
            return {}
        return {"weight": shape, **({"bias": shape} if a["bias"] else {})}

    def mha_shapes(a):
        e = a["embed_dim"]
        s = {"in_proj_weight": (3 * e, e), "out_proj.weight": (e, e)}
        if a["bias"]:
            s.update({"in_proj_bias": (3 * e,), "out_proj.bias": (e,)})
        return s

    none = lambda a: {}  # noqa: E731
    return {
        "Linear": (nn.Linear, lambda m: dict(in_features=m.in_features,
                                             out_features=m.out_features,
                                             bias=m._has_bias()),
                   lambda a: {"weight": (a["out_features"], a["in_features"]),
                              **({"bias": (a["out_features"],)} if a["bias"] else {})}),
        "Conv2d": (nn.Conv2d, lambda m: dict(
            in_channels=m.in_channels, out_channels=m.out_channels,
            kernel_size=list(m.kernel_size), stride=list(m.stride),
            padding=m.padding if isinstance(m.padding, str) else list(m.padding),
            dilation=list(m.dilation), groups=m.groups, bias=m._has_bias()), conv_shapes),
        "BatchNorm1d": (nn.BatchNorm1d, lambda m: _bn_args(m), bn_shapes),
        "BatchNorm2d": (nn.BatchNorm2d, lambda m: _bn_args(m), bn_shapes),
        "LayerNorm": (nn.LayerNorm, lambda m: dict(
            normalized_shape=list(m.normalized_shape), eps=m.eps,
            elementwise_affine=bool(m.elementwise_affine), bias=m.bias is not None), ln_shapes),
        "Embedding": (nn.Embedding, lambda m: dict(
            num_embeddings=m.num_embeddings, embedding_dim=m.embedding_dim,
            padding_idx=m.padding_idx),
            lambda a: {"weight": (a["num_embeddings"], a["embedding_dim"])}),
        "MultiheadAttention": (nn.MultiheadAttention, _mha_args, mha_shapes),
        "ReLU": (nn.ReLU, lambda m: dict(inplace=bool(m.inplace)), none),
        "ReLU6": (nn.ReLU6, lambda m: dict(inplace=bool(m.inplace)), none),
        "SiLU": (nn.SiLU, lambda m: dict(inplace=bool(m.inplace)), none),
        "Hardswish": (nn.Hardswish, lambda m: dict(inplace=bool(m.inplace)), none),
        "GELU": (nn.GELU, lambda m: dict(approximate=m.approximate), none),
        "Sigmoid": (nn.Sigmoid, lambda m: {}, none),
        "Tanh": (nn.Tanh, lambda m: {}, none),
        "Identity": (nn.Identity, lambda m: {}, none),
        "Softmax": (nn.Softmax, lambda m: dict(dim=m.dim), none),
        "Dropout": (nn.Dropout, lambda m: dict(p=float(m.p), inplace=bool(m.inplace)), none),
        "Flatten": (nn.Flatten, lambda m: dict(start_dim=m.start_dim, end_dim=m.end_dim), none),
        "MaxPool2d": (nn.MaxPool2d, _maxpool2d_args, none),
        "AvgPool2d": (nn.AvgPool2d, lambda m: dict(
            kernel_size=_jsonable(m.kernel_size), stride=_jsonable(m.stride),
            padding=_jsonable(m.padding), ceil_mode=bool(m.ceil_mode),
            count_include_pad=bool(m.count_include_pad),
            divisor_override=m.divisor_override), none),
        "AdaptiveAvgPool2d": (nn.AdaptiveAvgPool2d,
                              lambda m: dict(output_size=_jsonable(m.output_size)), none),
    }


def _quantized_layers() -> dict:
    """The int8 layers of ``modulekit.quantization`` (their state dict keys as documented
    there: int8 ``weight``, float32 ``weight_scale`` and ``bias``, the static layer's 0-d
    quantization parameters)."""
    from modulekit.nn.modules.quantized import DynamicQuantizedLinear, QuantizedConv2d

    def qconv_shapes(a):
        kh, kw = a["kernel_size"]
        s = {"weight": (a["out_channels"], a["in_channels"] // a["groups"], kh, kw),
             "weight_scale": (a["out_channels"],), "input_scale": (), "input_zero_point": (),
             "scale": (), "zero_point": ()}
        if a["bias"]:
            s["bias"] = (a["out_channels"],)
        return s

    return {
        "DynamicQuantizedLinear": (
            DynamicQuantizedLinear, lambda m: dict(in_features=m.in_features,
                                                   out_features=m.out_features,
                                                   bias=m._has_bias()),
            lambda a: {"weight": (a["out_features"], a["in_features"]),
                       "weight_scale": (a["out_features"],),
                       **({"bias": (a["out_features"],)} if a["bias"] else {})}),
        "QuantizedConv2d": (QuantizedConv2d, lambda m: dict(
            in_channels=m.in_channels, out_channels=m.out_channels,
            kernel_size=list(m.kernel_size), stride=list(m.stride), padding=list(m.padding),
            dilation=list(m.dilation), groups=m.groups, bias=m._has_bias()), qconv_shapes),
    }


def _layers_with_ext() -> dict:
    from modulekit.nn.modules._saveable_ext import layers_ext

    # nn/modules/_saveable_ext.py
    return {**_layers(), **_quantized_layers(), **layers_ext()}
def _maxpool2d_args(m):
    if m.return_indices:  # the format's MaxPool2d has no return_indices (a tuple output)
        raise CompileError("save: MaxPool2d(return_indices=True) cannot be saved: the saved "
                           "format's MaxPool2d returns values only")
    return dict(kernel_size=_jsonable(m.kernel_size), stride=_jsonable(m.stride),
                padding=_jsonable(m.padding), dilation=_jsonable(m.dilation),
                ceil_mode=bool(m.ceil_mode))


def _bn_args(m):
    return dict(num_features=m.num_features, eps=m.eps, momentum=m.momentum,
                affine=bool(m.affine), track_running_stats=bool(m.track_running_stats),
                bias=m.bias is not None)


def _jsonable(v):
    return list(v) if isinstance(v, tuple) else v


#: The layer classes a saved module may build (filled on first use).
LAYERS: dict = {}


def _functions() -> dict:
    from modulekit.nn import functional as F

    table = {}
    for name in dir(np):
        obj = getattr(np, name)
        if isinstance(obj, np.ufunc):
            table[f"numpy.{name}"] = obj
            for method in ("reduce", "accumulate", "outer"):
                table[f"numpy.{name}.{method}"] = getattr(obj, method)
    for name in ("concatenate stack hstack vstack where reshape transpose swapaxes squeeze "
                 "expand_dims zeros_like ones_like full_like empty_like copy mean sum max min "
                 "amax amin prod std var argmax argmin cumsum clip tanh exp sqrt einsum "
                 "tensordot dot split broadcast_to moveaxis take take_along_wise "
                 "ravel repeat tile pad flip round sort argsort").split():
        if hasattr(np, name):
            table[f"numpy.{name}"] = getattr(np, name)
    for name in ("add sub mul truediv floordiv mod pow matmul and_ or_ xor lshift rshift lt "
                 "le gt ge eq ne neg pos abs invert iadd isub imul itruediv ifloordiv imod "
                 "ipow imatmul iand ior ixor").split():
        table[f"operator.{name}"] = getattr(operator, name)
    for name in F.__all__:
        fn = getattr(F, name)
        table[f"modulekit.nn.functional.{name}"] = getattr(fn, "__wrapped__", fn)
    return table


_FUNCTIONS: dict = {}


def _tables():
    if not LAYERS:
        LAYERS.update(_layers_with_ext())
        LAYERS.update(_resample_layers())
    if not _FUNCTIONS:
        _FUNCTIONS.update(_functions())
    return LAYERS, _FUNCTIONS


# ---------------------------------------------------------------------------------------------
# saving
def _module_state(module) -> dict:
    """Every tensor of ``module`` by local dotted name, packed weights unpacked (copies)."""
    return {k: np.array(v) for k, v in module.state_dict(include_packed=True).items()}


def save_compiled(root, graph: Graph, f, **kwargs) -> None:
    """Write ``graph`` (a capture of ``root``) and the state of the modules it calls."""
    if kwargs:
        raise TypeError(f"save() got unexpected keyword argument(s) {sorted(kwargs)}")
    layers, functions = _tables()
    fn_names = {id(v): k for k, v in functions.items()}
    paths = graph.meta.get("paths", {})
    modules: dict = {}
    tensors: dict = {}
    constants: dict = {}

    def need_module(module, why: str) -> str:
        path = paths.get(id(module))
        if not path:
            raise CompileError(f"save: {why} calls a module outside the compiled module's "
                               f"tree ({type(module).__name__})")
        if path in modules:
            return path
        cls = type(module).__name__
        entry = layers.get(cls)
        if entry is None or type(module) is not entry[0]:
            raise CompileError(
                f"save: module {path!r} is a {type(module).__module__}.{type(module).__qualname__}"
                f": only modulekit.nn layers can be saved ({', '.join(sorted(layers))})")
        if getattr(module, "padding_mode", "zeros") != "zeros":  # (conv: not in the format)
            raise CompileError(
                f"save: module {path!r} ({cls}) has padding_mode={module.padding_mode!r}: "
                "only 'zeros' padding can be saved")
        modules[path] = {"class": cls, "args": entry[1](module), "training": module.training}
        for key, value in _module_state(module).items():
            tensors[f"{path}.{key}"] = value
        return path

    def enc(value, depth=0):
        if depth > MAX_DEPTH:
            raise CompileError("save: arguments nested too deeply")
        if isinstance(value, Node):
            return {"node": value.name}
        t = type(value)
        if value is None or t is bool or t is str:
            return value
        if t is int:
            return value
        if t is float:
            return value if math.isfinite(value) else {"float": repr(value)}
        if t is tuple:
            return {"tuple": [enc(v, depth + 1) for v in value]}
        if t is list:
            return [enc(v, depth + 1) for v in value]
        if t is dict:
            if not all(type(k) is str for k in value):
                raise CompileError("save: a dict argument with non-string keys")
            return {"dict": {k: enc(v, depth + 1) for k, v in value.items()}}
        if t is slice:
            return {"slice": [enc(value.start), enc(value.stop), enc(value.step)]}
        if value is Ellipsis:
            return {"ellipsis": True}
        if isinstance(value, np.dtype) or (isinstance(value, type)
                                           and issubclass(value, np.generic)):
            name = np.dtype(value).name
            if name not in _DTYPES:
                raise CompileError(f"save: dtype {name} cannot be saved")
            return {"dtype": name}
        if isinstance(value, np.generic):
            name = value.dtype.name
            if name not in _DTYPES:
                raise CompileError(f"save: a {name} constant cannot be saved")
            key = f"c{len(constants)}"
            constants[key] = np.asarray(value)
            return {"scalar": key}
        from modulekit.module import Module

        if isinstance(value, Module):
            return {"module": need_module(value, "a function argument")}
        arr = getattr(value, "__array__", None)
        if isinstance(value, np.ndarray) or arr is not None:
            a = np.array(value)
            if a.dtype.name not in _DTYPES:
                raise CompileError(f"save: a constant of dtype {a.dtype} cannot be saved")
            key = f"c{len(constants)}"
            constants[key] = a
            return {"const": key}
        raise CompileError(f"save: an argument of type {t.__name__} cannot be saved")

    nodes = []
    inputs = []
    for node in graph.nodes:
        rec = {"name": node.name, "op": node.op, "target": node.target}
        if node.op == "input":
            inputs.append({"name": node.name, "dtype": node.meta["dtype"],
                           "shape": list(node.meta["shape"])})
        elif node.op == "call_module":
            rec["target"] = need_module(node.fn, "the graph")
            rec["hooks"] = False
            if node.meta.get("hooks"):
                raise CompileError(f"save: module {node.target!r} has forward hooks, which "
                                   "are Python functions: remove them before saving")
        elif node.op == "call_function":
            if fn_names.get(id(node.fn)) != node.target:
                raise CompileError(f"save: function {node.target} is not one a saved module "
                                   "may call")
        if node.meta.get("shape") is not None and node.op != "input":
            rec["shape"] = [int(d) for d in node.meta["shape"]]
            rec["dtype"] = node.meta["dtype"]
        rec["args"] = enc(list(node.args))
        rec["kwargs"] = enc(dict(node.kwargs))
        nodes.append(rec)
    if graph.meta.get("namedtuple") is not None:
        raise CompileError("save: forward returns a namedtuple; return a tuple to save it")
    header = {"format": FORMAT, "version": 1, "modules": modules, "inputs": inputs,
              "exact_shapes": not bool(graph.inputs and graph.inputs[0].meta.get("symbolic")),
              "nodes": nodes}
    for key, value in constants.items():
        tensors[CONST_PREFIX + key] = value
    meta = {META_KEY: json.dumps(header, separators=(",", ":"), allow_nan=False)}
    if isinstance(f, (str, os.PathLike)):
        write_safetensors(tensors, os.fspath(f), meta)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "module.safetensors")
        write_safetensors(tensors, path, meta)
        with open(path, "rb") as src:
            f.write(src.read())


# ---------------------------------------------------------------------------------------------
# loading
class LoadedModule(Module):
    """A module loaded by :func:`load_module`: the saved layers under their paths and the
    saved plan as ``forward`` (ndarrays of the saved dtypes and ranks; the saved shapes too
    when the capture was specialised to them). ``graph``, ``inlined_graph``, ``code`` and
    ``code_with_constants`` describe the plan."""

    def forward(self, *inputs):
        expected = self._inputs
        if len(inputs) != len(expected):
            raise TypeError(f"forward takes {len(expected)} array input(s) "
                            f"({', '.join(n.name for n in self._graph.inputs)}), got "
                            f"{len(inputs)}")
        for i, (x, (dtype, shape)) in enumerate(zip(inputs, expected)):
            if type(x) is not np.ndarray or x.dtype != dtype or x.ndim != len(shape) or (
                    self._exact and x.shape != shape):
                got = f"{type(x).__name__} {getattr(x, 'dtype', '')}{list(np.shape(x))}"
                want = f"{dtype} {list(shape) if self._exact else f'with {len(shape)} dims'}"
                raise ValueError(f"input {i}: expected an ndarray of {want}, got {got}")
        return self._plan.run(*inputs)

    @property
    def graph(self) -> str:
        return self._graph.text(inline_scopes=False)

    @property
    def inlined_graph(self) -> str:
        return self._graph.text(inline_scopes=True)

    @property
    def code(self) -> str:
        return self._plan.code

    @property
    def code_with_constants(self):
        return self._plan.code, {"np": np, "operator": operator, **self._plan.constants}


def _bad(path, what) -> CheckpointError:
    return CheckpointError(f"{path}: saved module: {what}")


def load_module(f):
    """Load a module written by a compiled module's ``save(f)`` (a path or a binary file
    object). Returns a :class:`~modulekit.Module` holding the saved layers under their paths
    (``state_dict()`` names them as the original did) whose forward runs the saved plan on
    ndarrays of the saved input signature. Raises ``CheckpointError`` for a file that is not a
    saved module or is corrupt or hostile, before building anything."""
    if isinstance(f, (str, os.PathLike)):
        return _load_path(os.fspath(f))
    data = f.read()
    if not isinstance(data, bytes):
        raise TypeError("load_module: the file object must be opened in binary mode")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "module.safetensors")
        with open(path, "wb") as out:
            out.write(data)
        return _load_path(path, shown="<file object>", mmap=False)


def _load_path(path, shown=None, mmap=True):
    shown = shown or path
    buf = FileBuffer(path, use_mmap=mmap)
    if not (buf.size >= 9 and buf.data[8] == 0x7B):
        raise _bad(shown, "not a saved module (a saved module is a safetensors file; this one "
                          "does not start with a safetensors header)")
    arrays, aliases, metadata = read_safetensors(buf)
    for alias, target in aliases.items():
        arrays[alias] = arrays[target]
    text = metadata.get(META_KEY)
    if not isinstance(text, str):
        raise _bad(shown, f"no {META_KEY!r} entry in the metadata: a plain checkpoint, not a "
                          "saved module (use modulekit.load)")

    def no_dupes(pairs):
        d = {}
        for k, v in pairs:
            if k in d:
                raise _bad(shown, f"duplicate JSON key {k!r}")
            d[k] = v
        return d

    try:
        header = json.loads(text, object_pairs_hook=no_dupes,
                            parse_constant=lambda c: (_ for _ in ()).throw(
                                _bad(shown, f"non-finite number {c} in the graph")))
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise _bad(shown, f"the graph is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT \
            or header.get("version") != 1:
        raise _bad(shown, f"unknown format (expected format {FORMAT!r} version 1)")
    _expect_keys(shown, header, "the header",
                 {"format", "version", "modules", "inputs", "exact_shapes", "nodes"})
    layers, functions = _tables()
    specs = _check_modules(shown, header["modules"], arrays, layers)
    graph, names, constants = _check_graph(shown, header, arrays, specs, functions)
    # everything is validated: build
    return _build(specs, graph, names, arrays, header)


def _expect_keys(path, obj, what, keys, optional=()):
    if not isinstance(obj, dict):
        raise _bad(path, f"{what} must be a JSON object")
    missing = keys - set(obj)
    extra = set(obj) - keys - set(optional)
    if missing or extra:
        raise _bad(path, f"{what}: missing {sorted(missing)}, unexpected {sorted(extra)}")


def _int(path, v, what, lo=0, hi=MAX_INT):
    if type(v) is not int or not lo <= v <= hi:
        raise _bad(path, f"{what} must be an integer in [{lo}, {hi}], got {v!r}"[:300])
    return v


_ARG_TYPES = {
    # per class: argument -> validator(value) -> bool
    "int": lambda v: type(v) is int and 0 <= v <= MAX_INT,
    "pint": lambda v: type(v) is int and 1 <= v <= MAX_INT,
    "bool": lambda v: type(v) is bool,
    "float": lambda v: type(v) in (int, float) and math.isfinite(v),
    "pair": lambda v: (type(v) is int and 0 <= v <= 1 << 16) or (
        type(v) is list and len(v) == 2 and all(type(e) is int and 0 <= e <= 1 << 16
                                                for e in v)),
}


def _pair_or_str(v):
    return v in ("same", "valid") or _ARG_TYPES["pair"](v)


_SIGNATURES = {
    "Linear": {"in_features": "int", "out_features": "int", "bias": "bool"},
    "Conv2d": {"in_channels": "pint", "out_channels": "pint", "kernel_size": "pair",
               "stride": "pair", "padding": _pair_or_str, "dilation": "pair", "groups": "pint",
               "bias": "bool"},
    "BatchNorm1d": {"num_features": "pint", "eps": "float",
                    "momentum": lambda v: v is None or _ARG_TYPES["float"](v), "affine": "bool",
                    "track_running_stats": "bool", "bias": "bool"},
    "LayerNorm": {"normalized_shape": lambda v: type(v) is list and 0 < len(v) <= 8 and all(
        type(e) is int and 1 <= e <= MAX_INT for e in v), "eps": "float",
        "elementwise_affine": "bool", "bias": "bool"},
    "Embedding": {"num_embeddings": "int", "embedding_dim": "int",
                  "padding_idx": lambda v: v is None or (type(v) is int and 0 <= v <= MAX_INT)},
    "MultiheadAttention": {"embed_dim": "pint", "num_heads": "pint", "bias": "bool",
                           "batch_first": "bool"},
    "ReLU": {"inplace": "bool"}, "ReLU6": {"inplace": "bool"}, "SiLU": {"inplace": "bool"},
    "Hardswish": {"inplace": "bool"}, "GELU": {"approximate": lambda v: v in ("none", "tanh")},
    "Sigmoid": {}, "Tanh": {}, "Identity": {},
    "Softmax": {"dim": lambda v: v is None or (type(v) is int and -64 <= v < 64)},
    "Dropout": {"p": lambda v: type(v) in (int, float) and 0 <= v <= 1, "inplace": "bool"},
    "Flatten": {"start_dim": lambda v: type(v) is int and -64 <= v < 64,
                "end_dim": lambda v: type(v) is int and -64 <= v < 64},
    "MaxPool2d": {"kernel_size": "pair", "stride": "pair", "padding": "pair",
                  "dilation": "pair", "ceil_mode": "bool"},
    "AvgPool2d": {"kernel_size": "pair", "stride": "pair", "padding": "pair",
                  "ceil_mode": "bool", "count_include_pad": "bool",
                  "divisor_override": lambda v: v is None or (type(v) is int and 0 < v < 1 << 30)},
    "AdaptiveAvgPool2d": {"output_size": lambda v: (type(v) is int and 0 < v < 1 << 16) or (
        type(v) is list and len(v) == 2 and all(e is None or (type(e) is int and 0 < e < 1 << 16)
                                                for e in v))},
}
_SIGNATURES["BatchNorm2d"] = _SIGNATURES["BatchNorm1d"]
_SIGNATURES["DynamicQuantizedLinear"] = {"in_features": "pint", "out_features": "pint",
                                         "bias": "bool"}
_SIGNATURES["QuantizedConv2d"] = {k: v for k, v in _SIGNATURES["Conv2d"].items()}
_SIGNATURES["QuantizedConv2d"]["padding"] = "pair"


def _signatures_ext():
    from modulekit.nn.modules._saveable_ext import SIGNATURES_EXT

    return SIGNATURES_EXT


_SIGNATURES.update(_signatures_ext())  # nn/modules/_saveable_ext.py
# ---- pooling, resampling, padding and shape layers: stateless, so
# only their constructor arguments are saved; each is validated on load as the others are.
_WINDOW = 1 << 16


def _ints(d, lo=0, hi=_WINDOW, *, none=False):
    """An int, or a list of ``d`` ints (None allowed with ``none``), within [lo, hi]."""
    def ok(v):
        if type(v) is int:
            return lo <= v <= hi
        return type(v) is list and len(v) == d and all(
            (none and e is None) or (type(e) is int and lo <= e <= hi) for e in v)
    return ok


def _or_none(check):
    return lambda v: v is None or check(v)


def _resample_signatures() -> dict:
    modes = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")

    def number(v):
        return type(v) in (int, float) and math.isfinite(v)

    def factor(v):
        if type(v) is list:
            return 0 < len(v) <= 3 and all(type(e) in (int, float) and 0 < e < _WINDOW
                                           for e in v)
        return type(v) in (int, float) and 0 < v < _WINDOW

    sig = {}
    for d in (1, 2, 3):
        w = _ints(d)
        pos = _ints(d, 1)
        if d != 2:  # MaxPool2d has its own entry above
            sig[f"MaxPool{d}d"] = {"kernel_size": pos, "stride": pos, "padding": w,
                                   "dilation": pos, "return_indices": "bool",
                                   "ceil_mode": "bool"}
        sig[f"AdaptiveMaxPool{d}d"] = {"output_size": _ints(d, 1, none=True),
                                       "return_indices": "bool"}
        sig[f"LPPool{d}d"] = {"norm_type": number, "kernel_size": pos,
                              "stride": _or_none(pos), "ceil_mode": "bool"}
        sig[f"MaxUnpool{d}d"] = {"kernel_size": pos, "stride": pos, "padding": w}
        pads = _ints(2 * d, -_WINDOW)
        for name in ("ZeroPad", "ReflectionPad", "ReplicationPad", "CircularPad"):
            sig[f"{name}{d}d"] = {"padding": pads}
        sig[f"ConstantPad{d}d"] = {"padding": pads, "value": number}
    for d in (1, 3):
        sig[f"AvgPool{d}d"] = {"kernel_size": _ints(d, 1), "stride": _ints(d, 1),
                               "padding": _ints(d), "ceil_mode": "bool",
                               "count_include_pad": "bool"}
        sig[f"AdaptiveAvgPool{d}d"] = {"output_size": _ints(d, 1, none=True)}
    sig["AvgPool3d"]["divisor_override"] = _or_none(
        lambda v: type(v) is int and 0 < abs(v) < 1 << 30)
    size = _or_none(lambda v: (type(v) is int and 0 <= v <= _WINDOW) or (
        type(v) is list and 0 < len(v) <= 3 and all(type(e) is int and 0 <= e <= _WINDOW
                                                   for e in v)))
    sig["Upsample"] = {"size": size, "scale_factor": _or_none(factor),
                       "mode": lambda v: v in modes, "align_corners": _or_none(
                           lambda v: type(v) is bool),
                       "recompute_scale_factor": _or_none(lambda v: type(v) is bool)}
    sig["UpsamplingNearest2d"] = sig["UpsamplingBilinear2d"] = {
        "size": size, "scale_factor": _or_none(factor)}
    sig["PixelShuffle"] = {"upscale_factor": "pint"}
    sig["PixelUnshuffle"] = {"downscale_factor": "pint"}
    sig["ChannelShuffle"] = {"groups": "pint"}
    fold = {"kernel_size": _ints(2, 1), "dilation": _ints(2, 1), "padding": _ints(2),
            "stride": _ints(2, 1)}
    sig["Unfold"] = dict(fold)
    sig["Fold"] = {"output_size": _ints(2, 1), **fold}
    sig["Unflatten"] = {"dim": lambda v: type(v) is int and -64 <= v < 64,
                        "unflattened_size": lambda v: type(v) is list and 0 < len(v) <= 64 and all(
                            type(e) is int and -1 <= e <= MAX_INT for e in v)}
    return sig


def _resample_layers() -> dict:
    """class name -> (class, arguments of an instance, no tensors) for the layers above: the
    arguments are the constructor's, read back from the instance's attributes."""
    import inspect

    from modulekit import nn

    def args_of(cls):
        names = [p for p in inspect.signature(cls.__init__).parameters if p != "self"
                 and not p.startswith("_")]

        def args(m):
            out = {}
            for name in names:
                v = getattr(m, name)
                out[name] = list(v) if isinstance(v, tuple) else v
            return out
        return args

    return {name: (getattr(nn, name), args_of(getattr(nn, name)), lambda a: {})
            for name in _RESAMPLE_SIGNATURES}


_RESAMPLE_SIGNATURES = _resample_signatures()
_SIGNATURES.update(_RESAMPLE_SIGNATURES)


def _check_modules(path, modules, arrays, layers):
    if not isinstance(modules, dict) or len(modules) > MAX_NODES:
        raise _bad(path, "'modules' must be a JSON object of at most "
                         f"{MAX_NODES} entries")
    specs = {}
    claimed = set()
    for mpath, rec in modules.items():
        if not _PATH.match(mpath):
            raise _bad(path, f"module path {mpath[:80]!r} is not a dotted name")
        _expect_keys(path, rec, f"module {mpath!r}", {"class", "args", "training"})
        cls = rec["class"]
        if cls not in layers or cls not in _SIGNATURES:
            raise _bad(path, f"module {mpath!r}: class {str(cls)[:80]!r} is not one a saved "
                             f"module may build ({', '.join(sorted(_SIGNATURES))})")
        args, sig = rec["args"], _SIGNATURES[cls]
        _expect_keys(path, args, f"module {mpath!r} arguments", set(sig))
        for name, check in sig.items():
            ok = _ARG_TYPES[check](args[name]) if isinstance(check, str) else check(args[name])
            if not ok:
                raise _bad(path, f"module {mpath!r}: argument {name}={str(args[name])[:80]} is "
                                 "not valid")
        if type(rec["training"]) is not bool:
            raise _bad(path, f"module {mpath!r}: 'training' must be a bool")
        try:
            shapes = layers[cls][2](args)
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            raise _bad(path, f"module {mpath!r}: inconsistent arguments") from None
        for key, shape in shapes.items():
            full = f"{mpath}.{key}"
            arr = arrays.get(full)
            if arr is None:
                raise _bad(path, f"module {mpath!r} ({cls}) needs tensor {full!r}, which the "
                                 "file does not hold")
            if tuple(arr.shape) != tuple(shape):
                raise _bad(path, f"tensor {full!r} has shape {tuple(arr.shape)}, module "
                                 f"{mpath!r} ({cls}) needs {tuple(shape)}")
            claimed.add(full)
        specs[mpath] = (cls, args, rec["training"], shapes)
    for key in arrays:
        if key not in claimed and not key.startswith(CONST_PREFIX):
            raise _bad(path, f"tensor {key!r} belongs to no saved module")
    for mpath in specs:  # a layer may not hold another (a prefix path)
        parent = mpath.rpartition(".")[0]
        while parent:
            if parent in specs:
                raise _bad(path, f"module {mpath!r} is inside module {parent!r}")
            parent = parent.rpartition(".")[0]
    return specs


def _check_graph(path, header, arrays, specs, functions):
    inputs, nodes = header["inputs"], header["nodes"]
    if type(header["exact_shapes"]) is not bool:
        raise _bad(path, "'exact_shapes' must be a bool")
    if not isinstance(inputs, list) or not 0 < len(inputs) <= 64:
        raise _bad(path, "'inputs' must be a list of 1 to 64 inputs")
    if not isinstance(nodes, list) or not 0 < len(nodes) <= MAX_NODES:
        raise _bad(path, f"'nodes' must be a list of 1 to {MAX_NODES} nodes")
    graph = Graph()
    by_name: dict[str, Node] = {}
    names = []
    constants = {}

    def dec(v, depth=0):
        if depth > MAX_DEPTH:
            raise _bad(path, "arguments nested too deeply")
        if v is None or type(v) in (bool, str):
            if type(v) is str and len(v) > 256:
                raise _bad(path, "a string argument is too long")
            return v
        if type(v) is int:
            _int(path, v, "an integer argument", -MAX_INT, MAX_INT)
            return v
        if type(v) is float:
            return v
        if type(v) is list:
            if len(v) > MAX_ITEMS:
                raise _bad(path, "a list argument is too long")
            return [dec(e, depth + 1) for e in v]
        if type(v) is not dict or len(v) != 1:
            raise _bad(path, f"an argument is not a valid encoding: {str(v)[:80]}")
        (kind, x), = v.items()
        if kind == "node":
            if x not in by_name:
                raise _bad(path, f"an argument reads node {str(x)[:80]!r}, which is not an "
                                 "earlier node")
            return by_name[x]
        if kind == "tuple" and type(x) is list and len(x) <= MAX_ITEMS:
            return tuple(dec(e, depth + 1) for e in x)
        if kind == "dict" and type(x) is dict and len(x) <= MAX_ITEMS:
            return {k: dec(e, depth + 1) for k, e in x.items()}
        if kind == "slice" and type(x) is list and len(x) == 3:
            return slice(*(dec(e, depth + 1) for e in x))
        if kind == "ellipsis" and x is True:
            return Ellipsis
        if kind == "float" and x in ("nan", "inf", "-inf"):
            return float(x)
        if kind == "dtype" and x in _DTYPES:
            from modulekit.dtypes import as_dtype

            return as_dtype(x).numpy
        if kind in ("const", "scalar") and type(x) is str:
            arr = arrays.get(CONST_PREFIX + x)
            if arr is None:
                raise _bad(path, f"constant {x[:80]!r} is not in the file")
            return arr[()] if kind == "scalar" else arr
        if kind == "module" and x in specs:
            return _ModuleRef(x)
        raise _bad(path, f"an argument is not a valid encoding: {str(v)[:80]}")

    for i, rec in enumerate(nodes):
        _expect_keys(path, rec, f"node {i}", {"name", "op", "target", "args", "kwargs"},
                     optional=("hooks", "shape", "dtype"))
        name, op, target = rec["name"], rec["op"], rec["target"]
        if type(name) is not str or not _NAME.match(name) or name in by_name:
            raise _bad(path, f"node {i}: name {str(name)[:80]!r} is not a fresh identifier")
        if op not in OPS or op == "call_fused":  # fused steps are planned anew on load
            raise _bad(path, f"node {name!r}: unknown op {str(op)[:80]!r}")
        if type(target) is not str or len(target) > 256:
            raise _bad(path, f"node {name!r}: target must be a short string")
        if (op == "output") != (i == len(nodes) - 1):
            raise _bad(path, "the last node, and only it, must be the output")
        args = dec(rec["args"])
        kwargs = dec(rec["kwargs"])
        if type(args) is not list or type(kwargs) is not dict:
            raise _bad(path, f"node {name!r}: args must be a list and kwargs an object")
        if not all(type(k) is str and _NAME.match(k) for k in kwargs):
            raise _bad(path, f"node {name!r}: keyword names must be identifiers")
        meta, fn = {}, None
        if "shape" in rec or "dtype" in rec:
            shape, dtype = rec.get("shape"), rec.get("dtype")
            if type(shape) is not list or len(shape) > 32 or dtype not in _DTYPES or not all(
                    type(d) is int and 0 <= d <= MAX_INT for d in shape):
                raise _bad(path, f"node {name!r}: bad shape/dtype annotation")
            shape_meta = {"shape": tuple(shape), "dtype": dtype}
        else:
            shape_meta = {}
        if op == "input":
            if i >= len(inputs) or inputs[i].get("name") != name or args or kwargs:
                raise _bad(path, f"node {name!r}: inputs come first, matching 'inputs'")
            spec = inputs[i]
            _expect_keys(path, spec, f"input {name!r}", {"name", "dtype", "shape"})
            if spec["dtype"] not in _DTYPES or not isinstance(spec["shape"], list) or len(
                    spec["shape"]) > 32:
                raise _bad(path, f"input {name!r}: bad dtype or shape")
            for d in spec["shape"]:
                _int(path, d, f"input {name!r} dimension", 0, 1 << 40)
            meta = {"dtype": spec["dtype"], "shape": tuple(spec["shape"])}
            names.append(name)
        elif op == "call_module":
            if target not in specs:
                raise _bad(path, f"node {name!r}: module {target[:80]!r} is not a saved module")
            meta = {"path": target, "module_type": specs[target][0]}
        elif op == "call_function":
            fn = functions.get(target)
            if fn is None:
                raise _bad(path, f"node {name!r}: function {target[:80]!r} is not one a saved "
                                 "module may call")
        elif op == "call_method":
            if target not in _METHODS and target not in ("__getitem__", "__setitem__"):
                raise _bad(path, f"node {name!r}: method {target[:80]!r} is not allowed")
            if not args or not isinstance(args[0], Node):
                raise _bad(path, f"node {name!r}: a method needs a node receiver")
        elif op in ("dim", "getitem"):
            if len(args) != 2 or not isinstance(args[0], Node):
                raise _bad(path, f"node {name!r}: {op} takes (node, index)")
            if op == "dim" and not (args[1] == "size" or type(args[1]) is int):
                raise _bad(path, f"node {name!r}: bad dim index")
        elif op == "output":
            if len(args) != 1:
                raise _bad(path, "the output node takes one argument")
        if op != "input" and i < len(inputs):
            raise _bad(path, "inputs come first, matching 'inputs'")
        node = graph.add(op, target, fn, tuple(args), kwargs, name=name,
                         **{**shape_meta, **meta})
        if node.name != name:
            raise _bad(path, f"node name {name!r} clashes")
        by_name[name] = node
    if len(names) != len(inputs):
        raise _bad(path, "'inputs' and the input nodes differ")
    return graph, names, constants


class _ModuleRef:
    __slots__ = ("path",)

    def __init__(self, path):
        self.path = path


def _build(specs, graph, names, arrays, header):
    layers, _ = _tables()
    root = LoadedModule()
    built = {}
    for mpath, (cls, args, training, _shapes) in specs.items():
        kwargs = {k: (tuple(v) if type(v) is list else v) for k, v in args.items()}
        if cls == "Linear" or cls == "Embedding" or cls == "MultiheadAttention" or cls in (
                "Conv2d", "BatchNorm1d", "BatchNorm2d", "LayerNorm"):
            dtype = None
            for key in _shapes:
                a = arrays[f"{mpath}.{key}"]
                if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
                    dtype = a.dtype.name
                    break
            if dtype is not None:
                kwargs["dtype"] = dtype
        if cls == "LayerNorm":
            kwargs["normalized_shape"] = tuple(kwargs["normalized_shape"])
        try:
            module = layers[cls][0](**kwargs)
            state = {k: arrays[f"{mpath}.{k}"] for k in _shapes}
            if state:
                module.load_state_dict(state)
        except (TypeError, ValueError, NotImplementedError) as exc:
            raise CheckpointError(f"saved module: building {mpath!r} ({cls}): {exc}") from None
        module.train(training)
        built[mpath] = module
        parent = root
        parts = mpath.split(".")
        for part in parts[:-1]:
            child = parent._modules.get(part)
            if child is None:
                child = Module()
                parent.add_module(part, child)
            parent = child
        parent.add_module(parts[-1], module)
    paths = {id(m): p for p, m in built.items()}
    for node in graph.nodes:
        node.args = _resolve(node.args, built)
        node.kwargs = _resolve(node.kwargs, built)
        if node.op == "call_module":
            node.fn = built[node.target]
    graph.meta["paths"] = paths
    plan = Plan(planned(graph, root), names, None, paths)
    root.__dict__["_plan"] = plan
    root.__dict__["_graph"] = graph
    root.__dict__["_inputs"] = [(np.dtype(_np_name(n.meta["dtype"])), n.meta["shape"])
                                for n in graph.inputs]
    root.__dict__["_exact"] = header["exact_shapes"]
    return root


def _np_name(name):
    from modulekit.dtypes import as_dtype

    return as_dtype(name).numpy


def _resolve(value, built):
    if isinstance(value, _ModuleRef):
        return built[value.path]
    if type(value) is tuple:
        return tuple(_resolve(v, built) for v in value)
    if type(value) is list:
        return [_resolve(v, built) for v in value]
    if type(value) is dict:
        return {k: _resolve(v, built) for k, v in value.items()}
    return value


