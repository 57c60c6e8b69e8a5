"""The ``nn.Module`` networks of the families read from official checkpoints, one module per family, each class at
module level and configured in its ``__init__`` (as open_clip's ``model.py`` beside its ``factory.py``):

- :mod:`~rococo_eval.models.nets.resnet`: the ResNet layouts of VSE infinity's grid backbones;
- :mod:`~rococo_eval.models.nets.vse_infty`: VSE infinity's image and text encoders;
- :mod:`~rococo_eval.models.nets.pcmepp`: PCME++'s ``HfPCMEPPModel``.

Their modules are named as the official code names them, so that official state dicts load strictly. The family
loaders (:mod:`rococo_eval.models.vse_infty`, :mod:`rococo_eval.models.pcmepp`) read a checkpoint's configuration and
assemble these; the modules here import torch, so they are imported only where a model is built.
"""
