"""A stand-in for the Hugging Face Hub on 127.0.0.1, for the code that uploads and downloads through
``huggingface_hub`` (``push_to_hub`` of the dataset, the leaderboard's records, the board's requests and the model
repositories its worker evaluates). ``conftest.fake_hub`` serves one per test."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeHub:
    """A stand-in Hub on 127.0.0.1: it answers what ``huggingface_hub`` sends to create a repo and upload files
    (create, validate-yaml, preupload, commit) and records every call; with ``fail``, every call is a ``fail_status`` error.
    The files of every commit answered are kept, by repo (:attr:`files`, ``{"org/name": {path: bytes}}``), and served
    as the Hub serves them: the listing (``GET /api/datasets/<repo>/tree/<revision>``) and each file (``HEAD`` and
    ``GET /datasets/<repo>/resolve/<revision>/<path>``); with ``down``, every download call is a 503.

    ``commit_delay_s`` makes each commit take that long; ``hang`` (set by :meth:`hang_commits`) holds every commit
    unanswered until :meth:`answer_commits`. ``max_commits_at_once`` is how many commits were ever in flight together.

    Revisions: a repo's head commit is the SHA-1 of its files (:meth:`head`), so any change of :attr:`files` (a commit,
    or a test's edit standing for a commit made elsewhere) is a new commit, and every head served is kept, so that a
    revision resolves as on the Hub: ``GET /api/{models,datasets}/<repo>[/revision/<revision>]`` (``main`` or a commit
    hash, with the files' sizes), the listing and the files at a commit hash. A commit that names a ``parentCommit``
    other than the head is refused with 412, as the Hub refuses it. Model repositories (:attr:`model_files`, filled by
    :meth:`put_model`) are served at ``/api/models/...`` and ``/<repo>/resolve/...`` (each file's GET after
    ``model_download_delay_s``); a repo of :attr:`unreachable` answers every call with 503.
    """

    def __init__(self, fail: bool = False):
        self.calls: list[tuple[str, bytes]] = []
        self.files: dict[str, dict[str, bytes]] = {}
        self.model_files: dict[str, dict[str, bytes]] = {}
        self.unreachable: set[str] = set()
        self.model_download_delay_s = 0.0  # how long each file of a model repository takes to come
        self._snapshots: dict[tuple[str, str], dict[str, dict[str, bytes]]] = {}  # (kind, repo): {commit: files}
        self.down = False
        self.commit_count = 0
        self.fail = fail
        self.fail_status = 500  # huggingface_hub tries a 5xx again, with backoff (about 25 s); a 4xx once
        self.commit_delay_s = 0.0
        self.dropped: list[tuple[str, bytes]] = []
        self.max_commits_at_once = 0
        self._answering = threading.Event()
        self._answering.set()
        self._in_flight = 0
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self._serve(head=False)

            def do_HEAD(self):
                self._serve(head=True)

            def _serve(self, head: bool):
                path = self.path.split("?")[0]
                hub.calls.append((f"{self.command} {path}", b""))
                info = re.fullmatch(r"/api/(models|datasets)/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
                tree = re.fullmatch(r"/api/(models|datasets)/([^/]+/[^/]+)/tree/([^/]+)(/.*)?", path)
                resolve = re.fullmatch(r"/(datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                found = info or tree or resolve
                repo = found.group(2) if found else ""
                if hub.down or hub.fail or repo in hub.unreachable:
                    self.send_error(503)
                    return
                kind = ("models" if resolve.group(1) is None else "datasets") if resolve else (found.group(1) if found
                                                                                               else "")
                if kind == "models" and repo not in hub.model_files or kind == "datasets" and info and \
                        repo not in hub.files:
                    self._not_found("RepoNotFound")
                    return
                commit, stored = hub.at(kind, repo, (found.group(3) if found else None) or "main")
                if stored is None:
                    self._not_found("RevisionNotFound" if info else "EntryNotFound" if resolve else "RepoNotFound")
                    return
                if info:  # the files' sizes and git blob ids only when asked (files_metadata=True sends blobs)
                    blobs = re.search(r"[?&]blobs=true(&|$)", self.path, re.IGNORECASE) is not None
                    answer = {"id": repo, "sha": commit, "private": False,
                              "siblings": [{"rfilename": name, **({"size": len(data), "blobId": git_blob_id(data)}
                                                                  if blobs else {})}
                                           for name, data in sorted(stored.items())]}
                    self._answer(json.dumps(answer).encode(), "application/json")
                    return
                if tree:
                    listing = [{"type": "file", "path": name, "size": len(data), "oid": git_blob_id(data)}
                               for name, data in sorted(stored.items())]
                    self._answer(json.dumps(listing).encode(), "application/json")
                    return
                data = stored.get(resolve.group(4)) if resolve else None
                if kind == "models" and not head:
                    time.sleep(hub.model_download_delay_s)
                if data is None:
                    self._not_found("EntryNotFound" if resolve else "RepoNotFound")
                    return
                self._answer(data, "application/octet-stream", head,
                             {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha1(data).hexdigest()}"'})

            def _not_found(self, code: str):
                self.send_response(404)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _answer(self, data: bytes, content_type: str, head: bool = False, headers=None):
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                if not head:
                    self.wfile.write(data)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path.split("?")[0]
                if "/commit/" in path:
                    with hub._lock:
                        hub._in_flight += 1
                        hub.max_commits_at_once = max(hub.max_commits_at_once, hub._in_flight)
                    held = not hub._answering.is_set()
                    try:
                        hub._answering.wait()
                        time.sleep(hub.commit_delay_s)
                    finally:
                        with hub._lock:
                            hub._in_flight -= 1
                    if held:  # a commit the Hub never answered is not applied
                        hub.dropped.append((path, body))
                        self.send_error(503)
                        return
                hub.calls.append((path, body))
                if hub.fail or any(f"/{repo}/" in path for repo in hub.unreachable):
                    self.send_error(hub.fail_status if hub.fail else 503)
                    return
                if path == "/api/repos/create":
                    answer = {"url": f"{hub.url}/datasets/{json.loads(body)['organization']}/x"}
                elif path == "/api/validate-yaml":
                    answer = {"errors": [], "warnings": []}
                elif "/preupload/" in path:
                    files = json.loads(body)["files"]
                    answer = {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                        for f in files]}
                elif "/commit/" in path:
                    commit = hub._store(path, body)
                    if commit is None:  # the Hub's answer to a parent commit that is no longer the head
                        data = json.dumps({"error": "A commit has happened since. Please refresh and try again."})
                        self.send_response(412)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data.encode())
                        return
                    answer = {"commitUrl": f"{hub.url}/datasets/org/rococo/commit/{commit}",
                              "commitOid": commit, "pullRequestUrl": None}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _store(self, path: str, body: bytes):
        """Apply a commit (``/api/{datasets,models}/<org>/<name>/commit/<revision>``): its files join the repo's;
        return the new head, or None (nothing applied) when its ``parentCommit`` is not the head."""
        kind, repo = re.fullmatch(r"/api/(models|datasets)/([^/]+/[^/]+)/commit/.+", path).groups()
        lines = [json.loads(line) for line in body.splitlines()]
        parent = next((line["value"].get("parentCommit") for line in lines if line["key"] == "header"), None)
        with self._lock:
            if parent and parent != self.head(kind, repo):
                return None
            self.commit_count += 1
            stored = (self.model_files if kind == "models" else self.files).setdefault(repo, {})
            for line in lines:
                if line["key"] == "file":
                    stored[line["value"]["path"]] = base64.b64decode(line["value"]["content"])
            return self.head(kind, repo)

    def head(self, kind: str, repo: str) -> str:
        """The head commit of ``repo`` (``kind`` ``models`` or ``datasets``): the SHA-1 of its files; the files are
        kept under it, so that the commit can be asked for later."""
        stored = dict((self.model_files if kind == "models" else self.files).get(repo, {}))
        commit = hashlib.sha1(json.dumps(sorted((name, hashlib.sha1(data).hexdigest())
                                                for name, data in stored.items())).encode()).hexdigest()
        self._snapshots.setdefault((kind, repo), {})[commit] = stored
        return commit

    def at(self, kind: str, repo: str, revision: str):
        """``(commit, files)`` of ``repo`` at ``revision`` (``main`` or a commit it had); ``(None, None)`` when there
        is no such commit."""
        with self._lock:
            head = self.head(kind, repo)
            commit = head if revision == "main" else revision
            return commit, self._snapshots[(kind, repo)].get(commit) and dict(self._snapshots[(kind, repo)][commit])

    def put_model(self, repo: str, files: dict[str, bytes]) -> str:
        """Make ``files`` the head of the model repository ``repo`` (a commit made elsewhere); return its commit."""
        with self._lock:
            self.model_files[repo] = dict(files)
            return self.head("models", repo)

    def hang_commits(self) -> None:
        """From now on, hold every commit unanswered (a Hub that does not answer)."""
        self._answering.clear()

    def answer_commits(self) -> None:
        """Answer the commits held, and every later one."""
        self._answering.set()

    def close(self) -> None:
        self._answering.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def committed_files(self) -> dict[str, bytes]:
        """The files of the one commit made (fails unless there was exactly one)."""
        (files,) = self.commits()
        return files

    def commits(self) -> list[dict[str, bytes]]:
        """The files of every commit answered, in the order they landed."""
        commits = []
        for path, body in list(self.calls):
            if "/commit/" in path and not self.fail:
                lines = [json.loads(line) for line in body.splitlines()]
                commits.append({line["value"]["path"]: base64.b64decode(line["value"]["content"])
                                for line in lines if line["key"] == "file"})
        return commits


def make_default_hub(hub: FakeHub, monkeypatch, cache) -> None:
    """Make ``hub`` huggingface_hub's default endpoint for the test (as ``$HF_ENDPOINT`` makes it when huggingface_hub
    is imported), and the folder ``cache`` its cache: what ``--model ...:hf-hub:ORG/REPO/...`` downloads comes from
    ``hub`` into ``cache``."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))


def git_blob_id(data: bytes) -> str:
    """The id git (and so the Hub) gives a file's content: the SHA-1 of ``blob <size>\\0`` and the bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
