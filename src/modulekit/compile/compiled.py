"""``Module.compile()``: the compiled call, its guards and its cache of plans.

A compiled module's ``__call__`` (``Module.__call__`` hands it to :class:`CompiledCall`) runs
its forward hooks as in eager mode around the plan chosen for the call's input signature:

* the **signature** of a call: for each ndarray argument its dtype and number of dimensions,
  for each other argument its type and value (None, bool, int, float, str, tuples of them);
  any other argument (a Tensor, a list, a torch tensor) runs the call eagerly;
* the **shapes** are symbolic: a plan reads the shape values it needs at run time (``dim``
  nodes), so a new batch size or sequence length reuses the plan, unless the capture
  specialised (forward used a shape value as a Python value: ``if x.shape[0] > 1``,
  ``np.zeros(x.shape[0])``, ``range(n)``): that plan is kept for the exact input shapes;
* the **structure epoch** (``modulekit.module.structure_epoch``): any change to a module of the
  tree, a hook, the training flag, ``load_state_dict``, ``to``/casts, ``initialize`` drops every
  plan, and the next call captures again. Not seen (as for every epoch user): writes into the
  registries' dicts or into a tensor's memory behind the Module API, and changes to globals
  forward reads;
* the **cache** keeps ``cache_size_limit`` (default 8) signatures, least recently used dropped
  first; a signature that comes back after it was dropped is captured again.

A forward that cannot be captured for a signature runs eagerly for it, with a
``CompileWarning`` naming the reason and the source line (``fullgraph=True``: a
:class:`~modulekit.compile.tracer.CompileError` instead).
"""

from __future__ import annotations

import inspect
import warnings
from collections import OrderedDict

import numpy as np

from modulekit import module as _module
from modulekit._ext._arena import call as _arena_call
from modulekit.compile.graph import Graph
from modulekit.compile.passes import planned
from modulekit.compile.plan import Plan
from modulekit.compile.tracer import (
    PURE_METHODS,
    PURE_OPERATORS,
    CompileError,
    run_capture,
)

__all__ = ["CompiledCall", "CompileWarning", "compile_module"]

_SIMPLE = (type(None), bool, int, float, str)
_OPTIONS = {"fullgraph", "dynamic", "cache_size_limit", "backend", "mode", "options",
            "disable"}
#: consecutive captures during which the module tree changed before giving up on capturing
_MAX_UNSTABLE = 3


class CompileWarning(UserWarning):
    """A compiled module runs eagerly for some inputs; the message says why and where."""


def compile_module(module, *args, **kwargs) -> None:
    """``module.compile(**options)``: see :class:`CompiledCall`."""
    if args:
        raise TypeError(
            f"compile() takes keyword options only (got {len(args)} positional argument(s)); "
            f"accepted: {sorted(_OPTIONS)}"
        )
    unknown = set(kwargs) - _OPTIONS
    if unknown:
        raise TypeError(f"compile() got unknown option(s) {sorted(unknown)}; accepted: "
                        f"{sorted(_OPTIONS)}")
    limit = kwargs.get("cache_size_limit", 8)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"compile(): cache_size_limit must be a positive int, got {limit!r}")
    d = module.__dict__
    if kwargs.get("disable"):
        d.pop("_compiled", None)
        module._refresh_hooks_flag()
        return
    d["_compiled"] = CompiledCall(
        module, fullgraph=bool(kwargs.get("fullgraph", False)),
        dynamic=kwargs.get("dynamic", True) is not False, cache_size_limit=limit,
    )
    module._refresh_hooks_flag()  # scoped: Module.__call__ looks at _compiled


class _Entry:
    __slots__ = ("plan", "graph", "reason", "exact", "params")

    def __init__(self, plan, graph, reason, exact, params):
        self.plan, self.graph, self.reason, self.exact, self.params = (
            plan, graph, reason, exact, params)


def _pure(node) -> bool:
    op = node.op
    if op in ("dim", "getitem"):
        return True
    if op == "call_method":
        return node.target in PURE_METHODS
    if op == "call_function":
        if node.target in PURE_OPERATORS:
            return True
        if node.target.startswith("numpy.") and "out" not in node.kwargs \
                and not node.target.endswith(".at"):
            return True
    return False


_REAL = "fiub"  # the dtype kinds the layers read (modulekit.nn._input.as_input)
_UNUSUAL = object()


def _usual(call, args, kwargs):
    """A call with a byte-swapped array (run on a native-order copy, as every layer reads it:
    the same values, so the same plan and bits) or an array that is not of real numbers
    (bfloat16 included: run eagerly, where the layers take it or refuse it naming
    themselves)."""
    def native(v):
        if type(v) is np.ndarray and v.dtype.kind in _REAL and not v.dtype.isnative:
            return v.astype(v.dtype.newbyteorder("="))
        return v

    args = tuple(native(v) for v in args)
    kwargs = {k: native(v) for k, v in kwargs.items()}
    if any(type(v) is np.ndarray and v.dtype.kind not in _REAL
           for v in (*args, *kwargs.values())):
        return call.module.forward(*args, **kwargs)
    return call.forward(*args, **kwargs)


class CompiledCall:
    """The compiled ``__call__`` of one module (see the module docstring)."""

    def __init__(self, module, fullgraph: bool, dynamic: bool, cache_size_limit: int) -> None:
        self.module = module
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.limit = cache_size_limit
        self.cache: OrderedDict = OrderedDict()
        self.epoch = -1
        self.last: _Entry | None = None
        self.unstable = 0
        self.captures = 0
        #: ``observer(call, plan, arrays) -> output`` runs the plans instead of ``plan.run``
        #: while a :class:`modulekit.profile` records this module (None otherwise).
        self.observer = None
        try:
            self.params = list(inspect.signature(module.forward).parameters.values())
        except (TypeError, ValueError):
            self.params = []

    # ---------------------------------------------------------------- calling
    def __call__(self, args: tuple, kwargs: dict):
        m = self.module
        if m._has_hooks:
            return _arena_call(m._call_with_hooks, (args, kwargs, self.forward), None)
        return _arena_call(self.forward, args, kwargs)

    def _signature(self, args, kwargs):
        """(loose key, shapes, arrays); None when an argument cannot be guarded; _UNUSUAL when
        an array is byte-swapped or not of real numbers (see :func:`_usual`)."""
        loose, shapes, arrays = [], [], []
        for value in args:
            t = type(value)
            if t is np.ndarray:
                if value.dtype.kind not in _REAL or not value.dtype.isnative:
                    return _UNUSUAL
                loose.append((value.dtype, value.ndim))
                shapes.append(value.shape)
                arrays.append(value)
            elif t in _SIMPLE or (t is tuple and all(type(v) in _SIMPLE for v in value)):
                loose.append((t, value))
            else:
                return None
        if kwargs:
            for key in sorted(kwargs):
                value = kwargs[key]
                t = type(value)
                if t is np.ndarray:
                    if value.dtype.kind not in _REAL or not value.dtype.isnative:
                        return _UNUSUAL
                    loose.append((key, value.dtype, value.ndim))
                    shapes.append(value.shape)
                    arrays.append(value)
                elif t in _SIMPLE or (t is tuple and all(type(v) in _SIMPLE for v in value)):
                    loose.append((key, t, value))
                else:
                    return None
        return tuple(loose), tuple(shapes), arrays

    def forward(self, *args, **kwargs):
        if _module._epoch != self.epoch:
            self.cache.clear()
            self.epoch = _module._epoch
        if self.unstable >= _MAX_UNSTABLE:
            return self.module.forward(*args, **kwargs)
        sig = self._signature(args, kwargs)
        if sig is _UNUSUAL:
            return _usual(self, args, kwargs)
        if sig is None:
            self._warn("an argument is not an ndarray or a plain Python value "
                       f"({', '.join(sorted({type(a).__name__ for a in args}))})")
            return self.module.forward(*args, **kwargs)
        loose, shapes, arrays = sig
        cache = self.cache
        entry = cache.get((loose, None))
        if entry is None:
            entry = cache.get((loose, shapes))
        if entry is not None:
            self.last = entry
            plan = entry.plan
            if plan is None:
                return self.module.forward(*args, **kwargs)
            if self.observer is not None:
                return self.observer(self, plan, arrays)
            return plan.run(*arrays)
        return self._capture(args, kwargs, loose, shapes, arrays)

    # ---------------------------------------------------------------- capturing
    def _input_names(self, args, kwargs):
        positions, names = [], []
        params = [p for p in self.params if p.kind in (p.POSITIONAL_ONLY,
                                                       p.POSITIONAL_OR_KEYWORD)]
        for i, value in enumerate(args):
            if type(value) is np.ndarray:
                positions.append(("a", i))
                names.append(params[i].name if i < len(params) else f"input{i}")
        for key in sorted(kwargs):
            if type(kwargs[key]) is np.ndarray:
                positions.append(("k", key))
                names.append(key)
        return positions, names

    def _capture(self, args, kwargs, loose, shapes, arrays=()):
        module = self.module
        positions, names = self._input_names(args, kwargs)
        self._pack_all()
        # in eval mode, with no hooks inside (they would fire twice), the capture call returns
        # what the plan computes (below), from the inputs as they were (forward may write
        # into them)
        replay = None if any(m.training or (m._has_hooks and m is not module)
                             for m in module.modules()) else [
            np.array(a, copy=True) for a in arrays]
        epoch = _module._epoch
        result, cap, traced_out = run_capture(module, args, kwargs, positions, names,
                                              self.fullgraph)
        if cap is None:  # another thread is capturing: this call ran eagerly
            return result
        self.captures += 1
        moved = _module._epoch != epoch
        self.unstable = self.unstable + 1 if moved else 0
        if self.unstable >= _MAX_UNSTABLE:
            self._warn("forward changes the module tree on every call (the structure epoch "
                       "moves), so no plan stays valid")
        if cap.broken is not None:
            reason, where = cap.broken
            self._warn(f"{reason} at {where}")
            entry = _Entry(None, None, f"{reason} at {where}", None, names)
            self._store((loose, None), entry)
            return result
        graph = cap.graph
        out_value = traced_out
        namedtuple = type(out_value) if (isinstance(out_value, tuple)
                                         and hasattr(out_value, "_fields")) else None
        try:
            encoded = _encode_output(cap, out_value)
        except CompileError as exc:
            if self.fullgraph:
                raise
            self._warn(str(exc))
            self._store((loose, None), _Entry(None, None, str(exc), None, names))
            return result
        graph.add("output", "output", args=(encoded,), name="output")
        graph.eliminate_dead_code(_pure)
        exact = bool(cap.specialized) or not self.dynamic
        if not exact:
            for node in graph.inputs:
                node.meta["symbolic"] = tuple(range(len(node.meta["shape"])))
        graph.meta = {"specialized": cap.specialized, "namedtuple": namedtuple,
                      "inputs": positions, "signature": loose}
        graph.meta["paths"] = cap.paths
        plan = Plan(planned(graph, module), names, namedtuple, cap.paths)
        entry = _Entry(plan, graph, None, shapes if exact else None, names)
        self._store((loose, entry.exact), entry)
        if replay is not None and not moved:
            # the plan may compute other bits than forward (a BatchNorm folded into its
            # convolution): the result of a call must not depend on whether it captured
            return plan.run(*replay)
        return result

    def _pack_all(self) -> None:
        """Pack every layer not packed yet, as its first forward would (the same values):
        packing is a structure change, so doing it now keeps the capture's plan current."""
        from modulekit.module import Module

        if self.epoch != _module._epoch:
            return
        packed = False
        for sub in self.module.modules():
            if type(sub)._pack is not Module._pack and not sub._packed_keys():
                try:
                    sub._pack()
                    packed = True
                except Exception:  # noqa: BLE001 - forward raises the real error, if it runs
                    pass
        if packed:
            self.epoch = _module._epoch  # plans made before stay valid: packing is neutral

    def _store(self, key, entry: _Entry) -> None:
        self.cache[key] = entry
        while len(self.cache) > self.limit:
            self.cache.popitem(last=False)
        self.last = entry

    def _warn(self, reason: str) -> None:
        warnings.warn(
            f"{type(self.module).__name__} (compiled) runs eagerly for these inputs: {reason}",
            CompileWarning, stacklevel=4,
        )

    # ---------------------------------------------------------------- describing
    def _entry(self) -> _Entry:
        entry = self.last
        if entry is None:
            raise AttributeError(
                f"{type(self.module).__name__} is compiled but holds no current capture: call "
                "it once (or initialize(example_input)) first"
            )
        if entry.plan is None:
            raise AttributeError(
                f"{type(self.module).__name__} could not be captured ({entry.reason}); it "
                "runs eagerly and has no graph"
            )
        return entry

    @property
    def graph(self) -> str:
        """The captured graph of the last call's signature, one node a line."""
        return self._entry().graph.text(inline_scopes=False)

    @property
    def inlined_graph(self) -> str:
        """The same graph with each node's module scope: every user module's forward is
        inlined into the capture already."""
        return self._entry().graph.text(inline_scopes=True)

    @property
    def code(self) -> str:
        """The plan's source (valid Python)."""
        return self._entry().plan.code

    @property
    def code_with_constants(self) -> tuple[str, dict]:
        """``(code, constants)``: the source and the objects its free names stand for (with
        ``np`` and ``operator``): ``exec(code, dict(constants))`` defines ``forward``."""
        plan = self._entry().plan
        constants = {"np": np, "operator": __import__("operator")}
        constants.update(plan.constants)
        return plan.code, constants

    def current_graph(self) -> Graph:
        return self._entry().graph

    def save(self, f, **kwargs) -> None:
        from modulekit.compile.serialize import save_compiled

        try:
            entry = self._entry()
        except AttributeError as exc:
            raise CompileError(f"save: {exc}") from None
        save_compiled(self.module, entry.graph, f, **kwargs)


def _encode_output(cap, value):
    """The output structure with traced values as nodes; constant arrays returned by forward
    are copied on each call (eager forward returns a fresh array)."""
    from modulekit.compile.tracer import SymInt, TracedArray

    t = type(value)
    if t is TracedArray or t is SymInt:
        return value._node
    if isinstance(value, (tuple, list)):
        items = [_encode_output(cap, v) for v in value]
        return items if t is list else tuple(items)
    if t is dict:
        return {k: _encode_output(cap, v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return cap.graph.add("call_function", "numpy.copy", np.copy, args=(value,), name="copy")
    if value is None or type(value) in _SIMPLE:
        return value
    raise CompileError(f"forward returned a {t.__name__}, which a plan cannot rebuild")
