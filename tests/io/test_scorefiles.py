"""rococo_eval.io.scorefiles: score matrices and layout arrays read from .npy, .npz and .safetensors (memory-mapped
where the format allows, bf16 as float32), never a pickle, and every damaged or oversized file refused by name."""

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from rococo_eval.io import scorefiles
from rococo_eval.io.scorefiles import read_adversarial, read_header, read_layout_arrays, read_references, read_scores


def _bf16_safetensors(path, name, values):
    """A BF16 tensor written by hand: the top 16 bits of each float32, as the format stores them."""
    raw = (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    header = json.dumps({name: {"dtype": "BF16", "shape": list(np.shape(values)), "data_offsets": [0, len(raw)]}})
    Path(path).write_bytes(struct.pack("<Q", len(header)) + header.encode() + raw)
    return path


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ">f4"])
@pytest.mark.parametrize("suffix", [".npy", ".npz", ".safetensors"])
def test_round_trip(tmp_path, suffix, dtype):
    scores = np.random.default_rng(0).standard_normal((4, 7)).astype(dtype)
    path = tmp_path / f"run{suffix}"
    if suffix == ".npy":
        np.save(path, scores)
    elif suffix == ".npz":
        np.savez_compressed(path, scores=scores)
    else:
        save_file({"scores": scores.astype(scores.dtype.newbyteorder("="))}, str(path))
    info = read_header(path)
    assert info.shape == (4, 7) and info.dtype == np.dtype(dtype).name
    read = read_scores(path)
    assert read.dtype.name == np.dtype(dtype).name
    np.testing.assert_array_equal(read, scores)


def test_npy_and_safetensors_are_memory_mapped(tmp_path):
    np.save(tmp_path / "a.npy", np.ones((3, 5), dtype=np.float32))
    save_file({"scores": np.ones((3, 5), dtype=np.float32)}, str(tmp_path / "a.safetensors"))
    assert isinstance(read_scores(tmp_path / "a.npy"), np.memmap)
    assert isinstance(read_scores(tmp_path / "a.safetensors"), np.memmap)


def test_fortran_order_npy(tmp_path):
    scores = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    np.save(tmp_path / "f.npy", scores)
    np.testing.assert_array_equal(read_scores(tmp_path / "f.npy"), scores)


def test_bfloat16_safetensors_becomes_float32(tmp_path):
    values = [[1.5, -2.0, 0.25], [3.0, 0.0, -0.125]]
    path = _bf16_safetensors(tmp_path / "bf.safetensors", "scores", values)
    assert read_header(path).dtype == "bfloat16"
    read = read_scores(path)
    assert read.dtype == np.float32
    np.testing.assert_array_equal(read, np.array(values, dtype=np.float32))


def test_bfloat16_from_torch(tmp_path):
    import torch
    from safetensors.torch import save_file as save_torch

    scores = torch.randn(3, 5).to(torch.bfloat16)
    save_torch({"logits": scores}, str(tmp_path / "t.safetensors"))
    np.testing.assert_array_equal(read_scores(tmp_path / "t.safetensors"), scores.float().numpy())


def test_key_selection(tmp_path):
    path = tmp_path / "many.npz"
    np.savez(path, image_to_text=np.ones((2, 3)), text_to_image=np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"many.npz: holds several arrays \(image_to_text, text_to_image\)"):
        read_header(path)
    assert read_header(path, key="text_to_image").shape == (3, 2)
    with pytest.raises(ValueError, match="many.npz: has no array 'sims'; it holds image_to_text, text_to_image"):
        read_header(path, key="sims")
    np.savez(path, predictions=np.ones((2, 3)), other=np.zeros(4))
    assert read_header(path).key == "predictions"
    save_file({"x": np.ones((2, 3), dtype=np.float32), "references": np.arange(2)}, str(tmp_path / "one.safetensors"))
    info = read_header(tmp_path / "one.safetensors")
    assert (info.key, info.layout_keys) == ("x", ("references",))


def test_layout_arrays_inside(tmp_path):
    path = tmp_path / "custom.npz"
    np.savez(path, scores=np.ones((2, 4)), references=np.array([[0, 1], [2, 2]]), adversarial=np.array([3]))
    inside = read_layout_arrays(path)
    assert inside["references"].tolist() == [[0, 1], [2, 2]] and inside["adversarial"].tolist() == [3]
    np.savez(path, scores=np.ones((2, 4)), references=np.ones(2))
    with pytest.raises(ValueError, match="custom.npz: `references` must be ints, one row per query; got float64"):
        read_layout_arrays(path)
    np.save(tmp_path / "plain.npy", np.ones((2, 4)))
    assert read_layout_arrays(tmp_path / "plain.npy") == {}


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_pickled_objects_are_never_loaded(tmp_path, suffix):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    values = np.empty((2, 2), dtype=object)
    values[:] = Payload()
    path = tmp_path / f"evil{suffix}"
    if suffix == ".npy":
        np.save(path, values, allow_pickle=True)
    else:
        np.savez(path, scores=values)
    with pytest.raises(ValueError, match=f"evil{suffix}: scores must be floats .* got object"):
        read_header(path)
    with pytest.raises(ValueError):
        read_scores(path)
    assert not marker.exists()


@pytest.mark.parametrize("values, problem", [
    (np.ones((2, 3), dtype=np.int64), r"scores must be floats \(float16, bfloat16, float32 or float64\), got int64"),
    (np.ones((2, 3), dtype=bool), "scores must be floats .* got bool"),
    (np.ones((2, 3), dtype=np.complex64), "scores must be floats .* got complex64"),
    (np.ones(3), r"scores must be a non-empty 2-D matrix \(queries x gallery\), got shape \(3,\)"),
    (np.ones((2, 2, 2)), r"got shape \(2, 2, 2\)"),
    (np.ones((0, 4)), r"got shape \(0, 4\)"),
])
def test_bad_arrays(tmp_path, values, problem):
    np.save(tmp_path / "bad.npy", values)
    with pytest.raises(ValueError, match="bad.npy: .*" + problem):
        read_header(tmp_path / "bad.npy")


def test_size_limit_is_checked_before_reading(tmp_path, monkeypatch):
    path = tmp_path / "huge.npy"
    path.write_bytes(b"not an npy file at all" * 100)
    with pytest.raises(ValueError, match=r"huge.npy: the file is 2200 bytes \(2.1 KB\), over the limit of 1024 bytes"):
        read_header(path, limit=1024)
    monkeypatch.setenv(scorefiles.MAX_UPLOAD_MB_ENV, "0.001")
    assert scorefiles.max_upload_bytes() == 1048
    with pytest.raises(ValueError, match="over the limit of 1048 bytes"):
        read_scores(path)
    monkeypatch.setenv(scorefiles.MAX_UPLOAD_MB_ENV, "lots")
    with pytest.raises(ValueError, match=r"\$ROCOCO_MAX_UPLOAD_MB must be a number of megabytes, got 'lots'"):
        scorefiles.max_upload_bytes()


def test_compressed_array_is_checked_against_the_limit_from_its_header(tmp_path):
    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, scores=np.zeros((1000, 1000)))  # 8 MB of zeros, a few KB on disk
    assert path.stat().st_size < 100_000
    with pytest.raises(ValueError, match=r"bomb.npz: array 'scores' is 7.6 MB uncompressed, over the limit of 1.0 MB"):
        read_header(path, limit=1 << 20)


def test_missing_file_and_unknown_type(tmp_path):
    with pytest.raises(ValueError, match="gone.npy: cannot read the file"):
        read_header(tmp_path / "gone.npy")
    (tmp_path / "scores.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match=r"scores.csv: unsupported file type '.csv'; expected one of .npy, .npz"):
        read_header(tmp_path / "scores.csv")


def _safetensors(header: bytes, data_bytes: int) -> bytes:
    return struct.pack("<Q", len(header)) + header + bytes(data_bytes)


@pytest.mark.parametrize("name, content, problem", [
    ("short.npy", b"\x93NUMPY", "short.npy: not a readable .npy file"),
    ("junk.npz", b"PK\x03\x04 not really a zip", "junk.npz: not a readable .npz file"),
    ("tiny.safetensors", b"\x01\x02", "tiny.safetensors: not a readable .safetensors file"),
    ("long.safetensors", struct.pack("<Q", 10**9) + b"{}", "header length 1000000000 does not fit the file"),
    ("text.safetensors", struct.pack("<Q", 5) + b"hello", "not a readable .safetensors file"),
    ("offsets.safetensors", _safetensors(b'{"s":{"dtype":"F32","shape":[2,2],"data_offsets":[0,64]}}', 16),
     "tensor 's' has data offsets that do not fit its shape or the file"),
    ("size.safetensors", _safetensors(b'{"s":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}', 16),
     "tensor 's' has data offsets that do not fit its shape or the file"),
    ("dtype.safetensors", _safetensors(b'{"s":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}', 1),
     "unsupported safetensors dtype 'F8_E4M3'"),
])
def test_corrupt_files(tmp_path, name, content, problem):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ValueError, match=problem):
        read_header(tmp_path / name)


def test_truncated_npy_data(tmp_path):
    path = tmp_path / "cut.npy"
    np.save(path, np.ones((50, 50), dtype=np.float32))
    path.write_bytes(path.read_bytes()[:2000])
    assert read_header(path).shape == (50, 50)  # the header is intact
    with pytest.raises(ValueError, match="cut.npy: cannot read the array"):
        read_scores(path)


def test_references_and_adversarial_files(tmp_path):
    (tmp_path / "r.json").write_text("[[0, 1], 2, [3]]")
    assert read_references(tmp_path / "r.json") == [[0, 1], 2, [3]]
    np.save(tmp_path / "r.npy", np.array([[0, 1], [2, 2]]))
    assert read_references(tmp_path / "r.npy").tolist() == [[0, 1], [2, 2]]
    (tmp_path / "a.json").write_text("[4, 5]")
    assert read_adversarial(tmp_path / "a.json").tolist() == [4, 5]
    np.save(tmp_path / "a.npy", np.array([True, False]))
    assert read_adversarial(tmp_path / "a.npy").dtype == bool


@pytest.mark.parametrize("reader, name, content, problem", [
    (read_references, "r.json", "{\"a\": 1}", "r.json: `references` must be a non-empty JSON list"),
    (read_references, "r.json", "[1, 2", "r.json: not valid references JSON"),
    (read_references, "r.json", "[" * 200_000 + "]" * 200_000, "r.json: the references JSON nests 200000 deep, deeper "
                                                               "than its 2"),
    (read_references, "r.txt", "1 2", r"r.txt: `references` must be a .json or .npy file"),
    (read_adversarial, "a.json", "[true, 3]", r"a.json: `adversarial` must be all booleans \(a mask\) or all ints"),
    (read_adversarial, "a.json", "[[1, 2]]", "a.json: `adversarial` must be all booleans"),
    (read_adversarial, "a.json", "[]", "a.json: `adversarial` must be a non-empty JSON list"),
])
def test_bad_side_files(tmp_path, reader, name, content, problem):
    (tmp_path / name).write_text(content)
    with pytest.raises(ValueError, match=problem):
        reader(tmp_path / name)


def test_bad_side_npy(tmp_path):
    np.save(tmp_path / "r.npy", np.ones(3))
    with pytest.raises(ValueError, match="r.npy: `references` must be ints, one row per query; got float64 of shape"):
        read_references(tmp_path / "r.npy")
    np.save(tmp_path / "a.npy", np.ones((2, 2), dtype=bool))
    with pytest.raises(ValueError, match="a.npy: `adversarial` must be a boolean mask or ints; got bool of shape"):
        read_adversarial(tmp_path / "a.npy")
    (tmp_path / "big.json").write_text("[" + "1, " * 100 + "1]")
    with pytest.raises(ValueError, match="big.json: the file is 303 bytes, over the limit of 100 bytes"):
        read_references(tmp_path / "big.json", limit=100)
