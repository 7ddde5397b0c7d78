"""MobileNetV2 (Sandler et al. 2018) with torchvision's module names: ``mobilenet_v2``."""

from __future__ import annotations

import numpy as np

from modulekit import module as _module
from modulekit import nn
from modulekit._ext import _conv
from modulekit.module import Module
from modulekit.nn._input import as_input
from modulekit.nn.modules.batchnorm import BatchNorm2d
from modulekit.nn.modules.conv import Conv2d, conv_bn_act, prefold

__all__ = ["Conv2dNormActivation", "InvertedResidual", "MobileNetV2", "mobilenet_v2"]

#: Inverted-residual blocks whose expanded tensor (one image's, in bytes) is at least this large
#: run as one fused call in row bands (``_conv.inverted_residual``); smaller ones layer by layer.
#: Measured (1 thread, batch 1): fusing pays on every block of MobileNetV2, the 14x14 and 7x7
#: ones included (one call instead of three, no intermediate arrays), so the default is 0.
FUSE_MIN_BYTES = 0


def _make_divisible(v: float, divisor: int, min_value: int | None = None) -> int:
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class Conv2dNormActivation(nn.Sequential):
    """Conv2d, BatchNorm2d and ReLU6 (keys ``0``, ``1``, ``2``), run fused in eval mode."""

    def __init__(
        self,
        in_planes: int,
        out_planes: int,
        kernel_size: int = 3,
        stride: int = 1,
        groups: int = 1,
        activation: bool = True,
    ) -> None:
        padding = (kernel_size - 1) // 2
        layers = [
            Conv2d(in_planes, out_planes, kernel_size, stride, padding, groups=groups, bias=False),
            BatchNorm2d(out_planes),
        ]
        if activation:
            layers.append(nn.ReLU6(inplace=True))
        super().__init__(*layers)
        self.out_channels = out_planes

    def _fusions(self):
        mods = self._modules
        yield mods["0"], mods["1"], "relu6" if len(mods) > 2 else None

    def forward(self, x):
        mods = self._modules
        return conv_bn_act(mods["0"], mods["1"], mods.get("2"), x)


class InvertedResidual(Module):
    """1x1 expand (ReLU6), 3x3 depthwise (ReLU6), 1x1 project (linear); residual when the
    stride is 1 and the channel count is unchanged."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"InvertedResidual: stride should be 1 or 2, got {stride}")
        self.stride = stride
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = []
        if expand_ratio != 1:
            layers.append(Conv2dNormActivation(inp, hidden_dim, kernel_size=1))
        layers += [
            Conv2dNormActivation(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim),
            Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
            BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup

    def _fusions(self):
        mods = list(self.conv._modules.values())
        yield mods[-2], mods[-1], None

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("_invres_plan", None)  # kernel objects, re-planned on demand
        return state

    def _plan_block(self):
        """Plan the fused call: the block's structure (children and grandchildren, checked on
        every call), every module in it (for hooks and the training flag), the norms, and the
        folded kernels with the convolution caches they came from, wrapped in an
        ``InvertedResidualPlan``; None when a kernel is not float32 or a norm has no running
        statistics (the block runs layer by layer)."""
        seq = self._modules["conv"]
        children = tuple(seq._modules.values())
        steps = [(m._modules["0"], m._modules["1"], "relu6") for m in children[:-2]]
        steps.append((children[-2], children[-1], None))
        grand = tuple((m, tuple(m._modules.values())) for m in children[:-2])
        packed, caches = [], []
        for conv, bn, act in steps:
            if bn._buffers.get("running_mean") is None:
                return None
            p = conv._fused_packed(bn, act)
            if p.storage != "float32":
                return None
            packed.append(p)
            caches.append((conv, conv._fused))
        expand = packed[0] if len(packed) == 3 else None
        kernel = _conv.InvertedResidualPlan(expand, packed[-2], packed[-1], self.use_res_connect)
        return (
            seq, children, grand, tuple(seq.modules()), tuple(bn for _, bn, _ in steps),
            tuple(caches), kernel, steps[-2][0].in_channels,
        )

    def _fused_kernel(self):
        """The block's ``InvertedResidualPlan``, or None when the block must run layer by
        layer: training mode, a norm without running statistics, a hook on any module inside
        it, or a non-float32 model (a hook on the block itself is the caller's business: its
        ``__call__`` runs it around ``forward``).

        The plan is made once and reused while the block holds the same modules and each
        convolution the same cache of folded kernels (a replaced layer, a reload or a cast
        re-plans); a call checks only that, the hooks and training flags, and the norms'
        statistics. These objects are cold after each block's megabytes of activations, so the
        checks cost microseconds per block: MobileNetV2 runs them for all blocks in one loop.
        """
        d = self.__dict__
        plan = d.get("_invres_plan")
        seq = self._modules["conv"]
        if plan is not None and (
            plan[0] is not seq or tuple(seq._modules.values()) != plan[1]
        ):
            plan = None
        if plan is not None:
            for m, kids in plan[2]:
                if tuple(m._modules.values()) != kids:
                    plan = None
                    break
        if plan is not None:
            for conv, cache in plan[5]:
                if conv._fused is not cache:
                    plan = None
                    break
        if plan is None:
            for m in seq.modules():
                if m._has_hooks or m.training:
                    return None
            plan = self._plan_block()
            d["_invres_plan"] = plan
            if plan is None:
                return None
        for m in plan[3]:
            if m._has_hooks or m.training:
                return None
        for bn in plan[4]:
            if bn._buffers.get("running_mean") is None:
                return None
        return plan[6]

    def _fused_block(self, x):
        """The block as one fused call (``_fused_kernel``), or None when it must run layer by
        layer (also for an input that is not 4-D or an expanded tensor smaller than
        ``FUSE_MIN_BYTES``)."""
        kernel = self._fused_kernel()
        if kernel is None:
            return None
        if type(x) is np.ndarray:
            if x.ndim != 4:
                return None
            shape = x.shape
        else:
            shape = np.shape(x)
            if len(shape) != 4:
                return None
        if FUSE_MIN_BYTES and self._invres_plan[7] * shape[2] * shape[3] * 4 < FUSE_MIN_BYTES:
            return None
        return kernel(x)

    def forward(self, x):
        y = self._fused_block(x)
        if y is not None:
            return y
        y = self.conv(x)  # layer by layer, as torch runs it (hooks see every call)
        return x + y if self.use_res_connect else y


class MobileNetV2(Module):
    """torchvision's MobileNetV2 (width 1.0): ``features``, then ``classifier``."""

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, dropout: float = 0.2):
        super().__init__()
        setting = [
            [1, 16, 1, 1],
            [6, 24, 2, 2],
            [6, 32, 3, 2],
            [6, 64, 4, 2],
            [6, 96, 3, 1],
            [6, 160, 3, 2],
            [6, 320, 1, 1],
        ]
        input_channel = _make_divisible(32 * width_mult, 8)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult), 8)
        features = [Conv2dNormActivation(3, input_channel, stride=2)]
        for t, c, n, s in setting:
            output_channel = _make_divisible(c * width_mult, 8)
            for i in range(n):
                features.append(
                    InvertedResidual(input_channel, output_channel, s if i == 0 else 1, t)
                )
                input_channel = output_channel
        features.append(Conv2dNormActivation(input_channel, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout), nn.Linear(self.last_channel, num_classes)
        )

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("_forward_plan", None)  # kernel objects, re-planned on demand
        return state

    def _fuse(self) -> None:
        """(``initialize()``) In eval mode, fold each Conv2d + BatchNorm2d pair now."""
        prefold(self)

    def _plan_forward(self):
        """Check every layer now and plan the forward: ``(steps, head, classify)`` with
        ``steps`` the features' layers before the last (the fused blocks' kernels,
        ``InvertedResidual._fused_kernel``, the other layers as modules), ``head`` the last
        layer as ``(conv, packed)`` when the global average pool can be fused into it
        (``_pooled_head``) or the layer itself, and ``classify`` the classifier's Linear's
        ``forward`` when the classifier is the plain eval-mode Dropout + Linear with no hooks
        (Dropout is the identity then), the classifier otherwise. None (run ``features`` as
        usual) when ``features`` is not a plain non-empty Sequential, has hooks or trains,
        when a layer run as a module has hooks (its hook could change a later block), or with
        ``FUSE_MIN_BYTES`` set."""
        feats = self._modules["features"]
        if (
            type(feats) is not nn.Sequential
            or feats._has_hooks
            or feats.training
            or FUSE_MIN_BYTES
            or not feats._modules
        ):
            return None
        steps = []
        for m in feats._modules.values():
            if m._has_hooks:
                return None
            k = m._fused_kernel() if type(m) is InvertedResidual else None
            steps.append(m if k is None else k)
        last = steps.pop()
        head = _pooled_head(last) or last
        cls = self._modules["classifier"]
        classify = cls
        if type(cls) is nn.Sequential and not cls._has_hooks and not cls.training:
            mods = tuple(cls._modules.values())
            if (
                len(mods) == 2
                and type(mods[0]) is nn.Dropout
                and type(mods[1]) is nn.Linear
                and not mods[0]._has_hooks
                and not mods[0].training
                and not mods[1]._has_hooks
            ):
                classify = mods[1].forward
        return tuple(steps), head, classify

    def forward(self, x):
        """The features, the global average pool and the classifier.

        The layers are checked once and the result kept (``_plan_forward``) while the
        structure epoch (``modulekit.module._epoch``: any change to a module, a hook, the
        training flag, a reload or a cast advances it) and ``FUSE_MIN_BYTES`` are the ones it
        was planned with, so a call
        compares one integer instead of re-checking every block between the blocks' kernels
        (microseconds each, the checks' objects cold after each block's megabytes). The plan
        runs the same kernels as the layers themselves (the fused blocks' kernels, the global
        average pool fused into the last 1x1 convolution, ``PackedConv2d.forward_mean``, in
        the order ``_conv.spatial_mean`` uses), so the result is the same bit for bit. Input
        that is not a 4-D ndarray runs the layers as modules.
        """
        x = as_input(x, type(self).__name__)
        if x.ndim == 4:
            d = self.__dict__
            epoch = _module._epoch
            plan = d.get("_forward_plan")
            if plan is None or plan[0] != epoch or plan[1] != FUSE_MIN_BYTES:
                plan = (epoch, FUSE_MIN_BYTES, self._plan_forward())
                d["_forward_plan"] = plan
            plan = plan[2]
            if plan is not None:
                steps, head, classify = plan
                for step in steps:
                    x = step(x)
                if type(head) is tuple:
                    try:
                        x = head[1].forward_mean(x, "relu6")
                    except ValueError as exc:
                        raise head[0]._error(exc) from None
                else:
                    x = _conv.spatial_mean(head(x))
                return classify(x)
        x = self.features(x)
        # global average pool: each channel's mean over its pixels, in the order the fused
        # pool (PackedConv2d.forward_mean) uses, so both paths agree bit for bit
        return self.classifier(_conv.spatial_mean(x))


def _pooled_head(m):
    """``(conv, packed)`` when ``m``, the last feature layer, is a Conv2dNormActivation with a
    ReLU6 that runs folded (eval mode, running statistics, no hooks on it or its children):
    its global average pool can be fused in (``PackedConv2d.forward_mean``); None otherwise."""
    if type(m) is not Conv2dNormActivation or m._has_hooks:
        return None
    mods = m._modules
    if len(mods) != 3:
        return None
    conv, bn, act = mods["0"], mods["1"], mods["2"]
    if (
        type(conv) is not Conv2d
        or type(bn) is not BatchNorm2d
        or type(act) is not nn.ReLU6
        or conv._has_hooks
        or bn._has_hooks
        or act._has_hooks
        or bn.training
        or bn.running_mean is None
    ):
        return None
    return conv, conv._fused_packed(bn, "relu6")


def mobilenet_v2(num_classes: int = 1000) -> MobileNetV2:
    """MobileNetV2 (width 1.0), torchvision's module names."""
    return MobileNetV2(num_classes)
