"""``torchvision.transforms`` names that timm and the official ``blip/data/__init__.py`` import (unusable)."""

from torchvision._unavailable import names
from torchvision.transforms import functional  # noqa: F401
from torchvision.transforms.functional import InterpolationMode  # noqa: F401

names(globals(), "Compose", "Resize", "ToTensor", "Normalize", "CenterCrop", "RandomResizedCrop",
      "RandomHorizontalFlip", "RandomCrop", "ColorJitter", "Grayscale", "RandomGrayscale", "Lambda", "ToPILImage")
