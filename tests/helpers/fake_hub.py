"""A stand-in for the Hugging Face Hub on 127.0.0.1, for the code that uploads through ``huggingface_hub``
(``push_to_hub`` of the dataset, the leaderboard's copy). ``conftest.fake_hub`` serves one per test."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeHub:
    """A stand-in Hub on 127.0.0.1: it answers what ``huggingface_hub`` sends to create a repo and upload files
    (create, validate-yaml, preupload, commit) and records every call; with ``fail``, every call is a 500."""

    def __init__(self, fail: bool = False):
        self.calls: list[tuple[str, bytes]] = []
        self.fail = fail
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                hub.calls.append((self.path.split("?")[0], body))
                path = self.path.split("?")[0]
                if hub.fail:
                    self.send_error(500)
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
                    answer = {"commitUrl": f"{hub.url}/datasets/org/rococo/commit/{'0' * 40}",
                              "commitOid": "0" * 40, "pullRequestUrl": None}
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

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def committed_files(self) -> dict[str, bytes]:
        (_, body), = [call for call in self.calls if "/commit/" in call[0]]
        lines = [json.loads(line) for line in body.splitlines()]
        return {line["value"]["path"]: base64.b64decode(line["value"]["content"])
                for line in lines if line["key"] == "file"}
