"""Score files: a model's score matrix read from ``.npy``, ``.npz`` or ``.safetensors``, safely.

A score file holds one matrix, queries x gallery, higher = more similar, in float16, bfloat16
(``.safetensors`` only), float32 or float64. Nothing is unpickled: ``.npy`` and ``.npz`` go through
``np.load(allow_pickle=False)`` and ``.safetensors`` through its JSON header. Every file is checked
against a size limit (``$ROCOCO_MAX_UPLOAD_MB``, default 2048 MB) before a byte of it is read, and its
shape and dtype are read from the header before its data: ``.npy`` and ``.safetensors`` scores are
memory-mapped, so a large file is paged in as the metric reads it, not loaded whole.

An ``.npz`` or ``.safetensors`` file may also carry a custom layout beside its scores: a ``references``
array (one correct gallery index per query, or a table of them; rows may repeat an index as padding) and
an ``adversarial`` array (a boolean mask over the gallery, or gallery indices).

A *compact* score file (``.npz`` or ``.safetensors``) holds a re-ranker's output instead of the whole matrix
(:data:`TOP_K_KEYS`): ``top_columns`` (ints, queries x k: each query's listed gallery columns), ``top_scores``
(floats, the same shape: their scores), ``fill`` (one number: the score of every other item; BLIP's is -100) and
``num_gallery`` (one int: the gallery size). Its header gives the full matrix's shape, and
:func:`read_top_k` its arrays, which the metric ranks as that matrix (``rococo_recall(top_columns=...)``).

This module reads files and nothing else: which gallery a matrix belongs to is
:mod:`rococo_eval.detection`'s question.

Example:
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "clip_rand_voca.npy"
    >>> np.save(path, np.zeros((3, 31), dtype=np.float16))
    >>> info = read_header(path)
    >>> info.shape, info.dtype, info.layout_keys
    ((3, 31), 'float16', ())
    >>> read_scores(path)[0, :3].tolist()
    [0.0, 0.0, 0.0]
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

MAX_UPLOAD_MB_ENV = "ROCOCO_MAX_UPLOAD_MB"
DEFAULT_MAX_UPLOAD_MB = 2048
# 64 MiB for a references or adversarial side file: about 100 times RoCOCO's (as JSON, the references of 5,000
# images take 0.17 MB, a mask of the 50,010-item gallery 0.35 MB), while the Python lists json makes of it stay
# near half a GB (7.5 bytes per JSON byte, measured).
MAX_SIDE_FILE_BYTES = 64 << 20
# 4 MiB for a side file as JSON: over 10 times RoCOCO's, while the lists json makes of it stay near 30 MB (the .npy
# form is bounded by MAX_SIDE_FILE_BYTES: it is read as one array).
MAX_JSON_SIDE_FILE_BYTES = 4 << 20
SCORE_SUFFIXES = (".npy", ".npz", ".safetensors")
SCORE_KEYS = ("scores", "predictions", "similarity")
LAYOUT_KEYS = ("references", "adversarial")
TOP_K_KEYS = ("top_columns", "top_scores", "fill", "num_gallery")  # a compact score file's arrays

_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
_INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_SAFETENSORS_DTYPES = {
    "F16": "<f2", "F32": "<f4", "F64": "<f8", "BF16": "<u2", "BOOL": "|b1",
    "I8": "|i1", "I16": "<i2", "I32": "<i4", "I64": "<i8", "U8": "|u1", "U16": "<u2", "U32": "<u4", "U64": "<u8",
}
# Bounds of a safetensors header, checked before it is parsed (a forged header of 100 MB and 1.5 million entries took
# the Space minutes and GBs): a score, compact or embeddings file holds a dozen tensors and a few kB of JSON.
MAX_SAFETENSORS_HEADER_BYTES = 1 << 20
MAX_SAFETENSORS_TENSORS = 256
# {name: {"shape": [...]}}; references [[...], ...]; adversarial a flat list (nested lists are refused after parsing)
MAX_JSON_DEPTH = {"safetensors header": 3, "references": 2, "adversarial": 2}
MAX_NPZ_MEMBERS = 64
# An .npz's central directory, read from its end record before zipfile parses it (300,000 empty members took zipfile
# 2.3 s and 172 MB to list): 64 members with their names fit in a few kB.
MAX_NPZ_DIRECTORY_BYTES = 64 << 10
_JSON_SCAN_BYTES = 1 << 20  # the depth of a JSON document is counted this many bytes at a time


@dataclass(frozen=True)
class ScoreFileInfo:
    """What the header of a score file says, before its data is read.

    Attributes:
        path: the file.
        key: the array holding the scores (``None`` for ``.npy``).
        shape: the shape of the scores, ``(queries, gallery)``.
        dtype: ``"float16"``, ``"bfloat16"``, ``"float32"`` or ``"float64"``.
        layout_keys: which of ``"references"`` and ``"adversarial"`` the file also holds.
        candidates: a compact file's listed candidates per query (the width of ``top_columns``); None for a full
            matrix. A compact file's ``shape`` is that of its full matrix, and ``key`` is ``"top_scores"``.
    """

    path: Path
    key: str | None
    shape: tuple[int, int]
    dtype: str
    layout_keys: tuple[str, ...] = ()
    candidates: int | None = None

    @property
    def is_compact(self) -> bool:
        return self.candidates is not None


@dataclass(frozen=True)
class TopKScores:
    """A compact score file's arrays (see the module's docstring): what ``rococo_recall`` takes as ``top_columns``,
    ``top_scores``, ``fill`` and ``num_gallery``. Indexing reads entries of the full matrix (layout detection reads
    a few), without making it.

    Example:
        >>> compact = TopKScores(np.array([[2, 0]]), np.array([[0.5, 0.25]]), -100.0, 3)
        >>> compact.shape, compact[np.array([[0]]), np.array([[0, 1, 2]])].tolist()
        ((1, 3), [[0.25, -100.0, 0.5]])
    """

    top_columns: np.ndarray
    top_scores: np.ndarray
    fill: float
    num_gallery: int

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.top_columns), self.num_gallery)

    def __getitem__(self, index):
        rows, columns = (np.asarray(part) for part in index)
        rows, columns = np.broadcast_arrays(rows, columns)
        listed = np.asarray(self.top_columns[rows.ravel()])
        match = listed == columns.ravel()[:, None]
        values = np.where(match.any(axis=1), np.asarray(self.top_scores[rows.ravel()])[
            np.arange(len(listed)), match.argmax(axis=1)], self.fill)
        return values.reshape(rows.shape)

    def metric_arguments(self) -> dict:
        """The keyword arguments of ``rococo_recall`` that give it this matrix."""
        return {"top_columns": self.top_columns, "top_scores": self.top_scores, "fill": self.fill,
                "num_gallery": self.num_gallery}


def max_upload_bytes() -> int:
    """The largest file accepted, in bytes: ``$ROCOCO_MAX_UPLOAD_MB`` megabytes (default 2048).

    Example:
        >>> max_upload_bytes() == int(float(os.environ.get("ROCOCO_MAX_UPLOAD_MB", "2048")) * 2**20)
        True
    """
    value = os.environ.get(MAX_UPLOAD_MB_ENV, str(DEFAULT_MAX_UPLOAD_MB))
    try:
        megabytes = float(value)
    except ValueError:
        raise ValueError(f"${MAX_UPLOAD_MB_ENV} must be a number of megabytes, got {value!r}") from None
    if not megabytes > 0:
        raise ValueError(f"${MAX_UPLOAD_MB_ENV} must be positive, got {value!r}")
    return int(megabytes * 2**20)


def check_size(path, limit: int | None = None) -> int:
    """Return the size of ``path`` in bytes; raise ``ValueError`` when it exceeds ``limit`` (bytes).

    Only the file system is asked: nothing is read.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "big.npy"
        >>> _ = path.write_bytes(bytes(3000))
        >>> check_size(path, limit=4096)
        3000
        >>> check_size(path, limit=2048)
        Traceback (most recent call last):
        ...
        ValueError: big.npy: the file is 3000 bytes (2.9 KB), over the limit of 2048 bytes (2.0 KB)
    """
    limit = max_upload_bytes() if limit is None else limit
    path = Path(path)
    try:
        size = os.path.getsize(path)
    except OSError as error:
        raise ValueError(f"{path.name}: cannot read the file ({error.strerror or error})") from None
    if size > limit:
        raise ValueError(f"{path.name}: the file is {_bytes(size)}, over the limit of {_bytes(limit)}")
    return size


def read_header(path, key: str | None = None, limit: int | None = None) -> ScoreFileInfo:
    """Check a score file's size, format, shape and dtype from its header, without reading its data.

    Args:
        path: a ``.npy``, ``.npz`` or ``.safetensors`` file.
        key: the array holding the scores in an ``.npz`` or ``.safetensors`` file. Default: the one named
            ``scores`` (or ``predictions``, ``similarity``), else the only array besides ``references`` and
            ``adversarial``.
        limit: the largest file, and the largest uncompressed array, in bytes (default :func:`max_upload_bytes`).

    Raises:
        ValueError: naming the file and what is wrong with it.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "run.npz"
        >>> np.savez(path, scores=np.ones((2, 4)), references=np.arange(2), adversarial=np.arange(4) > 1)
        >>> info = read_header(path)
        >>> info.key, info.shape, info.dtype, info.layout_keys
        ('scores', (2, 4), 'float64', ('references', 'adversarial'))
        >>> np.savez(path, a=np.ones((2, 4)), b=np.ones(3))
        >>> read_header(path)
        Traceback (most recent call last):
        ...
        ValueError: run.npz: holds several arrays (a, b); name the scores array `scores` or choose one
    """
    path = Path(path)
    limit = max_upload_bytes() if limit is None else limit
    check_size(path, limit)
    members = _members(path)
    if TOP_K_KEYS[0] in members:
        return _compact_header(path, members, limit)
    key = _score_key(path, members, key)
    dtype, shape = members[key]
    if dtype not in _FLOAT_DTYPES:
        raise ValueError(f"{path.name}: scores must be floats (float16, bfloat16, float32 or float64), got {dtype}")
    if len(shape) != 2 or 0 in shape:
        raise ValueError(f"{path.name}: scores must be a non-empty 2-D matrix (queries x gallery), got shape {shape}")
    _check_array_bytes(path, key, dtype, shape, limit)
    found = tuple(name for name in LAYOUT_KEYS if name in members and name != key)
    return ScoreFileInfo(path, None if path.suffix.lower() == ".npy" else key, shape, dtype, found)


def read_scores(path, key: str | None = None, limit: int | None = None):
    """Read the score matrix of a file: read-only and memory-mapped for ``.npy`` and ``.safetensors``.

    Arguments and errors are those of :func:`read_header`, which runs first. bfloat16 becomes float32;
    other dtypes are kept. Finiteness is not checked here: the metric checks it as it reads the rows. A compact
    file gives its :class:`TopKScores` (:func:`read_top_k`).

    Example:
        >>> import tempfile
        >>> from safetensors.numpy import save_file
        >>> path = Path(tempfile.mkdtemp()) / "run.safetensors"
        >>> save_file({"scores": np.eye(3, dtype=np.float32)}, str(path))
        >>> read_scores(path).diagonal().tolist()
        [1.0, 1.0, 1.0]
    """
    info = read_header(path, key, limit)
    logger.debug("reading %s: %s %s", info.path.name, info.dtype, info.shape)
    if info.is_compact:
        return _top_k_of(info)
    return _read_member(info.path, info.key)


def read_top_k(path, limit: int | None = None) -> TopKScores:
    """Read a compact score file's arrays (checked by :func:`read_header` first; the metric checks the columns and
    the scores' finiteness as it ranks them).

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "blip_clean_text_to_image.npz"
        >>> np.savez(path, top_columns=np.array([[1, 0]]), top_scores=np.array([[2.5, 1.0]], dtype=np.float32),
        ...          fill=np.float32(-100), num_gallery=4)
        >>> info = read_header(path)
        >>> info.shape, info.candidates, info.dtype
        ((1, 4), 2, 'float32')
        >>> read_top_k(path).fill
        -100.0
    """
    info = read_header(path, limit=limit)
    if not info.is_compact:
        raise ValueError(f"{info.path.name}: not a compact score file (it holds no `top_columns`)")
    return _top_k_of(info)


def _top_k_of(info: ScoreFileInfo) -> TopKScores:
    """The arrays of the compact file whose checked header is ``info`` (its shape gives ``num_gallery``)."""
    fill = _read_member(info.path, "fill")
    return TopKScores(_read_member(info.path, "top_columns"), _read_member(info.path, "top_scores"),
                      float(np.asarray(fill).reshape(())), info.shape[1])


def read_layout_arrays(path, limit: int | None = None) -> dict:
    """The ``references`` and ``adversarial`` arrays an ``.npz`` or ``.safetensors`` file holds, if any.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "run.npz"
        >>> np.savez(path, scores=np.ones((2, 4)), references=np.array([0, 1]))
        >>> {name: value.tolist() for name, value in read_layout_arrays(path).items()}
        {'references': [0, 1]}
    """
    path = Path(path)
    check_size(path, max_upload_bytes() if limit is None else limit)
    if path.suffix.lower() == ".npy":
        return {}
    members = _members(path)
    out = {}
    for name in LAYOUT_KEYS:
        if name in members:
            dtype, shape = members[name]
            _check_array_bytes(path, name, dtype, shape, MAX_SIDE_FILE_BYTES)
            out[name] = _check_layout_array(path, name, np.asarray(_read_member(path, name)))
    return out


def read_references(path, limit: int = MAX_SIDE_FILE_BYTES):
    """Read a custom layout's references: a ``.json`` list of ints or lists of ints, or an ``.npy`` int array.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "references.json"
        >>> _ = path.write_text("[0, [1, 2], 3]")
        >>> read_references(path)
        [0, [1, 2], 3]
    """
    return _read_side_file(path, "references", limit)


def read_adversarial(path, limit: int = MAX_SIDE_FILE_BYTES) -> np.ndarray:
    """Read a custom layout's adversarial items: a boolean mask or gallery indices, from ``.json`` or ``.npy``.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "adversarial.json"
        >>> _ = path.write_text("[false, true, true]")
        >>> read_adversarial(path).tolist()
        [False, True, True]
    """
    path = Path(path)
    values = _read_side_file(path, "adversarial", limit)
    if isinstance(values, list):
        if not (all(isinstance(v, bool) for v in values) or all(_is_json_int(v) for v in values)):
            raise ValueError(f"{path.name}: `adversarial` must be all booleans (a mask) or all ints (gallery indices)")
        values = np.array(values)
    return _check_layout_array(path, "adversarial", values)


def _compact_header(path: Path, members: dict, limit: int) -> ScoreFileInfo:
    """The header of a compact score file, checked: its four arrays, their dtypes and shapes, and its gallery."""
    full = [name for name in SCORE_KEYS if name in members]
    if full:
        raise ValueError(f"{path.name}: holds a full score matrix ({full[0]}) and a compact one (top_columns): keep "
                         "one of them in the file")
    missing = [name for name in TOP_K_KEYS if name not in members]
    if missing:
        raise ValueError(f"{path.name}: a compact score file holds {', '.join(TOP_K_KEYS)}; this one lacks "
                         f"{', '.join(missing)}")
    (columns_dtype, columns_shape), (dtype, shape) = members["top_columns"], members["top_scores"]
    if columns_dtype not in _INT_DTYPES or len(columns_shape) != 2 or 0 in columns_shape:
        raise ValueError(f"{path.name}: `top_columns` must be a non-empty 2-D matrix of ints (queries x candidates), "
                         f"got {columns_dtype} of shape {columns_shape}")
    if dtype not in _FLOAT_DTYPES or tuple(shape) != tuple(columns_shape):
        raise ValueError(f"{path.name}: `top_scores` must be floats of the shape of `top_columns` {columns_shape}, "
                         f"got {dtype} of shape {shape}")
    for name in ("fill", "num_gallery"):
        kind, size = members[name][0], math.prod(members[name][1])
        allowed = _INT_DTYPES if name == "num_gallery" else _INT_DTYPES + _FLOAT_DTYPES
        if size != 1 or kind not in allowed:
            raise ValueError(f"{path.name}: `{name}` must be one {'int' if name == 'num_gallery' else 'number'}, "
                             f"got {kind} of shape {members[name][1]}")
    for name in ("top_columns", "top_scores"):
        _check_array_bytes(path, name, *members[name], limit)
    num_gallery = int(np.asarray(_read_member(path, "num_gallery")).reshape(()))
    if num_gallery < columns_shape[1]:
        raise ValueError(f"{path.name}: `num_gallery` is {num_gallery}, fewer than the {columns_shape[1]} candidates "
                         "listed per query")
    found = tuple(name for name in LAYOUT_KEYS if name in members)
    return ScoreFileInfo(path, "top_scores", (int(columns_shape[0]), num_gallery), dtype, found,
                         int(columns_shape[1]))


def _members(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Map each array of the file to its (dtype name, shape), from headers only."""
    suffix = path.suffix.lower()
    if suffix == ".safetensors":  # its errors name the file
        return {name: (_safetensors_dtype(spec["dtype"]), tuple(spec["shape"]))
                for name, spec in read_safetensors_header(path)[0].items()}
    try:
        if suffix == ".npy":
            with open(path, "rb") as handle:
                return {"": _npy_header(handle)}
        if suffix == ".npz":
            _check_zip_directory(path)
            with zipfile.ZipFile(path) as archive:
                members = {}
                for info in archive.infolist():
                    if info.flag_bits & 0x1 or info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                        raise ValueError(f"its array {info.filename[:80]!r} is encrypted or compressed with method "
                                         f"{info.compress_type}; NumPy writes stored or deflated arrays only")
                    with archive.open(info) as handle:
                        members[info.filename.removesuffix(".npy")] = _npy_header(handle)
                return members
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, KeyError, TypeError, zlib.error,
            NotImplementedError, RuntimeError) as error:
        raise ValueError(f"{path.name}: not a readable {suffix} file ({error})") from None
    raise ValueError(f"{path.name}: unsupported file type {suffix!r}; expected one of {', '.join(SCORE_SUFFIXES)}")


def _check_zip_directory(path: Path) -> None:
    """Check an archive's member count and central directory size from its end record (the last 64 kB and 22 bytes
    of the file, with the zip64 record it may point to), before zipfile reads the directory.

    Raises:
        ValueError: no end record, more than :data:`MAX_NPZ_MEMBERS` members, or a directory over
            :data:`MAX_NPZ_DIRECTORY_BYTES`.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        tail_start = max(0, size - (1 << 16) - 22)
        handle.seek(tail_start)
        tail = handle.read()
        end = tail.rfind(b"PK\x05\x06")
        if end < 0 or len(tail) - end < 22:
            raise ValueError("no zip end record: not an .npz archive")
        members, directory_bytes = struct.unpack("<HI", tail[end + 10:end + 16])  # entries in all, directory size
        if (members == 0xFFFF or directory_bytes == 0xFFFFFFFF) and end >= 20 and tail[end - 20:end - 16] == b"PK\x06\x07":
            (record,) = struct.unpack("<Q", tail[end - 12:end - 4])
            if record > size - 56:
                raise ValueError("its zip64 end record lies outside the file")
            handle.seek(record)
            zip64 = handle.read(56)
            if zip64[:4] != b"PK\x06\x06":
                raise ValueError("its zip64 end record is damaged")
            members, directory_bytes = struct.unpack("<QQ", zip64[32:48])
    if members > MAX_NPZ_MEMBERS:
        raise ValueError(f"it holds {members} arrays, over the limit of {MAX_NPZ_MEMBERS}")
    if directory_bytes > MAX_NPZ_DIRECTORY_BYTES:
        raise ValueError(f"its zip directory is {_bytes(directory_bytes)}, over the limit of "
                         f"{_bytes(MAX_NPZ_DIRECTORY_BYTES)} (an .npz's lists a few arrays)")


def _npy_header(handle) -> tuple[str, tuple[int, ...]]:
    version = np.lib.format.read_magic(handle)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read(handle)
    return ("object" if dtype.hasobject else dtype.name), tuple(int(n) for n in shape)


def read_safetensors_header(path) -> tuple[dict, dict, int]:
    """A ``.safetensors`` file's header, checked within bounds before and after it is parsed: its tensors (name ->
    entry), its ``__metadata__`` (strings), and the byte offset where the tensors' data starts.

    The header may hold at most :data:`MAX_SAFETENSORS_HEADER_BYTES` bytes and :data:`MAX_SAFETENSORS_TENSORS`
    tensors, nested at most 3 deep; each tensor has a known ``dtype``, a ``shape`` of non-negative ints and
    ``data_offsets`` that fit the file. A header that is not so is refused without more work than reading it.

    Raises:
        ValueError: naming the file and what is wrong with its header.

    Example:
        >>> import tempfile
        >>> from safetensors.numpy import save_file
        >>> path = Path(tempfile.mkdtemp()) / "run.safetensors"
        >>> save_file({"scores": np.zeros((2, 3), dtype=np.float32)}, str(path), metadata={"model": "m"})
        >>> tensors, metadata, start = read_safetensors_header(path)
        >>> tensors["scores"]["shape"], metadata
        ([2, 3], {'model': 'm'})
    """
    path = Path(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) != 8:
                raise ValueError("the file is shorter than a safetensors header")
            (length,) = struct.unpack("<Q", prefix)
            if length > size - 8:
                raise ValueError(f"its header length {length} does not fit the file of {size} bytes")
            if length > MAX_SAFETENSORS_HEADER_BYTES:
                raise ValueError(f"its header is {_bytes(length)}, over the limit of "
                                 f"{_bytes(MAX_SAFETENSORS_HEADER_BYTES)} (a score file's is a few kB)")
            raw = handle.read(length)
        header = parse_json(raw, "safetensors header", MAX_JSON_DEPTH["safetensors header"])
        if not isinstance(header, dict):
            raise ValueError(f"its header is a JSON {type(header).__name__}, not an object of tensors")
        metadata = header.pop("__metadata__", None) or {}
        if not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
            raise ValueError("its __metadata__ is not an object of strings")
        if len(header) > MAX_SAFETENSORS_TENSORS:
            raise ValueError(f"its header lists {len(header)} tensors, over the limit of {MAX_SAFETENSORS_TENSORS}")
        start = 8 + length
        for name, spec in header.items():
            _check_tensor_entry(name, spec, size - start)
        return header, metadata, start
    except OSError as error:
        raise ValueError(f"{path.name}: cannot read the file ({error.strerror or error})") from None
    except ValueError as error:
        raise ValueError(f"{path.name}: not a readable .safetensors file ({error})") from None


_JSON_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')


def parse_json(raw: bytes, what: str, max_depth: int):
    """``raw`` parsed as JSON, after checking that it nests at most ``max_depth`` deep (the check is linear, and a
    deeper document never reaches the parser, whose recursion it would exhaust).

    Raises:
        ValueError: naming ``what``: not UTF-8 JSON, or nested too deep.

    Example:
        >>> parse_json(b'[0, [1, 2]]', "references", 2)
        [0, [1, 2]]
        >>> parse_json(b'[[[0]]]', "references", 2)
        Traceback (most recent call last):
        ...
        ValueError: the references JSON nests 3 deep, deeper than its 2
    """
    skeleton = np.frombuffer(_JSON_STRINGS.sub(b"", raw), dtype=np.uint8)
    depth = deepest = 0
    for start in range(0, len(skeleton), _JSON_SCAN_BYTES):  # a few MB of temporaries, whatever the document's size
        part = skeleton[start:start + _JSON_SCAN_BYTES]
        steps = ((part == ord("[")) | (part == ord("{"))).astype(np.int8) - ((part == ord("]")) | (part == ord("}")))
        levels = np.cumsum(steps, dtype=np.int64) + depth
        deepest, depth = max(deepest, int(levels.max())), int(levels[-1])
        del steps, levels
    del skeleton
    if deepest > max_depth:
        raise ValueError(f"the {what} JSON nests {deepest} deep, deeper than its {max_depth}")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise ValueError(f"not valid {what} JSON ({str(error)[:200]})") from None


def _check_tensor_entry(name, spec, data_bytes: int) -> None:
    """A safetensors header's entry for tensor ``name``, checked: a known dtype, a shape of non-negative ints, and
    data offsets that fit the ``data_bytes`` after the header and hold exactly the shape."""
    if not isinstance(spec, dict) or not isinstance(spec.get("dtype"), str):
        raise ValueError(f"tensor {name!r} has no dtype")
    shape, offsets = spec.get("shape"), spec.get("data_offsets")
    if not (isinstance(shape, list) and len(shape) <= 8 and all(_is_json_int(n) and n >= 0 for n in shape)):
        raise ValueError(f"tensor {name!r} has shape {str(shape)[:80]}, not a list of non-negative ints")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_json_int(n) for n in offsets)):
        raise ValueError(f"tensor {name!r} has data_offsets {str(offsets)[:80]}, not two ints")
    itemsize = np.dtype(_safetensors_dtype(spec["dtype"], numpy=True)).itemsize
    begin, end = offsets
    if not 0 <= begin <= end <= data_bytes or end - begin != math.prod(shape) * itemsize:
        raise ValueError(f"tensor {name!r} has data offsets that do not fit its shape or the file")


def _safetensors_header(path: Path) -> dict[str, tuple[dict, int]]:
    """Map each tensor to (its header entry, the byte offset of its data in the file)."""
    tensors, _, start = read_safetensors_header(path)
    return {name: (spec, start + spec["data_offsets"][0]) for name, spec in tensors.items()}


def _safetensors_dtype(code: str, numpy: bool = False) -> str:
    if code not in _SAFETENSORS_DTYPES:
        raise ValueError(f"unsupported safetensors dtype {str(code)[:40]!r}")
    if numpy:
        return _SAFETENSORS_DTYPES[code]
    return "bfloat16" if code == "BF16" else np.dtype(_SAFETENSORS_DTYPES[code]).name


def _score_key(path: Path, members: dict, key: str | None) -> str:
    if path.suffix.lower() == ".npy":
        return ""
    if key is not None:
        if key not in members:
            raise ValueError(f"{path.name}: has no array {key!r}; it holds {', '.join(members) or 'none'}")
        return key
    for name in SCORE_KEYS:
        if name in members:
            return name
    candidates = [name for name in members if name not in LAYOUT_KEYS]
    if len(candidates) != 1:
        listed = ", ".join(members) or "none"
        raise ValueError(f"{path.name}: holds several arrays ({listed}); name the scores array `scores` or choose one"
                         if candidates else f"{path.name}: holds no scores array (arrays: {listed})")
    return candidates[0]


def _check_array_bytes(path: Path, key: str, dtype: str, shape, limit: int) -> None:
    itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
    size = math.prod(shape) * itemsize
    if size > limit:
        name = f"array {key!r}" if key else "the array"
        raise ValueError(f"{path.name}: {name} is {human_size(size)} uncompressed, over the limit of "
                         f"{human_size(limit)}")


def _read_member(path: Path, key: str | None) -> np.ndarray:
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            return np.load(path, mmap_mode="r", allow_pickle=False)
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                return archive[key]
        spec, offset = _safetensors_header(path)[key]
        raw = np.memmap(path, dtype=_safetensors_dtype(spec["dtype"], numpy=True), mode="r", offset=offset,
                        shape=tuple(spec["shape"]))
        if spec["dtype"] == "BF16":
            return (raw.astype(np.uint32) << 16).view(np.float32)
        return raw
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError, RuntimeError) as error:
        raise ValueError(f"{path.name}: cannot read {key or 'the array'} ({error})") from None


def _read_side_file(path, name: str, limit: int):
    path = Path(path)
    check_size(path, limit)
    suffix = path.suffix.lower()
    if suffix == ".json":
        check_size(path, min(limit, MAX_JSON_SIDE_FILE_BYTES))
        try:
            values = parse_json(path.read_bytes(), name, MAX_JSON_DEPTH[name])
        except ValueError as error:
            raise ValueError(f"{path.name}: {error}") from None
        if not isinstance(values, list) or not values:
            raise ValueError(f"{path.name}: `{name}` must be a non-empty JSON list")
        return values
    if suffix == ".npy":
        dtype, shape = _members(path)[""]
        _check_array_bytes(path, "", dtype, shape, limit)
        return _check_layout_array(path, name, np.array(_read_member(path, None)))
    raise ValueError(f"{path.name}: `{name}` must be a .json or .npy file")


def _check_layout_array(path: Path, name: str, values: np.ndarray) -> np.ndarray:
    kinds, dims = ("iu", (1, 2)) if name == "references" else ("iub", (1,))
    if values.dtype.kind not in kinds or values.ndim not in dims or values.size == 0:
        expected = "ints, one row per query" if name == "references" else "a boolean mask or ints"
        raise ValueError(f"{path.name}: `{name}` must be {expected}; got {values.dtype} of shape {values.shape}")
    return values


def _is_json_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bytes(size: int) -> str:
    return f"{size} bytes" + (f" ({human_size(size)})" if size >= 1024 else "")


def human_size(size: float) -> str:
    """A byte count as people read it.

    Example:
        >>> human_size(999), human_size(2048), human_size(3 * 2**20)
        ('999 bytes', '2.0 KB', '3.0 MB')
    """
    if size < 1024:
        return f"{size:.0f} bytes"
    for unit in ("KB", "MB", "GB"):
        size /= 1024
        if size < 1024 or unit == "GB":
            return f"{size:.1f} {unit}"
