"""``Module.compile()``: capture a forward as a graph and run it as a plan.

Map of the package:

``tracer``
    the capture: traced arrays (``TracedArray``, ``SymInt``), module-call interception, graph
    breaks, :func:`traceable` for library functions.
``graph``
    the IR: ``Graph`` and ``Node`` (op, target, args, kwargs, shape/dtype metadata), the
    rewriting primitives a pass pipeline uses.
``plan``
    a graph compiled into one Python function (what ``Module.code`` prints).
``compiled``
    ``CompiledCall``: guards (input signature, structure epoch), the LRU cache of plans, the
    eager fallback, hooks around the plan.
``serialize``
    ``Module.save`` of a compiled module and :func:`load_module` (no pickle).
"""

from modulekit.compile.compiled import CompiledCall, CompileWarning, compile_module
from modulekit.compile.graph import Graph, Node
from modulekit.compile.tracer import CompileError, traceable

__all__ = [
    "CompileError",
    "CompileWarning",
    "CompiledCall",
    "Graph",
    "Node",
    "compile_module",
    "load_module",
    "traceable",
]


def load_module(f):
    """Load a module written by a compiled module's ``save(f)``; see
    :func:`modulekit.compile.serialize.load_module`."""
    from modulekit.compile.serialize import load_module as _load

    return _load(f)
