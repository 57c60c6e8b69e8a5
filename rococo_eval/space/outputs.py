"""Where the Space's files go: each request's folder kept by its content, all of them within one byte budget.

A request (an evaluation's report, a page of flipped queries) writes its files into a new folder, which
:meth:`OutputFolders.write` then names after its content, so that requests that write the same files (every click
on the synthetic example writes the same report) keep them once. Files that are the same for every request (the
synthetic example's score files) are written once per process (:meth:`OutputFolders.shared`).

Everything under the output folder's ``requests/``, ``staging/`` and ``shared/`` together stays within a byte
budget, ``$ROCOCO_SPACE_OUTPUT_MB`` megabytes (default :data:`DEFAULT_BUDGET_MB`; :func:`output_budget`). When a new
request's files would exceed it, the request folders used longest ago are removed first. A folder kept or handed
out in the last :data:`LIVE_S` seconds is never removed (its request may still be copying it into Gradio's cache,
from where the page downloads it); when only such folders are left, the new request is refused with a
``ValueError`` that says so. Request folders older than :data:`MAX_AGE_S` are removed as requests come.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from rococo_eval.io.scorefiles import human_size

MAX_AGE_S = 3600  # a request's folder (and Gradio's copy of its files) is removed after an hour
LIVE_S = 60  # a folder kept this recently may still be copied by its request: never removed to make room
BUDGET_ENV = "ROCOCO_SPACE_OUTPUT_MB"
# An evaluation of RoCOCO's full galleries keeps about 10 MB (the synthetic example's report folder 6.5 MB, its
# flipped queries' CSV and chart 3.2 MB), needed only until Gradio has copied the files it serves into its own
# cache, a second after the request. 1 GB holds about 100 such evaluations, a quarter of an hour of two at a time
# (17 s each), and is 2% of a Space's default 50 GB of disk, whose rest is left to the uploads in Gradio's cache.
DEFAULT_BUDGET_MB = 1024
REQUESTS, STAGING, SHARED = "requests", "staging", "shared"

Shared = TypeVar("Shared")


def output_budget() -> int:
    """The most bytes the Space's output folders may hold together: ``$ROCOCO_SPACE_OUTPUT_MB`` megabytes
    (default :data:`DEFAULT_BUDGET_MB`).

    Raises:
        ValueError: the variable is not a positive number.

    Example:
        >>> output_budget() == int(float(os.environ.get("ROCOCO_SPACE_OUTPUT_MB", "1024")) * 2**20)
        True
    """
    value = os.environ.get(BUDGET_ENV, "").strip() or str(DEFAULT_BUDGET_MB)
    try:
        megabytes = float(value)
    except ValueError:
        raise ValueError(f"${BUDGET_ENV} must be a number of megabytes, got {value!r}") from None
    if not 0 < megabytes < float("inf"):
        raise ValueError(f"${BUDGET_ENV} must be a positive number of megabytes, got {value!r}")
    return int(megabytes * 2**20)


class OutputFolders:
    """The Space's output folder ``root``: request folders kept by content, shared folders written once, all within
    ``budget`` bytes (default :func:`output_budget`). Safe to use from the server's threads at once.

    Example:
        >>> import tempfile
        >>> outputs = OutputFolders(Path(tempfile.mkdtemp()), budget=1000)
        >>> def report(folder):
        ...     (folder / "report.json").write_text("{}")
        ...     return [folder / "report.json"]
        >>> first, again = outputs.write(report), outputs.write(report)
        >>> first == again, outputs.used()  # the same files are kept once
        (True, 2)
        >>> outputs.write(lambda folder: [(folder / "big.bin").write_bytes(bytes(2000))])
        Traceback (most recent call last):
        ...
        ValueError: the Space's output folder is full: this request's files (2.0 KB) and those kept ...
    """

    def __init__(self, root: Path, budget: int | None = None):
        self.root = Path(root)
        self.budget = output_budget() if budget is None else budget
        self._lock = threading.Lock()
        self._shared_lock = threading.Lock()
        self._shared: dict[str, tuple[object, dict[Path, int]]] = {}

    def write(self, make: Callable[[Path], Sequence[Path | None]]) -> list[Path | None]:
        """Call ``make(folder)`` on a new, empty folder for one request's files, keep the folder by its content
        (:meth:`_keep`) and return the paths ``make`` returned (None stays None), in the folder kept.

        Raises:
            ValueError: the files would exceed the budget (see :meth:`_keep`); nothing of them is kept.
        """
        staging = self._staging()
        try:
            paths = make(staging)
            kept = self._keep(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return [None if path is None else kept / Path(path).relative_to(staging) for path in paths]

    def _staging(self) -> Path:
        """A new, empty folder for one request's files."""
        folder = self.root / STAGING
        folder.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=folder))

    def _keep(self, staging: Path) -> Path:
        """Keep the files written into ``staging`` (from :meth:`_staging`) and return the folder they are now in, named
        after their content: a folder of the same files already kept is handed out again, and ``staging`` removed.

        Raises:
            ValueError: the new files would exceed the budget even once every folder not used in the last
                :data:`LIVE_S` seconds is removed.
        """
        kept = self.root / REQUESTS / _digest(staging)
        with self._lock:
            now = time.time()
            self._remove_expired(now)
            if _sizes(kept) == _sizes(staging):
                shutil.rmtree(staging, ignore_errors=True)
                os.utime(kept)
                return kept
            shutil.rmtree(kept, ignore_errors=True)  # a folder of these files that lost some is written again
            self._make_room(_size(staging), now)
            kept.parent.mkdir(parents=True, exist_ok=True)
            staging.rename(kept)
            os.utime(kept)
            return kept

    def shared(self, name: str, make: Callable[[Path], Shared]) -> Shared:
        """What ``make(folder)`` returns, for files that are the same for every request (the synthetic example's
        score files): written once per process into ``shared/NAME`` and handed out again while they are all there
        as written; they count in the budget and are never removed to make room.

        Example:
            >>> import tempfile
            >>> outputs, written = OutputFolders(Path(tempfile.mkdtemp()), budget=1000), []
            >>> def example(folder):
            ...     written.append((folder / "scores.npy").write_bytes(b"0123"))
            ...     return folder / "scores.npy"
            >>> first, again = outputs.shared("example", example), outputs.shared("example", example)
            >>> first == again, first.read_bytes(), len(written), outputs.used()
            (True, b'0123', 1, 4)
            >>> first.unlink()  # a file lost is written again at the next request
            >>> outputs.shared("example", example).read_bytes(), len(written)
            (b'0123', 2)
        """
        with self._shared_lock:
            result, files = self._shared.get(name, (None, None))
            if files is None or any(_file_size(path) != size for path, size in files.items()):
                folder = self.root / SHARED / name
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir(parents=True)
                try:
                    result = make(folder)
                except BaseException:
                    shutil.rmtree(folder, ignore_errors=True)
                    raise
                self._shared[name] = result, {path: path.stat().st_size for path in _files(folder)}
            return result

    def used(self) -> int:
        """The bytes the output folders hold now (what the budget bounds)."""
        return sum(_size(self.root / part) for part in (REQUESTS, STAGING, SHARED))

    def _remove_expired(self, now: float) -> None:
        for part in (REQUESTS, STAGING):
            for folder in _folders(self.root / part):
                if now - _mtime(folder) > MAX_AGE_S:
                    shutil.rmtree(folder, ignore_errors=True)

    def _make_room(self, incoming: int, now: float) -> None:
        """Remove the request folders used longest ago, none of the last :data:`LIVE_S` seconds, until ``incoming``
        more bytes (already in the staging folder) fit within the budget; raise ``ValueError`` when they cannot."""
        used = self.used()
        removable = sorted((folder for folder in _folders(self.root / REQUESTS) if now - _mtime(folder) > LIVE_S),
                           key=_mtime)
        while used > self.budget and removable:
            oldest = removable.pop(0)
            used -= _size(oldest)
            shutil.rmtree(oldest, ignore_errors=True)
        if used > self.budget:
            raise ValueError(f"the Space's output folder is full: this request's files ({human_size(incoming)}) and "
                             f"those kept for the requests of the last {LIVE_S} s and for everyone "
                             f"({human_size(used - incoming)}) would exceed its budget of {human_size(self.budget)} "
                             f"(${BUDGET_ENV}); try again in a minute")


def _digest(folder: Path) -> str:
    """A name for ``folder``'s files: the sha256 of their relative paths and contents."""
    digest = hashlib.sha256()
    for path in sorted(_files(folder)):
        digest.update(f"{path.relative_to(folder).as_posix()}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()[:32]


def _files(folder: Path) -> list[Path]:
    return [Path(parent) / name for parent, _, names in os.walk(folder) for name in names]


def _sizes(folder: Path) -> dict[str, int | None]:
    """The size of each file under ``folder``, by its path there (empty when ``folder`` is gone)."""
    return {path.relative_to(folder).as_posix(): _file_size(path) for path in _files(folder)}


def _folders(folder: Path) -> list[Path]:
    try:
        return [entry for entry in folder.iterdir() if entry.is_dir()]
    except FileNotFoundError:
        return []


def _file_size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def _size(folder: Path) -> int:
    """The bytes of the files under ``folder`` (0 when it is gone; a file removed meanwhile counts 0)."""
    return sum(_file_size(path) or 0 for path in _files(folder))


def _mtime(folder: Path) -> float:
    try:
        return folder.stat().st_mtime
    except FileNotFoundError:
        return 0.0
