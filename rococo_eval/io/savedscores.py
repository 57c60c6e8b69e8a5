"""Score matrices on disk: ``rococo-eval run --save-scores DIR`` writes one file per gallery.

A full matrix is an ``.npy``; a re-ranker's (BLIP's) may instead be a compact ``.npz`` (``--compact-scores``: each
query's listed candidates and their scores, and the fill of the rest; :func:`write_top_k`, read back by
:func:`rococo_eval.io.scorefiles.read_top_k`), 20 (text-to-image) to 100 (image-to-text) times smaller for
RoCOCO at k = 256.

Each file holds a gallery's queries x gallery float32 scores in the official order (the order of the official
``itm_eval``; see :mod:`rococo_eval.layout`), named so that ``rococo-eval score DIR/*.npy`` and the Space read
its gallery from the name and the shape alone: ``<attack>_<direction>_official_order.npy``. A matrix is
written block by block into a memory-mapped temporary file beside the target, flushed and renamed into place,
so a full RoCOCO gallery (up to 1 GB) is never held twice and an interrupted write leaves no partial file.

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> with ScoreMatrixWriter(folder / score_file_name("clean", "text_to_image"), (3, 2)) as scores:
    ...     scores.write(0, np.ones((2, 2), dtype=np.float32))
    ...     scores.write(2, np.zeros((1, 2), dtype=np.float32))
    >>> np.load(folder / "clean_text_to_image_official_order.npy").tolist()
    [[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rococo_eval.io.atomic import temporary_beside, write_atomic


def score_file_name(attack: str, direction: str, candidates: int | None = None) -> str:
    """The file name of a gallery's saved scores; ``official_order`` tells ``score`` the order. With ``candidates``
    (a compact file's listed candidates per query), the compact file's name.

    Example:
        >>> score_file_name("rand_voca", "image_to_text"), score_file_name("clean", "text_to_image", 256)
        ('rand_voca_image_to_text_official_order.npy', 'clean_text_to_image_official_order_top256.npz')
    """
    if candidates is not None:
        return f"{attack}_{direction}_official_order_top{candidates}.npz"
    return f"{attack}_{direction}_official_order.npy"


def write_top_k(path, top_columns, top_scores, fill: float, num_gallery: int) -> Path:
    """Write a compact score file (``.npz`` or ``.safetensors``; see the module's docstring) atomically: it appears
    at ``path`` only when complete. The columns are stored as int32 when the gallery allows.

    Example:
        >>> import tempfile
        >>> from rococo_eval.io.scorefiles import read_top_k
        >>> path = Path(tempfile.mkdtemp()) / score_file_name("clean", "text_to_image", 2)
        >>> _ = write_top_k(path, [[1, 0]], np.array([[2.5, 1.0]], dtype=np.float32), -100.0, 4)
        >>> compact = read_top_k(path)
        >>> compact.top_columns.dtype, compact[np.array([[0]]), np.array([[0, 1, 2]])].tolist()
        (dtype('int32'), [[1.0, 2.5, -100.0]])
    """
    path = Path(path)
    columns, scores = np.asarray(top_columns), np.asarray(top_scores)
    if columns.ndim != 2 or columns.dtype.kind not in "iu" or scores.shape != columns.shape:
        raise ValueError(f"{path.name}: `top_columns` must be ints and `top_scores` of their shape, queries x "
                         f"candidates; got {columns.dtype} {columns.shape} and {scores.dtype} {scores.shape}")
    if columns.size and not (0 <= columns.min() and columns.max() < num_gallery):
        raise ValueError(f"{path.name}: `top_columns` must be gallery columns from 0 to {num_gallery - 1}, got "
                         f"{int(columns.min())} to {int(columns.max())}")
    columns = columns.astype(np.int32 if num_gallery < 2**31 else np.int64)
    if scores.dtype not in (np.float16, np.float32, np.float64):
        if scores.dtype.kind not in "fV" or scores.dtype.itemsize != 2:  # bfloat16 (ml_dtypes): exact in float32
            raise ValueError(f"{path.name}: `top_scores` must be float16, bfloat16, float32 or float64, got "
                             f"{scores.dtype}")
        scores = scores.astype(np.float32)
    scores = np.ascontiguousarray(scores)
    arrays = {"top_columns": np.ascontiguousarray(columns), "top_scores": scores,
              "fill": np.array(fill, dtype=scores.dtype), "num_gallery": np.array(num_gallery, dtype=np.int64)}
    if path.suffix.lower() == ".npz":
        return write_atomic(path, lambda handle: np.savez(handle, **arrays))
    if path.suffix.lower() == ".safetensors":
        from safetensors.numpy import save

        data = save(arrays)
        return write_atomic(path, lambda handle: handle.write(data))
    raise ValueError(f"{path.name}: a compact score file is an .npz or a .safetensors file")



class ScoreMatrixWriter:
    """Write a matrix of ``shape`` (float32, or ``dtype``) to ``path`` block by block; it appears at ``path`` only when
    complete.

    Use as a context manager: leaving it normally flushes the rows and renames the file into place; leaving it
    by an exception removes the temporary file. Rows never written are an error.
    """

    def __init__(self, path, shape, dtype=np.float32):
        self.path = Path(path)
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self._written = 0
        self._temporary = None
        self._matrix = None

    def __enter__(self):
        self._temporary = temporary_beside(self.path)
        self._matrix = np.lib.format.open_memmap(self._temporary, mode="w+", dtype=self.dtype, shape=self.shape)
        return self

    def write(self, start: int, rows) -> None:
        """Put ``rows`` at query rows ``start``, ``start + 1``, ...; blocks must come in order, without gaps."""
        rows = np.asarray(rows)
        if start != self._written or rows.ndim != 2 or rows.shape[1] != self.shape[1]:
            raise ValueError(f"`rows` must continue {self.path.name} at row {self._written} with "
                             f"{self.shape[1]} columns, got shape {rows.shape} at row {start}")
        self._matrix[start:start + len(rows)] = rows
        self._written += len(rows)

    def __exit__(self, kind, error, trace):
        try:
            if kind is None:
                if self._written != self.shape[0]:
                    raise ValueError(f"{self.path.name}: {self._written} of {self.shape[0]} rows written")
                self._matrix.flush()
                with open(self._temporary, "rb+") as handle:
                    os.fsync(handle.fileno())
                del self._matrix
                os.replace(self._temporary, self.path)
        finally:
            self._matrix = None
            if self._temporary.exists():
                self._temporary.unlink()
        return False
