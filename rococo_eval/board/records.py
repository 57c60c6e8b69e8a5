"""One submission to the leaderboard as a record: the JSON file that the board's dataset repo holds, defined here once.

A record is ``submissions/<YYYY>/<id>.json`` (:func:`record_path`) in the repo named by ``$ROCOCO_LEADERBOARD_REPO``;
the Space writes it (:func:`make_record`), never overwrites or deletes it, and reads every one back at start
(:func:`read_record`). Its fields (:data:`SCHEMA_VERSION` 1):

- ``schema_version``, ``id`` (a UUID, hex), ``model``, ``link``, ``precision``, ``note``, ``submitted_at`` (ISO 8601,
  UTC), ``rococo_eval_version`` and ``annotations_digest`` (:data:`ANNOTATIONS_DIGEST`, of RoCOCO's pinned annotation
  files);
- ``validity_warnings``: what the board must say of the row's numbers (an order overridden with ``--trust-order``,
  a clean-agreement check that could not run), each a sentence;
- ``galleries``: ``{gallery key: summary row}``: the numbers of the report's summary row (:data:`SUMMARY_NUMBERS`),
  ``num_queries``, ``num_gallery``, ``reranked`` and ``outcomes``: the per-query outcomes as bit vectors
  (:data:`OUTCOMES`: R@1 hit, top-1 adversarial, and for an attacked gallery the clean part's hit), each the base64
  of ``numpy.packbits`` of ``num_queries`` bits; ``outcomes`` is null for a row without them (migrated from the old
  ``leaderboard.jsonl``), which the board cannot compare query by query;
- ``provenance``, only in a record that the board's worker computed (:mod:`rococo_eval.board.worker`): the model's
  repository and commit, the sha256 of every weight file read, the request, the images' digest, the device, the
  precision and the run's wall time (:data:`PROVENANCE_FIELDS`); the board marks its row *evaluated by the board*;
- ``digest``: the SHA-256 of the record's canonical JSON (sorted keys, no spaces) without ``digest``.

:func:`read_record` checks a record as the board checks a submission (its galleries and their shapes), plus its
size, schema version, digest and the summary numbers recomputed from its bit vectors; a record that fails raises
:class:`RecordError` naming the record and the field, so that the board leaves it out and says so.
:func:`outcomes_of` gives a record's per-query outcome arrays, the input of the board's rank bands.

Example:
    >>> import numpy as np
    >>> from rococo_eval.layout import gallery_shape
    >>> hit = np.array([True, False, True, True])
    >>> row = {"attack": "clean", "direction": "image_to_text", "recall@1": 75.0, "num_queries": 4, "num_gallery": 20}
    >>> record = make_record([row], {"clean/image_to_text": {"hit": hit}}, model="m", link="", precision="fp32",
    ...                      note="", submitted_at="2026-12-05T10:00:00+00:00", record_id="0" * 32)
    >>> record_path(record)
    'submissions/2026/00000000000000000000000000000000.json'
    >>> checked = read_record(record_bytes(record), {"clean/image_to_text": (4, 20)}, name=record_path(record))
    >>> outcomes_of(checked)["clean/image_to_text"]["hit"].tolist()
    [True, False, True, True]
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import uuid
from typing import Mapping, Optional, Sequence

import numpy as np

from rococo_eval.catalog import gallery_key
from rococo_eval.data.annotations import ANNOTATION_FILES
from rococo_eval.results import GalleryKey
from rococo_eval.version import __version__

SCHEMA_VERSION = 1
MAX_RECORD_BYTES = 4 * 1024 * 1024  # RoCOCO's galleries hold at most ~25,000 queries each: ~10 KB of bits per vector
RECORD_FOLDER = "submissions"
RECORD_PATTERN = re.compile(rf"{RECORD_FOLDER}/\d{{4}}/[0-9a-f]{{32}}\.json")
# the per-query outcome arrays a record may hold, and the summary number each one gives (100 x its share of True)
OUTCOMES = {"hit": "recall@1", "top1_adversarial": "false_rate", "clean_hit": "clean_recall@1"}
SUMMARY_NUMBERS = ("recall@1", "recall@5", "recall@10", "r_mean", "false_rate", "clean_recall@1", "clean_r_mean",
                   "attack_success_rate", "num_adversarial")
FIELDS = ("schema_version", "id", "model", "link", "precision", "note", "submitted_at", "rococo_eval_version",
          "annotations_digest", "validity_warnings", "galleries", "digest")
PROVENANCE_FIELDS = ("request_id", "model_repo", "model_commit", "weight_files", "images_digest", "device",
                     "precision", "wall_time_s", "worker")
TOLERANCE = 1e-6  # how far a summary number may be from the one its bit vector gives (floating point only)
ANNOTATIONS_DIGEST = hashlib.sha256(json.dumps(sorted((name, pinned.sha256) for name, pinned in
                                                      ANNOTATION_FILES.items())).encode()).hexdigest()


class RecordError(ValueError):
    """A record that the board cannot take: the message names the record and what is wrong with it."""


def per_query_outcomes(per_query: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outcomes a record keeps (:data:`OUTCOMES`) of one gallery's per-query metric arrays (``rank``,
    ``clean_rank``, ``top1_adversarial``, as :class:`rococo_eval.results.GalleryResult` holds them).

    Example:
        >>> found = per_query_outcomes({"rank": np.array([0, 2]), "clean_rank": np.array([0, 0]),
        ...                             "top1_adversarial": np.array([False, True])})
        >>> {name: values.tolist() for name, values in found.items()}
        {'hit': [True, False], 'top1_adversarial': [False, True], 'clean_hit': [True, True]}
    """
    outcomes = {"hit": np.asarray(per_query["rank"]) == 0}
    if "top1_adversarial" in per_query:
        outcomes["top1_adversarial"] = np.asarray(per_query["top1_adversarial"], dtype=bool)
    if "clean_rank" in per_query:
        outcomes["clean_hit"] = np.asarray(per_query["clean_rank"]) == 0
    return outcomes


def pack_bits(values) -> str:
    """``values`` (booleans) as the base64 of ``numpy.packbits``.

    Example:
        >>> pack_bits([True, False, True]), unpack_bits(pack_bits([True, False, True]), 3).tolist()
        ('oA==', [True, False, True])
    """
    return base64.b64encode(np.packbits(np.asarray(values, dtype=bool)).tobytes()).decode("ascii")


def unpack_bits(text: str, count: int) -> np.ndarray:
    """The ``count`` booleans that :func:`pack_bits` wrote as ``text``.

    Raises:
        ValueError: ``text`` is not base64 of ``ceil(count / 8)`` bytes, or sets a bit past ``count``.
    """
    try:
        packed = np.frombuffer(base64.b64decode(text, validate=True), dtype=np.uint8)
    except (ValueError, TypeError):
        raise ValueError("is not base64") from None
    if len(packed) != math.ceil(count / 8):
        raise ValueError(f"holds {len(packed) * 8} bits for {count} queries")
    bits = np.unpackbits(packed).astype(bool)
    if bits[count:].any():
        raise ValueError(f"sets bits past its {count} queries")
    return bits[:count]


def make_record(summary_rows: Sequence[dict], outcomes: Mapping[str, Mapping[str, np.ndarray]], *, model: str,
                link: str, precision: str, note: str, submitted_at: str, validity_warnings: Sequence[str] = (),
                record_id: Optional[str] = None, provenance: Optional[Mapping] = None) -> dict:
    """The record of a submission: its (checked) summary rows, each gallery's per-query ``outcomes``
    (``{gallery key: {name: booleans}}``, :func:`per_query_outcomes`; a gallery without them has null outcomes), the
    fields the board shows, and its digest. ``record_id`` is a new UUID unless given; ``provenance`` (the worker's:
    :data:`PROVENANCE_FIELDS`) marks a record the board computed. A number with bounds (a compact file's order of ties
    decides it) is left out: the board shows decided numbers only."""
    galleries = {}
    for row in summary_rows:
        key = gallery_key(row["attack"], row["direction"])
        arrays = outcomes.get(key)
        galleries[key] = {
            **{name: float(row[name]) for name in SUMMARY_NUMBERS
               if _is_number(row.get(name)) and not row.get(f"{name}_bounds")},  # undecided numbers are left out
            "num_queries": int(row["num_queries"]), "num_gallery": int(row["num_gallery"]),
            "reranked": bool(row.get("reranked")),
            "outcomes": None if arrays is None else {name: pack_bits(values) for name, values in arrays.items()}}
    record = {"schema_version": SCHEMA_VERSION, "id": record_id or uuid.uuid4().hex, "model": model, "link": link,
              "precision": precision, "note": note, "submitted_at": submitted_at, "rococo_eval_version": __version__,
              "annotations_digest": ANNOTATIONS_DIGEST, "validity_warnings": list(validity_warnings),
              "galleries": galleries, **({"provenance": dict(provenance)} if provenance is not None else {})}
    return {**record, "digest": content_digest(record)}


def content_digest(record: Mapping) -> str:
    """The SHA-256 of ``record``'s canonical JSON, leaving out its ``digest``."""
    body = {name: value for name, value in record.items() if name != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def record_bytes(record: Mapping) -> bytes:
    """The file of ``record``, as the repo holds it."""
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode("utf-8")


def record_path(record: Mapping) -> str:
    """Where ``record`` lives in the repo: ``submissions/<YYYY>/<id>.json``, the year of its ``submitted_at``."""
    return f"{RECORD_FOLDER}/{str(record['submitted_at'])[:4]}/{record['id']}.json"


def json_object(data: bytes, name: str, what: str, max_bytes: int, error: type = ValueError) -> dict:
    """The JSON object in ``data`` (the file ``name``, ``what`` it is, at most ``max_bytes`` bytes).

    Raises:
        error: naming ``name`` and the problem.
    """
    if len(data) > max_bytes:
        raise error(f"{name}: {len(data)} bytes, more than {what} may hold ({max_bytes})")
    try:
        found = json.loads(data.decode("utf-8"))
    except ValueError as problem:
        raise error(f"{name}: not JSON ({problem}); truncated or damaged") from None
    if not isinstance(found, dict):
        raise error(f"{name}: not a JSON object")
    return found


def read_record(data: bytes, galleries: Optional[Mapping[str, tuple[int, int]]], name: str) -> dict:
    """The record in ``data`` (the file ``name``), checked: size, JSON, schema version, fields, content digest, every
    gallery one of ``galleries`` (``{key: (queries, gallery items)}``; None: any) with its shape, bit vectors of that
    many queries, and each summary number equal to the share its bit vector gives.

    Raises:
        RecordError: naming ``name`` and the problem.
    """
    record = json_object(data, name, "a record", MAX_RECORD_BYTES, RecordError)
    if record.get("schema_version") != SCHEMA_VERSION:
        raise RecordError(f"{name}: schema version {record.get('schema_version')!r}; this rococo-eval reads "
                          f"{SCHEMA_VERSION} (a newer rococo-eval may read it)")
    missing = [field for field in FIELDS if field not in record]
    if missing:
        raise RecordError(f"{name}: no {', '.join(missing)}")
    if record["digest"] != content_digest(record):
        raise RecordError(f"{name}: its content does not match its digest (changed after it was written)")
    for field in ("id", "model", "link", "precision", "note", "submitted_at"):
        if not isinstance(record[field], str):
            raise RecordError(f"{name}: `{field}` is not text")
    if not re.fullmatch(r"[0-9a-f]{32}", record["id"]) or not re.fullmatch(r"\d{4}-\d\d-\d\dT.+", record["submitted_at"]):
        raise RecordError(f"{name}: `id` must be 32 hex digits and `submitted_at` an ISO date")
    if not isinstance(record["validity_warnings"], list) or not all(
            isinstance(warning, str) for warning in record["validity_warnings"]):
        raise RecordError(f"{name}: `validity_warnings` is not a list of sentences")
    provenance = record.get("provenance")
    if provenance is not None and not (isinstance(provenance, dict) and set(PROVENANCE_FIELDS) <= set(provenance) and
                                       re.fullmatch(r"[0-9a-f]{40}", str(provenance["model_commit"]))):
        raise RecordError(f"{name}: `provenance` must hold {', '.join(PROVENANCE_FIELDS)}, with a 40-hex "
                          "`model_commit`")
    if not isinstance(record["galleries"], dict) or not record["galleries"]:
        raise RecordError(f"{name}: `galleries` is not a non-empty object")
    for key, row in record["galleries"].items():
        _check_gallery(name, key, row, galleries)
    return record


def _check_gallery(name: str, key: str, row, galleries: Optional[Mapping[str, tuple[int, int]]]) -> None:
    where = f"{name}: gallery {key}"
    if not isinstance(row, dict):
        raise RecordError(f"{where} is not an object")
    shape = (row.get("num_queries"), row.get("num_gallery"))
    if galleries is not None and key not in galleries:
        raise RecordError(f"{where} is not a RoCOCO gallery")
    if galleries is not None and shape != tuple(galleries[key]):
        raise RecordError(f"{where} has {shape[0]} x {shape[1]}; RoCOCO's is {galleries[key][0]} x {galleries[key][1]}")
    if not all(isinstance(size, int) and size > 0 for size in shape):
        raise RecordError(f"{where}: `num_queries` and `num_gallery` must be whole numbers > 0, got {shape}")
    for number in SUMMARY_NUMBERS:
        if number in row and not (_is_number(row[number]) and 0 <= row[number] <= (shape[1] if number ==
                                                                                     "num_adversarial" else 100)):
            raise RecordError(f"{where}: `{number}` is {row[number]!r}, not a number in range")
    if not _is_number(row.get("recall@1")):
        raise RecordError(f"{where}: no `recall@1`")
    outcomes = row.get("outcomes")
    if outcomes is None:
        return
    if not isinstance(outcomes, dict) or "hit" not in outcomes or set(outcomes) - set(OUTCOMES):
        raise RecordError(f"{where}: `outcomes` must hold `hit` and only {', '.join(OUTCOMES)}")
    for outcome, text in outcomes.items():
        try:
            bits = unpack_bits(text, shape[0]) if isinstance(text, str) else None
        except ValueError as error:
            raise RecordError(f"{where}: outcome `{outcome}` {error}") from None
        if bits is None:
            raise RecordError(f"{where}: outcome `{outcome}` is not text")
        number = OUTCOMES[outcome]
        share = 100.0 * bits.sum() / shape[0]
        if number in row and abs(row[number] - share) > TOLERANCE:
            raise RecordError(f"{where}: `{number}` is {row[number]:g} but its `{outcome}` bits give {share:g}")


def outcomes_of(record: Mapping) -> dict[str, dict[str, np.ndarray]]:
    """``{gallery key: {outcome: booleans, one per query}}`` of a checked record (:func:`read_record`): the galleries
    that carry per-query outcomes (:data:`OUTCOMES`), each array of ``num_queries`` booleans in the gallery's query
    order. A record without them (a migrated row) gives ``{}``."""
    return {key: {outcome: unpack_bits(text, row["num_queries"]) for outcome, text in row["outcomes"].items()}
            for key, row in record["galleries"].items() if row.get("outcomes")}


def summary_rows_of(record: Mapping) -> list[dict]:
    """The summary rows of a record's galleries, as an evaluation gives them (``attack``, ``direction`` and the
    numbers), for the board's columns."""
    rows = []
    for key, row in record["galleries"].items():
        gallery = GalleryKey.parse(key)
        rows.append({"attack": gallery.attack, "direction": gallery.direction,
                     **{name: value for name, value in row.items() if name != "outcomes"}})
    return rows


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
