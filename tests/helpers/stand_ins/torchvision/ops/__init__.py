"""``torchvision.ops``: only ``misc.FrozenBatchNorm2d``, which timm imports (unusable)."""

from torchvision.ops import misc  # noqa: F401
