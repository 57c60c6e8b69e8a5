"""Resumable, verified downloads and the checks behind them: sha256, and images that decode fully.

This module knows nothing about RoCOCO's files: :func:`download_file` fetches any file by URL,
:func:`download_coco_images` fetches a batch of images from an image server laid out like COCO's (the
annotation files are fetched by :mod:`rococo_eval.data.annotations` through :func:`download_file`). It also sets
how many threads image work uses by default: ``DEFAULT_DOWNLOAD_WORKERS`` parallel downloads, and
``DEFAULT_IMAGE_WORKERS`` threads reading, decoding and altering images.

One code path fetches ``http(s)://`` URLs, ``file://`` URLs and plain local paths, so a local mirror works
exactly like the official source. A download streams into ``<dest>.part``, resumes an interrupted ``.part``
with an HTTP ``Range`` request, retries dropped connections, short reads, timeouts and HTTP 5xx with a short
backoff, checks the result (size, sha256, or for COCO images byte count and a full decode) and only then
renames it to ``dest``. A file that fails its check is fetched once more from scratch before an error is
raised. A server that cannot be reached at all (its name does not resolve, it refuses the connection or
never accepts it) is not retried: :class:`ServerUnreachableError` comes at once, and a batch of COCO images
stops at the first one, since none of the others can succeed either.

Environment variables:
    ``ROCOCO_CACHE_DIR``: the cache folder of every download (default ``~/.cache/rococo-eval``).
    ``ROCOCO_IMAGE_BASE_URL``: a mirror of COCO's image server, laid out the same (``val2014/...``), used
    wherever no image base URL is given (``rococo-eval run --download-images`` has no option for it).

Example:
    >>> COCO_IMAGE_BASE_URL
    'http://images.cocodataset.org/'
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Iterator
from urllib.parse import quote, urlsplit
from urllib.request import url2pathname

import requests
import urllib3
from PIL import Image
from tqdm import tqdm

from rococo_eval.version import __version__

logger = logging.getLogger(__name__)

CACHE_DIR_ENV = "ROCOCO_CACHE_DIR"
IMAGE_BASE_URL_ENV = "ROCOCO_IMAGE_BASE_URL"
COCO_IMAGE_BASE_URL = "http://images.cocodataset.org/"
COCO_TERMS_URL = "https://cocodataset.org/#termsofuse"  # the terms the COCO images are used under
# Parallel image downloads: a COCO test image is small (about 160 KB), so one connection mostly waits on round
# trips; 8 connections overlap those waits while staying polite to a public server. Not tied to the CPUs.
DEFAULT_DOWNLOAD_WORKERS = 8
# Threads that read, decode and alter images ahead of their consumer (the embedding cache, the dataset export):
# one per CPU, at most 8, so that on a large machine image work does not take every core.
MAX_DEFAULT_IMAGE_WORKERS = 8
DEFAULT_IMAGE_WORKERS = min(MAX_DEFAULT_IMAGE_WORKERS, os.cpu_count() or 1)

_TRANSFER_CHUNK_BYTES = 1 << 16  # 64 KiB: one read from the socket or file, one write to the .part file
# 1 MiB: sha256 of a 200 MB file took as long with 64 KiB or 16 MiB blocks; this one needs few reads, little memory
_HASH_BLOCK_BYTES = 1 << 20
_RETRY_DELAY_SECONDS = 0.5
_MAX_RETRY_DELAY_SECONDS = 8.0
_RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_STREAM_ERRORS = (requests.RequestException, urllib3.exceptions.HTTPError, OSError)


class DownloadError(OSError):
    """A file could not be fetched: the source is missing, refused, or the connection kept failing.

    ``failures`` maps each file that failed to the reason, when one call fetched several files.
    """

    def __init__(self, message: str, failures: dict[str, str] | None = None):
        super().__init__(message)
        self.failures = dict(failures or {})


class ServerUnreachableError(DownloadError):
    """The server of a URL cannot be reached: its name does not resolve, or it refuses or never accepts the
    connection. Nothing from that server can succeed now, so this is raised at once, without retries."""


class VerificationError(ValueError):
    """A fetched file has the wrong size or sha256, or is not a complete image, even after a fresh fetch."""


class CorruptImageError(ValueError):
    """An image file cannot be fully decoded (truncated, damaged or not an image)."""


class _Incomplete(Exception):
    """A transfer stopped early for a reason worth retrying (dropped connection, short read, HTTP 5xx)."""


class _StaleRange(Exception):
    """The source cannot continue the ``.part`` file at its current length; start again from byte 0."""


def default_cache_dir() -> Path:
    """Return the cache folder: ``$ROCOCO_CACHE_DIR`` or ``~/.cache/rococo-eval``.

    Example:
        >>> default_cache_dir() == Path(os.environ.get("ROCOCO_CACHE_DIR") or "~/.cache/rococo-eval").expanduser()
        True
    """
    return Path(os.environ.get(CACHE_DIR_ENV) or "~/.cache/rococo-eval").expanduser()


def sha256_of(path: str | os.PathLike) -> str:
    """Return the hex sha256 of a file, read in 1 MiB blocks.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "hello.txt"
        >>> _ = path.write_bytes(b"hello")
        >>> sha256_of(path)
        '2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824'
    """
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_HASH_BLOCK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()


def download_file(url: str | os.PathLike, dest: str | os.PathLike, *, sha256: str | None = None,
                  size: int | None = None, timeout: float = 30.0, retries: int = 3,
                  session: requests.Session | None = None) -> Path:
    """Fetch ``url`` to ``dest`` through ``dest.part``, resuming, retrying and verifying.

    A file already at ``dest`` that passes the given checks is kept and nothing is fetched (with neither
    ``sha256`` nor ``size`` any existing file passes); one that fails them is deleted and fetched again.
    An interrupted ``.part`` is continued with a ``Range`` request; a server that ignores ``Range`` is
    read again from byte 0. A download that fails its checks is fetched once more from scratch before
    :class:`VerificationError` is raised; either way no file is left at ``dest`` after an error.

    Args:
        url: ``http://``, ``https://`` or ``file://`` URL, or a local path.
        dest: where the file goes; missing folders are created.
        sha256: expected hex sha256, or None to skip the check.
        size: expected size in bytes, or None to skip the check.
        timeout: seconds to wait for the connection and for each read.
        retries: how many more times a dropped connection, short read or HTTP 5xx is tried again.
        session: a ``requests.Session`` to reuse connections; None makes a fresh connection per request.

    Raises:
        ValueError: ``url`` has an unsupported scheme, or ``retries`` is negative.
        ServerUnreachableError: the server cannot be reached at all (the name does not resolve, the
            connection is refused or never accepted); raised at once, without retries.
        DownloadError: the source is missing (HTTP 404, no such local file) or refused the request, or
            the transfer still failed after ``retries`` retries.
        VerificationError: the size or sha256 is wrong after a fresh fetch.

    Example:
        >>> import shutil, tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> source = folder / "hello.txt"
        >>> _ = source.write_bytes(b"hello")
        >>> digest = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        >>> path = download_file(source.as_uri(), folder / "copy" / "hello.txt", sha256=digest, size=5)
        >>> path.read_bytes()
        b'hello'
        >>> shutil.rmtree(folder)
    """
    return _fetch(url, dest, sha256=sha256, size=size, timeout=timeout, retries=retries, session=session)


def verify_image_file(path: str | os.PathLike) -> None:
    """Check that ``path`` is an image PIL can decode to the last pixel (catches truncated downloads).

    Notes:
        Truncation is caught only while ``PIL.ImageFile.LOAD_TRUNCATED_IMAGES`` is False, PIL's default.

    Args:
        path: the image file.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        CorruptImageError: the file is not an image or cannot be fully decoded.

    Example:
        >>> import shutil, tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> Image.effect_noise((64, 64), 64).save(folder / "noise.jpg")
        >>> verify_image_file(folder / "noise.jpg")
        >>> data = (folder / "noise.jpg").read_bytes()
        >>> _ = (folder / "noise.jpg").write_bytes(data[: len(data) // 2])
        >>> verify_image_file(folder / "noise.jpg")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rococo_eval.io.download.CorruptImageError: ...noise.jpg' is not a complete image: image file is truncated ...
        >>> shutil.rmtree(folder)
    """
    read_image_file(path)


def read_image_file(path: str | os.PathLike) -> tuple[bytes, Image.Image]:
    """Read an image file and decode it to the last pixel: its bytes and the decoded image.

    Errors are those of :func:`verify_image_file`, which is this check without the result.

    Example:
        >>> import shutil, tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> Image.new("RGB", (4, 3), "red").save(folder / "red.png")
        >>> data, image = read_image_file(folder / "red.png")
        >>> data[:4], image.size, image.getpixel((0, 0))
        (b'\\x89PNG', (4, 3), (255, 0, 0))
        >>> shutil.rmtree(folder)
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image file {str(path)!r} does not exist")
    data = path.read_bytes()
    return data, decode_image(data, repr(str(path)))


def decode_image(data: bytes, name: str = "the image data") -> Image.Image:
    """Decode image bytes to the last pixel, so that a truncated or damaged image fails here and not later.

    Args:
        data: the bytes of an image file.
        name: what ``data`` is, for the error message.

    Raises:
        CorruptImageError: ``data`` is not an image or cannot be fully decoded.

    Example:
        >>> buffer = io.BytesIO()
        >>> Image.new("RGB", (4, 3), "red").save(buffer, format="PNG")
        >>> decode_image(buffer.getvalue()).getpixel((0, 0))
        (255, 0, 0)
        >>> decode_image(buffer.getvalue()[:40])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rococo_eval.io.download.CorruptImageError: the image data is not a complete image: ...
    """
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        raise CorruptImageError(f"{name} is not a complete image: {error}") from error
    return image


def download_coco_images(file_names: Iterable[str], dest_root: str | os.PathLike, *,
                         base_url: str | os.PathLike | None = None, workers: int = DEFAULT_DOWNLOAD_WORKERS,
                         progress: bool = False, retries: int = 3, timeout: float = 60.0) -> list[Path]:
    """Download COCO images in parallel to ``dest_root/<file_name>``, resuming and verifying each one.

    COCO publishes no per-image checksum, so an image counts as complete when the bytes received match
    the ``Content-Length`` and PIL decodes it fully (:func:`verify_image_file`). Images already complete
    are not fetched; ``.part`` files are resumed; a corrupt existing image is fetched again. All images
    are tried before one error lists every image that failed, except when the server cannot be reached
    at all: then the first image that finds out stops the whole batch.

    Args:
        file_names: paths relative to ``base_url`` as in the annotation files, e.g.
            ``"val2014/COCO_val2014_000000391895.jpg"``.
        dest_root: folder that receives the same relative paths.
        base_url: ``http(s)://`` or ``file://`` URL or local folder of the images; None uses
            ``$ROCOCO_IMAGE_BASE_URL``, else :data:`COCO_IMAGE_BASE_URL`.
        workers: number of parallel downloads.
        progress: show a tqdm bar counting images.
        retries: how many more times a dropped connection or short read is tried again, per image.
        timeout: seconds to wait for each connection and read.

    Returns:
        The local paths, one per distinct file name, in the order first given.

    Raises:
        ValueError: a file name is absolute or climbs out of ``dest_root`` with ``..``, or ``workers`` is
            not a positive integer.
        ServerUnreachableError: the image server cannot be reached; raised as soon as one image finds
            out, without trying the others. The message names ``dest_root`` and ``images_dir``
            (``--images-dir``), the way to use images already on disk.
        DownloadError: some images could not be fetched or verified; ``failures`` maps each to the reason.

    Example:
        >>> import shutil, tempfile
        >>> mirror = Path(tempfile.mkdtemp())
        >>> (mirror / "val2014").mkdir()
        >>> Image.new("RGB", (8, 8), "red").save(mirror / "val2014" / "COCO_val2014_000000000001.jpg")
        >>> paths = download_coco_images(["val2014/COCO_val2014_000000000001.jpg"], mirror / "copy",
        ...                              base_url=mirror.as_uri())
        >>> paths[0].relative_to(mirror).as_posix()
        'copy/val2014/COCO_val2014_000000000001.jpg'
        >>> shutil.rmtree(mirror)
    """
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"`workers` has to be a positive integer, got {workers!r}")
    if base_url is None:
        base_url = os.environ.get(IMAGE_BASE_URL_ENV) or COCO_IMAGE_BASE_URL
    dest_root = Path(dest_root)
    targets = {name: dest_root.joinpath(*_relative_parts(name)) for name in file_names}
    sessions = _ThreadSessions()

    def fetch(name: str) -> Path:
        return _fetch(join_url(base_url, name), targets[name], timeout=timeout, retries=retries,
                      session=sessions.get(), check=verify_image_file)

    logger.info("fetching %d COCO images from %s into %s", len(targets), base_url, dest_root)
    try:
        failures = _fetch_all(targets, fetch, workers, progress, dest_root)
    finally:
        sessions.close()
    if failures:
        listing = "\n".join(f"  {name}: {failures[name]}" for name in targets if name in failures)
        raise DownloadError(
            f"{len(failures)} of {len(targets)} COCO images could not be downloaded from {str(base_url)!r} "
            f"into {str(dest_root)!r}:\n{listing}\nRun again to retry them; complete images are not fetched "
            f"again.",
            failures={name: failures[name] for name in targets if name in failures},
        )
    return list(targets.values())


def _fetch_all(targets: dict[str, Path], fetch, workers: int, progress: bool, dest_root: Path) -> dict[str, str]:
    """``fetch(name)`` of every name of ``targets`` on ``workers`` threads; the failures, by name, with why. An
    unreachable server stops them all at once, its error saying how many images in ``dest_root`` are complete."""
    failures: dict[str, str] = {}
    complete = 0
    with (ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rococo-download") as pool,
          tqdm(total=len(targets), unit="image", desc="COCO images", disable=not progress) as bar):
        futures = {pool.submit(fetch, name): name for name in targets}
        try:
            for future in as_completed(futures):
                try:
                    future.result()
                    complete += 1
                except ServerUnreachableError as error:
                    raise ServerUnreachableError(
                        f"{error} Stopped: no COCO image can be downloaded into {str(dest_root)!r} now "
                        f"({complete} of {len(targets)} images there are complete). Pass a COCO root that "
                        f"already holds val2014/ as `images_dir` (--images-dir on the command line), or run "
                        f"again once the server can be reached; complete images are not fetched again."
                    ) from error.__cause__
                except (OSError, ValueError) as error:
                    failures[futures[future]] = str(error)
                    logger.warning("could not fetch %s: %s", futures[future], error)
                bar.update(1)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return failures


class _ThreadSessions:
    """One ``requests.Session`` per worker thread (sessions are not documented as thread-safe)."""

    def __init__(self):
        self._local = threading.local()
        self._lock = threading.Lock()
        self._opened: list[requests.Session] = []

    def get(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            with self._lock:
                self._opened.append(session)
        return session

    def close(self) -> None:
        for session in self._opened:
            session.close()


def _fetch(url, dest, *, sha256=None, size=None, timeout, retries, session,
           check: Callable[[Path], None] | None = None) -> Path:
    """The whole of :func:`download_file`, plus an extra ``check`` that raises ``ValueError`` on a bad file."""
    if not isinstance(retries, int) or retries < 0:
        raise ValueError(f"`retries` has to be a non-negative integer, got {retries!r}")
    _local_path(url)  # refuses an unsupported scheme before anything is touched
    dest = Path(dest)
    if dest.is_file():
        problem = _problem(dest, sha256, size, check)
        if problem is None:
            logger.debug("%s is already complete", dest)
            return dest
        logger.warning("%s %s; fetching it again from %s", dest, problem, url)
        dest.unlink()
    part = dest.with_name(dest.name + ".part")
    for fresh in (False, True):
        _transfer(url, part, size, timeout, retries, session)
        problem = _problem(part, sha256, size, check)
        if problem is None:
            os.replace(part, dest)
            logger.info("fetched %s", dest)
            return dest
        part.unlink()
        if not fresh:
            logger.warning("download of %s %s; fetching it once more from scratch", url, problem)
    raise VerificationError(
        f"download of {str(url)!r} to {str(dest)!r} failed verification twice: it {problem}. The source "
        f"serves a different or damaged file; check the URL (or mirror) and run again."
    )


def _problem(path: Path, sha256: str | None, size: int | None, check) -> str | None:
    """Say what is wrong with ``path`` (``"has sha256 X, expected Y"``), or None when it passes."""
    found, expected = [], []
    actual_size = path.stat().st_size
    if size is not None and actual_size != size:
        found.append(f"{actual_size} bytes")
        expected.append(f"{size} bytes")
    if sha256 is not None:
        actual = sha256_of(path)
        if actual != sha256.lower() or found:
            found.append(f"sha256 {actual}")
            expected.append(f"sha256 {sha256.lower()}")
    if found:
        return f"has {' and '.join(found)}, expected {' and '.join(expected)}"
    if check is not None:
        try:
            check(path)
        except ValueError as error:
            return f"fails its check: {error}"
    return None


def _transfer(url, part: Path, size: int | None, timeout: float, retries: int, session) -> None:
    """Bring ``part`` to the full length of the source, resuming it and retrying transient failures."""
    failures = 0
    while True:
        offset = part.stat().st_size if part.exists() else 0
        if size is not None and offset > size:
            part.unlink()
            offset = 0
        if size is not None and offset == size and part.exists():
            return
        try:
            _receive(url, part, offset, timeout, session)
            return
        except _StaleRange as reason:
            part.unlink(missing_ok=True)
            if offset:
                logger.info("%s: %s; fetching it from byte 0", url, reason)
                continue
            error = reason
        except _Incomplete as reason:
            error = reason
        failures += 1
        if failures > retries:
            received = part.stat().st_size if part.is_file() else 0
            if not received:
                part.unlink(missing_ok=True)
            kept = f"; the {received} bytes received so far stay in {str(part)!r} and are resumed" if received else ""
            raise DownloadError(
                f"could not fetch {str(url)!r}: {error} (tried {retries + 1} times). Check the network or the "
                f"URL and run again{kept}."
            ) from error.__cause__
        delay = min(_RETRY_DELAY_SECONDS * 2 ** (failures - 1), _MAX_RETRY_DELAY_SECONDS)
        logger.warning("%s: %s; retrying in %.2g s (%d of %d)", url, error, delay, failures, retries)
        time.sleep(delay)


def _receive(url, part: Path, offset: int, timeout: float, session) -> None:
    """Make one request for ``url`` from byte ``offset`` and append (or rewrite) ``part`` with the body."""
    local = _local_path(url)
    opened = _open_local(local, offset) if local is not None else _open_http(url, offset, timeout, session)
    with opened as (start, total, chunks):
        if start != offset:
            logger.info("%s: the source ignored the range request; fetching it from byte 0", url)
        received = start
        part.parent.mkdir(parents=True, exist_ok=True)
        with open(part, "ab" if start > 0 else "wb") as out:
            try:
                for chunk in chunks:
                    out.write(chunk)
                    received += len(chunk)
            except _Incomplete as error:
                of_total = "" if total is None else f" of {total}"
                raise _Incomplete(f"the connection broke after {received}{of_total} bytes ({error})") from error
    if total is not None and received != total:
        raise _Incomplete(f"the connection closed after {received} of {total} bytes")


@contextmanager
def _open_local(path: Path, offset: int) -> Iterator[tuple[int, int, Iterator[bytes]]]:
    """Open a local file like a range request: ``(start, total, chunks)``."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise DownloadError(f"no file at {str(path)!r}: check the path or the mirror folder") from None
    with handle:
        total = os.fstat(handle.fileno()).st_size
        start = offset if offset <= total else 0
        handle.seek(start)
        yield start, total, _local_chunks(handle)


def _local_chunks(handle) -> Iterator[bytes]:
    try:
        yield from iter(lambda: handle.read(_TRANSFER_CHUNK_BYTES), b"")
    except OSError as error:
        raise _Incomplete(str(error)) from error


@contextmanager
def _open_http(url: str, offset: int, timeout: float, session) -> Iterator[tuple[int, int | None, Iterator[bytes]]]:
    """Request ``url`` from byte ``offset``: ``(start, total, chunks)``, where ``start`` is 0 when the
    server sends the whole file and ``total`` is the full size if known."""
    headers = {"Accept-Encoding": "identity", "User-Agent": f"rococo-eval/{__version__}"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        response = (session or requests).get(url, headers=headers, stream=True, timeout=timeout)
    except (requests.ConnectionError, requests.Timeout) as error:
        if _never_connected(error):
            raise ServerUnreachableError(
                f"could not fetch {url!r}: cannot connect to {urlsplit(url).netloc} ({_reason(error)})."
            ) from error
        raise _Incomplete(f"the request failed: {_reason(error)}") from error
    except requests.RequestException as error:
        raise DownloadError(f"could not request {url!r}: {_reason(error)}") from error
    with response:
        status = response.status_code
        if status == 206:
            start, total = _content_range(response.headers.get("Content-Range", ""))
            if start != offset:
                raise _StaleRange(f"the server sent bytes from {start}, not {offset}")
        elif status == 200:
            start = 0
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        elif status == 416:
            _, total = _content_range(response.headers.get("Content-Range", ""))
            if total != offset:
                raise _StaleRange(f"the partial file has {offset} bytes, the source {total}")
            yield offset, total, iter(())
            return
        elif status in _RETRYABLE_STATUS:
            raise _Incomplete(f"HTTP {status} {response.reason}")
        else:
            raise DownloadError(
                f"could not fetch {url!r}: HTTP {status} {response.reason}. Check the URL (or mirror)"
            )
        yield start, total, _http_chunks(response)


def _http_chunks(response) -> Iterator[bytes]:
    try:
        yield from response.raw.stream(_TRANSFER_CHUNK_BYTES, decode_content=False)
    except _STREAM_ERRORS as error:
        raise _Incomplete(_reason(error)) from error


def _never_connected(error: requests.RequestException) -> bool:
    """Whether a request failed before any server (or proxy) accepted the connection: no address for the name,
    the connection refused or unreachable, or no answer to it within the timeout."""
    if isinstance(error, requests.ConnectTimeout):
        return True
    reason = getattr(error.args[0] if error.args else None, "reason", None)
    if isinstance(reason, urllib3.exceptions.ProxyError):
        reason = reason.original_error
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


def _reason(error: BaseException) -> str:
    """Why a request failed, in a few words: the innermost cause, without the URL that requests and urllib3
    repeat in every layer of their exceptions.

    Example:
        >>> _reason(requests.ConnectionError(urllib3.exceptions.ProtocolError(
        ...     "Connection aborted.", ConnectionResetError(104, "Connection reset by peer"))))
        'Connection reset by peer'
    """
    where = ""
    for _ in range(8):
        if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
            inner = error.reason
        elif isinstance(error, urllib3.exceptions.ProxyError) and error.original_error is not None:
            inner, where = error.original_error, "the proxy: "
        elif isinstance(error, (requests.RequestException, urllib3.exceptions.ProtocolError)):
            inner = next((arg for arg in reversed(error.args) if isinstance(arg, BaseException)), None)
        elif isinstance(error, urllib3.exceptions.HTTPError):
            cause = error.__cause__ or error.__context__
            inner = cause if isinstance(cause, OSError) else None
        else:
            inner = None
        if inner is None:
            break
        error = inner
    if isinstance(error, OSError) and error.strerror:
        return where + error.strerror
    return where + (str(error) or type(error).__name__)


def _content_range(value: str) -> tuple[int | None, int | None]:
    """Parse ``bytes 10-99/100`` to ``(10, 100)`` and ``bytes */100`` to ``(None, 100)``."""
    unit, _, spec = value.strip().partition(" ")
    span, total = (spec.split("/", 1) + [""])[:2]
    if unit != "bytes":
        return None, None
    start = span.partition("-")[0]
    return (int(start) if start.isdigit() else None), (int(total) if total.isdigit() else None)


def _local_path(url) -> Path | None:
    """Return the local path ``url`` names (``file://`` or a plain path), or None for ``http(s)://``."""
    if isinstance(url, os.PathLike):
        return Path(url)
    parts = urlsplit(url)
    if parts.scheme in ("http", "https"):
        return None
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return Path(url2pathname(parts.path))
    if parts.scheme == "" or len(parts.scheme) == 1:
        return Path(url)
    raise ValueError(f"`url` has to be an http(s):// or file:// URL or a local path, got {url!r}")


def join_url(base: str | os.PathLike, relative: str) -> str:
    """Append the relative POSIX path ``relative`` to a URL or a local folder (quoted in a URL).

    Raises:
        ValueError: ``relative`` is absolute or climbs out of ``base`` with ``..``.

    Example:
        >>> join_url("http://images.cocodataset.org", "val2014/COCO_val2014_000000391895.jpg")
        'http://images.cocodataset.org/val2014/COCO_val2014_000000391895.jpg'
        >>> join_url("file:///data/rococo/", "a b.json")
        'file:///data/rococo/a%20b.json'
    """
    base = os.fspath(base)
    if _local_path(base) is None or urlsplit(base).scheme == "file":
        return (base if base.endswith("/") else base + "/") + quote(relative)
    return str(Path(base).joinpath(*_relative_parts(relative)))


def _relative_parts(name: str) -> tuple[str, ...]:
    """Split a relative POSIX path, refusing absolute paths and ``..`` that would leave the folder."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts or "\\" in name:
        raise ValueError(f"file names have to be relative paths inside the folder, got {name!r}")
    return path.parts
