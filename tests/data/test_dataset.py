"""Tests of the RoCOCO dataset: the source, the ``datasets`` builder, the Parquet export read back with the real
``load_dataset``, the metric inputs in both gallery orders, and downloads through a server on 127.0.0.1.

Images come from a small COCO-like folder the tests generate (5,000 tiny JPEGs named as the test split).
"""

from __future__ import annotations

import base64
import functools
import io
import json
import shutil
import socket
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import datasets
import numpy as np
import pytest
from PIL import Image

import rococo_dataset
import rococo_recall
from rococo_dataset import RococoDataset
from rococo_eval.io import download
from rococo_eval.data.annotations import ANNOTATION_FILES, AnnotationError
from rococo_eval.attacks.replacements import Replacement, apply_replacements, tokens
from rococo_eval.data.configs import CONFIGS, dataset_splits
from rococo_eval.data.dataset import load_queries_and_gallery, metric_inputs_for
from rococo_eval.io.download import CorruptImageError, DownloadError
from rococo_eval.data.export import export_dataset, exported_configs, push_to_hub, table_rows
from rococo_eval.attacks.images import load_mix_table
from rococo_eval.catalog import TEXT_ATTACKS
from rococo_eval.layout import caption_offsets, reorder_gallery
from rococo_eval.data.source import ImageFolderError, RococoSource
from helpers.http_server import Route

EXPORTED = ["rand_voca", "patch_seed10"]
DANGER_UNCHANGED = {(1533, 4), (1970, 3), (4752, 3)}  # official quirk: adversarial caption == its source


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(download, "_RETRY_DELAY_SECONDS", 0.01)


@pytest.fixture(scope="module")
def hf_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("hf-cache"))


@pytest.fixture(scope="module")
def export_folder(tmp_path_factory, annotations_dir, coco_root):
    """One export of a text and an image config (with their query configs), shared by several tests."""
    out = tmp_path_factory.mktemp("export") / "rococo"
    return export_dataset(out, EXPORTED, annotations_dir=annotations_dir, images_dir=coco_root, workers=2)


def _load(folder, config, split, cache):
    return datasets.load_dataset(str(folder), config, split=split, cache_dir=cache)


def _protocol_jpeg(original: Image.Image, partner: Image.Image, method: str, box) -> bytes:
    """The official mix_images.py written out from the protocol, without rococo_eval.attacks.images."""
    def read(image):
        resized = image.convert("RGB").resize((384, 384), Image.Resampling.BICUBIC)
        return np.asarray(resized, dtype=np.float32) / np.float32(255)

    x, y = read(original), read(partner)
    if method == "mix":
        mixed = np.float32(0.9) * x + np.float32(1 - 0.9) * y
    else:
        row0, row1, col0, col1 = box
        mixed = x.copy()
        mixed[row0:row1, col0:col1] = y[row0:row1, col0:col1]
    pixels = np.clip(mixed * np.float32(255) + np.float32(0.5), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG")
    return buffer.getvalue()


# --- the source -------------------------------------------------------------------------------------------


def test_source_counts(source, clean_records):
    assert len(source.ground_truth_captions()) == 25010
    assert source.captions_per_image.count(6) == 10 and len(source.captions_per_image) == 5000
    assert source.image_files == [record["image"] for record in clean_records]
    for attack in TEXT_ATTACKS:
        assert len(source.adversarial_captions(attack)) == 25000


def test_source_reads_each_file_once(annotations_dir, monkeypatch):
    from rococo_eval.data import source as source_module

    reads = []
    real = source_module.read_annotation_file
    monkeypatch.setattr(source_module, "read_annotation_file",
                        lambda name, *args, **kwargs: reads.append(name) or real(name, *args, **kwargs))
    source = RococoSource(annotations_dir)
    for _ in range(2):
        source.ground_truth_captions(), source.adversarial_captions("danger"), source.gallery("danger", order="dataset")
    assert reads == ["clean", "danger"]


def other_set_source(monkeypatch, danger_per_image=2):
    """A source over another image-text set: 3 images with 2, 3 and 2 captions, 2 adversarial captions per
    image in each text attack but danger, which has ``danger_per_image`` (files read without RoCOCO's checks)."""
    from rococo_eval.data import source as source_module

    clean = [{"image": f"val2014/{i}.jpg", "caption": [f"a dog {i} {j}" for j in range(n)]}
             for i, n in enumerate([2, 3, 2])]
    files = {"clean": clean}
    for attack in TEXT_ATTACKS:
        per_image = danger_per_image if attack == "danger" else 2
        files[attack] = [{**record, "caption": record["caption"] + [f"a {attack} {i} {j}" for j in range(per_image)]}
                         for i, record in enumerate(clean)]
    monkeypatch.setattr(source_module, "read_annotation_file", lambda name, *args, **kwargs: files[name])
    return RococoSource()


def test_source_reads_the_adversarial_captions_per_image_from_the_files(monkeypatch):
    source = other_set_source(monkeypatch)
    assert source.adversarial_per_image == 2
    assert source.adversarial_captions("rand_voca")[2:4] == ["a rand_voca 1 0", "a rand_voca 1 1"]
    layout = source.gallery("rand_voca", order="official")
    assert (layout.num_queries, layout.num_gallery, layout.references[1]) == (3, 13, (4, 5, 6))
    rows = [(row["image_index"], row["source_caption_index"]) for row in table_rows(source, "rand_voca_adversarial")]
    assert rows == [(0, 0), (0, 1), (1, 2), (1, 3), (2, 5), (2, 6)]
    mismatched = other_set_source(monkeypatch, danger_per_image=3)
    mismatched.gallery("rand_voca", order="official")
    with pytest.raises(AnnotationError, match=r"'danger' disagrees .* record 0 .*followed by 2 adversarial ones"):
        mismatched.gallery("danger", order="official")


def test_the_order_error_names_the_attack(source):
    with pytest.raises(ValueError, match=r"`order` is required .*for the gallery of rand_voca$"):
        source.gallery("rand_voca")


@pytest.mark.parametrize("call, match", [
    (lambda s: s.adversarial_captions("mix_seed1"), "`attack` must be one of the text attacks.*'mix_seed1'"),
    (lambda s: s.altered_image_bytes(0, "rand_voca"), "`attack` must be one of the image attacks.*'rand_voca'"),
    (lambda s: s.original_image(5000), r"`index` must be in 0\.\.4999, got 5000"),
    (lambda s: s.original_image(True), "`index` must be an int"),
    (lambda s: s.gallery("clean"), "`direction` is required"),
    (lambda s: s.gallery("rand_voca", "text_to_image"), "scored image_to_text, not text_to_image"),
    (lambda s: s.gallery("rand_voca", order="sorted"), "`order` must be one of"),
    (lambda s: s.gallery("randvoca"), "`attack` must be one of.*'randvoca'"),
    (lambda s: s.gallery("rand_voca"), "`order` is required for an attacked image-to-text gallery"),
])
def test_source_rejects_bad_arguments(source, call, match):
    with pytest.raises(ValueError, match=match):
        call(source)


def test_source_without_images_says_how_to_get_them(annotations_dir):
    with pytest.raises(ValueError, match=r"no `images_dir`.*fetch_images"):
        RococoSource(annotations_dir).original_image(0)


def test_source_gallery_matches_the_protocol(source):
    layout = source.gallery("rand_voca", order="official")
    assert (layout.num_queries, layout.num_gallery, layout.num_adversarial) == (5000, 50010, 25000)
    assert layout.references[0] == (0, 1, 2, 3, 4) and layout.references[83] == (830, 831, 832, 833, 834, 835)
    assert layout.adversarial[5:10].all() and layout.adversarial[836:841].all()
    t2i = source.gallery("mix_seed1", order="dataset")
    assert (t2i.num_queries, t2i.num_gallery) == (25010, 10000)


@pytest.mark.parametrize("attack", TEXT_ATTACKS)
def test_adversarial_captions_differ_by_the_recorded_words(source, attack):
    ground_truth = source.ground_truth_captions()
    offsets = caption_offsets(source.captions_per_image)
    rows = list(table_rows(source, f"{attack}_adversarial"))
    assert len(rows) == 25000
    for row_index, row in enumerate(rows):
        image, j = divmod(row_index, 5)
        source_caption = ground_truth[row["source_caption_index"]]
        assert row["image_index"] == image and row["is_adversarial"]
        assert row["source_caption_index"] == offsets[image] + j
        changes = [Replacement(**change) for change in row["replacements"]]
        assert apply_replacements(source_caption, changes) == tokens(row["caption"])
        if (image, j) in DANGER_UNCHANGED and attack == "danger":
            assert changes == [] and row["caption"].rstrip(" .") == source_caption.rstrip(" .")
        else:
            assert changes, (attack, row_index)


@pytest.mark.parametrize("attack", ["mix_seed1", "patch_seed100"])
def test_altered_images_follow_the_protocol(source, attack):
    method, seed = attack.split("_seed")
    table = load_mix_table(method, int(seed))
    for index in [0, 83, 1272, 2500, 4999] + table.order[:64:9].tolist():
        partner, box = source.alteration(index, attack)
        assert partner == table.partner[index]
        if method == "patch":
            row0, row1, col0, col1 = box
            for start, stop in ((row0, row1), (col0, col1)):
                assert 60 <= stop - start <= 120 and (stop - start == 120 or start == 0 or stop == 384)
        else:
            assert box is None
        expected = _protocol_jpeg(source.original_image(index), source.original_image(partner), method, box)
        assert source.altered_image_bytes(index, attack) == expected
        assert source.altered_image(index, attack).size == (384, 384)


def test_altered_image_mix_weights(source):
    # independent of the JPEG step: the decoded altered copy is within JPEG error of 0.9 x + 0.1 y, not 0.5/0.5
    partner, _ = source.alteration(10, "mix_seed10")
    x, y = (np.asarray(source.original_image(i).convert("RGB").resize((384, 384), Image.Resampling.BICUBIC),
                       dtype=np.float64) for i in (10, partner))
    altered = np.asarray(source.altered_image(10, "mix_seed10"), dtype=np.float64)
    assert np.abs(altered - (0.9 * x + 0.1 * y)).mean() < 2.5
    assert np.abs(altered - (0.5 * x + 0.5 * y)).mean() > 2 * np.abs(altered - (0.9 * x + 0.1 * y)).mean()


# --- the builder ------------------------------------------------------------------------------------------


def test_builder_text_config(annotations_dir, tmp_path):
    builder = RococoDataset(config_name="danger", annotations_dir=str(annotations_dir), cache_dir=str(tmp_path))
    builder.download_and_prepare()
    original, adversarial = builder.as_dataset(split="original"), builder.as_dataset(split="adversarial")
    assert (original.num_rows, adversarial.num_rows) == (25010, 25000)
    assert sorted(builder.info.splits) == ["adversarial", "original"]
    assert adversarial[0]["source_caption_index"] == 0 and adversarial[0]["is_adversarial"]
    assert [original[k]["image_index"] for k in (414, 415, 420, 421)] == [82, 83, 83, 84]
    assert adversarial["image_index"][:] == [i // 5 for i in range(25000)]


def test_builder_takes_the_annotations_as_data_dir(annotations_dir, tmp_path):
    builder = RococoDataset(config_name="captions", data_dir=str(annotations_dir), cache_dir=str(tmp_path))
    builder.download_and_prepare()
    assert list(builder.info.splits) == ["test"]
    assert builder.as_dataset(split="test").num_rows == 25010


@pytest.mark.slow
def test_builder_image_config_is_byte_identical_to_the_export(annotations_dir, coco_root, export_folder, tmp_path,
                                                             hf_cache):
    builder = RococoDataset(config_name="patch_seed10", annotations_dir=str(annotations_dir),
                            images_dir=str(coco_root), workers=2, cache_dir=str(tmp_path))
    builder.download_and_prepare()
    built = builder.as_dataset(split="adversarial").cast_column("image", datasets.Image(decode=False))
    exported = _load(export_folder, "patch_seed10", "adversarial", hf_cache)
    exported = exported.cast_column("image", datasets.Image(decode=False))
    assert built.num_rows == exported.num_rows == 5000
    assert [image["bytes"] for image in built["image"][:]] == [image["bytes"] for image in exported["image"][:]]
    assert built["box"][:] == exported["box"][:]
    original = builder.as_dataset(split="original").cast_column("image", datasets.Image(decode=False))
    assert original[4999]["image"]["bytes"] == (coco_root / "val2014" / original[4999]["file_name"]).read_bytes()


def test_builder_rejects_unknown_config(tmp_path):
    with pytest.raises(ValueError, match="'rand-voca' not found.*'rand_voca'"):
        RococoDataset(config_name="rand-voca", cache_dir=str(tmp_path))


# --- the export, read back with load_dataset ----------------------------------------------------------------


def test_export_configs_and_shared_files(export_folder):
    configs = exported_configs(export_folder)
    assert list(configs) == ["rand_voca", "patch_seed10", "images", "captions"]
    assert datasets.get_dataset_config_names(str(export_folder)) == list(configs)
    assert configs["rand_voca"]["original"] == configs["captions"]["test"]
    assert configs["patch_seed10"]["original"] == configs["images"]["test"]
    stored = sorted(p.relative_to(export_folder).as_posix() for p in (export_folder / "data").iterdir())
    listed = sorted({path for splits in configs.values() for paths in splits.values() for path in paths})
    assert stored == listed
    assert len([p for p in stored if p.startswith("data/images_original")]) == 5
    assert not list(export_folder.parent.glob(".rococo.*"))


def test_export_card(export_folder):
    card = (export_folder / "README.md").read_text(encoding="utf-8")
    for needle in ("MIT", "CC BY 4.0", "cocodataset.org/#termsofuse", "@inproceedings{park2024rococo",
                   "d8ba2a6ef31f3a428a02d5060990f022c2bf1e2a", ANNOTATION_FILES["danger"].sha256,
                   "PyTorch 2.13", "before 1.9", "metric_inputs_for", "images.cocodataset.org"):
        assert needle in card, needle


@pytest.mark.parametrize("config, split, rows", [
    ("rand_voca", "original", 25010), ("rand_voca", "adversarial", 25000),
    ("patch_seed10", "original", 5000), ("patch_seed10", "adversarial", 5000),
    ("images", "test", 5000), ("captions", "test", 25010),
])
def test_load_dataset_reads_every_split(export_folder, hf_cache, config, split, rows):
    loaded = _load(export_folder, config, split, hf_cache)
    assert loaded.num_rows == rows
    has_captions = "caption" in loaded.column_names
    assert loaded["image_index"][:6] == ([0] * 5 + [1] if has_captions else list(range(6)))
    assert set(loaded["is_adversarial"][:]) == {split == "adversarial"}


def test_loaded_rows(export_folder, hf_cache, source):
    adversarial = _load(export_folder, "rand_voca", "adversarial", hf_cache)
    ground_truth = _load(export_folder, "rand_voca", "original", hf_cache)["caption"][:]
    assert ground_truth == source.ground_truth_captions()
    captions = adversarial["caption"][:]
    assert captions == source.adversarial_captions("rand_voca")
    for row in adversarial.select(range(0, 25000, 250)):
        assert apply_replacements(ground_truth[row["source_caption_index"]],
                                  [Replacement(**c) for c in row["replacements"]]) == tokens(row["caption"])
    images = _load(export_folder, "patch_seed10", "adversarial", hf_cache)
    row = images[83]
    assert row["image"].size == (384, 384) and row["file_name"] == Path(source.image_files[83]).name
    assert (row["partner_index"], tuple(row["box"])) == source.alteration(83, "patch_seed10")
    original = _load(export_folder, "images", "test", hf_cache)
    assert original[0]["image"].size == source.original_image(0).size
    assert original[0]["partner_index"] is None and original[0]["box"] is None


def test_export_subset_without_queries_and_overwrite(annotations_dir, tmp_path, hf_cache):
    out = export_dataset(tmp_path / "danger", ["danger"], annotations_dir=annotations_dir, include_queries=False)
    assert list(exported_configs(out)) == ["danger"]
    assert sorted(p.name for p in (out / "data").iterdir()) == [
        "captions_original-00000-of-00001.parquet", "danger_adversarial-00000-of-00001.parquet"]
    with pytest.raises(ValueError, match=r"`out_dir` .*danger' already exists.*overwrite=True"):
        export_dataset(out, "danger", annotations_dir=annotations_dir, include_queries=False)
    export_dataset(out, ["captions", "danger"], annotations_dir=annotations_dir, include_queries=False,
                   overwrite=True)
    assert datasets.get_dataset_config_names(str(out)) == ["captions", "danger"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["danger"]


@pytest.mark.parametrize("configs, match", [
    (["rand_voca", "mix-seed1"], "`config` must be one of .*got 'mix-seed1'"),
    ([], "`configs` is empty"),
])
def test_export_rejects_unknown_configs(tmp_path, configs, match):
    with pytest.raises(ValueError, match=match):
        export_dataset(tmp_path / "out", configs)
    assert not (tmp_path / "out").exists()


# --- bad inputs -------------------------------------------------------------------------------------------


@pytest.fixture
def annotations_copy(annotations_dir, tmp_path):
    folder = tmp_path / "annotations"
    folder.mkdir()
    for spec in ANNOTATION_FILES.values():
        shutil.copy(annotations_dir / spec.file_name, folder / spec.file_name)
    return folder


def test_corrupt_annotation_file_is_named(annotations_copy, tmp_path):
    path = annotations_copy / "rand_voca.json"
    data = bytearray(path.read_bytes())
    data[1000] ^= 1
    path.write_bytes(bytes(data))
    builder = RococoDataset(config_name="rand_voca", annotations_dir=str(annotations_copy), cache_dir=str(tmp_path))
    with pytest.raises(AnnotationError, match=r"rand_voca\.json' is corrupt.*sha256.*download it again"):
        builder.download_and_prepare()
    with pytest.raises(AnnotationError, match="rand_voca.json"):
        export_dataset(tmp_path / "out", ["rand_voca"], annotations_dir=annotations_copy, include_queries=False)
    assert not (tmp_path / "out").exists()


def test_missing_annotation_file_is_named(annotations_copy, tmp_path):
    (annotations_copy / "danger.json").unlink()
    with pytest.raises(AnnotationError, match=r"'danger\.json' is missing.*ROCOCO_ANNOTATIONS_DIR"):
        RococoSource(annotations_copy).adversarial_captions("danger")
    assert len(RococoSource(annotations_copy).adversarial_captions("rand_voca")) == 25000


@pytest.fixture
def coco_copy(coco_root, tmp_path):
    copy = tmp_path / "coco"
    shutil.copytree(coco_root, copy)
    return copy


def test_missing_image_is_named(annotations_dir, coco_copy, source, tmp_path):
    missing = coco_copy / source.image_files[1234]
    missing.unlink()
    with pytest.raises(ImageFolderError, match=rf"lacks 1 of the 5000 .*{missing.name}.*fetch_images"):
        RococoSource(annotations_dir, images_dir=coco_copy)
    with pytest.raises(ImageFolderError, match=missing.name):
        RococoDataset(config_name="images", annotations_dir=str(annotations_dir), images_dir=str(coco_copy),
                      cache_dir=str(tmp_path / "hf")).download_and_prepare()


@pytest.mark.parametrize("where, hint", [
    (lambda root: root / "val2014", "the val2014 folder itself; pass its parent '{root}'"),
    (lambda root: root.parent, "one level down; pass '{root}'"),
    (lambda root: root / "nowhere", "is not a folder"),
])
def test_image_folder_laid_out_differently(annotations_dir, coco_root, where, hint):
    with pytest.raises(ImageFolderError) as caught:
        RococoSource(annotations_dir, images_dir=where(coco_root))
    assert hint.format(root=coco_root) in str(caught.value)


def test_corrupt_image_stops_the_export_without_output(annotations_dir, coco_copy, source, tmp_path):
    damaged = coco_copy / source.image_files[2000]
    damaged.write_bytes(damaged.read_bytes()[:-60])
    with pytest.raises(CorruptImageError, match=rf"{damaged.name}' is not a complete image.*fetch_images"):
        export_dataset(tmp_path / "out", ["images"], annotations_dir=annotations_dir, images_dir=coco_copy,
                       include_queries=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coco"]


# --- the metric's inputs in both orders --------------------------------------------------------------------


@pytest.mark.parametrize("attack, direction", [
    ("rand_voca", None), ("same_concept", None), ("patch_seed10", None),
    ("clean", "image_to_text"), ("clean", "text_to_image"),
])
def test_metric_is_the_same_in_both_orders(source, annotations_dir, attack, direction):
    official = metric_inputs_for(attack, direction, "official", annotations_dir)
    in_dataset_order = metric_inputs_for(attack, direction, "dataset", annotations_dir)
    num_queries, num_gallery = len(official["references"]), len(official["adversarial"])
    rng = np.random.default_rng(7)
    queries = rng.choice(num_queries, 300, replace=False)
    scores = rng.standard_normal((300, num_gallery)).astype(np.float32)
    for row, query in enumerate(queries):
        scores[row, rng.choice(official["references"][query])] += 2.5
    reordered = reorder_gallery(scores, source.gallery(attack, direction, "official"),
                                source.gallery(attack, direction, "dataset"))
    results = [rococo_recall.rococo_recall(matrix, references=[inputs["references"][q] for q in queries],
                                           adversarial=inputs["adversarial"], per_query=True)
               for matrix, inputs in ((scores, official), (reordered, in_dataset_order))]
    assert np.array_equal(results[0].pop("rank"), results[1].pop("rank"))
    for result in results:  # the per-query arrays (the columns of the two orders differ)
        for key in ("clean_rank", "top1_adversarial", "top_index", "top_score", "best_correct_index",
                    "best_correct_score"):
            result.pop(key)
    assert results[0] == results[1]
    assert 0 < results[0]["recall@1"] < 100


@functools.lru_cache(maxsize=None)
def _word_vector(word: str):
    return np.random.default_rng(zlib.crc32(word.encode())).standard_normal(64)


@functools.lru_cache(maxsize=None)
def _caption_vector(caption: str):
    """A toy text encoder: the normalised sum of random vectors of the caption's longer words."""
    vector = sum((_word_vector(word) for word in set(tokens(caption)) if len(word) > 3), np.zeros(64))
    return vector / (np.linalg.norm(vector) or 1.0)


def test_end_to_end_toy_model_scores_the_same_from_the_export(export_folder, hf_cache, annotations_dir):
    # a bag-of-words "model" that knows each image's captions; the official gallery comes from the JSON files
    clean = json.loads((annotations_dir / "coco_karpathy_test.json").read_text())
    attack = json.loads((annotations_dir / "rand_voca.json").read_text())
    image_vectors = {Path(r["image"]).name: sum(map(_caption_vector, r["caption"])) for r in clean}
    official_gallery = [caption for record in attack for caption in record["caption"]]
    official_queries = [Path(record["image"]).name for record in clean]

    queries, gallery = load_queries_and_gallery(str(export_folder), "rand_voca", cache_dir=hf_cache)
    assert gallery.num_rows == 50010 and queries.num_rows == 5000
    every_fifth = slice(None, None, 5)  # 1,000 queries keep the test quick; the gallery is whole
    results = []
    for names, captions, order in ((official_queries, official_gallery, "official"),
                                   (queries["file_name"][:], gallery["caption"][:], "dataset")):
        inputs = metric_inputs_for("rand_voca", order=order, annotations_dir=annotations_dir)
        results.append(rococo_recall.rococo_recall(
            query_embeddings=np.stack([image_vectors[name] for name in names[every_fifth]]).astype(np.float32),
            gallery_embeddings=np.stack([_caption_vector(c) for c in captions]).astype(np.float32),
            references=inputs["references"][every_fifth], adversarial=inputs["adversarial"], per_query=True))
    official, from_export = results
    for key in ("rank", "clean_rank", "top1_adversarial"):
        assert np.array_equal(official.pop(key), from_export.pop(key)), key
    for key in ("top_score", "best_correct_score"):  # BLAS may round a product by its column's place in the gallery
        np.testing.assert_allclose(official.pop(key), from_export.pop(key), rtol=1e-6, atol=0, err_msg=key)
    for key in ("top_index", "best_correct_index"):  # gallery columns: the two orders differ
        official.pop(key), from_export.pop(key)
    assert official == from_export
    assert official["clean_recall@1"] > 50 and official["false_rate"] > 1


def test_dataset_splits_name_configs_of_the_export(export_folder):
    configs = exported_configs(export_folder)
    for attack, direction in (("rand_voca", None), ("patch_seed10", None), ("clean", "image_to_text")):
        splits = dataset_splits(attack, direction)
        for config, split in splits["queries"] + splits["gallery"]:
            assert split in configs[config]


# --- downloads through the builder ------------------------------------------------------------------------


@pytest.mark.slow
def test_builder_downloads_annotations_and_images(server, annotations_dir, coco_root, clean_records, tmp_path,
                                                  monkeypatch):
    clean_file = ANNOTATION_FILES["clean"].file_name
    server.routes[f"/ann/{clean_file}"] = Route((annotations_dir / clean_file).read_bytes(), drops=[400_000])
    for record in clean_records:
        server.routes[f"/img/{record['image']}"] = Route((coco_root / record["image"]).read_bytes())
    corrupt, missing = clean_records[7]["image"], clean_records[4321]["image"]
    good = server.routes[f"/img/{corrupt}"].body
    server.routes[f"/img/{corrupt}"].bad_bodies.append(good[: len(good) // 2])
    held_back = server.routes.pop(f"/img/{missing}")
    monkeypatch.delenv("ROCOCO_ANNOTATIONS_DIR", raising=False)
    monkeypatch.setenv("ROCOCO_ANNOTATIONS_BASE_URL", server.url + "ann/")
    kwargs = dict(config_name="images", download_dir=str(tmp_path / "downloads"), image_base_url=server.url + "img/",
                  cache_dir=str(tmp_path / "hf"))

    with pytest.raises(DownloadError, match=rf"(?s)1 of 5000 COCO images.*{missing}.*HTTP 404") as caught:
        RococoDataset(**kwargs).download_and_prepare()
    assert list(caught.value.failures) == [missing]
    first, second = server.requests_for(f"/ann/{clean_file}")
    assert first.sent == 400_000 and second.status == 206
    assert [r.sent for r in server.requests_for(f"/img/{corrupt}")] == [len(good) // 2, len(good)]

    server.routes[f"/img/{missing}"] = held_back
    before = len(server.requests)
    builder = RococoDataset(**kwargs)
    builder.download_and_prepare()
    assert [r.path for r in server.requests[before:]] == [f"/img/{missing}"]
    images = builder.as_dataset(split="test").cast_column("image", datasets.Image(decode=False))
    assert images.num_rows == 5000
    assert images[7]["image"]["bytes"] == good
    assert images[4321]["image"]["bytes"] == held_back.body
    assert (tmp_path / "downloads" / "annotations" / clean_file).is_file()


# --- push to a Hub: a fake Hub on 127.0.0.1 records what huggingface_hub sends --------------------------------


class FakeHub:
    def __init__(self):
        self.calls: list[tuple[str, bytes]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                hub.calls.append((self.path.split("?")[0], body))
                path = self.path.split("?")[0]
                if path == "/api/repos/create":
                    answer = {"url": f"{hub.url}/datasets/{json.loads(body)['organization']}/x"}
                elif path == "/api/validate-yaml":
                    answer = {"errors": [], "warnings": []}
                elif "/preupload/" in path:
                    files = json.loads(body)["files"]
                    answer = {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                        for f in files]}
                elif "/commit/" in path:
                    answer = {"commitUrl": f"{hub.url}/datasets/org/rococo/commit/{'0' * 40}",
                              "commitOid": "0" * 40, "pullRequestUrl": None}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def committed_files(self) -> dict[str, bytes]:
        (_, body), = [call for call in self.calls if "/commit/" in call[0]]
        lines = [json.loads(line) for line in body.splitlines()]
        return {line["value"]["path"]: base64.b64decode(line["value"]["content"])
                for line in lines if line["key"] == "file"}


@pytest.fixture
def fake_hub(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    hub = FakeHub()
    yield hub
    hub.httpd.shutdown()
    hub.httpd.server_close()


def test_push_uploads_the_folder_with_huggingface_hub(fake_hub, annotations_dir, tmp_path, capsys):
    out = tmp_path / "danger"
    assert rococo_dataset.main(["export", "--out", str(out), "--configs", "danger", "--no-queries",
                                "--annotations-dir", str(annotations_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    (out / "stray.txt").write_text("not uploaded")
    assert rococo_dataset.main(["push", str(out), "--repo-id", "org/rococo", "--private", "--token", "hf_test",
                                "--endpoint", fake_hub.url]) == 0
    assert capsys.readouterr().out.strip().endswith("/datasets/org/rococo/commit/" + "0" * 40)
    paths = [path for path, _ in fake_hub.calls]
    assert paths[0] == "/api/repos/create" and paths[-1] == "/api/datasets/org/rococo/commit/main"
    create = json.loads(fake_hub.calls[0][1])
    assert (create["name"], create["organization"], create["type"], create["visibility"]) == (
        "rococo", "org", "dataset", "private")
    files = fake_hub.committed_files()
    assert sorted(files) == ["README.md", "data/captions_original-00000-of-00001.parquet",
                             "data/danger_adversarial-00000-of-00001.parquet"]
    assert all(files[name] == (out / name).read_bytes() for name in files)


@pytest.mark.parametrize("folder, repo_id, match", [
    ("exported", "no-owner", "`repo_id` must be '<owner>/<name>', got 'no-owner'"),
    ("empty", "org/rococo", "has no README.md"),
    ("no-yaml", "org/rococo", "has no YAML `configs:` list"),
    ("missing-file", "org/rococo", "lists 'data/gone.parquet', which is missing"),
])
def test_push_refuses_bad_input_before_any_request(fake_hub, tmp_path, folder, repo_id, match):
    target = tmp_path / folder
    target.mkdir()
    if folder == "no-yaml":
        (target / "README.md").write_text("# RoCOCO\n")
    if folder in ("missing-file", "exported"):
        (target / "README.md").write_text(
            "---\nconfigs:\n- config_name: danger\n  data_files:\n  - split: original\n    path: data/gone.parquet\n"
            "---\n")
    with pytest.raises(ValueError, match=match):
        push_to_hub(target, repo_id, endpoint=fake_hub.url)
    assert fake_hub.calls == []


def test_cli_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        rococo_dataset.main(["export", "--out", str(tmp_path / "x"), "--configs", "randvoca"])
    assert caught.value.code == 2 and "invalid choice: 'randvoca'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as caught:
        rococo_dataset.main(["push", str(tmp_path), "--repo-id", "org/name"])
    assert caught.value.code == 1 and "has no README.md" in capsys.readouterr().err


@pytest.mark.parametrize("image_server", ["refused", "no-such-host"])
def test_export_without_images_stops_at_once_when_the_image_server_is_unreachable(tmp_path, capsys, monkeypatch,
                                                                                   image_server):
    """`python rococo_dataset.py export --out X --configs mix_seed1` with no network: seconds, not 30 minutes."""
    if image_server == "refused":
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{probe.getsockname()[1]}/"
    else:
        url = "http://nonexistent.invalid/"
    monkeypatch.setattr(download, "_RETRY_DELAY_SECONDS", 0.5)  # the real backoff
    monkeypatch.setenv("ROCOCO_IMAGE_BASE_URL", url)
    cache = tmp_path / "cache"
    started = time.monotonic()
    with pytest.raises(SystemExit) as caught:
        rococo_dataset.main(["export", "--out", str(tmp_path / "x"), "--configs", "mix_seed1", "--cache-dir", str(cache)])
    assert time.monotonic() - started < 20  # a loose guard: retrying 5,000 images one by one takes about 30 minutes
    error = capsys.readouterr().err
    assert caught.value.code == 1 and error.startswith(f"error: could not fetch '{url}val2014/COCO_val2014_")
    assert f"cannot connect to {url.split('/')[2]} (" in error
    assert "--images-dir" in error and repr(str(cache / "coco")) in error
    assert [path.name for path in tmp_path.iterdir()] in ([], ["cache"])  # no export folder, staged or not
    assert not (cache / "coco").exists()


def test_every_config_is_a_builder_config():
    assert [config.name for config in RococoDataset.BUILDER_CONFIGS] == list(CONFIGS)
