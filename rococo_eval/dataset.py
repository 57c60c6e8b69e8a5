"""RoCOCO's data in one checked place: captions, images, altered images, tables and galleries.

:class:`RococoSource` is one checked copy of the annotation files, plus optionally a COCO image folder.
Everything that needs RoCOCO's data reads it through a source: the ``datasets`` builder
(``rococo_dataset.py``), the Parquet export (:mod:`rococo_eval.export`), the app and the command line.

The dataset has one config per attack and two clean configs that hold the query sets:

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
    >>> source = RococoSource()  # annotations from $ROCOCO_ANNOTATIONS_DIR, else the pinned download
    >>> len(source.ground_truth_captions()), len(source.adversarial_captions("danger"))
    (25010, 25000)
    >>> config_splits("rand_voca")
    {'original': 'captions_original', 'adversarial': 'rand_voca_adversarial'}
    >>> dataset_splits("mix_seed1")
    {'queries': [('captions', 'test')], 'gallery': [('mix_seed1', 'original'), ('mix_seed1', 'adversarial')]}
"""

from __future__ import annotations

import functools
import io
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Iterator

import datasets
from PIL import Image

from .annotations import AnnotationError, read_annotation_file, resolve_annotations_dir
from .captions import find_replacements
from .download import CorruptImageError, default_cache_dir, download_coco_images
from .images import alter_image, encode_jpeg, load_mix_table
from .layout import (
    ADVERSARIAL_PER_IMAGE,
    ATTACKS,
    CLEAN,
    IMAGE_ATTACKS,
    IMAGE_TO_TEXT,
    TEXT_ATTACKS,
    GalleryLayout,
    attack_direction,
    caption_offsets,
    gallery_layout,
)

logger = logging.getLogger(__name__)

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
IMAGE_FEATURES = datasets.Features({
    "image_index": datasets.Value("int32"),
    "file_name": datasets.Value("string"),
    "image": datasets.Image(),
    "is_adversarial": datasets.Value("bool"),
    "partner_index": datasets.Value("int32"),
    "box": [datasets.Value("int32")],
})


class ImageFolderError(ValueError):
    """A COCO image folder lacks test images or is laid out differently (the root must hold ``val2014/``)."""


def check_config(config: str) -> str:
    """Return ``config`` if it names a RoCOCO config, else raise a ValueError listing the configs.

    Example:
        >>> check_config("randvoca")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `config` must be one of ('same_concept', 'diff_concept', 'rand_voca', ..., 'images'), got 'randvoca'
    """
    if config not in CONFIGS:
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
    :meth:`RococoSource.gallery` and :func:`metric_inputs`.

    Args:
        attack: ``"clean"`` or an attack (see :data:`rococo_eval.layout.ATTACKS`).
        direction: ``"image_to_text"`` or ``"text_to_image"``; None means the attack's own direction,
            and is not allowed for ``"clean"``.

    Example:
        >>> dataset_splits("rand_voca")
        {'queries': [('images', 'test')], 'gallery': [('rand_voca', 'original'), ('rand_voca', 'adversarial')]}
        >>> dataset_splits("clean", "image_to_text")
        {'queries': [('images', 'test')], 'gallery': [('captions', 'test')]}
    """
    direction = _direction(attack, direction)
    queries, clean_gallery = ((IMAGES_CONFIG, CAPTIONS_CONFIG) if direction == IMAGE_TO_TEXT
                              else (CAPTIONS_CONFIG, IMAGES_CONFIG))
    if attack == CLEAN:
        return {"queries": [(queries, "test")], "gallery": [(clean_gallery, "test")]}
    return {"queries": [(queries, "test")], "gallery": [(attack, "original"), (attack, "adversarial")]}


def table_features(table: str) -> datasets.Features:
    """The features of one table (see the module docstring for the table names).

    Example:
        >>> list(table_features("mix_seed1_adversarial"))
        ['image_index', 'file_name', 'image', 'is_adversarial', 'partner_index', 'box']
    """
    if table == CAPTIONS_ORIGINAL or table.removesuffix("_adversarial") in TEXT_ATTACKS:
        return CAPTION_FEATURES
    if table == IMAGES_ORIGINAL or table.removesuffix("_adversarial") in IMAGE_ATTACKS:
        return IMAGE_FEATURES
    raise ValueError(f"`table` must be {CAPTIONS_ORIGINAL!r}, {IMAGES_ORIGINAL!r} or '<attack>_adversarial', "
                     f"got {table!r}")


def _direction(attack: str, direction: str | None) -> str:
    if direction is not None:
        return gallery_layout(attack, direction, [1]).direction  # checks both names
    if attack == CLEAN:
        raise ValueError("`direction` is required for the clean gallery: 'image_to_text' or 'text_to_image'")
    return attack_direction(attack)


def _order(attack: str, direction: str, order: str | None) -> str:
    """``order``, which may be left out only where both orders are the same gallery (never guessed)."""
    if order is not None:
        return order
    if attack != CLEAN and direction == IMAGE_TO_TEXT:
        raise ValueError(
            f"`order` is required for the attacked image-to-text gallery of {attack}, where the two orders differ: "
            "'dataset' when the gallery follows the exported splits (original, then adversarial, as "
            "load_queries_and_gallery returns them), 'official' for the official itm_eval order (each image's "
            "captions, then its 5 adversarial ones)"
        )
    return "official"  # a clean or text-to-image gallery: the official and dataset orders coincide


def _image_attack(attack: str) -> tuple[str, int]:
    if attack not in IMAGE_ATTACKS:
        raise ValueError(f"`attack` must be one of the image attacks {IMAGE_ATTACKS}, got {attack!r}")
    method, _, seed = attack.partition("_seed")
    return method, int(seed)


class RococoSource:
    """One checked copy of the annotation files, and optionally a COCO image folder.

    Annotation files are read once per source, each checked against its pinned sha256 and against the clean
    file (same images, same ground-truth captions). The image folder, when given, is checked at once for
    all 5,000 test images; each image is fully decoded when read.

    Args:
        annotations_dir: folder holding the official files; None uses ``$ROCOCO_ANNOTATIONS_DIR``, else
            downloads the pinned files into ``cache_dir`` as they are needed.
        images_dir: the COCO root: the folder holding ``val2014/COCO_val2014_....jpg``. None means no
            images (captions and galleries still work); :func:`fetch_images` fills such a folder.
        cache_dir: cache of downloaded annotation files (default :func:`~rococo_eval.download.default_cache_dir`).

    Attributes:
        captions_per_image: the number of ground-truth captions of each test image (5, or 6 for ten images).
        image_files: the 5,000 test images as ``"val2014/COCO_val2014_....jpg"``, in test order.
        images_dir: the checked COCO root, or None.

    Raises:
        AnnotationError: an annotation file is missing, corrupt or inconsistent with the clean file.
        ImageFolderError: ``images_dir`` lacks some test images; the message names them and what to do.

    Example:
        >>> source = RococoSource()
        >>> source.image_files[0], source.captions_per_image[83], source.images_dir is None
        ('val2014/COCO_val2014_000000391895.jpg', 6, True)
        >>> source.ground_truth_captions()[415]  # image 83's first caption (images 0..82 have 5 each)
        'Muffins and other pastries on display ground and purchase'
        >>> source.adversarial_captions("rand_voca")[5 * 83]  # made from it
        'viewers and other pastries on display ground and purchase'
    """

    def __init__(self, annotations_dir=None, images_dir=None, cache_dir=None):
        self._annotations_dir = annotations_dir
        self._cache_dir = cache_dir
        self._records: dict[str, list[dict]] = {}
        self._layouts: dict[tuple, GalleryLayout] = {}
        clean = self._read(CLEAN)
        self.captions_per_image = [len(record["caption"]) for record in clean]
        self.image_files = [record["image"] for record in clean]
        self.images_dir = None if images_dir is None else _check_images_dir(Path(images_dir), self.image_files)

    def _read(self, name: str) -> list[dict]:
        if name not in self._records:
            records = read_annotation_file(name, self._annotations_dir, cache_dir=self._cache_dir)
            if name != CLEAN:
                _check_against_clean(name, records, self._records[CLEAN])
            self._records[name] = records
        return self._records[name]

    @property
    def num_images(self) -> int:
        return len(self.image_files)

    def ground_truth_captions(self) -> list[str]:
        """The 25,010 ground-truth captions, image by image in file order (the clean file's order)."""
        return [caption for record in self._read(CLEAN) for caption in record["caption"]]

    def adversarial_captions(self, attack: str) -> list[str]:
        """The 25,000 altered captions of text attack ``attack``; row ``5 * i + j`` was made from ground-truth
        caption ``j`` of image ``i``.

        Raises:
            ValueError: ``attack`` is not a text attack.
        """
        if attack not in TEXT_ATTACKS:
            raise ValueError(f"`attack` must be one of the text attacks {TEXT_ATTACKS}, got {attack!r}")
        return [caption for record in self._read(attack) for caption in record["caption"][-ADVERSARIAL_PER_IMAGE:]]

    def file_name(self, index: int) -> str:
        """The COCO ``file_name`` of test image ``index``.

        Example:
            >>> RococoSource().file_name(0)
            'COCO_val2014_000000391895.jpg'
        """
        return PurePosixPath(self.image_files[self._check_index(index)]).name

    def original_image_bytes(self, index: int) -> bytes:
        """The bytes of test image ``index``'s COCO file, checked to decode fully.

        Raises:
            ValueError: the source has no ``images_dir``, or ``index`` is out of range.
            FileNotFoundError: the file disappeared since the folder was checked.
            CorruptImageError: the file cannot be fully decoded; the message says how to fetch it again.
        """
        return self._open_original(index)[0]

    def original_image(self, index: int) -> Image.Image:
        """Test image ``index`` as COCO publishes it, decoded (errors as :meth:`original_image_bytes`).

        Example:
            >>> RococoSource().original_image(0)  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ValueError: this RococoSource has no `images_dir`: pass the COCO root ...fetch_images(source, folder)
        """
        return self._open_original(index)[1]

    def _open_original(self, index: int) -> tuple[bytes, Image.Image]:
        if self.images_dir is None:
            raise ValueError(
                "this RococoSource has no `images_dir`: pass the COCO root holding val2014/ "
                "(RococoSource(images_dir=...)), or download the 5,000 test images with "
                "rococo_eval.dataset.fetch_images(source, folder)"
            )
        path = self.images_dir / self.image_files[self._check_index(index)]
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise FileNotFoundError(
                f"COCO test image {str(path)!r} is missing; fetch it again with "
                f"rococo_eval.dataset.fetch_images(source, {str(self.images_dir)!r})"
            ) from None
        try:
            image = Image.open(io.BytesIO(data))
            image.load()
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
            raise CorruptImageError(
                f"COCO test image {str(path)!r} is not a complete image ({error}); delete it and fetch it again "
                f"with rococo_eval.dataset.fetch_images(source, {str(self.images_dir)!r})"
            ) from error
        return data, image

    def alteration(self, index: int, attack: str) -> tuple[int, tuple[int, int, int, int] | None]:
        """The partner image of ``index``'s altered copy, and for ``patch`` its box ``(row0, row1, col0, col1)``
        in the 384 x 384 image, from the published table (:func:`rococo_eval.images.load_mix_table`).

        Example:
            >>> source = RococoSource()
            >>> partner, box = source.alteration(0, "patch_seed1")
            >>> 0 <= partner < 5000, len(box), source.alteration(0, "mix_seed1") == (partner, None)
            (True, 4, True)
        """
        table = _mix_table(*_image_attack(attack))
        index = self._check_index(index)
        box = None if table.box is None else tuple(int(v) for v in table.box[index])
        return int(table.partner[index]), box

    def altered_image_bytes(self, index: int, attack: str) -> bytes:
        """The altered copy of test image ``index`` under image attack ``attack``, as the official script saves
        it: 384 x 384, JPEG quality 75. The same bytes on every machine with the same PIL and libjpeg.
        """
        partner, box = self.alteration(index, attack)
        method, _ = _image_attack(attack)
        altered = alter_image(self.original_image(index), self.original_image(partner), method, box=box)
        return encode_jpeg(altered)

    def altered_image(self, index: int, attack: str) -> Image.Image:
        """:meth:`altered_image_bytes`, decoded: the image a model sees when it reads the official file."""
        image = Image.open(io.BytesIO(self.altered_image_bytes(index, attack)))
        image.load()
        return image

    def gallery(self, attack: str, direction: str | None = None, order: str | None = None) -> GalleryLayout:
        """The layout of one gallery: queries, ``references``, ``adversarial`` mask and gallery order.

        Args:
            attack: ``"clean"`` or an attack.
            direction: ``"image_to_text"`` or ``"text_to_image"``; None means the attack's own direction
                (required for ``"clean"``).
            order: ``"official"`` (the official ``itm_eval`` order) or ``"dataset"`` (the order of the
                exported splits listed by :func:`dataset_splits`). Required for an attacked image-to-text
                gallery, the one gallery where the two orders differ; elsewhere None gives the one order.

        Example:
            >>> layout = RococoSource().gallery("rand_voca", order="official")
            >>> layout.num_queries, layout.num_gallery, layout.num_adversarial, layout.references[83]
            (5000, 50010, 25000, (830, 831, 832, 833, 834, 835))
            >>> RococoSource().gallery("mix_seed1").num_gallery  # text-to-image: one order
            10000
        """
        direction = _direction(attack, direction)
        order = _order(attack, direction, order)
        key = (attack, direction, order)
        if key not in self._layouts:
            self._layouts[key] = gallery_layout(attack, direction, self.captions_per_image, order)
        return self._layouts[key]

    def _check_index(self, index) -> int:
        if isinstance(index, bool) or not isinstance(index, int) and not hasattr(index, "__index__"):
            raise ValueError(f"`index` must be an int in 0..{self.num_images - 1}, got {index!r}")
        index = int(index)
        if not 0 <= index < self.num_images:
            raise ValueError(f"`index` must be in 0..{self.num_images - 1}, got {index}")
        return index


@functools.lru_cache(maxsize=None)
def _mix_table(method: str, seed: int):
    return load_mix_table(method, seed)


def _check_against_clean(name: str, records: list[dict], clean: list[dict]) -> None:
    for index, (record, reference) in enumerate(zip(records, clean)):
        num_gt = len(record["caption"]) - ADVERSARIAL_PER_IMAGE
        if record["image"] != reference["image"] or record["caption"][:num_gt] != reference["caption"]:
            raise AnnotationError(
                f"annotation file {name!r} disagrees with the clean file at record {index} ({record['image']!r}): "
                f"its first {num_gt} captions must be the clean file's. Use the official files of commit d8ba2a6"
            )


def _check_images_dir(root: Path, image_files: list[str]) -> Path:
    if not root.is_dir():
        raise ImageFolderError(f"`images_dir` {str(root)!r} is not a folder; pass the COCO root holding val2014/")
    missing = [name for name in image_files if not (root / name).is_file()]
    if not missing:
        return root
    shown = ", ".join(repr(str(root / name)) for name in missing[:3])
    advice = _layout_hint(root, missing[0]) or (
        f"Fetch the missing images (resumable, only those missing) with "
        f"rococo_eval.dataset.fetch_images(source, {str(root)!r}), or leave `images_dir` unset (no "
        f"--images-dir) to download them into the cache."
    )
    raise ImageFolderError(
        f"`images_dir` {str(root)!r} lacks {len(missing)} of the {len(image_files)} COCO test images, "
        f"for example {shown}. `images_dir` must be the COCO root: the folder that holds "
        f"val2014/COCO_val2014_....jpg. {advice}"
    )


def _layout_hint(root: Path, relative: str) -> str:
    name = PurePosixPath(relative)
    if (root / name.name).is_file():
        return f"It looks like the val2014 folder itself; pass its parent {str(root.parent)!r}."
    for candidate in sorted(root.glob(f"*/{relative}")):
        return f"The images are one level down; pass {str(candidate.parents[1])!r}."
    return ""


def fetch_images(source=None, dest_root=None, *, base_url=None, workers: int = 8,
                 progress: bool = False) -> Path:
    """Download the 5,000 COCO test images one by one into ``dest_root/val2014/``: parallel, resumable, verified.

    Images already complete are not fetched again and interrupted ones are resumed (see
    :func:`rococo_eval.download.download_coco_images`); the result is a folder to pass as ``images_dir``.

    Args:
        source: a :class:`RococoSource`, or an annotations folder (None: ``$ROCOCO_ANNOTATIONS_DIR`` or the
            pinned download) to read the list of test images from.
        dest_root: the COCO root to fill; None uses ``<cache>/coco`` (see
            :func:`~rococo_eval.download.default_cache_dir`).
        base_url: COCO's image server, or a mirror (``http(s)://``, ``file://`` or a folder) laid out the same;
            None uses ``$ROCOCO_IMAGE_BASE_URL``, else COCO's server.
        workers: parallel downloads.
        progress: show a progress bar.

    Raises:
        DownloadError: some images could not be fetched or verified; it lists them. Run again to retry.

    Example:
        >>> fetch_images(dest_root="coco", workers=0)
        Traceback (most recent call last):
        ...
        ValueError: `workers` has to be a positive integer, got 0
    """
    if not isinstance(source, RococoSource):
        source = RococoSource(source)
    dest_root = Path(dest_root) if dest_root is not None else default_cache_dir() / "coco"
    download_coco_images(source.image_files, dest_root, base_url=base_url, workers=workers, progress=progress)
    return dest_root


def tables_of(configs: Iterable[str]) -> list[str]:
    """The tables the ``configs`` read, each once, in a stable order (originals first).

    Example:
        >>> tables_of(["rand_voca", "images", "mix_seed1"])
        ['captions_original', 'images_original', 'rand_voca_adversarial', 'mix_seed1_adversarial']
    """
    tables = {table: None for config in configs for table in config_splits(config).values()}
    originals = [t for t in (CAPTIONS_ORIGINAL, IMAGES_ORIGINAL) if t in tables]
    return originals + [t for t in tables if t not in originals]


def open_source(configs: Iterable[str], annotations_dir=None, images_dir=None, cache_dir=None, *,
                image_base_url=None, download_workers: int = 8, progress: bool = False) -> RococoSource:
    """A source ready to build ``configs``: every annotation file they read checked, every image they need present.

    Without ``images_dir``, configs with images download the 5,000 test images into ``<cache_dir>/coco``
    (:func:`fetch_images`; complete images are not fetched again). Everything is checked before the first row
    is built, so a bad input stops the build before any output.

    Example:
        >>> source = open_source(["danger", "captions"])
        >>> source.images_dir is None
        True
    """
    tables = tables_of(configs)
    source = RococoSource(annotations_dir, cache_dir=cache_dir)
    for attack in TEXT_ATTACKS:
        if f"{attack}_adversarial" in tables:
            source._read(attack)
    if not any(table_features(table) is IMAGE_FEATURES for table in tables):
        return source
    if images_dir is None:
        cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        logger.info("no images_dir: fetching the COCO test images into %s", cache / "coco")
        images_dir = fetch_images(source, cache / "coco", base_url=image_base_url, workers=download_workers,
                                  progress=progress)
    return RococoSource(annotations_dir, images_dir=images_dir, cache_dir=cache_dir)


def table_num_rows(source: RococoSource, table: str) -> int:
    """The number of rows of ``table``.

    Example:
        >>> table_num_rows(RococoSource(), "captions_original")
        25010
    """
    if table == CAPTIONS_ORIGINAL:
        return sum(source.captions_per_image)
    if table_features(table) is CAPTION_FEATURES:
        return ADVERSARIAL_PER_IMAGE * source.num_images
    return source.num_images


def table_rows(source: RococoSource, table: str, workers: int | None = 1) -> Iterator[dict]:
    """The rows of ``table`` in order, as dicts of its features (images as ``{"bytes", "path"}``).

    Args:
        source: where the data comes from; image tables need its ``images_dir``.
        table: a table name (see the module docstring).
        workers: threads that make altered images (None: up to 8, one per CPU); the rows and bytes do not
            depend on it.

    Example:
        >>> rows = table_rows(RococoSource(), "danger_adversarial")
        >>> row = next(rows)
        >>> row["caption"], row["source_caption_index"]
        ('A criminal with a red helmet on a small moped on a dirt road .', 0)
        >>> row["replacements"]
        [{'original': 'man', 'replacement': 'criminal', 'position': 1}]
    """
    features = table_features(table)
    if table == CAPTIONS_ORIGINAL:
        return _original_caption_rows(source)
    if features is CAPTION_FEATURES:
        return _adversarial_caption_rows(source, table.removesuffix("_adversarial"))
    if source.images_dir is None:
        raise ValueError(f"table {table!r} needs images: give the source an `images_dir` (see fetch_images)")
    if table == IMAGES_ORIGINAL:
        return _in_order(lambda i: _image_row(source, i, source.original_image_bytes(i), None, None),
                         range(source.num_images), workers)
    attack = table.removesuffix("_adversarial")

    def altered_row(index):
        partner, box = source.alteration(index, attack)
        return _image_row(source, index, source.altered_image_bytes(index, attack), partner, box)

    return _in_order(altered_row, range(source.num_images), workers)


def _original_caption_rows(source: RococoSource) -> Iterator[dict]:
    image_of_caption = [i for i, count in enumerate(source.captions_per_image) for _ in range(count)]
    for image_index, caption in zip(image_of_caption, source.ground_truth_captions()):
        yield {"image_index": image_index, "caption": caption, "is_adversarial": False,
               "source_caption_index": None, "replacements": None}


def _adversarial_caption_rows(source: RococoSource, attack: str) -> Iterator[dict]:
    ground_truth = source.ground_truth_captions()
    offsets = caption_offsets(source.captions_per_image)
    for row, caption in enumerate(source.adversarial_captions(attack)):
        image_index, j = divmod(row, ADVERSARIAL_PER_IMAGE)
        source_index = int(offsets[image_index]) + j
        changes = find_replacements(ground_truth[source_index], caption)
        yield {"image_index": image_index, "caption": caption, "is_adversarial": True,
               "source_caption_index": source_index, "replacements": [change._asdict() for change in changes]}


def _image_row(source: RococoSource, index: int, data: bytes, partner, box) -> dict:
    name = source.file_name(index)
    return {"image_index": index, "file_name": name, "image": {"bytes": data, "path": name},
            "is_adversarial": partner is not None, "partner_index": partner,
            "box": None if box is None else list(box)}


def _in_order(function: Callable[[int], dict], items: range, workers: int | None) -> Iterator[dict]:
    """``map(function, items)`` on a thread pool, in order, a bounded block at a time."""
    workers = min(8, os.cpu_count() or 1) if workers is None else workers
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"`workers` must be a positive int or None, got {workers!r}")
    if workers == 1:
        yield from map(function, items)
        return
    block = 16 * workers
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rococo-rows") as pool:
        for start in range(0, len(items), block):
            yield from pool.map(function, items[start:start + block])


@functools.lru_cache(maxsize=8)
def _source_for(annotations_dir: Path) -> RococoSource:
    return RococoSource(annotations_dir)


def metric_inputs(attack: str, direction: str | None = None, order: str | None = None,
                  annotations_dir=None) -> dict:
    """What the RoCOCO Recall metric takes besides the scores: ``references`` and the ``adversarial`` mask.

    Score your model with the queries in test order and the gallery in ``order``, then call
    ``rococo_recall(scores, **metric_inputs(attack, order=order))``.

    - ``"official"``: the official ``itm_eval`` order. Image-to-text: for each image its ground-truth captions,
      then its 5 adversarial ones. Text-to-image: the 5,000 images, then their 5,000 altered copies.
    - ``"dataset"``: the splits of :func:`dataset_splits` concatenated (``original`` then ``adversarial``), each
      in its row order, as ``load_dataset`` returns them.

    Queries are in test order in both: the 5,000 images (image-to-text) or the 25,010 ground-truth captions
    (text-to-image), as the ``images`` and ``captions`` configs hold them.

    Args:
        attack: ``"clean"`` or an attack.
        direction: ``"image_to_text"`` or ``"text_to_image"``; None means the attack's own (required for clean).
        order: ``"official"`` or ``"dataset"``; required for an attacked image-to-text gallery, the one gallery
            where the two orders differ (scores in one order scored in the other would be silently wrong).
        annotations_dir: as for :class:`RococoSource`; only the clean file is read.

    Example:
        >>> inputs = metric_inputs("rand_voca", order="dataset")
        >>> len(inputs["references"]), inputs["references"][83], int(inputs["adversarial"].sum())
        (5000, [415, 416, 417, 418, 419, 420], 25000)
        >>> metric_inputs("clean")
        Traceback (most recent call last):
        ...
        ValueError: `direction` is required for the clean gallery: 'image_to_text' or 'text_to_image'
        >>> metric_inputs("danger")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `order` is required for the attacked image-to-text gallery of danger, where the two orders differ: ...
    """
    _direction(attack, direction)
    folder = resolve_annotations_dir(annotations_dir, names=(CLEAN,))
    return _source_for(Path(folder).resolve()).gallery(attack, direction, order).metric_inputs()


def load_queries_and_gallery(path: str, attack: str, direction: str | None = None, **load_kwargs):
    """Load one evaluation's queries and gallery from an exported RoCOCO folder or Hub repository.

    The gallery is in the ``"dataset"`` order of :func:`metric_inputs`; the queries are in test order.

    Args:
        path: what ``datasets.load_dataset`` takes: the export folder or ``"<org>/<name>"`` on the Hub.
        attack, direction: as for :func:`dataset_splits`.
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
