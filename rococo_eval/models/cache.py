"""Embeddings of item sets (captions, images), cached on disk per model: resumable at batch granularity.

An item set (:class:`ItemSet`) is embedded once per model; :mod:`rococo_eval.scoring.galleries` names RoCOCO's
item sets and scores every gallery from their embeddings.

The cache keeps one folder per model fingerprint and item set::

    <root>/<model fingerprint>/<item set>-<data fingerprint>/
        manifest.json                         what the folder holds (item set, fingerprints, count; model name)
        rows-000000-000256.<digest>.npy ...   one shard per encoded batch, while the set is incomplete
        embeddings.<digest>.npy               all rows (float32), once complete; the shards are then removed

The model's fingerprint digests its weights and the settings that shape its embeddings, never the path it was
loaded from: a checkpoint copied or moved elsewhere finds its embeddings, and other weights at the same path get a
folder of their own. The manifest names the model it was written for, for people to read; that name is not compared.

Each shard is written to a temporary file and renamed into place, so an interrupted run (Ctrl-C) loses at
most the batch in flight and the next run encodes only the rows no shard holds yet.

**Corruption is noticed, never used.** Each file's name carries the digest of its bytes
(:func:`rococo_eval.io.atomic.write_checked`), and every read checks it, then the array's dtype (float32), shape (its
rows, one width) and values (finite; non-finite embeddings are refused when written). A shard that fails is
dropped and encoded again; a finished file that fails is dropped, with a warning naming it, and the set is embedded
again. A damaged ``manifest.json`` is written anew. Checking costs one sha256 pass over what is read (about 0.5 s
for RoCOCO's 160,010 embeddings at 512 dimensions on this project's CPU; ``docs/performance.md``).

Example:
    >>> import tempfile
    >>> class Letters:  # any object with a name, a fingerprint and encode_texts / encode_images
    ...     name, fingerprint = "letters", "0" * 64
    ...     def encode_texts(self, texts):
    ...         return np.array([[float(ord(t[0])), 1.0] for t in texts], dtype=np.float32)
    >>> cache = EmbeddingCache(tempfile.mkdtemp(), batch_size=2)
    >>> items = ItemSet("captions/demo", "text", ["a", "b", "c"])
    >>> cache.embeddings(Letters(), items)[:, 0].tolist()
    [97.0, 98.0, 99.0]
    >>> cache.is_complete(Letters(), items)
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import re
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
from tqdm.auto import tqdm

from rococo_eval.io.atomic import checked_stem, open_cache_folder, read_checked, write_checked
from rococo_eval.models.protocol import PREPROCESSING_HOOKS, TOKENIZING_HOOKS, offers
from rococo_eval.models.similarity import finite_rows
import rococo_eval.validity as validity

logger = logging.getLogger(__name__)

COMPLETE = "embeddings"  # the stem of a finished file: embeddings.<digest>.npy
KINDS = ("text", "image")
DEFAULT_BATCH_SIZE = 256
_SHARD = re.compile(r"rows-(\d+)-(\d+)")  # a shard's stem


@dataclass(frozen=True)
class ItemSet:
    """A sequence of captions or images to embed, with a name and a fingerprint of its content.

    Attributes:
        name: what it is, e.g. ``"captions/ground_truth"`` or ``"images/mix_seed1"``.
        kind: ``"text"`` or ``"image"`` (which ``encode_`` method embeds it).
        items: the captions, or anything indexable whose ``items[i]`` is a PIL image (loaded on demand).
        fingerprint: digest of the content; defaults to the digest of ``items`` when they are strings.
    """

    name: str
    kind: str
    items: Sequence
    fingerprint: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"`kind` must be one of {KINDS}, got {self.kind!r}")
        if not self.fingerprint:
            if self.kind != "text":
                raise ValueError("`fingerprint` is required for image item sets")
            object.__setattr__(self, "fingerprint", digest_strings(self.items))

    def __len__(self):
        return len(self.items)


class LazyImages(Sequence):
    """``images[i]`` calls ``load(i)``: a sequence of images read only when the cache needs them; ``image_files``
    names them (the annotation file's paths), when known."""

    def __init__(self, load: Callable[[int], object], count: int, image_files: Optional[Sequence[str]] = None):
        self.load, self.count, self.image_files = load, count, image_files

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        return self.load(index)


class EmbeddingCache:
    """Embeddings on disk, per model fingerprint and item set; resumable at batch granularity.

    Args:
        root: the cache folder (created if needed).
        batch_size: items per ``encode_`` call, and rows per shard.
        workers: threads that load images ahead of the model (0: load in the calling thread). For a model
            with ``preprocess_image`` and ``encode_preprocessed``
            (:class:`~rococo_eval.models.protocol.PreprocessingModel`)
            they also turn each image into model input, written straight into the batch; other models get the
            images (``encode_images``). At most three batches are loaded or encoded at a time. With any workers,
            a model with ``tokenize_texts`` and ``encode_tokenized``
            (:class:`~rococo_eval.models.protocol.TokenizingModel`)
            has its next captions tokenized in one more thread while it encodes this batch.
        progress: show a tqdm progress bar per item set. Either way each item set logs (INFO) one line when
            done, with its rate.
    """

    def __init__(self, root, batch_size: int = DEFAULT_BATCH_SIZE, workers: int = 0, progress: bool = False):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive int, got {batch_size!r}")
        if not isinstance(workers, int) or workers < 0:
            raise ValueError(f"`workers` must be a non-negative int, got {workers!r}")
        self.root = Path(root)
        self.batch_size = batch_size
        self.workers = workers
        self.progress = progress

    def folder(self, model, items: ItemSet) -> Path:
        """The folder holding ``model``'s embeddings of ``items`` (of what the model embeds for them:
        :func:`model_inputs`)."""
        items = model_inputs(model, items)
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", items.name)
        return self.root / model.fingerprint[:20] / f"{safe}-{items.fingerprint[:16]}"

    def is_complete(self, model, items: ItemSet) -> bool:
        """Whether a finished file of ``items`` is cached for ``model`` (its content is checked when it is read)."""
        return bool(_finished_files(self.folder(model, items)))

    def embeddings(self, model, items: ItemSet) -> np.ndarray:
        """Return ``model``'s float32 embeddings of ``items``, one row per item, encoding only what is missing."""
        items = model_inputs(model, items)
        folder = self._open(model, items)
        vectors = _read_finished(folder, len(items))
        if vectors is not None:
            logger.info("%s: %d embeddings from the cache", items.name, len(items))
            return vectors
        shards = _read_shards(folder, len(items))
        missing = _missing_ranges(shards, len(items))
        batches = [(start, min(start + self.batch_size, stop))
                   for start, stop in missing for start in range(start, stop, self.batch_size)]
        self._encode(model, items, folder, batches, shards)
        vectors = np.concatenate([shards[key][1] for key in sorted(shards)])
        _save_rows(folder, COMPLETE, vectors)
        for path, _ in shards.values():
            path.unlink(missing_ok=True)
        return vectors

    def encode_share(self, model, items: ItemSet, rank: int, world: int) -> None:
        """Encode ``rank``'s share of ``items`` (of ``world`` processes) into shards, for :meth:`embeddings` to join.

        The batches are those of one process (rows ``0:batch_size``, ``batch_size:2*batch_size``, ...), split into
        contiguous runs of batches (:func:`rococo_eval.processes.share`), so that every world size embeds each row
        in the same batch, and no row twice. A batch that shards already hold is skipped (a resumed run); the
        folder is left for one process to join once every process is done.
        """
        from rococo_eval.processes import share

        items = model_inputs(model, items)
        folder = self._open(model, items)
        if _finished_files(folder):
            return
        grid = [(start, min(start + self.batch_size, len(items))) for start in range(0, len(items), self.batch_size)]
        shards = _read_shards(folder, len(items), drop=False)
        missing = _missing_ranges(shards, len(items))
        batches = [(start, stop) for start, stop in (grid[index] for index in share(len(grid), rank, world))
                   if any(first < stop and start < last for first, last in missing)]
        self._encode(model, items, folder, batches, shards)

    def _open(self, model, items: ItemSet) -> Path:
        folder = self.folder(model, items)
        manifest = {"model_fingerprint": model.fingerprint, "items": items.name, "kind": items.kind,
                    "items_fingerprint": items.fingerprint, "count": len(items)}
        open_cache_folder(folder, manifest, "embeddings", shown={"model": model.name})
        return folder

    def _encode(self, model, items: ItemSet, folder: Path, batches, shards: dict) -> None:
        """Encode ``batches`` (row ranges) of ``items``, each written as a shard of ``folder`` and added to
        ``shards``."""
        done = len(items) - sum(stop - start for start, stop in batches)
        logger.info("%s: %d of %d embeddings to encode", items.name, len(items) - done, len(items))
        if items.kind == "text":
            tokenized = offers(model, TOKENIZING_HOOKS)
            encode = model.encode_tokenized if tokenized else model.encode_texts
            loaded = _prepared(batches, items.items, model.tokenize_texts if tokenized else list,
                               threaded=tokenized and self.workers > 0)
        else:
            preprocessed = offers(model, PREPROCESSING_HOOKS)
            encode = model.encode_preprocessed if preprocessed else model.encode_images
            loaded = _loaded(batches, items.items, self.workers, model.preprocess_image if preprocessed else None)
        started = time.perf_counter()
        with tqdm(total=len(items), initial=done, desc=items.name, unit=items.kind,
                  disable=not self.progress, dynamic_ncols=True) as bar, contextlib.closing(loaded):
            for (start, stop), batch in loaded:  # closed on an error too: its threads stop before it propagates
                rows = _check_vectors(encode(batch), stop - start, model.name, encode.__name__)
                shards[(start, stop)] = (_save_rows(folder, f"rows-{start:06d}-{stop:06d}", rows), rows)
                bar.update(stop - start)
        seconds, encoded = time.perf_counter() - started, len(items) - done
        logger.info("%s: %d %ss embedded in %.1f s (%.0f %ss/s)", items.name, encoded, items.kind, seconds,
                    encoded / max(seconds, 1e-9), items.kind)


def model_inputs(model, items: ItemSet) -> ItemSet:
    """What ``model`` embeds for ``items``: ``model.item_inputs(items)`` when the model has that hook (VSE infinity's
    region variant gives an image set's precomputed region features, with a fingerprint of their own), else
    ``items``. The hook returns an item set of the same name, kind and length, and gives it back unchanged when
    handed its own result."""
    hook = getattr(model, "item_inputs", None)
    if hook is None:
        return items
    inputs = hook(items)
    if inputs.name != items.name or inputs.kind != items.kind or len(inputs) != len(items):
        raise ValueError(f"model {model.name!r}: item_inputs({items.name!r}) gave {inputs.name!r} ({inputs.kind}, "
                         f"{len(inputs)} items), not {items.kind} items of the same set")
    return inputs


def embeddings_of_all(cache: EmbeddingCache, model, item_sets: dict, processes=None) -> dict[str, np.ndarray]:
    """``model``'s embeddings of each item set of ``item_sets`` (``{key: ItemSet}``), by key.

    With :class:`~rococo_eval.processes.Processes` of several, each process first encodes its share of every
    set (:meth:`EmbeddingCache.encode_share`); after one barrier rank 0 joins each set's shards (encoding any
    row still missing itself), and after a second every other process reads the joined sets. The processes meet
    twice, between the stages, and the cache folder must be one that they all see.
    """
    if processes is None or processes.world == 1:
        return {key: cache.embeddings(model, items) for key, items in item_sets.items()}
    for items in item_sets.values():
        cache.encode_share(model, items, processes.rank, processes.world)
    processes.barrier()
    vectors = {key: cache.embeddings(model, items) for key, items in item_sets.items()} if processes.is_main else {}
    processes.barrier()
    if not processes.is_main:
        unseen = [items.name for items in item_sets.values() if not cache.is_complete(model, items)]
        if unseen:
            raise ValueError(f"rank 0 joined {unseen[0]!r} in the cache folder {str(cache.root)!r}, "
                             "but this process does not see it there: every process needs the same cache folder "
                             "(--cache-dir on a file system that all the machines share)")
        vectors = {key: cache.embeddings(model, items) for key, items in item_sets.items()}
    return vectors


def weights_digest(module) -> str:
    """Hex digest of a torch module's state dict: names, shapes, dtypes and bytes.

    Example:
        >>> import torch
        >>> a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
        >>> _ = b.load_state_dict(a.state_dict())
        >>> weights_digest(a) == weights_digest(b), weights_digest(a) == weights_digest(torch.nn.Linear(2, 2))
        (True, False)
    """
    import torch

    digest = hashlib.blake2b(digest_size=20)
    for key, tensor in sorted(module.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{key}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(tensor.view(torch.uint8).numpy())
    return digest.hexdigest()


def digest_strings(values: Sequence[str]) -> str:
    """Hex sha256 of a sequence of strings (each one length-prefixed, so the split is part of the digest).

    Example:
        >>> digest_strings(["ab", "c"]) == digest_strings(["a", "bc"])
        False
    """
    digest = hashlib.sha256()
    for value in values:
        data = value.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def _read_shards(folder: Path, count: int, drop: bool = True) -> dict[tuple[int, int], tuple[Path, np.ndarray]]:
    """The shards already written, by row range, each checked (:func:`_read_rows`) and with its rows. A shard that
    fails, overlaps another or has another width than the others is dropped with a warning naming it (deleted,
    unless ``drop`` is false: while other processes write their shards, only the one that joins them deletes)."""
    shards, widths = {}, {}
    for path in sorted(folder.glob("rows-*.npy")):
        match = _SHARD.fullmatch(checked_stem(path) or "")
        start, stop = (int(match[1]), int(match[2])) if match else (0, 0)
        overlaps = any(start < b and a < stop for a, b in shards)
        problem = ("has no digest of its content in its name (an earlier version's shard)" if checked_stem(path) is None
                   else "not a shard of this set's rows" if not match or stop > count or start >= stop
                   else "overlaps another shard" if overlaps else None)
        rows = None
        if problem is None:
            try:
                rows = _read_rows(path, stop - start)
            except (OSError, ValueError) as error:
                problem = str(error)
        if problem is not None:
            validity.warn("cache shard %s is dropped (its rows are embedded again): %s", path, problem)
            if drop:
                path.unlink(missing_ok=True)
            continue
        shards[(start, stop)] = (path, rows)
        widths.setdefault(rows.shape[1], []).append((start, stop))
    if len(widths) > 1:  # written by one model, so one width: the others' shards are not this model's rows
        width = max(widths, key=lambda value: len(widths[value]))
        for key in [key for value, keys in widths.items() if value != width for key in keys]:
            path, _ = shards.pop(key)
            validity.warn("cache shard %s is dropped (its rows are embedded again): its rows are not %d wide as the "
                          "others", path, width)
            if drop:
                path.unlink(missing_ok=True)
    return shards


def _finished_files(folder: Path) -> list[Path]:
    return [path for path in sorted(folder.glob(f"{COMPLETE}*.npy")) if checked_stem(path) == COMPLETE]


def _read_finished(folder: Path, count: int) -> Optional[np.ndarray]:
    """The finished embeddings of the set, checked; None when there are none, or when they fail their checks (then
    dropped with a warning naming the file, so that the set is embedded again). A finished file of an earlier
    version, without a digest in its name, is adopted (:func:`_adopt_finished`)."""
    for stale in folder.glob(f"{COMPLETE}.npy"):
        _adopt_finished(stale, count)
    for path in _finished_files(folder):
        try:
            return _read_rows(path, count)
        except (OSError, ValueError) as error:
            validity.warn("cached embeddings %s are dropped and embedded again: %s", path, error)
            path.unlink(missing_ok=True)
    return None


def _adopt_finished(stale: Path, count: int) -> None:
    """Adopt an earlier version's finished file (``embeddings.npy``, with no digest in its name): when it holds
    ``count`` finite float32 rows, it is written again under its digest (with a warning: its bytes before now cannot
    be checked); otherwise it is dropped, and the set embedded again. Either way the old name goes."""
    try:
        rows = np.load(stale, allow_pickle=False)
        if rows.dtype != np.float32 or rows.ndim != 2 or rows.shape[0] != count or rows.shape[1] < 1:
            raise ValueError(f"holds {rows.dtype} of shape {rows.shape}, not {count} float32 rows")
        if not np.isfinite(rows).all():
            raise ValueError("holds non-finite values")
        adopted = _save_rows(stale.parent, COMPLETE, rows)
        logger.warning("%s (an earlier version's cache, without a digest of its content) is kept as %s: its dtype, "
                       "shape and values were checked, its bytes cannot be", stale, adopted.name)
    except (OSError, ValueError, EOFError) as error:
        validity.warn("%s (an earlier version's cache) is dropped and embedded again: %s", stale, error)
    stale.unlink(missing_ok=True)


def _read_rows(path: Path, count: int) -> np.ndarray:
    """The rows of checked file ``path``: its bytes match its name's digest, and they hold ``count`` finite float32
    rows of one width.

    Raises:
        ValueError: naming the file and what is wrong with it.
    """
    data = read_checked(path)
    try:
        rows = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise ValueError(f"{path}: not a readable .npy file ({error})") from None
    if rows.dtype != np.float32 or rows.ndim != 2 or rows.shape[0] != count or rows.shape[1] < 1:
        raise ValueError(f"{path}: holds {rows.dtype} of shape {rows.shape}, not {count} float32 rows")
    if not np.isfinite(rows).all():
        raise ValueError(f"{path}: holds non-finite values")
    return rows


def _missing_ranges(shards, count: int) -> list[tuple[int, int]]:
    """The row ranges of ``range(count)`` that no shard covers.

    Example:
        >>> _missing_ranges({(2, 4): None, (6, 7): None}, 8)
        [(0, 2), (4, 6), (7, 8)]
    """
    missing, position = [], 0
    for start, stop in sorted(shards):
        if start > position:
            missing.append((position, start))
        position = max(position, stop)
    if position < count:
        missing.append((position, count))
    return missing


def _loaded(batches, items: Sequence, workers: int, prepare: Optional[Callable] = None,
            ahead: int = 2) -> Iterator[tuple[tuple[int, int], object]]:
    """Each batch range with its items: a list, or with ``prepare`` one array of ``prepare(item)`` rows.

    With ``workers`` threads, the items (and ``prepare``) of the next ``ahead`` batches are loaded while the
    caller encodes this one, each row written straight into its batch's array.

    Example:
        >>> [(rows, batch.tolist()) for rows, batch in _loaded([(0, 2), (2, 3)], [1, 2, 3], 2, np.atleast_1d)]
        [((0, 2), [[1], [2]]), ((2, 3), [[3]])]
    """
    if workers == 0:
        for start, stop in batches:
            batch = _Batch(stop - start, prepare)
            for row, index in enumerate(range(start, stop)):
                batch.load(items, index, row)
            yield (start, stop), batch.rows
        return
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rococo-load")
    pending = deque()
    try:
        for start, stop in batches:
            batch = _Batch(stop - start, prepare)
            futures = [pool.submit(batch.load, items, index, row) for row, index in enumerate(range(start, stop))]
            pending.append(((start, stop), batch, futures))
            if len(pending) > ahead:
                yield _finished(pending.popleft())
        while pending:
            yield _finished(pending.popleft())
    finally:
        getattr(items, "stop", lambda: None)()  # AlteredImages: make nothing more ahead (Ctrl-C answers at once)
        pool.shutdown(wait=True, cancel_futures=True)


def _prepared(batches, items: Sequence, prepare: Callable, threaded: bool,
              ahead: int = 4) -> Iterator[tuple[tuple[int, int], object]]:
    """Each batch range with ``prepare(items[start:stop])``; when ``threaded``, the next ``ahead`` batches are
    prepared in one thread while the caller encodes this one (a tokenizer ahead of its model).

    Example:
        >>> list(_prepared([(0, 2), (2, 3)], "abc", str.upper, threaded=True))
        [((0, 2), 'AB'), ((2, 3), 'C')]
    """
    if not threaded:
        for start, stop in batches:
            yield (start, stop), prepare(items[start:stop])
        return
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rococo-tokenize")
    pending = deque()
    try:
        for start, stop in batches:
            pending.append(((start, stop), pool.submit(prepare, items[start:stop])))
            if len(pending) > ahead:
                rows, future = pending.popleft()
                yield rows, future.result()
        while pending:
            rows, future = pending.popleft()
            yield rows, future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class _Batch:
    """One batch being loaded: a list of items, or (with ``prepare``) an array allocated at the first row."""

    def __init__(self, size: int, prepare: Optional[Callable]):
        self.size, self.prepare = size, prepare
        self.rows = [None] * size if prepare is None else None
        self.lock = threading.Lock()

    def load(self, items: Sequence, index: int, row: int) -> None:
        item = items[index]
        if self.prepare is None:
            self.rows[row] = item
            return
        values = self.prepare(item)
        if self.rows is None:
            with self.lock:
                if self.rows is None:
                    self.rows = np.empty((self.size,) + values.shape, dtype=values.dtype)
        self.rows[row] = values


def _finished(entry):
    rows, batch, futures = entry
    for future in futures:
        future.result()
    return rows, batch.rows


def _check_vectors(vectors, rows: int, model_name: str, method: str) -> np.ndarray:
    """``method``'s output for a batch of ``rows`` items as float32 rows (:func:`~rococo_eval.models.similarity.
    finite_rows`), one per item."""
    vectors = finite_rows(vectors, model_name, method)
    if vectors.shape[0] != rows:
        raise ValueError(f"model {model_name!r}: {method} returned {vectors.shape[0]} rows for a batch of {rows}")
    return vectors


def _save_rows(folder: Path, stem: str, rows: np.ndarray) -> Path:
    """Write ``rows`` as the checked file ``<stem>.<digest>.npy`` in ``folder``."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(rows, dtype=np.float32), allow_pickle=False)
    return write_checked(folder, stem, "npy", buffer.getvalue())
