"""``torchvision.ops.misc.FrozenBatchNorm2d`` (unusable)."""

from torchvision._unavailable import names

names(globals(), "FrozenBatchNorm2d")
