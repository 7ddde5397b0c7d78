"""Rules for transformer blocks: inference-mode dropout, the attention kernel, LayerNorm with
its residual add, the embeddings' sum and LayerNorm in one pass."""

from __future__ import annotations

import math
import numbers

import numpy as np

from modulekit._ext._ops import attention as _ops_attention
from modulekit._ext._ops import layer_norm as _ops_layer_norm
from modulekit.compile.graph import Graph, Node
from modulekit.compile.passes import Context

__all__ = ["ATTENTION_ATOL", "ATTENTION_RTOL", "attention", "dropout_identity",
           "embedding_layer_norm", "layer_norm_residual"]

#: The attention kernel's documented tolerance against the unfused NumPy steps (float32):
#: it sums the QK^T products and the softmax in another order (register-blocked, exp of the
#: max-subtracted scores in its own vector exp) and applies the scale to K, not to the scores.
ATTENTION_RTOL = 1e-4
ATTENTION_ATOL = 1e-5

_SOFTMAX = "modulekit.nn.functional.softmax"
_SDPA = "modulekit.nn.functional.scaled_dot_product_attention"


def dropout_identity(graph: Graph, ctx: Context) -> int:
    """``dropout(x)`` in inference mode, ``Identity()(x)`` -> ``x``.

    Matches a hook-free ``Dropout`` (any ``p``) whose ``training`` is False,
    ``F.dropout(x, p, training=False)`` and a hook-free ``Identity``: all return their input
    array itself, so reading the input instead is bit-identical (the same object). Runs
    first, so that the patterns after it see through the dropouts Hugging Face models keep
    in their code (attention, LayerNorm with residual) and the ``Identity`` that replaces a
    norm folded away (``quantize_static``)."""
    from modulekit.nn.modules.dropout import Dropout
    from modulekit.nn.modules.linear import Identity

    fired = 0
    for node in list(graph.nodes):
        src = None
        if node.op == "call_module":
            m = ctx.module(node, Dropout, Identity)
            if m is not None and not (type(m) is Dropout and m.training) and \
                    len(node.args) == 1 and not node.kwargs:
                src = node.args[0]
        elif node.op == "call_function" and node.target == "modulekit.nn.functional.dropout":
            args = dict(zip(("input", "p", "training", "inplace"), node.args))
            args.update(node.kwargs)
            if args.get("training", True) is False and set(args) <= {"input", "p", "training",
                                                                     "inplace"}:
                src = args.get("input")
        if not isinstance(src, Node) or src.meta.get("dtype") is None or \
                src.meta.get("dtype") != node.meta.get("dtype") or src.op == "input":
            # (an input may be a list or a non-ndarray: Dropout converts it)
            continue
        graph.replace_all_uses(node, src)
        graph.erase(node)
        fired += 1
    return fired


class _ResidualLayerNorm:
    """A fused step: ``ln(x, residual=y)``; float32 arrays of the norm's width go straight to
    the kernel (what ``LayerNorm.forward``'s own fast path calls), anything else through the
    module's forward."""

    __slots__ = ("ln", "fast")

    def __init__(self, ln) -> None:
        self.ln = ln
        w, b = ln.weight, ln.bias
        self.fast = None
        if (w is not None and b is not None and w.dtype.name == "float32"
                and b.dtype.name == "float32"):
            self.fast = (ln.normalized_shape, ln._n, np.asarray(w), np.asarray(b), ln.eps)

    def __call__(self, x, y):
        fast = self.fast
        if (fast is not None and type(x) is np.ndarray and type(y) is np.ndarray
                and x.dtype == _F32 and y.dtype == _F32 and x.shape == y.shape
                and x.shape[-1:] == fast[0]):
            return _ops_layer_norm(x, fast[1], fast[2], fast[3], fast[4], y)
        return self.ln.forward(x, residual=y)


_F32 = np.dtype(np.float32)


def layer_norm_residual(graph: Graph, ctx: Context) -> int:
    """``LayerNorm(x + y)`` -> ``LayerNorm(x, residual=y)``: the add done inside the norm's
    kernel, in the same pass that reads the row (no ``x + y`` array written and read back).

    Matches a hook-free ``LayerNorm`` called on one ``x + y`` (``operator.add`` or
    ``numpy.add``) read by nothing else, with ``x`` and ``y`` arrays of the same shape and
    float32/float64 dtype as the sum (no broadcasting, no type promotion). Bit-identical:
    the kernel adds the two rows element by element in the same precision before the
    statistics (``tests/test_compile_rules_attention.py`` compares bits)."""
    from modulekit.nn.modules.normalization import LayerNorm

    fired = 0
    for node in list(graph.nodes):
        ln = ctx.module(node, LayerNorm)
        if ln is None or node.kwargs or len(node.args) != 1:
            continue
        add = node.args[0]
        if not isinstance(add, Node) or add.op != "call_function" or add.target not in (
                "operator.add", "numpy.add") or add.kwargs or len(add.args) != 2:
            continue
        x, y = add.args
        if not (isinstance(x, Node) and isinstance(y, Node)) or ctx.only_user(add) is not node:
            continue
        dtype, shape = add.meta.get("dtype"), add.meta.get("shape")
        if dtype not in ("float32", "float64") or any(
                n.meta.get("dtype") != dtype or n.meta.get("shape") != shape for n in (x, y)):
            continue
        ctx.fuse([add, node], "layer_norm_residual", _ResidualLayerNorm(ln), (x, y))
        fired += 1
    return fired


# ---------------------------------------------------------------------------- attention
def _method(node, name: str) -> bool:
    return isinstance(node, Node) and node.op == "call_method" and node.target == name


def _axes(node: Node) -> tuple | None:
    """The permutation of a ``transpose`` method call (``x.transpose(0, 2, 1, 3)`` or
    ``x.transpose((0, 2, 1, 3))``)."""
    args = node.args[1:]
    if node.kwargs:
        return None
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return tuple(args) if all(type(a) is int for a in args) else None


def _dims(node: Node) -> tuple | None:
    """The target shape of a ``reshape`` method call."""
    args = node.args[1:]
    if node.kwargs:
        return None
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return tuple(args)


def _size_of(value, array: Node, axis: int, exact: bool, group: list) -> bool:
    """True when ``value`` (a reshape target entry) is ``array.shape[axis]`` for every input
    the plan runs on: a ``dim`` node reading that axis of ``array`` (added to ``group`` when
    only the reshape reads it), or a constant when the plan is specialised to these shapes."""
    if isinstance(value, Node):
        if value.op == "dim" and value.args[0] is array and value.args[1] == axis:
            group.append(value)
            return True
        return False
    shape = array.meta.get("shape")
    return exact and type(value) is int and shape is not None and shape[axis] == value


def _split_heads(node, exact: bool, group: list):
    """``X.reshape(b, s, H, D).transpose(0, 2, 1, 3)`` with ``X`` (b, s, H*D) ->
    ``(X, H, D)`` and the matched nodes appended to ``group``; else None."""
    if not _method(node, "transpose") or _axes(node) != (0, 2, 1, 3):
        return None
    r = node.args[0]
    if not _method(r, "reshape"):
        return None
    x = r.args[0]
    dims = _dims(r)
    shape = x.meta.get("shape") if isinstance(x, Node) else None
    if shape is None or len(shape) != 3 or dims is None or len(dims) != 4:
        return None
    H, D = dims[2], dims[3]
    if type(H) is not int or type(D) is not int or H <= 0:
        return None
    if D == -1:
        D = shape[2] // H
    if D <= 0 or H * D != shape[2]:
        return None
    mine: list = []
    if not (_size_of(dims[0], x, 0, exact, mine) and _size_of(dims[1], x, 1, exact, mine)):
        return None
    group += mine + [r, node]
    return x, H, D


def _scalar(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value)


def _merge_heads(node: Node, exact: bool, group: list):
    """The nodes after attention's ``probs @ v`` (``o``): ``o.transpose(0, 2, 1, 3)`` then
    ``.reshape(b, s, -1)`` (or ``(b, s, H*D)``) -> the reshape node; else None."""
    t = node
    if not _method(t, "transpose") or _axes(t) != (0, 2, 1, 3):
        return None
    reshapes = [u for u in t.users if _method(u, "reshape") and u.args[0] is t]
    if len(reshapes) != 1:
        return None
    r = reshapes[0]
    dims = _dims(r)
    shape = t.meta.get("shape")
    if dims is None or len(dims) != 3 or shape is None or len(shape) != 4:
        return None
    if dims[2] not in (-1, shape[2] * shape[3]):
        return None
    mine: list = []
    if not (_size_of(dims[0], t, 0, exact, mine) and _size_of(dims[1], t, 1, exact, mine)):
        return None
    if any(len(d.users) != 1 for d in mine):
        return None
    group += [t] + mine + [r]
    return r


def _run_attention(q, k, v, mask, num_heads, scale):
    return _ops_attention(q, k, v, num_heads, mask, scale)[0]


def _plain_softmax(ctx: Context, node: Node, ndim: int):
    """The input of ``softmax(x, dim=-1)`` (``F.softmax`` or a hook-free ``nn.Softmax``)."""
    from modulekit.nn.modules.activation import Softmax

    if node.op == "call_function" and node.target == _SOFTMAX:
        args = dict(zip(("input", "dim"), node.args))
        args.update(node.kwargs)
        if set(args) != {"input", "dim"}:
            return None
        x, dim = args["input"], args["dim"]
    elif node.op == "call_module" and ctx.module(node, Softmax) is not None:
        if len(node.args) != 1 or node.kwargs:
            return None
        x, dim = node.args[0], node.fn.dim
    else:
        return None
    return x if isinstance(x, Node) and dim in (-1, ndim - 1) else None


def _scaled_scores(node, exact: bool):
    """``(q, k, scale, group)`` for ``(q @ k^T) [/ c | * c]`` with ``q``, ``k`` split into
    heads; else None."""
    if not isinstance(node, Node) or node.op != "call_function" or node.kwargs or \
            len(node.args) != 2:
        return None
    group: list = []
    scale, mm = 1.0, node
    if node.target in ("operator.truediv", "operator.mul", "numpy.divide", "numpy.multiply"):
        a, b = node.args
        divide = node.target in ("operator.truediv", "numpy.divide")
        if isinstance(a, Node) and _scalar(b) is not None:
            mm, c = a, _scalar(b)
        elif not divide and isinstance(b, Node) and _scalar(a) is not None:
            mm, c = b, _scalar(a)
        else:
            return None
        if divide and c == 0.0:
            return None
        scale = 1.0 / c if divide else c
        group.append(node)
    if not (mm.op == "call_function" and mm.target in ("operator.matmul", "numpy.matmul")
            and not mm.kwargs and len(mm.args) == 2):
        return None
    qh, kt = mm.args
    if _method(kt, "transpose") and _axes(kt) == (0, 1, 3, 2):
        pass
    elif not (isinstance(kt, Node) and kt.op == "call_function"
              and kt.target == "numpy.swapaxes" and not kt.kwargs and len(kt.args) == 3
              and sorted(a % 4 for a in kt.args[1:] if type(a) is int) == [2, 3]):
        return None
    q = _split_heads(qh, exact, group)
    k = _split_heads(kt.args[0], exact, group)
    if q is None or k is None or q[1:] != k[1:]:
        return None
    group += [kt, mm]
    return q, k, scale, group


def _match_scores(ctx: Context, softmax: Node, exact: bool):
    """``(q, k, mask, scale, group)`` for the scores a softmax reads:
    ``(q @ k^T) [/ c] [+ mask]`` with ``q``, ``k`` split into heads; else None."""
    s = _plain_softmax(ctx, softmax, 4)
    if s is None:
        return None
    found = _scaled_scores(s, exact)
    if found is not None:
        q, k, scale, group = found
        return q, k, None, scale, group
    if not (s.op == "call_function" and s.target in ("operator.add", "numpy.add")
            and not s.kwargs and len(s.args) == 2):
        return None
    for scores, mask in (s.args, s.args[::-1]):
        found = _scaled_scores(scores, exact)
        if found is None:
            continue
        if s.meta.get("shape") != scores.meta.get("shape") or \
                s.meta.get("dtype") != scores.meta.get("dtype"):
            return None  # the mask broadcasts the scores up or promotes their type
        if isinstance(mask, Node):
            if mask.meta.get("dtype") is None:
                return None
        elif not hasattr(mask, "dtype") and _scalar(mask) is None:
            return None
        elif len(getattr(mask, "shape", ())) > 4:
            return None
        q, k, scale, group = found
        return q, k, mask, scale, group + [s]
    return None


def attention(graph: Graph, ctx: Context) -> int:
    """Multi-head attention written out (Hugging Face's ``BertSelfAttention``) or through
    ``F.scaled_dot_product_attention`` -> one call of the fused attention kernel
    (``_ops.attention``: one (batch, head) task a thread, the scores kept in L1/L2).

    Matches, for ``Q``, ``K``, ``V`` of shape (B, L, H*D)::

        q = Q.reshape(B, L, H, D).transpose(0, 2, 1, 3)         # the same for k and v
        s = q @ k.transpose(0, 1, 3, 2)  (or np.swapaxes(k, -1, -2))
        s = s / c  (or s * c, c * s; optional)
        s = s + mask  (optional; mask any array or constant broadcast to s's shape, not
                       changing its shape or dtype)
        p = F.softmax(s, dim=-1)  (or nn.Softmax(dim=-1))
        o = (p @ v).transpose(0, 2, 1, 3).reshape(B, L, -1)   (or ``(B, L, H*D)``)

    or ``F.scaled_dot_product_attention(q, k, v, attn_mask=..., dropout_p=0.0, scale=...)``
    followed by the same transpose/reshape, where ``B`` and ``L`` are read from the arrays'
    own shapes (``X.shape[0]``; constants only in a plan specialised to its shapes), every
    intermediate is read only inside the pattern, and Q, K, V and the result share a dtype
    (float32 or float64). Builds ``_ops.attention(Q, K, V, H, mask, scale)``: Q/K/V read in
    place (column blocks of a stacked projection need no copy), no (B, H, L, L) array
    allocated. Not bit-identical: within ``ATTENTION_RTOL``/``ATTENTION_ATOL`` of the unfused
    steps (float32)."""
    exact = bool(graph.meta.get("specialized"))
    fired = 0
    for node in list(graph.nodes):
        if node not in graph.nodes:
            continue
        if node.op == "call_function" and node.target == _SDPA:
            built = _match_sdpa(node, exact)
        elif node.op == "call_function" and node.target in ("operator.matmul",
                                                             "numpy.matmul"):
            built = _match_written(ctx, node, exact)
        else:
            continue
        if built is None:
            continue
        group, args, final = built
        Q, K, V = args[:3]
        dtype = final.meta.get("dtype")
        if dtype not in ("float32", "float64") or any(
                x.meta.get("dtype") != dtype for x in (Q, K, V)):
            continue
        mask = args[3]
        if isinstance(mask, Node) and mask.meta.get("dtype") not in (
                "float32", "float64", "bool", "float16"):
            continue
        ids = {id(n) for n in group}
        # a shape read of Q/K/V that something else reads too stays outside the step
        group = [n for n in group if n.op != "dim" or id(n.args[0]) in ids
                 or all(id(u) in ids for u in n.users)]
        ids = {id(n) for n in group}
        if id(final) not in ids or any(id(n) in ids for n in (Q, K, V)) or (
                isinstance(mask, Node) and id(mask) in ids):
            continue
        order = {id(n): i for i, n in enumerate(graph.nodes)}
        group = sorted({id(n): n for n in group}.values(), key=lambda n: order[id(n)])
        if group[-1] is not final:
            continue
        try:
            # (no module call inside: the step is attributed to the module whose forward
            # wrote it, e.g. ``encoder.layer.0.attention.self``)
            ctx.fuse(group, "attention", _run_attention, args,
                     modules=[final.meta.get("scope") or "attention"], heads=args[4])
        except ValueError:
            continue  # an intermediate is read outside the pattern
        fired += 1
    return fired


def _match_written(ctx: Context, pv: Node, exact: bool):
    """``probs @ v`` -> (group, args, final node) of the written-out pattern, or None."""
    if len(pv.args) != 2 or pv.kwargs:
        return None
    probs, vh = pv.args
    if not isinstance(probs, Node) or len(probs.users) != 1:
        return None
    matched = _match_scores(ctx, probs, exact)
    if matched is None:
        return None
    q, k, mask, scale, group = matched
    v = _split_heads(vh, exact, group)
    if v is None or v[1] != q[1]:
        return None
    group += [probs, pv]
    final = _merge_heads(pv.users[0], exact, group) if len(pv.users) == 1 else None
    if final is None:
        return None
    return group, (q[0], k[0], v[0], mask, q[1], scale), final


def _match_sdpa(node: Node, exact: bool):
    """``F.scaled_dot_product_attention(q, k, v, ...)`` -> (group, args, final), or None."""
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
             "enable_gqa")
    args = dict(zip(names, node.args))
    args.update(node.kwargs)
    if set(args) - set(names) or args.get("dropout_p", 0.0) != 0.0 or args.get("is_causal") \
            or args.get("enable_gqa"):
        return None
    group: list = []
    q = _split_heads(args.get("query"), exact, group)
    k = _split_heads(args.get("key"), exact, group)
    v = _split_heads(args.get("value"), exact, group)
    if q is None or k is None or v is None or q[1:] != k[1:] or v[1] != q[1]:
        return None
    mask = args.get("attn_mask")
    if mask is not None and not isinstance(mask, Node):
        return None
    if isinstance(mask, Node) and mask.meta.get("dtype") == "bool":
        return None  # True keeps a position in torch's convention: not the kernel's additive
    scale = args.get("scale")
    scale = 1.0 / math.sqrt(q[2]) if scale is None else _scalar(scale)
    if scale is None or len(node.users) != 1:
        return None
    group.append(node)
    final = _merge_heads(node.users[0], exact, group)
    if final is None:
        return None
    return group, (q[0], k[0], v[0], mask, q[1], scale), final


# ---------------------------------------------------------------------------- embeddings
class _EmbeddingsLayerNorm:
    """A fused step: ``layer_norm(t0[i0] + t1[i1] + t2[i2])`` in one pass per row
    (``_ops.embedding_layer_norm``); the modules one by one where that kernel does not apply
    (an index out of range: the table's own error names it)."""

    __slots__ = ("tables", "norm", "args")

    def __init__(self, tables, norm) -> None:
        self.tables, self.norm = tuple(tables), norm
        self.args = tuple(np.asarray(t.weight) for t in tables)

    def __call__(self, i0, i1, i2):
        from modulekit._ext._ops import embedding_layer_norm as kernel

        t0, t1, t2 = self.args
        norm = self.norm
        ids = [np.ascontiguousarray(i) for i in (i0, i1, i2)]
        try:
            out = kernel(ids[0], t0, ids[1], t1, ids[2], t2,
                                            np.asarray(norm.weight), np.asarray(norm.bias),
                                            norm.eps)
        except IndexError:
            out = None
        if out is not None:
            return out
        e0, e1, e2 = self.tables
        return norm.forward((e0.forward(i0) + e1.forward(i1)) + e2.forward(i2))


def embedding_layer_norm(graph: Graph, ctx: Context) -> int:
    """``LayerNorm(e0(i0) + e1(i1) + e2(i2))`` (BERT's word, token-type and position
    embeddings) -> one pass per token that gathers the three rows, sums them and normalises
    (``_ops.embedding_layer_norm``).

    Matches three hook-free ``Embedding`` calls on index arrays of one shape, summed as
    ``(e0 + e1) + e2`` (either operand order of each add) with no broadcasting, read only by
    a hook-free ``LayerNorm`` over the embedding width; tables and the norm's weight and bias
    float32. Bit-identical: the kernel adds the rows in the same order and normalises with
    the LayerNorm row kernel (on an index out of range, or ids the kernel does not take, the
    step runs the modules one by one, which raise the table's own error)."""
    from modulekit.nn.modules.normalization import LayerNorm
    from modulekit.nn.modules.sparse import Embedding

    def table(node):
        e = ctx.module(node, Embedding) if isinstance(node, Node) else None
        if e is None or len(node.args) != 1 or node.kwargs or not isinstance(node.args[0], Node):
            return None
        if e.weight is None or e.weight.dtype.name != "float32" or e.max_norm is not None:
            return None
        return e

    def add_of(node):
        if isinstance(node, Node) and node.op == "call_function" and node.target in (
                "operator.add", "numpy.add") and not node.kwargs and len(node.args) == 2:
            return node.args
        return None

    fired = 0
    for node in list(graph.nodes):
        ln = ctx.module(node, LayerNorm)
        if ln is None or node.kwargs or len(node.args) != 1:
            continue
        outer = node.args[0]
        pair = add_of(outer)
        if pair is None:
            continue
        for inner, last in (pair, pair[::-1]):
            first_two = add_of(inner)
            if first_two is not None and table(last) is not None:
                break
        else:
            continue
        nodes = [first_two[0], first_two[1], last]
        mods = [table(n) for n in nodes]
        if any(m is None for m in mods):
            continue
        ids = [n.args[0] for n in nodes]
        shape = ids[0].meta.get("shape")
        width = mods[0].weight.shape[1]
        if shape is None or any(i.meta.get("shape") != shape for i in ids) or any(
                m.weight.shape[1] != width for m in mods):
            continue
        if any(n.meta.get("shape") != outer.meta.get("shape") for n in nodes + [inner]):
            continue
        if ln.normalized_shape != (width,) or ln.weight is None or ln.bias is None or \
                ln.weight.dtype.name != "float32" or ln.bias.dtype.name != "float32":
            continue
        order = {id(n): i for i, n in enumerate(graph.nodes)}
        group = sorted([*nodes, inner, outer, node], key=lambda n: order[id(n)])
        if group[-1] is not node:
            continue
        try:
            ctx.fuse(group, "embedding_layer_norm", _EmbeddingsLayerNorm(mods, ln), tuple(ids))
        except ValueError:
            continue  # a row or a partial sum is read outside
        fired += 1
    return fired
