"""A deliberately misbehaving HTTP server on 127.0.0.1, for clients that must survive one.

By default it is a small, honest Bazel-protocol cache in memory (PUT stores, GET serves
or answers 404). Routes replace that per path with a *behaviour*: a garbage status line,
a body cut short, headers or a body drip-fed, a huge body, a redirect, a hang, a reset,
any status. Every request it receives is recorded (request line, headers, body), so a
test can assert what a client sent and what it never sent.

    with HostileServer() as server:
        server.on("/ac/" + "a" * 64, drip_body(interval=0.1, count=30))
        ...  # point the client at server.url
        assert [r.method for r in server.requests] == ["GET"]

One thread accepts and one thread serves each connection (one request per connection,
then close); ``stop()`` ends and joins them all, so nothing outlives a test.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import struct
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

POLL_S = 0.05
MAX_HEAD = 64 << 10
MAX_STORED_BODY = 256 << 20
CHUNK_SIZE = 64 << 10


@dataclass(frozen=True)
class Request:
    """One request as received: ``line`` is the request line, header names are lower case."""

    method: str
    target: str
    line: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Exchange:
    """What a behaviour works with: the client's socket and request, and the stop signal.

    ``send`` and ``pause`` return False once the client went away or the server stops,
    so that a behaviour ends instead of outliving its test.
    """

    sock: socket.socket
    request: Request
    stopping: threading.Event
    store: dict[str, bytes]

    def send(self, data: bytes) -> bool:
        view = memoryview(data)
        while view:
            if self.stopping.is_set():
                return False
            try:
                view = view[self.sock.send(view):]
            except TimeoutError:
                continue
            except OSError:
                return False
        return True

    def pause(self, seconds: float) -> bool:
        return not self.stopping.wait(seconds)

    def wait_for_close(self) -> None:
        """Block until the client closes its end or the server stops (a hang)."""
        while not self.stopping.is_set():
            try:
                if not self.sock.recv(CHUNK_SIZE):
                    return
            except TimeoutError:
                continue
            except OSError:
                return


@dataclass(frozen=True)
class Behaviour:
    """How to answer one request. ``reads_body`` False leaves a PUT body unread."""

    act: Callable[[Exchange], None]
    reads_body: bool = True
    name: str = ""


# --------------------------------------------------------------------------- behaviours
def _head(status: int, headers: dict[str, str] | None = None, reason: str = "X") -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def answer(status: int = 200, body: bytes = b"", *, headers: dict[str, str] | None = None,
           length: bool = True) -> Behaviour:
    """A complete answer; ``length=False`` leaves out Content-Length (body ends at close)."""
    extra = {"Content-Length": str(len(body))} if length else {}

    def act(ex: Exchange) -> None:
        ex.send(_head(status, {**extra, **(headers or {})}) + body)

    return Behaviour(act, name=f"answer {status}")


def raw(data: bytes) -> Behaviour:
    """Send exactly ``data`` (a garbage status line, broken headers, ...) and close."""

    def act(ex: Exchange) -> None:
        ex.send(data)

    return Behaviour(act, name="raw")


def garbage_status() -> Behaviour:
    """A status line that is not HTTP at all."""
    return raw(b"BANANA 200 YES\r\n\r\n")


def close_mid_body(body: bytes = b"0123456789", announced: int = 1000) -> Behaviour:
    """Announce ``announced`` bytes, send ``body`` (fewer), then close the connection."""
    return raw(_head(200, {"Content-Length": str(announced)}) + body)


def reset() -> Behaviour:
    """Answer with a TCP reset (RST) instead of any HTTP."""

    def act(ex: Exchange) -> None:
        ex.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    return Behaviour(act, name="reset")


def drip_headers(interval: float = 0.1, count: int = 50) -> Behaviour:
    """A status line, then one header line every ``interval`` s, ``count`` times."""

    def act(ex: Exchange) -> None:
        if not ex.send(b"HTTP/1.1 200 OK\r\n"):
            return
        for n in range(count):
            if not (ex.pause(interval) and ex.send(f"X-Drip-{n}: {n}\r\n".encode())):
                return
        ex.send(b"Content-Length: 0\r\n\r\n")

    return Behaviour(act, name="drip headers")


def drip_body(interval: float = 0.1, count: int = 50, *, length: bool = True) -> Behaviour:
    """Headers at once, then one byte of body every ``interval`` s, ``count`` bytes."""

    def act(ex: Exchange) -> None:
        if not ex.send(_head(200, {"Content-Length": str(count)} if length else {})):
            return
        for _ in range(count):
            if not (ex.pause(interval) and ex.send(b"x")):
                return

    return Behaviour(act, name="drip body")


def stream(size: int, *, announce: bool = True, chunked: bool = False) -> Behaviour:
    """A huge body of zeros, sent as fast as the client reads, until ``size`` bytes or
    the client hangs up: with Content-Length (``announce``), chunked, or neither."""
    block = bytes(CHUNK_SIZE)

    def act(ex: Exchange) -> None:
        headers = ({"Transfer-Encoding": "chunked"} if chunked
                   else {"Content-Length": str(size)} if announce else {})
        if not ex.send(_head(200, headers)):
            return
        frame = f"{len(block):x}\r\n".encode() + block + b"\r\n" if chunked else block
        for _ in range(size // len(block)):
            if not ex.send(frame):
                return
        if chunked:
            ex.send(b"0\r\n\r\n")

    return Behaviour(act, name="stream")


def redirect(location: str, status: int = 302) -> Behaviour:
    """A redirect to ``location`` (which a careful client never follows)."""
    return answer(status, headers={"Location": location})


def hang(*, reads_body: bool = True) -> Behaviour:
    """Take the request (and its body, unless ``reads_body`` is False) and never answer."""
    return Behaviour(Exchange.wait_for_close, reads_body=reads_body, name="hang")


def slow(seconds: float, then: Behaviour) -> Behaviour:
    """Wait ``seconds``, then behave as ``then``."""

    def act(ex: Exchange) -> None:
        if ex.pause(seconds):
            then.act(ex)

    return Behaviour(act, reads_body=then.reads_body, name=f"slow {then.name}")


def echo_authorization(pad: int = 0) -> Behaviour:
    """Send the request's own Authorization value back in a broken status line, after
    ``pad`` filler characters: a hostile server trying to get the credential printed
    in the client's warnings (whole, or cut in half where a long message is cut)."""

    def act(ex: Exchange) -> None:
        echoed = "x" * pad + ex.request.headers.get("authorization", "")
        ex.send(f"HTTP/1.1 {echoed}\r\n\r\n".encode())

    return Behaviour(act, name="echo authorization")


def honest() -> Behaviour:
    """The default: a plain cache; PUT stores the body (201), GET serves it or answers 404."""

    def act(ex: Exchange) -> None:
        request = ex.request
        if request.method == "PUT":
            ex.store[request.target] = request.body
            ex.send(_head(201, {"Content-Length": "0"}))
        elif request.target in ex.store:
            body = ex.store[request.target]
            ex.send(_head(200, {"Content-Length": str(len(body))}) + body)
        else:
            ex.send(_head(404, {"Content-Length": "0"}))

    return Behaviour(act, name="honest")


# --------------------------------------------------------------------------- server
@dataclass
class _Route:
    method: str | None
    path: str
    behaviour: Behaviour

    def matches(self, method: str, target: str) -> bool:
        if self.method is not None and self.method != method:
            return False
        if self.path.endswith("*"):
            return target.startswith(self.path[:-1])
        return target == self.path


@dataclass
class HostileServer:
    """The server; ``url`` is its base (``http://127.0.0.1:<port>``), no path.

    ``greeting`` is sent the moment a client connects, before reading anything (e.g.
    plain text to a client that expects a TLS handshake). ``tls`` (a certificate and
    key file, see ``self_signed``) makes it speak https, misbehaving just the same.
    """

    greeting: bytes = b""
    store: dict[str, bytes] = field(default_factory=dict)
    tls: tuple[Path, Path] | None = None

    def __post_init__(self) -> None:
        self._routes: list[_Route] = []
        self._requests: list[Request] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(POLL_S)
        self.port = self._listener.getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"
        self._context: ssl.SSLContext | None = None
        if self.tls:
            self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._context.load_cert_chain(*self.tls)
        self._spawn(self._accept_loop, "hostile-accept")

    # ------------------------------------------------------------------ configuration
    def on(self, path: str, behaviour: Behaviour, *, method: str | None = None) -> None:
        """Answer requests for ``path`` (exact, or a prefix ending in ``*``) with
        ``behaviour``; the latest matching route wins."""
        with self._lock:
            self._routes.append(_Route(method, path, behaviour))

    @property
    def requests(self) -> list[Request]:
        """Every request received so far, in order."""
        with self._lock:
            return list(self._requests)

    def sent(self, method: str) -> list[Request]:
        """The requests received with one HTTP method."""
        return [r for r in self.requests if r.method == method]

    # ------------------------------------------------------------------ lifetime
    def stop(self) -> list[str]:
        """Stop serving, end every connection, join every thread; return the names of
        threads that did not end (empty when nothing outlived the server)."""
        self._stopping.set()
        self._threads[0].join(timeout=5)  # the accept loop: no connection comes after it
        self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in list(self._threads):
            thread.join(timeout=5)
        for sock in sockets:
            sock.close()
        return [t.name for t in self._threads if t.is_alive()]

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc: object) -> None:
        left = self.stop()
        if left:
            raise RuntimeError(f"hostile server threads outlived it: {left}")

    def _spawn(self, target: Callable[..., None], name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(POLL_S)
            with self._lock:
                self._sockets.append(sock)
            self._spawn(self._serve, f"hostile-conn-{sock.fileno()}", sock)

    # ------------------------------------------------------------------ one connection
    def _serve(self, sock: socket.socket) -> None:
        try:
            if self._context is not None:
                sock = self._wrap(sock)
            if self.greeting:
                sock.sendall(self.greeting)
            head = self._read_head(sock)
            if head is None:
                return
            method, target, line, headers, rest = head
            behaviour = self._route(method, target)
            body = rest
            if behaviour.reads_body:
                body = self._read_body(sock, rest, int(headers.get("content-length", "0") or 0))
            request = Request(method, target, line, headers, body)
            with self._lock:
                self._requests.append(request)
            behaviour.act(Exchange(sock, request, self._stopping, self.store))
        except (OSError, ValueError):  # the client went away, or sent nonsense
            pass
        finally:
            sock.close()

    def _wrap(self, sock: socket.socket) -> ssl.SSLSocket:
        sock.settimeout(5)
        tls = self._context.wrap_socket(sock, server_side=True)  # type: ignore[union-attr]
        tls.settimeout(POLL_S)
        with self._lock:
            self._sockets.append(tls)
        return tls

    def _route(self, method: str, target: str) -> Behaviour:
        with self._lock:
            for route in reversed(self._routes):
                if route.matches(method, target):
                    return route.behaviour
        return honest()

    def _recv(self, sock: socket.socket) -> bytes | None:
        """Some bytes; b'' when the client closed; None when the server stops."""
        while not self._stopping.is_set():
            try:
                return sock.recv(CHUNK_SIZE)
            except TimeoutError:
                continue
        return None

    def _read_head(self, sock: socket.socket) -> tuple[str, str, str, dict[str, str], bytes] | None:
        """Method, target, request line, headers and the bytes read past the head."""
        data = b""
        while b"\r\n\r\n" not in data:
            if len(data) > MAX_HEAD:
                return None
            chunk = self._recv(sock)
            if not chunk:
                return None
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        line, *header_lines = head.decode("latin-1").split("\r\n")
        parts = line.split(" ")
        method, target = (parts[0], parts[1]) if len(parts) >= 2 else (line, "")
        headers = {}
        for header in header_lines:
            name, _, value = header.partition(":")
            headers[name.strip().lower()] = value.strip()
        return method, target, line, headers, rest

    def _read_body(self, sock: socket.socket, rest: bytes, length: int) -> bytes:
        body = bytearray(rest)
        while len(body) < min(length, MAX_STORED_BODY):
            chunk = self._recv(sock)
            if not chunk:
                break
            body += chunk
        return bytes(body)


def self_signed(folder: Path) -> tuple[Path, Path] | None:
    """A certificate and key for 127.0.0.1 made with the ``openssl`` command (None when
    it is not installed): the certificate is also the CA a client must trust."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key
