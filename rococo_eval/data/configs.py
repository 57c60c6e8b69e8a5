"""The dataset's naming: its configs, their splits, the tables the splits read, and the tables' features.

This module owns the names only; :mod:`rococo_eval.data.source` holds the data and :mod:`rococo_eval.data.export`
writes the rows. The dataset has one config per attack and two clean configs that hold the query sets:

============================  ==========================================  ================================
config                        splits (rows)                               scored
============================  ==========================================  ================================
``same_concept``, ...         ``original`` (25,010 ground-truth           image-to-text; the queries are
(the 4 text attacks)          captions), ``adversarial`` (25,000)         the ``images`` config
``mix_seed1``, ...            ``original`` (5,000 test images),           text-to-image; the queries are
(the 6 image attacks)         ``adversarial`` (5,000 altered copies)      the ``captions`` config
``captions``                  ``test`` (the 25,010 ground-truth           text-to-image queries; clean
                              captions)                                   image-to-text gallery
``images``                    ``test`` (the 5,000 test images)            image-to-text queries; clean
                                                                          text-to-image gallery
============================  ==========================================  ================================

Each split is one *table*; the originals are two tables shared by every config that uses them
(``captions_original``, ``images_original``), and each attack adds ``<attack>_adversarial``. A config has a
single schema for all its splits (``datasets`` requires it), so a field that only altered items have is
None on original rows.

Example:
    >>> config_splits("rand_voca")
    {'original': 'captions_original', 'adversarial': 'rand_voca_adversarial'}
    >>> dataset_splits("mix_seed1")
    {'queries': [('captions', 'test')], 'gallery': [('mix_seed1', 'original'), ('mix_seed1', 'adversarial')]}
"""

from __future__ import annotations

from typing import Iterable

import datasets

from rococo_eval.catalog import ATTACKS, CLEAN, IMAGE_TO_TEXT, TEXT_ATTACKS, gallery_direction, parse_image_attack

CAPTIONS_CONFIG = "captions"
IMAGES_CONFIG = "images"
CONFIGS = ATTACKS + (CAPTIONS_CONFIG, IMAGES_CONFIG)
CAPTIONS_ORIGINAL = "captions_original"
IMAGES_ORIGINAL = "images_original"

CAPTION_FEATURES = datasets.Features({
    "image_index": datasets.Value("int32"),
    "caption": datasets.Value("string"),
    "is_adversarial": datasets.Value("bool"),
    "source_caption_index": datasets.Value("int32"),
    "replacements": [{
        "original": datasets.Value("string"),
        "replacement": datasets.Value("string"),
        "position": datasets.Value("int32"),
    }],
})
# A generated benchmark's caption tables (rococo_eval.data.benchmark) add the evidence of each adversarial caption's
# word choice: the candidate words of its source caption and their Embedding-Influence scores (None on originals).
CAPTION_EVIDENCE_FEATURES = datasets.Features({
    **CAPTION_FEATURES,
    "candidates": [{
        "word": datasets.Value("string"),
        "position": datasets.Value("int32"),
        "influence": datasets.Value("float32"),
    }],
})
IMAGE_FEATURES = datasets.Features({
    "image_index": datasets.Value("int32"),
    "file_name": datasets.Value("string"),
    "image": datasets.Image(),
    "is_adversarial": datasets.Value("bool"),
    "partner_index": datasets.Value("int32"),
    "box": [datasets.Value("int32")],
})


def check_config(config: str) -> str:
    """Return ``config`` if it names a RoCOCO config, else raise a ValueError listing the configs.

    An image attack with another seed (``mix_seed7``, as a generated benchmark may hold) is a config too.

    Example:
        >>> check_config("randvoca")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `config` must be one of ('same_concept', 'diff_concept', 'rand_voca', ..., 'images'), got 'randvoca'
    """
    if config not in CONFIGS and parse_image_attack(config) is None:
        raise ValueError(f"`config` must be one of {CONFIGS}, got {config!r}")
    return config


def config_splits(config: str) -> dict[str, str]:
    """The splits of ``config`` and the table each one reads, in split order.

    Example:
        >>> config_splits("patch_seed10"), config_splits("images")
        ({'original': 'images_original', 'adversarial': 'patch_seed10_adversarial'}, {'test': 'images_original'})
    """
    check_config(config)
    if config == CAPTIONS_CONFIG:
        return {"test": CAPTIONS_ORIGINAL}
    if config == IMAGES_CONFIG:
        return {"test": IMAGES_ORIGINAL}
    original = CAPTIONS_ORIGINAL if config in TEXT_ATTACKS else IMAGES_ORIGINAL
    return {"original": original, "adversarial": f"{config}_adversarial"}


def config_features(config: str) -> datasets.Features:
    """The features shared by every split of ``config``: :data:`CAPTION_FEATURES` or :data:`IMAGE_FEATURES`.

    Example:
        >>> list(config_features("danger"))
        ['image_index', 'caption', 'is_adversarial', 'source_caption_index', 'replacements']
    """
    return table_features(next(iter(config_splits(config).values())))


def query_config(config: str) -> str:
    """The config whose ``test`` split holds the queries of ``config``'s gallery.

    Example:
        >>> query_config("rand_voca"), query_config("mix_seed100")
        ('images', 'captions')
    """
    check_config(config)
    return IMAGES_CONFIG if config in TEXT_ATTACKS or config == CAPTIONS_CONFIG else CAPTIONS_CONFIG


def dataset_splits(attack: str, direction: str | None = None) -> dict[str, list[tuple[str, str]]]:
    """Which ``(config, split)`` pairs of the dataset hold the queries and the gallery of one evaluation.

    The gallery is the listed splits concatenated in that order: the ``"dataset"`` order of
    :meth:`rococo_eval.data.source.RococoSource.gallery` and :func:`rococo_eval.data.dataset.metric_inputs_for`.

    Args:
        attack: ``"clean"`` or an attack (see :data:`rococo_eval.catalog.ATTACKS`).
        direction: ``"image_to_text"`` or ``"text_to_image"``; None means the attack's own direction,
            and is not allowed for ``"clean"``.

    Example:
        >>> dataset_splits("rand_voca")
        {'queries': [('images', 'test')], 'gallery': [('rand_voca', 'original'), ('rand_voca', 'adversarial')]}
        >>> dataset_splits("clean", "image_to_text")
        {'queries': [('images', 'test')], 'gallery': [('captions', 'test')]}
    """
    direction = gallery_direction(attack, direction)
    queries, clean_gallery = ((IMAGES_CONFIG, CAPTIONS_CONFIG) if direction == IMAGE_TO_TEXT
                              else (CAPTIONS_CONFIG, IMAGES_CONFIG))
    if attack == CLEAN:
        return {"queries": [(queries, "test")], "gallery": [(clean_gallery, "test")]}
    return {"queries": [(queries, "test")], "gallery": [(attack, "original"), (attack, "adversarial")]}


def table_features(table: str, evidence: bool = False) -> datasets.Features:
    """The features of one table (see the module docstring for the table names).

    Args:
        table: a table name.
        evidence: the caption tables of a generated benchmark, which add ``candidates``
            (:data:`CAPTION_EVIDENCE_FEATURES`); image tables are the same either way.

    Example:
        >>> list(table_features("mix_seed1_adversarial"))
        ['image_index', 'file_name', 'image', 'is_adversarial', 'partner_index', 'box']
        >>> list(table_features("danger_adversarial", evidence=True))[-2:]
        ['replacements', 'candidates']
    """
    if table == CAPTIONS_ORIGINAL or table.removesuffix("_adversarial") in TEXT_ATTACKS:
        return CAPTION_EVIDENCE_FEATURES if evidence else CAPTION_FEATURES
    if table == IMAGES_ORIGINAL or parse_image_attack(table.removesuffix("_adversarial")) is not None:
        return IMAGE_FEATURES
    raise ValueError(f"`table` must be {CAPTIONS_ORIGINAL!r}, {IMAGES_ORIGINAL!r} or '<attack>_adversarial', "
                     f"got {table!r}")


def tables_of(configs: Iterable[str]) -> list[str]:
    """The tables the ``configs`` read, each once, in a stable order (originals first).

    Example:
        >>> tables_of(["rand_voca", "images", "mix_seed1"])
        ['captions_original', 'images_original', 'rand_voca_adversarial', 'mix_seed1_adversarial']
    """
    tables = {table: None for config in configs for table in config_splits(config).values()}
    originals = [t for t in (CAPTIONS_ORIGINAL, IMAGES_ORIGINAL) if t in tables]
    return originals + [t for t in tables if t not in originals]
