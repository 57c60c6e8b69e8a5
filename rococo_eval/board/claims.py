"""A worker's hold on the request it evaluates (:mod:`rococo_eval.board.worker`): its claim renewed while the run
goes on, and its end kept on disk until the requests repo takes it.

- :class:`ClaimRenewal`: a thread that renews the claim (:meth:`~rococo_eval.board.requests.RequestQueue.renew`, a
  commit on the head it read, as the claim was) every ``every_s`` seconds, so that a run longer than the claim's
  expiry is not claimed by a second worker. When a renewal finds the request taken over by another worker (this
  worker's claim expired, say while the Hub did not answer, and was claimed again), the claim is *lost*: the worker
  commits neither a result nor an end for it. A renewal the Hub does not answer is tried again at the next beat.
- :class:`KeptEnds`: the ends (done, failed) not yet committed, one file each (``<folder>/<request id>.json``,
  written whole or not at all), committed by :meth:`KeptEnds.commit` after each run and before each claim, so a
  requests repo that does not answer when a run ends leaves the request running only until it answers again.

Example:
    >>> import pathlib, tempfile
    >>> ends = KeptEnds(pathlib.Path(tempfile.mkdtemp()))
    >>> ends.keep({"id": "0" * 32, "status": "done"})
    >>> ends.pending()
    ['00000000000000000000000000000000']
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from rococo_eval.io.atomic import write_atomic

logger = logging.getLogger(__name__)


class ClaimRenewal:
    """Renews the claim of ``request`` in ``queue`` (a :class:`~rococo_eval.board.requests.RequestQueue`) every
    ``every_s`` seconds while the ``with`` block runs; :attr:`request` is the claim as last renewed, :attr:`lost`
    whether another worker took it over.

    Raises:
        ValueError: ``every_s`` is not a number of seconds > 0.
    """

    def __init__(self, queue, request: dict, every_s: float):
        if not every_s > 0:
            raise ValueError(f"`every_s` must be a number of seconds > 0, got {every_s!r}")
        self.queue, self.request, self.every_s = queue, request, every_s
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"claim {request['id']}", daemon=True)

    def __enter__(self) -> "ClaimRenewal":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    def held(self) -> bool:
        """After the ``with`` block, renew once more: whether the claim is still this worker's (True too when the Hub
        does not answer: nothing says another worker took it)."""
        if not self.lost:
            self._renew()
        return not self.lost

    def _beat(self) -> None:
        while not self._stop.wait(self.every_s) and not self.lost:
            self._renew()

    def _renew(self) -> None:
        try:
            renewed = self.queue.renew(self.request)
        except Exception as error:  # the Hub's, a network's: tried again at the next beat
            logger.warning("the claim of request %s was not renewed: %s", self.request["id"], error)
            return
        if renewed is None:
            self.lost = True
            logger.warning("request %s was claimed by another worker (this worker's claim expired): its result and "
                           "end are left to that worker", self.request["id"])
        else:
            self.request = renewed


class KeptEnds:
    """The request ends not yet committed to the requests repo, under ``folder``."""

    def __init__(self, folder):
        self.folder = Path(folder)

    def keep(self, ended: dict) -> None:
        """Keep ``ended`` (written whole or not at all) until :meth:`commit` lands it."""
        write_atomic(self.folder / f"{ended['id']}.json", lambda handle: handle.write(json.dumps(ended).encode()))

    def pending(self) -> list[str]:
        """The ids of the requests whose end is kept."""
        return sorted(path.stem for path in self.folder.glob("*.json"))

    def commit(self, queue) -> bool:
        """Commit every kept end to ``queue`` (:meth:`~rococo_eval.board.requests.RequestQueue.commit_end`),
        forgetting each that landed, and each whose claim another worker holds now (logged); return whether none is
        left. A Hub that does not answer is logged, and the ends kept."""
        for path in sorted(self.folder.glob("*.json")):
            ended = json.loads(path.read_bytes())
            try:
                landed = queue.commit_end(ended)
            except Exception as error:  # the Hub's, a network's: kept for the next try
                logger.warning("the end of request %s is kept until the requests repo %s answers: %s", ended["id"],
                               queue.repo_id, error)
                return False
            if not landed:
                logger.warning("the end of request %s (%s) is dropped: another worker holds the request now",
                               ended["id"], ended["status"])
            path.unlink()
        return True

