"""Rearranging layers: ``PixelShuffle``, ``PixelUnshuffle``, ``ChannelShuffle``, ``Fold``,
``Unfold``, ``Unflatten`` (torch's constructor arguments and ``repr``)."""

from __future__ import annotations

from modulekit.module import Module
from modulekit.nn import _shape
from modulekit.nn._pool import ntuple

__all__ = ["ChannelShuffle", "Fold", "PixelShuffle", "PixelUnshuffle", "Unflatten", "Unfold"]


class PixelShuffle(Module):
    """``(*, C r^2, H, W) -> (*, C, H r, W r)``, as ``torch.nn.PixelShuffle``."""

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        _shape._positive_int(upscale_factor, "upscale_factor", "PixelShuffle")
        self.upscale_factor = upscale_factor

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"

    def forward(self, input):
        return _shape.pixel_shuffle(input, self.upscale_factor, what="PixelShuffle")


class PixelUnshuffle(Module):
    """``(*, C, H r, W r) -> (*, C r^2, H, W)``, as ``torch.nn.PixelUnshuffle``."""

    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        _shape._positive_int(downscale_factor, "downscale_factor", "PixelUnshuffle")
        self.downscale_factor = downscale_factor

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"

    def forward(self, input):
        return _shape.pixel_unshuffle(input, self.downscale_factor, what="PixelUnshuffle")


class ChannelShuffle(Module):
    """Interleave the channels of ``groups`` groups, as ``torch.nn.ChannelShuffle``."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        _shape._positive_int(groups, "groups", "ChannelShuffle")
        self.groups = groups

    def extra_repr(self) -> str:
        return f"groups={self.groups}"

    def forward(self, input):
        return _shape.channel_shuffle(input, self.groups, what="ChannelShuffle")


class Unfold(Module):
    """im2col, as ``torch.nn.Unfold``: ``(N, C, H, W) -> (N, C kh kw, L)``."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__()
        _shape._fold_args(kernel_size, dilation, padding, stride, "Unfold")
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.padding = padding
        self.stride = stride

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")

    def forward(self, input):
        return _shape.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride,
                             what="Unfold")


class Fold(Module):
    """col2im, as ``torch.nn.Fold``: ``(N, C kh kw, L) -> (N, C, *output_size)``, overlapping
    values summed."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__()
        _shape._fold_args(kernel_size, dilation, padding, stride, "Fold")
        ntuple(output_size, 2, "output_size", "Fold", minimum=1)
        self.output_size = output_size
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.padding = padding
        self.stride = stride

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}")

    def forward(self, input):
        return _shape.fold(input, self.output_size, self.kernel_size, self.dilation,
                           self.padding, self.stride, what="Fold")


class Unflatten(Module):
    """Split dimension ``dim`` into ``unflattened_size``, as ``torch.nn.Unflatten``."""

    def __init__(self, dim, unflattened_size) -> None:
        super().__init__()
        if isinstance(dim, str):
            raise NotImplementedError(
                "Unflatten: named dimensions (a str dim) are not supported: modulekit arrays "
                "have no dimension names; pass an int dim")
        if not isinstance(unflattened_size, (tuple, list)):
            raise TypeError(
                f"Unflatten: unflattened_size must be a tuple of ints, got "
                f"{type(unflattened_size).__name__}")
        self.dim = dim
        self.unflattened_size = unflattened_size

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"

    def forward(self, input):
        return _shape.unflatten(input, self.dim, self.unflattened_size, what="Unflatten")
