"""The plan: a captured :class:`Graph` turned into one Python function.

Each node becomes one statement of straight-line Python (``v3 = self_layer1_0_conv1(v2)``,
``v4 = v3 + x``, ``v5 = v4.reshape(size, -1)``) calling the step's callable directly: a
leaf's ``forward`` (its ``Module.__call__`` when it has hooks, so they fire), a fused step's
kernel call, a NumPy function, an ndarray method. The source is compiled once; a call runs it
with no tracing, no per-module ``__call__`` dispatch and no interpretation. Each intermediate
is ``del``-ed after its last use, so arrays go back to the activation cache as early as in
eager mode. The same source is what ``Module.code`` prints, and ``code_with_constants`` gives
the names it reads.
"""

from __future__ import annotations

import keyword
import math
import operator
from types import SimpleNamespace

import numpy as np

from modulekit.compile.graph import Graph, Node

__all__ = ["Plan"]

_INFIX = {
    "add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
    "pow": "**", "matmul": "@", "and_": "&", "or_": "|", "xor": "^", "lshift": "<<",
    "rshift": ">>", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
}
_PREFIX = {"neg": "-", "pos": "+", "invert": "~"}
_RESERVED = {"np", "F", "operator", "abs", "slice", "float"}
_OBSERVE = "_observe"  # the observer argument of an observed plan (Plan.observed)


class _Namespace:
    """Names the generated source reads, with the objects they stand for."""

    def __init__(self) -> None:
        self.taken: set[str] = set()  # the plan's local variable names
        self.globals: dict = {"np": np, "operator": operator}
        self.constants: dict = {}
        self._by_id: dict[int, str] = {}
        self._functional = None

    def bind(self, hint: str, value) -> str:
        key = id(value)
        if key in self._by_id:
            return self._by_id[key]
        base = "".join(c if c.isalnum() else "_" for c in hint) or "c"
        name, i = base, 1
        while (name in self.globals or name in _RESERVED or name in self.taken
               or keyword.iskeyword(name)):
            name = f"{base}_{i}"
            i += 1
        self.globals[name] = value
        self.constants[name] = value
        self._by_id[key] = name
        return name

    def constant(self, value) -> str:
        return self.bind(f"c{len(self.constants)}", value)

    def function(self, node: Node) -> str:
        target, fn = node.target, node.fn
        if target.startswith("numpy."):
            obj = np
            for part in target.split(".")[1:]:
                obj = getattr(obj, part, None)
            if obj is fn and fn is not None:
                return "np." + target[len("numpy."):]
        if target.startswith("modulekit.nn.functional."):
            if self._functional is None:
                self._functional = SimpleNamespace()
                self.globals["F"] = self._functional
                self.constants["F"] = self._functional
            name = target.rsplit(".", 1)[1]
            setattr(self._functional, name, fn)
            return f"F.{name}"
        return self.bind(target.rsplit(".", 1)[-1], fn)


class Plan:
    """A graph compiled into one function (see the module docstring).

    Attributes
    ----------
    graph : Graph
    code : str
        The function's source (valid Python).
    constants : dict
        The names the source reads besides ``np`` and ``operator``: modules' ``forward``
        methods, fused kernel calls, functions and constant arrays.
    run : callable
        The function: ``run(*array_inputs)``.
    """

    def __init__(self, graph: Graph, params: list[str], namedtuple=None,
                 paths: dict | None = None) -> None:
        self.graph = graph
        ns = _Namespace()
        ns.paths = paths or {}
        self.code = _generate(graph, params, ns, namedtuple)
        self.constants = ns.constants
        scope = dict(ns.globals)
        exec(compile(self.code, "<modulekit.compile plan>", "exec"), scope)  # noqa: S102
        self.run = scope["forward"]
        self._args = (params, namedtuple, ns.paths)
        self._observed = None

    def observed(self):
        """``(run, steps)``: the plan with an observer, for the profiler.

        ``run(observe, *array_inputs)`` computes what :attr:`run` computes and calls
        ``observe(None)`` once before the first step and ``observe(value)`` right after each
        step (``value``: the step's result, None for a step whose result nobody reads);
        ``steps`` are the graph's nodes in that order. Generated on first use, from the same
        graph and with the same step callables as :attr:`run`."""
        if self._observed is None:
            params, namedtuple, paths = self._args
            ns = _Namespace()
            ns.paths = paths
            code = _generate(self.graph, params, ns, namedtuple, observe=True)
            scope = dict(ns.globals)
            exec(compile(code, "<modulekit.compile observed plan>", "exec"), scope)  # noqa: S102
            steps = [n for n in self.graph.nodes if n.op not in ("input", "output")]
            self._observed = (scope["forward"], steps)
        return self._observed


def _var_names(graph: Graph, params: list[str]) -> dict[int, str]:
    names: dict[int, str] = {}
    used = set(_RESERVED) | {"np", "operator", _OBSERVE}
    for node in graph.nodes:
        base = node.name
        if keyword.iskeyword(base) or base in used:
            base = base + "_"
        name, i = base, 1
        while name in used:
            name = f"{base}{i}"
            i += 1
        used.add(name)
        names[id(node)] = name
    return names


def _generate(graph: Graph, params: list[str], ns: _Namespace, namedtuple,
              observe: bool = False) -> str:
    var = _var_names(graph, params)
    ns.taken = set(var.values())
    inputs = graph.inputs
    last_use: dict[int, int] = {}
    for i, node in enumerate(graph.nodes):
        for n in node.inputs:
            last_use[id(n)] = i

    def expr(v) -> str:
        if isinstance(v, Node):
            return var[id(v)]
        t = type(v)
        if v is None or t is bool or t is int or t is str:
            return repr(v)
        if t is float:
            return repr(v) if math.isfinite(v) else f"float('{v}')"
        if t is tuple:
            inner = ", ".join(expr(e) for e in v)
            return f"({inner},)" if len(v) == 1 else f"({inner})"
        if t is list:
            return "[" + ", ".join(expr(e) for e in v) + "]"
        if t is dict:
            return "{" + ", ".join(f"{expr(k)}: {expr(e)}" for k, e in v.items()) + "}"
        if t is slice:
            return f"slice({expr(v.start)}, {expr(v.stop)}, {expr(v.step)})"
        if v is Ellipsis:
            return "..."
        path = ns.paths.get(id(v))
        if path is not None:  # a module of the tree passed to a function
            return ns.bind("self_" + (path or "root"), v)
        return ns.constant(v)

    def index(v) -> str:
        def one(e):
            if type(e) is slice:
                s = ("" if e.start is None else expr(e.start)) + ":" + (
                    "" if e.stop is None else expr(e.stop))
                return s + (":" + expr(e.step) if e.step is not None else "")
            return expr(e)

        if type(v) is tuple:
            if not v:
                return "()"
            return ", ".join(one(e) for e in v) + ("," if len(v) == 1 else "")
        return one(v)

    def call_args(node: Node, skip: int = 0) -> str:
        parts = [expr(a) for a in node.args[skip:]]
        parts += [f"{k}={expr(v)}" for k, v in node.kwargs.items()]
        return ", ".join(parts)

    names = [var[id(n)] for n in inputs]
    if observe:
        names.insert(0, _OBSERVE)
    lines = [f"def forward({', '.join(names)}):"]
    if observe:
        lines.append(f"    {_OBSERVE}(None)")
    for i, node in enumerate(graph.nodes):
        op, target = node.op, node.target
        if op == "input":
            continue
        if op == "output":
            out = expr(node.args[0])
            if namedtuple is not None:
                out = f"{ns.constant(namedtuple)}(*{out})"
            lines.append(f"    return {out}")
            break
        if op == "call_module":
            fn = node.fn if node.meta.get("hooks") else node.fn.forward
            callee = ns.bind("self_" + (node.meta.get("path") or target), fn)
            rhs = f"{callee}({call_args(node)})"
        elif op == "call_fused":
            callee = ns.bind("kernel_" + node.meta["modules"][0], node.fn)
            rhs = f"{callee}({call_args(node)})"
        elif op == "call_function":
            short = target.rsplit(".", 1)[-1]
            if target.startswith("operator.") and short in _INFIX and len(node.args) == 2:
                rhs = f"({expr(node.args[0])} {_INFIX[short]} {expr(node.args[1])})"
            elif target.startswith("operator.") and short in _PREFIX:
                rhs = f"({_PREFIX[short]}{expr(node.args[0])})"
            elif target.startswith("operator."):
                rhs = f"operator.{short}({call_args(node)})"
            else:
                rhs = f"{ns.function(node)}({call_args(node)})"
        elif op == "call_method":
            recv = expr(node.args[0])
            if target == "__getitem__":
                rhs = f"{recv}[{index(node.args[1])}]"
            elif target == "__setitem__":
                lines.append(f"    {recv}[{index(node.args[1])}] = {expr(node.args[2])}")
                rhs = None
            else:
                rhs = f"{recv}.{target}({call_args(node, 1)})"
        elif op == "dim":
            which = node.args[1]
            rhs = (f"{expr(node.args[0])}.size" if which == "size"
                   else f"{expr(node.args[0])}.shape[{which!r}]")
        elif op == "getitem":
            rhs = f"{expr(node.args[0])}[{expr(node.args[1])}]"
        else:  # pragma: no cover - OPS is closed
            raise ValueError(f"cannot generate code for op {op!r}")
        if rhs is not None:
            note = node.meta.get("module_type") or ""
            if node.meta.get("shape") is not None:
                note = (note + " " if note else "") + \
                    f"{node.meta['dtype']}{list(node.meta['shape'])}"
            comment = f"  # {note}" if note else ""
            if node.users:
                lines.append(f"    {var[id(node)]} = {rhs}{comment}")
            else:
                lines.append(f"    {rhs}{comment}")
        if observe:
            seen = var[id(node)] if rhs is not None and node.users else None
            lines.append(f"    {_OBSERVE}({seen})")
        dead = [var[id(n)] for n in node.inputs if last_use.get(id(n)) == i]
        if dead:
            lines.append(f"    del {', '.join(dead)}")
    return "\n".join(lines) + "\n"
