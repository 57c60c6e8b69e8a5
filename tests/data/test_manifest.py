"""rococo_eval.data.manifest: a generated benchmark's manifest lists each of its files with its sha256, and every
read is checked against it; the folder is written here with the module's own writers (no attack run)."""

import hashlib
import json

import numpy as np
import pytest

from rococo_eval.attacks.images import make_mix_table
from rococo_eval.data.manifest import (ADVERSARIAL_ROWS, ANNOTATIONS, FORMAT, IMAGES, MANIFEST, MIX_TABLES,
                                       BenchmarkError, read_benchmark, write_manifest, write_mix_tables)
from rococo_eval.io.atomic import write_json

CLEAN_RECORDS = [{"image": "images/0.png", "caption": ["a dog on a sofa", "a brown dog"]},
                 {"image": "images/1.png", "caption": ["a red bus", "a bus in the street"]}]
TABLES = {"mix_seed3": make_mix_table("mix", 3, 2), "patch_seed3": make_mix_table("patch", 3, 2)}


def write_benchmark(folder, images_dir=None, clean=CLEAN_RECORDS):
    """A benchmark folder of 2 images: danger and same_concept (one adversarial caption each), two image attacks."""
    write_json(clean, folder / ANNOTATIONS.format(name="clean"), compact=True)
    for attack, word in (("danger", "gun"), ("same_concept", "puppy")):
        records = [{**record, "caption": record["caption"] + [f"a {word}"]} for record in CLEAN_RECORDS]
        write_json(records, folder / ANNOTATIONS.format(name=attack), compact=True)
        write_json([{"source_caption_index": 0, "candidates": []}, {"source_caption_index": 2, "candidates": []}],
                   folder / ADVERSARIAL_ROWS.format(name=attack), compact=True)
    write_mix_tables(folder, TABLES)
    (folder / IMAGES).mkdir(parents=True)
    (folder / IMAGES / "0.png").write_bytes(b"not listed: the images are not part of the manifest")
    return write_manifest(folder, text_attacks=["danger", "same_concept"], image_attacks=list(TABLES),
                          adversarial_per_image=1, images_dir=images_dir, details={"made by": "this test"})


def test_the_manifest_lists_every_file_but_itself_and_the_images_with_its_sha256(tmp_path):
    assert write_benchmark(tmp_path) == tmp_path / MANIFEST
    benchmark = read_benchmark(tmp_path)
    listed = sorted(path.relative_to(tmp_path).as_posix() for path in (tmp_path / "benchmark").rglob("*")
                    if path.is_file() and path.parent.name != "images" and path.name != "manifest.json")
    assert sorted(benchmark.files) == listed and len(listed) == 6 and MIX_TABLES in listed
    assert all(benchmark.files[name] == hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() for name in listed)
    assert benchmark.text_attacks == ("same_concept", "danger")  # catalogue order, whatever order they came in
    assert benchmark.image_attacks == ("mix_seed3", "patch_seed3") and benchmark.adversarial_per_image == 1
    assert benchmark.details == {"made by": "this test"} and benchmark.images_dir is None
    assert json.loads((tmp_path / MANIFEST).read_text())["format"] == FORMAT


def test_the_image_folder_is_kept_relative_when_inside_the_benchmark(tmp_path):
    write_benchmark(tmp_path / "inside", images_dir=tmp_path / "inside" / IMAGES)
    write_benchmark(tmp_path / "outside", images_dir=tmp_path / "coco")
    stored = {name: json.loads((tmp_path / name / MANIFEST).read_text())["images_dir"]
              for name in ("inside", "outside")}
    assert stored == {"inside": IMAGES, "outside": str(tmp_path / "coco")}
    assert read_benchmark(tmp_path / "inside").images_dir == tmp_path / "inside" / IMAGES
    assert read_benchmark(tmp_path / "outside").images_dir == tmp_path / "coco"


def test_files_read_back_as_written(tmp_path):
    write_benchmark(tmp_path)
    benchmark = read_benchmark(tmp_path)
    assert benchmark.records("clean") == CLEAN_RECORDS
    assert benchmark.records("danger")[1]["caption"] == ["a red bus", "a bus in the street", "a gun"]
    assert [row["source_caption_index"] for row in benchmark.adversarial_rows("same_concept")] == [0, 2]
    for attack, written in TABLES.items():
        table = benchmark.mix_table(attack)
        assert (table.method, table.seed) == (written.method, written.seed)
        assert np.array_equal(table.order, written.order) and np.array_equal(table.partner, written.partner)
        assert (table.box is None) == (written.box is None) and (table.box is None or np.array_equal(table.box,
                                                                                                     written.box))
        assert not table.partner.flags.writeable


@pytest.mark.parametrize("change, problem", [
    (lambda path: path.write_text(path.read_text().replace("gun", "knife")),
     "changed since its manifest was written (sha256 differs): make the benchmark again"),
    (lambda path: path.unlink(), "is missing: make the benchmark again"),
])
def test_a_file_changed_or_removed_since_the_manifest_is_refused(tmp_path, change, problem):
    write_benchmark(tmp_path)
    path = tmp_path / ANNOTATIONS.format(name="danger")
    change(path)
    benchmark = read_benchmark(tmp_path)
    with pytest.raises(BenchmarkError) as caught:
        benchmark.records("danger")
    assert str(caught.value) == f"benchmark file {str(path)!r} {problem}"
    assert benchmark.records("same_concept")[0]["caption"][-1] == "a puppy"  # the other files still read


def test_only_listed_files_and_the_benchmarks_own_attacks_are_read(tmp_path):
    write_benchmark(tmp_path)
    benchmark = read_benchmark(tmp_path)
    with pytest.raises(BenchmarkError, match=r"lists no file 'benchmark/images/0\.png' in its benchmark/manifest"):
        benchmark.read_bytes(f"{IMAGES}/0.png")
    with pytest.raises(ValueError, match=r"^`name` must be 'clean' or one of this benchmark's text attacks "
                                         r"\('same_concept', 'danger'\), got 'rand_voca'$"):
        benchmark.records("rand_voca")
    with pytest.raises(ValueError, match=r"^`attack` must be one of this benchmark's text attacks .*got 'clean'$"):
        benchmark.adversarial_rows("clean")
    with pytest.raises(ValueError, match=r"^`attack` must be one of this benchmark's image attacks "
                                         r"\('mix_seed3', 'patch_seed3'\), got 'mix_seed1'$"):
        benchmark.mix_table("mix_seed1")


@pytest.mark.parametrize("records, problem", [
    ([], "expected a non-empty list of records"),
    ({"image": "images/0.png"}, "expected a non-empty list of records"),
    ([CLEAN_RECORDS[0], {"image": "images/1.png", "caption": []}], "record 1 lacks `image` or a non-empty `caption`"),
    ([{"caption": ["a dog"]}], "record 0 lacks `image`"),
    ([CLEAN_RECORDS[0], {"image": "images/1.png", "caption": ["a bus", 3]}], "record 1 lacks"),
])
def test_malformed_records_are_refused_with_the_file_and_the_record(tmp_path, records, problem):
    write_benchmark(tmp_path, clean=records)
    with pytest.raises(BenchmarkError, match=problem) as caught:
        read_benchmark(tmp_path).records("clean")
    assert str(tmp_path / ANNOTATIONS.format(name="clean")) in str(caught.value)


def test_a_folder_without_a_manifest_of_this_format_is_no_benchmark(tmp_path):
    with pytest.raises(BenchmarkError, match=r"is not a generated benchmark: it has no benchmark/manifest\.json "
                                             r"\(make one with `rococo-eval attack`\)"):
        read_benchmark(tmp_path)
    (tmp_path / MANIFEST).parent.mkdir(parents=True)
    (tmp_path / MANIFEST).write_text(json.dumps({"format": "rococo-eval benchmark 0"}))
    with pytest.raises(BenchmarkError, match=rf"is not a manifest of format '{FORMAT}'$"):
        read_benchmark(tmp_path)
