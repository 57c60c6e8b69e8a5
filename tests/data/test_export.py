"""rococo_eval.data.export: the dataset's rows, the Parquet folder read back with the real ``load_dataset``, its card,
and the upload to a Hub (a fake one on 127.0.0.1 records what ``huggingface_hub`` sends)."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

import rococo_dataset
from rococo_eval.attacks.replacements import Replacement, apply_replacements, tokens
from rococo_eval.catalog import TEXT_ATTACKS
from rococo_eval.data.annotations import ANNOTATION_FILES
from rococo_eval.data.export import export_dataset, exported_configs, push_to_hub, table_rows
from rococo_eval.io.download import CorruptImageError
from rococo_eval.layout import caption_offsets


DANGER_UNCHANGED = {(1533, 4), (1970, 3), (4752, 3)}  # official quirk: adversarial caption == its source


def _load(folder, config, split, cache):
    return datasets.load_dataset(str(folder), config, split=split, cache_dir=cache)


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


def test_corrupt_image_stops_the_export_without_output(annotations_dir, coco_copy, source, tmp_path):
    damaged = coco_copy / source.image_files[2000]
    damaged.write_bytes(damaged.read_bytes()[:-60])
    with pytest.raises(CorruptImageError, match=rf"{damaged.name}' is not a complete image.*fetch_images"):
        export_dataset(tmp_path / "out", ["images"], annotations_dir=annotations_dir, images_dir=coco_copy,
                       include_queries=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coco"]


def test_push_uploads_the_folder_with_huggingface_hub(fake_hub, annotations_dir, tmp_path, capsys):
    out = tmp_path / "danger"
    assert rococo_dataset.main(["export", "--out", str(out), "--configs", "danger", "--no-queries",
                                "--annotations-dir", str(annotations_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    (out / "stray.txt").write_text("not uploaded")
    assert rococo_dataset.main(["push", str(out), "--repo-id", "org/rococo", "--private", "--token", "hf_test",
                                "--endpoint", fake_hub.url]) == 0
    assert capsys.readouterr().out.strip().endswith("/datasets/org/rococo/commit/" + fake_hub.head("datasets",
                                                                                                    "org/rococo"))
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
