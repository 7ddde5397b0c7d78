"""The planner: one pipeline of small, named rewrite rules over a captured graph.

``optimize(graph, root)`` runs :data:`PIPELINE` in order on a copy-free graph (the caller
passes a graph it owns) and returns how many times each rule fired. A rule is a function
``rule(graph, ctx) -> int`` that finds its pattern by walking ``graph.nodes`` and each
node's ``users``, and replaces the matched nodes with one ``call_fused`` step by
:meth:`Context.fuse`. Every rule is defined in one of the ``modulekit.compile.rules`` modules
and listed once, in order, in ``modulekit.compile.rules.PIPELINE``.

What a rule may assume, and must keep true:

* a ``call_module`` node's ``fn`` is the module it calls; ``meta["hooks"]`` is True when the
  module has hooks (such a node is a boundary: never fused, never reordered);
* every fused step's ``meta["modules"]`` lists the paths of the modules it covers (the
  profiler attributes the step's time to them) and ``meta["rule"]`` names the rule that made
  it;
* a fused step computes what the nodes it replaces computed, to the documented tolerance of
  its kernel (a rule that changes bits, such as folding a norm into a convolution's weights,
  says so in its docstring);
* the objects a step holds (folded, stacked or packed weights) are built from the module
  tree as it is at capture time. A compiled module drops its plans when the tree's structure
  epoch moves (loads, casts, new submodules or tensors, hooks, ``train()``/``eval()``), so a
  step never needs a staleness check of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from modulekit.compile.graph import Graph, Node, iter_nodes

__all__ = ["Context", "optimize", "planned"]


class Context:
    """What a rule reads besides the graph: the root module and the helpers to rewrite."""

    def __init__(self, graph: Graph, root) -> None:
        self.graph = graph
        self.root = root

    @staticmethod
    def module(node: Node, *types: type):
        """The module a plain ``call_module`` node calls (no hooks), or None; with ``types``,
        only a module of exactly one of those types (a subclass may override ``forward``)."""
        if node.op != "call_module" or node.meta.get("hooks"):
            return None
        m = node.fn
        if types and type(m) not in types:
            return None
        return m

    @staticmethod
    def only_user(node: Node) -> Node | None:
        """The single node reading ``node`` (once), or None."""
        users = node.users
        return users[0] if len(users) == 1 else None

    def fuse(self, nodes: Sequence[Node], rule: str, fn: Callable, args: tuple,
             kwargs: dict | None = None, modules: Sequence[str] = (), name: str | None = None,
             **meta) -> Node:
        """Replace ``nodes`` (in graph order; only the last one may be read outside the
        group) by one ``call_fused`` step ``fn(*args, **kwargs)`` at the last one's place.

        ``modules`` are the paths of the modules the step covers (defaults to the paths of
        the group's ``call_module`` nodes); the step keeps the last node's shape and dtype.
        Raises ValueError (leaving the graph as it was) when a node inside the group is read
        from outside it."""
        group = {id(n) for n in nodes}
        for n in nodes[:-1]:
            for u in n.users:
                if id(u) not in group:
                    raise ValueError(f"{rule}: {n!r} is read outside the fused group by {u!r}")
        last = nodes[-1]
        for n in iter_nodes((args, kwargs)):
            if id(n) in group:
                raise ValueError(f"{rule}: the fused step cannot read {n!r}, a node it replaces")
        if not modules:
            modules = [n.meta["path"] for n in nodes
                       if n.op == "call_module" and n.meta.get("path") is not None]
        graph = self.graph
        keep = {k: last.meta[k] for k in ("shape", "dtype", "symbolic", "where", "scope")
                if k in last.meta}
        types = [type(n.fn).__name__ for n in nodes if n.op == "call_module"]
        step = Node(graph._fresh(name or "fused_" + (modules[0] if modules else rule)),
                    "call_fused", rule, fn, tuple(args), dict(kwargs or {}),
                    {**keep, "modules": list(modules), "rule": rule,
                     "module_type": "+".join(types) or rule, **meta})
        graph.nodes.insert(graph.nodes.index(last), step)
        for n in step.inputs:
            n.users.append(step)
        graph.replace_all_uses(last, step)
        for n in reversed(nodes):
            graph.erase(n)
        return step


def optimize(graph: Graph, root, pipeline: Sequence[Callable] | None = None) -> dict[str, int]:
    """Run the rules of ``pipeline`` (default: ``modulekit.compile.rules.PIPELINE``) over
    ``graph`` in place; returns ``{rule name: times it fired}`` (also kept in
    ``graph.meta["rules"]``)."""
    if pipeline is None:
        from modulekit.compile.rules import PIPELINE as pipeline
    ctx = Context(graph, root)
    fired: dict[str, int] = {}
    for rule in pipeline:
        fired[rule.__name__] = rule(graph, ctx)
    graph.meta["rules"] = fired
    return fired


def planned(graph: Graph, root) -> Graph:
    """The graph a plan runs: a copy of the captured ``graph`` (which stays as captured, for
    ``Module.graph`` and ``save``) rewritten by :func:`optimize`."""
    new = graph.copy()
    optimize(new, root)
    return new
