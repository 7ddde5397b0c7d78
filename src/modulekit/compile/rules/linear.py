"""Rules for fully connected layers: activation epilogues, layer chains, stacked projections."""

from __future__ import annotations

import threading

import numpy as np

from modulekit.compile.graph import Graph, Node
from modulekit.compile.passes import Context

__all__ = ["EXACT_EPILOGUES", "linear_activation", "linear_chain", "linear_stack"]

#: The GEMM epilogues that give the same bits as the activation modules' own forward: all of
#: them, since the GEMM epilogue and ``nn.functional`` evaluate the one activation math of
#: ``kernels/common`` (tests/test_kernel_math.py checks the bit identity on every ISA path).
EXACT_EPILOGUES = frozenset(
    ("relu", "relu6", "hardswish", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
)


def _plain_linear(ctx: Context, node: Node, quantized: bool = False):
    """The Linear a ``call_module`` node calls with one positional argument (no hooks, the
    exact class), or None; with ``quantized`` a ``DynamicQuantizedLinear`` too (its
    ``_compute`` takes the same epilogues)."""
    from modulekit.nn.modules.linear import Linear
    from modulekit.nn.modules.quantized import DynamicQuantizedLinear

    types = (Linear, DynamicQuantizedLinear) if quantized else (Linear,)
    lin = ctx.module(node, *types)
    if lin is None or node.kwargs or len(node.args) != 1 or not isinstance(node.args[0], Node):
        return None
    return lin


def _activation(ctx: Context, node: Node | None, source: Node, allowed) -> tuple | None:
    """``(name, alpha, beta)`` when ``node`` applies an activation whose epilogue is in
    ``allowed`` to ``source`` alone: an activation module with an ``_epilogue`` or
    ``F.gelu(source, approximate=...)``; else None."""
    if node is None:
        return None
    if node.op == "call_module":
        act = ctx.module(node)
        epilogue = getattr(act, "_epilogue", None) if act is not None else None
        if epilogue is None or node.kwargs or node.args != (source,):
            return None
        return epilogue if epilogue[0] in allowed else None
    if node.op == "call_function" and node.target == "modulekit.nn.functional.gelu":
        if len(node.args) == 1 and node.args[0] is source and set(node.kwargs) <= {"approximate"}:
            approx = node.kwargs.get("approximate", "none")
        elif len(node.args) == 2 and node.args[0] is source and not node.kwargs:
            approx = node.args[1]
        else:
            return None
        name = {"none": "gelu", "tanh": "gelu_tanh"}.get(approx) if isinstance(approx, str) \
            else None
        if name is None or name not in allowed:
            return None
        return (name, 0.0, 0.0)
    return None


def _fuse_activations(graph: Graph, ctx: Context, allowed, rule: str) -> int:
    fired = 0
    for node in list(graph.nodes):
        if node not in graph.nodes:
            continue
        linear = _plain_linear(ctx, node, quantized=True)
        if linear is None:
            continue
        user = ctx.only_user(node)
        epilogue = _activation(ctx, user, node, allowed)
        if epilogue is None or user.meta.get("dtype") != node.meta.get("dtype"):
            continue
        name, alpha, beta = epilogue
        modules = [node.meta["path"]] + ([user.meta["path"]] if user.op == "call_module"
                                         else [])
        ctx.fuse([node, user], rule, linear._compute, (node.args[0], name, alpha, beta),
                 modules=modules)
        fired += 1
    return fired


def linear_activation(graph: Graph, ctx: Context) -> int:
    """``act(linear(x))`` -> one GEMM call with the activation in its epilogue.

    Matches a ``Linear`` (or an int8 ``DynamicQuantizedLinear``, whose kernel takes the same
    epilogues) whose only reader is an activation module (one with an ``_epilogue``)
    or ``F.gelu(x, approximate=...)`` whose epilogue computes exactly what the activation's
    own forward computes (:data:`EXACT_EPILOGUES`: every one, since both evaluate the one
    activation math of ``kernels/common``), so the fused step is bit-identical to the two
    steps: a transformer's feed-forward GELU, BERT's pooler Tanh, an MLP's ReLU."""
    return _fuse_activations(graph, ctx, EXACT_EPILOGUES, "linear_activation")


def _chain_step(modules) -> object:
    """The kernel chain over ``modules`` (each Linear, optionally followed by its activation),
    as a Sequential of them runs eagerly (``nn.modules.container._LinearChain``)."""
    from modulekit.nn.modules.container import _LinearChain
    from modulekit.nn.modules.linear import Linear

    pairs: list[list] = []
    for m in modules:
        if isinstance(m, Linear):
            pairs.append([m, None])
        else:  # the matcher put an activation with an epilogue right after its Linear
            pairs[-1][1] = m
    return _LinearChain([tuple(p) for p in pairs]).run


def linear_chain(graph: Graph, ctx: Context) -> int:
    """``linear_n(act(... linear_1(x)))`` on a 2-D input -> one kernel chain (one OpenMP
    region, a barrier between layers: ``nn.modules.container._LinearChain``, what a
    ``Sequential`` of these layers runs eagerly).

    Matches two or more ``Linear`` layers, each optionally followed by an activation module
    with an epilogue in :data:`EXACT_EPILOGUES`, where each step's
    only reader is the next one and the chain's input is a 2-D array of the layers' compute
    dtype (the chain kernel's contract; on other inputs it would run the modules one by one).
    Bit-identical to the unfused layers. Runs before :func:`linear_activation`, which takes
    the single layers left."""
    allowed = EXACT_EPILOGUES
    fired = 0
    for node in list(graph.nodes):
        if node not in graph.nodes:
            continue
        first = _plain_linear(ctx, node)
        shape = node.args[0].meta.get("shape") if first is not None else None
        if first is None or shape is None or len(shape) != 2:
            continue
        packed = first._packed
        if packed is None or node.args[0].meta.get("dtype") != str(packed.compute_dtype):
            continue
        group, modules = [], []
        cur = node
        while True:
            lin = _plain_linear(ctx, cur)
            if lin is None or lin._packed is None or \
                    lin._packed.compute_dtype != packed.compute_dtype:
                break
            group.append(cur)
            modules.append(lin)
            nxt = ctx.only_user(cur)
            if nxt is not None and nxt.op == "call_module" and \
                    _activation(ctx, nxt, cur, allowed) is not None:
                group.append(nxt)
                modules.append(nxt.fn)
                cur = nxt
                nxt = ctx.only_user(cur)
            if nxt is None or _plain_linear(ctx, nxt) is None or nxt.args[0] is not cur:
                break
            cur = nxt
        # the chain ends with a Linear or with its activation; it needs two Linears
        while group and group[-1].op != "call_module":
            group.pop()
            modules.pop()
        if sum(1 for n in group if _plain_linear(ctx, n) is not None) < 2:
            continue
        ctx.fuse(group, "linear_chain", _chain_step(modules), (node.args[0],))
        fired += 1
    return fired


# ---------------------------------------------------------------------------- stacking
_STACK_LOCK = threading.Lock()


def _stacked_kernel(linears):
    """The packed kernel over the stacked weights of ``linears`` (equal ``in_features``,
    storage dtype and bias presence; all packed), and their ``(r0, r1)`` row blocks.

    Each layer's own pack is replaced by a :class:`~modulekit.nn.modules._fused_linear.RowsOf`
    view of the stacked one (the weights are held once; ``state_dict``, pickling, casts and
    ``share_memory`` read the layer's rows through the view); when the layers already hold
    consecutive views of one stacked kernel (a second plan, a shared or unpickled model) that
    kernel is reused (and the views' own packs of their rows, made when a capture's eager
    call ran a layer alone, are dropped). Installing the views changes no value, so, like
    packing, it does not move the structure epoch. Returns None when the layers cannot be
    stacked."""
    from modulekit._ext._gemm import pack_linear
    from modulekit.nn.modules._fused_linear import RowsOf

    with _STACK_LOCK:
        kernels = [lin._packed for lin in linears]
        if any(k is None for k in kernels):
            return None
        if all(type(k) is RowsOf for k in kernels):
            fused, r0 = kernels[0].fused, 0
            for k in kernels:
                if k.fused is not fused or k.r0 != r0:
                    break
                r0 = k.r1
            else:
                if r0 == fused.out_features:
                    for k in kernels:
                        # a view's own pack of its rows (made when the capture's eager call
                        # ran the layer alone) is not needed while the stack serves it
                        k._own = None
                    return fused, [(k.r0, k.r1) for k in kernels]
        if (len({k.storage for k in kernels}) != 1 or len({k.has_bias for k in kernels}) != 1
                or len({k.in_features for k in kernels}) != 1):
            return None
        parts = [k.unpack() for k in kernels]
        w = np.concatenate([np.asarray(p[0]) for p in parts])
        b = None if parts[0][1] is None else np.concatenate([np.asarray(p[1]) for p in parts])
        packed = pack_linear(w, b, kernels[0].storage)
        if all(getattr(k, "is_shared", False) for k in kernels):
            packed = packed.shared_copy()
        blocks, r0 = [], 0
        for lin, k in zip(linears, kernels):
            r1 = r0 + k.out_features
            blocks.append((r0, r1))
            with lin._pack_lock:
                lin.__dict__["_packed"] = RowsOf(packed, r0, r1)
                lin._packed_changed()
            r0 = r1
        return packed, blocks


class _StackedLinears:
    """A fused step: one GEMM over stacked weights, returning each layer's output as a view
    (a column block of the stacked result)."""

    __slots__ = ("packed", "blocks", "width", "__weakref__")

    def __init__(self, packed, blocks) -> None:
        self.packed, self.blocks, self.width = packed, tuple(blocks), packed.out_features

    def __call__(self, x):
        if x.ndim == 2:
            y = self.packed.forward(x)
        else:
            lead = x.shape[:-1]
            y = self.packed.forward(x.reshape(-1, x.shape[-1])).reshape(lead + (self.width,))
        return tuple(y[..., r0:r1] for r0, r1 in self.blocks)


def linear_stack(graph: Graph, ctx: Context) -> int:
    """Several ``Linear`` layers reading the same input (attention's query/key/value) -> ONE
    GEMM over their stacked weights; each layer's output becomes a column-block view of the
    stacked result.

    Matches two or more hook-free ``Linear`` calls on the same node with equal
    ``in_features``, storage dtype and bias presence, whose input is a floating array of
    their compute dtype. Builds a ``call_fused`` step at the first layer's place plus one
    ``getitem`` per layer (:func:`_stacked_kernel`: the weights are held once). Bit-identical:
    each output element is the same dot product, accumulated in the same order, as the
    layer's own GEMM computes (the packed panels of a row are the same); the outputs are views
    with the stacked row stride instead of contiguous arrays."""
    groups: dict[int, list[Node]] = {}
    for node in graph.nodes:
        lin = _plain_linear(ctx, node)
        if lin is None or lin._packed is None:
            continue
        src = node.args[0]
        dtype = src.meta.get("dtype")
        if dtype is None or dtype != str(lin._packed.compute_dtype) or \
                node.meta.get("dtype") != dtype:
            continue
        groups.setdefault(id(src), []).append(node)
    fired = 0
    for nodes in groups.values():
        linears = [n.fn for n in nodes]
        if len(nodes) < 2 or len({id(m) for m in linears}) != len(linears):
            continue
        built = _stacked_kernel(linears)
        if built is None:
            continue
        step_fn = _StackedLinears(*built)
        src = nodes[0].args[0]
        paths = [n.meta["path"] for n in nodes]
        step = Node(graph._fresh("stacked_" + nodes[0].name), "call_fused", "linear_stack",
                    step_fn, (src,), {},
                    {"modules": paths, "rule": "linear_stack", "kind": "tuple",
                     "module_type": "+".join("Linear" for _ in nodes),
                     "scope": nodes[0].meta.get("scope"), "where": nodes[0].meta.get("where")})
        graph.nodes.insert(graph.nodes.index(nodes[0]), step)
        src.users.append(step)
        for i, n in enumerate(nodes):
            keep = {k: n.meta[k] for k in ("shape", "dtype", "scope", "where") if k in n.meta}
            g = Node(graph._fresh(n.name), "getitem", "getitem", None, (step, i), {}, keep)
            graph.nodes.insert(graph.nodes.index(n), g)
            step.users.append(g)
            graph.replace_all_uses(n, g)
            graph.erase(n)
        fired += 1
    return fired
