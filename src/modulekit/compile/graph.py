"""The graph IR a capture records and a pass pipeline rewrites.

A :class:`Graph` is a list of :class:`Node` in execution order (the order the captured forward
ran them: in-place operations keep their place). Every node has

``op``
    one of :data:`OPS`: ``"input"`` (a forward argument), ``"call_module"`` (a leaf layer, or a
    hooked module called whole with its hooks), ``"call_fused"`` (consecutive modules run as one
    kernel call, as a Sequential's fused plan runs them), ``"call_function"`` (a NumPy ufunc or
    array function, a ``modulekit.nn.functional`` function, a library helper, or a Python
    operator on shape values), ``"call_method"`` (an ndarray method, ``__getitem__`` and
    ``__setitem__`` included), ``"dim"`` (``x.shape[i]``, a shape value read at run time),
    ``"getitem"`` (an element of a node's tuple/dict result) and ``"output"``.
``target``
    a string: the module path, the function's dotted name (``numpy.add``,
    ``modulekit.nn.functional.relu``), the method name.
``args``, ``kwargs``
    nested tuples/lists/dicts/slices of constants and other nodes.
``meta``
    ``shape`` and ``dtype`` of an array result (the captured ones), ``module_type`` and
    ``scope`` (the path of the module whose forward issued the node, for profiling and repr),
    ``where`` (file:line), ``hooks`` for a hooked module call, ``modules`` for a fused call.

Nodes refer to their inputs directly (``node.args`` holds Node objects), so a pass matches a
pattern by walking ``node.args`` and ``users`` and rewrites with :meth:`Graph.replace_all_uses`
and :meth:`Graph.erase`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

__all__ = ["Graph", "Node", "OPS", "map_args", "iter_nodes"]

#: Every node kind (see the module docstring).
OPS = frozenset(
    ("input", "call_module", "call_fused", "call_function", "call_method", "dim", "getitem",
     "output")
)


class Node:
    """One operation of a :class:`Graph` (see the module docstring)."""

    __slots__ = ("name", "op", "target", "fn", "args", "kwargs", "meta", "users")

    def __init__(self, name: str, op: str, target: str, fn: Any, args: tuple, kwargs: dict,
                 meta: dict) -> None:
        if op not in OPS:
            raise ValueError(f"unknown node op {op!r}: expected one of {sorted(OPS)}")
        self.name = name
        self.op = op
        self.target = target
        self.fn = fn  # the callable (function, module) the node runs, where it has one
        self.args = args
        self.kwargs = kwargs
        self.meta = meta
        self.users: list[Node] = []

    @property
    def inputs(self) -> list[Node]:
        """The nodes this node reads, in argument order (each once)."""
        seen: dict[int, Node] = {}
        for n in iter_nodes((self.args, self.kwargs)):
            seen.setdefault(id(n), n)
        return list(seen.values())

    def __repr__(self) -> str:
        return f"%{self.name}"


def iter_nodes(value) -> Iterator[Node]:
    """The Nodes inside a nested argument structure, in order."""
    if isinstance(value, Node):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from iter_nodes(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from iter_nodes(v)
    elif isinstance(value, slice):
        yield from iter_nodes((value.start, value.stop, value.step))


def map_args(value, fn: Callable[[Node], Any]):
    """``value`` with every Node ``n`` inside replaced by ``fn(n)`` (same structure)."""
    if isinstance(value, Node):
        return fn(value)
    if type(value) is tuple:
        return tuple(map_args(v, fn) for v in value)
    if type(value) is list:
        return [map_args(v, fn) for v in value]
    if type(value) is dict:
        return {k: map_args(v, fn) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(map_args(value.start, fn), map_args(value.stop, fn),
                     map_args(value.step, fn))
    return value


class Graph:
    """Nodes in execution order; ``output`` is the last one (see the module docstring)."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self._names: set[str] = set()
        self.meta: dict = {}

    # ---------------------------------------------------------------- building
    def _fresh(self, hint: str) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in hint) or "v"
        if base[0].isdigit():
            base = "_" + base
        name, i = base, 1
        while name in self._names:
            name = f"{base}_{i}"
            i += 1
        self._names.add(name)
        return name

    def add(self, op: str, target: str, fn=None, args: tuple = (), kwargs: dict | None = None,
            name: str | None = None, **meta) -> Node:
        """Append a node; its inputs learn it as a user."""
        node = Node(self._fresh(name or "v"), op, target, fn, tuple(args), dict(kwargs or {}),
                    meta)
        for n in node.inputs:
            n.users.append(node)
        self.nodes.append(node)
        return node

    # ---------------------------------------------------------------- rewriting
    def replace_all_uses(self, old: Node, new: Node) -> None:
        """Make every user of ``old`` read ``new`` instead."""
        for user in old.users:
            user.args = map_args(user.args, lambda n: new if n is old else n)
            user.kwargs = map_args(user.kwargs, lambda n: new if n is old else n)
            if user not in new.users:
                new.users.append(user)
        old.users = []

    def erase(self, node: Node) -> None:
        """Remove a node nobody reads."""
        if node.users:
            raise ValueError(f"cannot erase {node!r}: it is read by {node.users}")
        for n in node.inputs:
            if node in n.users:
                n.users.remove(node)
        self.nodes.remove(node)
        self._names.discard(node.name)

    def eliminate_dead_code(self, pure: Callable[[Node], bool]) -> int:
        """Erase nodes nobody reads for which ``pure(node)`` holds, repeatedly; returns the
        count erased."""
        erased = 0
        changed = True
        while changed:
            changed = False
            for node in reversed(self.nodes):
                if not node.users and node.op not in ("output", "input") and pure(node):
                    self.erase(node)
                    erased += 1
                    changed = True
        return erased

    def copy(self) -> Graph:
        """A new graph of new nodes with the same ops, targets, callables and arguments (the
        constants inside the arguments, and each ``meta``'s values, are shared)."""
        new = Graph()
        new.meta = dict(self.meta)
        new._names = set(self._names)
        twin: dict[int, Node] = {}
        for node in self.nodes:
            n = Node(node.name, node.op, node.target, node.fn,
                     map_args(node.args, lambda a: twin[id(a)]),
                     map_args(node.kwargs, lambda a: twin[id(a)]), dict(node.meta))
            for i in n.inputs:
                i.users.append(n)
            twin[id(node)] = n
            new.nodes.append(n)
        return new

    @property
    def inputs(self) -> list[Node]:
        return [n for n in self.nodes if n.op == "input"]

    @property
    def output(self) -> Node:
        return self.nodes[-1]

    # ---------------------------------------------------------------- printing
    def text(self, inline_scopes: bool = True) -> str:
        """The IR as text, one node a line: ``%name : dtype[shape] = op[target](args)``
        followed by the module scope and source line."""
        params = ", ".join(f"%{n.name} : {_type_str(n)}" for n in self.inputs)
        lines = [f"graph({params}):"]
        for node in self.nodes:
            if node.op == "input":
                continue
            if node.op == "output":
                lines.append(f"  return ({_arg_str(node.args[0])})")
                continue
            args = ", ".join([_arg_str(a) for a in node.args]
                             + [f"{k}={_arg_str(v)}" for k, v in node.kwargs.items()])
            head = f"  %{node.name} : {_type_str(node)} = {node.op}[{node.target}]({args})"
            notes = []
            if node.meta.get("module_type"):
                notes.append(node.meta["module_type"])
            if node.meta.get("hooks"):
                notes.append("with hooks")
            if node.meta.get("modules"):
                notes.append("fuses " + ", ".join(node.meta["modules"]))
            if inline_scopes and node.meta.get("scope"):
                notes.append(f"scope: {node.meta['scope']}")
            if node.meta.get("where"):
                notes.append(os.path.basename(node.meta["where"]))
            lines.append(head + (f"  # {'; '.join(notes)}" if notes else ""))
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.text()


def _type_str(node: Node) -> str:
    shape, dtype = node.meta.get("shape"), node.meta.get("dtype")
    if shape is None:
        return node.meta.get("kind", "Any")
    sym = node.meta.get("symbolic", ())
    dims = ", ".join("?" if i in sym else str(d) for i, d in enumerate(shape))
    return f"{dtype}[{dims}]"


def _arg_str(value) -> str:
    if isinstance(value, Node):
        return f"%{value.name}"
    if isinstance(value, tuple):
        inner = ", ".join(_arg_str(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(_arg_str(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_arg_str(v)}" for k, v in value.items()) + "}"
    if isinstance(value, slice):
        parts = [_arg_str(p) if p is not None else "" for p in
                 (value.start, value.stop, value.step)]
        return ":".join(parts[:2] if value.step is None else parts)
    if value is Ellipsis:
        return "..."
    if isinstance(value, np.ndarray) or hasattr(value, "__array__") and not isinstance(
            value, (int, float, bool, str)):
        shape = getattr(value, "shape", None)
        return f"<const {type(value).__name__} {tuple(shape) if shape is not None else ''}>"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float('{value}')"
    if isinstance(value, np.dtype):
        return f"dtype('{value}')"
    if callable(value):
        return f"<{getattr(value, '__qualname__', type(value).__name__)}>"
    return repr(value)
