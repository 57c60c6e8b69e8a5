"""The two bottleneck ResNet layouts of VSE infinity's grid backbones (:mod:`rococo_eval.models.resnet` reads their
:class:`~rococo_eval.models.resnet.ResnetShape` from a state dict), module names as their originals'.

Example:
    >>> import torch
    >>> from rococo_eval.models.resnet import ResnetShape
    >>> net = ResNet(ResnetShape(style="torchvision", blocks=(1, 1, 1, 1), groups=4, width_per_group=4))
    >>> net.layer4(net.layer3(net.layer2(net.layer1(net.maxpool(net.conv1(torch.zeros(1, 3, 64, 64))))))).shape
    torch.Size([1, 2048, 2, 2])
"""

from __future__ import annotations

from torch import nn

from rococo_eval.models.resnet import EXPANSION, STAGE_PLANES, ResnetShape


class Bottleneck(nn.Module):
    """A bottleneck block; ``caffe`` puts the stride on the first 1 x 1 convolution (the BUTD detector's ResNet),
    else on the 3 x 3 one (torchvision's, grouped)."""

    def __init__(self, inplanes: int, planes: int, stride: int, downsample, caffe: bool, groups: int = 1,
                 width_per_group: int = 64):
        super().__init__()
        width = int(planes * (width_per_group / 64.0)) * groups
        self.conv1 = nn.Conv2d(inplanes, width, kernel_size=1, stride=stride if caffe else 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, kernel_size=3, stride=1 if caffe else stride, padding=1, groups=groups,
                               bias=False)
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
    """The ResNet of ``shape``, with random weights (no forward of its own: VSE infinity runs its stages; ``fc``, the
    classifier the originals end with, is built for its weights, which the checkpoints hold).

    Raises:
        ValueError: grouped convolutions in the caffe layout, which has none.
    """

    def __init__(self, shape: ResnetShape):
        super().__init__()
        if shape.style == "caffe" and (shape.groups, shape.width_per_group) != (1, 64):
            raise ValueError("the caffe layout (VSE infinity's resnet.py) has no grouped convolutions")
        self.shape = shape
        caffe = shape.style == "caffe"
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = (nn.MaxPool2d(kernel_size=3, stride=2, padding=0, ceil_mode=True) if caffe
                        else nn.MaxPool2d(kernel_size=3, stride=2, padding=1))
        for stage, (planes, blocks) in enumerate(zip(STAGE_PLANES, shape.blocks), start=1):
            setattr(self, f"layer{stage}", self._stage(planes, blocks, 1 if stage == 1 else 2))
        self.fc = nn.Linear(STAGE_PLANES[-1] * EXPANSION, shape.num_classes)

    def _stage(self, planes: int, blocks: int, stride: int):
        caffe, groups, width = self.shape.style == "caffe", self.shape.groups, self.shape.width_per_group
        downsample = None
        if stride != 1 or self.inplanes != planes * EXPANSION:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * EXPANSION, kernel_size=1, stride=stride,
                                                 bias=False), nn.BatchNorm2d(planes * EXPANSION))
        layers = [Bottleneck(self.inplanes, planes, stride, downsample, caffe, groups, width)]
        self.inplanes = planes * EXPANSION
        layers += [Bottleneck(self.inplanes, planes, 1, None, caffe, groups, width) for _ in range(1, blocks)]
        return nn.Sequential(*layers)
