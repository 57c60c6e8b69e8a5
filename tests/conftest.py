import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rococo_eval.annotations import read_annotation_file, resolve_annotations_dir
from rococo_eval.dataset import RococoSource
from http_server import Server
from tiny_models import make_tiny_hf_clip, register_tiny_open_clip, torchvision_stand_in

REPO_ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def annotations_dir():
    """The verified official annotation files: $ROCOCO_ANNOTATIONS_DIR, else the pinned download."""
    return resolve_annotations_dir()


@pytest.fixture(scope="session")
def clean_records(annotations_dir):
    return read_annotation_file("clean", annotations_dir)


@pytest.fixture(scope="session")
def captions_per_image(clean_records):
    return [len(record["caption"]) for record in clean_records]


@pytest.fixture(autouse=True)
def _doctest_cwd(request, monkeypatch):
    """Doctests name files relative to the repository root, as a user in a checkout would."""
    if isinstance(request.node, pytest.DoctestItem):
        monkeypatch.chdir(REPO_ROOT)


@pytest.fixture(scope="session")
def coco_root(tmp_path_factory, clean_records):
    """A COCO root with the 5,000 test images as tiny JPEGs of varied sizes (every 50th grayscale)."""
    root = tmp_path_factory.mktemp("coco") / "coco"
    (root / "val2014").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for index, record in enumerate(clean_records):
        height, width = rng.integers(20, 48, 2)
        small = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
        image = Image.fromarray(small).resize((int(width), int(height)), Image.Resampling.BILINEAR)
        (image.convert("L") if index % 50 == 0 else image).save(root / record["image"], quality=90)
    return root


@pytest.fixture(scope="session")
def source(annotations_dir, coco_root):
    return RococoSource(annotations_dir, images_dir=coco_root)


@pytest.fixture(scope="module")
def open_clip_name(tmp_path_factory):
    with torchvision_stand_in():
        import open_clip  # noqa: F401  (installed by `make test`; a missing one must fail, not skip)
        yield register_tiny_open_clip(tmp_path_factory.mktemp("open_clip_configs"))


@pytest.fixture(scope="module")
def hf_name(tmp_path_factory):
    return make_tiny_hf_clip(tmp_path_factory.mktemp("hf"))


@pytest.fixture
def server():
    running = Server()
    running.thread.start()
    yield running
    running.httpd.shutdown()
    running.httpd.server_close()
