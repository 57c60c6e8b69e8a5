"""rococo_dataset.py: the ``datasets`` builder (every config, the annotations and images it downloads through a server
on 127.0.0.1) and its command line (``export``, ``push``)."""

import socket
import time

import datasets
import pytest

import rococo_dataset
from helpers.http_server import Route
from rococo_dataset import RococoDataset
from rococo_eval.data.annotations import ANNOTATION_FILES, AnnotationError
from rococo_eval.data.configs import CONFIGS
from rococo_eval.data.export import export_dataset
from rococo_eval.io import download
from rococo_eval.io.download import DownloadError

pytestmark = pytest.mark.usefixtures("quick_retries")


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
    exported = datasets.load_dataset(str(export_folder), "patch_seed10", split="adversarial", cache_dir=hf_cache)
    exported = exported.cast_column("image", datasets.Image(decode=False))
    assert built.num_rows == exported.num_rows == 5000
    assert [image["bytes"] for image in built["image"][:]] == [image["bytes"] for image in exported["image"][:]]
    assert built["box"][:] == exported["box"][:]
    original = builder.as_dataset(split="original").cast_column("image", datasets.Image(decode=False))
    assert original[4999]["image"]["bytes"] == (coco_root / "val2014" / original[4999]["file_name"]).read_bytes()


def test_builder_rejects_unknown_config(tmp_path):
    with pytest.raises(ValueError, match="'rand-voca' not found.*'rand_voca'"):
        RococoDataset(config_name="rand-voca", cache_dir=str(tmp_path))


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
        rococo_dataset.main(["export", "--out", str(tmp_path / "x"), "--configs", "mix_seed1",
                             "--cache-dir", str(cache)])
    assert time.monotonic() - started < 20  # a loose guard: retrying 5,000 images one by one takes about 30 minutes
    error = capsys.readouterr().err
    assert caught.value.code == 1 and error.startswith(f"error: could not fetch '{url}val2014/COCO_val2014_")
    assert f"cannot connect to {url.split('/')[2]} (" in error
    assert "--images-dir" in error and repr(str(cache / "coco")) in error
    assert [path.name for path in tmp_path.iterdir()] in ([], ["cache"])  # no export folder, staged or not
    assert not (cache / "coco").exists()


def test_every_config_is_a_builder_config():
    assert [config.name for config in RococoDataset.BUILDER_CONFIGS] == list(CONFIGS)
