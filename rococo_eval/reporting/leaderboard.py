"""RoCOCO's leaderboard: submitted evaluations and the published numbers, in a SQLite database.

The Space keeps its board at ``$ROCOCO_LEADERBOARD_DB`` (default ``leaderboard.sqlite3`` in its output folder).
Each submission is one row of the ``submissions`` table: the model name, a link, the precision, a note, when it
came, and its results (the report's summary rows, as JSON). The board starts with the published rows, marked as
such, each under its source:

- the official CLIP ViT-B/32 log (:data:`rococo_eval.reporting.report.REFERENCE_RESULTS`);
- the paper's abstract in both versions: v1 gives BLIP 81.9 -> 64.5 and VSE infinity 66.1 -> 37.5, v5 gives
  81.9 -> 48.4 and 66.1 -> 37.6 (image-to-text R@1, clean -> attacked by text attacks it does not name); the VSE
  infinity rows name the variant, WSL grid + BERT (:data:`~rococo_eval.reporting.report.VSE_INFINITY`), which the
  abstract does not: it is read from the clean 66.1, beside the VSE infinity paper's COCO 5K image-to-text R@1 of that
  model, 66.4, and each row's note says so.

The published rows are the code's: a board opened by a version whose published rows changed (a renamed row, a
corrected number) drops the published rows it no longer has. Submitted rows are never touched.

What a submission may be:

- the same results under the same model name are one row (the second submission is told so);
- names, links and notes are stripped of control characters and bounded (:data:`LIMITS`), links must be
  ``http(s)://``; the board shows them as plain text, never as HTML;
- a session may submit :data:`RATE_LIMIT` times per :data:`RATE_WINDOW_S` seconds (:func:`rate_allows`);
- only evaluations at the metric's default settings (pessimistic ties, no bootstrap), so that rows compare.

Submitted rows are self-reported: the Space scores the files uploaded, and cannot know that they came from the
model named. The board marks them ``submitted``, apart from the ``published`` rows.

With ``$ROCOCO_LEADERBOARD_REPO`` (a dataset repo, ``ORG/NAME``), every added submission also copies the whole
board, as ``leaderboard.jsonl``, to that repo through huggingface_hub (:class:`HubCopy`, with ``$HF_TOKEN``). The
database stays the board: a copy that fails is logged and the submission kept.

Example:
    >>> import tempfile, pathlib
    >>> board = Leaderboard(pathlib.Path(tempfile.mkdtemp()) / "board.sqlite3")
    >>> rows = [{"attack": "clean", "direction": "image_to_text", "recall@1": 50.0},
    ...         {"attack": "rand_voca", "direction": "image_to_text", "clean_recall@1": 50.0, "recall@1": 37.5}]
    >>> board.submit(rows, model="my-model", link="https://example.org/my-model", precision="fp32")
    (True, 'added my-model to the board')
    >>> board.submit(rows, model="my-model", link="", precision="fp16")[0]
    False
    >>> [row["model"] for row in board.rows(search="MY")], len(board.rows()), len(board.rows(kind="published"))
    (['my-model'], 6, 5)
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import logging
import math
import re
import sqlite3
from pathlib import Path
from typing import Optional, Sequence

from rococo_eval.catalog import CLEAN, IMAGE_ATTACKS, TEXT_ATTACKS, gallery_key
from rococo_eval.reporting.report import REFERENCE_RESULTS, VSE_INFINITY

logger = logging.getLogger(__name__)

DB_ENV = "ROCOCO_LEADERBOARD_DB"
REPO_ENV = "ROCOCO_LEADERBOARD_REPO"
PRECISIONS = ("fp32", "fp16", "bf16", "other")
LIMITS = {"model": 100, "link": 300, "note": 500}
RATE_LIMIT, RATE_WINDOW_S = 3, 600
PUBLISHED, SUBMITTED = "published", "submitted"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PAPER = "Park et al., RoCOCO, arXiv:2304.10727{version}, abstract"
_ABSTRACT = {"v1": {"BLIP": (81.9, 64.5), VSE_INFINITY: (66.1, 37.5)},
             "v5": {"BLIP": (81.9, 48.4), VSE_INFINITY: (66.1, 37.6)}}
_SCHEMA = """
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    digest TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (kind IN ('published', 'submitted')),
    model TEXT NOT NULL,
    link TEXT NOT NULL,
    precision TEXT NOT NULL,
    note TEXT NOT NULL,
    source TEXT NOT NULL,
    submitted_at TEXT NOT NULL,
    results TEXT NOT NULL
)"""
COLUMNS = ["model", "kind", "clean R@1 (i2t)", "clean R@1 (t2i)", "text attacks R@1 (i2t, mean)",
           "image attacks R@1 (t2i, mean)", *[f"{attack} R@1" for attack in TEXT_ATTACKS + IMAGE_ATTACKS],
           "precision", "link", "note", "source", "submitted"]


class Leaderboard:
    """The board in the SQLite database at ``path`` (created, with the published rows, on first use).

    Every call opens its own connection, so one board serves the Space's worker threads, and a restart of the app
    on the same file finds every row.
    """

    def __init__(self, path, copy=None):
        self.path = Path(path)
        self.copy = copy  # a HubCopy, or None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as connection:
            connection.execute(_SCHEMA)
            entries = published_entries()
            for entry in entries:
                connection.execute("INSERT OR IGNORE INTO submissions (digest, kind, model, link, precision, note, "
                                   "source, submitted_at, results) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", entry)
            current = [entry[0] for entry in entries]
            connection.execute(f"DELETE FROM submissions WHERE kind = ? AND digest NOT IN "
                               f"({', '.join('?' * len(current))})", [PUBLISHED, *current])

    def submit(self, summary_rows: Sequence[dict], *, model: str, link: str = "", precision: str = "fp32",
               note: str = "", now: Optional[datetime.datetime] = None) -> tuple[bool, str]:
        """Add an evaluation (its report's summary rows); return whether it was added, and what to tell the user.

        Raises:
            ValueError: an empty or over-long model name, a link that is not ``http(s)://``, an unknown
                precision, an over-long note, or results without a single R@1 (each names the field).
        """
        model = clean_text(model, "model", required=True)
        link = clean_text(link, "link")
        if link and not re.fullmatch(r"https?://[^\s<>\"']+", link):
            raise ValueError(f"`link` must start with http:// or https:// and hold no spaces or quotes, got {link!r}")
        if precision not in PRECISIONS:
            raise ValueError(f"`precision` must be one of {PRECISIONS}, got {precision!r}")
        note = clean_text(note, "note")
        undecided = [f"{row['attack']}/{row['direction']}" for row in summary_rows if row.get("recall@1_bounds")]
        if undecided:
            raise ValueError(f"the R@1 of {', '.join(undecided)} depends on the order of a re-ranker's -100 block (it "
                             "has bounds): the board takes decided numbers only; re-rank more candidates per query")
        results = recall_at_1(summary_rows)
        if not results:
            raise ValueError("the evaluation has no R@1 to submit: evaluate first")
        settings = {row.get("settings") for row in summary_rows} - {None}
        if settings:
            raise ValueError(f"the evaluation used {', '.join(sorted(settings))}: the board takes the metric's default "
                             "settings (pessimistic ties, no bootstrap) only, so that its rows compare")
        digest = _digest(model, results)
        stamp = (now or datetime.datetime.now(datetime.timezone.utc)).isoformat(timespec="seconds")
        with self._connect() as connection:
            added = connection.execute(
                "INSERT OR IGNORE INTO submissions (digest, kind, model, link, precision, note, source, submitted_at, "
                "results) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (digest, SUBMITTED, model, link, precision, note, link or "submitted in the Space", stamp,
                 json.dumps(results, sort_keys=True))).rowcount == 1
        if not added:
            return False, f"{model} with these results is on the board already"
        if self.copy is not None:
            self.copy.push(self)
        return True, f"added {model} to the board"

    def rows(self, search: str = "", kind: str = "all") -> list[dict]:
        """The board: one row per entry (:data:`COLUMNS`), best attacked text R@1 first; ``search`` keeps the models
        whose name holds it (any case), ``kind`` the published or the submitted rows."""
        with self._connect() as connection:
            entries = connection.execute("SELECT kind, model, link, precision, note, source, submitted_at, results "
                                         "FROM submissions ORDER BY id").fetchall()
        rows = []
        for kind_, model, link, precision, note, source, stamp, results in entries:
            if kind not in ("all", kind_) or search.lower() not in model.lower():
                continue
            rows.append(board_row(json.loads(results), model=model, kind=kind_, link=link, precision=precision,
                                  note=note, source=source, submitted=stamp))
        return sorted(rows, key=lambda row: -(_number(row["text attacks R@1 (i2t, mean)"])))

    def export_jsonl(self) -> bytes:
        """Every entry as one JSON line (its stored fields, results as an object), in the order they came."""
        with self._connect() as connection:
            connection.row_factory = sqlite3.Row
            entries = connection.execute("SELECT kind, model, link, precision, note, source, submitted_at, results "
                                         "FROM submissions ORDER BY id").fetchall()
        lines = [json.dumps({**dict(entry), "results": json.loads(entry["results"])}, sort_keys=True)
                 for entry in entries]
        return ("\n".join(lines) + "\n").encode("utf-8")

    @contextlib.contextmanager
    def _connect(self):
        connection = sqlite3.connect(self.path, timeout=30)
        try:
            with connection:  # one transaction: committed, or rolled back on an error
                yield connection
        finally:
            connection.close()


class HubCopy:
    """A copy of the board in a Hugging Face dataset repo: :meth:`push` uploads ``leaderboard.jsonl`` with
    ``huggingface_hub.HfApi.upload_file`` (``endpoint`` for a Hub other than huggingface.co)."""

    def __init__(self, repo_id: str, token: Optional[str] = None, endpoint: Optional[str] = None,
                 path_in_repo: str = "leaderboard.jsonl"):
        if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo_id or ""):
            raise ValueError(f"`repo_id` must be ORG/NAME, got {repo_id!r} (${REPO_ENV})")
        self.repo_id, self.token, self.endpoint, self.path_in_repo = repo_id, token, endpoint, path_in_repo

    def push(self, board: Leaderboard) -> bool:
        """Upload the board; return whether it went (a failure is logged, never raised)."""
        from huggingface_hub import HfApi

        try:
            HfApi(endpoint=self.endpoint, token=self.token).upload_file(
                path_or_fileobj=board.export_jsonl(), path_in_repo=self.path_in_repo, repo_id=self.repo_id,
                repo_type="dataset", commit_message="rococo-eval leaderboard: a new submission")
        except Exception as error:  # the Hub's errors, a network's: the database keeps the submission
            logger.warning("the leaderboard's copy to the dataset repo %s failed: %s", self.repo_id, error)
            return False
        return True


def recall_at_1(summary_rows: Sequence[dict]) -> dict[str, float]:
    """``{gallery key: R@1}`` of the summary rows (seed means under their method, ``mix/text_to_image``), and
    ``clean/<direction>`` from an attacked row's clean R@1 when no clean row is given (and that R@1 has no bounds:
    a compact file's order of ties decides none of the board's numbers).

    Example:
        >>> recall_at_1([{"attack": "danger", "direction": "image_to_text", "clean_recall@1": 50.0, "recall@1": 40}])
        {'danger/image_to_text': 40.0, 'clean/image_to_text': 50.0}
    """
    results = {}
    for row in summary_rows:
        value = row.get("recall@1")
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            results[gallery_key(row["attack"], row["direction"])] = round(float(value), 4)
    for row in summary_rows:
        clean, value = gallery_key(CLEAN, row["direction"]), row.get("clean_recall@1")
        if row.get("clean_recall@1_bounds"):
            continue
        if value is not None and not (isinstance(value, float) and math.isnan(value)) and clean not in results:
            results[clean] = round(float(value), 4)
    return results


def board_row(results: dict, **fields) -> dict:
    """One board row of ``results`` (``{gallery key: R@1}``): the clean R@1, each attack's and the means.

    A mean is over every text attack (or every image attack, all seeds) or none: a mean over some of them would
    sort beside full means as if it were one."""
    text = [results[f"{attack}/image_to_text"] for attack in TEXT_ATTACKS if f"{attack}/image_to_text" in results]
    image = [results[f"{attack}/text_to_image"] for attack in IMAGE_ATTACKS if f"{attack}/text_to_image" in results]
    text, image = (text if len(text) == len(TEXT_ATTACKS) else []), (image if len(image) == len(IMAGE_ATTACKS) else [])
    row = {"model": fields["model"], "kind": fields["kind"],
           "clean R@1 (i2t)": results.get("clean/image_to_text"), "clean R@1 (t2i)": results.get("clean/text_to_image"),
           "text attacks R@1 (i2t, mean)": results.get("text/image_to_text", _mean(text)),
           "image attacks R@1 (t2i, mean)": _mean(image)}
    for attack in TEXT_ATTACKS + IMAGE_ATTACKS:
        direction = "image_to_text" if attack in TEXT_ATTACKS else "text_to_image"
        row[f"{attack} R@1"] = results.get(f"{attack}/{direction}")
    row.update({name: fields[name] for name in ("precision", "link", "note", "source", "submitted")})
    return row


def published_entries() -> list[tuple]:
    """The published rows, as ``submissions`` records: the official CLIP log and both abstract versions."""
    clip = {}
    for reference in REFERENCE_RESULTS:
        if reference["model"] != "CLIP ViT-B/32":
            continue
        attack = reference["attack"]
        key = ("clean" if attack == CLEAN else "mix_seed1" if attack == "mix_seed1" else None)
        if key is not None:
            clip[gallery_key(key, reference["direction"])] = reference["recall@1"]
        elif attack.endswith("(probably rand_voca)"):
            clip["text/image_to_text"] = reference["recall@1"]  # the log does not name it: not a rand_voca cell
    log_source = next(reference["source"] for reference in REFERENCE_RESULTS if reference["model"] == "CLIP ViT-B/32")
    entries = [_published("CLIP ViT-B/32", clip, log_source, "official log; its text attack is not named")]
    for version, models in _ABSTRACT.items():
        for model, (clean, attacked) in models.items():
            results = {"clean/image_to_text": clean, "text/image_to_text": attacked}
            note = "the abstract's image-to-text R@1 under text attacks it does not name"
            if model == VSE_INFINITY:
                note += (f"; the variant is read from the clean {clean}, beside the VSE infinity paper's 66.4 for WSL "
                         "grid + BERT on COCO 5K")
            entries.append(_published(f"{model} (paper {version})", results, _PAPER.format(version=version), note))
    return entries


def rate_allows(times: Sequence[float], now: float, limit: int = RATE_LIMIT, window: float = RATE_WINDOW_S) -> bool:
    """Whether a session that submitted at ``times`` may submit at ``now``: fewer than ``limit`` in ``window`` s.

    Example:
        >>> rate_allows([0, 10, 20], now=30), rate_allows([0, 10, 20], now=700)
        (False, True)
    """
    return sum(1 for time in times if now - time < window) < limit


def clean_text(value, field: str, required: bool = False) -> str:
    """``value`` stripped of control characters and outer spaces, at most :data:`LIMITS` ``[field]`` characters.

    Example:
        >>> clean_text("  my\\x00model\\n ", "model")
        'mymodel'
    """
    text = _CONTROL.sub("", str(value or "")).strip()
    if required and not text:
        raise ValueError(f"`{field}` is empty: give the model's name")
    if len(text) > LIMITS[field]:
        raise ValueError(f"`{field}` has {len(text)} characters; at most {LIMITS[field]}")
    return text


def _published(model: str, results: dict, source: str, note: str) -> tuple:
    return (_digest(model, results), PUBLISHED, model, "", "not stated", note, source, "published",
            json.dumps(results, sort_keys=True))


def _digest(model: str, results: dict) -> str:
    return hashlib.sha256(json.dumps([model, results], sort_keys=True).encode()).hexdigest()


def _mean(values) -> Optional[float]:
    return round(sum(values) / len(values), 4) if values else None


def _number(value) -> float:
    return -1.0 if value is None else float(value)
