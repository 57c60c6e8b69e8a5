"""Score files for tests at RoCOCO size without writing their data: the data is a hole in a sparse file."""

import numpy as np


def sparse_npy(path, shape, dtype=np.float16):
    """An .npy file of zeros whose data is a hole: real RoCOCO shapes without writing or holding the data."""
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": np.dtype(dtype).str, "fortran_order": False,
                                                      "shape": shape})
        handle.truncate(handle.tell() + int(np.prod(shape)) * np.dtype(dtype).itemsize)
    return path


def sparse_file(path, size: int = 2 << 30, head: bytes = b""):
    """A file of ``size`` bytes (2 GiB by default) that starts with ``head`` and goes on as a hole (zeros neither
    written nor held): what a reader that reads it whole pays for, at no cost to the disk."""
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(size)
    return path
