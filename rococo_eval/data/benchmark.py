"""Make RoCOCO attacks for any image-text set: a benchmark folder the whole package evaluates as it does RoCOCO.

:func:`make_benchmark` (``rococo-eval attack``) takes a captioned image set, attacks its captions (the four
text strategies of :mod:`rococo_eval.attacks.captions`, Embedding-Influence word choice) and its images (``mix``
and ``patch`` with :mod:`rococo_eval.attacks.images`, partners drawn by
:func:`rococo_eval.attacks.images.make_mix_table`), and writes one folder:

- the Parquet export of :mod:`rococo_eval.data.export` (``README.md`` with ``configs:``, its text
  ``templates/benchmark_card.md``; ``data/``), with the same columns as RoCOCO's plus ``candidates`` on caption
  rows: the word-choice evidence of each adversarial caption;
- the benchmark's own files (:mod:`rococo_eval.data.manifest`): annotation files in the official JSON format, the
  partner tables, a manifest with the sha256 of each. ``BenchmarkSource(FOLDER)`` reads them, so the
  export's rows, ``metric_inputs_for(..., benchmark=FOLDER)``, ``rococo-eval run/score --benchmark FOLDER`` and
  the Space work on it unchanged.

Inputs (:func:`read_image_text_set`): a Karpathy/BLIP-style annotation JSON (``[{"image": PATH, "caption":
[...]}]``; a caption may also be a single string, records of one image are merged), a CSV or JSONL file with one
row per caption (image path and caption columns), or a Hugging Face dataset (a ``datasets.Dataset``, or a folder
``datasets.load_dataset`` reads) with an image column and a caption or caption-list column. Image paths are
relative to ``image_root`` (default: the annotation file's folder); a dataset's images are copied into the
benchmark folder.

Rules (the layout needs one number of adversarial captions per image):

- empty (or blank) captions are skipped, counted and logged; an image left without captions is dropped;
- ``per_image`` adversarial captions per image, by default the smallest number of captions of an image;
- each image's adversarial captions are made from its first ``per_image`` captions that every selected text
  strategy can attack; a caption without a candidate word is kept as ground truth, not attacked (counted,
  logged, and listed in the manifest with the engine's reason), and the image's next caption takes its place;
- an image with fewer attackable captions than ``per_image`` is dropped from the benchmark (counted, logged,
  listed in the card and the manifest);
- everything is written in a hidden folder beside ``out_dir`` and renamed into place at the end: a missing
  image, an unknown strategy or an existing ``out_dir`` stops before anything is written.

Example:
    >>> import tempfile
    >>> from PIL import Image
    >>> root = Path(tempfile.mkdtemp())
    >>> for name, colour in [("a.png", "red"), ("b.png", "blue")]:
    ...     Image.new("RGB", (32, 32), colour).save(root / name)
    >>> pairs = "image,caption\\na.png,a red square\\nb.png,a blue square\\n"
    >>> _ = (root / "set.csv").write_text(pairs)
    >>> folder = make_benchmark(root / "set.csv", root / "bench",
    ...                         strategies=["mix"], seeds=[3])
    >>> import datasets
    >>> cache = str(root / "hf")
    >>> adversarial = datasets.load_dataset(str(folder), "mix_seed3",
    ...                                     split="adversarial", cache_dir=cache)
    >>> adversarial.num_rows
    2
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable

import yaml
from PIL import Image

from rococo_eval.attacks.captions import DEFAULT_TEXT_ENCODER, TEXT_STRATEGIES, CaptionAttack, attack_captions
from rococo_eval.attacks.images import BATCH_SIZE, IMAGE_SIZE, LAM, make_mix_table
from rococo_eval.catalog import IMAGE_ATTACK_METHODS, SEEDS, image_attack_name, parse_image_attack, select_names
from rococo_eval.data.configs import CAPTIONS_CONFIG, IMAGES_CONFIG, config_splits
from rococo_eval.data.export import configs_yaml, fill_template, move_into_place, table_num_rows, write_tables
from rococo_eval.data.manifest import (
    ADVERSARIAL_ROWS,
    ANNOTATIONS,
    IMAGES,
    MANIFEST,
    read_benchmark,
    write_manifest,
    write_mix_tables,
)
from rococo_eval.data.source import BenchmarkSource, ImageFolderError
from rococo_eval.io.atomic import temporary_beside, write_json
from rococo_eval.processes import ONE
from rococo_eval.version import __version__

logger = logging.getLogger(__name__)

STRATEGIES = TEXT_STRATEGIES + IMAGE_ATTACK_METHODS
STRATEGY_GROUPS = {"all": STRATEGIES, "text": TEXT_STRATEGIES, "image": IMAGE_ATTACK_METHODS}
DEFAULT_IMAGE_SEEDS = SEEDS  # RoCOCO's seeds 1, 10, 100
_SHOWN_DROPS = 20  # dropped images listed in the card (all are in the manifest)


@dataclass(frozen=True)
class ImageTextSet:
    """A captioned image set, as read by :func:`read_image_text_set`.

    Attributes:
        image_files: each image's path, relative to ``images_dir`` (POSIX form), in input order.
        captions: each image's captions, in input order (as given, blank ones included).
        images_dir: the folder the paths are relative to; None when the images are in ``image_bytes``.
        image_bytes: each image's file bytes (a Hugging Face dataset's images), else None.
        description: where the set came from, for the card.
    """

    image_files: tuple[str, ...]
    captions: tuple[tuple[str, ...], ...]
    images_dir: Path | None
    image_bytes: tuple[bytes, ...] | None
    description: str


def read_image_text_set(data, *, image_root=None, image_column: str = "image", caption_column: str = "caption",
                        split: str | None = None) -> ImageTextSet:
    """Read a captioned image set: a Karpathy-style JSON, a CSV or JSONL file, or a Hugging Face dataset.

    Args:
        data: a ``.json`` file (``[{"image": PATH, "caption": [...] or "..."}]``), a ``.csv`` or ``.jsonl`` file
            (one row per caption), a ``datasets.Dataset``/``DatasetDict``, or a folder ``datasets.load_dataset``
            reads. Records of the same image are merged, in first-appearance order.
        image_root: the folder image paths are relative to (default: the file's folder; for a dataset whose
            image column holds paths, the current folder).
        image_column, caption_column: the columns of a CSV, JSONL or dataset (a dataset's caption column may hold
            lists of captions; its image column images or paths).
        split: the split of a dataset with several.

    Raises:
        ValueError: an unreadable input, a missing column, or a dataset with several splits and no ``split``.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "set.jsonl"
        >>> _ = path.write_text('{"image": "a.jpg", "caption": "a dog"}\\n{"image": "a.jpg", "caption": "a pet"}\\n')
        >>> read_image_text_set(path).captions
        (('a dog', 'a pet'),)
    """
    import datasets

    if isinstance(data, (datasets.Dataset, datasets.DatasetDict)):
        return _from_dataset(data, image_root, image_column, caption_column, split, repr(data))
    path = Path(data).expanduser()
    if path.is_dir():
        loaded = datasets.load_dataset(str(path))
        return _from_dataset(loaded, image_root, image_column, caption_column, split, str(path))
    if not path.is_file():
        raise ValueError(f"`data` {str(path)!r} is neither a file nor a folder")
    root = Path(image_root).expanduser() if image_root is not None else path.parent
    suffix = path.suffix.lower()
    if suffix == ".json":
        records = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(records, list) or not all(isinstance(r, dict) and "image" in r and "caption" in r
                                                    for r in records):
            raise ValueError(f"`data` {str(path)!r} must be a JSON list of records with `image` and `caption` "
                             "(the Karpathy/BLIP format)")
        pairs = [(record["image"], record["caption"]) for record in records]
    elif suffix in (".csv", ".jsonl"):
        with open(path, encoding="utf-8", newline="") as handle:
            rows = (list(csv.DictReader(handle)) if suffix == ".csv"
                    else [json.loads(line) for line in handle if line.strip()])
        for column in (image_column, caption_column):
            if rows and column not in rows[0]:
                raise ValueError(f"`{'image' if column == image_column else 'caption'}_column` {column!r} is not a "
                                 f"column of {str(path)!r}: it has {sorted(rows[0])}")
        pairs = [(row[image_column], row[caption_column]) for row in rows]
    else:
        raise ValueError(f"`data` {str(path)!r} must be a .json, .csv or .jsonl file or a dataset folder")
    files, captions = _grouped(pairs, str(path))
    return ImageTextSet(tuple(files), tuple(captions), root, None, str(path))


def _grouped(pairs, where: str) -> tuple[list[str], list[tuple[str, ...]]]:
    """Merge ``(image, caption or captions)`` pairs by image, in first-appearance order."""
    grouped: dict[str, list[str]] = {}
    for index, (image, caption) in enumerate(pairs):
        captions = [caption] if isinstance(caption, str) else caption
        if not isinstance(image, str) or not image or not isinstance(captions, list) \
                or not all(isinstance(c, str) for c in captions):
            raise ValueError(f"record {index} of {where} must have an image path and a caption (or a list of "
                             f"captions), got {image!r} and {caption!r}")
        grouped.setdefault(PurePosixPath(image).as_posix(), []).extend(captions)
    if not grouped:
        raise ValueError(f"{where} holds no image")
    return list(grouped), [tuple(captions) for captions in grouped.values()]


def _from_dataset(data, image_root, image_column: str, caption_column: str, split, where: str) -> ImageTextSet:
    import datasets

    if isinstance(data, datasets.DatasetDict):
        if split is None and len(data) != 1:
            raise ValueError(f"{where} has the splits {sorted(data)}: choose one with `split`")
        if split is not None and split not in data:
            raise ValueError(f"`split` {split!r} is not a split of {where}: it has {sorted(data)}")
        data = data[split if split is not None else next(iter(data))]
    for name, column in (("image_column", image_column), ("caption_column", caption_column)):
        if column not in data.column_names:
            raise ValueError(f"`{name}` {column!r} is not a column of {where}: it has {data.column_names}")
    if not isinstance(data.features[image_column], datasets.Image):
        root = Path(image_root).expanduser() if image_root is not None else Path.cwd()
        files, captions = _grouped(zip(data[image_column][:], data[caption_column][:]), where)
        return ImageTextSet(tuple(files), tuple(captions), root, None, where)
    images = data.cast_column(image_column, datasets.Image(decode=False))[image_column][:]
    keys, payload = [], {}
    for image in images:
        content = image["bytes"] if image["bytes"] is not None else Path(image["path"]).read_bytes()
        key = hashlib.sha256(content).hexdigest()
        keys.append(key)
        payload.setdefault(key, content)
    order, captions = _grouped(zip(keys, data[caption_column][:]), where)
    files = tuple(f"{index:06d}{_suffix(payload[key])}" for index, key in enumerate(order))
    return ImageTextSet(files, tuple(captions), None, tuple(payload[key] for key in order), where)


def _suffix(content: bytes) -> str:
    with Image.open(io.BytesIO(content)) as image:
        return "." + {"JPEG": "jpg"}.get(image.format, (image.format or "png").lower())


def make_benchmark(data, out_dir, *, image_root=None, strategies: Iterable[str] = STRATEGIES,
                   seeds: Iterable[int] = DEFAULT_IMAGE_SEEDS, seed: int = 0, per_image: int | None = None,
                   encoder: str = DEFAULT_TEXT_ENCODER, image_column: str = "image", caption_column: str = "caption",
                   split: str | None = None, batch_size: int | None = None, device: str | None = None,
                   cache_dir=None, workers: int | None = None, overwrite: bool = False,
                   progress: bool = False, processes=ONE) -> Path:
    """Attack a captioned image set and write a RoCOCO-style benchmark folder; return ``out_dir``.

    Args:
        data, image_root, image_column, caption_column, split: the image set (see :func:`read_image_text_set`).
        out_dir: the folder to create; it must not exist (or be empty) unless ``overwrite``.
        strategies: any of :data:`STRATEGIES`: the text strategies ``same_concept``, ``diff_concept``,
            ``rand_voca``, ``danger`` and the image methods ``mix``, ``patch``; or the groups ``"text"``,
            ``"image"``, ``"all"``.
        seeds: the image attacks' seeds (default RoCOCO's 1, 10, 100): one ``<method>_seed<seed>`` config each.
        seed: the text attacks' seed (their random choices of replacement words).
        per_image: adversarial captions per image; None: the smallest number of non-blank captions of an image.
        encoder: the text encoder of the Embedding-Influence scores (see :mod:`rococo_eval.attacks.captions`).
        batch_size, device, cache_dir: the encoder's batch, torch device and embedding cache (resumable).
        workers: threads making altered images (None: one per CPU up to a cap).
        overwrite: replace an existing ``out_dir``.
        progress: show progress bars.
        processes: the :class:`~rococo_eval.processes.Processes` of a launch of several: they share the encoder's
            work (``cache_dir`` must be a folder they all see), and rank 0 writes the folder.

    Raises:
        ValueError: an unknown strategy, a bad seed or ``per_image``, an existing ``out_dir``, an unreadable
            input, or no image left to attack.
        ImageFolderError: an image is missing (the message names it and the image root); nothing is written.
    """
    strategies = select_names(strategies, STRATEGIES, STRATEGY_GROUPS)
    text = [name for name in TEXT_STRATEGIES if name in strategies]
    methods = [name for name in IMAGE_ATTACK_METHODS if name in strategies]
    seeds = _check_seeds(seeds) if methods else []
    if per_image is not None and (isinstance(per_image, bool) or not isinstance(per_image, int) or per_image < 1):
        raise ValueError(f"`per_image` must be a positive int or None, got {per_image!r}")
    out = Path(out_dir).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise ValueError(f"`out_dir` {str(out)!r} already exists and is not empty: choose a new folder or pass "
                         "overwrite=True (--overwrite)")
    processes.barrier()  # every process has seen `out_dir` free before rank 0 writes it
    image_set = read_image_text_set(data, image_root=image_root, image_column=image_column,
                                    caption_column=caption_column, split=split)
    _check_images_present(image_set)
    engine = dict(encoder=encoder, seed=seed, device=device, cache_dir=cache_dir, progress=progress,
                  processes=processes, **({} if batch_size is None else {"batch_size": batch_size}))
    plan = _plan(image_set, text, per_image, engine)
    if not processes.is_main:
        logger.info("%s: its share of the text encodings is done; rank 0 writes the benchmark", processes.name)
        return out
    staging = temporary_beside(out)  # a folder made as every output is: its mode from the umask (mkdtemp's is 0700)
    staging.mkdir()
    try:
        image_attacks = [image_attack_name(method, s) for method in methods for s in seeds]
        _write_benchmark_files(staging, image_set, plan, text, image_attacks,
                               details={"input": image_set.description, "strategies": list(strategies),
                                        "text_seed": seed, "image_seeds": list(seeds), "encoder": encoder,
                                        "rococo_eval": __version__, **plan.details})
        source = BenchmarkSource(staging)
        configs = text + image_attacks + [CAPTIONS_CONFIG, IMAGES_CONFIG]
        splits = write_tables(source, configs, staging, workers=workers, progress=progress)
        card = _card(splits, source, read_benchmark(staging).files, plan, text, image_attacks, strategies, seed,
                     seeds, encoder, image_set.description)
        (staging / "README.md").write_text(card, encoding="utf-8")
        move_into_place(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info("wrote the benchmark of %d images (%s) to %s", source.num_images, ", ".join(configs), out)
    return out


def _check_seeds(seeds) -> list[int]:
    seeds = [seeds] if isinstance(seeds, int) else list(seeds)
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
        raise ValueError(f"`seeds` must be non-negative ints, at least one, got {seeds!r}")
    return list(dict.fromkeys(seeds))


def _check_images_present(image_set: ImageTextSet) -> None:
    if image_set.images_dir is None:
        return
    root = image_set.images_dir
    missing = [name for name in image_set.image_files if not (root / name).is_file()]
    if missing:
        raise ImageFolderError(f"image {missing[0]!r} is missing from the image root {str(root)!r} "
                               f"({len(missing)} of {len(image_set.image_files)} images are missing): pass the "
                               "folder the paths are relative to as `image_root` (--image-root)")


@dataclass(frozen=True)
class _Plan:
    """What goes into the benchmark: the kept images, their captions, and each attack's adversarial captions."""

    kept: tuple[int, ...]  # indices into the image set
    captions: tuple[tuple[str, ...], ...]  # ground truth of each kept image (blank ones removed)
    per_image: int | None
    adversarial: dict  # attack -> per kept image, per_image (source caption index within the image, CaptionAttack)
    details: dict


def _plan(image_set: ImageTextSet, text: list[str], per_image: int | None, engine: dict) -> _Plan:
    """Apply the rules of the module docstring: skip blank captions, attack, choose, drop."""
    captions = [tuple(c for c in caps if c.strip()) for caps in image_set.captions]
    blank = sum(len(caps) for caps in image_set.captions) - sum(len(caps) for caps in captions)
    if blank:
        logger.warning("skipped %d empty caption(s)", blank)
    dropped = [{"image": image_set.image_files[i], "reason": "no caption"} for i, caps in enumerate(captions)
               if not caps]
    candidates = [i for i, caps in enumerate(captions) if caps]
    if not candidates:
        raise ValueError(f"{image_set.description} has no image with a caption")
    details = {"images_in": len(image_set.image_files), "captions_in": sum(map(len, image_set.captions)),
               "empty_captions": blank}
    if not text:
        kept = tuple(candidates)
        return _Plan(kept, tuple(captions[i] for i in kept), None, {}, {
            **details, "images": len(kept), "dropped_images": dropped, "skipped_captions": []})
    per_image = per_image if per_image is not None else min(len(captions[i]) for i in candidates)
    flat = [(i, k, caption) for i in candidates for k, caption in enumerate(captions[i])]
    results = attack_captions([caption for _, _, caption in flat], [i for i, _, _ in flat], text, **engine)
    chosen: dict[int, list] = {i: [] for i in candidates}
    skipped = []
    for row, (i, k, caption) in enumerate(flat):
        outcome = {name: results[name][row] for name in text}
        failed = {name: o.reason for name, o in outcome.items() if not isinstance(o, CaptionAttack)}
        if failed:
            skipped.append({"image": image_set.image_files[i], "caption": caption, "reasons": failed})
        elif len(chosen[i]) < per_image:
            chosen[i].append((k, outcome))
    if skipped:
        reasons = Counter(reason for s in skipped for reason in set(s["reasons"].values()))
        logger.warning("%d caption(s) kept as ground truth only, not attacked (%s)", len(skipped),
                       ", ".join(f"{reason}: {count}" for reason, count in reasons.most_common()))
    short = [i for i in candidates if len(chosen[i]) < per_image]
    dropped += [{"image": image_set.image_files[i],
                 "reason": f"{len(chosen[i])} attackable caption(s), fewer than {per_image}"} for i in short]
    if short:
        logger.warning("dropped %d image(s) with fewer than %d attackable captions", len(short), per_image)
    kept = tuple(i for i in candidates if len(chosen[i]) >= per_image)
    if not kept:
        raise ValueError(f"no image of {image_set.description} has {per_image} caption(s) that every text strategy "
                         f"can attack: {len(skipped)} caption(s) have no candidate word")
    adversarial = {name: [[(k, outcome[name]) for k, outcome in chosen[i]] for i in kept] for name in text}
    return _Plan(kept, tuple(captions[i] for i in kept), per_image, adversarial, {
        **details, "images": len(kept), "captions_without_candidate": len(skipped),
        "ground_truth_collisions": dict(results.ground_truth_collisions), "dropped_images": dropped,
        "skipped_captions": skipped})


def _write_benchmark_files(folder: Path, image_set: ImageTextSet, plan: _Plan, text: list[str],
                           image_attacks: list[str], details: dict) -> None:
    files = [image_set.image_files[i] for i in plan.kept]
    if image_set.image_bytes is None:
        images_dir = image_set.images_dir.resolve()
    else:
        images_dir = folder / IMAGES
        images_dir.mkdir(parents=True)
        for name, i in zip(files, plan.kept):
            (images_dir / name).write_bytes(image_set.image_bytes[i])
    write_json([{"image": name, "caption": list(caps)} for name, caps in zip(files, plan.captions)],
               folder / ANNOTATIONS.format(name="clean"), compact=True)
    offsets = [0]
    for caps in plan.captions:
        offsets.append(offsets[-1] + len(caps))
    for name in text:
        per_image = plan.adversarial[name]
        write_json([{"image": image, "caption": list(caps) + [attack.caption for _, attack in chosen]}
                    for image, caps, chosen in zip(files, plan.captions, per_image)],
                   folder / ANNOTATIONS.format(name=name), compact=True)
        write_json([{"source_caption_index": offsets[n] + k,
                     "candidates": [{"word": w, "position": int(p), "influence": float(s)}
                                    for w, p, s in attack.candidates]}
                    for n, chosen in enumerate(per_image) for k, attack in chosen],
                   folder / ADVERSARIAL_ROWS.format(name=name), compact=True)
    write_mix_tables(folder, {attack: make_mix_table(*parse_image_attack(attack), len(files))
                              for attack in image_attacks})
    write_manifest(folder, text_attacks=text, image_attacks=image_attacks, adversarial_per_image=plan.per_image,
                   images_dir=images_dir, details=details)


def _card(splits, source: BenchmarkSource, files: dict, plan: _Plan, text, image_attacks, strategies, seed, seeds,
          encoder, description: str) -> str:
    """The README.md of a benchmark: ``templates/benchmark_card.md`` filled with its YAML header, the config table,
    how it was made (the plan's counts, dropped images, the attack settings) and the sha256 of its own files."""
    header = {"pretty_name": f"RoCOCO-style attacks of {PurePosixPath(description).name}",
              "task_categories": ["image-to-text", "text-to-image"],
              "tags": ["image-text-retrieval", "robustness", "adversarial", "rococo"]}
    front = yaml.safe_dump(header, sort_keys=False, default_flow_style=False)
    rows = "\n".join(f"| `{config}` | " + ", ".join(f"`{split}` ({table_num_rows(source, table):,})"
                                                    for split, table in config_splits(config).items()) + " |"
                     for config in splits)
    details = plan.details
    drops = details["dropped_images"]
    shown = "\n".join(f"- `{d['image']}`: {d['reason']}" for d in drops[:_SHOWN_DROPS])
    more = f"\n- ... and {len(drops) - _SHOWN_DROPS} more (all in `{MANIFEST}`)" if len(drops) > _SHOWN_DROPS else ""
    hashes = "\n".join(f"| `{path}` | `{digest}` |" for path, digest in sorted(files.items()))
    example = next(iter(splits))
    return fill_template("benchmark_card.md", dict(
        front=front, configs=configs_yaml(splits), rows=rows, description=description, version=__version__,
        strategies=", ".join(f"`{s}`" for s in strategies), images=details["images"],
        images_in=details["images_in"], captions_in=details["captions_in"], empty=details["empty_captions"],
        without=details.get("captions_without_candidate", 0), per_image=plan.per_image or "none (no text attack)",
        dropped=len(drops), drop_list=(shown + more) or "none",
        collisions=", ".join(f"{name}: {n}" for name, n in details.get("ground_truth_collisions", {}).items())
        or "no text attack", encoder=encoder, seed=seed,
        seeds=", ".join(map(str, seeds)) or "none", size=IMAGE_SIZE, lam=f"{LAM:g}", batch=BATCH_SIZE,
        hashes=hashes, manifest=MANIFEST, example=example,
        text_note=("Text attacks: " + ", ".join(f"`{t}`" for t in text)) if text else "No text attack",
        image_note=("Image attacks: " + ", ".join(f"`{a}`" for a in image_attacks)) if image_attacks
        else "No image attack"))
