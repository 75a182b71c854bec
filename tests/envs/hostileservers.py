"""Hostile HTTP servers on 127.0.0.1 for the download and repodata bounds: one that streams
without end, one that accepts and never answers, one that trickles a byte at a time.

Each is bounded itself: it serves at most `requests` requests, each for at most `seconds`,
and stops (its threads end) when the `with` block ends.
"""

from __future__ import annotations

import http.server
import socketserver
import threading
import time
from contextlib import contextmanager
from typing import Iterator

ENDLESS, SILENT, TRICKLE = "endless", "silent", "trickle"


@contextmanager
def hostile_server(
    mode: str, *, seconds: float = 30, requests: int = 64, only: str = ""
) -> Iterator[str]:
    """The base URL (http://127.0.0.1:PORT) of a server behaving as `mode` for every path that
    ends with `only` (any path when empty); other paths are 404 (so rattler falls back from
    sharded and compressed repodata to the plain repodata.json)."""
    stop = threading.Event()
    served = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_args: object) -> None:
            pass

        def do_HEAD(self) -> None:  # noqa: N802 (http.server's names)
            self.do_GET()

        def do_GET(self) -> None:  # noqa: N802
            served[0] += 1
            if served[0] > requests:
                return
            deadline = time.monotonic() + seconds
            if not self.path.endswith(only):
                self.send_response(404)
                self.end_headers()
                return
            if mode == SILENT:
                stop.wait(seconds)  # accepted, read, never answered
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            if self.command == "HEAD":
                return
            block = b"x" * 65536 if mode == ENDLESS else b" "
            try:
                self.wfile.write(b'{"info": {"subdir": "noarch"}, "packages": {"a": "')
                while not stop.is_set() and time.monotonic() < deadline:
                    self.wfile.write(block)
                    self.wfile.flush()
                    if mode == TRICKLE:
                        stop.wait(1.0)
            except OSError:
                pass  # the client gave up: what the bound is for

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
