"""``TransformerEncoderLayer`` and ``TransformerEncoder`` (torch's signatures and keys)."""

from __future__ import annotations

import copy

import numpy as np

from modulekit.module import Module
from modulekit.nn._input import as_input
from modulekit.nn.modules.activation import GELU, ReLU
from modulekit.nn.modules.attention import MultiheadAttention
from modulekit.nn.modules.container import ModuleList
from modulekit.nn.modules.dropout import Dropout
from modulekit.nn.modules.linear import Linear
from modulekit.nn.modules.normalization import LayerNorm

__all__ = ["TransformerEncoder", "TransformerEncoderLayer", "linear_act"]


def linear_act(linear: Linear, x2d: np.ndarray, activation: str = "none", alpha=0.0, beta=0.0):
    """``activation(linear(x2d))`` with the activation applied in the GEMM's epilogue
    (``x2d``: a 2-D float array of width ``linear.in_features``; ``activation`` a name of
    ``modulekit._ext._gemm.ACTIVATIONS``)."""
    return linear._compute(x2d, activation, alpha, beta)



def _feedforward_activation(activation) -> tuple:
    """``(activation, epilogue)`` of a transformer layer's feed-forward: 'relu' / 'gelu' as
    torch's (a module), or any callable; the epilogue (ReLU, GELU, SiLU...: applied in
    linear1's GEMM) or None."""
    if isinstance(activation, str):
        if activation not in ("relu", "gelu"):
            raise RuntimeError(f"activation should be relu/gelu, not {activation}")
        activation = ReLU() if activation == "relu" else GELU()
    elif not callable(activation):
        raise TypeError(f"activation must be 'relu', 'gelu' or a callable, got {activation!r}")
    epilogue = getattr(activation, "_epilogue", None) if isinstance(activation, Module) else None
    return activation, epilogue

class TransformerEncoderLayer(Module):
    """Self-attention and feed-forward block, as ``torch.nn.TransformerEncoderLayer``.

    Parameters
    ----------
    d_model, nhead, dim_feedforward : int
    dropout : float
        Kept for signature compatibility (inference applies none).
    activation : "relu", "gelu" or a callable
        The feed-forward activation; "relu", "gelu" and activation modules the GEMM epilogue
        implements (ReLU, GELU in both forms, SiLU, ...) are fused into ``linear1``'s GEMM.
    layer_norm_eps : float
    batch_first : bool
    norm_first : bool
        Pre-norm (``x + sa(norm1(x))``) instead of post-norm (``norm1(x + sa(x))``).
    bias : bool
    device, dtype :
        CPU only; floating storage dtype.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.batch_first = batch_first
        self.activation, self._ff_epilogue = _feedforward_activation(activation)

    def _sa(self, x, attn_mask, key_padding_mask, batched):
        # x: (N, L, E) batch-first
        return self.self_attn._forward_batch_first(
            x, x, x, key_padding_mask, attn_mask, False, batched
        )[0]

    def _ff(self, x2d):
        if self._ff_epilogue is not None:
            h = linear_act(self.linear1, x2d, *self._ff_epilogue)
        else:
            h = np.asarray(self.activation(self.linear1(x2d)), dtype=x2d.dtype)
        return self.linear2.forward(h)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        """``src``: ``(S, N, E)`` (``(N, S, E)`` with ``batch_first``) or unbatched ``(S, E)``;
        masks as for :class:`MultiheadAttention` (``src_mask`` is its ``attn_mask``)."""
        x = as_input(src, "TransformerEncoderLayer")
        if x.ndim not in (2, 3):
            raise ValueError(f"TransformerEncoderLayer: src must be 2-D or 3-D, got {x.shape}")
        batched = x.ndim == 3
        if not batched:
            x = x[None]
        elif not self.batch_first:
            x = x.transpose(1, 0, 2)
        x = np.ascontiguousarray(x, dtype=self.self_attn._compute_dtype())
        N, L, E = x.shape
        kpm = src_key_padding_mask
        if self.norm_first:
            h = self.norm1(x)
            x = x + self._sa(h, src_mask, kpm, batched)
            h = self.norm2(x).reshape(N * L, E)
            x = x + self._ff(h).reshape(N, L, E)
        else:
            x = self.norm1(self._sa(x, src_mask, kpm, batched), residual=x)
            x = self.norm2(self._ff(x.reshape(N * L, E)).reshape(N, L, E), residual=x)
        if not batched:
            return x[0]
        return x if self.batch_first else np.ascontiguousarray(x.transpose(1, 0, 2))


class TransformerEncoder(Module):
    """A stack of ``num_layers`` copies of ``encoder_layer`` and an optional final ``norm``,
    as ``torch.nn.TransformerEncoder`` (keys ``layers.N.*``, ``norm.*``).

    ``enable_nested_tensor`` and ``mask_check`` act as in torch: where torch's eval fast path
    would run (see :meth:`_zero_padded`), the padded positions of the output are zeros
    before ``norm``, as torch's nested tensors return them.
    """

    def __init__(
        self,
        encoder_layer: TransformerEncoderLayer,
        num_layers: int,
        norm: Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(encoder_layer, TransformerEncoderLayer):
            raise TypeError(
                "TransformerEncoder: encoder_layer must be a TransformerEncoderLayer, got "
                f"{type(encoder_layer).__name__}"
            )
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal: bool | None = None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask)
        x = self._zero_padded(x, src, mask, src_key_padding_mask)  # (rnn: torch's fast path)
        if self.norm is not None:
            x = self.norm(x)
        return x

    # ---- rnn: torch's nested-tensor fast path zero-fills padded positions
    def _zero_padded(self, x, src, mask, src_key_padding_mask):
        """``x`` with the padded positions zeroed where torch's eval fast path
        (``enable_nested_tensor``) would return zeros there: a batch-first stack of
        post-norm ReLU/GELU layers with an even head count and in-projection biases, in eval,
        3-D input, a left-aligned ``src_key_padding_mask`` and no ``mask``."""
        if (not self.enable_nested_tensor or src_key_padding_mask is None or mask is not None
                or not self.layers or self.layers[0].training):
            return x
        first = self.layers[0]
        attn = first.self_attn
        act = first.activation
        has_bias = (attn._packed[0].has_bias if attn._packed is not None
                    else attn._parameters.get("in_proj_bias") is not None)
        if (first.norm_first or not attn.batch_first or attn.num_heads % 2 == 1
                or not has_bias or not isinstance(act, (ReLU, GELU))
                or first.norm1.eps != first.norm2.eps or np.ndim(src) != 3):
            return x
        kpm = as_input(src_key_padding_mask, "TransformerEncoder(src_key_padding_mask)")
        if kpm.dtype != np.bool_ or kpm.shape != np.shape(x)[:2]:
            return x
        if self.mask_check and np.any(kpm[:, :-1] & ~kpm[:, 1:]):
            return x  # not left-aligned: torch runs the padded path
        out = np.array(x, copy=True)
        out[kpm] = 0
        return out
