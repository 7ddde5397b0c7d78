"""``MultiheadAttention`` and the attention core shared with the transformer models.

Attention is one fused kernel (``modulekit._ext._ops.attention``): per (batch, head) task a
thread packs the head's keys transposed with the scale folded in and its values contiguous,
computes the scores with a register-blocked QK^T (8x32 on AVX-512), the softmax with the mask
folded in, and the PV product, holding one head's ``Lq x Lk`` scores at a time (64 KB at
sequence 128: they stay in L1/L2).
"""

from __future__ import annotations

import math

import numpy as np

from modulekit._ext import _ops
from modulekit._ext._gemm import pack_linear
from modulekit._ext._tensor import Parameter
from modulekit.device import as_device
from modulekit.dtypes import DataType, as_dtype, float32
from modulekit.module import Module
from modulekit.nn._input import as_input
from modulekit.nn._random import default_generator
from modulekit.nn.modules._fused_linear import RowsOf
from modulekit.nn.modules.linear import Linear

__all__ = ["MultiheadAttention", "attention", "additive_mask"]

#: The in-projection's parameter names when kdim/vdim differ from embed_dim (torch's).
_SEPARATE = ("q_proj_weight", "k_proj_weight", "v_proj_weight")

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def additive_mask(mask, what: str, dtype) -> np.ndarray:
    """``mask`` as an additive float mask: bool ``True`` (masked out) becomes ``-inf``, float
    masks are used as they are."""
    m = as_input(mask, what)
    if m.dtype == np.bool_:
        out = np.zeros(m.shape, dtype=dtype)
        out[m] = -np.inf
        return out
    if m.dtype.kind != "f":
        raise TypeError(f"{what}: expected a bool or floating mask, got dtype {m.dtype}")
    return m.astype(dtype, copy=False)


def attention(q, k, v, num_heads: int, mask=None, scale=None, need_weights=False):
    """Multi-head scaled dot-product attention.

    Parameters
    ----------
    q : ndarray (B, Lq, E)
    k : ndarray (B, Lk, E)
    v : ndarray (B, Lk, Ev)
        Projected queries, keys and values (any strides with a unit-stride last axis); head
        ``h`` owns columns ``h * E / num_heads`` to ``(h + 1) * E / num_heads``.
    num_heads : int
    mask : ndarray or None
        Additive float mask broadcastable to ``(B, num_heads, Lq, Lk)``.
    scale : float, optional
        Defaults to ``1 / sqrt(E / num_heads)``.
    need_weights : bool
        Also return the attention probabilities ``(B, num_heads, Lq, Lk)``.

    Returns
    -------
    out : ndarray (B, Lq, Ev), C-contiguous
    weights : ndarray or None

    Computes in float64 when any input is float64, else in float32.
    """
    return _ops.attention(q, k, v, num_heads, mask, scale, need_weights)


class MultiheadAttention(Module):
    """Multi-head attention with torch's signature and state-dict keys (``in_proj_weight``,
    ``in_proj_bias``, ``out_proj.weight``, ``out_proj.bias``).

    Parameters
    ----------
    embed_dim, num_heads : int
        ``embed_dim`` must be divisible by ``num_heads``.
    dropout : float
        Kept for signature compatibility; inference applies no dropout.
    bias : bool
        Biases on the in- and out-projections.
    add_bias_kv : bool
        Learned ``bias_k``/``bias_v`` (shape ``(1, 1, embed_dim)``) appended to the projected
        keys and values as one more position (masks gain a column that masks nothing).
    add_zero_attn : bool
        A zero key and value appended after that (one more position, masks extended alike).
    kdim, vdim : int, optional
        Key and value widths (default ``embed_dim``); when either differs, the in-projection
        is three weights ``q_proj_weight``, ``k_proj_weight`` (``(E, kdim)``),
        ``v_proj_weight`` (``(E, vdim)``), as torch's keys, packed as three GEMMs.
    batch_first : bool
        Inputs and outputs are ``(batch, seq, feature)`` instead of ``(seq, batch, feature)``.
    device, dtype :
        CPU only; floating storage dtype (default float32).

    Notes
    -----
    The in-projection is packed (on the first forward or :meth:`initialize`) as one GEMM over
    the stacked query/key/value weights, used whole for self-attention (``query is key is
    value``: one GEMM, q/k/v read in place as column blocks); cross-attention projects with
    each third on its own (packed separately on first use). ``in_proj_weight``/
    ``in_proj_bias`` leave ``state_dict()`` as for :class:`Linear`; loading re-packs.
    """

    _packed = None

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"MultiheadAttention: embed_dim and num_heads must be > 0, got {embed_dim} and "
                f"{num_heads}"
            )
        if embed_dim % num_heads:
            raise ValueError(
                f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by num_heads "
                f"({num_heads})"
            )
        kdim = embed_dim if kdim is None else kdim
        vdim = embed_dim if vdim is None else vdim
        for name, value in (("kdim", kdim), ("vdim", vdim)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"MultiheadAttention: {name} must be a positive int, got "
                                 f"{value!r}")
        if device is not None:
            as_device(device)
        dtype = float32 if dtype is None else as_dtype(dtype)
        if not dtype.is_floating:
            raise TypeError(f"MultiheadAttention: dtype must be a floating type, got {dtype.name}")
        self.embed_dim = int(embed_dim)
        self.kdim, self.vdim = int(kdim), int(vdim)
        self._qkv_same_embed_dim = self.kdim == self.embed_dim and self.vdim == self.embed_dim
        self.num_heads = int(num_heads)
        self.head_dim = self.embed_dim // self.num_heads
        self.dropout = float(dropout)
        self.batch_first = batch_first
        E = self.embed_dim
        rng = default_generator()
        if self._qkv_same_embed_dim:
            bound = math.sqrt(6.0 / (E + 3 * E))  # xavier_uniform over the (3E, E) matrix
            self.in_proj_weight = Parameter(
                rng.uniform(-bound, bound, (3 * E, E)).astype(dtype.numpy))
        else:  # torch's keys: three weights, each xavier_uniform
            for name, width in zip(_SEPARATE, (E, self.kdim, self.vdim)):
                bound = math.sqrt(6.0 / (E + width))
                setattr(self, name, Parameter(
                    rng.uniform(-bound, bound, (E, width)).astype(dtype.numpy)))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(np.zeros(3 * E, dtype=dtype.numpy))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(E, E, bias=bias, dtype=dtype)
        if bias:
            self.out_proj.bias = Parameter(np.zeros(E, dtype=dtype.numpy))
        if add_bias_kv:  # xavier_normal over (1, 1, E), as torch
            std = math.sqrt(2.0 / (E + E))
            self.bias_k = Parameter(rng.normal(0.0, std, (1, 1, E)).astype(dtype.numpy))
            self.bias_v = Parameter(rng.normal(0.0, std, (1, 1, E)).astype(dtype.numpy))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = bool(add_zero_attn)
        self._bias_dtype = None

    # ---------------------------------------------------------------- packing protocol
    def _pack_from(self, weight: np.ndarray, bias, storage: str) -> tuple:
        # one (3E, E) GEMM for self-attention; the three row views serve cross-attention
        # (each packs its rows on its own the first time it is used alone)
        E = self.embed_dim
        fused = pack_linear(weight, bias, storage)
        return tuple(RowsOf(fused, i * E, (i + 1) * E) for i in range(3))

    def _pack_separate(self, weights, bias, storage: str) -> tuple:
        # kdim/vdim: three GEMMs (q, k, v), each with its third of in_proj_bias
        E = self.embed_dim
        return tuple(
            pack_linear(w, None if bias is None else bias[i * E:(i + 1) * E], storage)
            for i, w in enumerate(weights)
        )

    def _pack(self) -> None:
        if not self._qkv_same_embed_dim:
            return self._pack_sep()
        with self._pack_lock:
            if self._packed is not None:
                return
            w = self._parameters.get("in_proj_weight")
            if w is None:
                raise RuntimeError("MultiheadAttention: cannot pack, in_proj_weight is None")
            b = self._parameters.get("in_proj_bias")
            packed = self._pack_from(w.numpy(), None if b is None else b.numpy(), w.dtype.name)
            self._bias_dtype = None if b is None else b.dtype
            del self._parameters["in_proj_weight"]
            if b is not None:
                del self._parameters["in_proj_bias"]
            self._packed = packed

    def _pack_sep(self) -> None:
        with self._pack_lock:
            if self._packed is not None:
                return
            ws = [self._parameters.get(n) for n in _SEPARATE]
            if any(w is None for w in ws):
                raise RuntimeError("MultiheadAttention: cannot pack, a projection weight is None")
            b = self._parameters.get("in_proj_bias")
            packed = self._pack_separate([w.numpy() for w in ws],
                                         None if b is None else b.numpy(), ws[0].dtype.name)
            self._bias_dtype = None if b is None else b.dtype
            for n in _SEPARATE:
                del self._parameters[n]
            if b is not None:
                del self._parameters["in_proj_bias"]
            self._packed = packed

    def _packed_keys(self) -> dict[str, tuple[tuple[int, ...], DataType]]:
        packed = self._packed
        if packed is None:
            return {}
        E = self.embed_dim
        storage = as_dtype(packed[0].storage)
        if not self._qkv_same_embed_dim:
            keys = {n: ((E, w), storage)
                    for n, w in zip(_SEPARATE, (E, self.kdim, self.vdim))}
        else:
            keys = {"in_proj_weight": ((3 * E, E), storage)}
        if packed[0].has_bias:
            keys["in_proj_bias"] = ((3 * E,), self._bias_dtype)
        return keys

    def _unpacked_values(self):
        parts = [p.unpack() for p in self._packed]
        if not self._qkv_same_embed_dim:  # (the weights differ in width: not stacked)
            b = None if parts[0][1] is None else np.concatenate([np.asarray(p[1]) for p in parts])
            return None, b
        w = np.concatenate([np.asarray(p[0]) for p in parts])
        b = None if parts[0][1] is None else np.concatenate([np.asarray(p[1]) for p in parts])
        return w, b

    def _packed_values(self) -> dict[str, np.ndarray]:
        if self._packed is None:
            return {}
        w, b = self._unpacked_values()
        if not self._qkv_same_embed_dim:
            values = {n: np.ascontiguousarray(p.unpack()[0])
                      for n, p in zip(_SEPARATE, self._packed)}
        else:
            values = {"in_proj_weight": np.ascontiguousarray(w)}
        if b is not None:
            values["in_proj_bias"] = b.astype(self._bias_dtype.numpy, order="C")
        return values

    def _unpack(self) -> None:
        if self._packed is None:
            return
        params = {k: Parameter(v) for k, v in self._packed_values().items()}
        params.update((k, v) for k, v in self._parameters.items() if k not in params)
        self.__dict__["_parameters"] = params
        self._packed = None
        self._bias_dtype = None

    def _repack(self, values: dict[str, np.ndarray], dtype: DataType | None = None) -> None:
        with self._pack_lock:
            packed = self._packed
            if packed is None:
                return
            if not self._qkv_same_embed_dim:
                return self._repack_sep(values, dtype)
            w, b = values.get("in_proj_weight"), values.get("in_proj_bias")
            if w is None or (b is None and packed[0].has_bias):
                old_w, old_b = self._unpacked_values()
                w = old_w if w is None else w
                b = old_b if b is None else b
            storage = as_dtype(packed[0].storage) if dtype is None else dtype
            bias_dtype = self._bias_dtype if dtype is None else dtype
            if b is not None:
                b = np.asarray(b).astype(bias_dtype.numpy, copy=False)
            self._packed = self._pack_from(
                np.asarray(w).astype(storage.numpy, copy=False), b, storage.name
            )
            self._bias_dtype = bias_dtype

    def _repack_sep(self, values, dtype) -> None:
        # (under _pack_lock, from _repack)
        current = self._packed_values()
        current.update(values)
        storage = as_dtype(self._packed[0].storage) if dtype is None else dtype
        bias_dtype = self._bias_dtype if dtype is None else dtype
        b = current.get("in_proj_bias")
        if b is not None:
            b = np.asarray(b).astype(bias_dtype.numpy, copy=False)
        self._packed = self._pack_separate(
            [np.asarray(current[n]).astype(storage.numpy, copy=False) for n in _SEPARATE], b,
            storage.name)
        self._bias_dtype = bias_dtype

    # ---------------------------------------------------------------- compute
    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights: bool = True,
        attn_mask=None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ):
        """Attend ``query`` to ``key``/``value``; returns ``(attn_output, attn_weights)``.

        Shapes (``batch_first=False``): query ``(L, N, E)``, key/value ``(S, N, E)`` or
        unbatched ``(L, E)``/``(S, E)``. ``key_padding_mask`` ``(N, S)`` (or ``(S,)``),
        ``attn_mask`` ``(L, S)`` or ``(N * num_heads, L, S)``: bool ``True`` excludes a
        position, a float mask is added to the scores. ``attn_weights`` is ``(N, L, S)``
        averaged over heads, ``(N, num_heads, L, S)`` with ``average_attn_weights=False``, or
        None when ``need_weights`` is False. ``is_causal`` is a hint only: ``attn_mask`` must
        then hold the causal mask, as in torch.
        """
        if is_causal and attn_mask is None:
            raise ValueError(
                "MultiheadAttention: is_causal=True needs attn_mask (the causal mask); it is a "
                "hint, as in torch"
            )
        q_in = as_input(query, "MultiheadAttention(query)")
        k_in = q_in if key is query else as_input(key, "MultiheadAttention(key)")
        v_in = (
            q_in
            if value is query
            else k_in
            if value is key
            else as_input(value, "MultiheadAttention(value)")
        )
        E = self.embed_dim
        batched = q_in.ndim == 3
        for name, t, width in (("query", q_in, E), ("key", k_in, self.kdim),
                               ("value", v_in, self.vdim)):
            if t.ndim != q_in.ndim or t.ndim not in (2, 3) or t.shape[-1] != width:
                what = ("embed_dim" if self._qkv_same_embed_dim or name == "query"
                        else {"key": "kdim", "value": "vdim"}[name])
                raise ValueError(
                    f"MultiheadAttention: {name} must be {'3' if batched else '2'}-D with last "
                    f"dimension {what}={width} (query {q_in.shape}), got {t.shape}"
                )
        same_k, same_v = k_in is q_in, v_in is q_in  # self-attention: one stacked GEMM
        if not batched:
            q_in = q_in[None]
        elif not self.batch_first:
            q_in = q_in.transpose(1, 0, 2)
        if not batched or not self.batch_first:
            k_in = q_in if same_k else (k_in[None] if not batched else k_in.transpose(1, 0, 2))
            v_in = q_in if same_v else (v_in[None] if not batched else v_in.transpose(1, 0, 2))
        out, weights = self._forward_batch_first(
            q_in, k_in, v_in, key_padding_mask, attn_mask, need_weights, batched
        )
        if not batched:
            out = out[0]
        elif not self.batch_first:
            out = np.ascontiguousarray(out.transpose(1, 0, 2))
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(axis=1)
        if not batched:
            weights = weights[0]
        return out, weights

    def _compute_dtype(self) -> np.dtype:
        if self._packed is not None:
            return self._packed[0].compute_dtype
        w = self.in_proj_weight if self._qkv_same_embed_dim else self.q_proj_weight
        return _F64 if w.dtype.numpy == _F64 else _F32

    def _forward_batch_first(
        self, q_in, k_in, v_in, key_padding_mask, attn_mask, need_weights, batched
    ):
        """Attention on batch-first 3-D inputs: ``(out (N, L, E), weights (N, H, L, S) or
        None)``; ``batched`` says which key_padding_mask shape to expect."""
        if self._packed is None:
            self._pack()
        packed = self._packed
        E, H = self.embed_dim, self.num_heads
        N, L = q_in.shape[0], q_in.shape[1]
        S = k_in.shape[1]
        if k_in.shape[:2] != (N, S) or v_in.shape[:2] != (N, S):
            raise ValueError(
                f"MultiheadAttention: key {k_in.shape} and value {v_in.shape} must share batch "
                f"and sequence sizes (batch {N})"
            )
        cdt = packed[0].compute_dtype
        mask = self._build_mask(key_padding_mask, attn_mask, N, L, S, batched, cdt)

        def project(t, p):
            x2 = np.ascontiguousarray(t, dtype=cdt).reshape(-1, t.shape[-1])
            return p.forward(x2).reshape(t.shape[0], t.shape[1], E)

        if q_in is k_in and k_in is v_in and self._qkv_same_embed_dim:
            x2 = np.ascontiguousarray(q_in, dtype=cdt).reshape(-1, E)
            y = packed[0].fused.forward(x2).reshape(N, L, 3 * E)
            q, k, v = y[:, :, :E], y[:, :, E : 2 * E], y[:, :, 2 * E :]
        else:
            q = project(q_in, packed[0])
            k = project(k_in, packed[1])
            v = project(v_in, packed[2])
        if self.bias_k is not None or self.add_zero_attn:
            k, v, mask = self._extend_kv(k, v, mask, N)
        ctx, weights = attention(q, k, v, H, mask, None, need_weights)
        out = self.out_proj.forward(ctx.reshape(N * L, E)).reshape(N, L, E)
        return out, weights

    def _extend_kv(self, k, v, mask, N):
        """``add_bias_kv`` then ``add_zero_attn``: one more key/value position each (torch's
        order), the mask extended by columns that mask nothing."""
        extra_k, extra_v = [], []
        if self.bias_k is not None:
            extra_k.append(np.broadcast_to(self.bias_k.numpy().astype(k.dtype), (N, 1, k.shape[2])))
            extra_v.append(np.broadcast_to(self.bias_v.numpy().astype(v.dtype), (N, 1, v.shape[2])))
        if self.add_zero_attn:
            extra_k.append(np.zeros((N, 1, k.shape[2]), k.dtype))
            extra_v.append(np.zeros((N, 1, v.shape[2]), v.dtype))
        k = np.concatenate([k, *extra_k], axis=1)
        v = np.concatenate([v, *extra_v], axis=1)
        if mask is not None:
            n = len(extra_k)
            pad = [(0, 0)] * (mask.ndim - 1) + [(0, n)]
            mask = np.pad(mask, pad)
        return k, v, mask

    def _build_mask(self, key_padding_mask, attn_mask, N, L, S, batched, dtype):
        H = self.num_heads
        mask = None
        if key_padding_mask is not None:
            kpm = additive_mask(key_padding_mask, "MultiheadAttention(key_padding_mask)", dtype)
            want = (N, S) if batched else (S,)
            if kpm.shape != want:
                raise ValueError(
                    f"MultiheadAttention: key_padding_mask must have shape {want}, got {kpm.shape}"
                )
            mask = kpm.reshape(N, 1, 1, S)
        if attn_mask is not None:
            am = additive_mask(attn_mask, "MultiheadAttention(attn_mask)", dtype)
            if am.shape == (L, S):
                am = am.reshape(1, 1, L, S)
            elif am.shape == (N * H, L, S):
                am = am.reshape(N, H, L, S)
            else:
                raise ValueError(
                    f"MultiheadAttention: attn_mask must have shape {(L, S)} or "
                    f"{(N * H, L, S)}, got {am.shape}"
                )
            mask = am if mask is None else mask + am
        return mask
