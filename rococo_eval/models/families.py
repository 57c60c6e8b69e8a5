"""The model families that ``--model`` names: one :class:`Family` record each, the one source of their prefixes, the
forms that the errors, ``run --help`` and the docs show, and the functions that check and load their models.

:func:`rococo_eval.models.adapters.load_model` looks a name's prefix up here (:func:`family`), the command line
builds ``--model``'s help from :data:`MODEL_FORMS` and ``--precision``'s choices from :data:`PRECISIONS`.

Example:
    >>> [family.prefix for family in FAMILIES]
    ['open_clip:', 'hf:', 'blip:', 'vse:', 'pcmepp:', '']
    >>> family("vse").forms[0].syntax
    'vse:PATH.pth'
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

PRECISIONS = ("fp32", "fp16", "bf16")  # the dtypes a model runs in (--precision), fp32 first: the default
CALLABLE = "python"  # the family of ``module:callable``, the user's own model: it has no prefix


@dataclass(frozen=True)
class ModelForm:
    """One way to name a model (``--model``): its ``syntax``, what it names, and the family (``library``) that
    loads it. :data:`MODEL_FORMS` lists them all.

    Example:
        >>> print(MODEL_FORMS[2])
        open_clip:local-dir:PATH (an open_clip model in a local folder)
    """

    library: str
    syntax: str
    description: str

    def __str__(self) -> str:
        return f"{self.syntax} ({self.description})"


@dataclass(frozen=True)
class Family:
    """A model family: its ``library`` (the prefix before the colon; :data:`CALLABLE` has none), the ``forms`` its
    names take (``(syntax, description)`` pairs), and the names of the functions of
    :mod:`rococo_eval.models.adapters` that check a name in an instant (``checker(name, parsed)``, without the
    library or the weights) and load the model (``loader(name, parsed, device, precision)``).
    """

    library: str
    syntax: tuple[tuple[str, str], ...]
    checker: str
    loader: str

    @property
    def prefix(self) -> str:
        """What its names start with (``"hf:"``), or ``""`` for :data:`CALLABLE`."""
        return "" if self.library == CALLABLE else f"{self.library}:"

    @property
    def forms(self) -> tuple[ModelForm, ...]:
        return tuple(ModelForm(self.library, syntax, description) for syntax, description in self.syntax)

    def check(self, name: str, parsed) -> None:
        """Check model name ``name`` (parsed as ``parsed``) in an instant; raise ModelError when it names nothing."""
        getattr(_adapters(), self.checker)(name, parsed)

    def load(self, name: str, parsed, device, precision: str):
        """Load the model that ``name`` names."""
        return getattr(_adapters(), self.loader)(name, parsed, device, precision)


def _adapters():
    return importlib.import_module("rococo_eval.models.adapters")  # which imports this module: looked up when used


FAMILIES = (
    Family("open_clip", (
        ("open_clip:ARCH/PRETRAINED", "an open_clip architecture and pretrained tag, e.g. open_clip:ViT-B-32/openai; "
                                      "PRETRAINED may be a checkpoint file, or 'none' for random weights"),
        ("open_clip:hf-hub:ORG/REPO", "an open_clip model on the Hugging Face Hub"),
        ("open_clip:local-dir:PATH", "an open_clip model in a local folder")), "_check_open_clip", "_load_open_clip"),
    Family("hf", (("hf:REPO_OR_PATH", "a transformers dual encoder, e.g. hf:openai/clip-vit-base-patch32, or a "
                                      "BLIP/BLIP-2 retrieval checkpoint, e.g. hf:Salesforce/blip-itm-base-coco; a Hub "
                                      "repository or a folder"),), "_check_transformers", "_load_transformers"),
    Family("blip", (("blip:PATH.pth", "an official BLIP retrieval checkpoint, e.g. "
                                      "blip:model_base_retrieval_coco.pth"),), "_check_file", "_load_blip"),
    Family("vse", (("vse:PATH.pth", "an official VSE infinity checkpoint, e.g. "
                                    "vse:coco_wsl_grid_bert/model_best.pth"),), "_check_file", "_load_vse"),
    Family("pcmepp", (("pcmepp:REPO_OR_FOLDER", "an official PCME++ checkpoint, scored by CSD, e.g. "
                                                "pcmepp:SanghyukChun/PCMEPP-ViT-B-16-CC3M-12M-RedCaps-256M"),),
           "_check_pcmepp", "_load_pcmepp"),
    Family(CALLABLE, (("module:callable", "your own model: callable() returns an object with encode_images and "
                                          "encode_texts, e.g. my_models:load_model; see rococo_eval.models.custom"),),
           "_check_callable", "_load_callable"),
)
MODEL_FORMS = tuple(form for each in FAMILIES for form in each.forms)  # every form, in the families' order
_BY_LIBRARY = {each.library: each for each in FAMILIES}


def family(library: str) -> Family:
    """The family named ``library`` (its prefix without the colon, or :data:`CALLABLE`).

    Example:
        >>> family("timm")
        Traceback (most recent call last):
        ...
        KeyError: "no model family 'timm'; the families: open_clip, hf, blip, vse, pcmepp, python"
    """
    if library not in _BY_LIBRARY:
        raise KeyError(f"no model family {library!r}; the families: {', '.join(_BY_LIBRARY)}")
    return _BY_LIBRARY[library]


def is_built_in(library: str) -> bool:
    """Whether ``library`` is the prefix of a built-in family (not :data:`CALLABLE`, which has none).

    Example:
        >>> is_built_in("hf"), is_built_in("python"), is_built_in("my_models")
        (True, False, False)
    """
    return library in _BY_LIBRARY and library != CALLABLE
