"""Gallery layouts: what the metric takes for each RoCOCO gallery, computed in one place.

A layout fixes, for one direction of one RoCOCO config, the order of the queries and of the gallery, which
gallery items are correct for each query (``references``) and which are adversarial (``adversarial``).
Two gallery orders exist for every config:

- ``"official"``: the order of the official ``itm_eval``. Image-to-text: for each image its ground-truth
  captions, then its 5 adversarial ones (image 0 -> 0..4 and 5..9; image 83, which has 6 captions,
  -> 830..835 and 836..840). Text-to-image: the 5,000 originals, then their 5,000 altered copies.
- ``"dataset"``: the order of the exported dataset's splits, the ``original`` split then the
  ``adversarial`` split, each in its own row order.

Gallery items are named by ``gallery_rows``: the row of the item in the concatenation of the dataset's
``original`` and ``adversarial`` splits. Two layouts of one config therefore convert scores into each other
with :func:`reorder_gallery`.

Example:
    >>> layout = image_to_text_layout([5, 6, 5], attacked=True)
    >>> layout.num_queries, layout.num_gallery, layout.num_adversarial
    (3, 31, 15)
    >>> layout.references[1]
    (10, 11, 12, 13, 14, 15)
    >>> layout.gallery_rows[5:12].tolist()  # image 0's adversarial captions follow its 5 originals
    [16, 17, 18, 19, 20, 5, 6]
"""

from __future__ import annotations

from dataclasses import dataclass

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
ORDERS = ("official", "dataset")
ADVERSARIAL_PER_IMAGE = 5


@dataclass(frozen=True, eq=False)
class GalleryLayout:
    """The queries, gallery, ground truth and adversarial mask of one RoCOCO gallery.

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


def image_to_text_layout(captions_per_image, attacked: bool = True, order: str = "official") -> GalleryLayout:
    """Layout of an image-to-text gallery: the images are the queries, the captions the gallery.

    Args:
        captions_per_image: number of ground-truth captions of each image (5 or 6 in RoCOCO).
        attacked: add the 5 adversarial captions of each image (a text attack); False gives the clean gallery.
        order: ``"official"`` or ``"dataset"`` (see the module docstring).

    Example:
        >>> clean = image_to_text_layout([5, 6], attacked=False)
        >>> clean.references, clean.num_adversarial
        (((0, 1, 2, 3, 4), (5, 6, 7, 8, 9, 10)), 0)
        >>> image_to_text_layout([5, 6], order="dataset").references[1]
        (5, 6, 7, 8, 9, 10)
    """
    _check_order(order)
    offsets = caption_offsets(captions_per_image)
    num_images, num_gt = len(offsets) - 1, int(offsets[-1])
    if not attacked:
        references = tuple(tuple(range(offsets[i], offsets[i + 1])) for i in range(num_images))
        return GalleryLayout(IMAGE_TO_TEXT, order, references, np.zeros(num_gt, dtype=bool),
                             np.arange(num_gt, dtype=np.int64))
    num_adv = ADVERSARIAL_PER_IMAGE * num_images
    if order == "dataset":
        references = tuple(tuple(range(offsets[i], offsets[i + 1])) for i in range(num_images))
        adversarial = np.zeros(num_gt + num_adv, dtype=bool)
        adversarial[num_gt:] = True
        return GalleryLayout(IMAGE_TO_TEXT, order, references, adversarial,
                             np.arange(num_gt + num_adv, dtype=np.int64))
    rows, references, adversarial = [], [], []
    for i in range(num_images):
        start = len(rows)
        rows.extend(range(offsets[i], offsets[i + 1]))
        references.append(tuple(range(start, len(rows))))
        rows.extend(num_gt + ADVERSARIAL_PER_IMAGE * i + j for j in range(ADVERSARIAL_PER_IMAGE))
        adversarial.extend([False] * (offsets[i + 1] - offsets[i]) + [True] * ADVERSARIAL_PER_IMAGE)
    return GalleryLayout(IMAGE_TO_TEXT, order, tuple(references), np.array(adversarial, dtype=bool),
                         np.array(rows, dtype=np.int64))


def text_to_image_layout(captions_per_image, attacked: bool = True, order: str = "official") -> GalleryLayout:
    """Layout of a text-to-image gallery: the ground-truth captions are the queries, the images the gallery.

    The only hit of a caption is its own original image; the altered copy of that image is a miss.
    Both orders put the originals first, so they coincide.

    Args:
        captions_per_image: number of ground-truth captions of each image, or the number of images as an int
            when only the images matter.
        attacked: add the altered copy of each image (an image attack); False gives the clean gallery.
        order: ``"official"`` or ``"dataset"``.

    Example:
        >>> layout = text_to_image_layout([2, 1])
        >>> layout.references, layout.adversarial.tolist()
        (((0,), (0,), (1,)), [False, False, True, True])
    """
    _check_order(order)
    if isinstance(captions_per_image, (int, np.integer)):
        captions_per_image = [1] * int(captions_per_image)
    offsets = caption_offsets(captions_per_image)
    num_images = len(offsets) - 1
    image_of_caption = np.repeat(np.arange(num_images), np.diff(offsets))
    references = tuple((int(i),) for i in image_of_caption)
    size = 2 * num_images if attacked else num_images
    adversarial = np.arange(size) >= num_images
    return GalleryLayout(TEXT_TO_IMAGE, order, references, adversarial, np.arange(size, dtype=np.int64))


def reorder_gallery(scores, source: GalleryLayout, target: GalleryLayout):
    """Reorder the gallery columns of ``scores`` from ``source``'s order to ``target``'s.

    Example:
        >>> official = image_to_text_layout([5, 5])
        >>> dataset = image_to_text_layout([5, 5], order="dataset")
        >>> scores = np.arange(20.0)[None, :]
        >>> reorder_gallery(reorder_gallery(scores, official, dataset), dataset, official).tolist() == scores.tolist()
        True
    """
    if source.num_gallery != target.num_gallery or source.direction != target.direction:
        raise ValueError("`source` and `target` must be two orders of the same gallery")
    position_of_row = np.empty(source.num_gallery, dtype=np.int64)
    position_of_row[source.gallery_rows] = np.arange(source.num_gallery)
    return scores[:, position_of_row[target.gallery_rows]]


def _check_order(order: str) -> None:
    if order not in ORDERS:
        raise ValueError(f"`order` must be one of {ORDERS}, got {order!r}")


def attack_direction(attack: str) -> str:
    """The direction an attack is scored in: text attacks image-to-text, image attacks text-to-image.

    Example:
        >>> attack_direction("rand_voca"), attack_direction("mix_seed10")
        ('image_to_text', 'text_to_image')
    """
    if attack in TEXT_ATTACKS:
        return IMAGE_TO_TEXT
    if attack in IMAGE_ATTACKS:
        return TEXT_TO_IMAGE
    raise ValueError(f"`attack` must be one of {ATTACKS}, got {attack!r}")


def gallery_layout(attack: str, direction: str, captions_per_image, order: str = "official") -> GalleryLayout:
    """The layout of one RoCOCO gallery: ``attack`` is ``"clean"`` or an attack scored in ``direction``.

    Example:
        >>> gallery_layout("danger", "image_to_text", [5, 6], order="dataset").num_gallery
        21
        >>> gallery_layout("clean", "text_to_image", [5, 6]).num_gallery
        2
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"`direction` must be one of {DIRECTIONS}, got {direction!r}")
    if attack != CLEAN and attack_direction(attack) != direction:
        raise ValueError(f"attack {attack!r} is scored {attack_direction(attack)}, not {direction}")
    build = image_to_text_layout if direction == IMAGE_TO_TEXT else text_to_image_layout
    return build(captions_per_image, attacked=attack != CLEAN, order=order)


def gallery_shape(attack: str, direction: str, captions_per_image) -> tuple[int, int]:
    """The (queries, gallery) shape of a score matrix for one gallery, without building its layout.

    Example:
        >>> gallery_shape("rand_voca", "image_to_text", [5] * 4990 + [6] * 10)
        (5000, 50010)
    """
    num_images, num_captions = len(captions_per_image), int(sum(captions_per_image))
    attacked = attack != CLEAN
    if attacked and attack_direction(attack) != direction:
        raise ValueError(f"attack {attack!r} is scored {attack_direction(attack)}, not {direction}")
    if direction == IMAGE_TO_TEXT:
        return num_images, num_captions + attacked * ADVERSARIAL_PER_IMAGE * num_images
    return num_captions, num_images * (2 if attacked else 1)


def matching_galleries(shape, captions_per_image) -> list[tuple[str, str]]:
    """Every (attack, direction) whose score matrix has ``shape``; attacks of one direction share a shape.

    Example:
        >>> matching_galleries((3, 16), [5, 6, 5])
        [('clean', 'image_to_text')]
        >>> [attack for attack, _ in matching_galleries((16, 6), [5, 6, 5])][:3]
        ['mix_seed1', 'mix_seed10', 'mix_seed100']
    """
    shape = tuple(int(n) for n in shape)
    return [(attack, direction) for direction in DIRECTIONS for attack in (CLEAN,) + ATTACKS
            if (attack == CLEAN or attack_direction(attack) == direction)
            and gallery_shape(attack, direction, captions_per_image) == shape]
