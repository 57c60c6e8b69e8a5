"""Malformed score files, each the smallest reproduction of a way a file once got past the parsers (issue 29): forged
safetensors headers, a corrupt deflate stream, a side file nested 200,000 deep. Used by the tests and by
``benchmarks/bench_malformed_uploads.py``."""

import io
import json
import struct
import zipfile
from pathlib import Path

import numpy as np

HUGE_HEADER_ENTRIES = 1_560_000  # about 100 MB of header, as the probe's


def safetensors_with_header(path: Path, header: bytes, data: bytes = b"") -> Path:
    """A file of safetensors' framing (an 8-byte length, then ``header``, then ``data``), whatever the header holds."""
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


def huge_header(path: Path, entries: int = HUGE_HEADER_ENTRIES) -> Path:
    """A well-formed safetensors file holding a 20 x 40 float32 matrix, whose header also lists ``entries`` empty
    tensors: about 100 MB of header for 3.2 kB of data."""
    parts = ['{"scores":{"dtype":"F32","shape":[20,40],"data_offsets":[0,3200]}']
    parts += [f',"t{number}":{{"dtype":"F32","shape":[0],"data_offsets":[3200,3200]}}' for number in range(entries)]
    header = ("".join(parts) + "}").encode()
    return safetensors_with_header(path, header, np.zeros((20, 40), dtype=np.float32).tobytes())


def corrupt_npz(path: Path) -> Path:
    """An ``.npz`` whose compressed scores have damaged bytes in their deflate stream (the zip's CRC is rewritten to
    match, so only the inflating fails)."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, scores=np.random.default_rng(0).normal(size=(20, 40)).astype(np.float32))
    with zipfile.ZipFile(buffer) as archive:
        info = archive.getinfo("scores.npy")
        offset = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data = bytearray(buffer.getvalue())
    for position in range(offset + 40, offset + 60):
        data[position] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def malformed_files(folder: Path) -> dict[str, Path]:
    """Every malformed score file, by what is wrong with it."""
    folder.mkdir(parents=True, exist_ok=True)
    matrix = np.zeros((2, 3), dtype=np.float32).tobytes()

    def entry(shape):
        return json.dumps({"scores": {"dtype": "F32", "shape": shape, "data_offsets": [0, 24]}}).encode()

    return {
        "header null": safetensors_with_header(folder / "null.safetensors", b"null"),
        "header string": safetensors_with_header(folder / "string.safetensors", b'"abc"'),
        "header number": safetensors_with_header(folder / "number.safetensors", b"12345"),
        "header nested 100,000 deep": safetensors_with_header(folder / "deep.safetensors",
                                                              b"[" * 100_000 + b"]" * 100_000),
        "float shape": safetensors_with_header(folder / "float_shape.safetensors", entry([2.0, 3]), matrix),
        "bool shape": safetensors_with_header(folder / "bool_shape.safetensors", entry([True, 3]), matrix),
        "corrupt deflate": corrupt_npz(folder / "corrupt.npz"),
        "65 members": many_members(folder / "many.npz", 65),
        "encrypted member": encrypted_npz(folder / "encrypted.npz"),
        "LZMA member": lzma_npz(folder / "lzma.npz"),
        "long dtype": safetensors_with_header(folder / "long_dtype.safetensors", json.dumps(
            {"scores": {"dtype": "F32\n" + "X" * 5000, "shape": [2, 3], "data_offsets": [0, 24]}}).encode(), matrix),
    }


def many_members(path: Path, count: int) -> Path:
    """An archive of ``count`` empty stored members, its bytes written directly (zipfile takes long to write many)."""
    local, central, offset = [], [], 0
    for number in range(count):
        name = f"a{number}.npy".encode()
        header = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0) + name
        central.append(struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0, 0,
                                   0, 0, 0, offset) + name)
        local.append(header)
        offset += len(header)
    directory = b"".join(central)
    entries = min(count, 0xFFFF)
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, entries, entries, len(directory), offset, 0)
    path.write_bytes(b"".join(local) + directory + end)
    return path


def encrypted_npz(path: Path) -> Path:
    """An ``.npz`` whose one member is marked encrypted (in its local and central headers)."""
    buffer = io.BytesIO()
    np.savez(buffer, scores=np.zeros((2, 3), dtype=np.float32))
    data = bytearray(buffer.getvalue())
    for signature, flag_offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        position = data.find(signature)
        data[position + flag_offset] |= 0x1
    path.write_bytes(bytes(data))
    return path


def lzma_npz(path: Path) -> Path:
    """An ``.npz`` whose member is LZMA-compressed (NumPy writes stored or deflated members only)."""
    buffer = io.BytesIO()
    np.save(buffer, np.zeros((2, 3), dtype=np.float32))
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_LZMA) as archive:
        archive.writestr("scores.npy", buffer.getvalue())
    return path


def deep_references(path: Path, depth: int = 200_000) -> Path:
    """A references JSON file nested ``depth`` deep."""
    path.write_text("[" * depth + "]" * depth)
    return path
