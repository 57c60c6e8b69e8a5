"""A stand-in for torchvision in the reference environment of the official BLIP code (``.venv-reference``).

PyPI's torchvision does not load beside the CPU build of torch 2.13.0 (``operator torchvision::nms does not exist``),
yet timm imports it, and so do the official ``blip/data`` modules that ``eval_blip_i2t.py`` and ``eval_blip_t2i.py``
import. Nothing of torchvision runs in the reference evaluation: the official ``vit.py`` uses only timm's layers, and
the official test transform is applied as its definition (``tests/helpers/blip_official_run.py``). So this package
has the names those imports ask for, and each of them raises if it is ever used; the one exception is
``datasets.utils.download_url``, which keeps torchvision's behaviour for a file that is already there. It is on the
reference run's ``PYTHONPATH`` only; pytest does not collect it (``tests/conftest.py``'s ``collect_ignore``).
"""

__version__ = "0.0+stand-in"

from torchvision import datasets, ops, transforms  # noqa: F401
