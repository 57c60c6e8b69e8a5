"""rococo_eval.models.cache: embeddings cached per model and item set, resumable at batch granularity, and the
pipeline that fills it: image preprocessing in the workers, captions tokenized in a thread ahead of the model.

The embeddings must stay bit-identical to those of the pipeline before it moved (the cache's fingerprints
keep their meaning). The functions named ``committed_*`` below are that earlier pipeline, kept here as the
reference.
"""

import contextlib
import json
import logging
import shutil
import threading
import types

import numpy as np
import pytest
from PIL import Image

from helpers.photos import photos
from helpers.tiny_models import (
    make_tiny_blip,
    make_tiny_hf_clip,
    make_tiny_open_clip_folder,
    make_tiny_pcmepp,
    make_tiny_vse,
    torchvision_stand_in,
)
from rococo_eval.cli import main
from rococo_eval.models.adapters import load_model
from rococo_eval.io.atomic import checked_stem
from rococo_eval.models.cache import EmbeddingCache, ItemSet
from rococo_eval.scoring.galleries import ground_truth_captions


def committed_hf_embeddings(model, images):
    """The hf adapter's ``encode_images`` before preprocessing moved to the workers."""
    import torch

    from rococo_eval.models.adapters import _features

    pixels = model.processor(images=[image.convert("RGB") for image in images], return_tensors="pt")["pixel_values"]
    with torch.inference_mode():
        return model.finish(_features(model.model.get_image_features(
            pixel_values=pixels.to(device=model.device, dtype=model.dtype))))


def committed_clip_preprocess(image, side, mean, std):
    """open_clip's eval transform as ``clip_preprocess`` computed it before its table look-up (shortest edge)."""
    width, height = image.size
    short, long = min(width, height), max(width, height)
    new_size = (side, int(side * long / short)) if width <= height else (int(side * long / short), side)
    image = image.resize(new_size, Image.Resampling.BICUBIC)
    left, top = int(round((image.size[0] - side) / 2.0)), int(round((image.size[1] - side) / 2.0))
    pixels = np.asarray(image.crop((left, top, left + side, top + side)).convert("RGB"), dtype=np.float32)
    pixels = (pixels / np.float32(255) - np.asarray(mean, dtype=np.float32)) / np.asarray(std, dtype=np.float32)
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))


def embed_through_the_cache(model, images, folder, batch_size=3, workers=2):
    cache = EmbeddingCache(folder, batch_size=batch_size, workers=workers)
    return cache.embeddings(model, ItemSet("images/photos", "image", images, fingerprint="0" * 64))


@pytest.mark.parametrize("workers", [0, 2])
def test_hf_embeddings_are_bit_identical_to_the_committed_pipeline(hf_name, tmp_path, workers):
    model = load_model(hf_name, device="cpu")
    assert model.fast_preprocessing is not None  # the processor is replicated, not called image by image
    images = photos()
    vectors = embed_through_the_cache(model, images, tmp_path, workers=workers)
    expected = np.concatenate([committed_hf_embeddings(model, images[start:start + 3]) for start in range(0, 7, 3)])
    assert vectors.dtype == np.float32 and np.array_equal(vectors, expected)
    assert np.array_equal(model.encode_images(images[:3]), expected[:3])


def test_open_clip_embeddings_are_bit_identical_to_the_committed_pipeline(open_clip_name, tmp_path):
    import torch

    model = load_model(open_clip_name, device="cpu")
    cfg = model.preprocess_cfg
    images = photos()
    vectors = embed_through_the_cache(model, images, tmp_path)
    expected = []
    for start in range(0, len(images), 3):
        pixels = np.stack([committed_clip_preprocess(image, 32, cfg["mean"], cfg["std"])
                           for image in images[start:start + 3]])
        with torch.inference_mode():
            expected.append(model.finish(model.model.encode_image(torch.from_numpy(pixels))))
    assert np.array_equal(vectors, np.concatenate(expected))


def committed_hf_text_embeddings(model, texts):
    """The hf adapter's ``encode_texts`` before tokenizing moved to a thread ahead of the model."""
    import torch

    from rococo_eval.models.adapters import _features

    batch = model.tokenizer(list(texts), padding=model.padding, truncation=True, max_length=model.max_length,
                            return_tensors="pt")
    with torch.inference_mode():
        return model.finish(_features(model.model.get_text_features(**batch.to(model.device))))


def committed_open_clip_text_embeddings(model, texts):
    """The open_clip adapter's ``encode_texts`` before tokenizing moved to a thread ahead of the model."""
    import torch

    with torch.inference_mode():
        return model.finish(model.model.encode_text(model.tokenizer(list(texts)).to(model.device)))


CAPTIONS = ["a dog on a red sofa", "two people riding horses along a beach at sunset", "a cat",
            "A kitchen with a stove, a sink and many pots hanging from the ceiling above a wooden table", "snow",
            "an empty street", "a man holding an umbrella in the rain while a bus passes by"]


def tokenizing_threads(model, monkeypatch):
    """Record the name of the thread each ``tokenize_texts`` call runs in."""
    names = []
    tokenize = model.tokenize_texts

    def recorded(texts):
        names.append(threading.current_thread().name)
        return tokenize(texts)

    monkeypatch.setattr(model, "tokenize_texts", recorded)
    return names


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["hf", "open_clip"])
def test_text_embeddings_are_bit_identical_to_the_committed_pipeline(kind, workers, request, tmp_path, monkeypatch):
    name = request.getfixturevalue(f"{kind}_name")
    model = load_model(name, device="cpu")
    committed = committed_hf_text_embeddings if kind == "hf" else committed_open_clip_text_embeddings
    threads = tokenizing_threads(model, monkeypatch)
    cache = EmbeddingCache(tmp_path, batch_size=3, workers=workers)
    vectors = cache.embeddings(model, ItemSet("captions/demo", "text", CAPTIONS))
    expected = np.concatenate([committed(model, CAPTIONS[start:start + 3]) for start in range(0, 7, 3)])
    assert vectors.dtype == np.float32 and np.array_equal(vectors, expected)
    assert len(threads) == 3  # one call per batch
    if workers:  # tokenized ahead, in its own thread; the model ran in this one
        assert all(name.startswith("rococo-tokenize") for name in threads)
    else:
        assert set(threads) == {threading.current_thread().name}
    assert np.array_equal(model.encode_texts(CAPTIONS[:3]), expected[:3])


def test_a_tokenizer_error_reaches_the_caller_and_nothing_is_cached(hf_name, tmp_path, monkeypatch):
    model = load_model(hf_name, device="cpu")
    tokenize = model.tokenize_texts

    def failing(texts):
        if "snow" in texts:
            raise ValueError("cannot tokenize 'snow'")
        return tokenize(texts)

    monkeypatch.setattr(model, "tokenize_texts", failing)
    cache = EmbeddingCache(tmp_path, batch_size=3, workers=2)
    items = ItemSet("captions/demo", "text", CAPTIONS)
    with pytest.raises(ValueError, match="cannot tokenize 'snow'"):
        cache.embeddings(model, items)
    assert not cache.is_complete(model, items)
    assert len(list(cache.folder(model, items).glob("rows-*.npy"))) == 1  # the batch before the error is kept


def test_a_model_error_stops_the_tokenizing_thread_before_it_reaches_the_caller(hf_name, tmp_path, monkeypatch):
    model = load_model(hf_name, device="cpu")
    encode = model.encode_tokenized
    calls = []

    def failing(tokens):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("out of memory")
        return encode(tokens)

    monkeypatch.setattr(model, "encode_tokenized", failing)
    cache = EmbeddingCache(tmp_path, batch_size=2, workers=2)
    with pytest.raises(RuntimeError, match="out of memory"):  # the traceback (and its frames) is still held here
        cache.embeddings(model, ItemSet("captions/demo", "text", CAPTIONS))
    assert not [thread.name for thread in threading.enumerate() if thread.name.startswith("rococo-tokenize")]


class MeanColour:
    """A model with ``encode_images`` only (as the BLIP adapters): it must be given the images themselves."""

    name, fingerprint = "mean-colour", "1" * 64

    def __init__(self):
        self.batches = []

    def encode_images(self, images):
        self.batches.append([image.size for image in images])
        return np.array([np.asarray(image.convert("RGB"), dtype=np.float32).mean(axis=(0, 1)) for image in images])


def test_models_without_preprocessing_are_given_the_images(tmp_path):
    model, images = MeanColour(), photos()
    vectors = embed_through_the_cache(model, images, tmp_path, batch_size=4)
    assert model.batches == [[image.size for image in images[:4]], [image.size for image in images[4:]]]
    assert np.array_equal(vectors, MeanColour().encode_images(images))


class Recorder:
    """A stand-in text model for the cache: a text's embedding is (its length, the sum of its characters / 1000);
    it records each batch it is given (``sizes``: their lengths)."""

    name, fingerprint = "recorder", "1" * 64

    def __init__(self):
        self.batches = []

    @property
    def sizes(self):
        return [len(batch) for batch in self.batches]

    def encode_texts(self, texts):
        self.batches.append(list(texts))
        return np.array([[len(text), sum(map(ord, text)) / 1000.0] for text in texts], dtype=np.float32)


def test_cache_resumes_with_another_batch_size_and_drops_broken_shards(tmp_path):
    texts = ground_truth_captions_of(["a" * n for n in range(10)])
    folder = EmbeddingCache(tmp_path).folder(Recorder(), texts)
    model = Recorder()
    model.encode_texts = interrupt_after(model.encode_texts, calls=2)
    with pytest.raises(KeyboardInterrupt):
        EmbeddingCache(tmp_path, batch_size=3).embeddings(model, texts)
    shards = sorted(folder.glob("rows-*"))
    assert [checked_stem(path) for path in shards] == ["rows-000000-000003", "rows-000003-000006"]
    shards[1].write_bytes(b"torn")
    model = Recorder()
    vectors = EmbeddingCache(tmp_path, batch_size=4).embeddings(model, texts)
    assert vectors[:, 0].tolist() == list(range(10)) and model.sizes == [4, 3]
    assert sorted(checked_stem(path) or path.name for path in folder.iterdir()) == ["embeddings", "manifest.json"]


def test_cache_keys_on_content(tmp_path):
    model, cache = Recorder(), EmbeddingCache(tmp_path)
    cache.embeddings(model, ground_truth_captions_of(["a", "bb"]))
    assert cache.embeddings(model, ground_truth_captions_of(["a", "bbb"]))[:, 0].tolist() == [1.0, 3.0]
    assert model.sizes == [2, 2]
    cache.embeddings(model, ground_truth_captions_of(["a", "bb"]))
    assert model.sizes == [2, 2]


def test_the_cache_keys_on_the_fingerprint_and_shows_the_name(tmp_path):
    """Another name with the same fingerprint (a checkpoint at another path) reads the cache; the manifest shows the
    name it was written for. Another fingerprint under the same name has a folder of its own."""
    texts, cache = ground_truth_captions_of(["a", "bb"]), EmbeddingCache(tmp_path)
    expected = cache.embeddings(Recorder(), texts)
    renamed = Recorder()
    renamed.name = "vse:/elsewhere/model_best.pth"
    assert np.array_equal(cache.embeddings(renamed, texts), expected) and renamed.sizes == []
    manifest = json.loads((cache.folder(renamed, texts) / "manifest.json").read_text())
    assert manifest["model"] == "recorder" and manifest["model_fingerprint"] == Recorder.fingerprint
    retrained = Recorder()
    retrained.fingerprint = "2" * 64
    cache.embeddings(retrained, texts)
    assert retrained.sizes == [2] and cache.folder(retrained, texts) != cache.folder(renamed, texts)


def ground_truth_captions_of(captions):
    return ground_truth_captions(types.SimpleNamespace(ground_truth_captions=lambda: captions))


def interrupt_after(encode, calls):
    count = iter(range(calls + 1))

    def interrupted(batch):
        if next(count) == calls:
            raise KeyboardInterrupt
        return encode(batch)

    return interrupted


@pytest.mark.parametrize("make, problem", [
    (lambda root: EmbeddingCache(root, batch_size=0), "`batch_size` must be a positive int, got 0"),
    (lambda root: EmbeddingCache(root, batch_size=2.0), "`batch_size` must be a positive int, got 2.0"),
    (lambda root: EmbeddingCache(root, workers=-1), "`workers` must be a non-negative int, got -1"),
    (lambda root: ItemSet("captions/demo", "audio", ["a"]), "`kind` must be one of ('text', 'image'), got 'audio'"),
    (lambda root: ItemSet("images/demo", "image", []), "`fingerprint` is required for image item sets"),
])
def test_bad_arguments_are_refused_by_name(tmp_path, make, problem):
    with pytest.raises(ValueError) as caught:
        make(tmp_path)
    assert str(caught.value) == problem
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("vectors, problem", [
    (np.zeros((2, 2)), "model 'broken': encode_texts returned 2 rows for a batch of 3"),
    (np.zeros(3), "model 'broken': encode_texts returned shape (3,), not (items, dimension)"),
    (np.full((3, 2), np.nan), "model 'broken': encode_texts returned non-finite embeddings"),
    (["x", "y", "z"], "model 'broken': encode_texts's output must be an array of real numbers (no strings, None, "
                      "ragged lists or ints beyond 64 bits), got ['x', 'y', 'z']"),
    ({"a": 1}, "model 'broken': encode_texts's output must be an array of real numbers (no strings, None, ragged "
               "lists or ints beyond 64 bits), got {'a': 1}"),
])
def test_a_models_wrong_output_is_refused_and_nothing_is_cached(tmp_path, vectors, problem):
    class Broken:
        name, fingerprint = "broken", "b" * 64

        def encode_texts(self, texts):
            return vectors

    cache, items = EmbeddingCache(tmp_path, batch_size=3), ItemSet("captions/demo", "text", ["a", "b", "c", "d"])
    with pytest.raises(ValueError) as caught:
        cache.embeddings(Broken(), items)
    assert str(caught.value) == problem
    assert not cache.is_complete(Broken(), items)
    assert [path.name for path in cache.folder(Broken(), items).iterdir()] == ["manifest.json"]


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_shares_of_any_number_of_processes_embed_each_batch_of_one_process_once(tmp_path, world):
    """encode_share of every rank, then embeddings(): the batches of one process, each encoded once, no other."""
    items = ItemSet("captions/demo", "text", [f"caption {index}" * (index % 3 + 1) for index in range(11)])
    alone = Recorder()
    expected = EmbeddingCache(tmp_path / "one", batch_size=3).embeddings(alone, items)
    shared = Recorder()
    cache = EmbeddingCache(tmp_path / "shared", batch_size=3)
    for rank in range(world):
        cache.encode_share(shared, items, rank, world)
    assert sorted(shared.batches) == sorted(alone.batches) and len(shared.batches) == 4
    assert np.array_equal(cache.embeddings(shared, items), expected) and len(shared.batches) == 4


def test_a_share_skips_the_batches_that_shards_hold(tmp_path):
    """A resumed share encodes only its batches that no shard holds (another rank's are never its work)."""
    items = ItemSet("captions/demo", "text", [f"caption {index}" for index in range(12)])
    cache = EmbeddingCache(tmp_path, batch_size=2)
    first = Recorder()
    cache.encode_share(first, items, 0, 2)
    assert [batch[0] for batch in first.batches] == ["caption 0", "caption 2", "caption 4"]
    next(cache.folder(first, items).glob("rows-000002-000004.*.npy")).unlink()  # the batch in flight when it stopped
    again = Recorder()
    cache.encode_share(again, items, 0, 2)
    cache.encode_share(again, items, 1, 2)
    assert [batch[0] for batch in again.batches] == ["caption 2", "caption 6", "caption 8", "caption 10"]
    assert cache.is_complete(again, items) is False and len(cache.embeddings(again, items)) == 12


def _torchvision_stand_in_for(form):
    return torchvision_stand_in() if form == "open_clip" else contextlib.nullcontext()


# each local checkpoint form: how to write it in a folder (weights drawn with a seed), and the run's extra arguments
CHECKPOINT_FORMS = {
    "hf": (make_tiny_hf_clip, []),
    "hf BLIP": (lambda folder, seed: make_tiny_blip(folder, seed=seed), ["--rerank-k", "4"]),
    "open_clip": (make_tiny_open_clip_folder, []),
    "vse": (lambda folder, seed: make_tiny_vse(folder, "wsl", seed=seed), []),
    "pcmepp": (lambda folder, seed: make_tiny_pcmepp(folder, seed=seed), []),
}


@pytest.mark.slow
@pytest.mark.parametrize("form", CHECKPOINT_FORMS)
def test_the_cache_follows_the_weights_not_the_path(form, benchmark, tmp_path, caplog):
    """A checkpoint copied or moved elsewhere reuses its cached embeddings (and ITM pairs): the run encodes nothing
    and reports the same results; other weights written at the same path are embedded anew."""
    make, extra = CHECKPOINT_FORMS[form]

    def run(name, out):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="rococo_eval.models.cache"), \
                caplog.at_level(logging.INFO, logger="rococo_eval.scoring.rerank"):
            assert main(["run", "--model", name, "--benchmark", str(benchmark), "--attacks", "rand_voca",
                         "--device", "cpu", "--cache-dir", str(tmp_path / "cache"), "--batch-size", "8",
                         "--out", str(tmp_path / out), "--quiet", *extra]) == 0
        computed = [record.getMessage() for record in caplog.records
                    if "embeddings to encode" in record.getMessage() or "ITM pairs to compute" in record.getMessage()]
        return json.loads((tmp_path / out / "report.json").read_text())["results"], computed

    original, copied, moved = (tmp_path / name for name in ("original", "copied", "moved"))
    with _torchvision_stand_in_for(form):
        original.mkdir()
        name = make(original, 0)
        first, computed = run(name, "first")
        assert computed
        shutil.copytree(original, copied)
        assert run(name.replace(str(original), str(copied)), "copied") == (first, [])
        shutil.move(original, moved)
        assert run(name.replace(str(original), str(moved)), "moved") == (first, [])
        assert make(moved, 1) == name.replace(str(original), str(moved))
        changed, computed = run(name.replace(str(original), str(moved)), "changed")
    assert computed and changed != first
