"""Gallery layouts: what the metric takes for each gallery of an image-text set, computed in one place.

This module owns the facts about galleries: their shapes, their two orders, which items are correct and which
are adversarial (the attacks' names are :mod:`rococo_eval.catalog`'s). :mod:`rococo_eval.detection` reads a
layout back from a score matrix's shape, file name and scores.

An image-text set is described by its number of captions per image (one count per image, in image order) and,
for a text attack, its number of adversarial captions per image. RoCOCO on the COCO 5K test split is one
instance: 5,000 images with 5 or 6 captions each, ``ADVERSARIAL_PER_IMAGE`` (5) adversarial captions per image
for each text attack, and one altered copy of each image for each image attack.

A layout fixes, for one direction of one gallery, the order of the queries and of the gallery, which gallery
items are correct for each query (``references``) and which are adversarial (``adversarial``). Two gallery
orders exist:

- ``"official"``: the order of the official ``itm_eval``. Image-to-text: for each image its ground-truth
  captions, then its adversarial ones (in RoCOCO image 0 -> 0..4 and 5..9; image 83, which has 6 captions,
  -> 830..835 and 836..840). Text-to-image: the original images, then their altered copies.
- ``"dataset"``: the order of the exported dataset's splits, the ``original`` split then the
  ``adversarial`` split, each in its own row order.

The two orders differ only for an attacked image-to-text gallery: there ``order`` has no default (a matrix
scored in the wrong order gives a recall near 0 with no error); elsewhere ``order=None`` gives the one order.

Gallery items are named by ``gallery_rows``: the row of the item in the concatenation of the dataset's
``original`` and ``adversarial`` splits. Two layouts of one gallery therefore convert scores into each other
with :func:`reorder_gallery`.

Example:
    >>> layout = image_to_text_layout([5, 6, 5], attacked=True, order="official")
    >>> layout.num_queries, layout.num_gallery, layout.num_adversarial
    (3, 31, 15)
    >>> layout.references[1]
    (10, 11, 12, 13, 14, 15)
    >>> layout.gallery_rows[5:12].tolist()  # image 0's adversarial captions, its 5
    [16, 17, 18, 19, 20, 5, 6]
    >>> other = image_to_text_layout([1, 3], order="dataset",
    ...                              adversarial_per_image=2)
    >>> other.num_gallery
    8
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rococo_eval.catalog import (
    ATTACKS,
    CLEAN,
    DIRECTIONS,
    IMAGE_TO_TEXT,
    TEXT_TO_IMAGE,
    attack_direction,
    check_direction,
)

ORDERS = ("official", "dataset")
ADVERSARIAL_PER_IMAGE = 5  # RoCOCO's text attacks: 5 adversarial captions per image

logger = logging.getLogger(__name__)
_GALLERY_CHUNK_BYTES = 2 << 20


@dataclass(frozen=True, eq=False)
class GalleryLayout:
    """The queries, gallery, ground truth and adversarial mask of one gallery.

    Attributes:
        direction: ``"image_to_text"`` or ``"text_to_image"``.
        order: ``"official"`` or ``"dataset"``.
        references: for each query, the gallery positions that are correct.
        adversarial: boolean mask over the gallery, True for altered items.
        gallery_rows: for each gallery position, its row in the dataset's ``original`` split followed by its
            ``adversarial`` split (the order-independent name of the item).
    """

    direction: str
    order: str
    references: tuple[tuple[int, ...], ...]
    adversarial: np.ndarray
    gallery_rows: np.ndarray

    @property
    def num_queries(self) -> int:
        return len(self.references)

    @property
    def num_gallery(self) -> int:
        return len(self.adversarial)

    @property
    def num_adversarial(self) -> int:
        return int(self.adversarial.sum())

    def metric_inputs(self) -> dict:
        """Return the keyword arguments the metric takes besides the scores.

        Example:
            >>> sorted(text_to_image_layout(2).metric_inputs())
            ['adversarial', 'references']
        """
        return {"references": [list(r) for r in self.references], "adversarial": self.adversarial}


def recall_cutoffs(num_gallery: int, name: str = "the gallery") -> tuple[int, ...]:
    """The metric's default Recall@K cut-offs (1, 5, 10) that a gallery of ``num_gallery`` items allows: a gallery
    of fewer than ten (a small generated benchmark) is scored at those up to its size, with a warning naming it
    ``name``. ``run``, ``score`` and the Space score every gallery at these.

    Example:
        >>> recall_cutoffs(25010), recall_cutoffs(6, "clean/text_to_image")
        ((1, 5, 10), (1, 5))
    """
    from rococo_recall import DEFAULT_K

    cutoffs = tuple(k for k in DEFAULT_K if k <= num_gallery)
    if cutoffs != DEFAULT_K:
        logger.warning("%s has %d items: Recall@K for K in %s only (its r_mean is their mean)", name, num_gallery,
                       ", ".join(map(str, cutoffs)))
    return cutoffs


def gallery_vectors(pool: Sequence[np.ndarray], rows: np.ndarray) -> np.ndarray:
    """``np.concatenate(pool)[rows]`` in one copy: the gallery's embeddings in its order, from the originals'
    and the adversarial items' embeddings (a gallery is up to 50,010 rows; BLIP-2's rows are 8,192 wide).

    Example:
        >>> gallery_vectors([np.array([[0.0], [1.0]]), np.array([[2.0]])], np.array([2, 0, 1])).ravel().tolist()
        [2.0, 0.0, 1.0]
    """
    rows = np.asarray(rows)
    offsets = np.cumsum([0] + [len(part) for part in pool])
    if len(rows) and (rows.min() < 0 or rows.max() >= offsets[-1]):
        raise IndexError(f"gallery rows must be in [0, {offsets[-1]}), got {rows.min()}..{rows.max()}")
    if len(pool) == 1:
        return np.take(pool[0], rows, axis=0)
    out = np.empty((len(rows),) + pool[0].shape[1:], dtype=np.result_type(*pool))
    step = max(1, _GALLERY_CHUNK_BYTES // max(1, out[:1].nbytes))  # rows at a time: the temporaries stay small
    for begin in range(0, len(rows), step):
        chunk, target = rows[begin:begin + step], out[begin:begin + step]
        for part, offset in zip(pool, offsets):
            inside = (chunk >= offset) & (chunk < offset + len(part))
            target[inside] = part[chunk[inside] - offset]
    return out


def caption_offsets(captions_per_image) -> np.ndarray:
    """Return the index of each image's first ground-truth caption, and the total, as one array.

    Example:
        >>> caption_offsets([5, 6, 5]).tolist()
        [0, 5, 11, 16]
    """
    counts = np.asarray(captions_per_image, dtype=np.int64)
    if counts.ndim != 1 or len(counts) == 0 or (counts < 1).any():
        raise ValueError(f"`captions_per_image` must be a non-empty list of positive ints, got {captions_per_image!r}")
    return np.concatenate([[0], np.cumsum(counts)])


def describe_orders(adversarial_per_image: int = ADVERSARIAL_PER_IMAGE) -> str:
    """The two orders of an attacked image-to-text gallery in words, for messages that ask for one.

    Example:
        >>> print(describe_orders(2))  # doctest: +NORMALIZE_WHITESPACE
        official (each image's captions, then its 2 altered ones)
        or dataset (all ground-truth captions, then all altered ones)
    """
    return (f"official (each image's captions, then its {adversarial_per_image} altered ones) or dataset "
            "(all ground-truth captions, then all altered ones)")


def image_to_text_layout(captions_per_image, attacked: bool = True, order: str | None = None, *,
                         adversarial_per_image: int = ADVERSARIAL_PER_IMAGE) -> GalleryLayout:
    """Layout of an image-to-text gallery: the images are the queries, the captions the gallery.

    Args:
        captions_per_image: number of ground-truth captions of each image (5 or 6 in RoCOCO).
        attacked: add the adversarial captions of each image (a text attack); False gives the clean gallery.
        order: ``"official"`` or ``"dataset"`` (see the module docstring); required when ``attacked``, where
            the two orders differ. None gives the one order of a clean gallery.
        adversarial_per_image: number of adversarial captions of each image in an attacked gallery.

    Raises:
        ValueError: ``order`` is None for an attacked gallery, or an argument is not one of its values.

    Example:
        >>> clean = image_to_text_layout([5, 6], attacked=False)
        >>> clean.references, clean.num_adversarial
        (((0, 1, 2, 3, 4), (5, 6, 7, 8, 9, 10)), 0)
        >>> image_to_text_layout([5, 6], order="dataset").references[1]
        (5, 6, 7, 8, 9, 10)
        >>> image_to_text_layout([1, 2], order="official", adversarial_per_image=2).adversarial.tolist()
        [False, True, True, False, False, True, True]
        >>> image_to_text_layout([5, 6])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `order` is required for an attacked image-to-text gallery, where the two orders differ: ...
    """
    _check_adversarial_per_image(adversarial_per_image)
    order = _check_order(order, attacked, adversarial_per_image)
    offsets = caption_offsets(captions_per_image)
    num_images, num_gt = len(offsets) - 1, int(offsets[-1])
    references = tuple(tuple(range(offsets[i], offsets[i + 1])) for i in range(num_images))
    if not attacked:
        return GalleryLayout(IMAGE_TO_TEXT, order, references, np.zeros(num_gt, dtype=bool),
                             np.arange(num_gt, dtype=np.int64))
    num_adv = adversarial_per_image * num_images
    if order == "dataset":
        adversarial = np.zeros(num_gt + num_adv, dtype=bool)
        adversarial[num_gt:] = True
        return GalleryLayout(IMAGE_TO_TEXT, order, references, adversarial,
                             np.arange(num_gt + num_adv, dtype=np.int64))
    rows, references, adversarial = [], [], []
    for i in range(num_images):
        start = len(rows)
        rows.extend(range(offsets[i], offsets[i + 1]))
        references.append(tuple(range(start, len(rows))))
        rows.extend(num_gt + adversarial_per_image * i + j for j in range(adversarial_per_image))
        adversarial.extend([False] * (offsets[i + 1] - offsets[i]) + [True] * adversarial_per_image)
    return GalleryLayout(IMAGE_TO_TEXT, order, tuple(references), np.array(adversarial, dtype=bool),
                         np.array(rows, dtype=np.int64))


def text_to_image_layout(captions_per_image, attacked: bool = True, order: str | None = None) -> GalleryLayout:
    """Layout of a text-to-image gallery: the ground-truth captions are the queries, the images the gallery.

    The only hit of a caption is its own original image; the altered copy of that image is a miss.
    Both orders put the originals first, so they coincide, and None gives that one order.

    Args:
        captions_per_image: number of ground-truth captions of each image, or the number of images as an int
            when only the images matter.
        attacked: add the altered copy of each image (an image attack); False gives the clean gallery.
        order: ``"official"``, ``"dataset"`` or None (the same gallery).

    Example:
        >>> layout = text_to_image_layout([2, 1])
        >>> layout.references, layout.adversarial.tolist()
        (((0,), (0,), (1,)), [False, False, True, True])
    """
    order = _check_order(order, False)
    if isinstance(captions_per_image, (int, np.integer)):
        captions_per_image = [1] * int(captions_per_image)
    offsets = caption_offsets(captions_per_image)
    num_images = len(offsets) - 1
    image_of_caption = np.repeat(np.arange(num_images), np.diff(offsets))
    references = tuple((int(i),) for i in image_of_caption)
    size = 2 * num_images if attacked else num_images
    adversarial = np.arange(size) >= num_images
    return GalleryLayout(TEXT_TO_IMAGE, order, references, adversarial, np.arange(size, dtype=np.int64))


def reorder_gallery(scores, from_layout: GalleryLayout, to_layout: GalleryLayout):
    """Reorder the gallery columns of ``scores`` from ``from_layout``'s order to ``to_layout``'s.

    Example:
        >>> official = image_to_text_layout([5, 5], order="official")
        >>> dataset = image_to_text_layout([5, 5], order="dataset")
        >>> scores = np.arange(20.0)[None, :]
        >>> reorder_gallery(reorder_gallery(scores, official, dataset), dataset, official).tolist() == scores.tolist()
        True
    """
    if from_layout.num_gallery != to_layout.num_gallery or from_layout.direction != to_layout.direction:
        raise ValueError("`from_layout` and `to_layout` must be two orders of the same gallery")
    position_of_row = np.empty(from_layout.num_gallery, dtype=np.int64)
    position_of_row[from_layout.gallery_rows] = np.arange(from_layout.num_gallery)
    return scores[:, position_of_row[to_layout.gallery_rows]]


def _check_order(order: str | None, orders_differ: bool, adversarial_per_image: int = ADVERSARIAL_PER_IMAGE,
                 attack: str | None = None) -> str:
    """``order``, checked; None is the one order of a gallery whose two orders coincide, never a guess.
    The message names ``attack`` when it is known."""
    if order is None:
        if orders_differ:
            gallery = "" if attack is None else f" for the gallery of {attack}"
            raise ValueError("`order` is required for an attacked image-to-text gallery, where the two orders "
                             f"differ: choose {describe_orders(adversarial_per_image)}{gallery}")
        return "official"
    if order not in ORDERS:
        raise ValueError(f"`order` must be one of {ORDERS}, got {order!r}")
    return order


def _check_adversarial_per_image(adversarial_per_image) -> None:
    if not isinstance(adversarial_per_image, (int, np.integer)) or isinstance(adversarial_per_image, bool) \
            or adversarial_per_image < 1:
        raise ValueError(f"`adversarial_per_image` must be a positive int, got {adversarial_per_image!r}")


def gallery_layout(attack: str, direction: str, captions_per_image, order: str | None = None, *,
                   adversarial_per_image: int = ADVERSARIAL_PER_IMAGE) -> GalleryLayout:
    """The layout of one gallery: ``attack`` is ``"clean"`` or a RoCOCO attack scored in ``direction``.

    ``order`` is required for an attacked image-to-text gallery, where the two orders differ; None gives the
    one order of the others.

    Example:
        >>> gallery_layout("danger", "image_to_text", [5, 6], order="dataset").num_gallery
        21
        >>> gallery_layout("clean", "text_to_image", [5, 6]).num_gallery
        2
        >>> gallery_layout("danger", "image_to_text", [1, 3], "official", adversarial_per_image=2).num_gallery
        8
        >>> gallery_layout("rand_voca", "image_to_text", [5, 6])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `order` is required for an attacked image-to-text gallery, ...) for the gallery of rand_voca
    """
    direction = check_direction(attack, direction)
    attacked = attack != CLEAN
    order = _check_order(order, attacked and direction == IMAGE_TO_TEXT, adversarial_per_image, attack)
    if direction == IMAGE_TO_TEXT:
        return image_to_text_layout(captions_per_image, attacked=attacked, order=order,
                                    adversarial_per_image=adversarial_per_image)
    return text_to_image_layout(captions_per_image, attacked=attacked, order=order)


def gallery_shape(attack: str, direction: str, captions_per_image, *,
                  adversarial_per_image: int = ADVERSARIAL_PER_IMAGE) -> tuple[int, int]:
    """The (queries, gallery) shape of a score matrix for one gallery, without building its layout.

    Example:
        >>> gallery_shape("rand_voca", "image_to_text", [5] * 4990 + [6] * 10)
        (5000, 50010)
        >>> gallery_shape("rand_voca", "image_to_text", [1, 3, 2, 3], adversarial_per_image=2)
        (4, 17)
    """
    _check_adversarial_per_image(adversarial_per_image)
    num_images, num_captions = len(captions_per_image), int(sum(captions_per_image))
    attacked = attack != CLEAN
    if attacked and attack_direction(attack) != direction:
        raise ValueError(f"attack {attack!r} is scored {attack_direction(attack)}, not {direction}")
    if direction == IMAGE_TO_TEXT:
        return num_images, num_captions + attacked * adversarial_per_image * num_images
    return num_captions, num_images * (2 if attacked else 1)


def matching_galleries(shape, captions_per_image, *, adversarial_per_image: int = ADVERSARIAL_PER_IMAGE,
                       attacks=ATTACKS) -> list[tuple[str, str]]:
    """Every (attack, direction) whose score matrix has ``shape``, among ``attacks`` (RoCOCO's, or a generated
    benchmark's); attacks of one direction share a shape.

    Example:
        >>> matching_galleries((3, 16), [5, 6, 5])
        [('clean', 'image_to_text')]
        >>> [attack for attack, _ in matching_galleries((16, 6), [5, 6, 5])][:3]
        ['mix_seed1', 'mix_seed10', 'mix_seed100']
    """
    shape = tuple(int(n) for n in shape)
    return [(attack, direction) for direction in DIRECTIONS for attack in (CLEAN,) + tuple(attacks)
            if (attack == CLEAN or attack_direction(attack) == direction)
            and gallery_shape(attack, direction, captions_per_image,
                              adversarial_per_image=adversarial_per_image) == shape]
