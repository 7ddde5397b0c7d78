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
import math
import os
from typing import Any, NamedTuple

import numpy as np

from modulekit.module import Module
from modulekit.nn import functional as F
from modulekit.nn._input import as_indices, as_input
from modulekit.nn.modules.activation import GELU, ReLU, Sigmoid, SiLU, Tanh
from modulekit.nn.modules.container import ModuleList
from modulekit.nn.modules.dropout import Dropout
from modulekit.nn.modules.linear import Linear
from modulekit.nn.modules.normalization import LayerNorm
from modulekit.nn.modules.sparse import Embedding

__all__ = ["BertConfig", "BertModel", "BertModelOutput", "mean_pool"]

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


# transformers' ACT2FN names -> the activation module computing them
_ACTIVATIONS = {
    "gelu": lambda: GELU(),
    "gelu_python": lambda: GELU(),
    "gelu_new": lambda: GELU(approximate="tanh"),
    "gelu_pytorch_tanh": lambda: GELU(approximate="tanh"),
    "gelu_fast": lambda: GELU(approximate="tanh"),
    "relu": lambda: ReLU(),
    "silu": lambda: SiLU(),
    "swish": lambda: SiLU(),
    "tanh": lambda: Tanh(),
    "sigmoid": lambda: Sigmoid(),
}


class BertEmbeddings(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.word_embeddings = Embedding(config.vocab_size, h, padding_idx=config.pad_token_id)
        self.position_embeddings = Embedding(config.max_position_embeddings, h)
        self.token_type_embeddings = Embedding(config.type_vocab_size, h)
        self.LayerNorm = LayerNorm(h, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids, position_ids):
        embeddings = self.word_embeddings(input_ids)
        embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = h // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = Linear(h, self.all_head_size)
        self.key = Linear(h, self.all_head_size)
        self.value = Linear(h, self.all_head_size)
        self.dropout = Dropout(config.attention_probs_dropout_prob)

    def transpose_for_scores(self, x):
        new_shape = x.shape[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.reshape(new_shape).transpose(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        scores = query_layer @ key_layer.transpose(0, 1, 3, 2)
        scores = scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = self.dropout(F.softmax(scores, dim=-1))
        context = (probs @ value_layer).transpose(0, 2, 1, 3)
        return context.reshape(context.shape[:-2] + (self.all_head_size,))


class BertSelfOutput(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(hidden_states + input_tensor)


class BertAttention(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, hidden_states, attention_mask=None):
        return self.output(self.self(hidden_states, attention_mask), hidden_states)


class BertIntermediate(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = _ACTIVATIONS[config.hidden_act]()

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(hidden_states + input_tensor)


class BertLayer(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, hidden_states, attention_mask=None):
        attention_output = self.attention(hidden_states, attention_mask)
        return self.output(self.intermediate(attention_output), attention_output)


class BertEncoder(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states, attention_mask=None):
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask)
        return hidden_states


class BertPooler(Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.activation = Tanh()

    def forward(self, hidden_states):
        return self.activation(self.dense(hidden_states[:, 0]))


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
    transformers does, by adding the float32 minimum to masked scores (a mask of all ones
    adds nothing and is skipped). Computes in float32; ``model.to("float16")`` /
    ``"bfloat16"`` stores the weights in 16 bits (widened in the kernels, accumulation in
    float32). The model is built in ``eval()`` mode (``train()`` turns its dropouts on).

    The modules are plain Hugging Face code; the speed comes from ``Module.compile()``:
    ``embeddings`` and ``encoder`` are compiled when the model is built (and again when it is
    unpickled or copied), so their first call captures them and the planner
    (``modulekit.compile.rules``) runs each layer as one GEMM over the stacked
    query/key/value weights, the fused attention kernel, the dense GEMMs with GELU in their
    epilogue and LayerNorm with its residual add. :meth:`initialize` without an example runs a
    one-token example, so the plans (and the stacked weights) exist before the first real
    call. A hooked module is called as it is (a boundary of the plan), its hooks firing as in
    eager mode.
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
        self.eval()  # an inference model: dropout off until train() (as from_pretrained's)
        self._compile_parts()

    def _compile_parts(self) -> None:
        self.embeddings.compile()
        self.encoder.compile()

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)  # (a pickled or copied module comes back uncompiled)
        self._compile_parts()

    def initialize(self, *example_args, **example_kwargs) -> BertModel:
        """Pack every layer and capture the compiled parts now (see
        :meth:`modulekit.Module.initialize`); without an example input, on one token."""
        if not example_args and not example_kwargs:
            example_args = (np.zeros((1, 1), dtype=np.int64),)
        return super().initialize(*example_args, **example_kwargs)

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
        if L > self.config.max_position_embeddings:
            raise ValueError(
                f"BertModel: sequence length {L} is longer than max_position_embeddings="
                f"{self.config.max_position_embeddings}"
            )
        if token_type_ids is None:
            token_type_ids = np.zeros((B, L), dtype=np.int64)
        else:
            token_type_ids = _int_array(token_type_ids, "token_type_ids").reshape(
                _same_shape(token_type_ids, (B, L), "token_type_ids")
            )
        extended_mask = None
        if attention_mask is not None:
            am = as_input(attention_mask, "BertModel(attention_mask)")
            am = am.reshape(_same_shape(am, (B, L), "attention_mask"))
            # transformers: (1 - mask) * finfo(float32).min, added to the scaled scores; a
            # mask of all ones adds nothing and is skipped
            if not (am == 1).all():
                extended_mask = (1.0 - am.astype(np.float32)) * np.finfo(np.float32).min
                extended_mask = extended_mask.reshape(B, 1, 1, L)
        hidden = self.embeddings(ids, token_type_ids, _positions(B, L))
        hidden = self.encoder(hidden, extended_mask)
        pooled = self.pooler(hidden) if self.pooler is not None else None
        return BertModelOutput(hidden, pooled)


@functools.lru_cache(maxsize=8)
def _positions(B: int, L: int) -> np.ndarray:
    """Position ids ``0 .. L-1`` for each of ``B`` rows, C-contiguous int64 (read-only: shared
    between calls)."""
    pos = np.tile(np.arange(L, dtype=np.int64), B).reshape(B, L)
    pos.flags.writeable = False
    return pos


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
