"""Writing a file atomically: readers see the old file or the whole new one, never a part.

Every file the package writes whole (reports, charts, embedding shards and manifests) goes through
:func:`write_atomic`: a new temporary file in the same folder, flushed to disk, then renamed over the target.

Example:
    >>> import tempfile
    >>> path = write_atomic(Path(tempfile.mkdtemp()) / "notes" / "hello.txt", lambda handle: handle.write(b"hello"))
    >>> path.read_bytes()
    b'hello'
"""

from __future__ import annotations

import json
import logging
import math
import os
import uuid
from pathlib import Path
from typing import BinaryIO, Callable

import numpy as np

logger = logging.getLogger(__name__)


def write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> Path:
    """Write ``path`` through ``write(handle)`` on a temporary file beside it, then rename it into place.

    The temporary file (``.<name>.<random>.part``, permissions from the umask) is flushed and fsynced before
    ``os.replace`` puts it at ``path``, so a crash leaves the old file or the new one; on any error it is
    removed and ``path`` is untouched. Missing folders are created.

    Args:
        path: the file to write.
        write: called once with the temporary file open for binary writing.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "data.bin"
        >>> write_atomic(path, lambda handle: handle.write(b"\\x00\\x01")).read_bytes()
        b'\\x00\\x01'
        >>> def fail(handle):
        ...     raise RuntimeError("disk full")
        >>> write_atomic(path, fail)
        Traceback (most recent call last):
        ...
        RuntimeError: disk full
        >>> path.read_bytes(), sorted(p.name for p in path.parent.iterdir())
        (b'\\x00\\x01', ['data.bin'])
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
    try:
        with open(temporary, "xb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    logger.debug("wrote %s", path)
    return path


def write_json(value, path: str | os.PathLike, *, compact: bool = False) -> Path:
    """Write ``value`` as JSON at ``path``, atomically: NaN and infinities become ``null``, numpy values plain Python.

    Reports are indented and ASCII (``compact=False``); a generated benchmark's data files are ``compact``: no
    spaces, non-ASCII characters kept as they are.

    Example:
        >>> import tempfile
        >>> path = write_json({"r": {"recall@1": np.float32(0.5), "asr": float("nan"), "ci": (1, 2)}},
        ...                   Path(tempfile.mkdtemp()) / "results.json")
        >>> json.loads(path.read_text())
        {'r': {'recall@1': 0.5, 'asr': None, 'ci': [1, 2]}}
    """
    if compact:
        text = json.dumps(_jsonable(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    else:
        text = json.dumps(_jsonable(value), indent=2, allow_nan=False) + "\n"
    data = text.encode("utf-8")
    return write_atomic(path, lambda handle: handle.write(data))


def _jsonable(value):
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_jsonable(item) for item in (value.tolist() if isinstance(value, np.ndarray) else value)]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def open_cache_folder(folder: Path, manifest: dict, holds: str) -> None:
    """Create the cache ``folder`` with its ``manifest.json``, or check that the one there is ``manifest``.

    Raises:
        ValueError: the folder's manifest describes something else (``holds`` says what the cache keeps).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp()) / "cache"
        >>> open_cache_folder(folder, {"model": "a"}, "embeddings")
        >>> open_cache_folder(folder, {"model": "b"}, "embeddings")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: cache folder '...' holds other embeddings ({'model': 'a'}); remove it
    """
    path = folder / "manifest.json"
    if path.is_file():
        found = json.loads(path.read_text())
        if found != manifest:
            raise ValueError(f"cache folder {str(folder)!r} holds other {holds} ({found}); remove it")
        return
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda handle: handle.write(json.dumps(manifest, indent=2).encode()))
