"""The Leaderboard tab's "Evaluate a model from the Hub": the Space checks a request and commits it to the requests
repo (:class:`rococo_eval.board.requests.RequestQueue`), and shows every request's state; the board's worker
(``rococo-eval worker``) evaluates them and its rows come onto the board as *evaluated by the board*.

The requests repo is ``$ROCOCO_REQUESTS_REPO`` (a dataset repo), written with ``$HF_TOKEN``; without it the form says
that this Space takes no requests.
"""

from __future__ import annotations

import logging
import os
import time
from typing import NamedTuple, Optional

import gradio as gr
import pandas as pd

from rococo_eval.board import leaderboard
from rococo_eval.board.requests import HUB_FORMS, REPO_ENV, RequestQueue

logger = logging.getLogger(__name__)

STATE_COLUMNS = ["model", "commit", "precision", "state", "reason", "requested", "result"]


class Requested(NamedTuple):
    """What a request fills: the message, the requests' states, and the session's request times."""

    message: str
    states: pd.DataFrame
    times: list


class HubRequests:
    """The form's handlers over ``queue`` (None: this Space takes no requests)."""

    def __init__(self, queue: Optional[RequestQueue] = None):
        self.queue = queue

    @classmethod
    def from_environment(cls) -> "HubRequests":
        """The requests repo of ``$ROCOCO_REQUESTS_REPO``, if set (a wrong name raises ``ValueError`` at start), on
        the Hub of ``$HF_ENDPOINT`` (default huggingface.co)."""
        repo = os.environ.get(REPO_ENV, "").strip()
        return cls(RequestQueue(repo, token=os.environ.get("HF_TOKEN"), endpoint=os.environ.get("HF_ENDPOINT") or None)
                   if repo else None)

    def intro(self) -> str:
        """What the form does, above it."""
        if self.queue is None:
            return (f"This Space takes no evaluation requests (no ${REPO_ENV}): the board's worker evaluates models "
                    "from the Hub where a requests repo is set (docs/space.md).")
        return (f"Name a model on the Hub ({', '.join(HUB_FORMS.values())}) and, optionally, a revision: the Space "
                "resolves it to a commit, and the board's worker downloads that commit, evaluates it on every gallery "
                "as `rococo-eval run` does and puts its row on the board as *evaluated by the board*. Repositories "
                "with code of their own, local paths and `module:callable` are refused.")

    def submit(self, model: str, revision: str = "", link: str = "", precision: str = "fp32", times=None,
               request: gr.Request = None) -> Requested:
        """Check and commit a request; return the message, the requests' states and the session's request times
        (:func:`rococo_eval.board.leaderboard.rate_allows` limits them, as for submissions).

        Raises:
            gradio.Error: no requests repo, the session's rate, or the request refused (its reason).
        """
        from rococo_eval.space.handlers import client_address

        times = list(times or [])
        now = time.time()
        if self.queue is None:
            raise gr.Error(self.intro(), title="Cannot request", print_exception=False)
        if not leaderboard.rate_allows(times, now):
            raise gr.Error(f"at most {leaderboard.RATE_LIMIT} requests every {leaderboard.RATE_WINDOW_S // 60} minutes "
                           "from one session: try again later", title="Cannot request", print_exception=False)
        try:
            _, known = self.queue.requests()  # read once: for the checks, and the table after
            queued = self.queue.submit(model, revision, link=link, precision=precision, client=client_address(request),
                                       known=known)
        except ValueError as error:
            raise gr.Error(str(error), title="Cannot request", print_exception=False) from None
        times.append(now)
        message = (f"requested {queued['model']} at commit {queued['commit']} (revision {queued['revision']}): "
                   f"pending, request {queued['id']}")
        return Requested(message, state_table([*known, queued]), times)

    def states(self) -> pd.DataFrame:
        """Every request's state, newest first: pending, running, done (with its result record), or failed with
        its reason; an empty table without a requests repo, or when the repo does not answer. One call to the Hub
        (:meth:`~rococo_eval.board.requests.RequestQueue.requests`), plus a download of each request file new since
        the last."""
        if self.queue is None:
            return pd.DataFrame([], columns=STATE_COLUMNS)
        try:
            _, known = self.queue.requests()
        except Exception as error:  # the Hub's errors, a network's: the tab shows no states rather than failing
            logger.warning("the requests repo %s: %s", self.queue.repo_id, error)
            return pd.DataFrame([], columns=STATE_COLUMNS)
        return state_table(known)


def state_table(known: list[dict]) -> pd.DataFrame:
    """The table of the requests ``known`` (oldest first, as :meth:`~rococo_eval.board.requests.RequestQueue.requests`
    gives them), newest first.

    Example:
        >>> state_table([])
        Empty DataFrame
        Columns: [model, commit, precision, state, reason, requested, result]
        Index: []
    """
    rows = [[request["model"], request["commit"][:12], request["precision"], request["status"], request["reason"],
             request["requested_at"][:16].replace("T", " "), request["result"]] for request in reversed(known)]
    return pd.DataFrame(rows, columns=STATE_COLUMNS)
