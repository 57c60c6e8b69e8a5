"""Caches that notice corruption (issue 29): a damaged embedding or ITM file is named in a warning, dropped and
computed again, and never changes a number."""

import json
import logging

import numpy as np
import pytest

from rococo_eval.cli import main
from rococo_eval.io.atomic import checked_stem
from rococo_eval.models.cache import EmbeddingCache, ItemSet

pytestmark = pytest.mark.slow


class Letters:
    """Embeds a caption as (its length, its index in the alphabet of its first letter, 1)."""

    name, fingerprint = "letters", "1" * 64

    def __init__(self):
        self.encoded = 0

    def encode_texts(self, texts):
        self.encoded += len(texts)
        return np.array([[len(text), ord(text[0]) - 96, 1.0] for text in texts], dtype=np.float32)


ITEMS = ItemSet("captions/letters", "text", [f"{letter} caption {n}" for n, letter in enumerate("abcdefghij")])
EXPECTED = Letters().encode_texts(ITEMS.items)


def _finished(folder):
    (path,) = [path for path in folder.iterdir() if checked_stem(path) == "embeddings"]
    return path


def _damage_data(path, how):
    data = bytearray(path.read_bytes())
    header = len(data) - EXPECTED.nbytes
    if how == "flipped bytes":
        for position in range(header + 8, header + 24):
            data[position] ^= 0x55
        path.write_bytes(bytes(data))
    elif how == "rows reversed":
        np.save(path, EXPECTED[::-1].copy())
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "one row short":
        np.save(path, EXPECTED[:-1])
    elif how == "truncated":
        path.write_bytes(bytes(data[:header + 7]))
    elif how == "float64":
        np.save(path, EXPECTED.astype(np.float64))


@pytest.mark.parametrize("how", ["flipped bytes", "rows reversed", "empty", "one row short", "truncated", "float64"])
def test_a_damaged_finished_file_is_named_dropped_and_embedded_again(tmp_path, caplog, how):
    cache = EmbeddingCache(tmp_path)
    cache.embeddings(Letters(), ITEMS)
    path = _finished(cache.folder(Letters(), ITEMS))
    _damage_data(path, how)
    model = Letters()
    with caplog.at_level(logging.WARNING, logger="rococo_eval"):
        vectors = cache.embeddings(model, ITEMS)
    np.testing.assert_array_equal(vectors, EXPECTED)
    assert model.encoded == len(ITEMS)  # embedded again, not read
    assert f"cached embeddings {path} are dropped and embedded again" in caplog.text
    np.testing.assert_array_equal(cache.embeddings(Letters(), ITEMS), EXPECTED)  # and the new file reads


@pytest.mark.parametrize("how", ["int64 zeros", "a NaN", "wrong width", "empty", "truncated", "renamed"])
def test_a_damaged_shard_is_named_dropped_and_encoded_again(tmp_path, caplog, how):
    cache = EmbeddingCache(tmp_path, batch_size=4)
    folder = cache.folder(Letters(), ITEMS)

    class Interrupted(Letters):
        def encode_texts(self, texts):
            if self.encoded >= 8:
                raise KeyboardInterrupt
            return super().encode_texts(texts)

    with pytest.raises(KeyboardInterrupt):
        cache.embeddings(Interrupted(), ITEMS)
    shard = sorted(folder.glob("rows-*.npy"))[1]  # rows 4 to 8
    if how == "int64 zeros":
        np.save(shard, np.zeros((4, 3), dtype=np.int64))
    elif how == "a NaN":
        rows = EXPECTED[4:8].copy()
        rows[1, 1] = np.nan
        np.save(shard, rows)
    elif how == "wrong width":
        np.save(shard, np.ones((4, 5), dtype=np.float32))
    elif how == "empty":
        shard.write_bytes(b"")
    elif how == "truncated":
        shard.write_bytes(shard.read_bytes()[:100])
    else:  # another range's name
        shard.rename(folder / shard.name.replace("rows-000004-000008", "rows-000004-000009"))
        shard = folder / shard.name.replace("rows-000004-000008", "rows-000004-000009")
    model = Letters()
    with caplog.at_level(logging.WARNING, logger="rococo_eval"):
        vectors = cache.embeddings(model, ITEMS)
    np.testing.assert_array_equal(vectors, EXPECTED)
    assert model.encoded == 6  # rows 4-8 again, and 8-10
    assert f"cache shard {shard} is dropped" in caplog.text and not shard.exists()


@pytest.mark.parametrize("kept", [True, False])
def test_an_earlier_versions_finished_file_is_adopted_when_it_holds_the_rows(tmp_path, caplog, kept):
    """A cache of an earlier version (``embeddings.npy``, no digest in its name): adopted under its digest when it
    holds the set's finite float32 rows (a day of embedding is not thrown away), else dropped and embedded again."""
    cache = EmbeddingCache(tmp_path)
    cache.embeddings(Letters(), ITEMS)
    folder = cache.folder(Letters(), ITEMS)
    _finished(folder).unlink()
    np.save(folder / "embeddings.npy", EXPECTED if kept else EXPECTED[:-1])
    model = Letters()
    with caplog.at_level(logging.WARNING, logger="rococo_eval"):
        np.testing.assert_array_equal(cache.embeddings(model, ITEMS), EXPECTED)
    assert model.encoded == (0 if kept else len(ITEMS)) and not (folder / "embeddings.npy").exists()
    assert (f"{folder / 'embeddings.npy'} (an earlier version's cache, without a digest of its content) is kept as "
            f"{_finished(folder).name}" if kept else "(an earlier version's cache) is dropped and embedded again: holds "
            "float32 of shape (9, 3), not 10 float32 rows") in caplog.text


def test_a_damaged_manifest_is_written_anew(tmp_path, caplog):
    cache = EmbeddingCache(tmp_path)
    cache.embeddings(Letters(), ITEMS)
    manifest = cache.folder(Letters(), ITEMS) / "manifest.json"
    manifest.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="rococo_eval"):
        np.testing.assert_array_equal(cache.embeddings(Letters(), ITEMS), EXPECTED)
    assert f"{manifest} is damaged" in caplog.text and json.loads(manifest.read_text())["items"] == ITEMS.name


def test_non_finite_embeddings_are_refused_when_written(tmp_path):
    class Broken(Letters):
        def encode_texts(self, texts):
            rows = super().encode_texts(texts)
            rows[0, 0] = np.inf
            return rows

    with pytest.raises(ValueError, match="model 'letters': encode_texts returned non-finite embeddings"):
        EmbeddingCache(tmp_path).embeddings(Broken(), ITEMS)
    assert not list(EmbeddingCache(tmp_path).folder(Broken(), ITEMS).glob("*.npy"))


def test_a_run_on_a_damaged_cache_gives_the_same_report(hf_name, blip_name, benchmark, tmp_path, caplog):
    """``rococo-eval run`` of a dual encoder and of BLIP (whose ITM pairs are stored too), then the same run on a
    cache whose finished embeddings have flipped bytes and whose pair shards are truncated, empty or CRC-damaged:
    the same report, each damaged file named."""
    for model, extra in ((hf_name, []), (blip_name, ["--rerank-k", "4"])):
        cache = tmp_path / model.replace(":", "_").replace("/", "_")
        arguments = ["run", "--model", model, "--benchmark", str(benchmark), "--attacks", "rand_voca,mix_seed1",
                     "--cache-dir", str(cache), "--batch-size", "8", *extra]
        assert main(arguments + ["--out", str(tmp_path / "first"), "--quiet"]) == 0
        finished = sorted(path for path in (cache / "embeddings").rglob("embeddings.*.npy"))
        for path in finished[:2]:
            data = bytearray(path.read_bytes())
            data[-20:-4] = bytes(16)
            path.write_bytes(bytes(data))
        pairs = sorted((cache / "embeddings").rglob("pairs-*.npz"))
        assert bool(pairs) == bool(extra)
        for path, damage in zip(pairs, ("truncate", "empty", "crc")):
            data = bytearray(path.read_bytes())
            if damage == "truncate":
                data = data[:len(data) // 2]
            elif damage == "empty":
                data = bytearray()
            else:
                data[60] ^= 0xFF
            path.write_bytes(bytes(data))
        caplog.clear()
        assert main(arguments + ["--out", str(tmp_path / "second"), "--quiet"]) == 0  # quiet, and still it warns
        err = caplog.text
        first, second = (json.loads((tmp_path / name / "report.json").read_text()) for name in ("first", "second"))
        assert first["results"] == second["results"], model
        assert "warnings" not in first["meta"]
        for path in finished[:2] + pairs[:3]:
            assert str(path) in err, path
            assert any(str(path) in warning for warning in second["meta"]["warnings"]), path  # issue 39
