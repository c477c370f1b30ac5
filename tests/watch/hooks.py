"""A real HTTP server on 127.0.0.1 standing in for a Slack/Mattermost incoming
webhook: it records every POST (path, headers, JSON body) and answers with the
status the test sets."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Hook:
    """The server's record: ``bodies`` (decoded JSON), ``status`` to answer with."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.status = 200
        self.lock = threading.Lock()
        self.url = ""

    def count(self) -> int:
        with self.lock:
            return len(self.bodies)

    def events(self) -> list[str]:
        with self.lock:
            return [b.get("event", "") for b in self.bodies]


@contextmanager
def webhook_server(status: int = 200):
    hook = Hook()
    hook.status = status

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            with hook.lock:
                hook.bodies.append(json.loads(raw or b"{}"))
            self.send_response(hook.status)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):  # keep test output quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hook.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/secret-path-token"
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
