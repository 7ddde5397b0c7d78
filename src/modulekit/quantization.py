"""int8 quantization: ``quantize_dynamic(model)`` (Linear layers, activations quantized on
every call) and ``quantize_static(model, calibration_data)`` (convolutional networks,
activations quantized with calibrated ranges).

Dynamic
-------

As torch's ``torch.ao.quantization.quantize_dynamic``: every ``Linear`` of the model is
replaced by a layer that stores its weight in int8 and, on each call, quantizes its input to
int8 too, multiplies in int32 and returns float32. The scheme:

* weights: symmetric, one scale per output channel (``scale[n] = max|w[n, :]| / 127``, values
  in [-127, 127], rounded half to even);
* activations: symmetric, one scale per row of the input, computed on every call from that
  row's largest magnitude (so no calibration is needed), after setting aside the row's
  outliers (values over 24x its mean magnitude, at most 4), whose products are added in
  float32;
* the integer products are summed exactly in int32 (AVX512-VNNI ``vpdpbusd`` where the CPU
  has it, portable C elsewhere: bit-identical results); bias and the activation a planner
  fuses are applied to the float32 result.

The error against float32 comes from rounding each weight and each input value to 1/254 of
its row's range: about 1% of the output's scale for random data (docs/api.md,
"Quantization").

Static
------
As torch's eager-mode static quantization with the fbgemm defaults (and onnxruntime's QDQ
``quantize_static`` with MinMax calibration): every ``Conv2d`` (zero padding) is
replaced by a :class:`QuantizedConv2d` (groups 1 or depthwise) with the ``BatchNorm2d`` that
reads it folded in:

* weights: symmetric int8 per output channel, as above;
* activations: asymmetric uint8 per tensor, ``x = (q - zero_point) * scale``, from the
  smallest and largest value each convolution's input took over the calibration data (the
  range always holds 0: ``scale = (max - min) / 255``, ``zero_point = rint(-min / scale)``);
* the integer sums as above; bias, a residual add and a ReLU/ReLU6 in the float32 epilogue.

Called alone, a QuantizedConv2d takes and returns float32 arrays (quantizing its input). In a
compiled plan (``model.compile()``; ``modulekit.compile.rules.quantized_handoff``), a
quantized convolution whose every reader is another quantized convolution stores its result
directly as bytes in that reader's quantization (the residual a reader adds, too), so
activations stay int8 through the convolution stack. ``Linear`` layers are quantized as by
:func:`quantize_dynamic` (a scale per row computed on every call).
"""

from __future__ import annotations

import copy
import itertools
import sys
import warnings

import numpy as np

from modulekit.dtypes import int8
from modulekit.module import Module
from modulekit.nn.modules.quantized import (
    DynamicQuantizedLinear,
    QuantizedConv2d,
    quantizable,
)

__all__ = ["DynamicQuantizedLinear", "QuantizedConv2d", "activation_qparams", "quantize_dynamic",
           "quantize_static"]


def _is_int8(dtype) -> bool:
    if dtype is int8:
        return True
    name = str(getattr(dtype, "name", dtype)).replace("torch.", "")
    return name in ("int8", "qint8")


def quantize_dynamic(model: Module, qconfig_spec=None, dtype=int8, inplace: bool = False):
    """Replace the ``Linear`` layers of ``model`` with :class:`DynamicQuantizedLinear`.

    Parameters
    ----------
    model : Module
    qconfig_spec : None, set of types, or set of str
        Which layers to quantize, as torch's argument: None or ``{modulekit.nn.Linear}`` for
        every ``Linear`` (exactly that class: a subclass may compute something else), or the
        qualified names of the layers to quantize (each must be a ``Linear``).
    dtype : modulekit.int8
        The only one supported (``"int8"``, ``"qint8"`` and ``torch.qint8`` are accepted).
    inplace : bool
        Replace the layers in ``model`` (True) or in a deep copy (False, the default).

    Returns
    -------
    Module
        The quantized model (``model`` itself when ``inplace``).

    Raises
    ------
    ValueError
        An unsupported dtype or layer type, a name that is not a ``Linear`` of the model, or
        a ``Linear`` with forward hooks (register them on the quantized layer instead).
        Nothing is changed then.
    """
    from modulekit.nn.modules.linear import Linear

    if not _is_int8(dtype):
        raise ValueError(f"quantize_dynamic: dtype must be modulekit.int8, got {dtype!r} "
                         "(for float16 or bfloat16 weights use model.to(dtype))")
    names = None
    if qconfig_spec is not None:
        spec = set(qconfig_spec)
        types = {s for s in spec if isinstance(s, type)}
        names = {s for s in spec if isinstance(s, str)}
        other = spec - types - names
        if other or (types and names):
            raise ValueError("quantize_dynamic: qconfig_spec must be a set of layer types or "
                             f"a set of layer names, got {sorted(map(repr, spec))}")
        if types - {Linear}:
            bad = ", ".join(sorted(t.__name__ for t in types - {Linear}))
            raise ValueError(f"quantize_dynamic: only Linear layers can be quantized, not {bad}")
        if types:
            names = None
    found = {name: m for name, m in model.named_modules() if name}
    if names is not None:
        for name in sorted(names):
            if type(found.get(name)) is not Linear:
                what = type(found[name]).__name__ if name in found else "no such module"
                raise ValueError(f"quantize_dynamic: {name!r} is not a Linear of the model "
                                 f"({what})")
    chosen = [name for name, m in found.items()
              if type(m) is Linear and (names is None or name in names)]
    for name in chosen:
        m = found[name]
        if m._has_hooks:
            raise ValueError(f"quantize_dynamic: {name!r} has forward hooks; remove them, "
                             "quantize, and register them on the quantized layer")
    if not inplace:
        model = copy.deepcopy(model)
    replacements = []
    for name in chosen:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        replacements.append((parent, child, DynamicQuantizedLinear.from_float(
            parent.get_submodule(child))))
    for parent, child, layer in replacements:  # built first: an error above changes nothing
        layer.train(parent.get_submodule(child).training)  # the mode of the layer it replaces
        parent.add_module(child, layer)
    return model


def _observe_range(ranges: dict, name: str, x) -> None:
    """Widen ``ranges[name]`` to the finite values of ``x``."""
    arr = np.asarray(x.dequantize() if hasattr(x, "dequantize") else x, dtype=np.float64)
    finite = arr[np.isfinite(arr)]
    if finite.size:
        lo, hi = float(finite.min()), float(finite.max())
        old = ranges.get(name)
        ranges[name] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))


def activation_qparams(lo: float, hi: float) -> tuple[float, int]:
    """``(scale, zero_point)`` of the uint8 quantization of values within [lo, hi] (torch's
    ``MinMaxObserver`` for quint8): the range widened to hold 0, ``scale = (hi - lo) / 255``
    (float32; the smallest normal float32 for an all-zero range), ``zero_point =
    clamp(rint(-lo / scale), 0, 255)``."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = float(np.float32((hi - lo) / 255.0))
    if not scale > 0:
        scale = float(np.finfo(np.float32).tiny)
    zero_point = int(np.clip(np.rint(-lo / scale), 0, 255))
    return scale, zero_point


def _batches(calibration_data):
    """The calibration batches: an array is one batch, a tuple one batch of arguments,
    anything else an iterable of those."""
    if isinstance(calibration_data, (np.ndarray, tuple)):
        return iter([calibration_data])
    try:
        return iter(calibration_data)
    except TypeError:
        raise TypeError(f"quantize_static: calibration_data must be an array, a tuple of "
                        f"arguments or an iterable of those, got "
                        f"{type(calibration_data).__name__}") from None


def _conv_bn_pairs(model: Module, args: tuple, convs: dict) -> dict:
    """``{conv path: batch-norm path}`` for each chosen convolution whose only reader is a
    ``BatchNorm2d`` in eval mode with running statistics, read from the forward captured on
    ``args`` (modulekit.compile's tracer). Empty, with a warning, where the forward cannot be
    captured."""
    from modulekit.compile.tracer import run_capture
    from modulekit.nn.modules.batchnorm import BatchNorm2d

    positions = [("a", i) for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    names = [f"x{i}" for i in range(len(positions))]
    _, cap, _ = run_capture(model, args, {}, positions, names, False)
    if cap is None or cap.broken is not None:
        why = "another thread is capturing" if cap is None else " at ".join(cap.broken)
        warnings.warn(f"quantize_static: the forward cannot be captured ({why}); no "
                      "BatchNorm2d is folded into a convolution", stacklevel=3)
        return {}
    pairs = {}
    for node in cap.graph.nodes:
        path = node.meta.get("path")
        if node.op != "call_module" or path not in convs or len(node.users) != 1:
            continue
        user = node.users[0]
        bn = user.fn if user.op == "call_module" else None
        if (type(bn) is BatchNorm2d and not bn.training and not bn._has_hooks
                and user.args == (node,) and not user.kwargs
                and bn._buffers.get("running_mean") is not None):
            pairs[path] = user.meta["path"]
    return pairs


def quantize_static(model: Module, calibration_data, inplace: bool = False,
                    progress: bool = False):
    """Quantize a convolutional network with calibrated activation ranges.

    Every ``Conv2d`` (exactly that class, groups 1 or depthwise, ``padding_mode='zeros'``, numeric
    padding, no hooks) becomes a :class:`QuantizedConv2d` with the ``BatchNorm2d`` that alone reads
    its output (in the forward as captured on the first batch) folded in and replaced by an
    ``Identity``; every ``Linear`` becomes a :class:`DynamicQuantizedLinear`. Other layers (grouped
    convolutions that are not depthwise among them) stay float32. The scheme is in this module's
    docstring; compile the result (``model.compile()``) to keep the activations in int8 between
    convolutions.

    Parameters
    ----------
    model : Module
        In eval mode (``model.eval()``): batch statistics would be calibrated otherwise.
    calibration_data : array, tuple, or iterable of arrays or tuples
        Representative inputs: each array is one batch ``model(batch)``, each tuple one call
        ``model(*batch)``. A few hundred images is usual.
    inplace : bool
        Quantize ``model`` itself (True) or a deep copy (False, the default).
    progress : bool
        Print a line per calibration batch to standard error.

    Returns
    -------
    Module
        The quantized model.

    Raises
    ------
    ValueError
        A model in training mode, no calibration batch, or a convolution that never ran
        during calibration (its input range is unknown). Nothing is changed then.
    """
    from modulekit.nn.modules.conv import Conv2d
    from modulekit.nn.modules.linear import Identity, Linear

    if model.training:
        raise ValueError("quantize_static: the model is in training mode; call model.eval() "
                         "first (calibration must see the statistics inference uses)")
    work = model if inplace else copy.deepcopy(model)
    convs = {name: m for name, m in work.named_modules()
             if name and type(m) is Conv2d and quantizable(m) and not m._has_hooks}
    linears = {name: m for name, m in work.named_modules()
               if name and type(m) is Linear and not m._has_hooks}
    batches = _batches(calibration_data)
    first = next(batches, None)
    if first is None:
        raise ValueError("quantize_static: calibration_data holds no batch")
    first = first if isinstance(first, tuple) else (first,)
    pairs = _conv_bn_pairs(work, first, convs)
    ranges: dict = {}  # conv name -> its input's range; (name, "out") -> its output's
    handles = []
    for name, m in convs.items():
        handles.append(m.register_forward_pre_hook(
            lambda mod, args, _name=name: _observe_range(ranges, _name, args[0])))
        last = work.get_submodule(pairs[name]) if name in pairs else m
        handles.append(last.register_forward_hook(
            lambda mod, args, out, _name=name: _observe_range(ranges, (_name, "out"), out)))
    count = 0
    try:
        for batch in itertools.chain([first], batches):
            work(*(batch if isinstance(batch, tuple) else (batch,)))
            count += 1
            if progress:
                print(f"quantize_static: calibrated on batch {count}", file=sys.stderr)
    finally:
        for h in handles:
            h.remove()
    missing = sorted(set(convs) - set(ranges))
    if missing:
        raise ValueError(f"quantize_static: these convolutions never ran (or saw no finite "
                         f"value) during calibration, so their input range is unknown: "
                         f"{', '.join(missing)}")
    replacements = []  # built first: an error above or here changes nothing
    for name, conv in convs.items():
        bn_path = pairs.get(name)
        bn = work.get_submodule(bn_path) if bn_path else None
        out_range = ranges.get((name, "out"), (0.0, 0.0))  # (no finite output: any)
        layer = QuantizedConv2d.from_float(conv, activation_qparams(*ranges[name]),
                                           activation_qparams(*out_range), bn=bn)
        replacements.append((name, layer))
        if bn_path:
            replacements.append((bn_path, Identity()))
    replacements += [(name, DynamicQuantizedLinear.from_float(m)) for name, m in linears.items()]
    for path, layer in replacements:
        parent_name, _, child = path.rpartition(".")
        parent = work.get_submodule(parent_name) if parent_name else work
        layer.train(parent.get_submodule(child).training)  # eval, as the model is
        parent.add_module(child, layer)
    return work
