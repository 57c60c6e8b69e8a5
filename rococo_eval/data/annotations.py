"""The RoCOCO annotation files: names, pinned sources, download, checks and reading.

Every file is a JSON list of 5,000 records ``{"image": "val2014/COCO_val2014_....jpg", "caption": [...]}``
in the same image order (the Karpathy 5K test split): 5 or 6 ground-truth captions per image, followed in a
text attack's file by the image's adversarial captions. Files come from a local folder the user names
(for example ``ROCOCO_ANNOTATIONS_DIR``) or are downloaded from the official repository at a pinned
commit (through :func:`rococo_eval.io.download.download_file`); either way each file is checked against its
sha256 before it is read. The official sources named here (``OFFICIAL_REPOSITORY``, ``OFFICIAL_COMMIT``,
``PAPER_URL``) are the ones every report, page and dataset card cites.

Environment variables:
    ``ROCOCO_ANNOTATIONS_DIR``: a folder holding the official files; nothing is downloaded.
    ``ROCOCO_ANNOTATIONS_BASE_URL``: a mirror of the annotation files (``http(s)://``, ``file://`` or a
    folder); each file is fetched from ``<base>/<file_name>`` and still checked against its pinned sha256.
    Downloads go to the ``annotations`` subfolder of the cache (``$ROCOCO_CACHE_DIR``, see
    :func:`rococo_eval.io.download.default_cache_dir`).

Example:
    >>> TEXT_ATTACKS
    ('same_concept', 'diff_concept', 'rand_voca', 'danger')
    >>> ANNOTATION_FILES["rand_voca"].file_name
    'rand_voca.json'
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from rococo_eval.catalog import CLEAN, TEXT_ATTACKS
from rococo_eval.io.download import (
    DownloadError,
    VerificationError,
    default_cache_dir,
    download_file,
    join_url,
    sha256_of,
)
from rococo_eval.layout import ADVERSARIAL_PER_IMAGE

logger = logging.getLogger(__name__)

OFFICIAL_REPOSITORY = "https://github.com/pseulki/rococo"
OFFICIAL_COMMIT = "d8ba2a6ef31f3a428a02d5060990f022c2bf1e2a"
PAPER_URL = "https://arxiv.org/abs/2304.10727"
# GitHub serves the files of a commit at raw.githubusercontent.com/<owner>/<name>/<commit>/<path>
RAW_BASE_URL = (OFFICIAL_REPOSITORY.replace("https://github.com/", "https://raw.githubusercontent.com/", 1)
                + f"/{OFFICIAL_COMMIT}/annotations/")
ANNOTATIONS_DIR_ENV = "ROCOCO_ANNOTATIONS_DIR"
ANNOTATIONS_BASE_URL_ENV = "ROCOCO_ANNOTATIONS_BASE_URL"

# Checks of RoCOCO's pinned files (the data source itself reads its counts from whatever records it is given):
NUM_IMAGES = 5000  # the COCO 5K test split: one record per image in every file
ALLOWED_CAPTION_COUNTS = (5, 6)  # how many ground-truth captions one image may have (ten images have 6)


@dataclass(frozen=True)
class AnnotationFile:
    """One pinned annotation file of the official repository."""

    name: str
    file_name: str
    size: int
    sha256: str

    @property
    def url(self) -> str:
        return RAW_BASE_URL + self.file_name


ANNOTATION_FILES = {
    f.name: f
    for f in (
        AnnotationFile(CLEAN, "coco_karpathy_test.json", 1_735_468,
                       "5b202a235ee2a4e13f82b984ef9293b8e2d34f9b1f92147bf8340580f20faf15"),
        AnnotationFile("same_concept", "same_concept.json", 3_148_901,
                       "afca80639b0d1e494771dd6c22f7bbedb430fd795f0e99ab2a598bef04002771"),
        AnnotationFile("diff_concept", "diff_concept.json", 3_146_112,
                       "4a18a5f0ddc22eb889bdd9ed07b1a65778775385bc31e2c72520d0d3beaa94bc"),
        AnnotationFile("rand_voca", "rand_voca.json", 3_157_104,
                       "768c62b11021e1e904b1e63ee757bc450879538a1ea0c1bd8114e51e0b7c3c9c"),
        AnnotationFile("danger", "danger.json", 3_213_848,
                       "36ddba6223543df092513d28340bf45900913c83995377564030dcedf6685ee5"),
    )
}


class AnnotationError(ValueError):
    """An annotation file is missing, corrupt or not laid out as RoCOCO's files are."""


def annotation_file(name: str) -> AnnotationFile:
    """Return the pinned description of annotation file ``name`` (``"clean"`` or a text attack)."""
    try:
        return ANNOTATION_FILES[name]
    except KeyError:
        raise ValueError(
            f"`name` must be one of {sorted(ANNOTATION_FILES)}, got {name!r}"
        ) from None


def verify_annotation_file(name: str, path: str | os.PathLike) -> Path:
    """Check that ``path`` exists and has the pinned sha256 of annotation file ``name``."""
    spec = annotation_file(name)
    path = Path(path)
    if not path.is_file():
        raise AnnotationError(
            f"annotation file {spec.file_name!r} is missing: expected it at {str(path)!r}. "
            f"Point `annotations_dir` (or ${ANNOTATIONS_DIR_ENV}) at a folder holding the official "
            f"files, or leave it unset to download them from {spec.url}"
        )
    actual = sha256_of(path)
    if actual != spec.sha256:
        raise AnnotationError(
            f"annotation file {str(path)!r} is corrupt or not the official one: sha256 {actual}, "
            f"expected {spec.sha256}. Delete it and download it again from {spec.url}"
        )
    return path


def resolve_annotations_dir(annotations_dir: str | os.PathLike | None = None,
                            names=tuple(ANNOTATION_FILES), cache_dir: str | os.PathLike | None = None) -> Path:
    """Return a folder holding the verified annotation files ``names``.

    Looks at ``annotations_dir``, then ``$ROCOCO_ANNOTATIONS_DIR``; with neither, downloads the pinned files
    into ``cache_dir`` (:func:`download_annotations`). Raises :class:`AnnotationError` naming the file
    and what to do when a file is missing or corrupt.
    """
    chosen = annotations_dir if annotations_dir is not None else os.environ.get(ANNOTATIONS_DIR_ENV)
    if chosen is None:
        return download_annotations(names, cache_dir=cache_dir)
    folder = Path(chosen)
    if not folder.is_dir():
        raise AnnotationError(f"`annotations_dir` {str(folder)!r} is not a folder")
    for name in names:
        verify_annotation_file(name, folder / annotation_file(name).file_name)
    return folder


def download_annotations(names: Iterable[str] | str, cache_dir: str | os.PathLike | None = None,
                         base_url: str | os.PathLike | None = None) -> Path:
    """Download the pinned annotation files ``names`` and return the folder holding them, verified.

    Files go to ``<cache_dir>/annotations`` (``cache_dir`` defaults to
    :func:`~rococo_eval.io.download.default_cache_dir`); files already there with the pinned sha256 are not
    fetched again. The source is ``base_url``, else ``$ROCOCO_ANNOTATIONS_BASE_URL``, else the official
    repository at the pinned commit; a mirror serves ``<base_url>/<file_name>``, and every file is checked
    against its pinned size and sha256.

    Args:
        names: annotation file names (``"clean"`` or a text attack), or one name.
        cache_dir: cache folder; None uses :func:`~rococo_eval.io.download.default_cache_dir`.
        base_url: ``http(s)://`` or ``file://`` URL or local folder of a mirror; None uses
            ``$ROCOCO_ANNOTATIONS_BASE_URL`` or the official source.

    Raises:
        ValueError: a name is not an annotation file.
        DownloadError: a file could not be fetched (:class:`~rococo_eval.io.download.ServerUnreachableError`,
            at once, when the source cannot be reached); the message says how to point the package at
            local files instead.
        VerificationError: a fetched file is not the official one.

    Example:
        >>> import tempfile
        >>> mirror = resolve_annotations_dir().as_uri()  # a local copy of the official files as the mirror
        >>> folder = download_annotations(["clean", "danger"], cache_dir=tempfile.mkdtemp(), base_url=mirror)
        >>> sorted(p.name for p in folder.glob("*.json"))
        ['coco_karpathy_test.json', 'danger.json']
    """
    specs = [annotation_file(name) for name in ((names,) if isinstance(names, str) else names)]
    base = base_url if base_url is not None else os.environ.get(ANNOTATIONS_BASE_URL_ENV) or None
    folder = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "annotations"
    for spec in specs:
        url = spec.url if base is None else join_url(base, spec.file_name)
        try:
            download_file(url, folder / spec.file_name, sha256=spec.sha256, size=spec.size)
        except (DownloadError, VerificationError) as error:
            raise type(error)(
                f"{error} To use the annotation files without this download, set ${ANNOTATIONS_DIR_ENV} to a "
                f"folder holding the official files, or ${ANNOTATIONS_BASE_URL_ENV} to a mirror of them."
            ) from error.__cause__
    return folder


def read_annotation_file(name: str, annotations_dir: str | os.PathLike | None = None,
                         cache_dir: str | os.PathLike | None = None) -> list[dict]:
    """Read and check annotation file ``name``: 5,000 records with ``image`` and ``caption``.

    The file comes from :func:`resolve_annotations_dir` (``annotations_dir``, the environment, or a download
    into ``cache_dir``) and is checked against its sha256 once, here.

    Example:
        >>> records = read_annotation_file("clean")  # from $ROCOCO_ANNOTATIONS_DIR or the pinned download
        >>> len(records), len(records[83]["caption"]), records[83]["image"]
        (5000, 6, 'val2014/COCO_val2014_000000415746.jpg')
    """
    folder = resolve_annotations_dir(annotations_dir, names=(name,), cache_dir=cache_dir)
    path = folder / annotation_file(name).file_name
    with open(path, encoding="utf-8") as handle:
        records = json.load(handle)
    _check_records(name, path, records)
    return records


def _check_records(name: str, path: Path, records) -> None:
    if not isinstance(records, list) or len(records) != NUM_IMAGES:
        raise AnnotationError(f"{str(path)!r}: expected a list of {NUM_IMAGES} records")
    for index, record in enumerate(records):
        captions = record.get("caption") if isinstance(record, dict) else None
        if not isinstance(captions, list) or not isinstance(record.get("image"), str):
            raise AnnotationError(f"{str(path)!r}: record {index} lacks `image` or `caption`")
        extra = ADVERSARIAL_PER_IMAGE if name in TEXT_ATTACKS else 0
        if len(captions) - extra not in ALLOWED_CAPTION_COUNTS:
            expected = " or ".join(str(count + extra) for count in ALLOWED_CAPTION_COUNTS)
            raise AnnotationError(f"{str(path)!r}: record {index} has {len(captions)} captions, expected {expected}")
