"""The two ResNet layouts of VSE infinity's grid backbones, read from a state dict (:func:`resnet_shape`), to be built
without torchvision or the network (:class:`rococo_eval.models.nets.resnet.ResNet`) for their weights to be loaded.

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
    >>> from rococo_eval.models.nets.resnet import ResNet
    >>> net = ResNet(ResnetShape(style="torchvision", blocks=(1, 1, 1, 1), groups=4, width_per_group=4))
    >>> resnet_shape(net.state_dict(), "torchvision") == ResnetShape("torchvision", (1, 1, 1, 1), 4, 4, 1000)
    True
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rococo_eval.models.checkpoints import MAX_DIMENSION, MAX_LAYERS, MAX_WIDTH

STYLES = ("caffe", "torchvision")
EXPANSION = 4  # Bottleneck's
STAGE_PLANES = (64, 128, 256, 512)


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
    return ResnetShape(style, tuple(counts), groups, width * 64 // (STAGE_PLANES[0] * groups), int(fc.shape[0]))
