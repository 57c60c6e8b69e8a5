"""The data sources: one checked copy of a benchmark's annotation files and, optionally, of its images.

A :class:`Source` owns what a benchmark's data is: the ground-truth and adversarial captions, the images and their
altered copies, the galleries built from them, and the facts that set one benchmark apart from another (its
attacks, adversarial captions per image, word-choice evidence, whether it is RoCOCO itself, how a model card names
it). Two kinds implement it:

- :class:`RococoSource`: RoCOCO's pinned annotation files (the COCO 5K test split) and its published partner tables
  (:func:`rococo_eval.attacks.images.load_mix_table`), made for its 5,000 test images;
- :class:`BenchmarkSource`: a benchmark generated for another image-text set (:mod:`rococo_eval.data.benchmark`),
  from its folder's own files and partner tables (see :mod:`rococo_eval.data.manifest`).

Both read every count from the annotation records (images, captions per image, adversarial captions per image), so
their captions and galleries describe whichever image-text set the files hold. :func:`open_source` opens either, as
the front ends' options say (``--benchmark``, ``benchmark=``). Everything that needs the data reads it through a
source: the ``datasets`` builder (``rococo_dataset.py``), the Parquet export (:mod:`rococo_eval.data.export`), the
app and the command line. This module also checks image folders (:class:`ImageFolderError`) and fills them
(:func:`fetch_images`).

Example:
    >>> source = RococoSource()  # annotations from $ROCOCO_ANNOTATIONS_DIR, else the pinned download
    >>> source.num_images, len(source.ground_truth_captions()), len(source.adversarial_captions("danger"))
    (5000, 25010, 25000)
    >>> source.adversarial_per_image
    5
"""

from __future__ import annotations

import abc
import functools
import logging
import os
import shlex
from pathlib import Path, PurePosixPath
from typing import Protocol

from PIL import Image

from rococo_eval.attacks.images import MixTable, alter_image, encode_jpeg, load_mix_table
from rococo_eval.catalog import CLEAN, IMAGE_ATTACKS, TEXT_ATTACKS, gallery_direction, parse_image_attack
from rococo_eval.data.annotations import OFFICIAL_COMMIT, AnnotationError, read_annotation_file
from rococo_eval.data.manifest import read_benchmark
from rococo_eval.io.download import (
    DEFAULT_DOWNLOAD_WORKERS,
    CorruptImageError,
    decode_image,
    default_cache_dir,
    download_coco_images,
    read_image_file,
)
from rococo_eval.layout import GalleryLayout, caption_offsets, gallery_layout

logger = logging.getLogger(__name__)

ROCOCO_CARD_DATASET = ("rococo", "RoCOCO")  # how a model card names RoCOCO: (dataset type, dataset name)


class ImageFolderError(ValueError):
    """A COCO image folder lacks test images or is laid out differently (the root must hold ``val2014/``)."""


class Source(Protocol):
    """What callers read of a benchmark's data: its captions, images, galleries and the facts that set it apart.

    :class:`RococoSource` (RoCOCO's files) and :class:`BenchmarkSource` (a generated benchmark) implement it;
    :func:`open_source` opens either. A test may pass any object with the members its code uses.

    Attributes:
        text_attacks, image_attacks: the source's attacks, in catalogue order.
        captions_per_image: the number of ground-truth captions of each image, in the clean file's order.
        image_files: each image's path relative to :attr:`images_dir`, in the clean file's order.
        images_dir: the checked image folder, or None (captions, galleries and score files need no images).
        is_rococo: whether the source is RoCOCO's own image-text set, whose galleries the leaderboard ranks.
        has_evidence: whether the text attacks' word-choice evidence is recorded (:meth:`caption_evidence`).
        card_dataset: ``(type, name)`` of the dataset under which a model card lists results on this source
            (:func:`rococo_eval.reporting.report.model_card_metadata`).

    Example:
        >>> source: Source = RococoSource()
        >>> source.is_rococo, source.has_evidence, source.card_dataset
        (True, False, ('rococo', 'RoCOCO'))
    """

    text_attacks: tuple[str, ...]
    image_attacks: tuple[str, ...]
    captions_per_image: list[int]
    image_files: list[str]
    images_dir: Path | None
    is_rococo: bool
    has_evidence: bool
    card_dataset: tuple[str, str]

    @property
    def num_images(self) -> int: ...

    @property
    def adversarial_per_image(self) -> int: ...

    def ground_truth_captions(self) -> list[str]: ...

    def adversarial_captions(self, attack: str) -> list[str]: ...

    def adversarial_sources(self, attack: str) -> list[int]: ...

    def caption_evidence(self, attack: str) -> list[list[dict]] | None: ...

    def file_name(self, index: int) -> str: ...

    def original_image_bytes(self, index: int) -> bytes: ...

    def original_image(self, index: int) -> Image.Image: ...

    def alteration(self, index: int, attack: str) -> tuple[int, tuple[int, int, int, int] | None]: ...

    def altered_image_bytes(self, index: int, attack: str) -> bytes: ...

    def altered_image(self, index: int, attack: str) -> Image.Image: ...

    def mix_table(self, attack: str) -> MixTable: ...

    def gallery(self, attack: str, direction: str | None = None, order: str | None = None) -> GalleryLayout: ...


def open_source(annotations_dir=None, images_dir=None, cache_dir=None, *, benchmark=None,
                needs_images: bool = False) -> Source:
    """RoCOCO's source (:class:`RococoSource`), or with ``benchmark`` the generated benchmark in that folder
    (:class:`BenchmarkSource`): the one way the front ends open a source from their options (``--benchmark``,
    ``benchmark=``).

    Args:
        annotations_dir, images_dir, cache_dir: as for :class:`RococoSource`; with ``benchmark``, ``images_dir`` as
            for :class:`BenchmarkSource` and ``cache_dir`` unused.
        benchmark: a folder written by :func:`rococo_eval.data.benchmark.make_benchmark`, or None for RoCOCO.
            Not together with ``annotations_dir``.
        needs_images: RoCOCO is refused without ``images_dir`` (a model's evaluation embeds its images; a
            benchmark's default to the folder it records).

    Example:
        >>> type(open_source()).__name__
        'RococoSource'
        >>> open_source("annotations", benchmark="bench")
        Traceback (most recent call last):
        ...
        ValueError: pass `annotations_dir` (RoCOCO's files) or `benchmark` (a generated benchmark), not both
    """
    if benchmark is None:
        if needs_images and images_dir is None:
            raise ValueError("`images_dir` is None: every RoCOCO gallery needs the 5,000 COCO test images (the "
                             "folder holding val2014/), or give `benchmark`, a folder made by `rococo-eval attack`")
        return RococoSource(annotations_dir, images_dir=images_dir, cache_dir=cache_dir)
    if annotations_dir is not None:
        raise ValueError("pass `annotations_dir` (RoCOCO's files) or `benchmark` (a generated benchmark), not both")
    return BenchmarkSource(benchmark, images_dir=images_dir)


class _AnnotatedSource(abc.ABC):
    """What both sources share: captions read from annotation records (each file once, checked against the clean
    file), images read from a checked folder, altered copies and galleries.

    A subclass sets its attacks, then calls ``__init__`` (which reads the clean file), then sets ``images_dir``;
    it reads an annotation file's records in ``_records_of`` and an image attack's table in ``_table_of``.
    """

    def __init__(self, adversarial_per_image: int | None = None):
        self._records: dict[str, list[dict]] = {}
        self._layouts: dict[tuple, GalleryLayout] = {}
        self._adversarial_per_image = adversarial_per_image
        clean = self._read(CLEAN)
        self.captions_per_image = [len(record["caption"]) for record in clean]
        self.image_files = [record["image"] for record in clean]
        self.images_dir = None

    @abc.abstractmethod
    def _records_of(self, name: str) -> list[dict]:
        """The records of annotation file ``name`` (``"clean"`` or a text attack), checked as the source's kind is."""

    @abc.abstractmethod
    def _table_of(self, attack: str) -> MixTable:
        """The partner (and box) table of image attack ``attack`` (one of :attr:`image_attacks`)."""

    @abc.abstractmethod
    def _no_images_advice(self) -> str:
        """How to give the source its images, for the error of a source without them."""

    @abc.abstractmethod
    def _image_advice(self) -> tuple[str, str]:
        """What an image of the source is, and how to fetch it again, for the error of one missing or damaged."""

    def _read(self, name: str) -> list[dict]:
        if name not in self._records:
            records = self._records_of(name)
            if name != CLEAN:
                self._adversarial_per_image = _check_against_clean(name, records, self._records[CLEAN],
                                                                   self._adversarial_per_image)
            self._records[name] = records
        return self._records[name]

    @property
    def num_images(self) -> int:
        return len(self.image_files)

    @property
    def adversarial_per_image(self) -> int:
        """The number of adversarial captions of each image in a text attack's file (5 in RoCOCO): the captions
        that follow its ground-truth ones, the same for every image and every text attack. Read from the text
        attack files this source has read, or from the first text attack's file if it has read none (a generated
        benchmark's manifest records it).

        Raises:
            ValueError: the source (a generated benchmark) has no text attack.
        """
        if self._adversarial_per_image is None:
            if not self.text_attacks:
                raise ValueError("this benchmark has no text attack, hence no adversarial captions per image")
            self._read(self.text_attacks[0])
        return self._adversarial_per_image

    def ground_truth_captions(self) -> list[str]:
        """The ground-truth captions, image by image in file order (the clean file's order)."""
        return [caption for record in self._read(CLEAN) for caption in record["caption"]]

    def adversarial_captions(self, attack: str) -> list[str]:
        """The altered captions of text attack ``attack``, image by image: the :attr:`adversarial_per_image`
        captions that follow each image's ground-truth captions in the attack's file. Row
        ``adversarial_per_image * i + j`` was made from ground-truth caption ``j`` of image ``i``.

        Raises:
            ValueError: ``attack`` is not a text attack.
        """
        self._check_text_attack(attack)
        return [caption for record, num_gt in zip(self._read(attack), self.captions_per_image)
                for caption in record["caption"][num_gt:]]

    def _check_text_attack(self, attack: str) -> None:
        if attack not in self.text_attacks:
            raise ValueError(f"`attack` must be one of the text attacks {self.text_attacks}, got {attack!r}")

    def file_name(self, index: int) -> str:
        """The file name of image ``index`` (COCO's ``file_name`` in RoCOCO).

        Example:
            >>> RococoSource().file_name(0)
            'COCO_val2014_000000391895.jpg'
        """
        return PurePosixPath(self.image_files[self._check_index(index)]).name

    def original_image_bytes(self, index: int) -> bytes:
        """The bytes of image ``index``'s file, checked to decode fully.

        Raises:
            ValueError: the source has no ``images_dir``, or ``index`` is out of range.
            FileNotFoundError: the file disappeared since the folder was checked.
            CorruptImageError: the file cannot be fully decoded; the message says how to fetch it again.
        """
        return self._open_original(index)[0]

    def original_image(self, index: int) -> Image.Image:
        """Image ``index`` as its file holds it (as COCO publishes it, in RoCOCO), decoded (errors as
        :meth:`original_image_bytes`).

        Example:
            >>> RococoSource().original_image(0)  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ValueError: this RococoSource has no `images_dir`: pass the COCO root ...fetch_images() ...
        """
        return self._open_original(index)[1]

    def _open_original(self, index: int) -> tuple[bytes, Image.Image]:
        if self.images_dir is None:
            raise ValueError(f"this {type(self).__name__} has no `images_dir`: {self._no_images_advice()}")
        path = self.images_dir / self.image_files[self._check_index(index)]
        kind, fetch = self._image_advice()
        try:
            return read_image_file(path)
        except FileNotFoundError:
            raise FileNotFoundError(f"{kind} {str(path)!r} is missing; {fetch}") from None
        except CorruptImageError as error:
            raise CorruptImageError(f"{kind} {error}; delete it, then {fetch}") from error

    def alteration(self, index: int, attack: str) -> tuple[int, tuple[int, int, int, int] | None]:
        """The partner image of ``index``'s altered copy, and for ``patch`` its box ``(row0, row1, col0, col1)``
        in the 384 x 384 image, from the attack's table (:meth:`mix_table`).

        Example:
            >>> source = RococoSource()
            >>> partner, box = source.alteration(0, "patch_seed1")
            >>> 0 <= partner < 5000, len(box), source.alteration(0, "mix_seed1") == (partner, None)
            (True, 4, True)
        """
        table = self.mix_table(attack)
        index = self._check_index(index)
        box = None if table.box is None else tuple(int(v) for v in table.box[index])
        return int(table.partner[index]), box

    def altered_image_bytes(self, index: int, attack: str) -> bytes:
        """The altered copy of image ``index`` under image attack ``attack``, as the official script saves
        it: 384 x 384, JPEG quality 75. The same bytes on every machine with the same PIL and libjpeg.
        """
        partner, box = self.alteration(index, attack)
        altered = alter_image(self.original_image(index), self.original_image(partner), self.mix_table(attack).method,
                              box=box)
        return encode_jpeg(altered)

    def altered_image(self, index: int, attack: str) -> Image.Image:
        """:meth:`altered_image_bytes`, decoded: the image a model sees when it reads the official file."""
        return decode_image(self.altered_image_bytes(index, attack), f"the altered copy of image {index}")

    def mix_table(self, attack: str) -> MixTable:
        """The partner (and box) table of image attack ``attack``: RoCOCO's published one
        (:func:`rococo_eval.attacks.images.load_mix_table`), or a generated benchmark's own.

        Example:
            >>> RococoSource().mix_table("patch_seed10").box.shape
            (5000, 4)
        """
        if attack not in self.image_attacks:
            raise ValueError(f"`attack` must be one of the image attacks {self.image_attacks}, got {attack!r}")
        return self._table_of(attack)

    def gallery(self, attack: str, direction: str | None = None, order: str | None = None) -> GalleryLayout:
        """The layout of one gallery: queries, ``references``, ``adversarial`` mask and gallery order.

        Args:
            attack: ``"clean"`` or an attack.
            direction: ``"image_to_text"`` or ``"text_to_image"``; None means the attack's own direction
                (required for ``"clean"``).
            order: ``"official"`` (the official ``itm_eval`` order) or ``"dataset"`` (the order of the
                exported splits listed by :func:`rococo_eval.data.configs.dataset_splits`). Required for an
                attacked image-to-text gallery, the one gallery where the two orders differ; elsewhere None
                gives the one order.

        Example:
            >>> layout = RococoSource().gallery("rand_voca", order="official")
            >>> layout.num_queries, layout.num_gallery, layout.num_adversarial, layout.references[83]
            (5000, 50010, 25000, (830, 831, 832, 833, 834, 835))
            >>> RococoSource().gallery("mix_seed1").num_gallery  # text-to-image: one order
            10000
        """
        direction = gallery_direction(attack, direction)
        if attack != CLEAN and attack not in self.text_attacks + self.image_attacks:
            raise ValueError(f"`attack` must be 'clean' or one of this source's attacks "
                             f"{self.text_attacks + self.image_attacks}, got {attack!r}")
        key = (attack, direction, order)
        if key not in self._layouts:
            counts = {}
            if attack in self.text_attacks:
                self._read(attack)  # the attack's own file: its adversarial captions per image, checked
                counts["adversarial_per_image"] = self.adversarial_per_image
            self._layouts[key] = gallery_layout(attack, direction, self.captions_per_image, order, **counts)
        return self._layouts[key]

    def _check_index(self, index) -> int:
        if isinstance(index, bool) or not isinstance(index, int) and not hasattr(index, "__index__"):
            raise ValueError(f"`index` must be an int in 0..{self.num_images - 1}, got {index!r}")
        index = int(index)
        if not 0 <= index < self.num_images:
            raise ValueError(f"`index` must be in 0..{self.num_images - 1}, got {index}")
        return index


class RococoSource(_AnnotatedSource):
    """RoCOCO's data: one checked copy of its annotation files, and optionally a COCO image folder.

    Annotation files are read once per source, each checked against its pinned sha256 and against the clean
    file (same images, same ground-truth captions, then :attr:`adversarial_per_image` adversarial ones, the
    same number for every image and every text attack). The image folder, when given, is checked at once for
    every image of the clean file; each image is fully decoded when read. The image attacks' partners and boxes
    are RoCOCO's published tables (:func:`rococo_eval.attacks.images.load_mix_table`). Implements :class:`Source`.

    Args:
        annotations_dir: folder holding the official files; None uses ``$ROCOCO_ANNOTATIONS_DIR``, else
            downloads the pinned files into ``cache_dir`` as they are needed.
        images_dir: the COCO root: the folder holding ``val2014/COCO_val2014_....jpg``. None means no
            images (captions and galleries still work); :func:`fetch_images` fills such a folder.
        cache_dir: cache of downloaded annotation files (default :func:`~rococo_eval.io.download.default_cache_dir`).

    Attributes:
        captions_per_image: the number of ground-truth captions of each image, in the clean file's order
            (in RoCOCO 5, or 6 for ten images).
        image_files: the images as ``"val2014/COCO_val2014_....jpg"``, in the clean file's order.
        images_dir: the checked COCO root, or None.
        text_attacks, image_attacks: RoCOCO's attacks (:data:`rococo_eval.catalog.TEXT_ATTACKS`,
            :data:`~rococo_eval.catalog.IMAGE_ATTACKS`).
        is_rococo: True: the leaderboard ranks RoCOCO's galleries.
        has_evidence: False: RoCOCO's files do not record how a word was chosen.
        card_dataset: ``("rococo", "RoCOCO")``.

    Raises:
        AnnotationError: an annotation file is missing, corrupt or inconsistent with the clean file.
        ImageFolderError: ``images_dir`` lacks some images; the message names them and what to do.

    Example:
        >>> source = RococoSource()
        >>> source.image_files[0], source.captions_per_image[83], source.images_dir is None
        ('val2014/COCO_val2014_000000391895.jpg', 6, True)
        >>> source.ground_truth_captions()[415]  # image 83's first caption (images 0..82 have 5 each)
        'Muffins and other pastries on display ground and purchase'
        >>> source.adversarial_captions("rand_voca")[5 * 83]  # made from it
        'viewers and other pastries on display ground and purchase'
    """

    text_attacks = TEXT_ATTACKS
    image_attacks = IMAGE_ATTACKS
    is_rococo = True
    has_evidence = False
    card_dataset = ROCOCO_CARD_DATASET

    def __init__(self, annotations_dir=None, images_dir=None, cache_dir=None):
        self._annotations_dir = annotations_dir
        self._cache_dir = cache_dir
        super().__init__()
        if images_dir is not None:
            self.images_dir = _check_images_dir(Path(images_dir), self.image_files)

    def _records_of(self, name: str) -> list[dict]:
        return read_annotation_file(name, self._annotations_dir, cache_dir=self._cache_dir)

    def _table_of(self, attack: str) -> MixTable:
        return _mix_table(*parse_image_attack(attack))

    def _image_advice(self) -> tuple[str, str]:
        return "COCO test image", f"fetch it again: {fetch_advice(self.images_dir)}"

    def _no_images_advice(self) -> str:
        return ("pass the COCO root holding val2014/ (RococoSource(images_dir=...)), or download the "
                f"{self.num_images:,} images with rococo_eval.data.source.fetch_images() (into <cache>/coco; it "
                "returns the folder to pass)")

    def adversarial_sources(self, attack: str) -> list[int]:
        """For each adversarial caption of text attack ``attack`` (in :meth:`adversarial_captions`' order), the
        ground-truth caption it was made from, as an index into :meth:`ground_truth_captions`: in RoCOCO's files
        adversarial caption ``j`` of an image comes from its ground-truth caption ``j``.

        Example:
            >>> RococoSource().adversarial_sources("danger")[5 * 83:5 * 83 + 6]  # image 83 has 6 captions
            [415, 416, 417, 418, 419, 421]
        """
        self._check_text_attack(attack)
        per_image, offsets = self.adversarial_per_image, caption_offsets(self.captions_per_image)
        return [int(offsets[i]) + j for i in range(self.num_images) for j in range(per_image)]

    def caption_evidence(self, attack: str) -> None:
        """None: RoCOCO's files do not record how a word was chosen (a generated benchmark does:
        :meth:`BenchmarkSource.caption_evidence`).

        Example:
            >>> RococoSource().caption_evidence("danger") is None
            True
        """
        self._check_text_attack(attack)
        return None


class BenchmarkSource(_AnnotatedSource):
    """A benchmark generated for another image-text set: the folder written by
    :func:`rococo_eval.data.benchmark.make_benchmark` (see :mod:`rococo_eval.data.manifest`), read as RoCOCO's files
    are. Implements :class:`Source`.

    Its annotation files and partner tables are checked against its manifest's sha256 when read, and its text
    attacks' files against the clean file and the manifest's adversarial captions per image.

    Args:
        folder: the benchmark folder.
        images_dir: the folder the images' paths are relative to; None uses the one the manifest records, or none
            when that folder is not here (captions, galleries and score files need no images).

    Attributes:
        benchmark: the folder's manifest (:class:`rococo_eval.data.manifest.Benchmark`).
        text_attacks, image_attacks: the benchmark's attacks (its image attacks may have other seeds than RoCOCO's).
        is_rococo: False: the leaderboard ranks RoCOCO's galleries only.
        has_evidence: True: each adversarial caption's word-choice evidence is recorded (:meth:`caption_evidence`).
        card_dataset: ``("rococo-generated", "RoCOCO-style benchmark: <folder name>")``.

    Raises:
        BenchmarkError: ``folder`` is not a generated benchmark, or one of its files changed since it was written.
        ImageFolderError: ``images_dir`` lacks some of the benchmark's images.

    Example:
        >>> import tempfile
        >>> from rococo_eval.data.manifest import ANNOTATIONS, write_manifest
        >>> from rococo_eval.io.atomic import write_json
        >>> folder = Path(tempfile.mkdtemp()) / "dogs"
        >>> records = [{"image": "a.jpg", "caption": ["a dog", "a brown dog"]},
        ...            {"image": "b.jpg", "caption": ["a cat"]}]
        >>> _ = write_json(records, folder / ANNOTATIONS.format(name="clean"), compact=True)
        >>> _ = write_manifest(folder, text_attacks=[], image_attacks=[], adversarial_per_image=None,
        ...                    images_dir=None, details={})
        >>> source = BenchmarkSource(folder)
        >>> source.captions_per_image, source.is_rococo, source.card_dataset
        ([2, 1], False, ('rococo-generated', 'RoCOCO-style benchmark: dogs'))
    """

    is_rococo = False
    has_evidence = True

    def __init__(self, folder, images_dir=None):
        self.benchmark = read_benchmark(folder)
        self.text_attacks = self.benchmark.text_attacks
        self.image_attacks = self.benchmark.image_attacks
        self._mix_tables: dict[str, MixTable] = {}
        super().__init__(self.benchmark.adversarial_per_image)
        recorded = self.benchmark.images_dir
        if images_dir is None and recorded is not None:
            if recorded.is_dir():
                images_dir = recorded
            else:  # captions, galleries and score files need no images: go on without them
                logger.info("the benchmark's image folder %s is not here: no images (pass `images_dir`)", recorded)
        if images_dir is not None:
            self.images_dir = _check_benchmark_images(Path(images_dir), self.image_files, self.benchmark.root)

    @property
    def card_dataset(self) -> tuple[str, str]:
        return "rococo-generated", f"RoCOCO-style benchmark: {Path(self.benchmark.root).name}"

    def _records_of(self, name: str) -> list[dict]:
        return self.benchmark.records(name)

    def _table_of(self, attack: str) -> MixTable:
        if attack not in self._mix_tables:  # read (and checked) once per source
            self._mix_tables[attack] = self.benchmark.mix_table(attack)
        return self._mix_tables[attack]

    def _image_advice(self) -> tuple[str, str]:
        return "benchmark image", f"put it back from the image set of the benchmark {str(self.benchmark.root)!r}"

    def _no_images_advice(self) -> str:
        return ("pass the folder its image paths are relative to (BenchmarkSource(folder, images_dir=...), "
                "--images-dir)")

    def adversarial_sources(self, attack: str) -> list[int]:
        """For each adversarial caption of text attack ``attack`` (in :meth:`adversarial_captions`' order), the
        ground-truth caption it was made from, as an index into :meth:`ground_truth_captions`, as the benchmark
        records it (it may skip a caption that has no candidate word)."""
        self._check_text_attack(attack)
        return [row["source_caption_index"] for row in self.benchmark.adversarial_rows(attack)]

    def caption_evidence(self, attack: str) -> list[list[dict]]:
        """For each adversarial caption of ``attack``, the candidate words of its source caption with their
        Embedding-Influence scores (``[{"word", "position", "influence"}]``), as the benchmark records them."""
        self._check_text_attack(attack)
        return [row["candidates"] for row in self.benchmark.adversarial_rows(attack)]


@functools.lru_cache(maxsize=None)
def _mix_table(method: str, seed: int):
    return load_mix_table(method, seed)


def _check_against_clean(name: str, records: list[dict], clean: list[dict], per_image: int | None) -> int:
    """Check that each record of text attack ``name`` holds its image's clean captions, then ``per_image``
    adversarial ones (None: as many as the first record has, at least one); return ``per_image``."""
    if len(records) != len(clean):
        raise AnnotationError(f"annotation file {name!r} has {len(records)} records, the clean file {len(clean)}")
    if per_image is None:
        per_image = max(1, len(records[0]["caption"]) - len(clean[0]["caption"]))
    for index, (record, reference) in enumerate(zip(records, clean)):
        num_gt = len(reference["caption"])
        if (record["image"] != reference["image"] or record["caption"][:num_gt] != reference["caption"]
                or len(record["caption"]) - num_gt != per_image):
            raise AnnotationError(
                f"annotation file {name!r} disagrees with the clean file at record {index} ({record['image']!r}): "
                f"its first {num_gt} captions must be the clean file's, followed by {per_image} adversarial "
                f"ones, as in every image and every text attack. Use the official files of commit "
                f"{OFFICIAL_COMMIT[:7]}"
            )
    return per_image


def _check_benchmark_images(root: Path, image_files: list[str], benchmark: Path) -> Path:
    missing = [name for name in image_files if not (root / name).is_file()]
    if missing:
        raise ImageFolderError(
            f"`images_dir` {str(root)!r} lacks {len(missing)} of the {len(image_files)} images of the benchmark "
            f"{str(benchmark)!r}, for example {missing[0]!r}: pass the folder its image paths are relative to "
            "(images_dir=..., --images-dir)")
    return root


def _check_images_dir(root: Path, image_files: list[str]) -> Path:
    if not root.is_dir():
        raise ImageFolderError(f"`images_dir` {str(root)!r} is not a folder; pass the COCO root holding val2014/")
    missing = [name for name in image_files if not (root / name).is_file()]
    if not missing:
        return root
    shown = ", ".join(repr(str(root / name)) for name in missing[:3])
    advice = _layout_hint(root, missing[0]) or f"Fetch the missing ones: {fetch_advice(root)}."
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


def fetch_advice(root: Path) -> str:
    """How to fetch the COCO test images missing from the COCO root ``root`` (resumable: only those missing), on the
    command line and in Python, as the error messages give it.

    Example:
        >>> print(fetch_advice(Path("/data/coco")))  # doctest: +NORMALIZE_WHITESPACE
        add --download-images to `rococo-eval run --images-dir /data/coco`, or call
        rococo_eval.data.source.fetch_images(dest_root='/data/coco') in Python
    """
    return (f"add --download-images to `rococo-eval run --images-dir {shlex.quote(str(root))}`, or call "
            f"rococo_eval.data.source.fetch_images(dest_root={str(root)!r}) in Python")


def fetch_images(source=None, dest_root=None, *, base_url=None, workers: int = DEFAULT_DOWNLOAD_WORKERS,
                 progress: bool = False) -> Path:
    """Download the source's COCO images one by one into ``dest_root/val2014/``: parallel, resumable, verified.

    Images already complete are not fetched again and interrupted ones are resumed (see
    :func:`rococo_eval.io.download.download_coco_images`); the result is a folder to pass as ``images_dir``.

    Args:
        source: a :class:`Source` (its :attr:`~Source.image_files`), or an annotations folder of RoCOCO (None:
            ``$ROCOCO_ANNOTATIONS_DIR`` or the pinned download) to read the list of images from.
        dest_root: the COCO root to fill; None uses ``<cache>/coco`` (see
            :func:`~rococo_eval.io.download.default_cache_dir`).
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
    if source is None or isinstance(source, (str, os.PathLike)):
        source = RococoSource(source)
    dest_root = Path(dest_root) if dest_root is not None else default_cache_dir() / "coco"
    download_coco_images(source.image_files, dest_root, base_url=base_url, workers=workers, progress=progress)
    return dest_root
