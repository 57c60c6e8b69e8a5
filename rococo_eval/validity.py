"""Validity warnings: what makes a result's numbers doubtful, said whatever the verbosity and kept in its report.

A validity warning is a statement about the numbers themselves, not about the work: files of one evaluation that
disagree on their clean gallery (:mod:`rococo_eval.scoring.consistency`), a re-ranker's files whose agreement could
not be checked, a stated order that the scores contradict scored all the same (``--trust-order``, the Space's
checkbox), ties that MTEB's order of items decided, a damaged cache file dropped (its items computed again), and
the warnings that the reports compared by ``rococo-eval table`` record (:data:`KINDS` names them). Each
goes through the one logger :data:`VALIDITY_LOGGER` (a child of ``rococo_eval``'s), whose level is set here to
WARNING once and for all: ``rococo-eval --quiet`` lowers the package's notes to errors, and this logger keeps its
own level, so its warnings still reach stderr (a caller who really wants them gone names this logger).

What a report records of them: :func:`recorded` collects those given in the calling thread inside a block, each
once, for ``meta["warnings"]`` (:func:`report_entries`), which ``report.json`` keeps and ``report.md`` shows under
"Warnings" (:func:`rococo_eval.reporting.report.write_report`).

Example:
    >>> with recorded() as found:
    ...     warn("the files disagree: %s", "clean R@1 80.00 vs 81.00")
    >>> found, report_entries(found)
    (['the files disagree: clean R@1 80.00 vs 81.00'], {'warnings': ['the files disagree: clean R@1 80.00 vs 81.00']})
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Iterator, Sequence

VALIDITY_LOGGER = "rococo_eval.validity"
# Each kind of validity warning that the package gives, as `--quiet`'s help names what it keeps
KINDS = ("files that disagree", "files whose agreement could not be checked", "an order scored against its scores",
         "ties that MTEB's order decided", "damaged cache files", "the warnings of the reports compared")

logger = logging.getLogger(VALIDITY_LOGGER)
logger.setLevel(logging.WARNING)  # its own level: the package's (--quiet: errors only) does not drop these


def warn(message: str, *args) -> None:
    """Give a validity warning: ``message % args`` on :data:`VALIDITY_LOGGER`, at WARNING.

    Example:
        >>> warn("%s was dropped and embedded again", "rows-0-100.npy")  # on stderr: rows-0-100.npy was dropped ...
    """
    logger.warning(message, *args)


@contextlib.contextmanager
def recorded() -> Iterator[list[str]]:
    """Collect the validity warnings given in this thread inside the block: a list, filled as they come, each
    message once, in the order first given. Other threads' warnings (another request of the Space) are not
    collected.

    Example:
        >>> with recorded() as found:
        ...     warn("a"), warn("b"), warn("a")
        (None, None, None)
        >>> found
        ['a', 'b']
    """
    found: list[str] = []
    handler = _Collector(found, threading.get_ident())
    logger.addHandler(handler)
    try:
        yield found
    finally:
        logger.removeHandler(handler)


def report_entries(found: Sequence[str]) -> dict:
    """What a report's ``meta`` records of the validity warnings ``found``: ``warnings``, only when there are some
    (the report of a clean evaluation is as before).

    Example:
        >>> report_entries([])
        {}
    """
    return {"warnings": list(found)} if found else {}


class _Collector(logging.Handler):
    """Appends each new message of the thread ``thread`` to ``found``."""

    def __init__(self, found: list[str], thread: int):
        super().__init__(logging.WARNING)
        self.found, self.thread = found, thread

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.thread == self.thread and message not in self.found:
            self.found.append(message)
