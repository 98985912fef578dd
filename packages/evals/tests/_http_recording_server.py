"""A loopback HTTP server that records every request and answers as a test scripts it.

It stands in for a proxy (answering 502, so a request that went through it is plain
to see in the harness's results), for a redirecting server, for a server that drops
connections, and for one that sends its body one byte at a time. Every request line
is recorded as the client sent it: through a proxy a client sends the absolute URL
(``GET http://127.0.0.1:8000/v1/models``), to a server only the path.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler

from _loopback import LoopbackServer


class RecordingServer(LoopbackServer):
    """``with RecordingServer(status=502) as srv:``; ``srv.requests`` lists "METHOD target".

    ``mode``: ``answer`` (``status`` with ``body`` and ``headers``), ``drop`` (close
    without a response), ``trickle`` (200, then one byte of ``body`` every
    ``trickle_s``), ``hang`` (answer only after ``trickle_s``).
    """

    def __init__(
        self,
        status: int = 200,
        body: bytes = b'{"ok": true}',
        headers: dict[str, str] | None = None,
        mode: str = "answer",
        trickle_s: float = 0.1,
    ) -> None:
        self.status = status
        self.body = body
        self.headers = dict(headers or {})
        self.mode = mode
        self.trickle_s = trickle_s
        self.requests: list[str] = []
        self.auth: list[str | None] = []
        self._lock = threading.Lock()
        super().__init__(self._handler(), poll_s=0.02)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                return

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length", "0") or 0)
                if length:
                    self.rfile.read(length)
                with server._lock:
                    server.requests.append(f"{self.command} {self.path}")
                    server.auth.append(self.headers.get("Authorization"))
                server._respond(self)

            do_GET = do_POST = do_PUT = do_DELETE = _any

        return Handler

    def _respond(self, h: BaseHTTPRequestHandler) -> None:
        if self.mode == "drop":
            h.close_connection = True
            return
        if self.mode == "hang":
            time.sleep(self.trickle_s)
        h.send_response(self.status)
        for key, value in self.headers.items():
            h.send_header(key, value)
        h.send_header("Content-Length", str(len(self.body)))
        h.end_headers()
        if self.mode != "trickle":
            h.wfile.write(self.body)
            return
        try:
            for i in range(len(self.body)):
                h.wfile.write(self.body[i : i + 1])
                h.wfile.flush()
                time.sleep(self.trickle_s)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up, as a deadline makes it
        h.close_connection = True
