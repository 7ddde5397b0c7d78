"""Ready-made architectures: CNNs with torchvision's module names (torchvision checkpoints load
as they are) and BERT with Hugging Face transformers' names (``BertModel.from_pretrained``).

``resnet18``, ``resnet50`` and ``mobilenet_v2`` build the networks (random weights); load a
checkpoint with ``model.load_state_dict(state, strict=True)``. In evaluation mode every
Conv2d + BatchNorm2d (+ ReLU / ReLU6, + the residual add) runs as one packed convolution with
the norm folded into its weights and the rest in the kernel's epilogue; in training mode the
layers run one by one with torch's semantics.
"""

from modulekit.models.bert import BertConfig, BertModel, BertModelOutput, mean_pool
from modulekit.models.mobilenetv2 import InvertedResidual, MobileNetV2, mobilenet_v2
from modulekit.models.resnet import BasicBlock, Bottleneck, ResNet, resnet18, resnet50

__all__ = [
    "BertConfig",
    "BertModel",
    "BertModelOutput",
    "mean_pool",
    "BasicBlock",
    "Bottleneck",
    "InvertedResidual",
    "MobileNetV2",
    "ResNet",
    "mobilenet_v2",
    "resnet18",
    "resnet50",
]
