"""Rules for convolutional networks.

Every rule here rewrites a convolution into a :class:`ConvStep` (a ``call_fused`` step: one
packed convolution kernel call with what follows it folded into its weights or computed in its
epilogue), or extends an earlier rule's step. They run in this order (``rules.PIPELINE``):

1. :func:`conv_bn_fold` - ``bn(conv(x))`` -> the convolution with the norm folded in;
2. :func:`conv_residual_add` - ``conv(x) + r`` / ``out += r`` -> the add in the epilogue;
3. :func:`conv_activation` - ``act(conv(...))`` -> the activation in the epilogue;
4. :func:`conv_maxpool` - ``max_pool2d(conv(...))`` -> pooled from the kernel's row bands;
5. :func:`conv_global_avgpool` - ``conv(...).mean((2, 3))`` -> the mean in the kernel;
6. :func:`depthwise_chain` - [1x1] -> depthwise 3x3 -> 1x1 (+ the chain's input): one call
   in row bands (MobileNetV2's inverted residual, MobileNet/EfficientNet-style blocks).

What counts as "a convolution" for rules 2-6: a plain ``Conv2d`` call (exactly that class, no
hooks, called with one positional input, ``padding_mode='zeros'``) or a :class:`ConvStep` made
by an earlier rule. Each rule fires only where every node it absorbs is read by nothing else
(a value read from outside the group is kept as it is), and no module it absorbs has hooks (a
hooked module is a boundary).
"""

from __future__ import annotations

import operator

import numpy as np

from modulekit.compile.graph import Graph, Node, iter_nodes
from modulekit.compile.passes import Context
from modulekit.compile.rules.linear import EXACT_EPILOGUES

#: The activations a quantized convolution computes in its epilogue (``_qgemm``'s)
STATIC_ACTIVATIONS = ("relu", "relu6")

__all__ = [
    "CONV_EXACT_EPILOGUES",
    "ConvStep",
    "DepthwiseChainStep",
    "conv_activation",
    "conv_bn_fold",
    "conv_global_avgpool",
    "conv_maxpool",
    "conv_residual_add",
    "depthwise_chain",
]

#: The convolution epilogues that give the same bits as the activation modules' (and
#: ``nn.functional``'s) own forward on every instruction set, NaN and infinities included:
#: every one, since the epilogue and the functions evaluate the one activation math of
#: ``kernels/common`` (tests/test_kernel_math.py, tests/test_compile_rules_conv.py).
CONV_EXACT_EPILOGUES = EXACT_EPILOGUES

#: ``nn.functional`` activations (by the graph's target name) and their epilogues
_FUNCTIONAL_EPILOGUES = {f"modulekit.nn.functional.{n}": n for n in CONV_EXACT_EPILOGUES
                         if n != "gelu_tanh"}  # F.gelu(x) alone is the erf form

_CONV_RULES = frozenset(("conv_bn_fold", "conv_residual_add", "conv_activation"))


class ConvStep:
    """One planned convolution: ``packed`` (the layer's kernel, or a BatchNorm-folded copy)
    with ``activation`` (and a residual, when the step is called with one) in its epilogue,
    and then either a max pool (``pool``: ``PackedConv2d.forward_maxpool``'s arguments) or a
    global average pool (``mean``: ``PackedConv2d.forward_mean``; ``keepdims`` keeps the two
    pooled axes, as ``AdaptiveAvgPool2d(1)`` does).

    ``step(x)`` / ``step(x, residual)`` runs it; a ValueError (bad input) names the layer, as
    the ``Conv2d`` module's own call does."""

    __slots__ = ("conv", "packed", "activation", "pool", "mean", "keepdims")

    def __init__(self, conv, packed, activation=None, pool=None, mean=False, keepdims=False):
        self.conv = conv
        self.packed = packed
        self.activation = activation
        self.pool = pool
        self.mean = mean
        self.keepdims = keepdims

    def with_(self, **changes) -> ConvStep:
        """A copy with some fields changed (a rule extends a step without touching it)."""
        fields = {k: getattr(self, k) for k in self.__slots__}
        fields.update(changes)
        return ConvStep(**fields)

    def __call__(self, x, residual=None):
        try:
            if self.pool is not None:
                return self.packed.forward_maxpool(x, self.activation, *self.pool)
            if self.mean:
                y = self.packed.forward_mean(x, self.activation, residual)
                return y[..., None, None] if self.keepdims else y
            return self.packed.forward(x, self.activation, residual)
        except ValueError as exc:
            raise self.conv._error(exc) from None

    def __repr__(self) -> str:
        parts = [repr(self.packed)]
        if self.activation:
            parts.append(self.activation)
        if self.pool is not None:
            parts.append("maxpool")
        if self.mean:
            parts.append("mean")
        return f"ConvStep({', '.join(parts)})"


class DepthwiseChainStep:
    """The step of an inverted residual block's rule (:func:`depthwise_chain`, and
    ``quantized_invres`` in :mod:`modulekit.compile.rules.quantized`): the block's kernel
    object (``_conv.DepthwiseChain``, ``_qgemm.QInvertedResidual``) over the three steps'
    kernels, a bad input's ValueError naming the block's first layer."""

    __slots__ = ("chain", "conv")

    def __init__(self, chain, conv) -> None:
        self.chain = chain
        self.conv = conv

    def __call__(self, x):
        try:
            return self.chain(x)
        except ValueError as exc:
            raise self.conv._error(exc) from None

    def __repr__(self) -> str:
        return f"DepthwiseChainStep({self.chain!r})"


# ------------------------------------------------------------------------------ matching
def _conv_step(node: Node, ctx: Context) -> ConvStep | None:
    """The :class:`ConvStep` ``node`` computes: a plain Conv2d call (a new step over the
    layer's own kernel) or an earlier conv rule's step; None for anything else."""
    if node.op == "call_fused":
        return node.fn if node.meta.get("rule") in _CONV_RULES and \
            type(node.fn) is ConvStep else None
    conv = _plain_conv(node, ctx)
    if conv is None:
        return None
    packed = conv._packed
    if packed is None:
        conv._pack()
        packed = conv._packed
    return ConvStep(conv, packed)


def _plain_conv(node: Node, ctx: Context):
    """The ``Conv2d`` (or ``QuantizedConv2d``) a plain call node calls with one positional
    input and zero padding (its packed kernel pads with zeros; other padding modes pad in
    ``forward``), or None."""
    from modulekit.nn.modules.conv import Conv2d
    from modulekit.nn.modules.quantized import QuantizedConv2d

    conv = ctx.module(node, Conv2d, QuantizedConv2d)
    if conv is None or node.kwargs or len(node.args) != 1 or \
            getattr(conv, "padding_mode", "zeros") != "zeros":
        return None
    return conv


def _quantized(step: ConvStep) -> bool:
    """Whether a step's kernel is a statically quantized convolution (``PackedQConv2d``:
    int8, a clamp epilogue)."""
    from modulekit._ext._qgemm import PackedQConv2d

    return isinstance(step.packed, PackedQConv2d)


def _sole_user(node: Node, ctx: Context) -> Node | None:
    """The one node that reads ``node``, reading it once as its first argument."""
    user = ctx.only_user(node)
    if user is None or not user.args or user.args[0] is not node:
        return None
    if sum(1 for a in iter_nodes((user.args, user.kwargs)) if a is node) != 1:
        return None
    return user


def _paths(node: Node) -> list[str]:
    """The module paths a conv node covers (a fused step's, or the layer's own)."""
    if node.op == "call_fused":
        return list(node.meta.get("modules", ()))
    return [node.meta["path"]] if node.meta.get("path") is not None else []


def _extend(ctx, node, user, step, rule, extra_args=()):
    """Replace ``node`` (a conv or conv step) and ``user`` by one step ``step``."""
    modules = _paths(node)
    if user.op == "call_module" and user.meta.get("path") is not None:
        modules.append(user.meta["path"])
    args = (node.args[0],) + tuple(node.args[1:]) + tuple(extra_args)
    ctx.fuse([node, user], rule, step, args, modules=modules,
             name="fused_" + modules[0].replace(".", "_"))


def _activation_name(node: Node, ctx: Context) -> str | None:
    """The epilogue name of an activation node whose only input is its first argument: an
    activation module (``ReLU``, ``ReLU6``, ``Hardswish``: its ``_epilogue``) or
    its ``nn.functional`` form; None for anything else."""
    if node.op == "call_module":
        m = ctx.module(node)
        ep = getattr(m, "_epilogue", None) if m is not None else None
        if ep is None or node.kwargs or len(node.args) != 1:
            return None
        name, alpha, beta = ep
        return name if name in CONV_EXACT_EPILOGUES else None
    if node.op == "call_function" and len(node.args) == 1:
        name = _FUNCTIONAL_EPILOGUES.get(node.target)
        if name is not None and set(node.kwargs) <= {"inplace"}:
            return name
    return None


def _same_array(a: Node, b: Node) -> bool:
    sa, sb = a.meta.get("shape"), b.meta.get("shape")
    return sa is not None and sa == sb and a.meta.get("dtype") == b.meta.get("dtype")


# ------------------------------------------------------------------------------ rules
def conv_bn_fold(graph: Graph, ctx: Context) -> int:
    """``bn(conv(x))`` -> one convolution with the norm folded into its weights and bias.

    Matches a plain ``Conv2d`` whose only reader is a ``BatchNorm2d`` (exactly that class, no
    hooks) in eval mode with running statistics. Builds, at plan time from the tree as it is
    at capture, the folded kernel (``w * gamma / sqrt(var + eps)``, ``(b - mean) * gamma /
    sqrt(var + eps) + beta``, computed in the layer's compute dtype and packed in its storage
    dtype, as ``Conv2d._fused_packed`` folds for a Sequential: the same function, so the same
    bits as a Sequential's eager fused call). Not bit-identical to running the convolution and
    then the norm (one rounding fewer; agrees to float32 rounding, ~1e-6 relative)."""
    from modulekit.nn.modules.batchnorm import BatchNorm2d
    from modulekit.nn.modules.conv import Conv2d, fold_conv_bn

    fired = 0
    for node in list(graph.nodes):
        conv = _plain_conv(node, ctx)
        if type(conv) is not Conv2d:  # (a quantized one was folded when it was quantized)
            continue
        user = _sole_user(node, ctx)
        bn = ctx.module(user, BatchNorm2d) if user is not None else None
        if (bn is None or bn.training or user.kwargs or len(user.args) != 1
                or bn._buffers.get("running_mean") is None):
            continue
        ctx.fuse([node, user], "conv_bn_fold", ConvStep(conv, fold_conv_bn(conv, bn)),
                 (node.args[0],), name="fused_" + node.meta["path"].replace(".", "_"))
        fired += 1
    return fired


def conv_residual_add(graph: Graph, ctx: Context) -> int:
    """``conv(x) + r``, ``r + conv(x)``, ``out += r`` (``operator.add``/``iadd``,
    ``numpy.add``) -> the add in the convolution's epilogue (before any activation a later
    rule adds, as ``relu(bn(conv(x)) + identity)`` needs).

    Matches a convolution step with no activation, pooling or residual yet whose only reader
    is the add, when ``r`` is another array of the same captured shape and dtype (no
    broadcasting, no dtype promotion). Bit-identical to the step followed by the add (the
    kernel adds the residual to the stored value it would have written)."""
    fired = 0
    adds = (operator.add, operator.iadd, np.add)
    for node in list(graph.nodes):
        step = _conv_step(node, ctx)
        if step is None or step.activation or step.pool or step.mean or len(node.args) != 1:
            continue
        user = ctx.only_user(node)
        if (user is None or user.op != "call_function" or user.fn not in adds or user.kwargs
                or len(user.args) != 2):
            continue
        a, b = user.args
        other = b if a is node else a if b is node else None
        if (other is None or not isinstance(other, Node) or other is node
                or not _same_array(node, other) or not _same_array(node, user)):
            continue
        _extend(ctx, node, user, step, "conv_residual_add", (other,))
        fired += 1
    return fired


def conv_activation(graph: Graph, ctx: Context) -> int:
    """``act(conv(...))`` -> the activation in the convolution's epilogue.

    Matches a convolution step (plain, folded, with a residual) with no activation yet whose
    only reader is an activation with an epilogue (module or ``nn.functional``; ReLU, ReLU6,
    Hardswish, SiLU, GELU, Sigmoid, Tanh: :data:`CONV_EXACT_EPILOGUES`). Bit-identical to
    the step followed by the activation."""
    fired = 0
    for node in list(graph.nodes):
        step = _conv_step(node, ctx)
        if step is None or step.activation or step.pool or step.mean:
            continue
        user = _sole_user(node, ctx)
        name = _activation_name(user, ctx) if user is not None else None
        if name is None or (_quantized(step) and name not in STATIC_ACTIVATIONS):
            continue
        _extend(ctx, node, user, step.with_(activation=name), "conv_activation")
        fired += 1
    return fired


def conv_maxpool(graph: Graph, ctx: Context) -> int:
    """``max_pool2d(conv(...))`` -> ``PackedConv2d.forward_maxpool``: the pooling done from the
    convolution's row bands where the kernel can (a ResNet stem), the two calls elsewhere.

    Matches a convolution step without a residual whose only reader is a plain ``MaxPool2d``
    module (exactly that class, no hooks). Bit-identical to the step and then the pool."""
    from modulekit.nn.modules.pooling import MaxPool2d

    fired = 0
    for node in list(graph.nodes):
        step = _conv_step(node, ctx)
        if step is None or step.pool or step.mean or len(node.args) != 1:
            continue
        user = _sole_user(node, ctx)
        pool = ctx.module(user, MaxPool2d) if user is not None else None
        if pool is None or user.kwargs or len(user.args) != 1 or pool.return_indices:
            continue
        args = (pool.kernel_size, pool.stride, pool.padding, pool.dilation, pool.ceil_mode)
        _extend(ctx, node, user, step.with_(pool=args), "conv_maxpool")
        fired += 1
    return fired


def _global_pool(node: Node, ctx: Context):
    """``False``/``True`` (keepdims) when ``node`` averages a 4-D array over its two spatial
    axes: ``x.mean((2, 3))``/``np.mean(x, axis=(2, 3))`` (or (-2, -1)), ``AdaptiveAvgPool2d(1)``
    or ``F.adaptive_avg_pool2d(x, 1)``; None otherwise."""
    from modulekit.nn.modules.pooling import AdaptiveAvgPool2d

    if node.op == "call_module":
        pool = ctx.module(node, AdaptiveAvgPool2d)
        if pool is None or node.kwargs or len(node.args) != 1:
            return None
        size = pool.output_size
        return True if size in (1, (1, 1)) else None
    args, kwargs = node.args[1:], dict(node.kwargs)
    if node.op == "call_function" and node.target == "modulekit.nn.functional." \
            "adaptive_avg_pool2d":
        size = args[0] if args else kwargs.pop("output_size", None)
        return True if not kwargs and len(args) <= 1 and size in (1, (1, 1)) else None
    is_mean = (node.op == "call_method" and node.target == "mean") or (
        node.op == "call_function" and node.target == "numpy.mean")
    if not is_mean:
        return None
    axis = args[0] if args else kwargs.pop("axis", None)
    if len(args) > 1 or kwargs or not isinstance(axis, tuple):
        return None
    return False if sorted(a % 4 for a in axis if isinstance(a, int)) == [2, 3] \
        and len(axis) == 2 else None


def conv_global_avgpool(graph: Graph, ctx: Context) -> int:
    """``conv(...).mean(axis=(2, 3))`` (also ``np.mean``, axes (-2, -1), ``AdaptiveAvgPool2d(1)``,
    ``F.adaptive_avg_pool2d(x, 1)``) -> ``PackedConv2d.forward_mean``: each thread averages
    the channels it has just written, while they are in its caches (MobileNetV2's head).

    Matches a float32 4-D convolution step without pooling whose only reader is the global
    average pool; a quantized convolution (``PackedQConv2d.forward_mean``) averages its NHWC
    floats without the NCHW copy. Not bit-identical to NumPy's mean or the adaptive pool: the
    sum runs in ``_conv.spatial_mean``'s fixed order, or NumPy's over NHWC rows (equal to
    float32 rounding of a mean, ~1e-7 relative)."""
    fired = 0
    for node in list(graph.nodes):
        step = _conv_step(node, ctx)
        if step is None or step.pool or step.mean or node.meta.get("dtype") != "float32" \
                or len(node.meta.get("shape") or ()) != 4:
            continue
        user = _sole_user(node, ctx)
        keepdims = _global_pool(user, ctx) if user is not None else None
        if keepdims is None:
            continue
        _extend(ctx, node, user, step.with_(mean=True, keepdims=keepdims),
                "conv_global_avgpool")
        fired += 1
    return fired


def depthwise_chain(graph: Graph, ctx: Context) -> int:
    """[``e = act_e(pointwise(x))``] -> ``d = act_d(depthwise_3x3(e))`` -> ``pointwise(d)
    (+ x)`` -> one ``_conv.DepthwiseChain`` call, which runs the three convolutions in bands
    of output rows so the expanded tensor stays in the caches (AVX-512; the three kernels one
    after the other elsewhere).

    Matches a 1x1 convolution step (no pooling; a residual only when it is the chain's input)
    whose input is a depthwise 3x3 step read by nothing else, itself reading a 1x1 step read by
    nothing else (or, without it, the chain's input), float32, with geometries the chain
    kernel takes (``_conv.DepthwiseChain.fusable``): MobileNetV2's inverted residual block as
    torchvision writes it. Bit-identical to the three steps (every output is the same sum in
    the same order, the same epilogues)."""
    from modulekit._ext import _conv

    fired = 0
    for node in list(graph.nodes):
        project = _conv_step(node, ctx)
        if project is None or project.pool or project.mean:
            continue
        d_node = node.args[0]
        dw = _conv_step(d_node, ctx) if isinstance(d_node, Node) else None
        if dw is None or dw.pool or dw.mean or len(d_node.args) != 1 \
                or ctx.only_user(d_node) is not node:
            continue
        group = [d_node, node]
        e_node = d_node.args[0]
        expand = _conv_step(e_node, ctx) if isinstance(e_node, Node) else None
        if expand is not None and (expand.pool or expand.mean or len(e_node.args) != 1
                                   or ctx.only_user(e_node) is not d_node):
            expand = None
        residual = len(node.args) == 2
        chain = None
        for e in ((expand, None) if expand is not None else (None,)):
            # with the 1x1 before the depthwise step, or (when that is not one the chain
            # kernel takes: a stem's 3x3) starting at the depthwise step
            x = (e_node if e is None else e_node.args[0])
            if residual and node.args[1] is not x:
                continue
            packs = (None if e is None else e.packed, dw.packed, project.packed)
            acts = (None if e is None else e.activation, dw.activation, project.activation)
            if _conv.DepthwiseChain.fusable(*packs, acts, residual):
                chain = _conv.DepthwiseChain(*packs, acts, residual)
                expand = e
                break
        if chain is None:
            continue
        if expand is not None:
            group.insert(0, e_node)
        modules = [p for n in group for p in _paths(n)]
        first = (expand or dw).conv
        ctx.fuse(group, "depthwise_chain", DepthwiseChainStep(chain, first), (x,),
                 modules=modules, name="fused_" + modules[0].replace(".", "_"))
        fired += 1
    return fired
