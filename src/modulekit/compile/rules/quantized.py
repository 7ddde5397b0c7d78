"""The rules for statically quantized networks (``modulekit.quantization.quantize_static``).

The conv rules (:mod:`modulekit.compile.rules.conv`) fuse a ``QuantizedConv2d`` with its
residual add, ReLU/ReLU6 and max pool as they fuse a float ``Conv2d``; each such step still
takes and returns float32. :func:`quantized_handoff`, run after them, makes the steps whose
results only quantized convolutions read store those results as bytes instead: the
activations then stay int8 from one convolution to the next. :func:`quantized_invres` then
runs an inverted residual block's three hand-off steps as one call.
"""

from __future__ import annotations

from modulekit.compile.graph import Graph, Node
from modulekit.compile.passes import Context
from modulekit.compile.rules.conv import (
    ConvStep,
    DepthwiseChainStep,
    _conv_step,
    _paths,
    _plain_conv,
    _quantized,
)

__all__ = ["QuantizedConvStep", "quantized_handoff", "quantized_invres"]


class QuantizedConvStep(ConvStep):
    """A quantized convolution step (a :class:`ConvStep` over a ``PackedQConv2d``) that
    returns a ``_qgemm.QuantizedArray`` in ``out_q = (scale, zero_point)``: its readers'
    input quantization."""

    __slots__ = ("out_q",)

    def __init__(self, step: ConvStep, out_q: tuple[float, int]) -> None:
        super().__init__(step.conv, step.packed, step.activation, step.pool)
        self.out_q = out_q

    def __call__(self, x, residual=None):
        try:
            if self.pool is not None:
                return self.packed.forward_maxpool(x, self.activation, *self.pool,
                                                   output_q=self.out_q)
            return self.packed.forward(x, self.activation, residual, self.out_q)
        except ValueError as exc:
            raise self.conv._error(exc) from None

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", out_q={self.out_q})"


def _quantized_node(node: Node, ctx: Context) -> bool:
    """A plain ``QuantizedConv2d`` call or a conv rule's step over one."""
    from modulekit.nn.modules.quantized import QuantizedConv2d

    if node.op == "call_fused":
        return type(node.fn) is ConvStep and _quantized(node.fn)
    return type(_plain_conv(node, ctx)) is QuantizedConv2d


def _step(node: Node, ctx: Context) -> ConvStep:
    return node.fn if node.op == "call_fused" else _conv_step(node, ctx)


def quantized_handoff(graph: Graph, ctx: Context) -> int:
    """A quantized convolution (plain or a conv rule's step) whose every reader is a
    quantized convolution, reading it once as its input or as the residual its epilogue
    adds -> the same step storing its result as bytes in the readers' input quantization
    (:class:`QuantizedConvStep`).

    The quantization is the input ``(scale, zero_point)`` of the readers that read it as
    their input (they must all be equal: ``quantize_static`` calibrates one value's readers
    on the same data, so they are); where residual adds alone read it, the layer's own
    calibrated output quantization (``QuantizedConv2d.scale``/``zero_point``), which is
    the value's only for a step that is the convolution alone (no residual, activation or
    pool: a ResNet's downsampling branch). Not bit-identical to the float hand-off where the
    value is a reader's residual (the residual is then the dequantized bytes, not the float32
    value); bit-identical where it is only read as an input (the epilogue requantizes
    exactly as the reader would quantize the float32 value)."""
    chosen = []
    for node in graph.nodes:
        if not _quantized_node(node, ctx) or not node.users:
            continue
        qparams = set()
        for user in node.users:
            reads = [i for i, a in enumerate(user.args) if a is node]
            if (not _quantized_node(user, ctx) or user.kwargs or len(reads) != 1
                    or reads[0] > 1):
                break
            if reads[0] == 0:
                packed = _step(user, ctx).packed
                qparams.add((packed.input_scale, packed.input_zero_point))
        else:
            step = _step(node, ctx)
            if not qparams and len(node.args) == 1 and not step.activation and \
                    step.pool is None:
                qparams.add((step.packed.output_scale, step.packed.output_zero_point))
            if len(qparams) == 1:
                chosen.append((node, step, qparams.pop()))
    for node, step, out_q in chosen:
        step = QuantizedConvStep(step, out_q)
        modules = _paths(node)
        ctx.fuse([node], "quantized_handoff", step, node.args, modules=modules,
                 name="fused_" + modules[0].replace(".", "_"))
    return len(chosen)


def _handoff_into(node, reader: Node, ctx: Context) -> QuantizedConvStep | None:
    """``node``'s step when it is a one-input hand-off step that ``reader`` alone reads."""
    if isinstance(node, Node) and node.op == "call_fused" and \
            type(node.fn) is QuantizedConvStep and len(node.args) == 1 and not node.kwargs \
            and ctx.only_user(node) is reader:
        return node.fn
    return None


def quantized_invres(graph: Graph, ctx: Context) -> int:
    """[``e = expand(x)``] -> ``d = depthwise_3x3(e)`` -> ``project(d) (+ x)``, the first two
    hand-off steps (bytes out) read by nothing else, the project a quantized step (bytes or
    float32 out; a residual only when it is the block's input) -> one
    ``_qgemm.QInvertedResidual`` call (a ``DepthwiseChainStep``), which computes the
    three in bands of output rows so the expanded bytes stay in the caches: MobileNetV2's
    inverted residual block, quantized. Bit-identical to the three steps (the same kernels
    compute every value; the block runs them one after the other where it does not take the
    call: small maps, AMX tiles)."""
    from modulekit._ext._qgemm import QInvertedResidual

    fired = 0
    for node in list(graph.nodes):
        if node.kwargs or len(node.args) not in (1, 2):
            continue
        if node.op == "call_fused":  # a hand-off step, or a conv rule's step (float out)
            project = node.fn if isinstance(node.fn, ConvStep) and _quantized(node.fn) else None
        else:
            project = _step(node, ctx) if _quantized_node(node, ctx) else None
        d_node = node.args[0]
        dw = _handoff_into(d_node, node, ctx)
        if project is None or project.pool is not None or project.mean or dw is None \
                or dw.pool is not None:
            continue
        e_node = d_node.args[0]
        expand = _handoff_into(e_node, d_node, ctx)
        if expand is not None and expand.pool is not None:
            expand = None
        residual = len(node.args) == 2
        block = None
        for e in ((expand, None) if expand is not None else (None,)):
            # from the 1x1 before the depthwise step, or (a block without one, or one the
            # block kernel does not take) from the depthwise step
            x = e_node if e is None else e_node.args[0]
            if residual and node.args[1] is not x:
                continue
            steps = (None if e is None else e.packed, dw.packed, project.packed)
            acts = (None if e is None else e.activation, dw.activation, project.activation)
            out_qs = (None if e is None else e.out_q, dw.out_q, getattr(project, "out_q", None))
            if QInvertedResidual.fusable(*steps, acts, out_qs, residual):
                block = QInvertedResidual(*steps, acts, out_qs, residual)
                expand = e
                break
        if block is None:
            continue
        group = [d_node, node] if expand is None else [e_node, d_node, node]
        modules = [p for n in group for p in _paths(n)]
        ctx.fuse(group, "quantized_invres", DepthwiseChainStep(block, (expand or dw).conv),
                 (x,), modules=modules, name="fused_" + modules[0].replace(".", "_"))
        fired += 1
    return fired
