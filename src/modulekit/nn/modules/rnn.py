"""Recurrent layers: ``RNN``, ``LSTM`` (with ``proj_size``), ``GRU`` and their cells.

How a layer runs (per layer of the stack):

1. the input projection of EVERY time step and both directions, ``x W_ih^T + b``, as one
   packed GEMM over all rows (``PackedLinear``: the directions' ``W_ih`` stacked, the biases
   that are simply added folded into its bias: ``b_ih + b_hh`` for RNN/LSTM, ``b_ih`` for GRU);
2. per direction, :func:`modulekit._ext._rnn.recurrence`: the time loop in one ``nogil``
   call, each step a recurrent GEMM ``h W_hh^T`` (packed) and one fused cell kernel
   (``kernels/rnn``: gate nonlinearities, state update, output write; an LSTM projection
   ``W_hr`` is one more GEMM).

Weights are packed on the first forward (or :meth:`~modulekit.Module.initialize`) and their
sources released, as ``Linear`` does; ``state_dict``, ``load_state_dict`` and ``to`` follow
the packing protocol of :mod:`modulekit.module`, so torch checkpoints (``weight_ih_l0``,
``weight_hh_l0_reverse``, ``weight_hr_l0``, ...) load as they are.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from modulekit._ext._gemm import pack_linear
from modulekit._ext._rnn import recurrence
from modulekit._ext._tensor import Parameter
from modulekit.device import as_device
from modulekit.dtypes import DataType, as_dtype, float32
from modulekit.module import Module
from modulekit.nn._input import as_input
from modulekit.nn._random import default_generator
from modulekit.nn.utils.rnn import PackedSequence

__all__ = ["GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNBase", "RNNCell", "RNNCellBase"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
_KIND = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}


def _input_shape(value) -> tuple:
    """The shape of an array-like input, for messages."""
    return tuple(np.shape(value))


def _positive_int(value, what: str, layer: str, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{layer}: {what} should be of type int, got: {type(value).__name__}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = "non-negative" if allow_zero else "greater than zero"
        raise ValueError(f"{layer}: {what} must be {bound}, got {value}")
    return int(value)


class _Packed:
    """The packed form of a recurrent module's weights.

    ``ih[l]``: layer l's stacked input projection (a PackedLinear); ``hh[l][d]`` and
    ``hr[l][d]`` (or None): the recurrent and projection weights of direction d; ``biases``:
    copies of the bias tensors (their sum is what ``ih`` holds, so they are kept to give the
    checkpoint back exactly); ``keys``: name -> (shape, DataType) of every released tensor.
    """

    __slots__ = ("biases", "compute_dtype", "hh", "hr", "ih", "keys", "storage")

    def __init__(self, groups, mode: str, values: dict, dtypes: dict) -> None:
        """``groups``: per layer, per direction, the names (w_ih, w_hh, b_ih, b_hh, w_hr) with
        None where absent; ``values``: name -> array; ``dtypes``: name -> DataType."""
        first = groups[0][0][0]
        storage = dtypes[first]
        self.storage = storage.name
        self.compute_dtype = np.dtype(np.float64) if storage.name == "float64" else np.dtype(
            np.float32)
        cd = self.compute_dtype
        self.keys = {name: (tuple(values[name].shape), dtypes[name]) for name in values}
        self.biases = {}
        self.ih, self.hh, self.hr = [], [], []
        for layer in groups:
            w_ih, b_ih_all, hh, hr = [], [], [], []
            for w_ih_n, w_hh_n, b_ih_n, b_hh_n, w_hr_n in layer:
                w_ih.append(np.asarray(values[w_ih_n]).astype(storage.numpy, copy=False))
                b_hh = None
                if b_ih_n is not None:
                    b_ih = np.asarray(values[b_ih_n]).astype(cd)
                    b_hh = np.asarray(values[b_hh_n]).astype(cd)
                    self.biases[b_ih_n] = np.array(values[b_ih_n], dtype=dtypes[b_ih_n].numpy)
                    self.biases[b_hh_n] = np.array(values[b_hh_n], dtype=dtypes[b_hh_n].numpy)
                    b_ih_all.append(b_ih if mode == "GRU" else b_ih + b_hh)
                hh.append(pack_linear(
                    np.asarray(values[w_hh_n]).astype(storage.numpy, copy=False),
                    b_hh if mode == "GRU" else None, self.storage))
                hr.append(None if w_hr_n is None else pack_linear(
                    np.asarray(values[w_hr_n]).astype(storage.numpy, copy=False), None,
                    self.storage))
            self.ih.append(pack_linear(np.concatenate(w_ih, axis=0),
                                       np.concatenate(b_ih_all) if b_ih_all else None,
                                       self.storage))
            self.hh.append(hh)
            self.hr.append(hr)

    def values(self, groups) -> dict:
        """name -> a new C-contiguous array, in ``keys``' order, shapes and dtypes."""
        out = {}
        for li, layer in enumerate(groups):
            w_ih, _ = self.ih[li].unpack()
            rows = w_ih.shape[0] // len(layer)
            for d, (w_ih_n, w_hh_n, b_ih_n, b_hh_n, w_hr_n) in enumerate(layer):
                out[w_ih_n] = w_ih[d * rows:(d + 1) * rows]
                out[w_hh_n] = self.hh[li][d].unpack()[0]
                if b_ih_n is not None:
                    out[b_ih_n] = self.biases[b_ih_n].copy()  # new arrays: never ours
                    out[b_hh_n] = self.biases[b_hh_n].copy()
                if w_hr_n is not None:
                    out[w_hr_n] = self.hr[li][d].unpack()[0]
        return {
            name: np.ascontiguousarray(np.asarray(out[name]).astype(dt.numpy, copy=False))
            for name, (_shape, dt) in self.keys.items()
        }


class _RecurrentPacking(Module):
    """The packing protocol (see :mod:`modulekit.module`) for the recurrent modules: every
    weight and bias is released into one :class:`_Packed` on the first forward."""

    _packed = None
    _mode = "LSTM"

    def _groups(self) -> list:
        raise NotImplementedError

    def _pack(self) -> None:
        with self._pack_lock:
            if self._packed is not None:
                return
            groups = self._groups()
            names = [n for layer in groups for dirn in layer for n in dirn if n is not None]
            params = self._parameters
            for name in names:
                if params.get(name) is None:
                    raise RuntimeError(f"{type(self).__name__}: cannot pack, {name} is None")
            values = {name: params[name].numpy() for name in names}
            dtypes = {name: params[name].dtype for name in names}
            packed = _Packed(groups, self._mode, values, dtypes)
            for name in names:
                del params[name]
            self._packed = packed

    def _packed_keys(self) -> dict[str, tuple[tuple[int, ...], DataType]]:
        packed = self._packed
        return {} if packed is None else dict(packed.keys)

    def _packed_values(self) -> dict[str, np.ndarray]:
        packed = self._packed
        return {} if packed is None else packed.values(self._groups())

    def _unpack(self) -> None:
        if self._packed is None:
            return
        params = {k: Parameter(v) for k, v in self._packed_values().items()}
        params.update((k, v) for k, v in self._parameters.items() if k not in params)
        self.__dict__["_parameters"] = params
        self._packed = None

    def _repack(self, values: dict[str, np.ndarray], dtype: DataType | None = None) -> None:
        with self._pack_lock:
            packed = self._packed
            if packed is None:
                return
            current = packed.values(self._groups())
            current.update(values)
            dtypes = {name: (dt if dtype is None else dtype)
                      for name, (_shape, dt) in packed.keys.items()}
            self._packed = _Packed(self._groups(), self._mode, current, dtypes)

    def _kernels(self) -> _Packed:
        packed = self._packed
        if packed is None:
            self._pack()
            packed = self._packed
        return packed


def _init_params(module: Module, shapes: dict, hidden_size: int, dtype: DataType) -> None:
    """torch's initialisation: every tensor U(-1/sqrt(hidden), 1/sqrt(hidden))."""
    bound = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
    rng = default_generator()
    for name, shape in shapes.items():
        setattr(module, name, Parameter(rng.uniform(-bound, bound, shape).astype(dtype.numpy)))


class RNNBase(_RecurrentPacking):
    """The multi-layer recurrent layer behind :class:`RNN`, :class:`LSTM` and :class:`GRU`
    (``torch.nn.RNNBase``): ``mode`` is "LSTM", "GRU", "RNN_TANH" or "RNN_RELU"."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None,
                 dtype=None) -> None:
        super().__init__()
        layer = {"RNN_TANH": "RNN", "RNN_RELU": "RNN"}.get(mode, mode)
        if mode not in _GATES:
            raise ValueError(f"Unrecognized RNN mode: {mode!r}")
        if device is not None:
            as_device(device)
        dtype = float32 if dtype is None else as_dtype(dtype)
        if not dtype.is_floating:
            raise TypeError(f"{layer}: dtype must be a floating type, got {dtype.name}")
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) or not (
                0 <= dropout <= 1):
            raise ValueError(
                f"{layer}: dropout should be a number in range [0, 1] representing the "
                f"probability of an element being zeroed, got {dropout!r}")
        input_size = _positive_int(input_size, "input_size", layer, allow_zero=True)
        hidden_size = _positive_int(hidden_size, "hidden_size", layer)
        num_layers = _positive_int(num_layers, "num_layers", layer)
        proj_size = _positive_int(proj_size, "proj_size", layer, allow_zero=True)
        if proj_size and mode != "LSTM":
            raise ValueError(f"{layer}: proj_size argument is only supported for LSTM, not "
                             f"RNN or GRU")
        if proj_size >= hidden_size:
            raise ValueError(f"{layer}: proj_size has to be smaller than hidden_size "
                             f"(got proj_size={proj_size}, hidden_size={hidden_size})")
        if dropout > 0 and num_layers == 1:
            warnings.warn(
                "dropout option adds dropout after all but last recurrent layer, so non-zero "
                f"dropout expects num_layers greater than 1, but got dropout={dropout} and "
                f"num_layers={num_layers}", stacklevel=2)
        self.mode = mode
        self._mode = "GRU" if mode == "GRU" else ("LSTM" if mode == "LSTM" else "RNN")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bool(bias)
        self.batch_first = bool(batch_first)
        self.dropout = float(dropout)
        self.bidirectional = bool(bidirectional)
        self.proj_size = proj_size
        num_directions = 2 if bidirectional else 1
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        shapes = {}
        for name_set, shape_set in self._names_and_shapes(gate_size, real_hidden,
                                                          num_directions):
            shapes.update(zip(name_set, shape_set))
        _init_params(self, shapes, hidden_size, dtype)

    def _names_and_shapes(self, gate_size, real_hidden, num_directions):
        for layer in range(self.num_layers):
            layer_input = self.input_size if layer == 0 else real_hidden * num_directions
            for direction in range(num_directions):
                sfx = f"_l{layer}" + ("_reverse" if direction == 1 else "")
                names = [f"weight_ih{sfx}", f"weight_hh{sfx}"]
                shapes = [(gate_size, layer_input), (gate_size, real_hidden)]
                if self.bias:
                    names += [f"bias_ih{sfx}", f"bias_hh{sfx}"]
                    shapes += [(gate_size,), (gate_size,)]
                if self.proj_size > 0:
                    names.append(f"weight_hr{sfx}")
                    shapes.append((self.proj_size, self.hidden_size))
                yield names, shapes

    @property
    def _flat_weights_names(self) -> list[str]:
        """The parameter names in torch's order."""
        return [n for layer in self._groups() for dirn in layer for n in (
            dirn[0], dirn[1], dirn[2], dirn[3], dirn[4]) if n is not None]

    def _groups(self) -> list:
        groups = []
        for layer in range(self.num_layers):
            dirs = []
            for direction in range(2 if self.bidirectional else 1):
                sfx = f"_l{layer}" + ("_reverse" if direction == 1 else "")
                dirs.append((
                    f"weight_ih{sfx}", f"weight_hh{sfx}",
                    f"bias_ih{sfx}" if self.bias else None,
                    f"bias_hh{sfx}" if self.bias else None,
                    f"weight_hr{sfx}" if self.proj_size > 0 else None,
                ))
            groups.append(dirs)
        return groups

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        if self.mode == "RNN_RELU":
            s += ", nonlinearity='relu'"
        return s

    @property
    def _name(self) -> str:
        return type(self).__name__

    # ------------------------------------------------------------------ forward
    def forward(self, input, hx=None):
        """Run the stack over a sequence.

        Parameters
        ----------
        input : array_like or PackedSequence
            (T, B, input_size), (B, T, input_size) when ``batch_first``, (T, input_size)
            unbatched, or a :class:`~modulekit.nn.utils.rnn.PackedSequence`.
        hx : array_like, optional
            Initial hidden state (num_layers * num_directions, B, H_out) ((..., H_out)
            unbatched); for LSTM a tuple ``(h_0, c_0)``, ``c_0`` of hidden_size. Zeros when
            omitted.

        Returns
        -------
        output : ndarray or PackedSequence
            Every step's last-layer hidden state, (T, B, D * H_out) (batch-major when
            ``batch_first``), or packed like ``input``.
        h_n : ndarray, or (h_n, c_n) for LSTM
            The final states, (num_layers * D, B, H_out) (c_n: hidden_size).
        """
        name = self._name
        packed = self._kernels()
        cd = packed.compute_dtype
        is_lstm = self.mode == "LSTM"
        D = 2 if self.bidirectional else 1
        H = self.hidden_size
        Hout = self.proj_size if self.proj_size > 0 else H
        sorted_indices = unsorted_indices = None
        unbatched = False
        if isinstance(input, PackedSequence):
            data = as_input(input.data, name)
            if data.ndim != 2:
                raise ValueError(f"{name}: a PackedSequence's data must be 2-D (rows, "
                                 f"input_size), got shape {data.shape}")
            batch_sizes = np.ascontiguousarray(input.batch_sizes, dtype=np.int64)
            if batch_sizes.ndim != 1 or (batch_sizes.size and (
                    batch_sizes.min() <= 0 or np.any(batch_sizes[1:] > batch_sizes[:-1]))):
                raise ValueError(f"{name}: PackedSequence batch_sizes must be positive and "
                                 f"non-increasing, got {batch_sizes.tolist()}")
            if int(batch_sizes.sum()) != data.shape[0]:
                raise ValueError(f"{name}: PackedSequence data has {data.shape[0]} rows but "
                                 f"its batch_sizes sum to {int(batch_sizes.sum())}")
            B = int(batch_sizes[0]) if batch_sizes.size else 0
            offsets = np.zeros(batch_sizes.shape[0], dtype=np.int64)
            np.cumsum(batch_sizes[:-1], out=offsets[1:])
            sorted_indices, unsorted_indices = input.sorted_indices, input.unsorted_indices
            x2 = data
        else:
            x = as_input(input, name)
            if x.ndim not in (2, 3):
                raise ValueError(f"{name}: Expected input to be 2D or 3D, got {x.ndim}D "
                                 f"tensor instead (shape {x.shape})")
            unbatched = x.ndim == 2
            if unbatched:
                x = x[:, None]
            elif self.batch_first:
                x = np.swapaxes(x, 0, 1)
            T, B = x.shape[0], x.shape[1]
            if T == 0:
                raise ValueError(f"{name}: Expected sequence length to be larger than 0 "
                                 f"(input shape {_input_shape(input)})")
            batch_sizes = np.full(T, B, dtype=np.int64)
            offsets = np.arange(T, dtype=np.int64) * B
            x2 = x.reshape(T * B, x.shape[2]) if x.flags.c_contiguous else np.ascontiguousarray(
                x).reshape(T * B, x.shape[2])
        if x2.shape[1] != self.input_size:
            raise ValueError(f"{name}: input.size(-1) must be equal to input_size. Expected "
                             f"{self.input_size}, got {x2.shape[1]}")
        if x2.dtype != cd:
            x2 = x2.astype(cd)

        h_shape = (self.num_layers * D, B, Hout)
        c_shape = (self.num_layers * D, B, H)
        if is_lstm:
            if hx is None:
                h0 = c0 = None
            else:
                if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                    raise TypeError(f"{name}: hx must be a tuple (h_0, c_0), got "
                                    f"{type(hx).__name__}")
                h0, c0 = hx
        else:
            h0, c0 = hx, None
        h_n = self._state(h0, h_shape, cd, unbatched, sorted_indices, "hidden")
        c_n = self._state(c0, c_shape, cd, unbatched, sorted_indices, "cell") if is_lstm else None

        layer_in = x2
        G = _GATES[self.mode]
        kind = _KIND[self.mode]
        for layer in range(self.num_layers):
            xg = packed.ih[layer].forward(layer_in)
            out = np.empty((layer_in.shape[0], D * Hout), dtype=cd)
            for d in range(D):
                idx = layer * D + d
                recurrence(kind, packed.hh[layer][d], packed.hr[layer][d], xg, d * G * H, out,
                           d * Hout, h_n[idx], None if c_n is None else c_n[idx], offsets,
                           batch_sizes, d == 1)
            if self.training and self.dropout > 0 and layer < self.num_layers - 1:
                p = self.dropout
                keep = default_generator().random(out.shape) >= p
                scale = cd.type(0.0 if p >= 1 else 1.0 / (1.0 - p))
                out = np.multiply(out, keep * scale, dtype=cd)
            layer_in = out

        if unsorted_indices is not None:
            h_n = h_n[:, unsorted_indices]
            if c_n is not None:
                c_n = c_n[:, unsorted_indices]
        if isinstance(input, PackedSequence):
            output = PackedSequence(layer_in, batch_sizes, sorted_indices, unsorted_indices)
        else:
            output = layer_in.reshape(T, B, D * Hout)
            if unbatched:
                output = output[:, 0]
                h_n = h_n[:, 0]
                if c_n is not None:
                    c_n = c_n[:, 0]
            elif self.batch_first:
                output = np.ascontiguousarray(np.swapaxes(output, 0, 1))
        return (output, (h_n, c_n)) if is_lstm else (output, h_n)

    def _state(self, value, shape, cd, unbatched, sorted_indices, what):
        """A new C-contiguous array holding the initial state (the kernels update it)."""
        name = self._name
        if value is None:
            return np.zeros(shape, dtype=cd)
        s = as_input(value, name)
        if unbatched:
            if s.ndim != 2:
                raise ValueError(f"{name}: For unbatched 2-D input, hx should also be 2-D but "
                                 f"got {s.ndim}-D tensor")
            s = s[:, None]
        elif s.ndim != 3:
            raise ValueError(f"{name}: For batched 3-D input, hx should also be 3-D but got "
                             f"{s.ndim}-D tensor")
        if sorted_indices is not None and s.shape[1] == sorted_indices.shape[0]:
            s = s[:, sorted_indices]
        if s.shape != shape:
            want = (shape[0], shape[2]) if unbatched else shape
            got = (s.shape[0], s.shape[2]) if unbatched else s.shape
            raise ValueError(f"{name}: Expected {what} size {tuple(want)}, got {tuple(got)}")
        return np.array(s, dtype=cd, order="C")


class RNN(RNNBase):
    """Elman recurrent layer ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)``, as
    ``torch.nn.RNN`` (``nonlinearity`` "tanh" or "relu").

    Parameters
    ----------
    input_size, hidden_size : int
    num_layers : int
    nonlinearity : {"tanh", "relu"}
    bias, batch_first, bidirectional : bool
    dropout : float
        Dropout on the outputs of every layer but the last, in training mode only.
    device, dtype : optional
        The CPU; the parameters' floating dtype (default float32).

    Notes
    -----
    Parameters ``weight_ih_l{k}[_reverse]``, ``weight_hh_l{k}[_reverse]``,
    ``bias_ih_l{k}[_reverse]``, ``bias_hh_l{k}[_reverse]`` as torch names them, initialised
    ``U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))`` (NumPy's generator). They are packed on
    the first forward and released (see :class:`LSTM`). See :meth:`RNNBase.forward`.
    """

    def __init__(self, *args, **kwargs) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            if "nonlinearity" in kwargs:
                raise TypeError("RNN: got multiple values for argument 'nonlinearity'")
            nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or "
                             "'relu'.")
        super().__init__(mode, *args, **kwargs)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """Long short-term memory layer, as ``torch.nn.LSTM`` (gates i, f, g, o), with
    ``proj_size`` (``h_t = W_hr (o * tanh(c_t))``), ``num_layers``, ``bidirectional``,
    ``batch_first``, ``bias``, initial states, unbatched and packed inputs.

    Parameters
    ----------
    input_size, hidden_size : int
    num_layers : int
    bias, batch_first, bidirectional : bool
    dropout : float
        Dropout on the outputs of every layer but the last, in training mode only.
    proj_size : int
        Projected hidden size (0: none); must be smaller than ``hidden_size``.
    device, dtype : optional
        The CPU; the parameters' floating dtype (default float32).

    Notes
    -----
    The first forward (or ``initialize()``) packs the weights (each layer's input
    projection for both directions as one GEMM, the recurrent weights per direction) and
    releases the parameters: ``state_dict()`` then lists none of them, ``load_state_dict``
    and ``to(dtype)`` re-pack, ``state_dict(include_packed=True)`` gives them back.
    float64 layers compute in float64; float16/bfloat16 layers store the weights in 16 bits
    and compute in float32. Returns ``(output, (h_n, c_n))``; see :meth:`RNNBase.forward`.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    """Gated recurrent unit layer, as ``torch.nn.GRU`` (gates r, z, n;
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) n + z h``).

    Same parameters and behaviour as :class:`LSTM` without ``proj_size``; returns
    ``(output, h_n)``.
    """

    def __init__(self, *args, **kwargs) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)


# ---------------------------------------------------------------------- cells
class RNNCellBase(_RecurrentPacking):
    """One time step of a recurrent layer (``torch.nn.RNNCellBase``): parameters
    ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``, packed on the first forward."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int,
                 device=None, dtype=None) -> None:
        super().__init__()
        layer = type(self).__name__
        if device is not None:
            as_device(device)
        dtype = float32 if dtype is None else as_dtype(dtype)
        if not dtype.is_floating:
            raise TypeError(f"{layer}: dtype must be a floating type, got {dtype.name}")
        self.input_size = _positive_int(input_size, "input_size", layer, allow_zero=True)
        self.hidden_size = _positive_int(hidden_size, "hidden_size", layer)
        self.bias = bool(bias)
        shapes = {
            "weight_ih": (num_chunks * hidden_size, input_size),
            "weight_hh": (num_chunks * hidden_size, hidden_size),
        }
        if bias:
            shapes["bias_ih"] = (num_chunks * hidden_size,)
            shapes["bias_hh"] = (num_chunks * hidden_size,)
        _init_params(self, shapes, hidden_size, dtype)

    def _groups(self) -> list:
        b = self.bias
        return [[("weight_ih", "weight_hh", "bias_ih" if b else None,
                  "bias_hh" if b else None, None)]]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _step(self, input, hx, kind: str):
        """One step: the new (h, c) (c None unless LSTM), batched or not as the input."""
        name = type(self).__name__
        packed = self._kernels()
        cd = packed.compute_dtype
        x = as_input(input, name)
        if x.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {x.ndim}D instead "
                             f"(shape {x.shape})")
        unbatched = x.ndim == 1
        if unbatched:
            x = x[None]
        if x.shape[1] != self.input_size:
            raise ValueError(f"{name}: input has inconsistent input_size: got {x.shape[1]} "
                             f"expected {self.input_size}")
        B = x.shape[0]
        H = self.hidden_size
        states = []
        given = (None, None) if hx is None else (hx if kind == "lstm" else (hx, None))
        for value, needed in zip(given, (True, kind == "lstm")):
            if not needed:
                states.append(None)
                continue
            if value is None:
                states.append(np.zeros((B, H), dtype=cd))
                continue
            s = as_input(value, name)
            if s.ndim != x.ndim - (1 if unbatched else 0) or (unbatched and s.ndim != 1):
                if unbatched:
                    raise ValueError(f"{name}: Expected hidden to be 1D for a 1D input, got "
                                     f"{s.ndim}D")
                raise ValueError(f"{name}: Expected hidden to be 2D for a 2D input, got "
                                 f"{s.ndim}D")
            if unbatched:
                s = s[None]
            if s.shape != (B, H):
                raise ValueError(f"{name}: hidden has shape {s.shape[int(unbatched):]}, "
                                 f"expected {(B, H)[int(unbatched):]}")
            states.append(np.array(s, dtype=cd, order="C"))
        h, c = states
        xg = packed.ih[0].forward(x.astype(cd, copy=False))
        out = np.empty((B, H), dtype=cd)
        recurrence(kind, packed.hh[0][0], None, xg, 0, out, 0, h, c,
                   np.zeros(1, dtype=np.int64), np.full(1, B, dtype=np.int64), False)
        if unbatched:
            return out[0], (None if c is None else c[0])
        return out, c


class RNNCell(RNNCellBase):
    """``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``, as ``torch.nn.RNNCell``
    (``nonlinearity`` "tanh" or "relu"). ``forward(input, hx=None)``: input (B, input_size)
    or (input_size,), ``hx`` of (B, hidden_size) or (hidden_size,) (zeros when None);
    returns h'."""

    _mode = "RNN"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device=None, dtype=None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None) -> np.ndarray:
        return self._step(input, hx, "rnn_" + self.nonlinearity)[0]


class LSTMCell(RNNCellBase):
    """One LSTM step, as ``torch.nn.LSTMCell``: ``forward(input, hx=None)`` with
    ``hx = (h, c)`` (zeros when None) returns ``(h', c')``."""

    _mode = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError(f"LSTMCell: hx must be a tuple (h, c), got {type(hx).__name__}")
        return self._step(input, hx, "lstm")


class GRUCell(RNNCellBase):
    """One GRU step, as ``torch.nn.GRUCell``: ``forward(input, hx=None)`` returns h'."""

    _mode = "GRU"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None) -> np.ndarray:
        return self._step(input, hx, "gru")[0]
