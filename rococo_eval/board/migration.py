"""Turning the old board in a dataset repo (``leaderboard.jsonl``) into records, once: ``rococo-eval leaderboard
migrate --repo ORG/NAME``.

Before records, the Space copied its whole board to the repo as ``leaderboard.jsonl``: one JSON object a line, the
published rows and the submitted ones, each with ``kind``, ``model``, ``link``, ``precision``, ``note``, ``source``,
``submitted_at`` and ``results`` (``{gallery key: R@1}``). :func:`plan_migration` reads it and makes one record
(:mod:`rococo_eval.board.records`) of each submitted line; the published lines are left out (the code holds the
published rows). A migrated record holds each gallery's R@1 and the gallery's shape (from the annotations), no other
number and no per-query outcomes (null: the old board had none, so its rows are not compared query by query), and a
validity warning that says so. Its id is derived from the line (a UUID 5 of its model, results and time), so that
a line is the same record however often it is planned.

A line whose row is a record already (the same id, or the same model with the same results: the board's one row,
:func:`rococo_eval.board.leaderboard.row_digest`) is named in :attr:`Migration.existing`; :func:`commit_migration`
commits the others in one commit of new files, and leaves ``leaderboard.jsonl`` where it is.

Example:
    >>> from rococo_eval.board.leaderboard import rococo_galleries
    >>> line = {"kind": "submitted", "model": "m", "link": "", "precision": "fp32", "note": "",
    ...         "submitted_at": "2025-06-01T10:00:00+00:00", "results": {"clean/image_to_text": 50.0}}
    >>> record = legacy_record(line, rococo_galleries([5] * 4), 1)
    >>> record["galleries"]["clean/image_to_text"]["recall@1"], record["galleries"]["clean/image_to_text"]["outcomes"]
    (50.0, None)
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import uuid
from pathlib import Path
from typing import Mapping, Optional

from rococo_eval.results import GalleryKey
from rococo_eval.board.hub_transfer import LEGACY_BOARD, download_records, fetch
from rococo_eval.board.leaderboard import PUBLISHED, row_digest
from rococo_eval.board.records import RecordError, make_record, read_record, record_bytes, record_path

# the namespace of the migrated records' ids (UUID 5 of each line's model, results and time)
LEGACY_NAMESPACE = uuid.UUID("6f1c5b0e-41a4-4d0c-9a41-0c0c0a1e0b41")
MIGRATED_WARNING = (f"migrated from the old board ({LEGACY_BOARD}): its R@1 only, no per-query outcomes; the "
                    "rococo-eval version and the annotations it was scored with are not known")


@dataclasses.dataclass
class Migration:
    """What migrating ``repo_id`` does: the ``records`` to commit, the ``existing`` ones (records already in the repo,
    each ``(line number, model)``), and how many ``published`` lines are left out."""

    repo_id: str
    records: list[dict]
    existing: list[tuple[int, str]]
    published: int


def legacy_record(line: Mapping, galleries: Mapping[str, tuple[int, int]], number: int) -> dict:
    """The record of one submitted line (number ``number``) of ``leaderboard.jsonl``, checked as the board checks a
    record (:func:`rococo_eval.board.records.read_record`) against ``galleries`` (``{gallery key: (queries, gallery
    items)}``, :func:`rococo_eval.board.leaderboard.rococo_galleries`).

    Raises:
        ValueError: the line is not a row the board would take, naming its number and the problem.
    """
    where = f"{LEGACY_BOARD} line {number}"
    results = line.get("results")
    if not isinstance(results, dict) or not results:
        raise ValueError(f"{where}: `results` is not an object of R@1 numbers")
    rows = []
    for key, value in results.items():
        if key not in galleries:
            raise ValueError(f"{where} ({line.get('model')!r}): {key} is not a RoCOCO gallery")
        gallery = GalleryKey.parse(key)
        rows.append({"attack": gallery.attack, "direction": gallery.direction, "recall@1": value,
                     "num_queries": galleries[key][0], "num_gallery": galleries[key][1]})
    fields = {name: line.get(name) for name in ("model", "link", "precision", "note", "submitted_at")}
    record_id = uuid.uuid5(LEGACY_NAMESPACE, json.dumps([fields["model"], results, fields["submitted_at"]],
                                                        sort_keys=True)).hex
    try:
        record = make_record(rows, {}, **fields, validity_warnings=[MIGRATED_WARNING], record_id=record_id)
        return read_record(record_bytes(record), galleries, where)
    except (RecordError, TypeError, ValueError) as error:
        raise ValueError(f"{where} ({fields['model']!r}) is no record: {error}") from None


def plan_migration(repo_id: str, galleries: Mapping[str, tuple[int, int]], token: Optional[str] = None,
                   endpoint: Optional[str] = None) -> Migration:
    """Read ``leaderboard.jsonl`` and the records of the dataset repo ``repo_id`` (``token`` to read a private
    repo, ``endpoint`` for a Hub other than huggingface.co) and make the :class:`Migration` (nothing is written).

    Raises:
        ValueError: the repo holds no ``leaderboard.jsonl``, or a line is not JSON or not a row (naming it).
    """
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    listed = api.list_repo_files(repo_id, repo_type="dataset")
    if LEGACY_BOARD not in listed:
        raise ValueError(f"the dataset repo {repo_id} holds no {LEGACY_BOARD}: there is nothing to migrate")
    lines = fetch(api, repo_id, LEGACY_BOARD).decode("utf-8").splitlines()
    with tempfile.TemporaryDirectory() as folder:  # the records already in the repo, to name the rows they hold
        list(download_records(api, repo_id, Path(folder), listed))
        held = []
        for file in sorted(Path(folder).glob("submissions/*/*.json")):
            try:
                held.append(read_record(file.read_bytes(), galleries, file.name))
            except RecordError:
                continue  # a damaged record holds no row (the board leaves it out and names it)
    held_ids, held_rows = {record["id"] for record in held}, {row_digest(record) for record in held}
    records, existing, published = [], [], 0
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except ValueError:
            raise ValueError(f"{LEGACY_BOARD} line {number} is not JSON: the file is damaged; nothing was "
                             "migrated") from None
        if not isinstance(line, dict):
            raise ValueError(f"{LEGACY_BOARD} line {number} is not a JSON object; nothing was migrated")
        if line.get("kind") == PUBLISHED:
            published += 1
            continue
        record = legacy_record(line, galleries, number)
        if record["id"] in held_ids or row_digest(record) in held_rows:
            existing.append((number, record["model"]))
        else:
            records.append(record)
    return Migration(repo_id, records, existing, published)


def commit_migration(migration: Migration, token: Optional[str] = None, endpoint: Optional[str] = None) -> str:
    """Commit the records of ``migration`` to its repo in one commit (new files only); return the commit's URL."""
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(endpoint=endpoint, token=token)
    operations = [CommitOperationAdd(record_path(record), record_bytes(record)) for record in migration.records]
    commit = api.create_commit(migration.repo_id, operations, repo_type="dataset",
                               commit_message=f"rococo-eval leaderboard migrate: {len(operations)} records from "
                                              f"{LEGACY_BOARD}")
    return commit.commit_url
