"""The part every scripted test server shares: a stdlib HTTP server on 127.0.0.1.

Tests never reach beyond loopback; each server binds 127.0.0.1 (port 0: the OS picks
a free one), serves from a daemon thread, and is used in a ``with`` block that stops
it and frees the port.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class LoopbackServer:
    """``handler`` served on 127.0.0.1:``port`` while the ``with`` block runs."""

    def __init__(
        self, handler: type[BaseHTTPRequestHandler], port: int = 0, poll_s: float = 0.5
    ) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(poll_s,),
                                       daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
