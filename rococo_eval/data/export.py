"""Export RoCOCO as a folder of Parquet files with a dataset card, and upload it to the Hugging Face Hub.

This module owns the dataset's rows (:func:`table_rows`, which the ``datasets`` builder in
``rococo_dataset.py`` yields too), the source a build reads them from (:func:`source_for_configs`), the Parquet
files, the dataset card (its text is ``templates/dataset_card.md``, filled by :func:`fill_template`) and the
upload.

The folder works with ``datasets.load_dataset(folder, config, split=...)`` on every ``datasets`` version
(no loading script) and uploads as it is::

    OUT/README.md                                 dataset card; its YAML ``configs:`` names every config and split
    OUT/data/captions_original-00000-of-00001.parquet   shared by the text-attack configs and ``captions``
    OUT/data/images_original-0000k-of-00005.parquet     shared by the image-attack configs and ``images``
    OUT/data/<attack>_adversarial-....parquet

Rows are written in order by :func:`table_rows`, with the ``datasets`` features stored in the Parquet schema
(images as JPEG bytes). The folder is built next to ``OUT`` and renamed into place when complete, so an
interrupted export leaves no partial folder.

Example:
    >>> card_configs = configs_yaml({"rand_voca": {"original": ["data/a.parquet"], "adversarial": ["data/b.parquet"]}})
    >>> print(card_configs)
    - config_name: rand_voca
      data_files:
      - split: original
        path:
        - data/a.parquet
      - split: adversarial
        path:
        - data/b.parquet
    <BLANKLINE>
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from importlib.resources import files
from pathlib import Path
from string import Template
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from tqdm import tqdm

from rococo_eval.attacks.images import BATCH_SIZE, IMAGE_SIZE, LAM, load_mix_table
from rococo_eval.attacks.replacements import find_replacements
from rococo_eval.catalog import IMAGE_ATTACKS, SEEDS, TEXT_ATTACKS
from rococo_eval.data.annotations import ANNOTATION_FILES, OFFICIAL_COMMIT, OFFICIAL_REPOSITORY, PAPER_URL
from rococo_eval.data.configs import (
    CAPTION_FEATURES,
    CAPTIONS_CONFIG,
    CAPTIONS_ORIGINAL,
    CONFIGS,
    IMAGE_FEATURES,
    IMAGES_ORIGINAL,
    config_splits,
    query_config,
    table_features,
    tables_of,
)
from rococo_eval.data.source import RococoSource, Source, fetch_images
from rococo_eval.io.atomic import temporary_beside
from rococo_eval.io.download import (
    COCO_IMAGE_BASE_URL,
    COCO_TERMS_URL,
    DEFAULT_DOWNLOAD_WORKERS,
    DEFAULT_IMAGE_WORKERS,
    default_cache_dir,
)
from rococo_eval.version import __version__
from rococo_recall import CITATION as ROCOCO_CITATION

logger = logging.getLogger(__name__)

# 1,000 images per file: about 160 MB of COCO JPEGs (they average about 160 KB), under the 500 MB shards that
# `datasets.push_to_hub` writes, so no file is too large to download or upload in one piece.
IMAGE_SHARD_ROWS = 1000
# 100 images (about 16 MB) per row group: a reader that streams the file (the Hub's viewer, streaming=True)
# holds one row group in memory at a time.
IMAGE_ROW_GROUP_ROWS = 100
# 5,000 captions (about 0.3 MB of text) per row group: large enough to compress well, small enough to stream.
CAPTION_ROW_GROUP_ROWS = 5000
# Rows handed to the thread pool per worker at a time: enough to keep every thread busy while the rows are
# written in order, few enough to bound the images held in memory (16 encoded images per thread).
_ROWS_IN_FLIGHT_PER_WORKER = 16
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")

# the card templates (Markdown and BibTeX with `$name` placeholders), shipped as package data
_TEMPLATES = files("rococo_eval.data").joinpath("templates")


def fill_template(name: str, values: dict[str, object]) -> str:
    """The template ``rococo_eval/data/templates/<name>`` with its ``$name`` placeholders replaced by ``values``.

    The templates are the texts of the dataset cards (``dataset_card.md`` for an export, ``benchmark_card.md``
    for a generated benchmark) and the COCO citation; the code computes the values.

    Raises:
        ValueError: ``values`` lacks a placeholder of the template, or names one the template does not have.

    Example:
        >>> fill_template("coco_citation.bib", {}).splitlines()[0]
        '@inproceedings{lin2014coco,'
        >>> fill_template("coco_citation.bib", {"year": 2014})
        Traceback (most recent call last):
        ...
        ValueError: `values` must name the placeholders of templates/coco_citation.bib: missing [], extra ['year']
    """
    template = Template(_TEMPLATES.joinpath(name).read_text(encoding="utf-8"))
    placeholders = {match["named"] or match["braced"] for match in template.pattern.finditer(template.template)
                    if match["named"] or match["braced"]}  # Template.get_identifiers needs Python 3.11
    if placeholders != set(values):
        raise ValueError(f"`values` must name the placeholders of templates/{name}: missing "
                         f"{sorted(placeholders - set(values))}, extra {sorted(set(values) - placeholders)}")
    return template.substitute(values)


DATASET_CITATION = ROCOCO_CITATION + fill_template("coco_citation.bib", {})


def export_dataset(out_dir, configs: Iterable[str] | str | None = None, *, annotations_dir=None, images_dir=None,
                   cache_dir=None, image_base_url=None, include_queries: bool = True,
                   workers: int | None = None, overwrite: bool = False, progress: bool = False) -> Path:
    """Write ``configs`` as Parquet files plus a dataset card into ``out_dir``; return ``out_dir``.

    Every input is checked (annotation sha256, all images present) before anything is written; the folder is
    built beside ``out_dir`` and renamed into place only when complete.

    Args:
        out_dir: the folder to create. It must not exist or be empty, unless ``overwrite``.
        configs: config names (see :data:`rococo_eval.data.configs.CONFIGS`); None exports all of them.
        annotations_dir: folder holding the official annotation files; None uses ``$ROCOCO_ANNOTATIONS_DIR``,
            else downloads the pinned files.
        images_dir: the COCO root holding ``val2014/``; None downloads the 5,000 test images (only if an
            exported config has images) into ``<cache_dir>/coco``, resuming an interrupted download.
        cache_dir: cache for downloads (default :func:`~rococo_eval.io.download.default_cache_dir`).
        image_base_url: where to download images from: COCO's image server or a mirror laid out the same;
            None uses ``$ROCOCO_IMAGE_BASE_URL``, else COCO's server.
        include_queries: also export the config holding each config's queries (``images`` for text attacks,
            ``captions`` for image attacks), so the folder is all a user needs to score a model.
        workers: threads making altered images (None: ``DEFAULT_IMAGE_WORKERS``, one per CPU up to a cap).
        overwrite: replace an existing ``out_dir``.
        progress: show progress bars.

    Raises:
        ValueError: an unknown config, or ``out_dir`` exists and is not empty (without ``overwrite``).
        AnnotationError, ImageFolderError, DownloadError: a missing or corrupt input; nothing is written.

    Example:
        >>> import tempfile
        >>> folder = export_dataset(Path(tempfile.mkdtemp()) / "rococo", ["danger"], include_queries=False)
        >>> sorted(path.name for path in folder.rglob("*"))
        ['README.md', 'captions_original-00000-of-00001.parquet', 'danger_adversarial-00000-of-00001.parquet', 'data']
        >>> import datasets
        >>> datasets.load_dataset(str(folder), "danger", split="adversarial", cache_dir=str(folder.parent)).num_rows
        25000
        >>> import shutil; shutil.rmtree(folder.parent)
    """
    configs = _select_configs(configs, include_queries)
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise ValueError(f"`out_dir` {str(out)!r} already exists and is not empty: choose a new folder or pass "
                         f"overwrite=True (--overwrite)")
    source = source_for_configs(configs, annotations_dir, images_dir, cache_dir, image_base_url=image_base_url,
                                progress=progress)
    staging = temporary_beside(out)  # a folder made as every output is: its mode from the umask (mkdtemp's is 0700)
    staging.mkdir()
    try:
        splits = write_tables(source, configs, staging, workers=workers, progress=progress)
        (staging / "README.md").write_text(_dataset_card(splits, source), encoding="utf-8")
        move_into_place(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info("exported %s to %s", ", ".join(configs), out)
    return out


def source_for_configs(configs: Iterable[str], annotations_dir=None, images_dir=None, cache_dir=None, *,
                       image_base_url=None, download_workers: int = DEFAULT_DOWNLOAD_WORKERS,
                       progress: bool = False) -> RococoSource:
    """A source ready to build ``configs``: every annotation file they read checked, every image they need present.

    Without ``images_dir``, configs with images download the images into ``<cache_dir>/coco``
    (:func:`~rococo_eval.data.source.fetch_images`; complete images are not fetched again). Everything is checked
    before the first row is built, so a bad input stops the build before any output.

    Example:
        >>> source = source_for_configs(["danger", "captions"])
        >>> source.images_dir is None
        True
    """
    tables = tables_of(configs)
    source = RococoSource(annotations_dir, cache_dir=cache_dir)
    for attack in TEXT_ATTACKS:
        if f"{attack}_adversarial" in tables:
            source.adversarial_captions(attack)
    if not any(table_features(table) is IMAGE_FEATURES for table in tables):
        return source
    if images_dir is None:
        cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        logger.info("no images_dir: fetching the COCO test images into %s", cache / "coco")
        images_dir = fetch_images(source, cache / "coco", base_url=image_base_url, workers=download_workers,
                                  progress=progress)
    return RococoSource(annotations_dir, images_dir=images_dir, cache_dir=cache_dir)


def write_tables(source: Source, configs: Iterable[str], folder, *, workers: int | None = None,
                 progress: bool = False) -> dict[str, dict[str, list[str]]]:
    """Write the tables ``configs`` read from ``source`` as ``folder/data/*.parquet``; return config -> split ->
    files, what :func:`configs_yaml` lists in a dataset card. The caption tables of a source with word-choice
    evidence (a generated benchmark) add the ``candidates`` column.

    Example:
        >>> import tempfile
        >>> write_tables(RococoSource(), ["danger"], tempfile.mkdtemp())["danger"]["adversarial"]
        ['data/danger_adversarial-00000-of-00001.parquet']
    """
    folder = Path(folder)
    files = {table: _write_table(source, table, folder, workers, progress) for table in tables_of(configs)}
    return {config: {split: files[table] for split, table in config_splits(config).items()} for config in configs}


def _select_configs(configs, include_queries: bool) -> list[str]:
    names = list(CONFIGS) if configs is None else [configs] if isinstance(configs, str) else list(configs)
    if not names:
        raise ValueError("`configs` is empty: name at least one config, or pass None for all")
    for name in names:
        # RoCOCO's configs only (other seeds are a generated benchmark's: rococo_eval.data.benchmark)
        if name not in CONFIGS:
            raise ValueError(f"`config` must be one of {CONFIGS}, got {name!r}")
    if include_queries:
        names += [query_config(name) for name in names]
    return list(dict.fromkeys(names))


def _write_table(source: Source, table: str, folder: Path, workers, progress: bool) -> list[str]:
    """Write one table as ``data/<table>-0000k-of-0000n.parquet``; return the relative paths in row order."""
    features = table_features(table, evidence=source.has_evidence)
    schema = features.arrow_schema
    has_images = features is IMAGE_FEATURES
    num_rows = table_num_rows(source, table)
    shard_rows = IMAGE_SHARD_ROWS if has_images else num_rows
    group_rows = IMAGE_ROW_GROUP_ROWS if has_images else CAPTION_ROW_GROUP_ROWS
    num_shards = math.ceil(num_rows / shard_rows)
    paths = [f"data/{table}-{k:05d}-of-{num_shards:05d}.parquet" for k in range(num_shards)]
    (folder / "data").mkdir(exist_ok=True)
    rows = table_rows(source, table, workers=workers)
    with tqdm(total=num_rows, unit="row", desc=table, disable=not progress) as bar:
        for shard, path in enumerate(paths):
            count = min(shard_rows, num_rows - shard * shard_rows)
            with pq.ParquetWriter(folder / path, schema) as writer:
                for start in range(0, count, group_rows):
                    batch = [next(rows) for _ in range(min(group_rows, count - start))]
                    columns = features.encode_batch({name: [row[name] for row in batch] for name in features})
                    writer.write_table(pa.Table.from_pydict(columns, schema=schema), row_group_size=group_rows)
                    bar.update(len(batch))
    logger.info("wrote %s: %d rows in %d file(s)", table, num_rows, num_shards)
    return paths


def table_num_rows(source: Source, table: str) -> int:
    """The number of rows of ``table``.

    Example:
        >>> table_num_rows(RococoSource(), "captions_original")
        25010
    """
    if table == CAPTIONS_ORIGINAL:
        return sum(source.captions_per_image)
    if table_features(table) is CAPTION_FEATURES:
        return len(source.adversarial_captions(table.removesuffix("_adversarial")))
    return source.num_images


def table_rows(source: Source, table: str, workers: int | None = 1) -> Iterator[dict]:
    """The rows of ``table`` in order, as dicts of its features (images as ``{"bytes", "path"}``).

    Args:
        source: where the data comes from; image tables need its ``images_dir``.
        table: a table name (see :mod:`rococo_eval.data.configs`).
        workers: threads that make altered images (None: ``DEFAULT_IMAGE_WORKERS``); the rows and bytes do not
            depend on it.

    Example:
        >>> rows = table_rows(RococoSource(), "danger_adversarial")
        >>> row = next(rows)
        >>> row["caption"], row["source_caption_index"]
        ('A criminal with a red helmet on a small moped on a dirt road .', 0)
        >>> row["replacements"]
        [{'original': 'man', 'replacement': 'criminal', 'position': 1}]
    """
    features = table_features(table)
    if table == CAPTIONS_ORIGINAL:
        return _original_caption_rows(source)
    if features is CAPTION_FEATURES:
        return _adversarial_caption_rows(source, table.removesuffix("_adversarial"))
    if source.images_dir is None:
        raise ValueError(f"table {table!r} needs images: give the source an `images_dir` (see fetch_images)")
    if table == IMAGES_ORIGINAL:
        return _in_order(lambda i: _image_row(source, i, source.original_image_bytes(i), None, None),
                         range(source.num_images), workers)
    attack = table.removesuffix("_adversarial")

    def altered_row(index):
        partner, box = source.alteration(index, attack)
        return _image_row(source, index, source.altered_image_bytes(index, attack), partner, box)

    return _in_order(altered_row, range(source.num_images), workers)


def _original_caption_rows(source: Source) -> Iterator[dict]:
    image_of_caption = [i for i, count in enumerate(source.captions_per_image) for _ in range(count)]
    evidence = {"candidates": None} if source.has_evidence else {}
    for image_index, caption in zip(image_of_caption, source.ground_truth_captions()):
        yield {"image_index": image_index, "caption": caption, "is_adversarial": False,
               "source_caption_index": None, "replacements": None, **evidence}


def _adversarial_caption_rows(source: Source, attack: str) -> Iterator[dict]:
    ground_truth = source.ground_truth_captions()
    captions = source.adversarial_captions(attack)  # read first: the file gives its captions per image
    per_image = source.adversarial_per_image
    evidence = source.caption_evidence(attack)
    for row, (caption, source_index) in enumerate(zip(captions, source.adversarial_sources(attack))):
        changes = find_replacements(ground_truth[source_index], caption)
        extra = {} if evidence is None else {"candidates": evidence[row]}
        yield {"image_index": row // per_image, "caption": caption, "is_adversarial": True,
               "source_caption_index": source_index, "replacements": [change._asdict() for change in changes],
               **extra}


def _image_row(source: Source, index: int, data: bytes, partner, box) -> dict:
    name = source.file_name(index)
    return {"image_index": index, "file_name": name, "image": {"bytes": data, "path": name},
            "is_adversarial": partner is not None, "partner_index": partner,
            "box": None if box is None else list(box)}


def _in_order(function: Callable[[int], dict], items: range, workers: int | None) -> Iterator[dict]:
    """``map(function, items)`` on a thread pool, in order, a bounded block at a time."""
    workers = DEFAULT_IMAGE_WORKERS if workers is None else workers
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"`workers` must be a positive int or None, got {workers!r}")
    if workers == 1:
        yield from map(function, items)
        return
    block = _ROWS_IN_FLIGHT_PER_WORKER * workers
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rococo-rows") as pool:
        for start in range(0, len(items), block):
            yield from pool.map(function, items[start:start + block])


def move_into_place(staging: Path, out: Path) -> None:
    """Rename the complete folder ``staging`` to ``out``, replacing an ``out`` that exists (removed only once
    ``staging`` is in its place).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "new").mkdir(); (root / "out").mkdir(); (root / "new" / "a").write_text("x")
        1
        >>> move_into_place(root / "new", root / "out"); sorted(p.name for p in root.rglob("*"))
        ['a', 'out']
    """
    if not out.exists():
        os.replace(staging, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.replace(out, old / out.name)
    os.replace(staging, out)
    shutil.rmtree(old)


def configs_yaml(splits: dict[str, dict[str, list[str]]]) -> str:
    """The ``configs:`` list of a dataset card: config -> split -> Parquet files (explicit, in row order)."""
    entries = [{"config_name": config,
                "data_files": [{"split": split, "path": list(paths)} for split, paths in config_splits_.items()]}
               for config, config_splits_ in splits.items()]
    return yaml.safe_dump(entries, sort_keys=False, default_flow_style=False)


def _dataset_card(splits: dict[str, dict[str, list[str]]], source: RococoSource) -> str:
    """The README.md of an export: ``templates/dataset_card.md`` filled with its YAML header (licence,
    ``configs:``), the config table, the pinned sources and the numbers of :func:`_card_numbers`."""
    header = {
        "pretty_name": "RoCOCO",
        "language": ["en"],
        "license": "other",
        "license_name": "rococo-mit-and-coco-terms",
        "license_link": COCO_TERMS_URL,
        "task_categories": ["image-to-text", "text-to-image"],
        "tags": ["image-text-retrieval", "robustness", "adversarial", "coco"],
        "size_categories": ["10K<n<100K"],
    }
    front = yaml.safe_dump(header, sort_keys=False, default_flow_style=False)
    rows = "\n".join(_config_line(config, config_splits_, source) for config, config_splits_ in splits.items())
    hashes = "\n".join(f"| `{spec.file_name}` | `{spec.sha256}` |" for spec in ANNOTATION_FILES.values())
    self_partners = ", ".join(
        f"{int((load_mix_table('mix', seed).partner == np.arange(source.num_images)).sum())} (seed {seed})"
        for seed in SEEDS)
    example = next((c for c in splits if c in TEXT_ATTACKS), next(iter(splits)))
    return fill_template("dataset_card.md", dict(
        front=front, configs=configs_yaml(splits), rows=rows, version=__version__, repository=OFFICIAL_REPOSITORY,
        commit=OFFICIAL_COMMIT, hashes=hashes, coco=COCO_IMAGE_BASE_URL, self_partners=self_partners,
        example=example, citation=DATASET_CITATION, paper=PAPER_URL, coco_terms=COCO_TERMS_URL,
        **_card_numbers(splits, source)))


def _card_numbers(splits: dict[str, dict[str, list[str]]], source: RococoSource) -> dict[str, str]:
    """The numbers the card states, each from where it is defined: the source's counts, the official
    script's settings (:mod:`rococo_eval.attacks.images`) and the published patch boxes."""
    boxes = np.concatenate([load_mix_table("patch", seed).box for seed in SEEDS])
    patch_side = max((boxes[:, 1] - boxes[:, 0]).max(), (boxes[:, 3] - boxes[:, 2]).max())
    # the text attacks' count, when the export has one (an export of images alone reads no text attack file)
    per_image = source.adversarial_per_image if any(config in TEXT_ATTACKS for config in splits) else None
    return {
        "num_images": f"{source.num_images:,}", "last_image": f"{source.num_images - 1}",
        "num_captions": f"{sum(source.captions_per_image):,}", "size": f"{IMAGE_SIZE}", "lam": f"{LAM:g}",
        "partner_weight": f"{1 - LAM:g}", "batch": f"{BATCH_SIZE}", "patch_side": f"{int(patch_side)}",
        "seeds": ", ".join(map(str, SEEDS[:-1])) + f" and {SEEDS[-1]}",
        "adversarial_ones": "adversarial ones" if per_image is None else f"{per_image} adversarial ones",
        "adversarial_rows": "" if per_image is None else
        f" Adversarial row `{per_image} * i + j` was made from caption `j` of image `i`.",
    }


def _config_line(config: str, config_splits_: dict[str, list[str]], source: RococoSource) -> str:
    counts = ", ".join(f"`{split}` ({table_num_rows(source, table):,})"
                       for split, table in config_splits(config).items() if split in config_splits_)
    if config in TEXT_ATTACKS:
        what = "text attack; scored image-to-text, queries in `images`"
    elif config in IMAGE_ATTACKS:
        what = "image attack; scored text-to-image, queries in `captions`"
    elif config == CAPTIONS_CONFIG:
        what = "the ground-truth captions: text-to-image queries, clean image-to-text gallery"
    else:
        what = "the test images: image-to-text queries, clean text-to-image gallery"
    return f"| `{config}` | {counts} | {what} |"


def exported_configs(folder) -> dict[str, dict[str, list[str]]]:
    """Read an export's card: config -> split -> files; check that every listed file is there.

    Raises:
        ValueError: no README.md with a ``configs:`` list, or a listed file is missing.

    Example:
        >>> exported_configs("no-such-folder")
        Traceback (most recent call last):
        ...
        ValueError: 'no-such-folder' has no README.md: export it first with `python rococo_dataset.py export`
    """
    folder = Path(folder)
    card = folder / "README.md"
    if not card.is_file():
        raise ValueError(f"{str(folder)!r} has no README.md: export it first with `python rococo_dataset.py export`")
    text = card.read_text(encoding="utf-8")
    match = re.match(r"---\n(.*?)\n---\n", text, re.DOTALL)
    entries = (yaml.safe_load(match.group(1)) or {}).get("configs") if match else None
    if not entries:
        raise ValueError(f"{str(card)!r} has no YAML `configs:` list: it is not a RoCOCO export")
    result = {}
    for entry in entries:
        files = {item["split"]: [item["path"]] if isinstance(item["path"], str) else list(item["path"])
                 for item in entry["data_files"]}
        for paths in files.values():
            for path in paths:
                if not (folder / path).is_file():
                    raise ValueError(f"{str(card)!r} lists {path!r}, which is missing: export the folder again")
        result[entry["config_name"]] = files
    return result


def push_to_hub(folder, repo_id: str, *, token: str | None = None, private: bool = False,
                endpoint: str | None = None, commit_message: str = "Upload RoCOCO (rococo-eval export)") -> str:
    """Upload an exported folder to the dataset repository ``repo_id`` on the Hub; return the commit URL.

    Creates the repository if needed, then uploads ``README.md`` and the files its configs list in one commit with
    ``huggingface_hub.HfApi.upload_folder``.

    Args:
        folder: a folder written by :func:`export_dataset` (or another with a card that lists its files, as
            :func:`~rococo_eval.harness.mteb_upload.write_mteb_format` writes).
        repo_id: ``"<owner>/<name>"``.
        token: a Hub token with write access; None uses the saved login or ``$HF_TOKEN``.
        private: create the repository as private (an existing repository keeps its visibility).
        endpoint: another Hub endpoint; None uses ``$HF_ENDPOINT`` or huggingface.co.
        commit_message: the commit's summary.

    Raises:
        ValueError: ``repo_id`` is not ``owner/name``, or ``folder`` is not a complete export.

    Example:
        >>> push_to_hub(".", "rococo")
        Traceback (most recent call last):
        ...
        ValueError: `repo_id` must be '<owner>/<name>', got 'rococo'
    """
    if not isinstance(repo_id, str) or not _REPO_ID.fullmatch(repo_id):
        raise ValueError(f"`repo_id` must be '<owner>/<name>', got {repo_id!r}")
    listed = [path for files in exported_configs(folder).values() for paths in files.values() for path in paths]
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    info = api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="dataset",
                             commit_message=commit_message, allow_patterns=["README.md", *listed])
    logger.info("uploaded %s to %s", folder, info.commit_url)
    return info.commit_url
