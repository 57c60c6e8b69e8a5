"""The leaderboard's records in a Hugging Face dataset repo: the board that outlives the Space's disk.

With ``$ROCOCO_LEADERBOARD_REPO`` the Space keeps every accepted submission as one record file in that repo
(:mod:`rococo_eval.board.records`), and its SQLite file is a cache of those records. :class:`HubRecords` does the
transfers, each in a child process (:mod:`rococo_eval.board.hub_transfer`) killed after ``timeout_s``:

- **start** (:meth:`HubRecords.start`): the records the local mirror (``folder/records``) lacks are downloaded, every
  record is checked (:func:`rococo_eval.board.records.read_record`) and added to the cache; a record that fails is
  left out, logged and named in :attr:`HubRecords.skipped` (the page shows it under the board). A Hub that cannot be
  reached leaves the cache as it is;
- **submit**: the board writes the record to the outbox (``folder/outbox``, :meth:`HubRecords.add_to_outbox`) in the
  transaction that adds the row, which stays *pending* until its record is in the repo; a background thread commits
  each outbox record (a commit per record, a new file, never an overwrite), and one that fails stays in the outbox,
  tried again after ``retry_s``, doubling up to ``max_retry_s``, and at the next start;
- **refresh**: every ``refresh_s`` seconds (``$ROCOCO_LEADERBOARD_REFRESH_S``, default :data:`REFRESH_S`), records
  added elsewhere (another replica, a maintainer) are downloaded and added; a refresh that fails keeps the board.

Example:
    >>> import pathlib, tempfile
    >>> hub = HubRecords("org/board", pathlib.Path(tempfile.mkdtemp()))
    >>> hub.pending(), hub.skipped
    ([], [])
"""

from __future__ import annotations

import logging
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from rococo_eval.io.atomic import write_atomic
from rococo_eval.board.records import RecordError, read_record, record_bytes, record_path

logger = logging.getLogger(__name__)

REPO_ENV = "ROCOCO_LEADERBOARD_REPO"
REFRESH_ENV = "ROCOCO_LEADERBOARD_REFRESH_S"
REFRESH_S = 600


class HubRecords:
    """The records of the dataset repo ``repo_id`` (``endpoint`` for a Hub other than huggingface.co, ``token`` to
    write), mirrored under ``folder`` with the outbox of records not yet committed.

    Raises:
        ValueError: ``repo_id`` is not ``ORG/NAME``, or a number of seconds is not > 0.
    """

    def __init__(self, repo_id: str, folder, token: Optional[str] = None, endpoint: Optional[str] = None, *,
                 refresh_s: float = REFRESH_S, timeout_s: float = 120, retry_s: float = 5, max_retry_s: float = 600):
        if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo_id or ""):
            raise ValueError(f"`repo_id` must be ORG/NAME, got {repo_id!r} (${REPO_ENV})")
        for name, value in (("refresh_s", refresh_s), ("timeout_s", timeout_s), ("retry_s", retry_s),
                            ("max_retry_s", max_retry_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"`{name}` must be a number of seconds > 0, got {value!r}")
        self.repo_id, self.token, self.endpoint = repo_id, token, endpoint
        self.folder = Path(folder)
        self.outbox, self.mirror = self.folder / "outbox", self.folder / "records"
        self.refresh_s, self.timeout_s, self.retry_s, self.max_retry_s = refresh_s, timeout_s, retry_s, max_retry_s
        self.skipped: list[str] = []  # the records left out, each named with its problem
        self.reachable: Optional[bool] = None  # whether the last transfer reached the Hub (None: none tried)
        self._board = None
        self._state = threading.Condition()
        self._wake = self._closed = False
        self._thread: Optional[threading.Thread] = None

    def add_to_outbox(self, record: dict) -> None:
        """Keep ``record`` in the outbox (written whole or not at all) until it is committed."""
        write_atomic(self.outbox / f"{record['id']}.json", lambda handle: handle.write(record_bytes(record)))

    def pending(self) -> list[str]:
        """The ids of the records in the outbox, not yet in the repo."""
        return sorted(path.stem for path in self.outbox.glob("*.json"))

    def start(self, board) -> None:
        """Fill ``board`` (a :class:`~rococo_eval.board.leaderboard.Leaderboard`) from the repo's records, then
        start the thread that commits the outbox and refreshes (never raises for the Hub: a Hub that cannot be
        reached leaves the board as its cache is)."""
        self._board = board
        waiting = []
        for file in sorted(self.outbox.glob("*.json")):  # the rows of a disk whose outbox survived its database
            try:
                waiting.append(read_record(file.read_bytes(), board.galleries, f"outbox/{file.name}"))
            except RecordError as error:
                logger.warning("a leaderboard record of the outbox is left out: %s", error)
                self.skipped.append(str(error))
        board.add_records(waiting, pending=True)
        self.refresh(every_record=True)
        self._thread = threading.Thread(target=self._work, name=f"hub-records {self.repo_id}", daemon=True)
        self._thread.start()

    def push(self) -> None:
        """Ask the thread to commit the outbox now (never waits)."""
        with self._state:
            self._wake = True
            self._state.notify_all()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until the outbox is empty; return whether it was within ``timeout`` seconds."""
        deadline = time.monotonic() + (math.inf if timeout is None else timeout)
        while self.pending():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def close(self) -> None:
        """Stop the thread after its current transfer."""
        with self._state:
            self._closed = True
            self._state.notify_all()

    def refresh(self, every_record: bool = False) -> bool:
        """Download the records the mirror lacks and add them (``every_record``: every record of the mirror) to the
        board; return whether the Hub answered. A failure is logged, and the board kept as it is."""
        answered, lines = self._transfer("download", [str(self.mirror)])
        if any(line == "legacy leaderboard.jsonl" for line in lines):
            logger.warning("the dataset repo %s holds the old board (leaderboard.jsonl) and no record: its rows are not "
                           "on this board until `rococo-eval leaderboard migrate %s` turns them into records",
                           self.repo_id, self.repo_id)
        got = [self.mirror / line[4:] for line in lines if line.startswith("got ")]
        files = sorted(self.mirror.glob("submissions/*/*.json")) if every_record else got
        records = []
        for file in files:
            name = file.relative_to(self.mirror).as_posix()
            try:
                records.append(read_record(file.read_bytes(), self._board.galleries, name))
            except RecordError as error:
                logger.warning("a leaderboard record is left out: %s", error)
                self.skipped.append(str(error))
        if records:
            self._board.add_records(records)
        landed = {record["id"] for record in records}
        for record_id in landed & set(self.pending()):  # committed by a run that ended before it heard so
            (self.outbox / f"{record_id}.json").unlink(missing_ok=True)
        return answered

    def commit_outbox(self) -> bool:
        """Commit every record of the outbox (each in its own commit); return whether all landed."""
        files = sorted(self.outbox.glob("*.json"))
        if not files:
            return True
        done, lines = self._transfer("commit", [str(file) for file in files])
        for line in lines:
            if line.startswith("landed "):
                file = Path(line[len("landed "):])
                data = file.read_bytes()
                record = read_record(data, None, file.name)
                target = self.mirror / record_path(record)
                target.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(target, lambda handle: handle.write(data))
                if self._board is not None:  # a worker's outbox has no board
                    self._board.mark_on_hub(record["id"])
                file.unlink()
        return done

    def _transfer(self, action: str, paths: list[str]) -> tuple[bool, list[str]]:
        """Run the child process; return whether it did everything and the lines it printed."""
        env = {**os.environ, **({"HF_TOKEN": self.token} if self.token else {}),
               "ROCOCO_HUB_DEADLINE_S": str(math.ceil(self.timeout_s) + 5)}  # it ends itself too
        command = [sys.executable, "-m", "rococo_eval.board.hub_transfer", action, self.repo_id,
                   self.endpoint or "-", *paths]
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired as expired:
            logger.warning("the leaderboard's %s with the dataset repo %s failed: no answer in %g s", action,
                           self.repo_id, self.timeout_s)
            self.reachable = False
            output = expired.stdout or b""
            return False, (output.decode() if isinstance(output, bytes) else output).splitlines()
        self.reachable = done.returncode == 0
        if done.returncode != 0:
            problem = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            logger.warning("the leaderboard's %s with the dataset repo %s failed: %s", action, self.repo_id, problem)
        return done.returncode == 0, done.stdout.splitlines()

    def _work(self) -> None:
        delay, next_commit, next_refresh = self.retry_s, 0.0, time.monotonic() + self.refresh_s
        while True:
            with self._state:
                self._state.wait_for(lambda: self._wake or self._closed,
                                     max(0.0, min(next_commit if self.pending() else math.inf, next_refresh)
                                         - time.monotonic()))
                if self._closed:
                    return
                woken, self._wake = self._wake, False
            now = time.monotonic()
            try:
                if self.pending() and (woken or now >= next_commit):
                    if self.commit_outbox():
                        delay = self.retry_s
                    else:
                        next_commit, delay = now + delay, min(2 * delay, self.max_retry_s)
                if now >= next_refresh:
                    self.refresh()
                    next_refresh = time.monotonic() + self.refresh_s
            except Exception as error:  # the cache's, a file's: the board goes on, the thread tries again
                logger.warning("the leaderboard's records with %s: %s", self.repo_id, error)
                next_commit = now + delay
