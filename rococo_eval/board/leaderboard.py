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

- only RoCOCO galleries: every row names one of the galleries the board was opened with (``galleries``, their shapes
  from the annotations, :func:`rococo_galleries`) and has its shape; a custom layout, a generated benchmark's
  gallery or a seed mean is no row (the Space passes the rows of its standard layouts only, whose references come
  from the annotations, never from an upload);
- the same results under the same model name are one row (the second submission is told so);
- names, links and notes are stripped of every control, format (bidirectional overrides among them) and line
  separator character (:func:`clean_text`) and bounded (:data:`LIMITS`), links must be ``http(s)://``; the board shows
  them as plain text, never as HTML;
- a session may submit :data:`RATE_LIMIT` times per :data:`RATE_WINDOW_S` seconds (:func:`rate_allows`), and
  everyone together ``hourly_limit`` times an hour (default :data:`HOURLY_LIMIT`, ``$ROCOCO_LEADERBOARD_HOURLY_LIMIT``
  in the Space), counted in the database in the transaction that adds the row; the count is of the submissions to
  this Space, not of the records that came from the repo (another replica's, a maintainer's);
- only evaluations at the metric's default settings (pessimistic ties, no bootstrap), so that rows compare;
- only files that agree: the clean R@K that the rows of one direction give (the clean gallery's ``recall@K``, every
  attacked gallery's ``clean_recall@K``) must be equal, as one model's files give them
  (:func:`rococo_eval.scoring.consistency.disagreements`; a re-ranker's rows, marked ``reranked``, are not compared,
  and give no clean column: their attacked galleries re-rank other candidates than the clean one; the board takes
  them, and the message of the submission says that their check did not run).

Submitted rows are self-reported: the Space scores the files uploaded, and cannot know that they came from the
model named. The board marks them ``submitted``, apart from the ``published`` rows. A row whose record the board's
worker computed (:mod:`rococo_eval.board.worker`: the record holds its ``provenance``) is ``evaluated by the board``
(:data:`EVALUATED`): its numbers come from the named repository's weights at the named commit, and its source names
both, and the record.

A database that cannot be read (not a database, damaged) or stays locked for ``lock_timeout_s`` raises
:class:`BoardUnavailable` naming the file and the problem; nothing is written to it.

With ``$ROCOCO_LEADERBOARD_REPO`` (a dataset repo, ``ORG/NAME``), the board is the repo's records, one immutable file
per submission (:mod:`rococo_eval.board.records`, with each gallery's per-query outcomes), and this database is their
cache (:class:`rococo_eval.board.hub_records.HubRecords` downloads them at start and every few minutes). A submission
goes to this database and to the local outbox in one transaction, and its row is *pending* until its record is in
the repo; the record is committed in the background, so a submission never waits for the Hub. Without a repo, this
database is the board, and a Space without persistent storage loses it when it restarts.

Example:
    >>> import tempfile, pathlib
    >>> galleries = rococo_galleries([5] * 4)  # RoCOCO's shapes for 4 images of 5 captions
    >>> board = Leaderboard(pathlib.Path(tempfile.mkdtemp()) / "board.sqlite3", galleries=galleries)
    >>> from rococo_eval.results import SummaryRow
    >>> rows = [SummaryRow("clean", "image_to_text", {"recall@1": 50.0, "num_queries": 4, "num_gallery": 20}),
    ...         SummaryRow("rand_voca", "image_to_text", {"clean_recall@1": 50.0, "recall@1": 37.5,
    ...                                                   "num_queries": 4, "num_gallery": 40})]
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
import unicodedata
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

from rococo_eval.catalog import ATTACKS, CLEAN, IMAGE_ATTACKS, TEXT_ATTACKS, galleries, gallery_key
from rococo_eval.layout import gallery_shape
from rococo_eval.models import families
from rococo_eval.results import GalleryResult, Report, SummaryRow
from rococo_eval.reporting.report import REFERENCE_RESULTS, VSE_INFINITY
from rococo_eval.scoring.consistency import disagreements, not_compared
from rococo_eval.board.ranking import BANDED, OUTCOMES, RANK, TEXT_MEAN, TEXT_UNNAMED, rank_rows
from rococo_eval.board.records import make_record, outcomes_of, read_record, record_bytes, record_path, summary_rows_of

logger = logging.getLogger(__name__)

DB_ENV = "ROCOCO_LEADERBOARD_DB"
HOURLY_LIMIT_ENV = "ROCOCO_LEADERBOARD_HOURLY_LIMIT"
PRECISIONS = (*families.PRECISIONS, "other")  # the precisions a run takes, and any other
LIMITS = {"model": 100, "link": 300, "note": 500}
RATE_LIMIT, RATE_WINDOW_S = 3, 600
HOURLY_LIMIT = 30  # submissions an hour from everyone together
CLIENT_HOURLY_LIMIT = 5  # submissions an hour from one client (its address), whatever its sessions
PAGE_ROWS = 100  # board rows a page shows (:func:`page_of`): the whole board of 20,000 rows was a 24 MB page load
# characters that show nothing, though Unicode calls them letters or symbols: Hangul fillers, the braille blank
BLANK_LOOKING = frozenset("\u115f\u1160\u3164\uffa0\u2800")
LOCK_TIMEOUT_S = 30
PUBLISHED, SUBMITTED, EVALUATED = "published", "submitted", "evaluated by the board"
# what each kind of row proves, as the board's legend says it
KINDS = {PUBLISHED: "copied from a paper or a log", SUBMITTED: "self-reported, scored from uploaded files",
         EVALUATED: "by its worker, from the named commit of a repository"}
# Unicode categories stripped from names, links and notes: controls (C0, C1), formats (bidirectional overrides and
# isolates, zero-width characters), lone surrogates, and the line and paragraph separators.
STRIPPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
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
# A count of the changes to the board's rows, kept by SQLite itself (so a change by another process counts too):
# :meth:`Leaderboard.rows` ranks the board again only when it moved.
_VERSION_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS board_version (changes INTEGER NOT NULL)",
    "INSERT INTO board_version (changes) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM board_version)",
    *[f"CREATE TRIGGER IF NOT EXISTS board_{event.lower()} AFTER {event} ON submissions "
      "BEGIN UPDATE board_version SET changes = changes + 1; END" for event in ("INSERT", "UPDATE", "DELETE")],
]
# columns added since the first board (a board file of an earlier version gets them when it is opened)
_ADDED_COLUMNS = {"record_id": "TEXT", "state": "TEXT NOT NULL DEFAULT ''", "record": "TEXT",
                  "client": "TEXT NOT NULL DEFAULT ''",
                  # 1: submitted to this Space (the hourly limits count it); 0: a record that came from the repo
                  "submitted_here": "INTEGER NOT NULL DEFAULT 1"}
_RANKED_GALLERIES = sorted({key for keys in BANDED.values() for key in keys})  # whose hits a row keeps in memory
_SQL_VARIABLES = 500  # row ids asked for in one query (SQLite allows 999 variables in older builds)
PENDING, ON_HUB = "pending", "on hub"  # a row's state with a repo: its record in the outbox, or in the repo
# A board row's fields: its rank band, its R@1 (clean, the means, a published unnamed attack's, each attack's), what
# the submission says of itself, and its per-query R@1 hits (OUTCOMES, not shown: they rank it)
COLUMNS = ["model", RANK, "kind", "clean R@1 (i2t)", "clean R@1 (t2i)", TEXT_MEAN, TEXT_UNNAMED,
           "image attacks R@1 (t2i, mean)", *[f"{attack} R@1" for attack in TEXT_ATTACKS + IMAGE_ATTACKS],
           "precision", "link", "note", "source", "submitted", OUTCOMES]


class BoardUnavailable(RuntimeError):
    """The board's database cannot be read or stays locked: the message names the file and the problem."""


class Leaderboard:
    """The board in the SQLite database at ``path`` (created, with the published rows, on first use).

    Every call opens its own connection, so one board serves the Space's worker threads, and a restart of the app
    on the same file finds every row.

    Args:
        path: the SQLite file.
        hub: the :class:`~rococo_eval.board.hub_records.HubRecords` whose outbox each submission's record joins
            (None: no repo, this database is the board).
        galleries: ``{gallery key: (queries, gallery items)}`` of the galleries a row may hold (RoCOCO's,
            :func:`rococo_galleries`); None takes no submission (the board is shown, not added to).
        hourly_limit: submissions an hour from everyone together.
        lock_timeout_s: how long a call waits for another process's lock on the file.

    Raises:
        BoardUnavailable: the file is not a database, is damaged, or stays locked.
    """

    def __init__(self, path, hub=None, *, galleries: Optional[Mapping[str, tuple[int, int]]] = None,
                 hourly_limit: int = HOURLY_LIMIT, lock_timeout_s: float = LOCK_TIMEOUT_S):
        if isinstance(hourly_limit, bool) or not isinstance(hourly_limit, int) or hourly_limit < 0:
            raise ValueError(f"`hourly_limit` must be a whole number >= 0, got {hourly_limit!r}")
        self.path = Path(path)
        self.hub = hub  # a HubRecords, or None
        self.galleries = None if galleries is None else dict(galleries)
        self.hourly_limit = hourly_limit
        self.lock_timeout_s = lock_timeout_s
        self._hit_cache: dict[str, Optional[dict[str, np.ndarray]]] = {}  # :meth:`_hits`, by row id
        self._ranked: tuple[int, list[dict]] = (-1, [])  # the board's version and its ranked rows (:meth:`rows`)
        self.rankings = 0  # how many times :meth:`rows` ranked the board (once per change of its rows)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as connection:
            connection.execute(_SCHEMA)
            present = {column[1] for column in connection.execute("PRAGMA table_info(submissions)")}
            for column, declared in _ADDED_COLUMNS.items():
                if column not in present:
                    connection.execute(f"ALTER TABLE submissions ADD COLUMN {column} {declared}")
            for statement in _VERSION_SCHEMA:
                connection.execute(statement)
            entries = published_entries()
            for entry in entries:
                connection.execute("INSERT OR IGNORE INTO submissions (digest, kind, model, link, precision, note, "
                                   "source, submitted_at, results) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", entry)
            current = [entry[0] for entry in entries]
            connection.execute(f"DELETE FROM submissions WHERE kind = ? AND digest NOT IN "
                               f"({', '.join('?' * len(current))})", [PUBLISHED, *current])

    def submit(self, evaluation: Report | Sequence[SummaryRow], *, model: str, link: str = "",
               precision: str = "fp32", note: str = "", now: Optional[datetime.datetime] = None,
               outcomes: Optional[Mapping[str, Mapping]] = None, client: str = "") -> tuple[bool, str]:
        """Add an evaluation (its :class:`~rococo_eval.results.Report`, or its summary rows as
        :class:`~rococo_eval.results.SummaryRow` rows, whose ``values`` may also hold what the Space adds beside the
        numbers: ``file``, ``reranked``, ``order_overridden``, ``settings``; ``outcomes``, each gallery's per-query
        outcomes, :func:`rococo_eval.board.records.per_query_outcomes`; their R@1 hits rank the row) from ``client``
        (an address, kept as its digest); return whether it was added, and what to tell the user. With a repo, its
        record joins the outbox in the transaction that adds the row. What the board must say of the numbers
        (:func:`validity_warnings_of`) goes into the record and onto the board.

        Raises:
            TypeError: ``evaluation`` is neither a report nor summary rows.
            ValueError: an empty, blank-looking, published or over-long model name, a link that is not
                ``http(s)://``, an unknown precision, an over-long note, a row of a gallery the board does not take or of another shape,
                rows whose clean numbers disagree (naming their files and numbers), results without a single R@1
                (each names the field), or the hourly limit (everyone's or the client's) reached.
            BoardUnavailable: the database cannot be read or stays locked.
        """
        model = clean_text(model, "model", required=True)
        taken = {_name_key(entry[2]): entry[2] for entry in published_entries()}
        if _name_key(model) in taken:
            raise ValueError(f"`model` {model!r} is the name of a published row ({taken[_name_key(model)]}): "
                             "name your own model")
        link = clean_text(link, "link")
        if link and not re.fullmatch(r"https?://[^\s<>\"']+", link):
            raise ValueError(f"`link` must start with http:// or https:// and hold no spaces or quotes, got {link!r}")
        if precision not in PRECISIONS:
            raise ValueError(f"`precision` must be one of {PRECISIONS}, got {precision!r}")
        note = clean_text(note, "note")
        summary_rows = self._gallery_rows(_summary_rows(evaluation))
        _check_agreement(summary_rows)
        undecided = [str(row.key) for row in summary_rows if row.values.get("recall@1_bounds")]
        if undecided:
            raise ValueError(f"the R@1 of {', '.join(undecided)} depends on the order of a re-ranker's -100 block (it "
                             "has bounds): the board takes decided numbers only; re-rank more candidates per query")
        results = recall_at_1(summary_rows)
        if not results:
            raise ValueError("the evaluation has no R@1 to submit: evaluate first")
        settings = {row.values.get("settings") for row in summary_rows} - {None}
        if settings:
            raise ValueError(f"the evaluation used {', '.join(sorted(settings))}: the board takes the metric's default "
                             "settings (pessimistic ties, no bootstrap) only, so that its rows compare")
        digest = _digest(model, results)
        moment = (now or datetime.datetime.now(datetime.timezone.utc)).astimezone(datetime.timezone.utc)
        stamp, hour_ago = (moment.isoformat(timespec="seconds"),
                           (moment - datetime.timedelta(hours=1)).isoformat(timespec="seconds"))
        record = make_record([row.to_dict() for row in summary_rows], outcomes or {}, model=model, link=link,
                             precision=precision, note=note, submitted_at=stamp,
                             validity_warnings=validity_warnings_of(summary_rows))
        read_record(record_bytes(record), self.galleries, "this submission")  # never a record the board would refuse
        client_key = hashlib.sha256(client.encode()).hexdigest() if client else ""
        with self._connect(immediate=True) as connection:  # the counts and the insert in one write transaction
            exists = connection.execute("SELECT 1 FROM submissions WHERE digest = ?", (digest,)).fetchone()
            if exists:
                return False, f"{model} with these results is on the board already"
            recent, = connection.execute("SELECT COUNT(*) FROM submissions WHERE kind = ? AND submitted_here = 1 "
                                         "AND submitted_at > ?", (SUBMITTED, hour_ago)).fetchone()
            if recent >= self.hourly_limit:
                raise ValueError(f"the board took {recent} submissions in the last hour, its limit for everyone "
                                 f"together ({self.hourly_limit}): try again later")
            mine, = connection.execute("SELECT COUNT(*) FROM submissions WHERE client = ? AND client != '' AND "
                                       "submitted_at > ?", (client_key, hour_ago)).fetchone()
            if mine >= CLIENT_HOURLY_LIMIT:
                raise ValueError(f"{mine} submissions came from your address in the last hour, its limit "
                                 f"({CLIENT_HOURLY_LIMIT}): try again later")
            self._insert(connection, record, digest, PENDING if self.hub is not None else "", client_key, here=True)
            if self.hub is not None:
                self.hub.add_to_outbox(record)  # a failure here rolls the row back
        if self.hub is not None:
            self.hub.push()
        pending = " (pending until its record is in the dataset repo)" if self.hub is not None else ""
        return True, f"added {model} to the board{pending}" + _unchecked_note(summary_rows)

    def add_records(self, records: Sequence[dict], pending: bool = False) -> int:
        """Add checked records (:func:`rococo_eval.board.records.read_record`) to the cache, as in the repo or
        ``pending`` (from this Space's outbox: submitted here, so the hourly limits count it); a record already here
        (its id, or the same model with the same results) adds nothing but its state. Return how many rows were
        added."""
        added = 0
        with self._connect(immediate=True) as connection:
            for record in records:
                state = PENDING if pending else ON_HUB
                digest = row_digest(record)
                known = connection.execute("SELECT state FROM submissions WHERE record_id = ? OR digest = ?",
                                           (record["id"], digest)).fetchone()
                if known is None:
                    self._insert(connection, record, digest, state, "", here=pending)  # the outbox: ours
                    added += 1
                elif not pending:
                    connection.execute("UPDATE submissions SET state = ? WHERE record_id = ?", (ON_HUB, record["id"]))
        return added

    def notes(self) -> list[str]:
        """What the page says under the board of where its rows are kept: without a repo, that this database is the
        board and a restart without persistent storage loses it; with one, a repo not reached at the last try, and
        each record left out (:attr:`~rococo_eval.board.hub_records.HubRecords.skipped`, named with its problem).

        Example:
            >>> import tempfile, pathlib
            >>> print(Leaderboard(pathlib.Path(tempfile.mkdtemp()) / "board.sqlite3").notes()[0][:60])
            This board is kept in the Space's database file only (no dat
        """
        if self.hub is None:
            return ["This board is kept in the Space's database file only (no dataset repo): a restart of a Space "
                    "without persistent storage loses it."]
        notes = []
        if self.hub.reachable is False:
            notes.append(f"The dataset repo {self.hub.repo_id} did not answer at the last try: the board shows the "
                         "rows it had, and new rows stay pending until the repo answers.")
        skipped = list(dict.fromkeys(self.hub.skipped))
        if skipped:
            notes.append(f"{len(skipped)} record(s) of the dataset repo {self.hub.repo_id} are left out of the board, "
                         f"damaged: {'; '.join(skipped)}.")
        return notes

    def mark_on_hub(self, record_id: str) -> None:
        """Mark the row of record ``record_id`` as in the repo (no longer pending)."""
        with self._connect() as connection:
            connection.execute("UPDATE submissions SET state = ? WHERE record_id = ?", (ON_HUB, record_id))

    def outcomes(self) -> dict[str, dict[str, dict]]:
        """Each submitted row's per-query outcomes: ``{row id: {gallery key: {outcome: numpy booleans}}}``, the
        row id being the ``id`` of :meth:`rows`, the outcomes those of
        :func:`rococo_eval.board.records.outcomes_of` (``hit``, ``top1_adversarial``, ``clean_hit``; one per query
        in the gallery's query order). Rows without them (published, migrated, or added before records) are left
        out: they cannot be compared query by query."""
        with self._connect() as connection:
            entries = connection.execute("SELECT digest, record FROM submissions WHERE record IS NOT NULL").fetchall()
        found = {digest: outcomes_of(json.loads(record)) for digest, record in entries}
        return {digest: galleries for digest, galleries in found.items() if galleries}

    def _hits(self, connection, digests: Sequence[str]) -> dict[str, Optional[dict[str, np.ndarray]]]:
        """``{row id: {gallery key: R@1 hits}}`` of the galleries that rank a row
        (:data:`~rococo_eval.board.ranking.BANDED`), from its record; None for a row without them (published,
        migrated). A record never changes, so each row's hits are read once and kept."""
        missing = [digest for digest in digests if digest not in self._hit_cache]
        for start in range(0, len(missing), _SQL_VARIABLES):
            chunk = missing[start:start + _SQL_VARIABLES]
            found = connection.execute(f"SELECT digest, record FROM submissions WHERE digest IN "
                                       f"({', '.join('?' * len(chunk))})", chunk).fetchall()
            for digest, record in found:
                outcomes = outcomes_of(json.loads(record)) if record else {}
                self._hit_cache[digest] = {key: outcomes[key]["hit"] for key in _RANKED_GALLERIES
                                           if "hit" in outcomes.get(key, {})} or None
        return {digest: self._hit_cache.get(digest) for digest in digests}

    @staticmethod
    def _insert(connection, record: dict, digest: str, state: str, client_key: str, here: bool) -> None:
        """Add ``record``'s row: submitted to this Space (``here``: the hourly limits count it) or from the repo."""
        results = recall_at_1(summary_rows_of(record))
        connection.execute(
            "INSERT INTO submissions (digest, kind, model, link, precision, note, source, submitted_at, results, "
            "record_id, state, record, client, submitted_here) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (digest, SUBMITTED, record["model"], record["link"], record["precision"], record["note"],
             _source_of(record), record["submitted_at"], json.dumps(results, sort_keys=True),
             record["id"], state, json.dumps(record, sort_keys=True), client_key, int(here)))

    def _gallery_rows(self, summary_rows: Sequence[SummaryRow]) -> list[SummaryRow]:
        """The rows of galleries, each checked against the board's galleries (seed means, which the board makes
        itself, are left out)."""
        if self.galleries is None:
            raise ValueError("this board takes no submissions: it was opened without RoCOCO's galleries to check rows "
                             "against (the Space has no RoCOCO annotations, or serves a generated benchmark)")
        rows = [row for row in summary_rows if not row.is_seed_mean]
        for row in rows:
            key, file = row.key, row.values.get("file")
            name = f"{key} (file {file})" if file else key
            if key not in self.galleries:
                raise ValueError(f"{name} is not a RoCOCO gallery: the board takes the standard galleries only, "
                                 "scored on the annotations' layouts (a custom layout is no row)")
            shape = (row.values.get("num_queries"), row.values.get("num_gallery"))
            if shape != tuple(self.galleries[key]):
                raise ValueError(f"{name} has {shape[0]} queries x {shape[1]} gallery items; RoCOCO's is "
                                 f"{self.galleries[key][0]} x {self.galleries[key][1]}")
        return rows

    def rows(self, search: str = "", kind: str = "all") -> list[dict]:
        """The board: one row per entry (:data:`COLUMNS`, with its ``id``, whether it is ``pending`` and its
        ``warnings``), in the board's order with its rank bands over every row, ranked on the per-query outcomes of
        the records (:func:`rococo_eval.board.ranking.rank_rows`) before any filter; ``search`` keeps the models
        whose name holds it (any case), ``kind`` the published or the submitted rows: a filter or a page never
        changes a band."""
        with self._connect() as connection:
            version, = connection.execute("SELECT changes FROM board_version").fetchone()
            if version != self._ranked[0]:
                self._ranked = (version, self._ranked_rows(connection))
        return [dict(row) for row in self._ranked[1]
                if kind in ("all", row["kind"]) and search.lower() in row["model"].lower()]

    def _ranked_rows(self, connection) -> list[dict]:
        """Every row of the board, ranked (:meth:`rows`, before its filters)."""
        self.rankings += 1
        entries = connection.execute("SELECT digest, kind, model, link, precision, note, source, submitted_at, "
                                     "results, state, json_extract(record, '$.validity_warnings'), "
                                     "json_extract(record, '$.provenance') IS NOT NULL FROM submissions ORDER BY id"
                                     ).fetchall()
        hits = self._hits(connection, [entry[0] for entry in entries])
        rows = []
        for digest, kind_, model, link, precision, note, source, stamp, results, state, warnings, evaluated in entries:
            try:
                results = json.loads(results)
            except ValueError:
                raise BoardUnavailable(f"the leaderboard database {self.path.name} holds a row ({model!r}) whose "
                                       "results cannot be read: it is left as it is") from None
            rows.append({**board_row(results, hits.get(digest), model=model, kind=EVALUATED if evaluated else kind_,
                                     link=link, precision=precision, note=note, source=source, submitted=stamp),
                         "id": digest, "pending": state == PENDING, "warnings": json.loads(warnings or "[]")})
        return rank_rows(rows)

    @contextlib.contextmanager
    def _connect(self, immediate: bool = False):
        """One transaction (``immediate``: holding the write lock from its start): committed, or rolled back on an
        error; SQLite's errors become :class:`BoardUnavailable`, naming the file."""
        try:
            connection = sqlite3.connect(self.path, timeout=self.lock_timeout_s)
        except sqlite3.Error as error:
            raise BoardUnavailable(f"the leaderboard database {self.path.name} cannot be opened: {error}") from None
        try:
            with connection:
                if immediate:
                    connection.execute("BEGIN IMMEDIATE")
                yield connection
        except sqlite3.DatabaseError as error:
            logger.error("the leaderboard database %s: %s", self.path, error)  # the full path for the operator
            name = self.path.name  # the page and the API name the file only
            if isinstance(error, sqlite3.OperationalError) and ("locked" in str(error) or "busy" in str(error)):
                raise BoardUnavailable(f"the leaderboard database {name} stayed locked by another process for "
                                       f"{self.lock_timeout_s:g} s: try again later") from None
            if type(error) is sqlite3.DatabaseError or "malformed" in str(error):  # not a database, damaged
                raise BoardUnavailable(f"the leaderboard database {name} cannot be read: {error}; it is left as it "
                                       "is (move it away or restore it from a copy)") from None
            raise BoardUnavailable(f"the leaderboard database {name} cannot be used: {error}") from None
        finally:
            connection.close()


def _source_of(record: Mapping) -> str:
    """A row's source: for a record of the board's worker, the model's repository at its commit and the record's
    path (:func:`~rococo_eval.board.records.record_path`); else its link, or that it was submitted in the Space.

    Example:
        >>> _source_of({"link": "", "provenance": {"model_repo": "org/m", "model_commit": "a" * 40},
        ...             "submitted_at": "2026-12-05", "id": "0" * 32})  # doctest: +ELLIPSIS
        'model https://huggingface.co/org/m/tree/aaaa...; record submissions/2026/000...json'
    """
    provenance = record.get("provenance")
    if provenance:
        results = provenance.get("results_repo")
        where = f"https://huggingface.co/datasets/{results}/blob/main/" if results else ""
        return (f"model https://huggingface.co/{provenance['model_repo']}/tree/{provenance['model_commit']}; "
                f"record {where}{record_path(record)}")
    return record["link"] or "submitted in the Space"


def _summary_rows(evaluation: Report | Sequence[SummaryRow]) -> list[SummaryRow]:
    """The summary rows of a submitted ``evaluation``: a report's, or the rows given.

    Raises:
        TypeError: ``evaluation`` is neither a :class:`~rococo_eval.results.Report` nor :class:`SummaryRow` rows.
    """
    rows = evaluation.summary if isinstance(evaluation, Report) else list(evaluation)
    strays = [type(row).__name__ for row in rows if not isinstance(row, SummaryRow)]
    if strays:
        raise TypeError(f"`evaluation` must be a Report or a sequence of SummaryRow, got rows of type {strays[0]} "
                        "(SummaryRow.from_dict reads a row kept as a dict)")
    return rows


def _check_agreement(rows: Sequence[SummaryRow]) -> None:
    """Refuse rows whose clean numbers disagree (files of different models, or saved in different dtypes)."""
    keyed = {row.key: row for row in rows}
    found = disagreements({key: GalleryResult(dict(row.values)) for key, row in keyed.items()},  # the rows' numbers
                          {key: str(row.values.get("file") or "") for key, row in keyed.items()},
                          reranked={key for key, row in keyed.items() if row.values.get("reranked")})
    if found:
        raise ValueError("the files of this evaluation disagree, so they are not one model's files saved alike: "
                         + " | ".join(disagreement.message for disagreement in found)
                         + ". The board takes one model's files; evaluate them again together")


def _unchecked_note(rows: Sequence[SummaryRow]) -> str:
    """What an added submission's message says of its re-ranker's rows (``reranked``) that other rows of their
    direction were not compared with (:func:`rococo_eval.scoring.consistency.not_compared`, the words of the command
    and of the evaluation's message): the board takes them, as the check cannot apply to them, and says that it did
    not run.

    Example:
        >>> rows = [SummaryRow("clean", "text_to_image", {"reranked": True}),
        ...         SummaryRow("mix_seed1", "text_to_image", {"reranked": True, "file": "blip_mix.npz"})]
        >>> _unchecked_note(rows)  # doctest: +ELLIPSIS
        "; the clean numbers of blip_mix.npz, clean/text_to_image were not checked against the other files of ..."
        >>> _unchecked_note(rows[:1])
        ''
    """
    keyed = {row.key: row for row in rows}
    unchecked = not_compared({key: str(row.values.get("file") or key) for key, row in keyed.items()},
                             reranked={key for key, row in keyed.items() if row.values.get("reranked")})
    return f"; {unchecked} (the board's clean column comes from the clean gallery alone)" if unchecked else ""


def validity_warnings_of(rows: Sequence[SummaryRow | Mapping]) -> list[str]:
    """What the board says of the numbers of ``rows`` (:class:`~rococo_eval.results.SummaryRow` s, or their dicts):
    a gallery scored in an order its scores contradict (the Space's or the command's trust-order override,
    ``order_overridden``), and a re-ranker's gallery (``reranked``: a constant fill block), whose clean numbers the
    agreement check could not compare.

    Example:
        >>> validity_warnings_of([{"attack": "danger", "direction": "image_to_text", "order_overridden": True}])
        ['danger/image_to_text: scored in the order stated, which its scores contradict (trust-order override)']
    """
    warnings = []
    for row in rows:
        key = gallery_key(str(row.get("attack", "")), str(row.get("direction", "")))
        if row.get("order_overridden"):
            warnings.append(f"{key}: scored in the order stated, which its scores contradict (trust-order override)")
        if row.get("reranked"):
            warnings.append(f"{key}: a re-ranker's scores (a constant fill block), so its clean R@1 was not checked "
                            "against the clean gallery's")
    return warnings


def rococo_galleries(captions_per_image: Sequence[int], attacks: Sequence[str] = ATTACKS) -> dict[str, tuple[int, int]]:
    """``{gallery key: (queries, gallery items)}`` of RoCOCO's galleries, for images of ``captions_per_image``.

    Example:
        >>> rococo_galleries([5, 5], ["rand_voca"])
        {'clean/image_to_text': (2, 10), 'clean/text_to_image': (10, 2), 'rand_voca/image_to_text': (2, 20)}
    """
    return {gallery_key(attack, direction): gallery_shape(attack, direction, captions_per_image)
            for attack, direction in galleries(attacks)}


def recall_at_1(summary_rows: Sequence[SummaryRow | Mapping]) -> dict[str, float]:
    """``{gallery key: R@1}`` of the summary rows (seed means under their method, ``mix/text_to_image``), and
    ``clean/<direction>`` from an attacked row's clean R@1 when no clean row is given (and that R@1 has no bounds:
    a compact file's order of ties decides none of the board's numbers; nor is the row a re-ranker's, whose clean
    part is ranked over other candidates than the clean gallery).

    Example:
        >>> recall_at_1([{"attack": "danger", "direction": "image_to_text", "clean_recall@1": 50.0, "recall@1": 40}])
        {'danger/image_to_text': 40.0, 'clean/image_to_text': 50.0}
    """
    rows, results = [SummaryRow.from_dict(row) for row in summary_rows], {}
    for row in rows:
        value = row.values.get("recall@1")
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            results[str(row.key)] = round(float(value), 4)
    for row in rows:
        clean, value = gallery_key(CLEAN, row.direction), row.values.get("clean_recall@1")
        if row.values.get("clean_recall@1_bounds") or row.values.get("reranked"):
            continue
        if value is not None and not (isinstance(value, float) and math.isnan(value)) and clean not in results:
            results[clean] = round(float(value), 4)
    return results


def board_row(results: dict, outcomes: Optional[Mapping] = None, **fields) -> dict:
    """One board row of ``results`` (``{gallery key: R@1}``): the clean R@1, each attack's and the means, and the
    per-query R@1 hits by gallery key (``outcomes``, :data:`~rococo_eval.board.ranking.OUTCOMES`; None: not kept)
    that rank it (:func:`~rococo_eval.board.ranking.rank_rows` adds its ``rank``).

    A mean is over every text attack (or every image attack, all seeds) or none: a mean over some of them would
    sort beside full means as if it were one. A published text-attack number whose attack its source does not name
    (``text/image_to_text``) is no mean: it has its own column (:data:`~rococo_eval.board.ranking.TEXT_UNNAMED`)."""
    text = [results[f"{attack}/image_to_text"] for attack in TEXT_ATTACKS if f"{attack}/image_to_text" in results]
    image = [results[f"{attack}/text_to_image"] for attack in IMAGE_ATTACKS if f"{attack}/text_to_image" in results]
    text, image = (text if len(text) == len(TEXT_ATTACKS) else []), (image if len(image) == len(IMAGE_ATTACKS) else [])
    row = {"model": fields["model"], RANK: None, "kind": fields["kind"],
           "clean R@1 (i2t)": results.get("clean/image_to_text"), "clean R@1 (t2i)": results.get("clean/text_to_image"),
           TEXT_MEAN: _mean(text), TEXT_UNNAMED: results.get("text/image_to_text"),
           "image attacks R@1 (t2i, mean)": _mean(image)}
    for attack in TEXT_ATTACKS + IMAGE_ATTACKS:
        direction = "image_to_text" if attack in TEXT_ATTACKS else "text_to_image"
        row[f"{attack} R@1"] = results.get(f"{attack}/{direction}")
    row.update({name: fields[name] for name in ("precision", "link", "note", "source", "submitted")})
    row[OUTCOMES] = outcomes
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


def page_of(rows: Sequence, page=1, page_rows: int = PAGE_ROWS) -> tuple[list, int, int]:
    """The rows of page ``page`` (counted from 1; None: the first) of ``rows``, ``page_rows`` to a page; the page
    given (the last one for a page past it) and how many pages there are (at least 1).

    Raises:
        ValueError: ``page`` is not a whole number >= 1.

    Example:
        >>> shown, page, pages = page_of(list(range(250)), 3)
        >>> shown[:2], page, pages, page_of(list(range(250)), 9)[1]
        ([200, 201], 3, 3, 3)
    """
    page = 1 if page is None else page
    if isinstance(page, bool) or not isinstance(page, (int, float)) or page != int(page) or page < 1:
        raise ValueError(f"`page` must be a whole number >= 1, got {page!r}")
    pages = max(1, math.ceil(len(rows) / page_rows))
    page = min(int(page), pages)
    return list(rows[(page - 1) * page_rows:page * page_rows]), page, pages


def rate_allows(times: Sequence[float], now: float, limit: int = RATE_LIMIT, window: float = RATE_WINDOW_S) -> bool:
    """Whether a session that submitted at ``times`` may submit at ``now``: fewer than ``limit`` in ``window`` s.

    Example:
        >>> rate_allows([0, 10, 20], now=30), rate_allows([0, 10, 20], now=700)
        (False, True)
    """
    return sum(1 for time in times if now - time < window) < limit


def clean_text(value, field: str, required: bool = False) -> str:
    """``value`` stripped of the characters of :data:`STRIPPED_CATEGORIES` (controls, formats such as a
    right-to-left override, separators of lines) and of outer spaces, at most :data:`LIMITS` ``[field]`` characters.

    Example:
        >>> clean_text("  my\\x00model\\n ", "model"), clean_text("\\u202eexe.ledom\\x85", "model")
        ('mymodel', 'exe.ledom')
    """
    text = "".join(char for char in str(value or "") if unicodedata.category(char) not in STRIPPED_CATEGORIES).strip()
    if required and not text:
        raise ValueError(f"`{field}` is empty: give the model's name")
    if required and all(char.isspace() or char in BLANK_LOOKING for char in text):
        raise ValueError(f"`{field}` {text!r} looks blank (it holds only characters that show nothing, such as "
                         "U+3164 or U+2800): give the model's name")
    if len(text) > LIMITS[field]:
        raise ValueError(f"`{field}` has {len(text)} characters; at most {LIMITS[field]}")
    return text


def _name_key(name: str) -> str:
    """A name as a reader tells it apart: compatibility forms folded (NFKC), any case, spaces and blank-looking
    characters left out."""
    return "".join(char for char in unicodedata.normalize("NFKC", name).casefold()
                   if not (char.isspace() or char in BLANK_LOOKING))


def _published(model: str, results: dict, source: str, note: str) -> tuple:
    return (_digest(model, results), PUBLISHED, model, "", "not stated", note, source, "published",
            json.dumps(results, sort_keys=True))


def row_digest(record: Mapping) -> str:
    """The board's key of a checked record's row: its model name and R@1 numbers (:func:`recall_at_1`), so that
    the same model with the same results is one row, whichever record or submission brought it."""
    return _digest(record["model"], recall_at_1(summary_rows_of(record)))


def _digest(model: str, results: dict) -> str:
    return hashlib.sha256(json.dumps([model, results], sort_keys=True).encode()).hexdigest()


def _mean(values) -> Optional[float]:
    return round(sum(values) / len(values), 4) if values else None

