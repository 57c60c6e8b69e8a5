"""RoCOCO's attack catalogue: the names of attacks, directions and galleries, in one grammar.

Every module that reads or writes an attack's name goes through this one: the layouts, the dataset's configs,
score file names, the failure analysis, the report, the Space and the command.

The grammar:

- ``clean``: the gallery without adversarial items (:data:`CLEAN`).
- A **text attack** is one of :data:`TEXT_ATTACKS`; it is scored image-to-text.
- An **image attack** is ``<method>_seed<seed>``: ``method`` one of :data:`IMAGE_ATTACK_METHODS`, ``seed`` a
  non-negative int written in decimal without leading zeros (``mix_seed1``, ``patch_seed100``; not
  ``mix_seed07``). RoCOCO's seeds are :data:`SEEDS`; a generated benchmark may use any. It is scored
  text-to-image.
- A **gallery** is one attack (or ``clean``) scored in one direction; its key is ``<attack>/<direction>``
  (:func:`gallery_key`).

Example:
    >>> parse_image_attack("mix_seed10"), parse_image_attack("mix_seed07"), parse_image_attack("rand_voca")
    (('mix', 10), None, None)
    >>> attack_direction("patch_seed7"), gallery_key("rand_voca", "image_to_text")
    ('text_to_image', 'rand_voca/image_to_text')
"""

from __future__ import annotations

import re

import numpy as np

CLEAN = "clean"
TEXT_ATTACKS = ("same_concept", "diff_concept", "rand_voca", "danger")
IMAGE_ATTACK_METHODS = ("mix", "patch")
SEEDS = (1, 10, 100)
IMAGE_ATTACKS = tuple(f"{method}_seed{seed}" for method in IMAGE_ATTACK_METHODS for seed in SEEDS)
ATTACKS = TEXT_ATTACKS + IMAGE_ATTACKS
IMAGE_TO_TEXT = "image_to_text"
TEXT_TO_IMAGE = "text_to_image"
DIRECTIONS = (IMAGE_TO_TEXT, TEXT_TO_IMAGE)
_IMAGE_ATTACK = re.compile(r"(?P<method>" + "|".join(IMAGE_ATTACK_METHODS) + r")_seed(?P<seed>0|[1-9][0-9]*)")


def image_attack_name(method: str, seed: int) -> str:
    """The name of the image attack ``method`` (``"mix"`` or ``"patch"``) with ``seed``: RoCOCO's seeds are
    :data:`SEEDS`; a generated benchmark (:mod:`rococo_eval.data.benchmark`) may use any non-negative int.

    Example:
        >>> image_attack_name("patch", 7)
        'patch_seed7'
    """
    name = f"{method}_seed{seed}"
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not _IMAGE_ATTACK.fullmatch(name):
        raise ValueError(f"`method` must be one of {IMAGE_ATTACK_METHODS} and `seed` a non-negative int, "
                         f"got {method!r} and {seed!r}")
    return name


def parse_image_attack(attack: str) -> tuple[str, int] | None:
    """``(method, seed)`` of an image attack's name (any seed), or None when ``attack`` names none.

    Example:
        >>> parse_image_attack("mix_seed10"), parse_image_attack("mix_seed7"), parse_image_attack("rand_voca")
        (('mix', 10), ('mix', 7), None)
    """
    match = _IMAGE_ATTACK.fullmatch(attack) if isinstance(attack, str) else None
    return None if match is None else (match["method"], int(match["seed"]))


def is_image_attack(attack: str) -> bool:
    """Whether ``attack`` names an image attack (any seed).

    Example:
        >>> is_image_attack("mix_seed1"), is_image_attack("mix_seed01"), is_image_attack("danger")
        (True, False, False)
    """
    return parse_image_attack(attack) is not None


def attack_direction(attack: str) -> str:
    """The direction an attack is scored in: text attacks image-to-text, image attacks text-to-image.

    Image attacks are named ``<method>_seed<seed>`` with any seed (:func:`parse_image_attack`): RoCOCO's use
    :data:`SEEDS`, a generated benchmark may use others.

    Example:
        >>> attack_direction("rand_voca"), attack_direction("mix_seed10"), attack_direction("patch_seed7")
        ('image_to_text', 'text_to_image', 'text_to_image')
    """
    if attack in TEXT_ATTACKS:
        return IMAGE_TO_TEXT
    if is_image_attack(attack):
        return TEXT_TO_IMAGE
    raise ValueError(f"`attack` must be one of {ATTACKS}, got {attack!r}")


def gallery_direction(attack: str, direction: str | None = None) -> str:
    """The direction one gallery is scored in: ``direction`` checked against ``attack``, or the attack's own.

    Args:
        attack: ``"clean"`` or an attack (see :data:`ATTACKS`).
        direction: ``"image_to_text"`` or ``"text_to_image"``; None means the attack's own direction, and
            is not allowed for ``"clean"``.

    Example:
        >>> gallery_direction("rand_voca"), gallery_direction("clean", "text_to_image")
        ('image_to_text', 'text_to_image')
        >>> gallery_direction("clean")
        Traceback (most recent call last):
        ...
        ValueError: `direction` is required for the clean gallery: 'image_to_text' or 'text_to_image'
    """
    if direction is not None:
        return check_direction(attack, direction)
    if attack == CLEAN:
        raise ValueError("`direction` is required for the clean gallery: 'image_to_text' or 'text_to_image'")
    return attack_direction(attack)


def check_direction(attack: str, direction: str) -> str:
    """``direction``, checked: one of :data:`DIRECTIONS`, and the one ``attack`` is scored in.

    Example:
        >>> check_direction("mix_seed1", "image_to_text")
        Traceback (most recent call last):
        ...
        ValueError: attack 'mix_seed1' is scored text_to_image, not image_to_text
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"`direction` must be one of {DIRECTIONS}, got {direction!r}")
    if attack != CLEAN and attack_direction(attack) != direction:
        raise ValueError(f"attack {attack!r} is scored {attack_direction(attack)}, not {direction}")
    return direction


def direction_text(direction: str) -> str:
    """A direction as every table, heading and message shows it: ``image-to-text`` (hyphens, which a narrow column
    may wrap at).

    Example:
        >>> direction_text("image_to_text")
        'image-to-text'
    """
    return direction.replace("_", "-")


def gallery_key(attack: str, direction: str) -> str:
    """The key of one gallery's results: ``"<attack>/<direction>"``.

    Any attack name without ``/`` is allowed, so that a custom gallery of ``rococo-eval score`` has a key too.

    Example:
        >>> gallery_key("rand_voca", "image_to_text"), gallery_key("clean", "text_to_image")
        ('rand_voca/image_to_text', 'clean/text_to_image')
    """
    if not attack or not direction or "/" in attack or "/" in direction:
        raise ValueError(f"`attack` and `direction` must be non-empty and free of '/', got {attack!r}, {direction!r}")
    return f"{attack}/{direction}"


def galleries(attacks) -> list[tuple[str, str]]:
    """The ``(attack, direction)`` galleries a run scores: both clean galleries, then each attack's own.

    Example:
        >>> galleries(["rand_voca", "mix_seed1"])[1:]
        [('clean', 'text_to_image'), ('rand_voca', 'image_to_text'), ('mix_seed1', 'text_to_image')]
    """
    return [(CLEAN, IMAGE_TO_TEXT), (CLEAN, TEXT_TO_IMAGE)] + [(a, attack_direction(a)) for a in attacks]


def select_attacks(attacks, text_attacks=TEXT_ATTACKS, image_attacks=IMAGE_ATTACKS) -> tuple[str, ...]:
    """The attacks that ``attacks`` names among ``text_attacks`` and ``image_attacks`` (RoCOCO's, or a source's own),
    in their order: attack names and the groups ``all``, ``text`` and ``image``, as a list or one comma-separated
    string. The one reading of ``--attacks`` and of ``evaluate_model(attacks=...)``.

    Example:
        >>> select_attacks("rand_voca, image")
        ('rand_voca', 'mix_seed1', 'mix_seed10', 'mix_seed100', 'patch_seed1', 'patch_seed10', 'patch_seed100')
        >>> select_attacks(["mix_seed7", "danger"], ["danger"], ["mix_seed7"])
        ('danger', 'mix_seed7')
    """
    names = [part.strip() for part in attacks.split(",")] if isinstance(attacks, str) else list(attacks)
    known = tuple(text_attacks) + tuple(image_attacks)
    groups = {"all": known, "text": tuple(text_attacks), "image": tuple(image_attacks)}
    return select_names(names, known, groups, argument="attacks")


def select_names(names, choices, groups=None, *, argument: str = "strategies") -> tuple[str, ...]:
    """The members of ``choices`` that ``names`` select, in the order of ``choices``: each name is a choice or
    one of ``groups`` (a name standing for several choices). ``argument`` names the argument in the errors.

    Example:
        >>> select_names(["mix", "text"], TEXT_ATTACKS + IMAGE_ATTACK_METHODS, {"text": TEXT_ATTACKS})
        ('same_concept', 'diff_concept', 'rand_voca', 'danger', 'mix')
        >>> select_names(["mixup"], IMAGE_ATTACK_METHODS)
        Traceback (most recent call last):
        ...
        ValueError: `strategies` must be among ('mix', 'patch'), got 'mixup'
    """
    groups = groups or {}
    names = [names] if isinstance(names, str) else list(names)
    allowed = tuple(choices) + tuple(groups)
    if not names:
        raise ValueError(f"`{argument}` must name at least one of {allowed}, got none")
    for name in names:
        if name not in choices and name not in groups:
            raise ValueError(f"`{argument}` must be among {tuple(choices)}"
                             + (f" or {tuple(groups)}" if groups else "") + f", got {name!r}")
    chosen = {member for name in names for member in groups.get(name, (name,))}
    return tuple(name for name in choices if name in chosen)
