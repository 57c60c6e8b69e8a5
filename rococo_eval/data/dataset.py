"""Scoring a model on the exported dataset: the queries and gallery of one evaluation, and the metric's inputs.

What a user calls after exporting (``python rococo_dataset.py export``) or with the dataset on the Hub:
:func:`load_queries_and_gallery` loads one evaluation's splits with ``datasets.load_dataset``, and
:func:`metric_inputs_for` gives ``rococo_recall`` everything besides the scores, in either gallery order.

Example:
    >>> inputs = metric_inputs_for("mix_seed1")
    >>> len(inputs["references"]), len(inputs["adversarial"])
    (25010, 10000)
"""

from __future__ import annotations

import functools
from pathlib import Path

import datasets

from rococo_eval.catalog import CLEAN, TEXT_ATTACKS, gallery_direction
from rococo_eval.data.annotations import resolve_annotations_dir
from rococo_eval.data.configs import dataset_splits
from rococo_eval.data.source import RococoSource, open_source


@functools.lru_cache(maxsize=8)
def _source_for(annotations_dir: Path) -> RococoSource:
    return RococoSource(annotations_dir)


def metric_inputs_for(attack: str, direction: str | None = None, order: str | None = None,
                      annotations_dir=None, *, benchmark=None) -> dict:
    """What the RoCOCO Recall metric takes besides the scores: ``references`` and the ``adversarial`` mask.

    Score your model with the queries in test order and the gallery in ``order``, then call
    ``rococo_recall(scores, **metric_inputs_for(attack, order=order))``.

    - ``"official"``: the official ``itm_eval`` order. Image-to-text: for each image its ground-truth captions,
      then its 5 adversarial ones. Text-to-image: the 5,000 images, then their 5,000 altered copies.
    - ``"dataset"``: the splits of :func:`~rococo_eval.data.configs.dataset_splits` concatenated (``original`` then
      ``adversarial``), each in its row order, as ``load_dataset`` returns them.

    Queries are in test order in both: the 5,000 images (image-to-text) or the 25,010 ground-truth captions
    (text-to-image), as the ``images`` and ``captions`` configs hold them.

    Args:
        attack: ``"clean"`` or an attack.
        direction: ``"image_to_text"`` or ``"text_to_image"``; None means the attack's own (required for clean).
        order: ``"official"`` or ``"dataset"``; required for an attacked image-to-text gallery, the one gallery
            where the two orders differ (scores in one order scored in the other would be silently wrong).
        annotations_dir: as for :class:`~rococo_eval.data.source.RococoSource`. The clean file is read, and for a
            text attack its own file too (it gives the adversarial captions per image).
        benchmark: instead of RoCOCO, a folder made by :func:`rococo_eval.data.benchmark.make_benchmark` (its own
            captions per image, adversarial captions per image and attacks).

    Example:
        >>> inputs = metric_inputs_for("rand_voca", order="dataset")
        >>> len(inputs["references"]), inputs["references"][83], int(inputs["adversarial"].sum())
        (5000, [415, 416, 417, 418, 419, 420], 25000)
        >>> metric_inputs_for("clean")
        Traceback (most recent call last):
        ...
        ValueError: `direction` is required for the clean gallery: 'image_to_text' or 'text_to_image'
        >>> metric_inputs_for("danger")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `order` is required for an attacked image-to-text gallery, where the two orders differ: ...
    """
    gallery_direction(attack, direction)
    if benchmark is not None:
        return open_source(annotations_dir, benchmark=benchmark).gallery(attack, direction, order).metric_inputs()
    folder = resolve_annotations_dir(annotations_dir, names=(CLEAN,) + ((attack,) if attack in TEXT_ATTACKS else ()))
    return _source_for(Path(folder).resolve()).gallery(attack, direction, order).metric_inputs()


def load_queries_and_gallery(path: str, attack: str, direction: str | None = None, **load_kwargs):
    """Load one evaluation's queries and gallery from an exported RoCOCO folder or Hub repository.

    The gallery is in the ``"dataset"`` order of :func:`metric_inputs_for`; the queries are in test order.

    Args:
        path: what ``datasets.load_dataset`` takes: the export folder or ``"<org>/<name>"`` on the Hub.
        attack, direction: as for :func:`~rococo_eval.data.configs.dataset_splits`.
        load_kwargs: passed to ``datasets.load_dataset`` (``cache_dir``, ``revision``, ...).

    Returns:
        ``(queries, gallery)``, two ``datasets.Dataset``.

    Example:
        >>> load_queries_and_gallery("rococo-export", "clean")
        Traceback (most recent call last):
        ...
        ValueError: `direction` is required for the clean gallery: 'image_to_text' or 'text_to_image'
    """
    splits = dataset_splits(attack, direction)
    (query_name, query_split), = splits["queries"]
    queries = datasets.load_dataset(path, query_name, split=query_split, **load_kwargs)
    parts = [datasets.load_dataset(path, name, split=split, **load_kwargs) for name, split in splits["gallery"]]
    return queries, datasets.concatenate_datasets(parts)
