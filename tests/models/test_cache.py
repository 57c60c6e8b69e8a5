"""The pipeline of ``rococo-eval run``: image preprocessing in the workers, each original decoded once, captions
tokenized in a thread ahead of the model.

The embeddings must stay bit-identical to those of the pipeline before it moved (the cache's fingerprints
keep their meaning), and the altered images byte-identical to ``RococoSource.altered_image_bytes``. The
functions named ``committed_*`` below are that earlier pipeline, kept here as the reference.
"""

import collections
import subprocess
import sys
import threading

import numpy as np
import pytest
from PIL import Image

import rococo_eval.data.source
from rococo_eval.attacks.alterations import AlteredImages, alteration_groups
from rococo_eval.cli import main
from rococo_eval.models.cache import EmbeddingCache, ItemSet
from rococo_eval.models.adapters import ProcessorReplica, load_model


def photos():
    """Images of the sizes and modes COCO has (landscape, portrait, grayscale) and some it has not."""
    rng = np.random.default_rng(3)

    def photo(width, height):
        coarse = rng.integers(0, 256, (height // 40 + 2, width // 40 + 2, 3), dtype=np.uint8)
        smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC), np.int16)
        return Image.fromarray(np.clip(smooth + rng.integers(-9, 10, smooth.shape), 0, 255).astype(np.uint8))

    return [photo(640, 480), photo(480, 640), photo(333, 517).convert("L"), photo(300, 200).convert("RGBA"),
            photo(427, 640).convert("P"), photo(50, 41), photo(640, 427)]


def committed_hf_embeddings(model, images):
    """The hf adapter's ``encode_images`` before preprocessing moved to the workers."""
    import torch

    from rococo_eval.models.adapters import _features

    pixels = model.processor(images=[image.convert("RGB") for image in images], return_tensors="pt")["pixel_values"]
    with torch.inference_mode():
        return model._finish(_features(model.model.get_image_features(
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
            expected.append(model._finish(model.model.encode_image(torch.from_numpy(pixels))))
    assert np.array_equal(vectors, np.concatenate(expected))


def test_the_replica_gives_clips_224_pixel_processor_output_bit_for_bit():
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    processor = CLIPImageProcessorPil()  # OpenAI CLIP's: shortest edge 224, centre crop 224, bicubic
    replica = ProcessorReplica.of(processor)
    for image in photos():
        image = image.convert("RGB")
        expected = processor(images=[image], return_tensors="np")["pixel_values"][0]
        pixels = replica(image)
        assert pixels.shape == (3, 224, 224) and np.array_equal(pixels, expected)


def test_processors_the_replica_does_not_know_are_called_image_by_image(hf_name):
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    padded = CLIPImageProcessorPil(do_pad=True, pad_size={"height": 240, "width": 240})
    assert ProcessorReplica.of(padded) is None
    model = load_model(hf_name, device="cpu")
    replicated = [model.preprocess_image(image) for image in photos()]
    model.fast_preprocessing = None
    assert all(np.array_equal(model.preprocess_image(image), pixels) for image, pixels in zip(photos(), replicated))


def committed_hf_text_embeddings(model, texts):
    """The hf adapter's ``encode_texts`` before tokenizing moved to a thread ahead of the model."""
    import torch

    from rococo_eval.models.adapters import _features

    batch = model.tokenizer(list(texts), padding=model.padding, truncation=True, max_length=model.max_length,
                            return_tensors="pt")
    with torch.inference_mode():
        return model._finish(_features(model.model.get_text_features(**batch.to(model.device))))


def committed_open_clip_text_embeddings(model, texts):
    """The open_clip adapter's ``encode_texts`` before tokenizing moved to a thread ahead of the model."""
    import torch

    with torch.inference_mode():
        return model._finish(model.model.encode_text(model.tokenizer(list(texts)).to(model.device)))


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


def test_alteration_groups_close_over_partners():
    partners = [3, 0, 2, 1, 5, 4]
    groups = alteration_groups(partners)
    assert groups == [[0, 1, 3], [2], [4, 5]]
    assert all(partners[index] in group for group in groups for index in group)


@pytest.fixture
def reads(monkeypatch):
    """Count the COCO files the source reads, through the function it reads them with."""
    counts = collections.Counter()
    read = rococo_eval.data.source.read_image_file

    def counted(path):
        counts[str(path)] += 1
        return read(path)

    monkeypatch.setattr(rococo_eval.data.source, "read_image_file", counted)
    return counts


@pytest.mark.parametrize("attack", ["mix_seed1", "patch_seed100"])
def test_a_groups_altered_images_are_the_sources_bytes_with_each_original_read_once(source, reads, attack):
    images = AlteredImages(source, attack)
    group = images._group_of[83]
    made = images.make_group(group)
    assert sorted(made) == group and len(reads) == len(group) and set(reads.values()) == {1}
    for index in group:
        assert made[index] == source.altered_image_bytes(index, attack)


def test_stopped_altered_images_are_made_group_by_group_when_read(source, reads):
    images = AlteredImages(source, "mix_seed10", workers=2)
    images.stop()  # as the embedding loop does when it ends early (Ctrl-C)
    group = images._group_of[4999]
    made = images.jpeg(4999)
    assert len(reads) == len(group) and set(reads.values()) == {1}  # its group only, not all 5,000
    assert made == source.altered_image_bytes(4999, "mix_seed10")


def test_images_read_again_are_made_once_per_group(source, reads):
    images = AlteredImages(source, "mix_seed10", workers=2)
    images.stop()  # the embedding pass has ended and freed its bytes; the ITM stage reads images again
    group = images._group_of[4999]
    again = {index: images.jpeg(index) for index in group}
    assert len(reads) == len(group) and set(reads.values()) == {1}  # not once per image read
    assert again[4999] == source.altered_image_bytes(4999, "mix_seed10")


@pytest.mark.slow
def test_altered_images_are_the_sources_bytes_with_each_original_read_once(source, reads):
    attack = "patch_seed10"
    images = AlteredImages(source, attack, workers=2)
    sample = [0, 83, 2500, 4999, images.alterations[0][0]]
    made = {index: images.jpeg(index) for index in sample}
    assert len(reads) == source.num_images and set(reads.values()) == {1}
    for index in sample:
        assert made[index] == source.altered_image_bytes(index, attack)
    assert np.array_equal(np.asarray(images[1]), np.asarray(source.altered_image(1, attack)))


@pytest.mark.slow
def test_run_logs_its_progress_reads_each_original_twice_and_quiet_silences_the_libraries(
        hf_name, coco_root, tmp_path, reads, caplog, capsys):
    args = ["run", "--model", hf_name, "--attacks", "mix_seed1", "--images-dir", str(coco_root), "--cache-dir",
            str(tmp_path / "cache"), "--device", "cpu", "--workers", "2", "--batch-size", "500"]
    assert main(args + ["--out", str(tmp_path / "first")]) == 0
    assert len(reads) == 5000 and set(reads.values()) == {2}  # once for the originals, once for the altered images
    notes = [record.getMessage() for record in caplog.records if record.name.startswith("rococo_eval")]
    for line in ("images/original: 5000 images embedded in", "captions/ground_truth: 25010 texts embedded in",
                 "mix_seed1: 5000 altered images made in", "images/mix_seed1: 5000 images embedded in"):
        assert any(note.startswith(line) and "/s" in note for note in notes), line

    capsys.readouterr()
    command = [sys.executable, "-m", "rococo_eval", *args]
    loud = subprocess.run(command + ["--out", str(tmp_path / "loud")], capture_output=True, text=True)
    quiet = subprocess.run(command + ["--out", str(tmp_path / "quiet"), "-q"], capture_output=True, text=True)
    assert loud.returncode == quiet.returncode == 0, loud.stderr + quiet.stderr
    assert "rococo-eval: images/original: 5000 embeddings from the cache" in loud.stderr
    assert "Loading weights" in loud.stderr  # transformers' progress bar
    assert quiet.stderr == "" and "mix_seed1" in quiet.stdout
