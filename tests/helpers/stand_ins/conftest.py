"""The stand-in packages here are for the reference environment only (``.venv-blip-official``): pytest must not
import them in the project's environment (``--doctest-modules`` would register them as ``torchvision``)."""

collect_ignore = ["torchvision", "pycocoevalcap"]
