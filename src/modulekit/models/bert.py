"""BERT encoders with Hugging Face ``transformers``' module names, loading its checkpoints.

``BertModel.from_pretrained(directory)`` reads ``config.json`` and ``model.safetensors`` (or
``pytorch_model.bin``) from a Hugging Face model directory with modulekit's own readers: no
torch or transformers needed. The module tree (``embeddings.word_embeddings``,
``encoder.layer.N.attention.self.query``, ..., ``pooler.dense``) matches
``transformers.BertModel``, so its state dict loads key for key.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any, NamedTuple

import numpy as np

from modulekit._ext import _ops
from modulekit.dtypes import float32
from modulekit.module import Module
from modulekit.nn._input import as_indices, as_input
from modulekit.nn.modules._fused_linear import FusedLinears
from modulekit.nn.modules.attention import attention
from modulekit.nn.modules.container import ModuleList
from modulekit.nn.modules.dropout import Dropout
from modulekit.nn.modules.linear import Linear
from modulekit.nn.modules.normalization import LayerNorm
from modulekit.nn.modules.sparse import Embedding
from modulekit.nn.modules.transformer import linear_act

__all__ = ["BertConfig", "BertModel", "BertModelOutput", "mean_pool"]

_F32 = np.dtype(np.float32)

# hidden_act names of transformers' ACT2FN -> the GEMM epilogue computing them
_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
}

_DEFAULTS = {
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
}


class BertConfig(dict):
    """A ``transformers.BertConfig``-style dict: its keys, its defaults, attribute access.

    ``BertConfig(hidden_size=384, ...)``, ``BertConfig.from_dict(d)`` or
    ``BertConfig.from_json_file(path)``; unknown keys are kept (Hugging Face configs carry many).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(_DEFAULTS)
        self.update(kwargs)
        self._validate()

    @classmethod
    def from_dict(cls, config: dict) -> BertConfig:
        return cls(**config)

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> BertConfig:
        with open(path, encoding="utf-8") as f:
            return cls(**json.load(f))

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"BertConfig has no key {name!r}") from None

    def _validate(self) -> None:
        for key in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            v = self[key]
            if (
                isinstance(v, bool)
                or not isinstance(v, int)
                or v < (0 if key.startswith("num_hidden") else 1)
            ):
                raise ValueError(f"BertConfig: {key} must be a positive int, got {v!r}")
        if self["hidden_size"] % self["num_attention_heads"]:
            raise ValueError(
                f"BertConfig: hidden_size ({self['hidden_size']}) must be divisible by "
                f"num_attention_heads ({self['num_attention_heads']})"
            )
        if self["hidden_act"] not in _ACTIVATIONS:
            raise ValueError(
                f"BertConfig: hidden_act {self['hidden_act']!r} is not supported; expected one "
                f"of {sorted(_ACTIVATIONS)}"
            )
        if self.get("position_embedding_type", "absolute") != "absolute":
            raise NotImplementedError(
                "BertConfig: only position_embedding_type='absolute' is supported, got "
                f"{self['position_embedding_type']!r}"
            )
        if self.get("is_decoder") or self.get("add_cross_attention"):
            raise NotImplementedError("BertConfig: decoder / cross-attention BERT is not supported")


class BertModelOutput(NamedTuple):
    """``last_hidden_state`` (batch, seq, hidden) and ``pooler_output`` (batch, hidden), or
    None for a model without a pooler."""

    last_hidden_state: np.ndarray
    pooler_output: np.ndarray | None


class BertEmbeddings(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.word_embeddings = Embedding(config.vocab_size, h, padding_idx=config.pad_token_id)
        self.position_embeddings = Embedding(config.max_position_embeddings, h)
        self.token_type_embeddings = Embedding(config.type_vocab_size, h)
        self.LayerNorm = LayerNorm(h, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        """``input_ids``/``token_type_ids``: validated (B, L) int64 arrays -> (B*L, hidden)."""
        B, L = input_ids.shape
        m = self._modules
        tables = (m["word_embeddings"], m["position_embeddings"], m["token_type_embeddings"])
        if not all(type(e) is Embedding and not e._has_hooks for e in tables):
            # a replaced or hooked table: the modules are called, so each hook sees its call
            word, pos, typ = tables
            x = word(input_ids) + pos(_positions(B, L)) + typ(token_type_ids)
            return m["LayerNorm"](x.reshape(B * L, -1))
        word, pos, typ = (e._parameters["weight"].numpy() for e in tables)
        ln = _plain_ln(m["LayerNorm"])
        if ln is not None:
            # float32 tables: the three rows summed and normalised in one pass per token
            # (None for other dtypes; an index out of range raises below, named)
            try:
                x = _ops.embedding_layer_norm(
                    np.ascontiguousarray(input_ids),
                    word,
                    _positions(B, L),
                    pos,
                    np.ascontiguousarray(token_type_ids),
                    typ,
                    ln[1],
                    ln[2],
                    ln[0].eps,
                )
            except IndexError:
                x = None
            if x is not None:
                return x.reshape(B * L, -1)
        try:
            x = _ops.embedding(input_ids, word)
        except IndexError as exc:
            raise IndexError(f"BertModel: input_ids: {exc}") from None
        _ops.embedding(_positions(B, L), pos, out=x, accumulate=True)
        try:
            _ops.embedding(token_type_ids, typ, out=x, accumulate=True)
        except IndexError as exc:
            raise IndexError(f"BertModel: token_type_ids: {exc}") from None
        return m["LayerNorm"](x.reshape(B * L, -1))


class BertSelfAttention(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = h // config.num_attention_heads
        self.query = Linear(h, h)
        self.key = Linear(h, h)
        self.value = Linear(h, h)
        self.dropout = Dropout(config.attention_probs_dropout_prob)

        # query/key/value as one GEMM (stacked weights, the layers keep their keys and hooks)
        self.__dict__["_qkv"] = FusedLinears(self, ("query", "key", "value"))

    def _fuse(self) -> None:
        """(``initialize()``) Stack the query/key/value weights now, not on the first call."""
        qkv = self._qkv
        if qkv.usable():
            qkv.forward_ready()

    def forward(self, x: np.ndarray, B: int, L: int, mask) -> np.ndarray:
        h = x.shape[1]
        qkv = self._qkv
        y = qkv.forward(x) if qkv.usable() else None
        if y is not None:  # (B*L, 3h): q, k and v are column blocks, read in place
            y = y.reshape(B, L, 3 * h)
            q, k, v = y[:, :, :h], y[:, :, h : 2 * h], y[:, :, 2 * h :]
        else:  # hooked (every hook sees its call) or mixed storage dtypes
            m = self._modules
            q = m["query"](x).reshape(B, L, h)
            k = m["key"](x).reshape(B, L, h)
            v = m["value"](x).reshape(B, L, h)
        ctx, _ = attention(q, k, v, self.num_attention_heads, mask)
        return ctx.reshape(B * L, h)

    def _fuse(self) -> None:
        # initialize() stacks query/key/value now (so share_memory() shares the stack)
        if self._qkv.usable():
            self._qkv._build()

    def __getstate__(self) -> dict:
        if getattr(self._modules["query"]._packed, "is_shared", False):
            self._fuse()  # a shared model sends its shared stack, not three separate packs
        state = super().__getstate__()
        state.pop("_qkv", None)
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self.__dict__["_qkv"] = FusedLinears(self, ("query", "key", "value"))


class BertSelfOutput(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, hidden: np.ndarray, input_tensor: np.ndarray) -> np.ndarray:
        m = self._modules  # (children by name: cheaper than attribute fallback lookups)
        return m["LayerNorm"](m["dense"](hidden), residual=input_tensor)


class BertAttention(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, x: np.ndarray, B: int, L: int, mask) -> np.ndarray:
        m = self._modules
        return m["output"](m["self"](x, B, L, mask), x)


class BertIntermediate(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.intermediate_size)
        self._act = _ACTIVATIONS[config.hidden_act]

    def forward(self, x: np.ndarray) -> np.ndarray:
        dense = self._modules["dense"]
        if dense._has_hooks:  # the hook sees the Linear's own output; then the activation
            return _gelu_like(dense(x), self._act)
        return linear_act(dense, x, self._act)  # activation fused into the GEMM


class BertOutput(BertSelfOutput):
    def __init__(self, config: BertConfig) -> None:
        Module.__init__(self)
        self.dense = Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)


class BertLayer(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, x: np.ndarray, B: int, L: int, mask) -> np.ndarray:
        m = self._modules
        parts = _plain_layer(m)
        if parts is not None:  # no hooks anywhere in the layer: the kernels back to back
            qkv, heads, dense1, ln1, dense2, act, dense3, ln2 = parts  # ln: (module, w, b)
            h = x.shape[1]
            y = qkv.forward(x)
            if y is not None:
                y = y.reshape(B, L, 3 * h)
                ctx, _ = _ops.attention(
                    y[:, :, :h], y[:, :, h : 2 * h], y[:, :, 2 * h :], heads, mask
                )
                del y  # temporaries die as early as in the module calls (large batches
                # reuse their memory instead of mapping new pages)
                a = _residual_ln(ln1, dense1._compute(ctx.reshape(B * L, h), "none", 0.0, 0.0), x)
                del ctx
                o = dense3._compute(dense2._compute(a, act, 0.0, 0.0), "none", 0.0, 0.0)
                return _residual_ln(ln2, o, a)
        a = m["attention"](x, B, L, mask)
        return m["output"](m["intermediate"](a), a)


def _plain_ln(ln):
    """``(ln, weight, bias)`` (the arrays) when ``ln`` is a hook-free float32 LayerNorm with
    weight and bias, else None. (Parameters read from ``_parameters``: the attribute fallback
    through ``Module.__getattr__`` costs about 0.7 us a lookup.)"""
    if type(ln) is not LayerNorm or ln._has_hooks:
        return None
    p = ln._parameters
    w, b = p.get("weight"), p.get("bias")
    if w is None or b is None or w.dtype is not float32 or b.dtype is not float32:
        return None
    return ln, w.numpy(), b.numpy()


def _residual_ln(ln: tuple, y: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """``ln(y, residual=residual)`` for ``ln`` from :func:`_plain_ln`, straight to the kernel
    when ``y`` is float32 (the module's own checks otherwise)."""
    module, w, b = ln
    if y.dtype == _F32:
        return _ops.layer_norm(y, module._n, w, b, module.eps, residual)
    return module(y, residual=residual)


def _plain_layer(m: dict):
    """The pieces of a BertLayer (children ``m``) whose modules are all the standard ones
    without hooks, for running its kernels back to back: ``(qkv, heads, attention dense,
    its LayerNorm, intermediate dense, activation, output dense, its LayerNorm)``; None when
    a module was replaced or has hooks (the modules are then called one by one, so every hook
    sees its call)."""
    att, inter, out = m["attention"], m["intermediate"], m["output"]  # (children by name)
    if (
        type(att) is not BertAttention
        or type(inter) is not BertIntermediate
        or type(out) is not BertOutput
        or att._has_hooks
        or inter._has_hooks
        or out._has_hooks
    ):
        return None
    am = att._modules
    sa, so = am["self"], am["output"]
    if type(sa) is not BertSelfAttention or type(so) is not BertSelfOutput:
        return None
    if sa._has_hooks or so._has_hooks:
        return None
    sm, om = so._modules, out._modules
    dense1, dense2, dense3 = sm["dense"], inter._modules["dense"], om["dense"]
    for d in (dense1, dense2, dense3):
        if type(d) is not Linear or d._has_hooks:
            return None
    ln1, ln2 = _plain_ln(sm["LayerNorm"]), _plain_ln(om["LayerNorm"])
    if ln1 is None or ln2 is None:
        return None
    qkv = sa._qkv
    if not qkv.usable():
        return None
    return qkv, sa.num_attention_heads, dense1, ln1, dense2, inter._act, dense3, ln2


class BertEncoder(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, x: np.ndarray, B: int, L: int, mask) -> np.ndarray:
        for layer in self._modules["layer"]:
            x = layer(x, B, L, mask)
        return x


class BertPooler(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)

    def forward(self, last_hidden_state: np.ndarray) -> np.ndarray:
        first = np.ascontiguousarray(last_hidden_state[:, 0])
        return linear_act(self.dense, first, "tanh")


class BertModel(Module):
    """The BERT encoder of ``transformers.BertModel`` (absolute positions, no decoder).

    Parameters
    ----------
    config : BertConfig, dict, or path of a ``config.json``
    add_pooling_layer : bool
        Build ``pooler`` (dense + tanh on the first token).

    Notes
    -----
    ``forward(input_ids, attention_mask=None, token_type_ids=None)`` takes integer arrays of
    shape ``(batch, seq)`` (a 1-D array is one sequence) and returns a
    :class:`BertModelOutput`. ``attention_mask`` (1 = attend, 0 = padding) is applied as
    transformers does, by adding the float32 minimum to masked scores. Computes in float32;
    ``model.to("float16")`` / ``"bfloat16"`` stores the weights in 16 bits (widened in the
    kernels, accumulation in float32). Each layer's query, key and value projections run as
    one GEMM over their stacked weights (the three ``Linear`` modules keep their keys; while
    one of them has hooks they run one by one); an all-ones ``attention_mask`` is skipped.
    """

    def __init__(self, config, add_pooling_layer: bool = True) -> None:
        super().__init__()
        if isinstance(config, (str, os.PathLike)):
            config = BertConfig.from_json_file(config)
        elif not isinstance(config, BertConfig):
            config = BertConfig.from_dict(dict(config))
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, dtype=None) -> BertModel:
        """Build from a Hugging Face model directory: ``config.json`` plus ``model.safetensors``
        (preferred) or ``pytorch_model.bin``. A ``bert.`` key prefix (checkpoints of
        task models) is stripped and task heads (``cls.*``, ...) are ignored; old ``gamma``/
        ``beta`` LayerNorm names are renamed. ``dtype`` optionally stores the weights as
        float16/bfloat16/float64."""
        directory = os.fspath(directory)
        cfg_path = os.path.join(directory, "config.json")
        if not os.path.isfile(cfg_path):
            raise FileNotFoundError(f"BertModel.from_pretrained: no config.json in {directory!r}")
        config = BertConfig.from_json_file(cfg_path)
        for name in ("model.safetensors", "pytorch_model.bin"):
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                break
        else:
            raise FileNotFoundError(
                f"BertModel.from_pretrained: neither model.safetensors nor pytorch_model.bin in "
                f"{directory!r} (sharded checkpoints are not supported)"
            )
        from modulekit.checkpoint import load  # (not on ``import modulekit.models``'s path)

        state = load(path)
        state = _hf_keys(state)
        model = cls(config, add_pooling_layer=any(k.startswith("pooler.") for k in state))
        model.load_state_dict(state, strict=True)
        if dtype is not None:
            model.to(dtype)
        return model

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> BertModelOutput:
        ids = _int_array(input_ids, "input_ids")
        if ids.ndim == 1:
            ids = ids[None]
        if ids.ndim != 2:
            raise ValueError(f"BertModel: input_ids must be (batch, seq), got shape {ids.shape}")
        B, L = ids.shape
        if L == 0:
            raise ValueError("BertModel: input_ids has no tokens (sequence length 0)")
        cfg = self.config
        if L > cfg.max_position_embeddings:
            raise ValueError(
                f"BertModel: sequence length {L} is longer than max_position_embeddings="
                f"{cfg.max_position_embeddings}"
            )
        if token_type_ids is None:
            tt = np.zeros((B, L), dtype=np.int64)
        else:
            tt = _int_array(token_type_ids, "token_type_ids").reshape(
                _same_shape(token_type_ids, (B, L), "token_type_ids")
            )
        mask = None
        if attention_mask is not None:
            am = as_input(attention_mask, "BertModel(attention_mask)")
            am = am.reshape(_same_shape(am, (B, L), "attention_mask"))
            # transformers: (1 - mask) * finfo(float32).min, added to the scaled scores; a
            # mask of all ones adds nothing and is skipped
            if not (am == 1).all():
                mask = (1.0 - am.astype(np.float32)) * np.finfo(np.float32).min
                mask = mask.reshape(B, 1, 1, L)
        m = self._modules  # (children by name: cheaper than attribute fallback lookups)
        x = m["embeddings"](ids, tt)
        x = m["encoder"](x, B, L, mask)
        hidden = x.reshape(B, L, -1)
        pooler = m.get("pooler")
        pooled = pooler(hidden) if pooler is not None else None
        return BertModelOutput(hidden, pooled)


@functools.lru_cache(maxsize=8)
def _positions(B: int, L: int) -> np.ndarray:
    """Position ids ``0 .. L-1`` for each of ``B`` rows, C-contiguous int64 (read-only: shared
    between calls)."""
    pos = np.tile(np.arange(L, dtype=np.int64), B).reshape(B, L)
    pos.flags.writeable = False
    return pos


def _gelu_like(y: np.ndarray, act: str) -> np.ndarray:
    """The epilogue activation ``act`` (a value of ``_ACTIVATIONS``) applied on its own, into
    a new array (a hook may have kept ``y``)."""
    if act == "gelu":
        return _ops.gelu(y, "none")
    if act == "gelu_tanh":
        return _ops.gelu(y, "tanh")
    if act == "relu":
        return np.maximum(y, 0)
    if act == "tanh":
        return np.tanh(y)
    with np.errstate(over="ignore"):
        s = 1.0 / (1.0 + np.exp(-y))
    return (y * s if act == "silu" else s).astype(y.dtype, copy=False)


def _int_array(x, what: str) -> np.ndarray:
    return as_indices(x, f"BertModel({what})").astype(np.int64, copy=False)


def _same_shape(x, shape: tuple[int, int], what: str) -> tuple[int, int]:
    got = np.shape(x)
    if got != shape and not (len(shape) == 2 and shape[0] == 1 and got == shape[1:]):
        raise ValueError(f"BertModel: {what} has shape {got}, expected {shape} like input_ids")
    return shape


def _hf_keys(state: dict) -> dict:
    """transformers' BertModel keys from a checkpoint of BertModel or a BERT task model."""
    prefixed = any(k.startswith("bert.") for k in state)
    out = {}
    for key, value in state.items():
        if prefixed:
            if not key.startswith("bert."):
                continue  # task heads (cls.*, classifier.*)
            key = key[5:]
        if not key.startswith(("embeddings.", "encoder.", "pooler.")):
            continue
        if key in ("embeddings.position_ids", "embeddings.token_type_ids"):
            continue  # transformers' non-persistent index buffers, saved by old versions
        if key.endswith(".gamma"):
            key = key[:-6] + ".weight"
        elif key.endswith(".beta"):
            key = key[:-5] + ".bias"
        out[key] = value
    return out


def mean_pool(last_hidden_state, attention_mask=None) -> np.ndarray:
    """Sentence embeddings as sentence-transformers' mean pooling: the mean of the token
    vectors where ``attention_mask`` is 1 (``sum(h * m) / max(sum(m), 1e-9)``).

    ``last_hidden_state`` (batch, seq, hidden); ``attention_mask`` (batch, seq) or None (all
    tokens). Returns (batch, hidden) float32 (float64 for float64 input)."""
    h = as_input(last_hidden_state, "mean_pool(last_hidden_state)")
    if h.ndim != 3:
        raise ValueError(
            f"mean_pool: last_hidden_state must be (batch, seq, hidden), got {h.shape}"
        )
    if h.dtype != np.float64:
        h = h.astype(np.float32, copy=False)
    if attention_mask is None:
        return h.mean(axis=1)
    m = as_input(attention_mask, "mean_pool(attention_mask)")
    if m.shape != h.shape[:2]:
        raise ValueError(f"mean_pool: attention_mask has shape {m.shape}, expected {h.shape[:2]}")
    m = m.astype(h.dtype)
    summed = np.einsum("bsh,bs->bh", h, m)
    return summed / np.maximum(m.sum(axis=1), 1e-9)[:, None]
