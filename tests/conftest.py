import os
from pathlib import Path

import pytest

from rococo_eval.annotations import read_annotation_file, resolve_annotations_dir

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
