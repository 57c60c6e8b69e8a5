"""rococo_eval.data.source: RoCOCO's captions, images and galleries as the annotation files give them, the altered
images by the official protocol, a generated benchmark read in place of RoCOCO's files, and the errors that say
what is missing or misplaced.

Images come from the generated COCO-like folder of ``conftest.py`` (5,000 tiny JPEGs named as the test split).
"""

import inspect
import io
import json
import shutil

import numpy as np
import pytest
from PIL import Image

from rococo_eval.attacks.images import load_mix_table
from rococo_eval.catalog import TEXT_ATTACKS
from rococo_eval.data.annotations import AnnotationError
from rococo_eval.data.dataset import metric_inputs_for
from rococo_eval.data.export import table_rows
from rococo_eval.data.manifest import ANNOTATIONS, MANIFEST, BenchmarkError, read_benchmark
from rococo_eval.data.source import BenchmarkSource, ImageFolderError, RococoSource, Source, open_source
from rococo_dataset import RococoDataset


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


def test_missing_annotation_file_is_named(annotations_copy, tmp_path):
    (annotations_copy / "danger.json").unlink()
    with pytest.raises(AnnotationError, match=r"'danger\.json' is missing.*ROCOCO_ANNOTATIONS_DIR"):
        RococoSource(annotations_copy).adversarial_captions("danger")
    assert len(RococoSource(annotations_copy).adversarial_captions("rand_voca")) == 25000


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


def test_benchmark_source_reads_the_folder_and_checks_it(benchmark, tmp_path):
    source = BenchmarkSource(benchmark)
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
        BenchmarkSource(copy).adversarial_captions("danger")


def test_a_benchmark_without_its_images_still_gives_its_galleries(benchmark, tmp_path):
    copy = tmp_path / "bench"
    shutil.copytree(benchmark, copy)
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["images_dir"] = str(tmp_path / "images-elsewhere")  # recorded on another machine
    (copy / MANIFEST).write_text(json.dumps(manifest))
    source = BenchmarkSource(copy)
    assert source.images_dir is None
    with pytest.raises(ValueError, match=r"this BenchmarkSource has no `images_dir`: pass the folder its image paths"):
        source.original_image(0)
    inputs = metric_inputs_for("mix_seed7", "text_to_image", benchmark=copy)
    expected = source.gallery("mix_seed7", "text_to_image").metric_inputs()
    assert inputs.keys() == expected.keys()
    assert all(np.array_equal(np.asarray(inputs[key], dtype=object), np.asarray(expected[key], dtype=object))
               for key in inputs)


def test_a_benchmark_whose_images_moved_says_where_to_point(benchmark, tmp_path):
    with pytest.raises(ImageFolderError, match=f"lacks 12 of the 12 images of the benchmark '{benchmark}', for "
                                               "example 'images/000.png': pass the folder"):
        BenchmarkSource(benchmark, images_dir=tmp_path)


def _protocol_members() -> set[str]:
    return set(Source.__annotations__) | {name for name in vars(Source) if not name.startswith("_")}


def test_a_benchmark_image_gone_after_the_check_is_not_called_a_coco_image(benchmark, image_set, tmp_path):
    shutil.copytree(image_set, tmp_path / "images")
    source = BenchmarkSource(benchmark, images_dir=tmp_path / "images")
    (tmp_path / "images" / source.image_files[0]).unlink()
    with pytest.raises(FileNotFoundError, match=f"benchmark image '.*' is missing; put it back from the image set of "
                                                f"the benchmark '{benchmark}'"):
        source.original_image(0)


@pytest.mark.parametrize("kind", ["rococo", "benchmark"])
def test_both_sources_have_every_member_of_the_protocol(annotations_dir, benchmark, kind):
    """Looked up without calling a property (``isinstance`` on a Protocol would read them on Python 3.11)."""
    source = RococoSource(annotations_dir) if kind == "rococo" else BenchmarkSource(benchmark)
    absent = object()
    missing = [name for name in sorted(_protocol_members()) if inspect.getattr_static(source, name, absent) is absent]
    assert {"text_attacks", "is_rococo", "card_dataset", "gallery", "adversarial_per_image"} <= _protocol_members()
    assert missing == []
    typed: Source = source  # what the front ends hold
    assert typed.num_images == len(typed.image_files) == len(typed.captions_per_image)


def test_each_source_states_its_own_facts(annotations_dir, benchmark):
    rococo, generated = RococoSource(annotations_dir), BenchmarkSource(benchmark)
    assert (rococo.is_rococo, rococo.has_evidence, rococo.card_dataset) == (True, False, ("rococo", "RoCOCO"))
    assert (rococo.text_attacks, rococo.caption_evidence("danger")) == (TEXT_ATTACKS, None)
    assert (generated.is_rococo, generated.has_evidence) == (False, True)
    assert generated.card_dataset == ("rococo-generated", "RoCOCO-style benchmark: bench")
    manifest = read_benchmark(benchmark)
    assert generated.benchmark == manifest and generated.adversarial_per_image == manifest.adversarial_per_image
    evidence, sources = generated.caption_evidence("danger"), generated.adversarial_sources("danger")
    assert len(evidence) == len(generated.adversarial_captions("danger")) == len(sources)
    assert {"word", "position", "influence"} <= set(evidence[0][0])
    assert generated.images_dir == manifest.images_dir  # the image folder the manifest records


def test_open_source_opens_the_kind_its_options_name(annotations_dir, benchmark, tmp_path):
    rococo = open_source(annotations_dir)
    assert type(rococo) is RococoSource and rococo.images_dir is None
    generated = open_source(benchmark=benchmark, images_dir=read_benchmark(benchmark).images_dir)
    assert type(generated) is BenchmarkSource and generated.text_attacks == BenchmarkSource(benchmark).text_attacks
    with pytest.raises(ValueError, match=r"pass `annotations_dir` \(RoCOCO's files\) or `benchmark` .*not both"):
        open_source(annotations_dir=tmp_path, benchmark=benchmark)


def test_open_source_needing_images_refuses_rococo_without_them_but_not_a_benchmark(annotations_dir, benchmark):
    """What evaluate_model opens: RoCOCO only with its images (the message names the option and the way out); a
    benchmark's images default to the folder it records."""
    with pytest.raises(ValueError, match=r"`images_dir` is None: every RoCOCO gallery needs the 5,000 COCO test images "
                                         r".*or give `benchmark`"):
        open_source(annotations_dir, needs_images=True)
    generated = open_source(benchmark=benchmark, needs_images=True)
    assert type(generated) is BenchmarkSource and generated.images_dir == read_benchmark(benchmark).images_dir
