"""Precomputed BUTD region features, one array per item set, for VSE infinity's region variant.

The layout is SCAN's ``precomp`` one (which VSE infinity's ``PrecompRegionDataset`` reads), one pair of files per
item set in one folder:

- ``<set>_ims.npy``: an ``(N, regions, 2048)`` float array (36 regions per image in SCAN's files), read memory-mapped;
- ``<set>_ids.txt``: ``N`` lines, the image of each row: its COCO id (the number in ``COCO_val2014_<id>.jpg``) for
  RoCOCO, or the image's path as the annotation file gives it for a generated benchmark whose images are not COCO's.

``<set>`` is ``original`` for the test images and the image attack's name for its altered copies (``mix_seed1``,
``patch_seed10``, ...): an altered copy has the id of the image it was made from, as its file keeps that image's name.
The rows may come in any order; each id must be one of the benchmark's images, once. Each set is checked when it is
first needed (a missing file, a wrong shape or a wrong id is refused, naming the set), and its rows are put in the
benchmark's image order.

Example:
    >>> image_key("val2014/COCO_val2014_000000391895.jpg"), image_key("images/000.png")
    ('391895', 'images/000.png')
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path, PurePosixPath
from typing import Sequence

import numpy as np

from rococo_eval.models.checkpoints import MAX_REGION_IDS_BYTES, CheckpointError, read_text_file

ORIGINAL = "original"
IMAGE_SETS_PREFIX = "images/"
_COCO_FILE = re.compile(r"COCO_[a-z]+\d*_(\d{12})\.jpg")
_DIGEST_CHUNK = 1 << 24


class RegionFeatureError(ValueError):
    """A region feature folder that lacks a set, or holds one of the wrong size or ids."""


def image_key(image_file: str) -> str:
    """How ``<set>_ids.txt`` names an image: its COCO id, else its path (module docstring)."""
    match = _COCO_FILE.fullmatch(PurePosixPath(image_file).name)
    return str(int(match[1])) if match else image_file


def set_of_item_set(item_set_name: str) -> str:
    """The ``<set>`` of an image item set's files: ``images/original`` -> ``original``, ``images/mix_seed1`` ->
    ``mix_seed1``.

    Example:
        >>> set_of_item_set("images/patch_seed10")
        'patch_seed10'
    """
    if not item_set_name.startswith(IMAGE_SETS_PREFIX):
        raise ValueError(f"{item_set_name!r} is not an image item set")
    return item_set_name[len(IMAGE_SETS_PREFIX):]


class RegionFeatures(Sequence):
    """One set's region features, rows in the benchmark's image order (``features[i]`` is image ``i``'s array)."""

    def __init__(self, array: np.ndarray, order: np.ndarray, digest: str):
        self.array, self.order, self.digest = array, order, digest

    def __len__(self):
        return len(self.order)

    def __getitem__(self, index):
        return np.asarray(self.array[self.order[index]], dtype=np.float32)


def read_region_features(folder, name: str, image_files: Sequence[str], dimension: int, what: str) -> RegionFeatures:
    """Set ``name``'s features in ``folder``, checked against the benchmark's ``image_files`` and the model's
    ``dimension`` (its ``img_dim``); ``what`` names the model in errors.

    Raises:
        RegionFeatureError: a missing file, an array that is not ``(images, regions, dimension)`` numbers, an ids
            file over :data:`~rococo_eval.models.checkpoints.MAX_REGION_IDS_BYTES`, or ids that are not the
            benchmark's images, each once (each names the set and the file).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> np.save(folder / "original_ims.npy", np.arange(2 * 36 * 4, dtype=np.float32).reshape(2, 36, 4))
        >>> _ = (folder / "original_ids.txt").write_text("57870\\n391895\\n")  # rows in another order
        >>> files = ["val2014/COCO_val2014_000000391895.jpg", "val2014/COCO_val2014_000000057870.jpg"]
        >>> features = read_region_features(folder, "original", files, 4, "m")
        >>> len(features), features[0][0].tolist()  # image 0 (391895) is the file's second row
        (2, [144.0, 145.0, 146.0, 147.0])
    """
    folder = Path(folder)
    array_path, ids_path = folder / f"{name}_ims.npy", folder / f"{name}_ids.txt"
    for path in (array_path, ids_path):
        if not path.is_file():
            raise RegionFeatureError(f"{what}: the region features of {name!r} are missing: no {str(path)!r} (the "
                                     "region variant reads precomputed BUTD features for every image set it scores; "
                                     "see rococo_eval.models.region_features)")
    try:
        array = np.load(array_path, mmap_mode="r")
    except (OSError, ValueError) as error:
        raise RegionFeatureError(f"{what}: {str(array_path)!r} is not a NumPy array file ({error})") from error
    if array.ndim != 3 or array.shape[2] != dimension or array.dtype.kind != "f" or array.shape[1] < 1:
        raise RegionFeatureError(f"{what}: {str(array_path)!r} holds {array.dtype} of shape {array.shape}, not "
                                 f"(images, regions, {dimension}) floats")
    try:
        ids = read_text_file(ids_path, f"{what}: the ids of {name!r}", MAX_REGION_IDS_BYTES).split()
    except CheckpointError as error:
        raise RegionFeatureError(str(error)) from error
    expected = [image_key(file) for file in image_files]
    if len(ids) != array.shape[0] or len(ids) != len(expected):
        raise RegionFeatureError(f"{what}: {name!r} has {array.shape[0]} feature rows and {len(ids)} ids in "
                                 f"{str(ids_path)!r}; the benchmark has {len(expected)} images")
    position = {key: row for row, key in enumerate(ids)}
    if len(position) != len(ids):
        repeated = next(key for key in ids if ids.count(key) > 1)
        raise RegionFeatureError(f"{what}: {str(ids_path)!r} names image {repeated!r} more than once")
    unknown = [key for key in expected if key not in position]
    if unknown:
        raise RegionFeatureError(f"{what}: {str(ids_path)!r} lacks {len(unknown)} of the benchmark's images, for "
                                 f"example {unknown[0]!r} (ids are COCO ids, or image paths for other images)")
    return RegionFeatures(array, np.array([position[key] for key in expected]), _digest(array_path, ids))


def _digest(path: Path, ids: list[str]) -> str:
    """sha256 of the array file's bytes and the ids: what the embedding cache of the set is keyed by."""
    digest = hashlib.sha256("\n".join(ids).encode())
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_DIGEST_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()
