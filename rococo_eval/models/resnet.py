"""The two ResNet layouts of VSE infinity's grid backbones, built without torchvision or the network, for their weights
to be loaded from a checkpoint.

- ``caffe``: the official ``lib/modules/resnet.py`` (the BUTD detector's ResNet-101, converted from Caffe): the
  stride of a block on its first 1 x 1 convolution, max pooling without padding and with ``ceil_mode``.
- ``torchvision``: ``torchvision.models.resnet`` (what ``torch.hub`` gives for ``facebookresearch/WSL-Images``'
  ``resnext101_32x8d_wsl``: ``ResNet(Bottleneck, [3, 4, 23, 3], groups=32, width_per_group=8)``): the stride on the
  3 x 3 convolution, grouped convolutions, max pooling with padding 1.

Both name their modules as their originals do (``conv1``, ``bn1``, ``layerN.M.conv2``, ``downsample.0``, ``fc``), so
a checkpoint's keys load into them strictly. The number of blocks per stage, the groups and the widths are read from
the state dict (:func:`resnet_shape`), so that small test models load through the same path as the released
ResNet-101 and ResNeXt-101 32x8d.

VSE infinity runs their stages only (``conv1`` to ``layer3``, then ``layer4``: its grid); ``fc``, the classifier the
originals end with, is built for its weights, which the checkpoints hold.

Example:
    >>> import torch
    >>> net = build_resnet(ResnetShape(style="torchvision", blocks=(1, 1, 1, 1), groups=4, width_per_group=4))
    >>> resnet_shape(net.state_dict(), "torchvision") == ResnetShape("torchvision", (1, 1, 1, 1), 4, 4, 1000)
    True
    >>> net.layer4(net.layer3(net.layer2(net.layer1(net.maxpool(net.conv1(torch.zeros(1, 3, 64, 64))))))).shape
    torch.Size([1, 2048, 2, 2])
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rococo_eval.models.checkpoints import MAX_DIMENSION, MAX_LAYERS, MAX_WIDTH

STYLES = ("caffe", "torchvision")
EXPANSION = 4  # Bottleneck's
_STAGE_PLANES = (64, 128, 256, 512)


@dataclass(frozen=True)
class ResnetShape:
    """A bottleneck ResNet: its layout (:data:`STYLES`), blocks per stage, groups, width per group and classes."""

    style: str
    blocks: tuple
    groups: int = 1
    width_per_group: int = 64
    num_classes: int = 1000


def resnet_shape(state: dict, style: str, prefix: str = "") -> ResnetShape:
    """The :class:`ResnetShape` of a ResNet state dict (keys under ``prefix``).

    Raises:
        ValueError: the state dict holds no bottleneck ResNet (no ``layer1.0.conv2.weight``), or one whose blocks per
            stage, widths or classes are out of bounds (:data:`~rococo_eval.models.checkpoints.MAX_LAYERS`, ...).
    """
    if style not in STYLES:
        raise ValueError(f"`style` must be one of {STYLES}, got {style!r}")
    pattern = re.compile(re.escape(prefix) + r"layer([1-4])\.(\d{1,9})\.conv1\.weight")
    counts = [0, 0, 0, 0]
    for key in state:
        match = pattern.fullmatch(key)
        if match:
            counts[int(match[1]) - 1] = max(counts[int(match[1]) - 1], int(match[2]) + 1)
    conv2, fc = state.get(f"{prefix}layer1.0.conv2.weight"), state.get(f"{prefix}fc.weight")
    if conv2 is None or 0 in counts or fc is None:
        raise ValueError(f"no bottleneck ResNet under {prefix!r}: expected layer1..layer4 of conv1/conv2/conv3 blocks "
                         "and an fc layer")
    if max(counts) > MAX_LAYERS:
        raise ValueError(f"{prefix}layer{counts.index(max(counts)) + 1} has {max(counts)} blocks, over the bound of "
                         f"{MAX_LAYERS}")
    if conv2.dim() != 4 or not 0 < conv2.shape[1] <= conv2.shape[0] <= MAX_WIDTH or conv2.shape[0] % conv2.shape[1] \
            or fc.dim() != 2 or not 0 < fc.shape[0] <= MAX_DIMENSION:
        raise ValueError(f"{prefix}layer1.0.conv2.weight of shape {tuple(conv2.shape)} and {prefix}fc.weight of shape "
                         f"{tuple(fc.shape)} give no bottleneck ResNet within bounds (a width up to {MAX_WIDTH} "
                         "that splits into groups)")
    width = conv2.shape[0]
    groups = width // conv2.shape[1]
    return ResnetShape(style, tuple(counts), groups, width * 64 // (_STAGE_PLANES[0] * groups), int(fc.shape[0]))


def build_resnet(shape: ResnetShape):
    """The ResNet of ``shape``, with random weights (module names as its original's; no forward of its own: VSE infinity
    runs its stages)."""
    from torch import nn

    if shape.style == "caffe" and (shape.groups, shape.width_per_group) != (1, 64):
        raise ValueError("the caffe layout (VSE infinity's resnet.py) has no grouped convolutions")
    caffe = shape.style == "caffe"

    class Bottleneck(nn.Module):
        def __init__(self, inplanes, planes, stride, downsample):
            super().__init__()
            width = int(planes * (shape.width_per_group / 64.0)) * shape.groups
            self.conv1 = nn.Conv2d(inplanes, width, kernel_size=1, stride=stride if caffe else 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, kernel_size=3, stride=1 if caffe else stride, padding=1,
                                   groups=shape.groups, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, planes * EXPANSION, kernel_size=1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * EXPANSION)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            residual = x if self.downsample is None else self.downsample(x)
            out += residual
            return self.relu(out)

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = (nn.MaxPool2d(kernel_size=3, stride=2, padding=0, ceil_mode=True) if caffe
                            else nn.MaxPool2d(kernel_size=3, stride=2, padding=1))
            for stage, (planes, blocks) in enumerate(zip(_STAGE_PLANES, shape.blocks), start=1):
                setattr(self, f"layer{stage}", self._stage(planes, blocks, 1 if stage == 1 else 2))
            self.fc = nn.Linear(_STAGE_PLANES[-1] * EXPANSION, shape.num_classes)

        def _stage(self, planes, blocks, stride):
            downsample = None
            if stride != 1 or self.inplanes != planes * EXPANSION:
                downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * EXPANSION, kernel_size=1, stride=stride,
                                                     bias=False), nn.BatchNorm2d(planes * EXPANSION))
            layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes * EXPANSION
            layers += [Bottleneck(self.inplanes, planes, 1, None) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

    return ResNet()
