"""CNN architectures with torchvision's module names, so torchvision checkpoints load as they are.

``resnet18``, ``resnet50`` and ``mobilenet_v2`` build the networks (random weights); load a
checkpoint with ``model.load_state_dict(state, strict=True)``. In evaluation mode every
Conv2d + BatchNorm2d (+ ReLU / ReLU6, + the residual add) runs as one packed convolution with
the norm folded into its weights and the rest in the kernel's epilogue; in training mode the
layers run one by one with torch's semantics.
"""

from modulekit.models.mobilenetv2 import InvertedResidual, MobileNetV2, mobilenet_v2
from modulekit.models.resnet import BasicBlock, Bottleneck, ResNet, resnet18, resnet50

__all__ = [
    "BasicBlock",
    "Bottleneck",
    "InvertedResidual",
    "MobileNetV2",
    "ResNet",
    "mobilenet_v2",
    "resnet18",
    "resnet50",
]
