"""rococo_eval.data.annotations: the official annotation files downloaded from a mirror (a real HTTP server on
127.0.0.1, or a folder), each checked against its pinned sha256, and the errors that say where to get them."""

import time
from pathlib import Path

import pytest

from helpers.http_server import UNREACHABLE, Route
from rococo_eval.data.annotations import (ANNOTATION_FILES, AnnotationError, download_annotations,
                                          resolve_annotations_dir)
from rococo_eval.io.download import ServerUnreachableError, VerificationError

pytestmark = pytest.mark.usefixtures("quick_retries")


@pytest.fixture
def ANNOTATIONS_DIR(annotations_dir):
    return str(annotations_dir)


@pytest.fixture
def annotation_server(server, ANNOTATIONS_DIR):
    for spec in ANNOTATION_FILES.values():
        server.routes[f"/mirror/{spec.file_name}"] = Route((Path(ANNOTATIONS_DIR) / spec.file_name).read_bytes())
    return server


def test_download_annotations_from_base_url(annotation_server, tmp_path):
    folder = download_annotations(["clean", "danger"], cache_dir=tmp_path, base_url=annotation_server.url + "mirror")
    assert folder == tmp_path / "annotations"
    assert sorted(p.name for p in folder.iterdir()) == ["coco_karpathy_test.json", "danger.json"]
    assert len(annotation_server.requests) == 2
    download_annotations("danger", cache_dir=tmp_path, base_url=annotation_server.url + "mirror")
    assert len(annotation_server.requests) == 2


def test_resolve_annotations_dir_downloads_from_env_mirror(annotation_server, tmp_path, monkeypatch):
    monkeypatch.delenv("ROCOCO_ANNOTATIONS_DIR", raising=False)
    monkeypatch.setenv("ROCOCO_ANNOTATIONS_BASE_URL", annotation_server.url + "mirror/")
    monkeypatch.setenv("ROCOCO_CACHE_DIR", str(tmp_path))
    folder = resolve_annotations_dir()
    assert folder == tmp_path / "annotations"
    assert sorted(p.name for p in folder.iterdir()) == sorted(s.file_name for s in ANNOTATION_FILES.values())
    assert resolve_annotations_dir(folder) == folder


def test_download_annotations_from_local_mirror(tmp_path, ANNOTATIONS_DIR):
    folder = download_annotations(["rand_voca"], cache_dir=tmp_path, base_url=ANNOTATIONS_DIR)
    assert (folder / "rand_voca.json").read_bytes() == (Path(ANNOTATIONS_DIR) / "rand_voca.json").read_bytes()


def test_download_annotations_rejects_a_wrong_file(annotation_server, tmp_path):
    annotation_server.routes["/mirror/danger.json"] = annotation_server.routes["/mirror/rand_voca.json"]
    with pytest.raises(VerificationError, match=ANNOTATION_FILES["danger"].sha256) as caught:
        download_annotations(["danger"], cache_dir=tmp_path, base_url=annotation_server.url + "mirror")
    assert "set $ROCOCO_ANNOTATIONS_DIR to a folder holding the official files" in str(caught.value)
    assert not (tmp_path / "annotations" / "danger.json").exists()


def test_download_annotations_rejects_unknown_names(tmp_path):
    with pytest.raises(ValueError, match="`name` must be one of"):
        download_annotations(["clean", "typo"], cache_dir=tmp_path)


def test_annotation_error_is_a_value_error():
    assert issubclass(AnnotationError, ValueError)


@pytest.mark.parametrize("kind", UNREACHABLE)
def test_unreachable_annotation_source_fails_at_once_and_says_it_once(tmp_path, real_retry_delays, kind):
    make_url, reason = UNREACHABLE[kind]
    base = make_url()
    started = time.monotonic()
    with pytest.raises(ServerUnreachableError) as caught:
        download_annotations(["clean", "danger"], cache_dir=tmp_path, base_url=base)
    assert time.monotonic() - started < 20
    message = str(caught.value)
    url = base + "coco_karpathy_test.json"
    host = url.split("/")[2]
    assert message.startswith(f"could not fetch {url!r}: cannot connect to {host} (")
    assert message.count(host) == 2 and message.count(reason) == 1  # the URL and the reason, once each
    assert message.endswith("set $ROCOCO_ANNOTATIONS_DIR to a folder holding the official files, or "
                            "$ROCOCO_ANNOTATIONS_BASE_URL to a mirror of them.")
    assert list(tmp_path.iterdir()) == []
