"""int8 dynamic quantization: ``quantize_dynamic(model)`` and :class:`DynamicQuantizedLinear`.

As torch's ``torch.ao.quantization.quantize_dynamic``: every ``Linear`` of the model is
replaced by a layer that stores its weight in int8 and, on each call, quantizes its input to
int8 too, multiplies in int32 and returns float32. The scheme:

* weights: symmetric, one scale per output channel (``scale[n] = max|w[n, :]| / 127``, values
  in [-127, 127], rounded half to even);
* activations: symmetric, one scale per row of the input, computed on every call from that
  row's largest magnitude (so no calibration is needed);
* the integer products are summed exactly in int32 (AVX512-VNNI ``vpdpbusd`` where the CPU
  has it, portable C elsewhere: bit-identical results); bias and the activation a planner
  fuses are applied to the float32 result.

The error against float32 comes from rounding each weight and each input value to 1/254 of
its row's range: about 1% of the output's scale for random data (docs/api.md,
"Quantization").
"""

from __future__ import annotations

import copy

from modulekit.dtypes import int8
from modulekit.module import Module
from modulekit.nn.modules.quantized import DynamicQuantizedLinear

__all__ = ["DynamicQuantizedLinear", "quantize_dynamic"]


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
        parent.add_module(child, layer)
    return model
