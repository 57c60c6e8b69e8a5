"""Fixtures shared by the tests: the official annotation files, a generated COCO folder, tiny real models, a local
HTTP server. Helpers that are not fixtures live in ``helpers/``."""

import collections
import csv
import json
import os
import shutil
import tempfile
from urllib.parse import urlsplit

import datasets
import numpy as np
import pytest
from filelock import FileLock
from PIL import Image

import rococo_eval.data.source
from rococo_eval.data.annotations import ANNOTATION_FILES, RAW_BASE_URL, read_annotation_file, resolve_annotations_dir
from rococo_eval.data.benchmark import make_benchmark
from rococo_eval.data.export import export_dataset
from rococo_eval.data.source import RococoSource
from rococo_eval.io import download
from helpers import REPO_ROOT
from helpers.fake_hub import FakeHub
from helpers.http_server import Route, Server
from helpers.image_text_set import captions_of
from helpers.tiny_coco import TinyCocoSource
from helpers.tiny_models import make_tiny_blip, make_tiny_hf_clip, register_tiny_open_clip, torchvision_stand_in

SHARED_ANNOTATIONS = REPO_ROOT.parent / "shared" / "rococo-data" / "annotations"
# Stand-in torchvision and pycocoevalcap packages for the official BLIP code's environment only: never collected here
# (collecting would put them on this process's path, where `import torchvision` would find them).
collect_ignore = ["helpers/stand_ins"]
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
_annotation_mirror: dict = {}


def _one_thread_per_worker() -> None:
    """In pytest-xdist's controller, before it starts the workers (they inherit the environment; their NumPy is loaded
    before this file is): each worker, and each command it starts, computes on one OpenMP and BLAS thread. The workers
    share the cores (`make test` runs one more than there are), and more threads than cores wait spinning on one
    another (see `one_torch_thread`). The suite on 2 workers took 716 s with the libraries' own thread counts, 684 s
    with one thread each."""
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")


def pytest_configure(config):
    """Without $ROCOCO_ANNOTATIONS_DIR, the tests fetch the annotation files through the real download code.

    When ``../shared/rococo-data/annotations`` exists (the copy the Makefile points $ROCOCO_ANNOTATIONS_DIR at)
    and neither $ROCOCO_ANNOTATIONS_DIR nor $ROCOCO_ANNOTATIONS_BASE_URL is set, a local HTTP server serves it
    at the pinned URL paths for the whole session ($ROCOCO_ANNOTATIONS_BASE_URL points there) and downloads go
    to a temporary $ROCOCO_CACHE_DIR; each file is still checked against its pinned sha256. Without that copy
    the files come from their pinned URLs. Doctests of ``rococo_eval/`` see the same environment when this
    conftest is loaded (``pytest`` from the repository root, as ``make test`` runs it). Under pytest-xdist each
    worker sets this up for itself; the controller runs no test.
    """
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        _one_thread_per_worker()
        return
    if os.environ.get("ROCOCO_ANNOTATIONS_DIR") is not None or os.environ.get("ROCOCO_ANNOTATIONS_BASE_URL") \
            or not SHARED_ANNOTATIONS.is_dir():
        return
    server = Server()
    pinned_path = urlsplit(RAW_BASE_URL).path
    for spec in ANNOTATION_FILES.values():
        server.routes[pinned_path + spec.file_name] = Route((SHARED_ANNOTATIONS / spec.file_name).read_bytes())
    server.thread.start()
    _annotation_mirror.update(server=server, saved={name: os.environ.get(name) for name in
                                                    ("ROCOCO_ANNOTATIONS_BASE_URL", "ROCOCO_CACHE_DIR")})
    os.environ["ROCOCO_ANNOTATIONS_BASE_URL"] = server.url.rstrip("/") + pinned_path
    if os.environ.get("ROCOCO_CACHE_DIR") is None:
        _annotation_mirror["cache"] = os.environ["ROCOCO_CACHE_DIR"] = tempfile.mkdtemp(prefix="rococo-test-cache-")


# The files that take longest, longest first (seconds of one of three workers, `pytest --durations` on a 2-core
# machine): `make test` hands out whole files to the workers in collection order (`--no-loadscope-reorder`), so these
# start first and the many short files fill the end, with no worker left alone on a long file. Only the order is
# decided here; a file that is not listed runs after these, in pytest's order.
LONGEST_FIRST = (  # measured 2026-12-05 (pytest --durations=0, three workers)
    "tests/test_cli.py",  # 217 s
    "tests/harness/test_mteb_tasks.py",  # 212 s: MTEB on RoCOCO's galleries
    "tests/test_cli_distributed.py",  # 208 s: torchrun launches
    "tests/test_app.py",  # 98 s
    "tests/models/test_vse_infty_official.py",  # 86 s: the official VSE infinity run
    "tests/test_packaging.py",  # 84 s: a clean venv
    "tests/test_rococo_dataset.py",  # 62 s
    "tests/scoring/test_embeddingsfile.py",  # 62 s
    "tests/models/test_pcmepp_official.py",  # 50 s
    "tests/test_browser.py",  # 47 s
    "tests/scoring/test_rerank.py",  # 40 s
    "tests/models/test_pcmepp.py",  # 40 s
    "tests/models/test_blip_official.py",  # 38 s
    "tests/models/test_vse_infty.py",  # 35 s
    "tests/metric/test_metric.py",  # 34 s
    "tests/board/test_hub_records.py",  # 32 s
    "tests/harness/test_mteb_upstream.py",  # 35-60 s: MTEB's own task tests on a copy of mteb
    "tests/board/test_replica_spaces.py",  # 20-40 s: two Space processes, mostly waiting on their start
    "tests/attacks/test_lexicon.py",  # 29 s
    "tests/harness/test_torchmetrics_metric.py",  # 26 s
    "tests/models/test_checkpoint_bounds.py",  # 26 s
    "tests/test_examples.py",  # 23 s
    "tests/metric/test_distributed.py",  # 23 s
    "tests/metric/test_metric_wrapper.py",  # 20 s
    "tests/test_docs.py",  # 14 s with the site `make test` builds first
)


def pytest_collection_modifyitems(config, items):
    """Put the files of :data:`LONGEST_FIRST` first, in its order (each file's tests keep theirs)."""
    missing = [name for name in LONGEST_FIRST if not (REPO_ROOT / name).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py's LONGEST_FIRST names files that do not exist: {missing}")
    rank = {name: number for number, name in enumerate(LONGEST_FIRST)}
    order = {id(item): (rank.get(item.nodeid.split("::")[0], len(rank)), number) for number, item in enumerate(items)}
    items.sort(key=lambda item: order[id(item)])


def pytest_unconfigure(config):
    if not _annotation_mirror:
        return
    server = _annotation_mirror.pop("server")
    server.httpd.shutdown()
    server.httpd.server_close()
    for name, value in _annotation_mirror.pop("saved").items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if "cache" in _annotation_mirror:
        shutil.rmtree(_annotation_mirror.pop("cache"), ignore_errors=True)


def once_for_the_run(tmp_path_factory, name, build):
    """A folder called ``name`` that ``build(folder)`` fills, once for the whole run.

    pytest-xdist's workers each have their own session fixtures: they share this folder instead. The first worker
    builds it under a file lock while the others wait, then reuse it (a build that failed is started again). Tests
    only read these folders (``coco_copy`` is the one to damage). Without xdist, a folder of the session's own.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        folder = tmp_path_factory.mktemp(name) / name
        build(folder)
        return folder
    root = tmp_path_factory.getbasetemp().parent / name  # beside the workers' own temporary folders
    folder, done = root / name, root / "built"
    with FileLock(f"{root}.lock"):
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def annotations_dir(tmp_path_factory):
    """The verified official annotation files: $ROCOCO_ANNOTATIONS_DIR, else the pinned download (from the
    local server of :func:`pytest_configure` when it runs). pytest-xdist's workers take turns, as they may
    download into one cache: the first downloads, the others find the files."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return resolve_annotations_dir()
    with FileLock(tmp_path_factory.getbasetemp().parent / "annotations.lock"):
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
    def build(root):
        (root / "val2014").mkdir(parents=True)
        rng = np.random.default_rng(0)
        for index, record in enumerate(clean_records):
            height, width = rng.integers(20, 48, 2)
            small = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
            image = Image.fromarray(small).resize((int(width), int(height)), Image.Resampling.BILINEAR)
            (image.convert("L") if index % 50 == 0 else image).save(root / record["image"], quality=90)

    return once_for_the_run(tmp_path_factory, "coco", build)


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


@pytest.fixture
def fake_hub(monkeypatch):
    """A stand-in Hub on 127.0.0.1 (:class:`helpers.fake_hub.FakeHub`), with huggingface_hub online for the test."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the leaderboard's copy uploads from a child process
    hub = FakeHub()
    yield hub
    hub.close()


@pytest.fixture
def quick_retries(monkeypatch):
    """Retries of a download after 0.01 s instead of the real backoff (modules that download use it for all
    their tests: ``pytestmark = pytest.mark.usefixtures("quick_retries")``)."""
    monkeypatch.setattr(download, "_RETRY_DELAY_SECONDS", 0.01)


@pytest.fixture
def real_retry_delays(monkeypatch):
    """The real backoff, so that a download that retried what cannot succeed would take minutes, not seconds."""
    monkeypatch.setattr(download, "_RETRY_DELAY_SECONDS", 0.5)


@pytest.fixture(scope="module")
def hf_cache(tmp_path_factory):
    """A ``datasets`` cache folder for the ``load_dataset`` calls of one test module."""
    return str(tmp_path_factory.mktemp("hf-cache"))


@pytest.fixture(scope="session")
def export_folder(tmp_path_factory, annotations_dir, coco_root):
    """One export of a text and an image config (with their query configs), shared by several test modules."""
    return once_for_the_run(tmp_path_factory, "rococo", lambda out: export_dataset(
        out, ["rand_voca", "patch_seed10"], annotations_dir=annotations_dir, images_dir=coco_root, workers=2))


@pytest.fixture
def annotations_copy(annotations_dir, tmp_path):
    """A copy of the official annotation files that a test may damage."""
    folder = tmp_path / "annotations"
    folder.mkdir()
    for spec in ANNOTATION_FILES.values():
        shutil.copy(annotations_dir / spec.file_name, folder / spec.file_name)
    return folder


@pytest.fixture
def coco_copy(coco_root, tmp_path):
    """A copy of the generated COCO folder that a test may damage."""
    copy = tmp_path / "coco"
    shutil.copytree(coco_root, copy)
    return copy


@pytest.fixture
def reads(monkeypatch):
    """Count the COCO files the source reads, through the function it reads them with."""
    counts = collections.Counter()
    read = rococo_eval.data.source.read_image_file

    def counted(path):
        counts[str(path)] += 1
        return read(path)

    monkeypatch.setattr(rococo_eval.data.source, "read_image_file", counted)
    return counts


@pytest.fixture(scope="session")
def image_set(tmp_path_factory):
    """The image-text set of ``helpers/image_text_set.py`` in every input format: Karpathy JSON, CSV, JSONL (images
    under ``root``), a dataset folder."""
    def build(root):
        (root / "images").mkdir(parents=True)
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

    return once_for_the_run(tmp_path_factory, "image_set", build)


@pytest.fixture(scope="session")
def benchmark(image_set, tmp_path_factory):
    """Every strategy, RoCOCO's seed 1 and another seed, from the Karpathy JSON, through the API."""
    return once_for_the_run(tmp_path_factory, "bench", lambda out: make_benchmark(
        image_set / "set.json", out, seeds=[1, 7], cache_dir=out.parent / "cache"))


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run best on one thread: on a busy machine torch's second thread waits on the first (a small
    matrix product took 12 ms with two threads and 0.05 ms with one, measured here with other work running).
    Modules of re-ranking models use it for all their tests (``pytest.mark.usefixtures("one_torch_thread")``)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def blip_name(tmp_path_factory):
    """A tiny random BLIP retrieval model saved with its tokenizer and processor: ``hf:PATH``."""
    return make_tiny_blip(tmp_path_factory.mktemp("blip"))


@pytest.fixture(scope="module")
def blip2_name(tmp_path_factory):
    """A tiny random BLIP-2 retrieval model saved with its tokenizer and processor: ``hf:PATH``."""
    return make_tiny_blip(tmp_path_factory.mktemp("blip2"), blip2=True)


@pytest.fixture(scope="module")
def tiny_source(tmp_path_factory):
    """:class:`helpers.tiny_coco.TinyCocoSource` of 12 images."""
    return TinyCocoSource(tmp_path_factory.mktemp("tiny-coco"))
