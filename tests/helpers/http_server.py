"""A real HTTP server on 127.0.0.1 for download tests: Range requests, dropped connections, corrupt bodies; and
servers that cannot be reached (a refused port, a host that does not resolve)."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Route:
    """What the server answers for one path.

    ``bad_bodies`` are served, one per request, before ``body``; ``always_bad`` replaces ``body`` for good;
    ``drops`` cut the connection after that many body bytes, one per request; ``statuses`` are answered
    (with no file), one per request, before anything else (``[503, 503]``: unavailable twice, then served);
    ``delays`` hold the answer that many seconds after the connection is accepted, one per request.
    """

    body: bytes
    bad_bodies: list[bytes] = field(default_factory=list)
    always_bad: bytes | None = None
    drops: list[int] = field(default_factory=list)
    ignore_range: bool = False
    statuses: list[int] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)


@dataclass
class Request:
    path: str
    range: str | None
    status: int
    sent: int


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # the default 5 drops parallel connects, which then wait 1 s to retry


class Server:
    """A ThreadingHTTPServer on a free port of 127.0.0.1 with routes and a log of the requests it saw."""

    def __init__(self):
        self.routes: dict[str, Route] = {}
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        self.httpd = _HTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def requests_for(self, path: str) -> list[Request]:
        with self.lock:
            return [request for request in self.requests if request.path == path]

    def bytes_sent(self, path: str) -> int:
        return sum(request.sent for request in self.requests_for(path))


def _handler(server: Server):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            range_header = self.headers.get("Range")
            with server.lock:
                route = server.routes.get(self.path)
                status = route.statuses.pop(0) if route is not None and route.statuses else None
                delay = route.delays.pop(0) if route is not None and route.delays else 0
                if route is None or status is not None:
                    body, drop = None, None
                else:
                    body = route.always_bad or (route.bad_bodies.pop(0) if route.bad_bodies else route.body)
                    drop = route.drops.pop(0) if route.drops else None
            time.sleep(delay)
            if status is not None:
                self._send(range_header, status, b"try again later")
            elif body is None:
                self._send(range_header, 404, b"not found")
            elif range_header and not route.ignore_range:
                start = int(range_header.removeprefix("bytes=").partition("-")[0])
                if start >= len(body):
                    self._send(range_header, 416, b"", {"Content-Range": f"bytes */{len(body)}"})
                else:
                    content_range = f"bytes {start}-{len(body) - 1}/{len(body)}"
                    self._send(range_header, 206, body[start:], {"Content-Range": content_range}, drop)
            else:
                self._send(range_header, 200, body, {}, drop)

        def _send(self, range_header, status, body, headers=None, drop=None):
            payload = body if drop is None else body[:drop]
            request = Request(self.path, range_header, status, len(payload))
            with server.lock:
                server.requests.append(request)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            try:
                self.wfile.write(payload)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                request.sent = 0

        def log_message(self, *args):
            pass

    return Handler


def refused_url() -> str:
    """The URL of a port on 127.0.0.1 with nothing listening: every connection is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


# servers that cannot be reached, each with the reason a connection to it gives
UNREACHABLE = {"refused": (refused_url, "(Connection refused)"),
               "no-such-host": (lambda: "http://nonexistent.invalid/", "cannot connect to nonexistent.invalid (")}
