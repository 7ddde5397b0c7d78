"""Models written the way a user writes them: torchvision / Hugging Face structure, modulekit.nn
layers and NumPy glue (used by the compile tests and benchmarks)."""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from modulekit import nn
from modulekit.nn import functional as F


# ------------------------------------------------------------------ ResNet-18 (torchvision)
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, layers=(2, 2, 2, 2), num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
            )
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.avgpool(x)
        x = x.reshape(x.shape[0], -1)
        return self.fc(x)


# ------------------------------------------------------------------ MobileNetV2 (torchvision)
class Conv2dNormActivation(nn.Sequential):
    def __init__(self, inp, oup, kernel_size=3, stride=1, groups=1, act=True):
        layers = [
            nn.Conv2d(inp, oup, kernel_size, stride, (kernel_size - 1) // 2, groups=groups,
                      bias=False),
            nn.BatchNorm2d(oup),
        ]
        if act:
            layers.append(nn.ReLU6(inplace=True))
        super().__init__(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, expand_ratio):
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = [] if expand_ratio == 1 else [Conv2dNormActivation(inp, hidden, 1)]
        layers += [
            Conv2dNormActivation(hidden, hidden, 3, stride, hidden),
            nn.Conv2d(hidden, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1],
                   [6, 160, 3, 2], [6, 320, 1, 1]]
        features, cin = [Conv2dNormActivation(3, 32, stride=2)], 32
        for t, c, n, s in setting:
            for i in range(n):
                features.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        features.append(Conv2dNormActivation(cin, 1280, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = x.mean(axis=(2, 3))
        return self.classifier(x)


# ------------------------------------------------------------------ BERT (Hugging Face)
class BertEmbeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.position_embeddings = nn.Embedding(cfg["max_position_embeddings"],
                                                cfg["hidden_size"])
        self.token_type_embeddings = nn.Embedding(cfg["type_vocab_size"], cfg["hidden_size"])
        self.LayerNorm = nn.LayerNorm(cfg["hidden_size"], eps=cfg["layer_norm_eps"])
        self.dropout = nn.Dropout(0.1)

    def forward(self, input_ids, token_type_ids, position_ids):
        x = (self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
             + self.position_embeddings(position_ids))
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.num_attention_heads = cfg["num_attention_heads"]
        self.attention_head_size = cfg["hidden_size"] // self.num_attention_heads
        h = cfg["hidden_size"]
        self.query = nn.Linear(h, h)
        self.key = nn.Linear(h, h)
        self.value = nn.Linear(h, h)

    def split(self, x):
        b, seq = x.shape[0], x.shape[1]
        x = x.reshape(b, seq, self.num_attention_heads, self.attention_head_size)
        return x.transpose(0, 2, 1, 3)

    def forward(self, hidden, mask):
        q = self.split(self.query(hidden))
        k = self.split(self.key(hidden))
        v = self.split(self.value(hidden))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(self.attention_head_size)
        scores = scores + mask
        probs = F.softmax(scores, dim=-1)
        ctx = (probs @ v).transpose(0, 2, 1, 3)
        return ctx.reshape(ctx.shape[0], ctx.shape[1], -1)


class BertSelfOutput(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg["hidden_size"], cfg["hidden_size"])
        self.LayerNorm = nn.LayerNorm(cfg["hidden_size"], eps=cfg["layer_norm_eps"])
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden)) + input_tensor)


class BertAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self = BertSelfAttention(cfg)
        self.output = BertSelfOutput(cfg)

    def forward(self, hidden, mask):
        return self.output(self.self(hidden, mask), hidden)


class BertLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention = BertAttention(cfg)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(cfg["hidden_size"], cfg["intermediate_size"])
        self.intermediate_act_fn = nn.GELU()
        self.output = BertSelfOutput.__new__(BertSelfOutput)
        nn.Module.__init__(self.output)
        self.output.dense = nn.Linear(cfg["intermediate_size"], cfg["hidden_size"])
        self.output.LayerNorm = nn.LayerNorm(cfg["hidden_size"], eps=cfg["layer_norm_eps"])
        self.output.dropout = nn.Dropout(0.1)

    def forward(self, hidden, mask):
        attn = self.attention(hidden, mask)
        inter = self.intermediate_act_fn(self.intermediate.dense(attn))
        return self.output(inter, attn)


class BertModel(nn.Module):
    """``forward(input_ids, attention_mask)`` -> (last_hidden_state, pooled)."""

    def __init__(self, cfg):
        super().__init__()
        self.embeddings = BertEmbeddings(cfg)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList([BertLayer(cfg) for _ in range(
            cfg["num_hidden_layers"])])
        self.pooler = nn.Module()
        self.pooler.dense = nn.Linear(cfg["hidden_size"], cfg["hidden_size"])
        self.pooler.activation = nn.Tanh()

    def forward(self, input_ids, attention_mask):
        seq = input_ids.shape[1]
        position_ids = np.arange(512)[None, :][:, :seq]
        token_type_ids = np.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        mask = (1.0 - attention_mask[:, None, None, :].astype(np.float32)) * np.float32(
            np.finfo(np.float32).min)
        for layer in self.encoder.layer:
            x = layer(x, mask)
        pooled = self.pooler.activation(self.pooler.dense(x[:, 0]))
        return x, pooled


BERT_CONFIG = OrderedDict(
    vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    intermediate_size=128, max_position_embeddings=512, type_vocab_size=2,
    layer_norm_eps=1e-12,
)
