"""A generated benchmark's own files: its manifest, and reading each file checked against the sha256 it lists.

:func:`rococo_eval.data.benchmark.make_benchmark` writes a RoCOCO-style benchmark of any image-text set. Beside the
Parquet export (``README.md``, ``data/``) its folder holds what :class:`rococo_eval.data.source.BenchmarkSource`
reads in place of RoCOCO's pinned files (``BenchmarkSource(FOLDER)``)::

    FOLDER/benchmark/manifest.json
        this manifest: attacks, counts, image folder, sha256 of each file
    FOLDER/benchmark/annotations/clean.json
        the ground-truth captions, in the official JSON format
    FOLDER/benchmark/annotations/<attack>.json
        each text attack: the image's captions, then its adversarial ones
    FOLDER/benchmark/attacks/<attack>.json
        per adversarial caption: its source caption and word-choice evidence
    FOLDER/benchmark/mix_tables.npz
        partners (and boxes) of each image attack, keyed as RoCOCO's table
    FOLDER/benchmark/images/
        the images, when the input held them (a Hugging Face dataset)

The manifest names the image folder relative to ``FOLDER`` when it lies inside it, else as an absolute path; a
``BenchmarkSource`` may be given another one (``images_dir``).

Example:
    >>> import json, tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> from rococo_eval.io.atomic import write_json
    >>> records = [{"image": "a.jpg", "caption": ["a dog"]}]
    >>> clean = folder / ANNOTATIONS.format(name="clean")
    >>> _ = write_json(records, clean, compact=True)
    >>> path = write_manifest(folder, text_attacks=[], image_attacks=["mix_seed1"],
    ...                       adversarial_per_image=None, images_dir=None,
    ...                       details={})
    >>> benchmark = read_benchmark(folder)
    >>> benchmark.image_attacks, benchmark.records("clean")[0]["caption"]
    (('mix_seed1',), ['a dog'])
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rococo_eval.attacks.images import MixTable
from rococo_eval.catalog import CLEAN, TEXT_ATTACKS, parse_image_attack
from rococo_eval.io.atomic import write_atomic
from rococo_eval.io.download import sha256_of

MANIFEST = "benchmark/manifest.json"
FORMAT = "rococo-eval benchmark 1"
ANNOTATIONS = "benchmark/annotations/{name}.json"
ADVERSARIAL_ROWS = "benchmark/attacks/{name}.json"
MIX_TABLES = "benchmark/mix_tables.npz"
IMAGES = "benchmark/images"


class BenchmarkError(ValueError):
    """A generated benchmark folder is incomplete, altered since it was written, or not such a folder."""


@dataclass(frozen=True)
class Benchmark:
    """A generated benchmark folder, read from its manifest.

    Attributes:
        root: the folder.
        text_attacks, image_attacks: the attacks it holds, in catalogue order.
        adversarial_per_image: adversarial captions of each image in a text attack (None without text attacks).
        images_dir: the folder the images' paths are relative to (None: not recorded).
        files: relative path -> sha256 of every file the manifest lists.
        details: what made it (input, strategies, encoder, counts, skips), as written.
    """

    root: Path
    text_attacks: tuple[str, ...]
    image_attacks: tuple[str, ...]
    adversarial_per_image: int | None
    images_dir: Path | None
    files: dict = field(repr=False)
    details: dict = field(repr=False)

    def read_bytes(self, relative: str) -> bytes:
        """The bytes of a listed file, checked against the manifest's sha256.

        Raises:
            BenchmarkError: the file is not listed, missing, or changed since the manifest was written.
        """
        if relative not in self.files:
            raise BenchmarkError(f"benchmark {str(self.root)!r} lists no file {relative!r} in its {MANIFEST}")
        path = self.root / relative
        if not path.is_file():
            raise BenchmarkError(f"benchmark file {str(path)!r} is missing: make the benchmark again")
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != self.files[relative]:
            raise BenchmarkError(f"benchmark file {str(path)!r} changed since its manifest was written (sha256 "
                                 f"differs): make the benchmark again")
        return data

    def records(self, name: str) -> list[dict]:
        """The records of annotation file ``name`` (``"clean"`` or a text attack): ``[{"image", "caption"}]``."""
        if name != CLEAN and name not in self.text_attacks:
            raise ValueError(f"`name` must be 'clean' or one of this benchmark's text attacks {self.text_attacks}, "
                             f"got {name!r}")
        records = json.loads(self.read_bytes(ANNOTATIONS.format(name=name)))
        _check_records(records, self.root / ANNOTATIONS.format(name=name))
        return records

    def adversarial_rows(self, attack: str) -> list[dict]:
        """Per adversarial caption of text attack ``attack``, in row order: ``source_caption_index`` (a row of
        the ground-truth captions) and ``candidates`` (``[{"word", "position", "influence"}]``)."""
        if attack not in self.text_attacks:
            raise ValueError(f"`attack` must be one of this benchmark's text attacks {self.text_attacks}, "
                             f"got {attack!r}")
        return json.loads(self.read_bytes(ADVERSARIAL_ROWS.format(name=attack)))

    def mix_table(self, attack: str) -> MixTable:
        """The partner (and box) table of image attack ``attack``."""
        if attack not in self.image_attacks:
            raise ValueError(f"`attack` must be one of this benchmark's image attacks {self.image_attacks}, "
                             f"got {attack!r}")
        method, seed = parse_image_attack(attack)
        with np.load(io.BytesIO(self.read_bytes(MIX_TABLES)), allow_pickle=False) as npz:
            arrays = {key: _read_only(npz[f"{attack}_{key}"]) for key in ("order", "partner", "box")
                      if f"{attack}_{key}" in npz.files}
        return MixTable(method=method, seed=seed, order=arrays["order"], partner=arrays["partner"],
                        box=arrays.get("box"))


def read_benchmark(folder) -> Benchmark:
    """Read the manifest of the benchmark in ``folder`` (what :func:`rococo_eval.data.benchmark.make_benchmark` wrote).

    Raises:
        BenchmarkError: ``folder`` has no manifest, or it is not one this version reads.

    Example:
        >>> read_benchmark("no-such-folder")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rococo_eval.data.manifest.BenchmarkError: 'no-such-folder' is not a generated benchmark: it has no ...
    """
    root = Path(folder).expanduser()
    path = root / MANIFEST
    if not path.is_file():
        raise BenchmarkError(f"{str(folder)!r} is not a generated benchmark: it has no {MANIFEST} (make one with "
                             f"`rococo-eval attack`)")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BenchmarkError(f"{str(path)!r} is not a manifest of format {FORMAT!r}")
    images_dir = manifest["images_dir"]
    return Benchmark(
        root=root,
        text_attacks=tuple(manifest["text_attacks"]),
        image_attacks=tuple(manifest["image_attacks"]),
        adversarial_per_image=manifest["adversarial_per_image"],
        images_dir=None if images_dir is None else root / images_dir,
        files=dict(manifest["files"]),
        details=manifest["details"],
    )


def write_mix_tables(folder, tables: dict[str, MixTable]) -> None:
    """Write the image attacks' tables to ``folder/benchmark/mix_tables.npz``, keyed as RoCOCO's published table
    (``<attack>_order``, ``<attack>_partner``, ``<attack>_box`` for patch)."""
    arrays = {}
    for attack, table in tables.items():
        arrays[f"{attack}_order"] = table.order
        arrays[f"{attack}_partner"] = table.partner
        if table.box is not None:
            arrays[f"{attack}_box"] = table.box
    path = Path(folder) / MIX_TABLES
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda handle: np.savez(handle, **arrays))


def write_manifest(folder, *, text_attacks, image_attacks, adversarial_per_image, images_dir, details: dict) -> Path:
    """Write ``folder/benchmark/manifest.json`` listing every other file under ``folder/benchmark`` (outside the
    image folder) with its sha256; ``images_dir`` is stored relative to ``folder`` when it lies inside it."""
    folder = Path(folder)
    images = None if images_dir is None else Path(images_dir)
    if images is not None and images.resolve().is_relative_to(folder.resolve()):
        images = images.resolve().relative_to(folder.resolve())
    files = {}
    for path in sorted((folder / "benchmark").rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.is_file() and relative != MANIFEST and not relative.startswith(IMAGES + "/"):
            files[relative] = sha256_of(path)
    order = [attack for attack in TEXT_ATTACKS if attack in text_attacks]
    manifest = {"format": FORMAT, "text_attacks": order, "image_attacks": list(image_attacks),
                "adversarial_per_image": adversarial_per_image,
                "images_dir": None if images is None else os.fspath(images), "files": files, "details": details}
    data = (json.dumps(manifest, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
    return write_atomic(folder / MANIFEST, lambda handle: handle.write(data))


def _read_only(array) -> np.ndarray:
    array = array.astype(np.int64)
    array.flags.writeable = False
    return array


def _check_records(records, path: Path) -> None:
    if not isinstance(records, list) or not records:
        raise BenchmarkError(f"{str(path)!r}: expected a non-empty list of records")
    for index, record in enumerate(records):
        captions = record.get("caption") if isinstance(record, dict) else None
        if not isinstance(record.get("image") if isinstance(record, dict) else None, str) \
                or not isinstance(captions, list) or not captions or not all(isinstance(c, str) for c in captions):
            raise BenchmarkError(f"{str(path)!r}: record {index} lacks `image` or a non-empty `caption` list")
