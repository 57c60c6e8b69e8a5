"""Requests to evaluate a model from the Hub: the JSON files of the requests repo, how the Space checks and adds one,
and how a worker claims one so that no two workers evaluate it.

A request is ``requests/<id>.json`` (:func:`request_path`) in the dataset repo named by ``$ROCOCO_REQUESTS_REPO``. Its
fields (:data:`SCHEMA_VERSION` 1): ``schema_version``, ``id`` (a UUID, hex), ``model`` (a ``--model`` name of a Hub
repository: one of :data:`HUB_FORMS`, e.g. ``blip:hf-hub:ORG/REPO/PATH.pth``), ``repo``, ``revision`` (as asked),
``commit`` (the commit it resolved to when the request came: the worker evaluates that commit, whatever the branch
holds later), ``size_bytes``, ``link``, ``precision``, ``requested_at``, ``client`` (the digest of the address it came
from, for the rate limits), and its state: ``status`` (:data:`STATES`), ``claimed_by``, ``claimed_at``, ``attempts``,
``reason`` (a failure's one line) and ``result`` (the path of its result record in the results repo).

:func:`check_hub_model` is what the Space checks before it adds a request (:meth:`RequestQueue.submit`): a name of a
Hub repository in one of :data:`HUB_FORMS`, never a local path nor ``module:callable``; the revision resolved to a
commit; no file that would run code from the repository (``*.py``: ``trust_remote_code`` is never set, and a
``config.json`` with ``auto_map`` is refused by the worker); the files together within ``max_bytes``.

Claiming (:meth:`RequestQueue.claim`): the worker reads the repo at its head commit, picks the oldest request that is
pending (or running with a claim older than ``claim_expiry_s``: its worker died) and commits it as running with
``create_commit(parent_commit=head)``, which the Hub refuses (412) when anything was committed since; the worker then
reads again. So of two workers that read the same head, one claim lands and the other reads the new head, where the
request is running. Renewing the claim (:meth:`RequestQueue.renew`) and ending the request
(:meth:`RequestQueue.finish`, :meth:`RequestQueue.commit_end`) are commits of the same kind, made only while the
request is still running under that claim (:func:`same_claim`: the same worker and attempt): a worker whose claim
expired and was taken over changes nothing.

Example:
    >>> request = make_request("hf:org/tiny-clip", "org/tiny-clip", "main", "a" * 40, 1234, link="",
    ...                        precision="fp32", requested_at="2026-12-05T10:00:00+00:00", client="",
    ...                        request_id="0" * 32)
    >>> request_path(request), request["status"]
    ('requests/00000000000000000000000000000000.json', 'pending')
    >>> read_request(request_bytes(request), "r.json")["commit"] == "a" * 40
    True
    >>> check_hub_model("my_models:load_model")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: `model` 'my_models:load_model' runs code of your own: the board evaluates models from the Hub only, ...
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import re
import uuid
from typing import TYPE_CHECKING, Mapping, Optional

from rococo_eval.board.leaderboard import CLIENT_HOURLY_LIMIT, HOURLY_LIMIT, PRECISIONS, clean_text
from rococo_eval.board.records import json_object
from rococo_eval.models.families import FAMILIES, HUB_REPO_ID

if TYPE_CHECKING:
    from rococo_eval.models.hub_files import HubFile

logger = logging.getLogger(__name__)

REPO_ENV = "ROCOCO_REQUESTS_REPO"
SCHEMA_VERSION = 1
REQUEST_FOLDER = "requests"
REQUEST_PATTERN = re.compile(rf"{REQUEST_FOLDER}/[0-9a-f]{{32}}\.json")
PENDING, RUNNING, DONE, FAILED = "pending", "running", "done", "failed"
STATES = (PENDING, RUNNING, DONE, FAILED)
# the forms of a --model name that name a Hub repository, and the family's name of it (the Family records')
HUB_FORMS = {family.library: family.hub_form for family in FAMILIES.values() if family.hub}
# all files of a repository together: a ViT-g/14 CLIP is about 5.5 GB in one format, and repositories often hold two
MAX_REPO_BYTES = 20 * 1024 ** 3
# a claim older than this is taken to be a dead worker's, and the request is claimed again: a full RoCOCO run of a
# ViT-L model takes well under an hour on one GPU (docs/space.md), so three hours leave room
CLAIM_EXPIRY_S = 3 * 3600
MAX_REQUEST_BYTES = 64 * 1024
CODE_FILES = (".py",)  # files of a repository that only code of the repository (trust_remote_code) would run
_REPO_ID = re.compile(HUB_REPO_ID)
_FIELDS = ("schema_version", "id", "model", "repo", "revision", "commit", "size_bytes", "link", "precision",
           "requested_at", "client", "status", "claimed_by", "claimed_at", "attempts", "reason", "result")


class RequestError(ValueError):
    """A request file that cannot be read: the message names the file and the problem."""


def hub_model(model: str) -> tuple[str, "HubFile"]:
    """``(family, location)`` of a ``--model`` name that names a Hub repository (:data:`HUB_FORMS`): its
    :class:`~rococo_eval.models.hub_files.HubFile`, the repository and, for ``blip:`` and ``vse:``, the file in it.

    Raises:
        ValueError: a local path, ``module:callable``, or any other form, naming ``model`` and the forms taken; a
            revision in the name (the request's revision is its own field).

    Example:
        >>> hub_model("vse:hf-hub:org/vse-infty/coco/model_best.pth")
        ('vse', HubFile(repo='org/vse-infty', path='coco/model_best.pth', revision=None))
    """
    from rococo_eval.models.adapters import MODEL_FORMS, ModelError, parse_model_name
    from rococo_eval.models.hub_files import hub_location

    text = clean_text(model, "model", required=True)
    forms = ", ".join(HUB_FORMS.values())
    families = {form.library for form in MODEL_FORMS} - {"python"}
    try:
        parsed = parse_model_name(text)
    except ModelError:
        parsed = None
    looks_like_callable = re.fullmatch(r"[\w.]+:[\w.]+", text) and text.partition(":")[0] not in families
    if (parsed is None or parsed.library == "python") and looks_like_callable:
        raise ValueError(f"`model` {text!r} runs code of your own: the board evaluates models from the Hub only, "
                         f"named {forms}")
    if parsed is None:
        raise ValueError(f"`model` {text!r} names no model; the board evaluates {forms}")
    location = hub_location(parsed.library, parsed.name, f"`model` {text!r}") if parsed.library in HUB_FORMS \
        else None
    if location is None:
        raise ValueError(f"`model` {text!r} is not a Hub repository: the board evaluates {forms} (a local "
                         "checkpoint file or folder cannot be fetched at a commit)")
    if location.revision:
        raise ValueError(f"`model` {text!r}: give the revision {location.revision!r} as the request's revision, "
                         "not in the name")
    if not _REPO_ID.fullmatch(location.repo) or ".." in location.repo:
        raise ValueError(f"`model` {text!r}: {location.repo!r} is no Hub repository id (ORG/REPO), and local paths "
                         "are refused: the board evaluates what the Hub holds")
    return parsed.library, location


def check_hub_model(model: str, revision: str = "", api=None, max_bytes: int = MAX_REPO_BYTES) -> dict:
    """Check that ``model`` at ``revision`` (default ``main``) can be evaluated by the board: return ``{"repo",
    "revision", "commit", "size_bytes", "files"}``, the commit the revision resolves to and the repository's files
    there (``{path: size}``). ``api`` is an ``huggingface_hub.HfApi`` (its endpoint and token).

    Raises:
        ValueError: the name (:func:`hub_model`), a repository or revision the Hub does not know, a file that
            would run code of the repository, a checkpoint file the name names that the commit lacks, or files over
            ``max_bytes`` together; each names what it found.
    """
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    _, location = hub_model(model)
    repo = location.repo
    revision = clean_text(revision, "note") or "main"
    if not re.fullmatch(r"[\w./-]{1,200}", revision) or ".." in revision:
        raise ValueError(f"`revision` {revision!r} is no branch, tag or commit name")
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True)
    except RevisionNotFoundError:
        raise ValueError(f"`revision` {revision!r} of {repo} does not resolve: no such branch, tag or commit") from None
    except RepositoryNotFoundError:
        raise ValueError(f"`model` {model!r}: the Hub has no model repository {repo} (or it is private)") from None
    files = {sibling.rfilename: int(sibling.size or 0) for sibling in info.siblings or []}
    code = sorted(name for name in files if name.endswith(CODE_FILES))
    if code:
        raise ValueError(f"`model` {model!r}: {repo} holds code ({', '.join(code[:3])}), which only "
                         "trust_remote_code would run: the board runs no code from a repository")
    if location.path is not None and location.path not in files:  # blip:, vse: name a file
        raise ValueError(f"`model` {model!r}: {repo} has no file {location.path!r} at {info.sha[:12]}")
    size = sum(files.values())
    if size > max_bytes:
        raise ValueError(f"`model` {model!r}: {repo} holds {size:,} bytes at {info.sha[:12]}, more than the board "
                         f"evaluates ({max_bytes:,})")
    return {"repo": repo, "revision": revision, "commit": info.sha, "size_bytes": size, "files": files}


def make_request(model: str, repo: str, revision: str, commit: str, size_bytes: int, *, link: str, precision: str,
                 requested_at: str, client: str, request_id: Optional[str] = None) -> dict:
    """A pending request (the fields above) of ``model`` at ``commit``."""
    return {"schema_version": SCHEMA_VERSION, "id": request_id or uuid.uuid4().hex, "model": model, "repo": repo,
            "revision": revision, "commit": commit, "size_bytes": int(size_bytes), "link": link,
            "precision": precision, "requested_at": requested_at, "client": client, "status": PENDING,
            "claimed_by": "", "claimed_at": "", "attempts": 0, "reason": "", "result": ""}


def request_path(request: Mapping) -> str:
    """Where ``request`` lives in the requests repo: ``requests/<id>.json``."""
    return f"{REQUEST_FOLDER}/{request['id']}.json"


def request_bytes(request: Mapping) -> bytes:
    """The file of ``request``, as the repo holds it."""
    return json.dumps(request, sort_keys=True, indent=1).encode("utf-8")


def read_request(data: bytes, name: str) -> dict:
    """The request in ``data`` (the file ``name``), checked: size, JSON, schema version, fields, state.

    Raises:
        RequestError: naming ``name`` and the problem.
    """
    request = json_object(data, name, "a request", MAX_REQUEST_BYTES, RequestError)
    if request.get("schema_version") != SCHEMA_VERSION:
        raise RequestError(f"{name}: not a request of schema version {SCHEMA_VERSION}")
    missing = [field for field in _FIELDS if field not in request]
    if missing:
        raise RequestError(f"{name}: no {', '.join(missing)}")
    if request["status"] not in STATES or not re.fullmatch(r"[0-9a-f]{40}", str(request["commit"])):
        raise RequestError(f"{name}: `status` must be one of {STATES} and `commit` 40 hex digits")
    return request


def claimable(request: Mapping, now: datetime.datetime, claim_expiry_s: float = CLAIM_EXPIRY_S) -> bool:
    """Whether a worker may claim ``request`` at ``now``: pending, or running under a claim older than
    ``claim_expiry_s`` (its worker died). ``now`` is this worker's clock, the claim's stamp its worker's (renewed
    every quarter of the expiry): the workers of one requests repo share one ``claim_expiry_s``, and their clocks
    agree to well within three quarters of it.

    Example:
        >>> now = datetime.datetime(2026, 12, 5, 12, tzinfo=datetime.timezone.utc)
        >>> claimable({"status": "running", "claimed_at": "2026-12-05T11:00:00+00:00"}, now, 600)
        True
    """
    if request["status"] == PENDING:
        return True
    if request["status"] != RUNNING:
        return False
    claimed = datetime.datetime.fromisoformat(request["claimed_at"])
    return (now - claimed).total_seconds() > claim_expiry_s


def same_claim(request: Mapping, claimed: Mapping) -> bool:
    """Whether ``request`` (as the repo holds it) is still running under the claim of ``claimed``: the same worker,
    at the same attempt (each claim counts one). Not the claim's time, which each renewal moves: a renewal that
    landed without its answer leaves the worker holding the older time.

    Example:
        >>> claim = {"status": "running", "claimed_by": "a", "claimed_at": "2026-12-05T11:00:00+00:00", "attempts": 1}
        >>> same_claim({**claim, "claimed_at": "2026-12-05T12:00:00+00:00"}, claim)
        True
        >>> same_claim({**claim, "claimed_by": "b", "attempts": 2}, claim), same_claim({**claim, "attempts": 2}, claim)
        (False, False)
    """
    return request["status"] == RUNNING and (request["claimed_by"], request["attempts"]) == (
        claimed["claimed_by"], claimed["attempts"])


def ended_request(request: Mapping, status: str, reason: str = "", result: str = "") -> dict:
    """``request`` ended as ``status`` (done or failed), with ``reason``'s first line (at most 500 characters) and
    its ``result`` record's path.

    Example:
        >>> ended_request({"id": "0" * 32, "status": "running"}, "failed", "ValueError: no weights")
        {'id': '00000000000000000000000000000000', 'status': 'failed', 'reason': 'ValueError: no weights', 'result': ''}
    """
    line = (str(reason).strip().splitlines() or [""])[0][:500]
    return {**request, "status": status, "reason": line, "result": result}


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _stamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).isoformat(timespec="seconds")


class RequestQueue:
    """The requests repo ``repo_id`` (a dataset repo) through ``huggingface_hub``: ``endpoint`` for a Hub other than
    huggingface.co, ``token`` to write. The Space adds requests (:meth:`submit`) and shows them (:meth:`requests`); a
    worker claims one (:meth:`claim`), renews its claim (:meth:`renew`) and ends it (:meth:`finish`).

    Raises:
        ValueError: ``repo_id`` is not ``ORG/NAME``.
    """

    def __init__(self, repo_id: str, token: Optional[str] = None, endpoint: Optional[str] = None, *,
                 max_bytes: int = MAX_REPO_BYTES, hourly_limit: int = HOURLY_LIMIT,
                 client_hourly_limit: int = CLIENT_HOURLY_LIMIT, timeout_s: float = 60):
        from huggingface_hub import HfApi

        if not _REPO_ID.fullmatch(repo_id or ""):
            raise ValueError(f"`repo_id` must be ORG/NAME, got {repo_id!r} (${REPO_ENV})")
        self.repo_id, self.max_bytes = repo_id, max_bytes
        self.hourly_limit, self.client_hourly_limit, self.timeout_s = hourly_limit, client_hourly_limit, timeout_s
        self.api = HfApi(endpoint=endpoint, token=token)
        self._read: dict[str, dict] = {}  # requests already read, by their file's blob id

    def requests(self) -> tuple[str, list[dict]]:
        """``(head commit, every request at it)``, oldest first; a file that cannot be read is logged and left out.
        One call to the Hub (the repo's head with its files' blob ids), plus one download of each request file not
        read before."""
        info = self.api.dataset_info(self.repo_id, timeout=self.timeout_s, files_metadata=True)
        found = []
        for entry in info.siblings or []:
            if not REQUEST_PATTERN.fullmatch(entry.rfilename):
                continue
            key = entry.blob_id or f"{info.sha}/{entry.rfilename}"  # a file's content, or its path at the head
            if key not in self._read:
                try:
                    self._read[key] = read_request(self._fetch(entry.rfilename, info.sha), entry.rfilename)
                except RequestError as error:
                    logger.warning("a request is left out: %s", error)
                    continue
            found.append(self._read[key])
        return info.sha, sorted(found, key=lambda request: (request["requested_at"], request["id"]))

    def submit(self, model: str, revision: str = "", *, link: str = "", precision: str = "fp32", client: str = "",
               now: Optional[datetime.datetime] = None, known: Optional[list[dict]] = None) -> dict:
        """Check ``model`` at ``revision`` (:func:`check_hub_model`) and the limits against the requests ``known``
        (:meth:`requests`' list, just read by the caller; read here when None), and commit its pending request (one
        new file); return it.

        Raises:
            ValueError: the model (:func:`check_hub_model`), a link or precision the board refuses, the same
                repository at the same commit and precision queued or evaluated already, or the hourly limits
                (everyone's, or ``client``'s) reached.
        """
        from huggingface_hub import CommitOperationAdd

        link = clean_text(link, "link")
        if link and not re.fullmatch(r"https?://[^\s<>\"']+", link):
            raise ValueError(f"`link` must start with http:// or https:// and hold no spaces or quotes, got {link!r}")
        if precision not in PRECISIONS[:-1]:
            raise ValueError(f"`precision` must be one of {PRECISIONS[:-1]}, got {precision!r}")
        checked = check_hub_model(model, revision, self.api, self.max_bytes)
        moment = now or _now()
        client_key = hashlib.sha256(client.encode()).hexdigest() if client else ""
        known = self.requests()[1] if known is None else known
        same = [request for request in known if (request["repo"], request["commit"], request["precision"]) ==
                (checked["repo"], checked["commit"], precision) and request["status"] != FAILED]
        if same:
            raise ValueError(f"{checked['repo']} at {checked['commit'][:12]} ({precision}) is {same[0]['status']} "
                             f"already (request {same[0]['id']}): the board evaluates a commit once")
        hour_ago = _stamp(moment - datetime.timedelta(hours=1))
        recent = [request for request in known if request["requested_at"] > hour_ago]
        if len(recent) >= self.hourly_limit:
            raise ValueError(f"the board took {len(recent)} requests in the last hour, its limit for everyone "
                             f"together ({self.hourly_limit}): try again later")
        if client_key and sum(request["client"] == client_key for request in recent) >= self.client_hourly_limit:
            raise ValueError(f"{self.client_hourly_limit} requests came from your address in the last hour, its "
                             "limit: try again later")
        request = make_request(clean_text(model, "model"), checked["repo"], checked["revision"], checked["commit"],
                               checked["size_bytes"], link=link, precision=precision, requested_at=_stamp(moment),
                               client=client_key)
        self.api.create_commit(self.repo_id, [CommitOperationAdd(request_path(request), request_bytes(request))],
                               repo_type="dataset", commit_message=f"rococo-eval request {request['id']}")
        return request

    def claim(self, worker: str, claim_expiry_s: float = CLAIM_EXPIRY_S, now: Optional[datetime.datetime] = None,
              tries: int = 20) -> Optional[dict]:
        """Claim the oldest claimable request (:func:`claimable`) for ``worker``; return it as claimed (running), or
        None when there is none. A claim is a commit on the head it read (``parent_commit``): when another commit
        came first, it reads again (``tries`` times)."""
        for _ in range(tries):
            head, known = self.requests()
            moment = now or _now()
            waiting = [request for request in known if claimable(request, moment, claim_expiry_s)]
            if not waiting:
                return None
            claimed = {**waiting[0], "status": RUNNING, "claimed_by": worker, "claimed_at": _stamp(moment),
                       "attempts": waiting[0]["attempts"] + 1}
            if self._commit(claimed, f"rococo-eval worker {worker} claims {claimed['id']}", parent=head):
                return claimed
        return None

    def finish(self, request: Mapping, status: str, reason: str = "", result: str = "") -> Optional[dict]:
        """Commit the claimed ``request`` as ``status`` (:func:`ended_request`); return it as ended, or None when
        its claim is no longer this one (:meth:`commit_end`)."""
        ended = ended_request(request, status, reason, result)
        return ended if self.commit_end(ended) else None

    def commit_end(self, ended: Mapping) -> bool:
        """Commit ``ended`` (a request :func:`ended_request` made of a claim) while the repo still holds that claim;
        return whether it is there now (True also when it landed before: an answer that was lost), False when
        another worker holds the request (the claim expired and was taken over) or it ended otherwise."""
        return self._commit_over_claim(ended, ended, f"rococo-eval request {ended['id']}: {ended['status']}")

    def renew(self, request: Mapping, now: Optional[datetime.datetime] = None) -> Optional[dict]:
        """Renew the claim of ``request`` (its ``claimed_at`` set to ``now``) while the repo still holds that
        claim; return the renewed request, or None when another worker took it over."""
        renewed = {**request, "claimed_at": _stamp(now or _now())}
        landed = self._commit_over_claim(request, renewed, f"rococo-eval worker {request['claimed_by']} renews "
                                                           f"its claim of {request['id']}")
        return renewed if landed else None

    def _commit_over_claim(self, claimed: Mapping, updated: Mapping, message: str, tries: int = 20) -> bool:
        """Commit ``updated`` on the head read, if the request there is still ``claimed``'s claim (running, the same
        worker and attempt; :func:`same_claim`), reading again when another commit came first; return whether
        the repo holds ``updated`` now.

        Raises:
            RuntimeError: the head moved under ``tries`` commits in a row.
        """
        for _ in range(tries):
            head, known = self.requests()
            current = next((request for request in known if request["id"] == claimed["id"]), None)
            if current == updated:
                return True
            if current is None or not same_claim(current, claimed):
                return False
            if self._commit(updated, message, parent=head):
                return True
        raise RuntimeError(f"request {claimed['id']}: the requests repo {self.repo_id} moved under {tries} commits "
                           "in a row")

    def _commit(self, request: Mapping, message: str, parent: Optional[str]) -> bool:
        """Commit ``request``'s file (on ``parent``, when given); False when the Hub refused the parent (412)."""
        from huggingface_hub import CommitOperationAdd
        from huggingface_hub.errors import HfHubHTTPError

        try:
            self.api.create_commit(self.repo_id, [CommitOperationAdd(request_path(request), request_bytes(request))],
                                   repo_type="dataset", commit_message=message, parent_commit=parent)
        except HfHubHTTPError as error:
            if error.response is not None and error.response.status_code == 412:
                return False
            raise
        return True

    def _fetch(self, path: str, revision: str) -> bytes:
        from rococo_eval.board.hub_transfer import fetch

        return fetch(self.api, self.repo_id, path, revision=revision)
