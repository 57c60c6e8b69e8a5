"""rococo_eval.io.download: files and COCO images fetched from a real HTTP server on 127.0.0.1 that can misbehave on
demand (dropped connections, corrupt bodies, 5xx, no server at all), resumed, verified and retried."""

from __future__ import annotations

import doctest
import hashlib
import io
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers.http_server import UNREACHABLE, Route
from rococo_eval.io import download
from rococo_eval.io.download import (
    CorruptImageError,
    DownloadError,
    ServerUnreachableError,
    VerificationError,
    default_cache_dir,
    download_coco_images,
    download_file,
    verify_image_file,
)


def _data(size: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _corrupt(data: bytes) -> bytes:
    return data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]


def _jpeg(seed: int, side: int = 24) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


DATA = _data(300_000)
pytestmark = pytest.mark.usefixtures("quick_retries")


def test_plain_download_checks_sha256(server, tmp_path):
    server.routes["/a.bin"] = Route(DATA)
    path = download_file(server.url + "a.bin", tmp_path / "sub" / "a.bin", sha256=_sha(DATA), size=len(DATA))
    assert path == tmp_path / "sub" / "a.bin"
    assert path.read_bytes() == DATA
    assert not (tmp_path / "sub" / "a.bin.part").exists()
    assert [r.range for r in server.requests_for("/a.bin")] == [None]


def test_dropped_connection_is_resumed_with_range(server, tmp_path):
    server.routes["/a.bin"] = Route(DATA, drops=[120_000])
    path = download_file(server.url + "a.bin", tmp_path / "a.bin", sha256=_sha(DATA))
    assert path.read_bytes() == DATA
    first, second = server.requests_for("/a.bin")
    assert first.range is None and first.sent == 120_000
    assert second.status == 206 and second.range.startswith("bytes=")
    assert 0 < int(second.range.removeprefix("bytes=").rstrip("-")) <= 120_000
    assert server.bytes_sent("/a.bin") < 2 * len(DATA)


def test_server_ignoring_range_is_read_from_zero(server, tmp_path):
    server.routes["/a.bin"] = Route(DATA, drops=[120_000], ignore_range=True)
    path = download_file(server.url + "a.bin", tmp_path / "a.bin", sha256=_sha(DATA), size=len(DATA))
    assert path.read_bytes() == DATA
    first, second = server.requests_for("/a.bin")
    assert second.range is not None and second.status == 200 and second.sent == len(DATA)


@pytest.mark.parametrize("part_bytes", [DATA, DATA + b"extra bytes"], ids=["complete", "longer"])
def test_range_not_satisfiable(server, tmp_path, part_bytes):
    server.routes["/a.bin"] = Route(DATA)
    (tmp_path / "a.bin.part").write_bytes(part_bytes)
    path = download_file(server.url + "a.bin", tmp_path / "a.bin", sha256=_sha(DATA))
    assert path.read_bytes() == DATA
    assert server.requests_for("/a.bin")[0].status == 416


def test_complete_part_of_known_size_is_only_verified(server, tmp_path):
    server.routes["/a.bin"] = Route(DATA)
    (tmp_path / "a.bin.part").write_bytes(DATA)
    download_file(server.url + "a.bin", tmp_path / "a.bin", sha256=_sha(DATA), size=len(DATA))
    assert server.requests_for("/a.bin") == []


def test_corrupt_download_is_fetched_again_from_scratch(server, tmp_path):
    server.routes["/a.bin"] = Route(DATA, bad_bodies=[_corrupt(DATA)])
    path = download_file(server.url + "a.bin", tmp_path / "a.bin", sha256=_sha(DATA), size=len(DATA))
    assert path.read_bytes() == DATA
    assert [r.range for r in server.requests_for("/a.bin")] == [None, None]


def test_always_corrupt_download_raises_and_leaves_nothing(server, tmp_path):
    bad = _corrupt(DATA)
    server.routes["/a.bin"] = Route(DATA, always_bad=bad)
    with pytest.raises(VerificationError) as caught:
        download_file(server.url + "a.bin", tmp_path / "a.bin", sha256=_sha(DATA))
    message = str(caught.value)
    assert server.url + "a.bin" in message and str(tmp_path / "a.bin") in message
    assert _sha(DATA) in message and _sha(bad) in message
    assert list(tmp_path.iterdir()) == []
    assert len(server.requests_for("/a.bin")) == 2


def test_wrong_size_raises(server, tmp_path):
    server.routes["/a.bin"] = Route(DATA)
    with pytest.raises(VerificationError, match=f"has {len(DATA)} bytes, expected {len(DATA) + 1}"):
        download_file(server.url + "a.bin", tmp_path / "a.bin", size=len(DATA) + 1)
    assert list(tmp_path.iterdir()) == []


def test_existing_good_file_is_not_fetched(server, tmp_path):
    server.routes["/a.bin"] = Route(DATA)
    (tmp_path / "a.bin").write_bytes(DATA)
    download_file(server.url + "a.bin", tmp_path / "a.bin", sha256=_sha(DATA))
    assert server.requests == []


def test_existing_bad_file_is_fetched_again(server, tmp_path):
    server.routes["/a.bin"] = Route(DATA)
    (tmp_path / "a.bin").write_bytes(_corrupt(DATA))
    download_file(server.url + "a.bin", tmp_path / "a.bin", sha256=_sha(DATA))
    assert (tmp_path / "a.bin").read_bytes() == DATA
    assert len(server.requests_for("/a.bin")) == 1


def test_missing_file_fails_at_once(server, tmp_path):
    with pytest.raises(DownloadError, match=r"a\.bin.*HTTP 404"):
        download_file(server.url + "a.bin", tmp_path / "a.bin")
    assert len(server.requests_for("/a.bin")) == 1
    assert list(tmp_path.iterdir()) == []


def test_retries_run_out(server, tmp_path):
    server.routes["/a.bin"] = Route(DATA, drops=[0] * 10)
    with pytest.raises(DownloadError, match=r"a\.bin.*broke after 0 of 300000 bytes.*tried 3 times"):
        download_file(server.url + "a.bin", tmp_path / "a.bin", retries=2)
    assert len(server.requests_for("/a.bin")) == 3
    assert not (tmp_path / "a.bin").exists()


@pytest.mark.parametrize("as_url", [lambda p: p.as_uri(), str, Path], ids=["file-url", "str-path", "Path"])
def test_local_sources(tmp_path, as_url):
    source = tmp_path / "source dir" / "a.bin"
    source.parent.mkdir()
    source.write_bytes(DATA)
    (tmp_path / "a.bin.part").write_bytes(DATA[:1000])
    path = download_file(as_url(source), tmp_path / "a.bin", sha256=_sha(DATA), size=len(DATA))
    assert path.read_bytes() == DATA


def test_local_sources_fail_clearly(tmp_path):
    with pytest.raises(DownloadError, match="no file at .*missing.bin"):
        download_file((tmp_path / "missing.bin").as_uri(), tmp_path / "a.bin")
    source = tmp_path / "a.bin"
    source.write_bytes(_corrupt(DATA))
    with pytest.raises(VerificationError, match=_sha(DATA)):
        download_file(source, tmp_path / "copy.bin", sha256=_sha(DATA))


@pytest.mark.parametrize("url, match", [
    ("ftp://example.org/a.bin", "`url` has to be an http"),
    ("file://example.org/a.bin", "`url` has to be an http"),
])
def test_bad_urls(tmp_path, url, match):
    with pytest.raises(ValueError, match=match):
        download_file(url, tmp_path / "a.bin")


def test_bad_retries(tmp_path):
    with pytest.raises(ValueError, match="`retries` has to be a non-negative integer"):
        download_file(tmp_path / "x", tmp_path / "a.bin", retries=-1)


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("ROCOCO_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.delenv("ROCOCO_CACHE_DIR")
    assert default_cache_dir() == Path.home() / ".cache" / "rococo-eval"


IMAGE_NAMES = [f"val2014/COCO_val2014_{index:012d}.jpg" for index in range(12)]


@pytest.fixture
def image_server(server):
    for index, name in enumerate(IMAGE_NAMES):
        server.routes[f"/{name}"] = Route(_jpeg(index))
    return server


def test_coco_images_parallel_with_truncated_and_missing(image_server, tmp_path):
    truncated, missing = IMAGE_NAMES[3], IMAGE_NAMES[7]
    route = image_server.routes[f"/{truncated}"]
    route.bad_bodies.append(route.body[: len(route.body) // 2])
    del image_server.routes[f"/{missing}"]
    with pytest.raises(DownloadError) as caught:
        download_coco_images(IMAGE_NAMES, tmp_path, base_url=image_server.url, workers=4)
    assert list(caught.value.failures) == [missing]
    assert missing in str(caught.value) and "404" in str(caught.value)
    for name in IMAGE_NAMES:
        if name != missing:
            assert (tmp_path / name).read_bytes() == image_server.routes[f"/{name}"].body
    assert not (tmp_path / missing).exists()
    assert [r.range for r in image_server.requests_for(f"/{truncated}")] == [None, None]


def test_coco_images_interrupted_run_resumes(image_server, tmp_path):
    big = "val2014/COCO_val2014_000000999999.jpg"
    names = IMAGE_NAMES + [big]
    image_server.routes[f"/{big}"] = Route(_jpeg(99, side=320), drops=[100_000])
    with pytest.raises(DownloadError) as caught:
        download_coco_images(names, tmp_path, base_url=image_server.url, retries=0)
    assert list(caught.value.failures) == [big]
    assert (tmp_path / (big + ".part")).stat().st_size > 0

    damaged = tmp_path / IMAGE_NAMES[5]
    damaged.write_bytes(damaged.read_bytes()[:-200])
    paths = download_coco_images(names, tmp_path, base_url=image_server.url, progress=True)
    assert paths == [tmp_path / name for name in names]
    assert all(verify_image_file(path) is None for path in paths)
    counts = {name: len(image_server.requests_for(f"/{name}")) for name in names}
    assert counts == {name: 2 if name in (big, IMAGE_NAMES[5]) else 1 for name in names}
    assert image_server.requests_for(f"/{big}")[1].range is not None
    assert image_server.bytes_sent(f"/{big}") == len(image_server.routes[f"/{big}"].body)


def test_coco_images_from_file_url(tmp_path):
    mirror = tmp_path / "mirror"
    for index, name in enumerate(IMAGE_NAMES[:3]):
        (mirror / name).parent.mkdir(parents=True, exist_ok=True)
        (mirror / name).write_bytes(_jpeg(index))
    paths = download_coco_images(IMAGE_NAMES[:3] + IMAGE_NAMES[:1], tmp_path / "out", base_url=mirror.as_uri())
    assert [p.read_bytes() for p in paths] == [(mirror / name).read_bytes() for name in IMAGE_NAMES[:3]]


@pytest.mark.parametrize("kwargs, match", [
    ({"file_names": ["../escape.jpg"]}, "file names have to be relative"),
    ({"file_names": ["/abs/x.jpg"]}, "file names have to be relative"),
    ({"file_names": [], "workers": 0}, "`workers` has to be a positive integer"),
])
def test_coco_images_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        download_coco_images(dest_root=tmp_path, base_url=tmp_path.as_uri(), **kwargs)


MANY_IMAGES = [f"val2014/COCO_val2014_{index:012d}.jpg" for index in range(400)]


@pytest.mark.parametrize("kind", UNREACHABLE)
def test_unreachable_image_server_stops_the_batch_at_once(tmp_path, real_retry_delays, kind):
    make_url, reason = UNREACHABLE[kind]
    dest = tmp_path / "cache" / "coco"
    started = time.monotonic()
    with pytest.raises(ServerUnreachableError) as caught:
        download_coco_images(MANY_IMAGES, dest, base_url=make_url(), workers=8)
    assert time.monotonic() - started < 20  # a loose guard: retrying each image would take minutes
    message = str(caught.value)
    assert "cannot connect to" in message and reason in message
    assert f"into {str(dest)!r}" in message and "(0 of 400 images there are complete)" in message
    assert "--images-dir" in message and "`images_dir`" in message
    assert "HTTPConnectionPool" not in message and "Max retries" not in message
    assert not (tmp_path / "cache").exists()  # no folder, no .part file: nothing half-written


def test_an_answering_server_is_retried_through_5xx_timeouts_and_resets(image_server, tmp_path):
    unavailable, slow, reset = IMAGE_NAMES[:3]
    image_server.routes[f"/{unavailable}"].statuses.extend([503, 503])
    image_server.routes[f"/{slow}"].delays.append(3.0)
    image_server.routes[f"/{reset}"].drops.append(100)
    paths = download_coco_images(IMAGE_NAMES[:4], tmp_path, base_url=image_server.url, timeout=1.0)
    assert [p.read_bytes() for p in paths] == [image_server.routes[f"/{n}"].body for n in IMAGE_NAMES[:4]]
    assert [r.status for r in image_server.requests_for(f"/{unavailable}")] == [503, 503, 200]
    assert [r.sent for r in image_server.requests_for(f"/{reset}")][0] == 100
    assert sorted(p.name for p in (tmp_path / "val2014").iterdir()) == sorted(Path(n).name for n in IMAGE_NAMES[:4])


def test_verify_image_file(tmp_path):
    good = tmp_path / "good.jpg"
    good.write_bytes(_jpeg(0, side=64))
    verify_image_file(good)
    (tmp_path / "cut.jpg").write_bytes(good.read_bytes()[:-300])
    (tmp_path / "text.jpg").write_bytes(b"not an image")
    for name in ("cut.jpg", "text.jpg"):
        with pytest.raises(CorruptImageError, match=f"{name}' is not a complete image"):
            verify_image_file(tmp_path / name)
    with pytest.raises(FileNotFoundError, match="missing.jpg"):
        verify_image_file(tmp_path / "missing.jpg")


def test_docstring_examples():
    results = doctest.testmod(download, optionflags=doctest.ELLIPSIS)
    assert results.failed == 0 and results.attempted > 10
