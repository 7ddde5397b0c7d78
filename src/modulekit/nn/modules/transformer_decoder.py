"""``TransformerDecoderLayer``, ``TransformerDecoder`` and ``Transformer`` (torch's signatures,
state-dict keys and semantics), over the same attention, GEMM and LayerNorm kernels as
:class:`~modulekit.nn.TransformerEncoderLayer`."""

from __future__ import annotations

import copy

import numpy as np

from modulekit.module import Module
from modulekit.nn._input import as_input
from modulekit.nn.modules.attention import MultiheadAttention
from modulekit.nn.modules.container import ModuleList
from modulekit.nn.modules.dropout import Dropout
from modulekit.nn.modules.linear import Linear
from modulekit.nn.modules.normalization import LayerNorm
from modulekit.nn.modules.transformer import (
    TransformerEncoder,
    TransformerEncoderLayer,
    _feedforward_activation,
    linear_act,
)

__all__ = ["Transformer", "TransformerDecoder", "TransformerDecoderLayer"]


def _causal_mask(size: int, dtype) -> np.ndarray:
    """The float mask hiding future positions: ``-inf`` above the diagonal, 0 elsewhere."""
    mask = np.zeros((size, size), dtype=dtype)
    mask[np.triu_indices(size, 1)] = -np.inf
    return mask


def _batch_first_3d(x, name: str, batch_first: bool, dtype):
    """(input as (N, L, E) C-contiguous in ``dtype``, batched?)"""
    if x.ndim not in (2, 3):
        raise ValueError(f"{name} must be 2-D (unbatched) or 3-D, got shape {x.shape}")
    batched = x.ndim == 3
    if not batched:
        x = x[None]
    elif not batch_first:
        x = x.transpose(1, 0, 2)
    return np.ascontiguousarray(x, dtype=dtype), batched


class TransformerDecoderLayer(Module):
    """Self-attention, cross-attention over ``memory`` and feed-forward block, as
    ``torch.nn.TransformerDecoderLayer``.

    Parameters
    ----------
    d_model, nhead, dim_feedforward : int
    dropout : float
        Dropout in training mode (the attention weights excepted); none in eval.
    activation : "relu", "gelu" or a callable
        The feed-forward activation (fused into ``linear1``'s GEMM when the epilogue has it).
    layer_norm_eps : float
    batch_first : bool
    norm_first : bool
        Pre-norm (``x + block(norm(x))``) instead of post-norm (``norm(x + block(x))``).
    bias : bool
    device, dtype :
        CPU only; floating storage dtype.
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **kw)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.batch_first = batch_first
        self.activation, self._ff_epilogue = _feedforward_activation(activation)

    def _sa(self, x, attn_mask, key_padding_mask, batched, is_causal):
        if is_causal and attn_mask is None:
            attn_mask = _causal_mask(x.shape[1], x.dtype)
        out = self.self_attn._forward_batch_first(x, x, x, key_padding_mask, attn_mask, False,
                                                  batched)[0]
        return self.dropout1(out)

    def _mha(self, x, mem, attn_mask, key_padding_mask, batched, is_causal):
        if is_causal and attn_mask is None:
            attn_mask = _causal_mask(x.shape[1], x.dtype)
        out = self.multihead_attn._forward_batch_first(x, mem, mem, key_padding_mask,
                                                       attn_mask, False, batched)[0]
        return self.dropout2(out)

    def _ff(self, x):
        N, L, E = x.shape
        x2d = x.reshape(N * L, E)
        if self._ff_epilogue is not None:
            h = linear_act(self.linear1, x2d, *self._ff_epilogue)
        else:
            h = np.asarray(self.activation(self.linear1(x2d)), dtype=x2d.dtype)
        h = self.dropout(h)
        return self.dropout3(self.linear2.forward(h)).reshape(N, L, E)

    def _forward_bf(self, x, mem, tgt_mask, memory_mask, tgt_kpm, memory_kpm, batched,
                    tgt_is_causal, memory_is_causal):
        """The block on batch-first (N, L, E) arrays."""
        if self.norm_first:
            x = x + self._sa(self.norm1(x), tgt_mask, tgt_kpm, batched, tgt_is_causal)
            x = x + self._mha(self.norm2(x), mem, memory_mask, memory_kpm, batched,
                              memory_is_causal)
            x = x + self._ff(self.norm3(x))
        else:
            x = self.norm1(self._sa(x, tgt_mask, tgt_kpm, batched, tgt_is_causal), residual=x)
            x = self.norm2(self._mha(x, mem, memory_mask, memory_kpm, batched,
                                     memory_is_causal), residual=x)
            x = self.norm3(self._ff(x), residual=x)
        return x

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False):
        """``tgt`` ``(T, N, E)`` and ``memory`` ``(S, N, E)`` (batch-major with
        ``batch_first``, or unbatched ``(T, E)``/``(S, E)``); masks as for
        :class:`MultiheadAttention` (``tgt_mask`` and ``memory_mask`` are the attention
        masks of the two attention blocks). ``tgt_is_causal``/``memory_is_causal`` without
        the matching mask apply the causal mask."""
        dt = self.self_attn._compute_dtype()
        x, batched = _batch_first_3d(as_input(tgt, "TransformerDecoderLayer(tgt)"),
                                     "TransformerDecoderLayer: tgt", self.batch_first, dt)
        mem, mbatched = _batch_first_3d(as_input(memory, "TransformerDecoderLayer(memory)"),
                                        "TransformerDecoderLayer: memory", self.batch_first, dt)
        if mbatched != batched or mem.shape[0] != x.shape[0] or mem.shape[2] != x.shape[2]:
            raise ValueError(f"TransformerDecoderLayer: tgt {np.shape(tgt)} and memory "
                             f"{np.shape(memory)} must agree in batch and feature sizes")
        x = self._forward_bf(x, mem, tgt_mask, memory_mask, tgt_key_padding_mask,
                             memory_key_padding_mask, batched, tgt_is_causal, memory_is_causal)
        if not batched:
            return x[0]
        return x if self.batch_first else np.ascontiguousarray(x.transpose(1, 0, 2))


class TransformerDecoder(Module):
    """A stack of ``num_layers`` copies of ``decoder_layer`` and an optional final ``norm``,
    as ``torch.nn.TransformerDecoder`` (keys ``layers.N.*``, ``norm.*``)."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int,
                 norm: Module | None = None) -> None:
        super().__init__()
        if not isinstance(decoder_layer, TransformerDecoderLayer):
            raise TypeError("TransformerDecoder: decoder_layer must be a "
                            f"TransformerDecoderLayer, got {type(decoder_layer).__name__}")
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False):
        """As :meth:`TransformerDecoderLayer.forward`, through every layer, then ``norm``."""
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        if self.norm is not None:
            x = self.norm(x)
        return x


class Transformer(Module):
    """Encoder-decoder transformer, as ``torch.nn.Transformer`` (keys ``encoder.layers.N.*``,
    ``encoder.norm.*``, ``decoder.layers.N.*``, ``decoder.norm.*``).

    Parameters
    ----------
    d_model, nhead, num_encoder_layers, num_decoder_layers, dim_feedforward : int
    dropout : float
    activation : "relu", "gelu" or a callable
    custom_encoder, custom_decoder : Module, optional
        Used instead of the default stacks.
    layer_norm_eps : float
    batch_first, norm_first, bias : bool
    device, dtype :
        CPU only; floating storage dtype.
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", custom_encoder: Module | None = None,
                 custom_decoder: Module | None = None, layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation,
                                            layer_norm_eps, batch_first, norm_first, bias, **kw)
            self.encoder = TransformerEncoder(
                layer, num_encoder_layers, LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, activation,
                                            layer_norm_eps, batch_first, norm_first, bias, **kw)
            self.decoder = TransformerDecoder(
                layer, num_decoder_layers, LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> np.ndarray:
        """The ``(sz, sz)`` float causal mask: ``-inf`` above the diagonal, 0 elsewhere."""
        return _causal_mask(int(sz), np.float32 if dtype is None else np.dtype(dtype))

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal: bool | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False):
        """Encode ``src``, decode ``tgt`` against it; shapes as torch's (``src`` ``(S, N, E)``,
        ``tgt`` ``(T, N, E)``, batch-major with ``batch_first``, or unbatched)."""
        s = as_input(src, "Transformer(src)")
        t = as_input(tgt, "Transformer(tgt)")
        batch_dim = 0 if self.batch_first else 1
        if s.ndim != t.ndim or (s.ndim == 3 and s.shape[batch_dim] != t.shape[batch_dim]):
            raise RuntimeError("the batch number of src and tgt must be equal")
        if s.shape[-1] != self.d_model or t.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(s, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(t, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)
