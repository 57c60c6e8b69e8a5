"""The model families that ``--model`` names: one :class:`Family` record each, the one source of their prefixes, the
forms that the errors, ``run --help`` and the docs show, and the functions that check and load their models.

:func:`rococo_eval.models.adapters.load_model` looks a name's prefix up in :data:`FAMILIES`, the command line
builds ``--model``'s help from :data:`MODEL_FORMS` and ``--precision``'s choices from :data:`PRECISIONS`
(the keys of :data:`TORCH_DTYPES`, which gives each one's torch dtype).

Example:
    >>> [family.prefix for family in FAMILIES.values()]
    ['open_clip:', 'hf:', 'blip:', 'vse:', 'pcmepp:', '']
    >>> FAMILIES["vse"].forms[0].syntax, FAMILIES["vse"].loader
    ('vse:PATH.pth', '_load_vse')
    >>> [family.library for family in FAMILIES.values() if family.hub]  # those whose names may name a Hub repository
    ['open_clip', 'hf', 'blip', 'vse', 'pcmepp']
    >>> FAMILIES["hf"].hub_form, FAMILIES["blip"].hub_form
    ('hf:ORG/REPO', 'blip:hf-hub:ORG/REPO/PATH.pth')
"""

from __future__ import annotations

from dataclasses import dataclass

# The precisions a model runs in (--precision), each with its torch dtype's name (`getattr(torch, name)`); fp32 first:
# the default.
TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
PRECISIONS = tuple(TORCH_DTYPES)
CALLABLE = "python"  # the family of ``module:callable``, the user's own model: it has no prefix
# How a family's names name a Hub repository (Family.hub): the name is the repository id (or a local folder), the
# name is the repository after open_clip's schema, or a file in it (rococo_eval.models.hub_files); and as forms
HUB_SCHEMA = "hf-hub:"
HUB_REPO_ID = r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*"  # a repository id, ORG/REPO, as a regular expression
HUB_REPO, HUB_SCHEMA_REPO, HUB_FILE = "repo", "schema", "file"
HUB_SYNTAX = {HUB_REPO: "ORG/REPO", HUB_SCHEMA_REPO: f"{HUB_SCHEMA}ORG/REPO",
              HUB_FILE: f"{HUB_SCHEMA}ORG/REPO/PATH.pth"}


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
    """A model family: its ``library`` (the prefix before the colon; :data:`CALLABLE` has none), the forms its
    names take (``syntax``: ``(syntax, description)`` pairs), and the names of the functions of
    :mod:`rococo_eval.models.adapters` (which imports this module) that check a name in an instant
    (``checker(name, parsed)``, without the library or the weights) and load the model
    (``loader(name, parsed, device, precision)``). ``hub`` says how its names name a Hub repository (a key of
    :data:`HUB_SYNTAX`; ``""``: never), which the board's requests take (:attr:`hub_form`).
    """

    library: str
    syntax: tuple[tuple[str, str], ...]
    checker: str
    loader: str
    hub: str = ""

    @property
    def prefix(self) -> str:
        """What its names start with (``"hf:"``), or ``""`` for :data:`CALLABLE`."""
        return "" if self.library == CALLABLE else f"{self.library}:"

    @property
    def forms(self) -> tuple[ModelForm, ...]:
        """Its ``syntax`` pairs as :class:`ModelForm` values, as :data:`MODEL_FORMS` lists them."""
        return tuple(ModelForm(self.library, syntax, description) for syntax, description in self.syntax)

    @property
    def hub_form(self) -> str:
        """The form of its names that name a Hub repository (``"hf:ORG/REPO"``), or ``""``."""
        return f"{self.prefix}{HUB_SYNTAX[self.hub]}" if self.hub else ""


_HUB_FILE_FORM = ("hf-hub:ORG/REPO[@REVISION]/PATH.pth", "in a Hub repository at a branch, tag or commit "
                  "(default main), read with PATH.json beside it and the files it names from that commit")
FAMILIES = {family.library: family for family in (
    Family("open_clip", (
        ("open_clip:ARCH/PRETRAINED", "an open_clip architecture and pretrained tag, e.g. open_clip:ViT-B-32/openai; "
                                      "PRETRAINED may be a checkpoint file, or 'none' for random weights"),
        ("open_clip:hf-hub:ORG/REPO", "an open_clip model on the Hugging Face Hub"),
        ("open_clip:local-dir:PATH", "an open_clip model in a local folder")), "_check_open_clip", "_load_open_clip",
           HUB_SCHEMA_REPO),
    Family("hf", (("hf:REPO_OR_PATH", "a transformers dual encoder, e.g. hf:openai/clip-vit-base-patch32, or a "
                                      "BLIP/BLIP-2 retrieval checkpoint, e.g. hf:Salesforce/blip-itm-base-coco; a Hub "
                                      "repository or a folder"),), "_check_transformers", "_load_transformers",
           HUB_REPO),
    Family("blip", (("blip:PATH.pth", "an official BLIP retrieval checkpoint, e.g. "
                                      "blip:model_base_retrieval_coco.pth"),
                    (f"blip:{_HUB_FILE_FORM[0]}", f"the same {_HUB_FILE_FORM[1]}")), "_check_file", "_load_blip",
           HUB_FILE),
    Family("vse", (("vse:PATH.pth", "an official VSE infinity checkpoint, e.g. "
                                    "vse:coco_wsl_grid_bert/model_best.pth"),
                   (f"vse:{_HUB_FILE_FORM[0]}", f"the same {_HUB_FILE_FORM[1]}")), "_check_file", "_load_vse",
           HUB_FILE),
    Family("pcmepp", (("pcmepp:REPO_OR_FOLDER", "an official PCME++ checkpoint, scored by CSD, e.g. "
                                                "pcmepp:SanghyukChun/PCMEPP-ViT-B-16-CC3M-12M-RedCaps-256M"),),
           "_check_pcmepp", "_load_pcmepp", HUB_REPO),
    Family(CALLABLE, (("module:callable", "your own model: callable() returns an object with encode_images and "
                                          "encode_texts, e.g. my_models:load_model; see rococo_eval.models.custom"),),
           "_check_callable", "_load_callable"),
)}
MODEL_FORMS = tuple(form for family in FAMILIES.values() for form in family.forms)  # every form, in this order
