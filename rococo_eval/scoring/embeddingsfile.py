"""A model's embeddings in one ``.safetensors`` file, and every gallery scored from them as ``run`` scores them.

A full report needs one score matrix per gallery (2.75 billion scores for RoCOCO); the embeddings of the same
model are 33 times smaller. The file holds one float tensor per item set, named as the item sets of
:mod:`rococo_eval.scoring.galleries` (``images/original``, ``captions/ground_truth``, ``captions/<text attack>``,
``images/<image attack>``), rows in those item sets' order (the source's: the official annotation files' for
RoCOCO). Its metadata (``__metadata__``, strings):

- ``format``: ``rococo-embeddings``, ``version``: ``1``;
- ``model``: the model's name, ``dimension``: the vectors' width;
- ``normalized``: ``true`` when every row has unit length (this package writes them so for a cosine model);
- ``similarity``: how the model scores (:mod:`rococo_eval.models.similarity`): ``cosine`` (also when the key is
  missing, as in files written before it existed), ``dot`` or ``csd`` (rows of a mean and its uncertainty); the
  galleries are scored by it;
- ``fingerprints``: JSON ``{item set: fingerprint}`` of the item sets' content (captions, image files,
  alterations), so that a file made for other captions or attacks is refused.

``rococo-eval run --save-embeddings FILE`` writes it, and :func:`write_embeddings_from_rows` writes one from a user's
own arrays, each in the row order of a ``load_dataset`` split (the dataset's rows are the item sets' rows, in the
same order: :func:`item_set_of_rows` maps them); ``rococo-eval score FILE`` scores it. A file with the two
clean item sets and some attacks' is scored for what it holds. Scores are the dot products of the rows, made by the
metric's one block rule (:func:`rococo_recall.embedding_score_blocks`), so the results equal ``run``'s. In a cosine
file, rows that are not of unit length are normalised, with a warning; the rows of the other similarities are scored
as they are.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from rococo_eval.catalog import galleries, gallery_key
from rococo_eval.data.configs import CAPTIONS_CONFIG, IMAGES_CONFIG
from rococo_eval.io.atomic import write_atomic
from rococo_eval.io.scorefiles import parse_json, read_safetensors_header
from rococo_eval.models.similarity import DEFAULT_SIMILARITY, REGISTRY, SIMILARITIES, Similarity, similarity_named
from rococo_eval.results import GalleryResult
from rococo_eval.scoring.galleries import (
    adversarial_captions,
    altered_images,
    ground_truth_captions,
    original_images,
    score_embedding_gallery,
)
from rococo_eval.scoring.plan import ScoringOptions

logger = logging.getLogger(__name__)

FORMAT = "rococo-embeddings"
VERSION = "1"
IMAGES, CAPTIONS = "images/original", "captions/ground_truth"
_NORM_TOLERANCE = 1e-3


def item_sets(source, attacks) -> dict:
    """The item sets of ``attacks`` (and the clean ones) by their names in the file."""
    sets = [original_images(source), ground_truth_captions(source)]
    sets += [adversarial_captions(source, attack) if attack in source.text_attacks else altered_images(source, attack)
             for attack in attacks]
    return {items.name: items for items in sets}


def write_embeddings_file(path, vectors: Mapping[str, np.ndarray], fingerprints: Mapping[str, str],
                          model_name: str, similarity: str | Similarity = DEFAULT_SIMILARITY) -> Path:
    """Write ``vectors`` (``{item set name: rows}``, scored by ``similarity``, a name or a
    :class:`~rococo_eval.models.similarity.Similarity`) to ``path`` with the metadata above, atomically."""
    from safetensors.numpy import save

    similarity = similarity_named(similarity, repr(model_name))
    arrays = {name: np.ascontiguousarray(rows, dtype=np.float32) for name, rows in vectors.items()}
    dimensions = {rows.shape[1] for rows in arrays.values()}
    if len(dimensions) != 1:
        raise ValueError(f"the item sets' embeddings have different widths {sorted(dimensions)}")
    normalized = all(np.allclose(np.linalg.norm(rows, axis=1), 1, atol=_NORM_TOLERANCE) for rows in arrays.values())
    metadata = {"format": FORMAT, "version": VERSION, "model": model_name, "dimension": str(dimensions.pop()),
                "normalized": "true" if normalized else "false", "similarity": similarity.name,
                "fingerprints": json.dumps({name: fingerprints[name] for name in arrays}, sort_keys=True)}
    data = save(arrays, metadata=metadata)
    return write_atomic(Path(path), lambda handle: handle.write(data))


def item_set_of_rows(source, config: str, split: str) -> str:
    """The item set whose rows are those of ``load_dataset(..., config, split=split)``, in the same order.

    The query configs' ``test`` splits and the attacks' ``original`` splits hold the clean item sets; an attack's
    ``adversarial`` split holds its own (row ``i`` of an image attack's is the altered copy of test image ``i``;
    the dataset stores the same JPEG bytes that ``run`` decodes).

    Example:
        >>> from rococo_eval.data.source import RococoSource
        >>> source = RococoSource()
        >>> item_set_of_rows(source, "images", "test"), item_set_of_rows(source, "rand_voca", "adversarial")
        ('images/original', 'captions/rand_voca')
        >>> item_set_of_rows(source, "rand_voca", "test")
        Traceback (most recent call last):
        ...
        ValueError: `vectors` key ('rand_voca', 'test') is not a split of the dataset: give (config, split) as load_dataset takes them: ('images', 'test'), ('captions', 'test'), or (ATTACK, 'original' or 'adversarial') with ATTACK one of same_concept, diff_concept, rand_voca, danger, mix_seed1, mix_seed10, mix_seed100, patch_seed1, patch_seed10, patch_seed100
    """
    text, image = tuple(source.text_attacks), tuple(source.image_attacks)
    if (config, split) == (IMAGES_CONFIG, "test") or (config in image and split == "original"):
        return IMAGES
    if (config, split) == (CAPTIONS_CONFIG, "test") or (config in text and split == "original"):
        return CAPTIONS
    if config in text + image and split == "adversarial":
        return expected_name(source, config)
    raise ValueError(f"`vectors` key {(config, split)!r} is not a split of the dataset: give (config, split) as "
                     f"load_dataset takes them: ({IMAGES_CONFIG!r}, 'test'), ({CAPTIONS_CONFIG!r}, 'test'), or "
                     f"(ATTACK, 'original' or 'adversarial') with ATTACK one of {', '.join(text + image)}")


def write_embeddings_from_rows(path, vectors: Mapping[tuple[str, str], np.ndarray], source,
                               model_name: str, similarity: str = DEFAULT_SIMILARITY) -> Path:
    """Write an embeddings file from a user's own embeddings of the dataset's rows.

    Args:
        path: the ``.safetensors`` file to write (atomically).
        vectors: ``{(config, split): rows}``, one row per row of ``load_dataset(..., config, split=split)``, in its
            order: ``("images", "test")`` and ``("captions", "test")`` (every gallery needs them), and each attack's
            ``(attack, "adversarial")``. An attack's ``original`` split may stand for the query config it repeats.
        source: the benchmark the rows are of (a :class:`~rococo_eval.data.source.Source` with its images, e.g.
            RoCOCO's with the COCO test images: the image sets' fingerprints read the image files).
        model_name: the model's name, as the report will give it.
        similarity: how the model scores (:mod:`rococo_eval.models.similarity`); for ``csd`` each value of
            ``vectors`` is a pair ``(means, log_sigmas)``.

    The rows are made as ``run`` makes a custom model's (:meth:`~rococo_eval.models.similarity.Similarity.rows`: for
    ``cosine``, float32 rows of unit length), so the file scores to ``run``'s results for the same embeddings.

    Raises:
        ValueError: a key that is no split, two keys for one item set, a clean item set missing, or rows that are
            not one 2-D float row per item (each names its key and the expected count).

    Example (one model's embeddings of the exported or Hub dataset)::

        rows = {(config, split): encode(load_dataset(REPO, config, split=split))
                for config, split in [("images", "test"), ("captions", "test"), ("rand_voca", "adversarial")]}
        write_embeddings_from_rows("model.safetensors", rows, RococoSource(images_dir=COCO), "my-model")
    """
    if source.images_dir is None:
        raise ValueError("`source` has no images: the image sets' fingerprints read the COCO test images "
                         "(RococoSource(images_dir=...))")
    similarity = similarity_named(similarity, repr(model_name))
    named, given = {}, {}
    for key, rows in vectors.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise ValueError(f"`vectors` keys are (config, split) pairs as load_dataset takes them, got {key!r}")
        name = item_set_of_rows(source, *key)
        if name in named:
            raise ValueError(f"`vectors` keys {given[name]!r} and {key!r} both hold {name!r}: give one")
        named[name], given[name] = _as_arrays(rows, similarity), key
    for name, key in ((IMAGES, (IMAGES_CONFIG, "test")), (CAPTIONS, (CAPTIONS_CONFIG, "test"))):
        if name not in named:
            raise ValueError(f"`vectors` lacks {key!r}: every gallery needs the test images and the ground-truth "
                             "captions")
    attacks = [attack for attack in tuple(source.text_attacks) + tuple(source.image_attacks)
               if expected_name(source, attack) in named]
    sets = item_sets(source, attacks)
    for name, arrays in named.items():
        for rows in arrays:
            if rows.ndim != 2 or rows.shape[0] != len(sets[name]) or rows.dtype.kind not in "fiu":
                raise ValueError(f"`vectors[{given[name]!r}]` must be {len(sets[name])} rows of numbers, one per row "
                                 f"of load_dataset(..., {given[name][0]!r}, split={given[name][1]!r}), got "
                                 f"{rows.dtype} of shape {rows.shape}")
            if not np.isfinite(rows).all():
                raise ValueError(f"`vectors[{given[name]!r}]` holds non-finite values (NaN or infinity)")
        side = "image" if name.startswith("images/") else "text"  # as run makes a model's output into rows
        named[name] = similarity.rows(side, similarity.joined(arrays), model_name, f"vectors[{given[name]!r}]")
    return write_embeddings_file(path, named, {name: sets[name].fingerprint for name in named}, model_name,
                                 similarity)


def _as_arrays(rows, similarity: Similarity) -> tuple:
    """The array(s) of one value of ``vectors``: one, or one per part of ``similarity`` (``csd``: the pair
    ``(means, log_sigmas)``); torch tensors (any dtype, on any device, with or without grad) as NumPy arrays."""
    values = similarity.split(rows, "each value of `vectors`")
    return tuple(np.asarray(value.detach().float().cpu().numpy() if hasattr(value, "detach") else value)
                 for value in values)


def is_embeddings_file(path) -> bool:
    """Whether ``path`` is a ``.safetensors`` file whose metadata says it holds RoCOCO embeddings."""
    path = Path(path)
    if path.suffix != ".safetensors" or not path.is_file():
        return False
    return _metadata(path).get("format") == FORMAT


def read_embeddings_file(path, source) -> tuple[dict[str, np.ndarray], dict, tuple[str, ...]]:
    """The file's vectors by item set, its metadata (with its ``similarity``, ``cosine`` when the file predates it),
    and the attacks it covers, each checked against ``source``.

    Raises:
        ValueError: an unknown item set, a missing clean one, a fingerprint or a row count that is not
            ``source``'s, a width other than ``dimension``, or non-finite values (each names the item set).
    """
    from safetensors.numpy import load_file

    path = Path(path)
    if source.images_dir is None:
        raise ValueError(f"{str(path)!r} is an embeddings file, and its image sets are checked against the images: "
                         "give the COCO test images (--images-dir) or a benchmark whose images are at hand")
    metadata = _metadata(path)
    if metadata.get("format") != FORMAT or metadata.get("version") != VERSION:
        raise ValueError(f"{str(path)!r} is not a RoCOCO embeddings file of version {VERSION} (its metadata has "
                         f"format {metadata.get('format')!r}, version {metadata.get('version')!r})")
    vectors = load_file(str(path))
    attacks = tuple(source.text_attacks) + tuple(source.image_attacks)
    expected = item_sets(source, attacks)
    unknown = sorted(set(vectors) - set(expected))
    if unknown:
        raise ValueError(f"{str(path)!r} holds the unknown item set {unknown[0]!r}; known: {', '.join(expected)}")
    for name in (IMAGES, CAPTIONS):
        if name not in vectors:
            raise ValueError(f"{str(path)!r} lacks {name!r}: every gallery needs the test images and the "
                             "ground-truth captions")
    similarity = metadata.setdefault("similarity", DEFAULT_SIMILARITY)  # files written before it existed: cosine
    if similarity not in SIMILARITIES:
        raise ValueError(f"{str(path)!r}: its metadata's `similarity` must be one of {SIMILARITIES}, got "
                         f"{similarity!r}")
    try:
        fingerprints = parse_json((metadata.get("fingerprints") or "{}").encode(), "fingerprints", 1)
    except ValueError as error:
        raise ValueError(f"{str(path)!r}: its metadata's {error}") from None
    if not isinstance(fingerprints, dict):
        raise ValueError(f"{str(path)!r}: its metadata's `fingerprints` is not a JSON object")
    dimension = int(metadata.get("dimension", -1))
    for name, rows in vectors.items():
        items = expected[name]
        if fingerprints.get(name) != items.fingerprint:
            raise ValueError(f"{str(path)!r}: {name!r} was made for other data (its fingerprint "
                             f"{str(fingerprints.get(name))[:16]} is not this benchmark's {items.fingerprint[:16]}): "
                             "other captions, images or attacks")
        if rows.ndim != 2 or rows.shape[0] != len(items) or rows.shape[1] != dimension:
            raise ValueError(f"{str(path)!r}: {name!r} has shape {rows.shape}, not ({len(items)}, {dimension}): "
                             f"{len(items)} rows, one per item in the benchmark's order, of the file's dimension")
        if not np.isfinite(rows).all():
            raise ValueError(f"{str(path)!r}: {name!r} holds non-finite values (NaN or infinity)")
        norms = np.linalg.norm(rows.astype(np.float32), axis=1, keepdims=True)
        if REGISTRY[similarity].unit_rows and not np.allclose(norms, 1, atol=_NORM_TOLERANCE):
            logger.warning("%s: %s has rows not of unit length (norms %.3g to %.3g): normalised, so that scores are "
                           "cosine similarities", path, name, norms.min(), norms.max())
            vectors[name] = (rows / np.maximum(norms, 1e-12)).astype(np.float32)
        else:
            vectors[name] = rows.astype(np.float32)
    covered = tuple(attack for attack in attacks if expected_name(source, attack) in vectors)
    return vectors, metadata, covered


def expected_name(source, attack: str) -> str:
    """The item set name of ``attack`` in a file: ``captions/<attack>`` or ``images/<attack>``."""
    return f"captions/{attack}" if attack in source.text_attacks else f"images/{attack}"


def score_embeddings(vectors: Mapping[str, np.ndarray], source, attacks, similarity: str | Similarity,
                     **metric_kwargs) -> dict[str, GalleryResult]:
    """Both clean galleries and each attack's, scored from the item sets' vectors by ``similarity`` (a name, as the
    file's metadata says it, or a :class:`~rococo_eval.models.similarity.Similarity`) exactly as ``run`` scores a dual encoder
    (:func:`~rococo_eval.scoring.galleries.score_embedding_gallery`, with per-query arrays); ``metric_kwargs``
    (``ties``, ``bootstrap``, ...) go to the metric."""
    named = {"images": vectors[IMAGES], "captions": vectors[CAPTIONS],
             **{attack: vectors[expected_name(source, attack)] for attack in attacks}}
    similarity, results = similarity_named(similarity), {}
    for attack, direction in galleries(attacks):
        key = gallery_key(attack, direction)
        results[key] = score_embedding_gallery(source, attack, direction, named, similarity, **metric_kwargs)
        logger.info("%s: R@1 %.2f", key, results[key].metrics["recall@1"])
    return results


def score_embeddings_file(paths: Sequence, source, options: ScoringOptions = ScoringOptions(),
                          name: str = "") -> tuple[dict[str, GalleryResult], dict, dict]:
    """The one path of an embeddings file given to ``rococo-eval score`` or uploaded to the Space: every gallery it
    covers scored as ``run`` scores it (:func:`score_embeddings`), and what the report records of it.

    Args:
        paths: the files given; an embeddings file must come alone.
        source: the benchmark whose items the file holds (with its images, whose fingerprints the file's must match).
        options: how the metric ranks (:class:`~rococo_eval.scoring.plan.ScoringOptions`).
        name: how the report names the file (default: its path as given).

    Returns:
        ``(results, meta, metadata)``: the results by gallery key, the report's ``meta`` and the file's metadata.
    """
    if len(paths) != 1:
        raise ValueError("an embeddings file holds every gallery a report needs: give it alone, without score files")
    vectors, metadata, attacks = read_embeddings_file(paths[0], source)
    results = score_embeddings(vectors, source, attacks, metadata["similarity"], ties=options.ties,
                               bootstrap=options.bootstrap)
    meta = {"model": metadata.get("model"), "similarity": metadata["similarity"],
            "embeddings_file": name or str(paths[0]), "attacks": list(attacks), **options.report_entries()}
    return results, meta, metadata


def _metadata(path: Path) -> dict:
    """The ``__metadata__`` of a safetensors header, read within its bounds
    (:func:`~rococo_eval.io.scorefiles.read_safetensors_header`) and without the tensors; ``{}`` for a file that has
    none, or no readable header."""
    try:
        return read_safetensors_header(path)[1]
    except ValueError:
        return {}
