"""Writing a file atomically: readers see the old file or the whole new one, never a part.

Every file the package writes whole (reports, charts, embedding shards and manifests) goes through
:func:`write_atomic`: a new temporary file in the same folder, flushed to disk, then renamed over the target.
Score matrices written block by block (:class:`rococo_eval.io.savedscores.ScoreMatrixWriter`) take their
temporary file's name from :func:`temporary_beside` too.

Every file is created as ``open`` creates one, with the mode ``0o666`` less the umask (``0o644`` under the usual
``022``): one rule for every output, whatever wrote it.

Example:
    >>> import tempfile
    >>> path = write_atomic(Path(tempfile.mkdtemp()) / "notes" / "hello.txt", lambda handle: handle.write(b"hello"))
    >>> path.read_bytes()
    b'hello'
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import uuid
from pathlib import Path
from typing import BinaryIO, Callable

import rococo_eval.validity as validity
from rococo_eval.io.scorefiles import check_size, parse_json
from rococo_eval.jsontext import json_text

logger = logging.getLogger(__name__)

# A cache folder's manifest.json: a few fingerprints and counts (and a name, for people), one object deep.
MAX_MANIFEST_BYTES = 1 << 20
MAX_MANIFEST_DEPTH = 4


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
    temporary = temporary_beside(path)
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


def temporary_beside(path: str | os.PathLike) -> Path:
    """A new name for the temporary file (or folder) of ``path``, in its folder (created if missing):
    ``.<name>.<random>.part``, hidden, and never a name another writer uses. The caller creates it with ``open`` or
    ``mkdir`` (their modes, ``0o666`` or ``0o777`` less the umask; not ``tempfile``'s ``0o600`` and ``0o700``), then
    renames it to ``path``.

    Example:
        >>> import tempfile
        >>> temporary = temporary_beside(Path(tempfile.mkdtemp()) / "new" / "scores.npy")
        >>> temporary.parent.is_dir(), temporary.name.startswith(".scores.npy."), temporary.suffix
        (True, True, '.part')
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")


def write_json(value, path: str | os.PathLike, *, compact: bool = False) -> Path:
    """Write ``value`` as JSON at ``path``, atomically: NaN and infinities become ``null``, numpy values plain Python.

    Reports are indented and ASCII (``compact=False``); a generated benchmark's data files are ``compact``: no
    spaces, non-ASCII characters kept as they are.

    Example:
        >>> import tempfile
        >>> import numpy as np
        >>> path = write_json({"r": {"recall@1": np.float32(0.5), "asr": float("nan"), "ci": (1, 2)}},
        ...                   Path(tempfile.mkdtemp()) / "results.json")
        >>> json.loads(path.read_text())
        {'r': {'recall@1': 0.5, 'asr': None, 'ci': [1, 2]}}
    """
    text = json_text(value, compact=compact)
    data = text.encode("utf-8")
    return write_atomic(path, lambda handle: handle.write(data))


DIGEST_LENGTH = 32  # hex digits of sha256 in a checked file's name: 128 bits, for corruption, not for adversaries
_CHECKED = re.compile(r"(?P<stem>.+)\.(?P<digest>[0-9a-f]{%d})\.(?P<suffix>npy|npz)" % DIGEST_LENGTH)


class CorruptFileError(ValueError):
    """A checked cache file whose bytes are not those its name's digest was made of (or whose name has none)."""


def write_checked(folder: Path, stem: str, suffix: str, data: bytes) -> Path:
    """Write ``data`` atomically as ``<stem>.<digest>.<suffix>`` in ``folder``, the digest the first
    :data:`DIGEST_LENGTH` hex digits of the bytes' sha256: a file that changes after it is written (a flipped bit, a
    truncation) no longer matches its name, and :func:`read_checked` refuses it.

    Example:
        >>> import tempfile
        >>> path = write_checked(Path(tempfile.mkdtemp()), "rows-000000-000002", "npy", b"bytes")
        >>> path.name
        'rows-000000-000002.277089d91c0bdf4f2e6862ba7e4a0760.npy'
        >>> read_checked(path)
        b'bytes'
    """
    digest = hashlib.sha256(data).hexdigest()[:DIGEST_LENGTH]
    return write_atomic(Path(folder) / f"{stem}.{digest}.{suffix}", lambda handle: handle.write(data))


def checked_stem(path: Path) -> str | None:
    """The stem of a checked file's name (``rows-000000-000002`` of ``rows-000000-000002.<digest>.npy``), or None.

    Example:
        >>> checked_stem(Path("embeddings." + "0" * 32 + ".npy")), checked_stem(Path("embeddings.npy"))
        ('embeddings', None)
    """
    match = _CHECKED.fullmatch(Path(path).name)
    return match["stem"] if match else None


def read_checked(path: Path) -> bytes:
    """The bytes of checked file ``path``, after checking them against its name's digest.

    Raises:
        CorruptFileError: the name holds no digest, or the bytes are not those it was made of (naming the file).
        OSError: the file cannot be read.
    """
    path = Path(path)
    match = _CHECKED.fullmatch(path.name)
    if match is None:
        raise CorruptFileError(f"{path}: a cache file without the digest of its content in its name")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest()[:DIGEST_LENGTH] != match["digest"]:
        raise CorruptFileError(f"{path}: its {len(data)} bytes are not those it was written with (their sha256 is "
                               f"not its name's): corrupted or truncated")
    return data


def open_cache_folder(folder: Path, manifest: dict, holds: str, shown: dict | None = None) -> None:
    """Create the cache ``folder`` with its ``manifest.json``, or check that the one there is ``manifest``. A
    manifest that cannot be read (damaged, not JSON) is written anew, with a warning naming it: the files beside it
    are checked one by one as they are read.

    ``shown`` is written into the manifest for people to read but is not compared: a model's name, which names the
    path it was loaded from, while ``manifest`` holds the digest of its weights. A folder written under another name
    is used as it is (its manifest keeps the name it was written for).

    Raises:
        ValueError: the folder's manifest describes something else (``holds`` says what the cache keeps).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp()) / "cache"
        >>> open_cache_folder(folder, {"weights": "1a"}, "embeddings", shown={"model": "vse:old.pth"})
        >>> open_cache_folder(folder, {"weights": "1a"}, "embeddings", shown={"model": "vse:new.pth"})
        >>> open_cache_folder(folder, {"weights": "2b"}, "embeddings")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: cache folder '...' holds other embeddings ({'model': 'vse:old.pth', 'weights': '1a'}); remove it
    """
    shown = shown or {}
    path = folder / "manifest.json"
    if path.is_file():
        try:
            check_size(path, MAX_MANIFEST_BYTES)
            found = parse_json(path.read_bytes(), "manifest", MAX_MANIFEST_DEPTH)
        except ValueError as error:  # not JSON, not UTF-8, too large or too deep
            validity.warn("%s is damaged (%s): written anew", path, str(error)[:100])
            found = None
        if isinstance(found, dict) and {key: value for key, value in found.items() if key not in shown} == manifest:
            return
        if found is not None:
            raise ValueError(f"cache folder {str(folder)!r} holds other {holds} ({found}); remove it")
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {**shown, **manifest}
    write_atomic(path, lambda handle: handle.write(json.dumps(manifest, indent=2).encode()))
