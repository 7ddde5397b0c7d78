"""Rules for fully connected layers."""

from __future__ import annotations

from modulekit.compile.graph import Graph
from modulekit.compile.passes import Context

__all__ = ["EXACT_EPILOGUES", "linear_activation"]

#: The GEMM epilogues that give the same bits as the activation modules' own forward: all of
#: them, since the GEMM epilogue and ``nn.functional`` evaluate the one activation math of
#: ``kernels/common`` (tests/test_kernel_math.py checks the bit identity on every ISA path).
EXACT_EPILOGUES = frozenset(
    ("relu", "relu6", "hardswish", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
)


def linear_activation(graph: Graph, ctx: Context) -> int:
    """``act(linear(x))`` -> one GEMM call with the activation in its epilogue.

    Matches a ``Linear`` whose only reader is an activation module (one with an ``_epilogue``)
    whose epilogue computes exactly what the module's own forward computes
    (:data:`EXACT_EPILOGUES`), so the fused step is bit-identical to the two steps."""
    from modulekit.nn.modules.linear import Linear

    fired = 0
    for node in list(graph.nodes):
        linear = ctx.module(node, Linear)
        if linear is None or node.kwargs or len(node.args) != 1:
            continue
        user = ctx.only_user(node)
        act = ctx.module(user) if user is not None else None
        epilogue = getattr(act, "_epilogue", None) if act is not None else None
        if (epilogue is None or epilogue[0] not in EXACT_EPILOGUES or user.kwargs
                or user.args != (node,)):
            continue
        name, alpha, beta = epilogue
        ctx.fuse([node, user], "linear_activation", linear._compute,
                 (node.args[0], name, alpha, beta))
        fired += 1
    return fired
