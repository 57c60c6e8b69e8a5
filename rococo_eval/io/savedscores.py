"""Full score matrices on disk: ``rococo-eval run --save-scores DIR`` writes one ``.npy`` per gallery.

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
import tempfile
from pathlib import Path

import numpy as np


def score_file_name(attack: str, direction: str) -> str:
    """The file name of a gallery's saved scores; ``official_order`` tells ``score`` the order.

    Example:
        >>> score_file_name("rand_voca", "image_to_text")
        'rand_voca_image_to_text_official_order.npy'
    """
    return f"{attack}_{direction}_official_order.npy"


class ScoreMatrixWriter:
    """Write a float32 matrix of ``shape`` to ``path`` block by block; it appears at ``path`` only when complete.

    Use as a context manager: leaving it normally flushes the rows and renames the file into place; leaving it
    by an exception removes the temporary file. Rows never written are an error.
    """

    def __init__(self, path, shape):
        self.path = Path(path)
        self.shape = tuple(int(n) for n in shape)
        self._written = 0
        self._temporary = None
        self._matrix = None

    def __enter__(self):
        handle, name = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        os.close(handle)
        self._temporary = Path(name)
        self._matrix = np.lib.format.open_memmap(name, mode="w+", dtype=np.float32, shape=self.shape)
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
