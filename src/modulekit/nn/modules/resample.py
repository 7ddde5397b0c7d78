"""``Upsample``, ``UpsamplingNearest2d``, ``UpsamplingBilinear2d``: ``F.interpolate`` as
layers (torch's constructor arguments, attributes and ``repr``)."""

from __future__ import annotations

from modulekit.module import Module
from modulekit.nn import _interp

__all__ = ["Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d"]


class Upsample(Module):
    """Resample to ``size`` or by ``scale_factor`` with ``mode`` (nearest, nearest-exact,
    linear, bilinear, bicubic, trilinear, area), as ``torch.nn.Upsample``."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None) -> None:
        super().__init__()
        name = self._get_name()
        if mode not in _interp._MODES:
            raise ValueError(f"{name}: mode must be one of {', '.join(_interp._MODES)}, got "
                             f"{mode!r}")
        if size is not None and scale_factor is not None:
            raise ValueError(f"{name}: only one of size or scale_factor should be defined")
        self.name = type(self).__name__
        self.size = size
        if isinstance(scale_factor, (tuple, list)):
            self.scale_factor = tuple(float(f) for f in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def extra_repr(self) -> str:
        if self.scale_factor is not None:
            info = "scale_factor=" + repr(self.scale_factor)
        else:
            info = "size=" + repr(self.size)
        return info + ", mode=" + repr(self.mode)

    def forward(self, input):
        return _interp.interpolate(input, self.size, self.scale_factor, self.mode,
                                   self.align_corners, self.recompute_scale_factor,
                                   what=self._get_name())


class UpsamplingNearest2d(Upsample):
    """2-D nearest upsampling (``Upsample(mode='nearest')``)."""

    def __init__(self, size=None, scale_factor=None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """2-D bilinear upsampling with ``align_corners=True``, as torch's."""

    def __init__(self, size=None, scale_factor=None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
