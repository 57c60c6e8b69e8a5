"""The Space's example: score files of a synthetic model, made in a second from the source's own layouts.

Nothing here is a real model. :func:`write_example` writes, for a few of the source's galleries (both clean ones,
two text attacks, one image attack of each method), the output of a made-up re-ranker: for each query its correct
items, 20 other items and, in an attacked gallery, its own adversarial items, with seeded random scores in which the
correct items get a planted lead and each adversarial item follows the score of the item it was made from. Every other
item gets the fill score, below all of them. So each file is a compact score file
(:data:`rococo_eval.io.scorefiles.TOP_K_KEYS`) of a few MB, scored as the full matrix it stands for, and every output
of the page has something to show: results, the chart, flipped queries, the by-word and by-method tables, Compare.

The same seed gives the same files. The clean part of every attacked gallery holds the clean gallery's candidates with
the same scores, as a real model's files would: its clean R@1 equals the clean gallery's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rococo_eval.catalog import CLEAN, IMAGE_ATTACK_METHODS, IMAGE_TO_TEXT, TEXT_TO_IMAGE, parse_image_attack
from rococo_eval.data.facts import GalleryFacts
from rococo_eval.layout import GalleryLayout, caption_offsets

if TYPE_CHECKING:
    from rococo_eval.data.source import Source

SYNTHETIC_MODEL = "synthetic demo model — not a real model"
EXAMPLE_INTRO = (f"**The synthetic example: a {SYNTHETIC_MODEL}.** Its scores are seeded random numbers with a planted "
                 "signal, made for this page in a second: each query's correct items lead, and each adversarial item "
                 "follows the item it was made from. Each file lists every query's top candidates (a compact score "
                 "file, a few MB); your own files can be whole score matrices. Nothing here measures a real model, "
                 "and the leaderboard does not take it.")
EXAMPLE_SEED = 0
OTHER_CANDIDATES = 20  # listed items per query besides its correct and adversarial ones
FILL = -100.0  # the score of every item not listed (a re-ranker's convention, as BLIP's)
# The planted lead of a correct item over unit-normal noise (image-to-text R@1 about 80%, text-to-image about 55%),
# and for each attack in turn the gap between an adversarial item and the item it was made from, and its noise.
_LEAD = {IMAGE_TO_TEXT: 1.5, TEXT_TO_IMAGE: 2.0}
_ATTACK_PULL = ((0.5, 0.8), (0.0, 0.5))


@dataclass(frozen=True)
class Example:
    """The example's files and what the page needs to score them.

    Attributes:
        files: the compact score files written, one per gallery.
        layouts: one layout row per file, ``[file name, attack, direction, order, note]`` (the layout table's
            :data:`rococo_eval.space.logic.LAYOUT_HEADERS`).
        model: how the results name the model (:data:`SYNTHETIC_MODEL`).
    """

    files: list[Path]
    layouts: list[list[str]]
    model: str = SYNTHETIC_MODEL


def example_galleries(source: Source) -> list[tuple[str, str]]:
    """The ``(attack, direction)`` galleries the example scores: both clean ones, the source's first two text attacks
    and the first seed of each image attack method.

    Example:
        >>> class Source:
        ...     text_attacks = ("same_concept", "diff_concept", "rand_voca")
        ...     image_attacks = ("mix_seed1", "mix_seed10", "patch_seed1")
        >>> example_galleries(Source())  # doctest: +NORMALIZE_WHITESPACE
        [('clean', 'image_to_text'), ('same_concept', 'image_to_text'), ('diff_concept', 'image_to_text'),
         ('clean', 'text_to_image'), ('mix_seed1', 'text_to_image'), ('patch_seed1', 'text_to_image')]
    """
    text = [(attack, IMAGE_TO_TEXT) for attack in list(source.text_attacks)[:2]]
    image = []
    for method in IMAGE_ATTACK_METHODS:
        seeds = [attack for attack in source.image_attacks if (parse_image_attack(attack) or ("",))[0] == method]
        image += [(seeds[0], TEXT_TO_IMAGE)] if seeds else []
    return [(CLEAN, IMAGE_TO_TEXT), *text, (CLEAN, TEXT_TO_IMAGE), *image]


def write_example(facts: GalleryFacts, folder: str | Path, *, seed: int = EXAMPLE_SEED) -> Example:
    """Write the synthetic model's score files for the galleries of the Space's image-text set
    (:func:`example_galleries`) into ``folder``.

    Args:
        facts: the :class:`~rococo_eval.data.facts.GalleryFacts` of the Space's source (RoCOCO's or a generated
            benchmark's): its caption counts and layouts.
        folder: an existing folder for the files.
        seed: the random generator's seed; the same seed writes the same files.

    Returns:
        an :class:`Example`: the files and their layout rows (official order).

    Raises:
        ValueError: the set is not at hand (:data:`~rococo_eval.data.facts.NO_SOURCE`): the galleries' layouts come
            from the annotations.

    Example:
        >>> import tempfile
        >>> from rococo_eval.io.scorefiles import read_header
        >>> class Source:
        ...     captions_per_image, adversarial_per_image = [5] * 30 + [6], 5
        ...     text_attacks, image_attacks = ("rand_voca",), ("mix_seed1",)
        ...     def adversarial_sources(self, attack):
        ...         return [5 * i + j for i in range(31) for j in range(5)]
        ...     def gallery(self, attack, direction=None, order=None):
        ...         from rococo_eval.layout import gallery_layout
        ...         return gallery_layout(attack, direction or "image_to_text", self.captions_per_image, order)
        >>> from rococo_eval.data.facts import GalleryFacts
        >>> example = write_example(GalleryFacts.of(Source()), tempfile.mkdtemp())
        >>> [row[:4] for row in example.layouts][:2]
        [['synthetic_clean_image_to_text.npz', 'clean', 'image_to_text', 'official'], \
['synthetic_rand_voca_image_to_text.npz', 'rand_voca', 'image_to_text', 'official']]
        >>> info = read_header(example.files[1])
        >>> info.shape, info.candidates
        ((31, 311), 31)
    """
    if not facts.has_annotations:
        raise ValueError("the synthetic example scores this Space's galleries, whose layouts come from the RoCOCO "
                         "annotation files, and they are not available here (the note at the top says why): "
                         "custom layouts still work")
    folder, source = Path(folder), facts.source
    galleries = example_galleries(source)
    clean = {direction: _clean_candidates(source.captions_per_image, direction, seed) for direction in
             (IMAGE_TO_TEXT, TEXT_TO_IMAGE)}
    files, layouts, attacked = [], [], {IMAGE_TO_TEXT: 0, TEXT_TO_IMAGE: 0}
    for attack, direction in galleries:
        layout = source.gallery(attack, direction, "official")
        rows, scores = clean[direction]
        if attack != CLEAN:
            pull = _ATTACK_PULL[attacked[direction] % len(_ATTACK_PULL)]
            attacked[direction] += 1
            rows, scores = _with_adversarial(source, attack, direction, rows, scores, pull,
                                             np.random.default_rng([seed, 2, len(files)]))
        path = folder / f"synthetic_{attack}_{direction}.npz"
        np.savez(path, top_columns=_columns_of(layout)[rows].astype(np.int32), top_scores=scores.astype(np.float32),
                 fill=np.float32(FILL), num_gallery=np.int64(layout.num_gallery))
        files.append(path)
        layouts.append([path.name, attack, direction, "official", ""])
    return Example(files, layouts)


def _clean_candidates(captions_per_image, direction: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query's listed clean items, as rows of the source's ``original`` split (captions or images), and their
    scores: its correct items first (with the planted lead), then others of distinct other images."""
    rng = np.random.default_rng([seed, 1 if direction == IMAGE_TO_TEXT else 2])
    counts = np.asarray(captions_per_image)
    offsets = caption_offsets(captions_per_image)
    num_images = len(counts)
    if direction == IMAGE_TO_TEXT:
        query_image, correct, width = np.arange(num_images), counts, int(counts.max()) + OTHER_CANDIDATES
    else:
        query_image, width = np.repeat(np.arange(num_images), counts), 1 + OTHER_CANDIDATES
        correct = np.ones(len(query_image), dtype=np.int64)
    width = min(width, num_images - 1 + int(correct.min()))  # a tiny set has fewer other images
    shifts = rng.choice(num_images - 1, size=width - int(correct.min()), replace=False) + 1
    position = np.arange(width)[None, :]
    own = position < correct[:, None]
    others = (query_image[:, None] + shifts[np.maximum(position - correct[:, None], 0)]) % num_images  # distinct
    if direction == IMAGE_TO_TEXT:
        other_rows = offsets[others] + rng.integers(0, 1 << 30, size=others.shape) % counts[others]
        rows = np.where(own, offsets[query_image][:, None] + position, other_rows)
    else:
        rows = np.where(own, query_image[:, None], others)
    scores = rng.standard_normal(rows.shape) + _LEAD[direction] * own
    return rows, scores


def _with_adversarial(source: Source, attack: str, direction: str, rows: np.ndarray, scores: np.ndarray,
                      pull: tuple[float, float], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The clean candidates followed by each query's own adversarial items (rows of the ``adversarial`` split, after
    the ``original`` one), each scored as the correct item it was made from, less a gap, plus noise."""
    gap, noise = pull
    counts = np.asarray(source.captions_per_image)
    num_images, num_captions = len(counts), int(counts.sum())
    if direction == IMAGE_TO_TEXT:
        per_image = source.adversarial_per_image
        made_from = np.asarray(source.adversarial_sources(attack)).reshape(num_images, per_image)
        within = made_from - caption_offsets(counts)[:-1, None]  # the source caption's place among its image's
        within = np.where((within >= 0) & (within < counts[:, None]), within, 0)
        adversarial_rows = num_captions + np.arange(num_images * per_image).reshape(num_images, per_image)
        base = np.take_along_axis(scores, within, axis=1)
    else:  # each caption's own image, altered
        query_image = np.repeat(np.arange(num_images), counts)
        adversarial_rows = (num_images + query_image)[:, None]
        base = scores[:, :1]
    adversarial_scores = base - gap + noise * rng.standard_normal(base.shape)
    return np.hstack([rows, adversarial_rows]), np.hstack([scores, adversarial_scores])


def _columns_of(layout: GalleryLayout) -> np.ndarray:
    """The gallery column of each row of the ``original`` then ``adversarial`` splits (the inverse of
    ``layout.gallery_rows``)."""
    columns = np.empty(len(layout.gallery_rows), dtype=np.int64)
    columns[layout.gallery_rows] = np.arange(len(layout.gallery_rows))
    return columns
