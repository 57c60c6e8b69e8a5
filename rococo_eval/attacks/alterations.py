"""An image attack's altered images, made with each original decoded once and resized to 384 x 384 once.

Every altered image mixes (or patches) two originals, the image and its partner, and every original is the
partner of exactly one other image of its official batch. Made one by one, each altered image would decode
and resize two originals, so every original twice. Here the images are split into *groups*, the smallest
sets closed under "is the partner of" (the cycles of the partner table, within the official batches of 64):
a group's originals are decoded and resized once, and all its altered images made from them. The bytes are the
same as :meth:`rococo_eval.data.source.RococoSource.altered_image_bytes` gives one by one.

Example:
    >>> alteration_groups([1, 2, 0, 3, 5, 4])
    [[0, 1, 2], [3], [4, 5]]
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from PIL import Image

from rococo_eval.attacks.images import alter_image, encode_jpeg, resize
from rococo_eval.io.download import decode_image

logger = logging.getLogger(__name__)


def alteration_groups(partners: Sequence[int]) -> list[list[int]]:
    """Split images ``0..N-1`` into the smallest groups that hold every image's partner: each group's altered
    images need only its own originals.

    Args:
        partners: ``partners[i]`` is the image mixed into image ``i``'s altered copy.

    Returns:
        the groups, each sorted, ordered by their first image.

    Example:
        >>> alteration_groups([0, 2, 1])
        [[0], [1, 2]]
    """
    parent = list(range(len(partners)))

    def root(index):
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    for index, partner in enumerate(partners):
        parent[root(index)] = root(int(partner))
    groups: dict[int, list[int]] = {}
    for index in range(len(partners)):
        groups.setdefault(root(index), []).append(index)
    return sorted(groups.values())


class AlteredImages(Sequence):
    """The altered images of one image attack: ``images[i]`` is image ``i``'s altered copy, decoded.

    The first access makes every altered image (group by group, :func:`alteration_groups`, on ``workers``
    threads) and keeps their JPEG bytes (tens of kB each at 384 x 384); each access hands one over and
    forgets it, so the bytes held shrink as the embedding loop reads them. An image read a second time is made
    again, with its group.

    Args:
        source: a :class:`~rococo_eval.data.source.Source` with images (anything with ``num_images``,
            ``original_image(i)`` and ``alteration(i, attack)``).
        attack: an image attack of ``source``, e.g. ``"mix_seed1"``.
        workers: threads that make groups at once (0: the calling thread makes them).

    Example:
        >>> from rococo_eval.data.source import RococoSource
        >>> images = AlteredImages(RococoSource(), "mix_seed1")
        >>> len(images), len(images.groups), max(map(len, images.groups)) <= 64
        (5000, 382, True)
    """

    def __init__(self, source, attack: str, workers: int = 0):
        if not isinstance(workers, int) or workers < 0:
            raise ValueError(f"`workers` must be a non-negative int, got {workers!r}")
        self.source, self.attack, self.workers = source, attack, workers
        self.alterations = [source.alteration(index, attack) for index in range(source.num_images)]
        self.groups = alteration_groups([partner for partner, _ in self.alterations])
        self._group_of = {index: group for group in self.groups for index in group}
        self._made: dict[int, bytes] = {}
        self._lock = threading.Lock()
        self._started = False
        self._stop = threading.Event()

    def __len__(self):
        return len(self.alterations)

    @property
    def image_files(self) -> list[str]:
        """The file of the original each altered copy was made from (whose name the official script keeps)."""
        return self.source.image_files

    def __getitem__(self, index) -> Image.Image:
        return decode_image(self.jpeg(index), f"the altered copy of image {index}")

    def jpeg(self, index: int) -> bytes:
        """The JPEG bytes of image ``index``'s altered copy, as the official script saves it."""
        index = int(index)
        with self._lock:
            if not self._started:
                self._started = True
                self._made.update(self._make_all())
            data = self._made.pop(index, None)
        if data is None:  # read again (the ITM stage re-reads images): keep the group's others for their turn
            made = self.make_group(self._group_of[index])
            data = made.pop(index)
            with self._lock:
                for other, jpeg in made.items():
                    self._made.setdefault(other, jpeg)
        return data

    def stop(self) -> None:
        """Stop making the altered images ahead (the embedding loop calls it when it ends, early on Ctrl-C):
        groups not begun are left out, and made when one of their images is read."""
        self._stop.set()

    def make_group(self, group: Sequence[int]) -> dict[int, bytes]:
        """The altered JPEG bytes of every image of ``group``, each original decoded and resized once.

        Example:
            >>> from rococo_eval.data.source import RococoSource
            >>> AlteredImages(RococoSource(), "mix_seed1").make_group([0])  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ValueError: this RococoSource has no `images_dir`: ...
        """
        resized = {index: resize(self.source.original_image(index)) for index in group}
        made = {}
        for index in group:
            partner, box = self.alterations[index]
            method = "mix" if box is None else "patch"
            made[index] = encode_jpeg(alter_image(resized[index], resized[partner], method, box=box))
        return made

    def _make_unless_stopped(self, group: Sequence[int]) -> dict[int, bytes]:
        return {} if self._stop.is_set() else self.make_group(group)

    def _make_all(self) -> dict[int, bytes]:
        started = time.perf_counter()
        made: dict[int, bytes] = {}
        if self.workers == 0:
            for group in self.groups:
                made.update(self._make_unless_stopped(group))
        else:
            with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="rococo-alter") as pool:
                for result in pool.map(self._make_unless_stopped, self.groups):
                    made.update(result)
        seconds = time.perf_counter() - started
        logger.info("%s: %d altered images made in %.1f s (%.0f images/s, %.0f MB of JPEG held)", self.attack,
                    len(made), seconds, len(made) / max(seconds, 1e-9), sum(map(len, made.values())) / 1e6)
        return made
