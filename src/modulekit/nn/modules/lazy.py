"""The lazy convolutions: ``LazyConv1d/2d/3d`` and ``LazyConvTranspose1d/2d/3d``.

As torch's (``torch.nn.modules.lazy.LazyModuleMixin``): the constructor takes every argument
of the concrete class except ``in_channels``; the first call infers ``in_channels`` from the
input (``input.shape[1]``, or ``shape[0]`` for an unbatched input), creates ``weight`` and
``bias`` with the concrete class's initialisation and turns the module into that class
(``cls_to_become``: ``Conv1d`` ... ``ConvTranspose3d``). ``load_state_dict`` into a module not
materialised yet takes the shapes from the checkpoint (a load-state-dict pre-hook).

Until it materialises a lazy layer holds no ``weight``/``bias`` (torch registers
``UninitializedParameter`` placeholders, tensors without storage; modulekit has no such
tensor): they are absent from ``parameters()`` and ``state_dict()``, reading them raises
``AttributeError``, and ``to(dtype)`` records the dtype the parameters will be created in.
"""

from __future__ import annotations

import numpy as np

from modulekit._ext._tensor import Parameter
from modulekit._state_dict import _as_array, _restore, _snapshot
from modulekit.module import Module
from modulekit.nn._input import as_input
from modulekit.nn.modules.conv import Conv2d
from modulekit.nn.modules.conv_nd import (
    Conv1d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
)

__all__ = [
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
    "LazyConvTranspose1d",
    "LazyConvTranspose2d",
    "LazyConvTranspose3d",
]

_UNINITIALIZED = ("UninitializedParameter", "UninitializedBuffer")  # torch's placeholders


def _placeholder_in_channels(groups) -> int:
    """An ``in_channels`` the concrete constructor accepts while it checks the other
    arguments (``groups`` itself when it is a valid group count: its own check then reports a
    bad one)."""
    if isinstance(groups, (int, np.integer)) and not isinstance(groups, bool) and groups > 0:
        return int(groups)
    return 1


def _is_uninitialized(value) -> bool:
    """A torch ``UninitializedParameter``/``UninitializedBuffer`` (a lazy torch module's
    ``state_dict()`` entry): a value with no storage to load."""
    return type(value).__name__ in _UNINITIALIZED


def _lazy_load_hook(module, state, prefix, local_metadata, strict, missing, unexpected,
                    errors) -> None:
    """``load_state_dict`` pre-hook of an unmaterialised lazy layer: materialise ``weight``
    and ``bias`` with the checkpoint's shapes (``in_channels`` from the weight) so the load
    then copies into them. A weight whose shape no ``in_channels`` explains is refused here
    (nothing materialises); a refused load undoes the materialisation (``load_state_dict``
    snapshots a module before its pre-hooks run)."""
    if not module.has_uninitialized_params():
        return
    wkey, bkey = prefix + "weight", prefix + "bias"
    has_bias = module._lazy_bias
    if _is_uninitialized(state.get(wkey)):
        # a lazy torch module's own state_dict: nothing to load, and nothing missing (torch)
        state.pop(wkey)
        if _is_uninitialized(state.get(bkey)):
            state.pop(bkey)
        return
    if wkey not in state:
        missing.append(wkey)
        if has_bias:
            missing.append(bkey)
            if bkey in state:
                state.pop(bkey)  # (reported here, not as unexpected)
                errors.append(
                    f"cannot load {bkey} into the unmaterialised {module._get_name()} without "
                    f"{wkey}: in_channels is taken from the weight's shape"
                )
        return
    arr = _as_array(state[wkey])
    if arr is None:
        value = state.pop(wkey)  # (reported here, not as unexpected)
        state.pop(bkey, None)
        errors.append(
            f'While copying the parameter named "{wkey}", expected a Tensor, an ndarray or an '
            f"array-like of real numbers from the checkpoint, but received "
            f"{type(value).__name__}"
        )
        return
    in_channels, expected = module._in_channels_of_weight(tuple(arr.shape))
    if in_channels is None:
        for key in (wkey, bkey):  # (reported here, not as unexpected)
            state.pop(key, None)
        errors.append(
            f"size mismatch for {wkey}: copying a param with shape {tuple(arr.shape)} from "
            f"checkpoint into the unmaterialised {module._get_name()}({module.extra_repr()}), "
            f"whose weight has shape {expected}."
        )
        return
    module._materialize(in_channels, initialize=False)


class _LazyConvMixin:
    """The lazy protocol over a concrete convolution class (listed after it in the bases)."""

    cls_to_become: type = None
    _lazy_dtype = None  # the DataType of the parameters to create, while unmaterialised
    _lazy_bias = False  # whether they include a bias

    def _lazy_setup(self) -> None:
        """End of construction: forget the placeholder ``in_channels`` (torch shows 0) and
        hook ``load_state_dict``."""
        self.in_channels = 0
        self.register_load_state_dict_pre_hook(_lazy_load_hook)

    def _reset_parameters(self, dtype, bias: bool) -> None:
        # called by the concrete constructor: record, create nothing (see _materialize)
        self._lazy_dtype = dtype
        self._lazy_bias = bool(bias)
        if not bias:
            self.register_parameter("bias", None)

    # ---------------------------------------------------------------- torch's protocol
    def has_uninitialized_params(self) -> bool:
        """Whether ``weight``/``bias`` are still to be created (before the first call, or a
        ``load_state_dict``, or :meth:`initialize_parameters`)."""
        return self.__dict__.get("_lazy_dtype") is not None

    def initialize_parameters(self, input, *args, **kwargs) -> None:
        """Create ``weight`` and ``bias`` for ``input`` (as the first call would), with the
        concrete class's initialisation; no-op once they exist. The module stays of its lazy
        class until its first call.

        Raises
        ------
        ValueError
            ``input`` is not of the layer's rank (batched or unbatched), or its channel count
            is zero or not divisible by ``groups``; nothing is changed.
        """
        if not self.has_uninitialized_params():
            return
        in_channels = self._in_channels_of_input(as_input(input, self._get_name()).shape)
        with self._pack_lock:
            if self.has_uninitialized_params():  # (not done by another thread meanwhile)
                self._materialize(in_channels, initialize=True)

    def _in_channels_of_input(self, shape: tuple) -> int:
        what, nd = self._get_name(), self._nd
        if len(shape) not in (nd + 1, nd + 2):
            raise ValueError(
                f"{what}: expected a {nd + 1}-D (unbatched) or {nd + 2}-D (batched) input to "
                f"infer in_channels from, got shape {tuple(shape)}"
            )
        channels = int(shape[1] if len(shape) == nd + 2 else shape[0])
        if channels < 1 or channels % self.groups:
            raise ValueError(
                f"{what}: in_channels, the input's channel dimension ({channels}, input shape "
                f"{tuple(shape)}), must be positive and divisible by groups={self.groups}"
            )
        return channels

    def _in_channels_of_weight(self, shape: tuple):
        """``(in_channels, expected)``: the ``in_channels`` a checkpoint weight of ``shape``
        implies (None when no ``in_channels`` gives that shape) and the expected shape in
        words."""
        g, cout, k = self.groups, self.out_channels, tuple(self.kernel_size)
        if self.transposed:
            expected = f"(in_channels, {cout // g}, {', '.join(map(str, k))}) with in_channels " \
                       f"a positive multiple of groups={g}"
            ok = (len(shape) == len(k) + 2 and shape[1] == cout // g and shape[2:] == k
                  and shape[0] > 0 and shape[0] % g == 0)
            return (shape[0] if ok else None), expected
        expected = f"({cout}, in_channels/{g}, {', '.join(map(str, k))})" if g > 1 else \
                   f"({cout}, in_channels, {', '.join(map(str, k))})"
        ok = len(shape) == len(k) + 2 and shape[0] == cout and shape[2:] == k and shape[1] > 0
        return (shape[1] * g if ok else None), expected

    def _materialize(self, in_channels: int, initialize: bool) -> None:
        """Set ``in_channels`` and create the parameters: initialised as the concrete class
        does, or zeros (a ``load_state_dict`` about to copy into them)."""
        dtype, bias = self._lazy_dtype, self._lazy_bias
        self.in_channels = in_channels
        if initialize:
            self.cls_to_become._reset_parameters(self, dtype, bias)
        else:
            self.weight = Parameter(np.zeros(self._weight_shape(), dtype.numpy))
            if bias:
                self.bias = Parameter(np.zeros(self.out_channels, dtype.numpy))
        d = self.__dict__
        d.pop("_lazy_dtype", None)
        d.pop("_lazy_bias", None)

    # ---------------------------------------------------------------- Module protocols
    def _first_call(self, input, run):
        """Materialise for ``input`` (if not loaded), become ``cls_to_become`` and ``run()``
        the call. If that raises, the module is put back as it was (lazy, unmaterialised
        unless loaded). Concurrent first calls: one materialises, under the layer's lock."""
        lazy_cls = type(self)
        in_channels = None
        if self.has_uninitialized_params():  # checked before anything changes
            in_channels = self._in_channels_of_input(as_input(input, self._get_name()).shape)
        saved = None
        with self._pack_lock:
            if type(self) is lazy_cls:  # (not switched by another thread meanwhile)
                saved = _snapshot(self)
                if self.has_uninitialized_params():
                    if in_channels is None:  # (un-materialised by another thread's rollback)
                        in_channels = self._in_channels_of_input(
                            as_input(input, self._get_name()).shape)
                    self._materialize(in_channels, initialize=True)
                self.__class__ = self.cls_to_become
        try:
            out = run()
        except BaseException:
            if saved is not None:  # this call switched the class: undo it
                with self._pack_lock:
                    _restore([saved])
                    self.__class__ = lazy_cls
            raise
        if saved is not None:
            hooks = self._load_state_dict_pre_hooks  # (a no-op once materialised: dropped)
            for key in [k for k, h in hooks.items() if h is _lazy_load_hook]:
                del hooks[key]
        return out

    def forward(self, input, *args, **kwargs):
        """The first call: see :meth:`_first_call`; then the concrete class's forward."""
        return self._first_call(input, lambda: self.forward(input, *args, **kwargs))

    def _call_with_hooks(self, args, kwargs, forward=None):
        # with forward hooks: materialise before the pre-hooks run, as torch (whose own
        # materialising pre-hook is registered first), so they see the concrete layer
        if forward is not None or not (args or "input" in kwargs):
            return super()._call_with_hooks(args, kwargs, forward)
        input = args[0] if args else kwargs["input"]
        return self._first_call(input, lambda: Module._call_with_hooks(self, args, kwargs))

    def _cast_pending(self, dtype) -> None:
        if self.has_uninitialized_params():
            self.__dict__["_lazy_dtype"] = dtype

    def _pack(self) -> None:
        # initialize() without an example: there is nothing to pack before materialising
        if not self.has_uninitialized_params():
            super()._pack()

    def _has_bias(self) -> bool:
        if self.has_uninitialized_params():
            return self._lazy_bias
        return super()._has_bias()

    def _fusable(self, following) -> int:
        return 0  # (a Sequential plans its fused calls in initialize(): after materialising)

    def __getattr__(self, name: str):
        d = self.__dict__
        if (name in ("weight", "bias") and d.get("_lazy_dtype") is not None
                and name not in d["_parameters"]):
            raise AttributeError(
                f"{type(self).__name__}.{name} does not exist yet: a lazy layer creates its "
                "parameters on its first call (or initialize_parameters(input), or "
                "load_state_dict)"
            )
        return super().__getattr__(name)


_DOC = """{concrete} with lazy initialization of ``in_channels``, as ``torch.nn.{name}``.

    Parameters
    ----------
    out_channels, kernel_size, ... : as :class:`~modulekit.nn.{concrete}`, without
        ``in_channels``.

    Notes
    -----
    The first call takes ``in_channels`` from its input (``input.shape[1]``, ``shape[0]``
    unbatched), creates ``weight`` and ``bias`` as ``{concrete}`` initialises them and turns
    the module into a ``{concrete}`` (a first call that raises leaves it lazy).
    ``load_state_dict`` before that takes the shapes from the checkpoint (a refused load
    leaves it unmaterialised). Until then the parameters are absent from ``parameters()``
    and ``state_dict()`` (torch lists ``UninitializedParameter`` placeholders), and
    ``to(dtype)`` sets the dtype they will have.
    """


class LazyConv1d(_LazyConvMixin, Conv1d):
    __doc__ = _DOC.format(concrete="Conv1d", name="LazyConv1d")
    cls_to_become = Conv1d

    def __init__(self, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None) -> None:
        Conv1d.__init__(self, _placeholder_in_channels(groups), out_channels, kernel_size,
                        stride, padding, dilation, groups, bias, padding_mode, device, dtype)
        self._lazy_setup()


class LazyConv2d(_LazyConvMixin, Conv2d):
    __doc__ = _DOC.format(concrete="Conv2d", name="LazyConv2d")
    cls_to_become = Conv2d
    _nd = 2
    transposed = False

    def __init__(self, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None) -> None:
        Conv2d.__init__(self, _placeholder_in_channels(groups), out_channels, kernel_size,
                        stride, padding, dilation, groups, bias, padding_mode, device, dtype)
        self._lazy_setup()


class LazyConv3d(_LazyConvMixin, Conv3d):
    __doc__ = _DOC.format(concrete="Conv3d", name="LazyConv3d")
    cls_to_become = Conv3d

    def __init__(self, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None) -> None:
        Conv3d.__init__(self, _placeholder_in_channels(groups), out_channels, kernel_size,
                        stride, padding, dilation, groups, bias, padding_mode, device, dtype)
        self._lazy_setup()


class LazyConvTranspose1d(_LazyConvMixin, ConvTranspose1d):
    __doc__ = _DOC.format(concrete="ConvTranspose1d", name="LazyConvTranspose1d")
    cls_to_become = ConvTranspose1d

    def __init__(self, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros",
                 device=None, dtype=None) -> None:
        ConvTranspose1d.__init__(self, _placeholder_in_channels(groups), out_channels,
                                 kernel_size, stride, padding, output_padding, groups, bias,
                                 dilation, padding_mode, device, dtype)
        self._lazy_setup()


class LazyConvTranspose2d(_LazyConvMixin, ConvTranspose2d):
    __doc__ = _DOC.format(concrete="ConvTranspose2d", name="LazyConvTranspose2d")
    cls_to_become = ConvTranspose2d

    def __init__(self, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros",
                 device=None, dtype=None) -> None:
        ConvTranspose2d.__init__(self, _placeholder_in_channels(groups), out_channels,
                                 kernel_size, stride, padding, output_padding, groups, bias,
                                 dilation, padding_mode, device, dtype)
        self._lazy_setup()


class LazyConvTranspose3d(_LazyConvMixin, ConvTranspose3d):
    __doc__ = _DOC.format(concrete="ConvTranspose3d", name="LazyConvTranspose3d")
    cls_to_become = ConvTranspose3d

    def __init__(self, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros",
                 device=None, dtype=None) -> None:
        ConvTranspose3d.__init__(self, _placeholder_in_channels(groups), out_channels,
                                 kernel_size, stride, padding, output_padding, groups, bias,
                                 dilation, padding_mode, device, dtype)
        self._lazy_setup()
