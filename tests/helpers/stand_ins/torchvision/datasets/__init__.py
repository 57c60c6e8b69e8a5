"""``torchvision.datasets``: the dataset names timm imports (unusable), and ``utils.download_url``."""

from torchvision._unavailable import names
from torchvision.datasets import utils  # noqa: F401

names(globals(), "CIFAR100", "CIFAR10", "MNIST", "KMNIST", "FashionMNIST", "ImageFolder", "Places365", "INaturalist",
      "QMNIST", "ImageNet")
