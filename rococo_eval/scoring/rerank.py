"""Two-stage scoring of a gallery, as BLIP's official ``evaluation()`` does it, with a disk cache of ITM scores.

Stage one ranks the whole gallery of every query by the model's contrastive (ITC) similarity. Stage two runs
the model's image-text matching (ITM) head on each query's top ``k`` candidates (image-to-text: the top
captions of each image; text-to-image: the top images of each caption). The gallery's score matrix is then,
exactly as in the official code::

    scores = full((queries, gallery), -100.0)          # float32
    scores[q, top_k(itc[q])] = itm_logit[:, 1] + itc[q, top_k]

(``sims.topk(k)`` on the ITC row; ITM logit of class 1, not a probability). Ties of the ITC scores at the
k-th place are broken by ``torch.topk``, here as there (on another device, possibly otherwise).

An ITM score depends only on its (image, caption) pair, and RoCOCO's galleries share most of theirs: the
ground-truth captions are in all four text galleries and the test images in all six image galleries. So
every ITM score is kept on disk, per model, image set and caption set (:class:`PairStore`), beside the
embedding cache, and no pair is computed twice, across galleries or across runs. The store is written in
shards, each renamed into place, so Ctrl-C loses at most the group of pairs in flight.

The pairs of a gallery that no earlier gallery of the run needed are sorted by image and cut into groups of whole
images (:func:`_groups`); a group (less any pair the store already holds) is the unit of work, of storage and of
resuming, and the same groups are made for any number of processes. Launched as several processes
(:mod:`rococo_eval.processes`), each computes a contiguous share of the groups into the store; they meet before
and after the ITM stage of each image set x caption set of a gallery (two barriers, at most four per gallery).

Example:
    >>> class Toy:  # ITC: dot product; ITM: 10 for the pair (image i, caption i), else 0
    ...     name, fingerprint = "toy", "0" * 64
    ...     def itc_scores(self, images, texts): return images @ texts.T
    ...     def tokenize(self, texts): return np.array([[int(text)] for text in texts])
    ...     def image_features(self, images): return np.array(images)
    ...     def match(self, features, positions, tokens):
    ...         return np.float32(10) * (features[positions] == tokens[:, 0])
    >>> import tempfile
    >>> from rococo_eval.layout import gallery_layout
    >>> layout = gallery_layout("clean", "image_to_text", [1, 1, 1])
    >>> images = Side("images/demo", "0" * 16, [0, 1, 2], np.eye(3, dtype=np.float32))
    >>> captions = Side("captions/demo", "1" * 16, ["0", "1", "2"], np.array([[1, 0, .25], [.5, 1, 0], [0, .5, 1]],
    ...                                                                       dtype=np.float32))
    >>> scorer = Reranker(Toy(), tempfile.mkdtemp(), k=2)
    >>> scorer.scores(layout, images, [captions]).tolist()
    [[11.0, 0.5, -100.0], [-100.0, 11.0, 0.5], [0.25, -100.0, 11.0]]
    >>> scorer.computed, scorer.reused
    (6, 0)
"""

from __future__ import annotations

import io
import logging
import re
import time
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm

import rococo_eval.validity as validity
from rococo_eval.catalog import IMAGE_TO_TEXT
from rococo_eval.io.atomic import checked_stem, open_cache_folder, read_checked, write_checked
from rococo_eval.layout import gallery_vectors
from rococo_eval.processes import ONE, share

logger = logging.getLogger(__name__)

DEFAULT_CANDIDATES = 256  # k_test of BLIP's COCO retrieval config, used by RoCOCO: candidates re-scored per query
FILL = -100.0  # the official score of every candidate outside the top k
_SHARD = re.compile(r"pairs-(\d+)(?:-rank\d+)?")  # a shard's stem: pairs-<n>[-rank<r>].<digest>.npz
_PAIRS_PER_SHARD = 16384  # pairs per stored shard: what Ctrl-C can lose


@dataclass(frozen=True)
class Side:
    """One set of items as the scorer sees it: its name and fingerprint (which name its stored pairs), the
    items themselves (captions, or a sequence whose ``items[i]`` is a PIL image) and their ITC embeddings."""

    name: str
    fingerprint: str
    items: Sequence
    vectors: np.ndarray


class PairStore:
    """ITM logits of (image, caption) pairs of one model, image set and caption set, on disk.

    Pairs are keyed by their indices in the two sets. Each :meth:`add` writes one shard, renamed into place, whose
    name carries the digest of its bytes (:func:`rococo_eval.io.atomic.write_checked`); :meth:`compact` merges the
    shards into one. A shard that fails its checks when read (its digest, its arrays' dtypes and lengths, finite
    logits) is dropped with a warning naming it, and its pairs are computed again. ``manifest`` says what the
    store holds, ``shown`` is written beside it and not compared (the model's name: see
    :func:`rococo_eval.io.atomic.open_cache_folder`).

    Example:
        >>> import tempfile
        >>> store = PairStore(Path(tempfile.mkdtemp()) / "pairs", {"images": "a", "captions": "b"}, num_captions=10)
        >>> store.add(np.array([0, 1]), np.array([3, 4]), np.array([0.5, -1.0], dtype=np.float32))
        >>> found, values = store.lookup(np.array([1, 0, 2]), np.array([4, 3, 3]))
        >>> found.tolist(), values[found].tolist()
        ([True, True, False], [-1.0, 0.5])
    """

    def __init__(self, folder, manifest: dict, num_captions: int, shard_suffix: str = "", shown: dict | None = None):
        self.folder = Path(folder)
        self.num_captions = int(num_captions)
        self.shard_suffix = shard_suffix  # "-rank<r>" when several processes write shards side by side
        open_cache_folder(self.folder, manifest, "ITM scores", shown)
        self.keys, self.values = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._read: set[str] = set()
        self._next = 0
        self.refresh()

    def refresh(self) -> None:
        """Read the shards that other processes wrote since this store last looked (all of them the first time).
        A stored pair keeps the value read first."""
        for path in sorted(self.folder.glob("pairs-*.npz")):
            if path.name in self._read:
                continue
            match = _SHARD.fullmatch(checked_stem(path) or "")
            if match:  # numbered past every shard, readable or not, so that no new shard takes an old name
                self._next = max(self._next, int(match[1]) + 1)
            try:
                if match is None:
                    raise ValueError("not a checked shard of this store (an earlier version's has no digest of its "
                                     "content in its name)")
                self._pending.append(_read_pairs(path))
            except (OSError, ValueError) as error:
                validity.warn("ITM cache shard %s is dropped (its pairs are computed again): %s", path, error)
                if not self.shard_suffix:  # while other processes write, an unreadable shard is left alone
                    path.unlink(missing_ok=True)
                else:  # left alone, and read (and reported) once
                    self._read.add(path.name)
                continue
            self._read.add(path.name)

    def __len__(self):
        self._merge()
        return len(self.keys)

    def _set(self, keys, values):
        keys, first = np.unique(keys, return_index=True)
        self.keys, self.values = keys, values[first]

    def _merge(self):
        """Fold the shards added since the last look-up into the sorted keys (once, not once per shard)."""
        if self._pending:
            keys, values = zip(*self._pending)
            self._pending = []
            self._set(np.concatenate([self.keys, *keys]), np.concatenate([self.values, *values]))

    def lookup(self, images: np.ndarray, captions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each pair, whether it is stored and its logit (0 where it is not)."""
        self._merge()
        keys = images.astype(np.int64) * self.num_captions + captions
        where = np.minimum(np.searchsorted(self.keys, keys), max(len(self.keys) - 1, 0))
        found = (self.keys[where] == keys) if len(self.keys) else np.zeros(len(keys), dtype=bool)
        return found, np.where(found, self.values[where] if len(self.keys) else 0, 0).astype(np.float32)

    def add(self, images: np.ndarray, captions: np.ndarray, logits: np.ndarray) -> None:
        """Store the logits of these pairs in a new shard."""
        keys = images.astype(np.int64) * self.num_captions + captions
        logits = np.asarray(logits, dtype=np.float32)
        if not np.isfinite(logits).all():
            raise ValueError(f"ITM logits of {int((~np.isfinite(logits)).sum())} pair(s) are not finite: refused")
        path = _write_pairs(self.folder, f"pairs-{self._next:06d}{self.shard_suffix}", keys, logits)
        self._read.add(path.name)
        self._next += 1
        self._pending.append((keys, logits))

    def compact(self) -> None:
        """Merge every shard into one (the pairs stay the same)."""
        self.refresh()
        shards = sorted(self.folder.glob("pairs-*.npz"))
        if not shards or (len(shards) == 1 and "-rank" not in shards[0].name):
            return
        self._merge()
        path = _write_pairs(self.folder, f"pairs-{self._next:06d}", self.keys, self.values)
        self._read = {path.name}
        self._next += 1
        for shard in shards:
            if shard != path:
                shard.unlink(missing_ok=True)


def _write_pairs(folder: Path, stem: str, keys: np.ndarray, logits: np.ndarray) -> Path:
    buffer = io.BytesIO()
    np.savez(buffer, keys=keys, logits=logits)
    return write_checked(folder, stem, "npz", buffer.getvalue())


def _read_pairs(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A shard's keys and logits, checked: its bytes match its name's digest, it holds one-dimensional int64 keys
    and float32 logits of one length, non-negative keys and finite logits.

    Raises:
        ValueError: naming the file and what is wrong with it.
    """
    data = read_checked(path)
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as shard:
            keys, logits = shard["keys"], shard["logits"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as error:
        raise ValueError(f"{path}: not a readable shard ({error})") from None
    if (keys.dtype != np.int64 or logits.dtype != np.float32 or keys.ndim != 1 or keys.shape != logits.shape
            or (len(keys) and keys.min() < 0) or not np.isfinite(logits).all()):
        raise ValueError(f"{path}: holds keys {keys.dtype} {keys.shape} and logits {logits.dtype} {logits.shape}, not "
                         "as many non-negative int64 keys as finite float32 logits")
    return keys, logits


class Reranker:
    """Scores galleries in two stages (see the module docstring) and keeps the ITM scores in ``root``.

    Args:
        model: a :class:`~rococo_eval.models.protocol.TwoStageModel` (of it, ``name``, ``fingerprint``,
            ``itc_scores(image_vectors, text_vectors)``, ``tokenize(texts)``, ``image_features(images)`` and
            ``match(features, image_positions, tokens)`` are used; see :mod:`rococo_eval.models.blip`). ``match`` gets the pairs sorted by image, an image's pairs in
            consecutive calls on one ``image_features`` output, so that a model can compute an image's side once
            for all of them (BLIP's cross-attention keys and values).
        root: the cache folder; pairs go to ``<root>/<model fingerprint>/itm-<images>--<captions>/``.
        k: candidates re-scored per query (``k_test``).
        batch_size: pairs per ITM pass and images per vision pass.
        workers: threads that load images ahead of the model.
        progress: show a progress bar of pairs (with pairs per second).
        processes: the :class:`~rococo_eval.processes.Processes` of a launch of several: each computes its share
            of every gallery's groups of pairs, and they meet after each gallery's ITM stage. Every process then
            holds the gallery's scores. ``root`` must be a folder they all see.

    Attributes:
        computed, reused: ITM pairs computed (by all the processes together), and read from the store, so far.
    """

    def __init__(self, model, root, k: int = DEFAULT_CANDIDATES, batch_size: int = 256, workers: int = 0,
                 progress: bool = False, processes=ONE):
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"`k` must be a positive int, got {k!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive int, got {batch_size!r}")
        self.model, self.root, self.k = model, Path(root), k
        self.batch_size, self.workers, self.progress = batch_size, workers, progress
        self.processes = processes
        self.computed = self.reused = 0
        self._stores: dict[tuple[str, str], PairStore] = {}
        self._planned: dict[Path, np.ndarray] = {}  # a store's folder -> the pairs this run's galleries needed
        self._tokens: dict[tuple[str, str], np.ndarray] = {}

    def store(self, images: Side, captions: Side) -> PairStore:
        """The pair store of ``images`` x ``captions`` for this model."""
        key = (f"{images.name}-{images.fingerprint[:16]}", f"{captions.name}-{captions.fingerprint[:16]}")
        if key not in self._stores:
            safe = "--".join(re.sub(r"[^A-Za-z0-9_.-]+", "-", part) for part in key)
            manifest = {"model_fingerprint": self.model.fingerprint, "images": images.name,
                        "images_fingerprint": images.fingerprint, "captions": captions.name,
                        "captions_fingerprint": captions.fingerprint}
            suffix = f"-rank{self.processes.rank}" if self.processes.world > 1 else ""
            self._stores[key] = PairStore(self.root / self.model.fingerprint[:20] / f"itm-{safe}", manifest,
                                          len(captions.items), suffix, shown={"model": self.model.name})
        return self._stores[key]

    def scores(self, layout, queries: Side, pool: Sequence[Side]) -> np.ndarray:
        """The whole score matrix of one gallery (queries x gallery, official order), float32, after every ITM score
        it needs is stored. Arguments as :meth:`rerank`."""
        columns, itc, logits = self.rerank(layout, queries, pool)
        matrix = np.empty((layout.num_queries, layout.num_gallery), dtype=np.float32)
        for start, rows in full_blocks(columns, logits + itc, layout.num_gallery):
            matrix[start:start + len(rows)] = rows
        return matrix

    def rerank(self, layout, queries: Side, pool: Sequence[Side]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each query's top-k gallery columns by ITC, their ITC scores and their ITM logits (all stored first):
        three ``(queries, k)`` arrays.

        Args:
            layout: the gallery's :class:`~rococo_eval.layout.GalleryLayout`; its ``gallery_rows`` index the
                concatenation of the ``pool`` sides' items.
            queries: the query side (the test images for image-to-text, the ground-truth captions otherwise).
            pool: the sides whose items make the gallery: originals, then the altered items if any.
        """
        k = min(self.k, layout.num_gallery)
        columns, itc = self._top_k(layout, queries, pool, k)
        offsets = np.cumsum([0] + [len(side.items) for side in pool])
        rows = layout.gallery_rows[columns]
        which = np.searchsorted(offsets, rows, side="right") - 1
        within = rows - offsets[which]
        query_index = np.repeat(np.arange(layout.num_queries), k).reshape(-1, k)
        logits = np.zeros(columns.shape, dtype=np.float32)
        for number, side in enumerate(pool):
            chosen = which == number
            if not chosen.any():
                continue
            if layout.direction == IMAGE_TO_TEXT:
                images, captions, image_rows, caption_rows = queries, side, query_index[chosen], within[chosen]
            else:
                images, captions, image_rows, caption_rows = side, queries, within[chosen], query_index[chosen]
            logits[chosen] = self._logits(images, captions, image_rows, caption_rows)
        return columns, itc, logits

    def finish(self) -> None:
        """After the last gallery: with several processes, wait for all, then rank 0 merges each store's shards."""
        if self.processes.world > 1:
            self.processes.barrier()
            if self.processes.is_main:
                for store in self._stores.values():
                    store.compact()

    def _top_k(self, layout, queries: Side, pool: Sequence[Side], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each query's k gallery columns of highest ITC score, and those scores (``torch.topk``, as the official
        code takes them)."""
        import torch  # the models that re-rank are torch models

        gallery = gallery_vectors([side.vectors for side in pool], layout.gallery_rows)
        block = _block_rows(layout.num_gallery)
        columns = np.empty((layout.num_queries, k), dtype=np.int64)
        itc = np.empty((layout.num_queries, k), dtype=np.float32)
        for start in range(0, layout.num_queries, block):
            rows = queries.vectors[start:start + block]
            sims = (self.model.itc_scores(rows, gallery) if layout.direction == IMAGE_TO_TEXT
                    else self.model.itc_scores(gallery, rows).T)
            values, top = torch.from_numpy(np.ascontiguousarray(sims, dtype=np.float32)).topk(k, dim=1)
            columns[start:start + len(rows)] = top.numpy()
            itc[start:start + len(rows)] = values.numpy()
        return columns, itc

    def _logits(self, images: Side, captions: Side, image_rows: np.ndarray, caption_rows: np.ndarray) -> np.ndarray:
        """ITM logits of the pairs (image_rows[i], caption_rows[i]): from the store, computing what is missing."""
        store = self.store(images, captions)
        found, logits = store.lookup(image_rows, caption_rows)
        self.reused += int(found.sum())
        needed = np.unique(image_rows.astype(np.int64) * store.num_captions + caption_rows)
        planned = self._planned.get(store.folder, np.zeros(0, dtype=np.int64))
        new = np.setdiff1d(needed, planned, assume_unique=True)  # sorted: by image, then caption
        self._planned[store.folder] = np.union1d(planned, new)
        new_images, new_captions = new // store.num_captions, new % store.num_captions
        stored, _ = store.lookup(new_images, new_captions)
        # the groups of the new pairs (the same for any number of processes), less what the store holds: a whole
        # group after a resumed run, single pairs when an earlier run needed other pairs (another k or attacks)
        kept = [(start, stop, ~stored[start:stop]) for start, stop in _groups(new_images, self.batch_size,
                                                                               _PAIRS_PER_SHARD)]
        kept = [(start, stop, missing) for start, stop, missing in kept if missing.any()]
        todo_images = np.concatenate([new_images[start:stop][m] for start, stop, m in kept] or [new_images[:0]])
        todo_captions = np.concatenate([new_captions[start:stop][m] for start, stop, m in kept] or [new_captions[:0]])
        ends = np.cumsum([int(missing.sum()) for _, _, missing in kept]).tolist()
        todo = list(zip([0] + ends[:-1], ends))
        self.computed += len(todo_images)
        self.processes.barrier()  # every process has read the store, so none reads another's shards of this gallery
        if todo:
            logger.info("%s x %s: %d ITM pairs to compute, %d from the cache", images.name, captions.name,
                        len(todo_images), int(found.sum()))
            self._compute(store, images, captions, todo_images, todo_captions, self._share_of(todo))
        if self.processes.world > 1:
            self.processes.barrier()  # every process has stored its share of this gallery's pairs
            store.refresh()
        elif todo:
            store.compact()
        found, logits = store.lookup(image_rows, caption_rows)
        if not found.all():
            raise ValueError(f"{int((~found).sum())} ITM scores of {images.name} x {captions.name} that the other "
                             f"processes computed are not in {str(store.folder)!r}: every process needs the same "
                             "cache folder (--cache-dir on a file system that all the machines share)")
        return logits

    def _share_of(self, groups: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """This process's contiguous share of ``groups``: those starting in its share of their pairs."""
        if self.processes.world == 1:
            return groups
        sizes = [stop - start for start, stop in groups]
        span = share(sum(sizes), self.processes.rank, self.processes.world)
        starts = np.cumsum([0] + sizes[:-1])
        return [group for group, first in zip(groups, starts) if span.start <= first < span.stop]

    def _compute(self, store: PairStore, images: Side, captions: Side, image_rows, caption_rows, groups) -> None:
        """Run the ITM head on the pairs (sorted by image) of ``groups`` (row ranges of whole images), one stored
        shard per group."""
        key = (captions.name, captions.fingerprint)
        if key not in self._tokens:  # each caption set is tokenized once, not once per pair
            self._tokens[key] = self.model.tokenize(list(captions.items))
        tokens = self._tokens[key]
        total = sum(stop - start for start, stop in groups)
        started = time.perf_counter()
        with tqdm(total=total, desc=f"ITM {images.name} x {captions.name}", unit="pair",
                  disable=not self.progress, dynamic_ncols=True) as bar, \
                ThreadPoolExecutor(max_workers=max(1, self.workers), thread_name_prefix="rococo-itm") as pool:
            for start, stop in groups:
                image_ids, positions = np.unique(image_rows[start:stop], return_inverse=True)
                pictures = list(pool.map(images.items.__getitem__, image_ids.tolist()))
                features = self.model.image_features(pictures)  # a group has at most batch_size images
                logits = []
                for first in range(start, stop, self.batch_size):
                    last = min(first + self.batch_size, stop)
                    logits.append(np.asarray(self.model.match(features, positions[first - start:last - start],
                                                              tokens[caption_rows[first:last]]), dtype=np.float32))
                    bar.update(last - first)
                logits = np.concatenate(logits)
                if not np.isfinite(logits).all():
                    raise ValueError(f"model {self.model.name!r} returned non-finite ITM scores")
                store.add(image_rows[start:stop], caption_rows[start:stop], logits)
        elapsed = time.perf_counter() - started
        logger.info("%d ITM pairs in %.1f s (%.0f pairs/s)", total, elapsed, total / max(elapsed, 1e-9))


def full_blocks(columns: np.ndarray, top_scores: np.ndarray, num_gallery: int) -> Iterator[tuple[int, np.ndarray]]:
    """The full score matrix of re-ranked candidates, as ``(first row, rows)`` blocks: :data:`FILL` everywhere but
    each query's ``columns``, which hold its ``top_scores`` (float32), as the official code fills it.

    Example:
        >>> [(start, rows.tolist()) for start, rows in full_blocks(np.array([[1]]), np.array([[2.5]]), 3)]
        [(0, [[-100.0, 2.5, -100.0]])]
    """
    block = _block_rows(num_gallery)
    for start in range(0, len(columns), block):
        stop = min(start + block, len(columns))
        scores = np.full((stop - start, num_gallery), FILL, dtype=np.float32)
        np.put_along_axis(scores, columns[start:stop], top_scores[start:stop], axis=1)
        yield start, scores


def _block_rows(num_gallery: int) -> int:
    """Query rows per block: the metric's rule for every score matrix (:func:`rococo_recall.score_block_rows`)."""
    from rococo_recall import score_block_rows  # the metric (with numpy only): loaded where a gallery is scored

    return score_block_rows(num_gallery)


def _groups(image_rows: np.ndarray, images_per_group: int, pairs_per_group: int) -> list[tuple[int, int]]:
    """Split pairs sorted by image into runs of whole images: at most ``images_per_group`` images, and about
    ``pairs_per_group`` pairs (more only when one image has more).

    Example:
        >>> _groups(np.array([0, 0, 0, 1, 2, 2]), images_per_group=2, pairs_per_group=4)
        [(0, 4), (4, 6)]
    """
    starts = np.flatnonzero(np.r_[True, image_rows[1:] != image_rows[:-1]]).tolist() + [len(image_rows)]
    groups, first, count = [], 0, 0
    for position, begin in enumerate(starts[:-1]):
        end = starts[position + 1]
        if count and (count == images_per_group or end - starts[first] > pairs_per_group):
            groups.append((starts[first], begin))
            first, count = position, 0
        count += 1
    if len(image_rows):
        groups.append((starts[first], len(image_rows)))
    return groups
