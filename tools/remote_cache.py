"""A client for Bazel's HTTP remote cache protocol, as bazel-remote and nginx+DAV serve it.

- ``GET``/``PUT <url>/ac/<sha256>``: the action cache, here one result record (JSON);
- ``GET``/``PUT <url>/cas/<sha256>``: content-addressed blobs, named by their sha256.

A shared cache is a convenience, so the server is never trusted with the build:

- **It never fails the build.** Every transport problem (refused or reset connection,
  TLS error, broken status line or headers, a body cut short, a redirect, a 5xx) is
  caught and becomes one warning line and "no answer": a miss, or an upload that did
  not go. No exception from the network ever reaches the caller.
- **It never stalls the build.** Each request has one deadline for the whole exchange
  (5 s by default), enforced by per-read socket timeouts *and* a watchdog that shuts
  the socket down, so a server that drips bytes cannot stretch it. After 3 failures, or
  30 s spent talking to the remote in the run, the remote is switched off for the rest
  of the run, with one line that says so. A refused connection or an unknown host
  switches it off at once: nothing is listening, asking again only costs time.
- **It never blows the memory.** Records are capped at 1 MiB and blobs at 512 MiB (or
  ``DSV4_REMOTE_CACHE_MAX_BLOB``); a body over its cap is refused on its announced
  length or as soon as the bytes read pass the cap.
- **It never gives a false pass.** A blob is returned only when its sha256 is its name.
- **A read-only credential is normal.** A PUT answered 401 or 403 gives one line; no
  upload is tried again in the run, reads go on, and it is not a failure of the remote.
- **Secrets stay secret.** ``DSV4_REMOTE_CACHE_TOKEN`` goes out as a bearer
  ``Authorization`` header, and ``user:password@`` in the URL as basic auth; neither is
  part of the URL requested, a message, a repr or an exception. Redirects are never
  followed, so a credential only ever reaches the configured host.

Stdlib only (``http.client``, so that redirects and reads are under control): it runs
before any environment exists. One thread at a time per client.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import io
import ipaddress
import math
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass

TIMEOUT_S = 5.0
MAX_RECORD = 1 << 20
MAX_BLOB = 512 << 20
BUDGET_S = 30.0
MAX_FAILURES = 3
CHUNK = 64 << 10
KINDS = ("ac", "cas")
_HEX = frozenset("0123456789abcdef")
_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")
_EXAMPLE = "http://cache.example:8080/dsv4"


class RemoteUnavailable(Exception):
    """One exchange gave no usable answer; ``str()`` says why, fit for a warning line.

    ``fatal`` marks a server that is not there at all (refused, unknown host): asking it
    again in this run is pointless.

    >>> str(RemoteUnavailable("refused the connection", fatal=True))
    'refused the connection'
    """

    def __init__(self, what: str, *, fatal: bool = False) -> None:
        super().__init__(what)
        self.fatal = fatal


class _Secret:
    """A credential that shows as ``<hidden>`` in reprs, tracebacks and ``vars()``."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "<hidden>"

    __str__ = __repr__


# --------------------------------------------------------------------------- configuration
def redact(url: str) -> str:
    """The URL without credentials, query or fragment, fit to print in a log.

    Credentials end at the *last* ``@``, so even an unencoded ``/``, ``?`` or ``#`` in a
    password cannot push part of it into the printed host or path.

    >>> redact("https://reader:s3cret@cache.example:8443/dsv4?sig=abc")
    'https://cache.example:8443/dsv4'
    """
    text = url.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    rest = rest.rpartition("@")[2].split("?", 1)[0].split("#", 1)[0]
    shown = f"{scheme}://{rest}" if sep else rest
    return "".join(c if c.isprintable() and not c.isspace() else "?" for c in shown)


@dataclass(frozen=True)
class _Endpoint:
    """Where to connect and what to send, parsed from the configured URL."""

    scheme: str
    host: str
    port: int
    prefix: str
    auth: _Secret | None


def _url_error(url: str, problem: str) -> ValueError:
    return ValueError(
        f"DSV4_REMOTE_CACHE={redact(url)!r} {problem}; expected e.g. {_EXAMPLE} "
        "(percent-encode '@', ':', '/', '?' and '#' in a user name or password)"
    )


def _parse_url(url: str) -> _Endpoint:
    """Split the URL into an endpoint, turning ``user:password@`` into a basic-auth header."""
    text = url.strip()
    if any(c.isspace() or not c.isprintable() for c in text):
        raise _url_error(text, "holds spaces or control characters")
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError:
        raise _url_error(text, "has no valid host and port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _url_error(text, "is not an http(s) URL")
    if parts.query or parts.fragment or "@" in parts.path:
        raise _url_error(text, "has a query, a fragment or a stray '@'")
    auth = None
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        user, _, password = userinfo.partition(":")
        name = urllib.parse.unquote_to_bytes(user)
        if not name or b":" in name:
            raise _url_error(text, "has credentials with an empty user name or one holding ':'")
        secret = name + b":" + urllib.parse.unquote_to_bytes(password)
        auth = _Secret("Basic " + base64.b64encode(secret).decode("ascii"))
    return _Endpoint(
        scheme=parts.scheme, host=parts.hostname,
        port=port or (443 if parts.scheme == "https" else 80),
        prefix=parts.path.rstrip("/"), auth=auth,
    )


def _bearer(token: str | None) -> _Secret | None:
    """The ``Authorization`` value for a token, which must be one printable ASCII word."""
    token = (token or "").strip()  # a token file's trailing newline
    if not token:
        return None
    if not all("!" <= c <= "~" for c in token):
        raise ValueError(
            f"DSV4_REMOTE_CACHE_TOKEN holds whitespace, control or non-ASCII characters "
            f"({len(token)} characters, not shown); accepted: one word of printable ASCII"
        )
    return _Secret(f"Bearer {token}")


def _switch(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(
        f"{name}={value[:20]!r} is not a switch; accepted: {'/'.join(_ON)} (on) "
        f"or {'/'.join(_OFF[1:])} or empty (off)"
    )


def _positive(env: Mapping[str, str], name: str, default: float, *, whole: bool) -> float:
    """A positive number from the environment, or ``default`` when unset or empty."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value: float = int(raw) if whole else float(raw)
    except ValueError:
        value = 0
    if not 0 < value < math.inf:
        kind = "a positive whole number of bytes" if whole else "a positive number of seconds"
        raise ValueError(f"{name}={raw[:20]!r} is not accepted; expected {kind}")
    return value


# --------------------------------------------------------------------------- transport
def _left(deadline: float) -> float:
    """Seconds until the deadline; a read that starts after it fails at once."""
    return max(deadline - time.monotonic(), 0.001)


class _Watchdog:
    """Shuts the current socket down at the deadline, so that even a read blocked inside
    ``http.client`` (a status line or headers arriving a byte at a time) returns."""

    def __init__(self, deadline: float) -> None:
        self.fired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(_left(deadline), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def arm(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self.fired:
                self._shut()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            self._shut()

    def _shut(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):  # the plain socket's, also for TLS
                socket.socket.shutdown(self._sock, socket.SHUT_RDWR)

    def stop(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._sock = None


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _resolve(host: str, port: int, deadline: float) -> list[tuple]:
    """Addresses for the host, with name resolution bounded by the deadline too."""
    if _is_address(host):
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: dict[str, object] = {}

    def work() -> None:
        try:
            found["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except Exception as exc:  # handed to the caller's thread
            found["error"] = exc

    worker = threading.Thread(target=work, name="remote-cache-resolve", daemon=True)
    worker.start()
    worker.join(_left(deadline))
    if "error" in found:
        raise found["error"]  # type: ignore[misc]
    if "infos" not in found:
        raise TimeoutError("name resolution timed out")
    return found["infos"]  # type: ignore[return-value]


def _connect(point: _Endpoint, deadline: float, watch: _Watchdog,
             context: ssl.SSLContext | None) -> socket.socket:
    """A connected (and, for https, handshaken) socket, armed on the watchdog."""
    error: OSError = ConnectionRefusedError("no address to connect to")
    for family, kind, proto, _, address in _resolve(point.host, point.port, deadline):
        sock = socket.socket(family, kind, proto)
        watch.arm(sock)
        try:
            sock.settimeout(_left(deadline))
            sock.connect(address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock if context is None else _handshake(sock, point.host, deadline, watch, context)
    raise error


def _handshake(sock: socket.socket, host: str, deadline: float, watch: _Watchdog,
               context: ssl.SSLContext) -> ssl.SSLSocket:
    """TLS over a connected socket, the handshake under the watchdog too."""
    try:
        tls = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
    except BaseException:
        sock.close()
        raise
    watch.arm(tls)  # the plain socket was detached by the wrap
    try:
        tls.settimeout(_left(deadline))
        tls.do_handshake()
    except BaseException:
        tls.close()
        raise
    return tls


def _read_body(response: http.client.HTTPResponse, sock: socket.socket, cap: int,
               deadline: float) -> bytes:
    """The body, read a chunk at a time: never more than ``cap`` + 1 bytes, never past the
    deadline, and never shorter than the announced length."""
    announced = response.length  # None when chunked or not announced
    if announced is not None and announced > cap:
        raise RemoteUnavailable(f"announced a {announced}-byte body, over the {cap}-byte cap")
    body = io.BytesIO()
    size = 0
    while True:
        sock.settimeout(_left(deadline))
        chunk = response.read1(min(CHUNK, cap + 1 - size))
        if not chunk:
            break
        size += len(chunk)
        if size > cap:
            raise RemoteUnavailable(f"sent a body over the {cap}-byte cap")
        body.write(chunk)
    if announced is not None and size < announced:
        raise RemoteUnavailable(f"closed the connection mid-body ({size} of {announced} bytes)")
    return body.getvalue()


def _timed_out(seconds: float) -> RemoteUnavailable:
    return RemoteUnavailable(f"gave no complete answer within {round(seconds, 2):g} s")


def _why(exc: BaseException, seconds: float) -> RemoteUnavailable:
    """The warning text for a transport exception (the client masks secrets in it)."""
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, TimeoutError):
        return _timed_out(seconds)
    if isinstance(exc, ConnectionRefusedError):
        return RemoteUnavailable("refused the connection", fatal=True)
    if isinstance(exc, socket.gaierror):
        return RemoteUnavailable("has a host name that does not resolve", fatal=True)
    if isinstance(exc, http.client.RemoteDisconnected):  # a ConnectionResetError too
        return RemoteUnavailable("closed the connection without answering")
    if isinstance(exc, ConnectionResetError):
        return RemoteUnavailable("reset the connection")
    if isinstance(exc, ssl.SSLError):
        return RemoteUnavailable(f"failed TLS ({detail})")
    if isinstance(exc, (http.client.HTTPException, ValueError)):
        return RemoteUnavailable(f"sent a broken answer ({detail})")
    return RemoteUnavailable(f"failed ({detail})")


# --------------------------------------------------------------------------- client
class RemoteCache:
    """One remote cache endpoint, used for a whole run; ``warn`` receives each warning line.

    ``put`` goes out only with ``upload`` on; ``disabled`` turns true once the remote was
    switched off for the run (budget spent or server gone), after which every call
    answers at once without touching the network.

    >>> remote = RemoteCache("http://cache.example:8080/dsv4", token=None, upload=False,
    ...                      warn=print)
    >>> remote.shown, remote.upload, remote.disabled
    ('http://cache.example:8080/dsv4', False, False)
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None,
        upload: bool,
        warn: Callable[[str], None],
        timeout: float = TIMEOUT_S,
        max_blob: int = MAX_BLOB,
        budget_s: float = BUDGET_S,
        max_failures: int = MAX_FAILURES,
    ) -> None:
        point = _parse_url(url)
        bearer = _bearer(token)
        if point.auth is not None and bearer is not None:
            raise ValueError(
                f"DSV4_REMOTE_CACHE={redact(url)!r} has a user:password and "
                "DSV4_REMOTE_CACHE_TOKEN is set too; accepted: one of the two"
            )
        self._point = point
        self._auth = point.auth or bearer
        self.shown = self.url = redact(url).rstrip("/")
        self.upload = upload
        self.disabled = False
        self.timeout = float(timeout)
        self.max_blob = int(max_blob)
        self.budget_s = float(budget_s)
        self.max_failures = int(max_failures)
        self._warn = warn
        self._failures = 0
        self._spent = 0.0
        self._context = ssl.create_default_context() if point.scheme == "https" else None
        self._secrets = _secrets_of(url, self._auth)

    @classmethod
    def from_environment(
        cls, env: Mapping[str, str], *, warn: Callable[[str], None]
    ) -> RemoteCache | None:
        """The remote the environment configures, or None when ``DSV4_REMOTE_CACHE`` is unset.

        Reads ``DSV4_REMOTE_CACHE`` (the URL, optionally ``user:password@``),
        ``DSV4_REMOTE_CACHE_TOKEN`` (a bearer token), ``DSV4_REMOTE_CACHE_UPLOAD``
        (1/true/yes to write), ``DSV4_REMOTE_CACHE_MAX_BLOB`` (bytes) and
        ``DSV4_REMOTE_CACHE_TIMEOUT`` (seconds per request). A bad value raises
        ValueError naming the variable and what is accepted, never showing a secret.

        >>> RemoteCache.from_environment({}, warn=print) is None
        True
        >>> RemoteCache.from_environment({"DSV4_REMOTE_CACHE": "http://c:8080/x",
        ...                               "DSV4_REMOTE_CACHE_UPLOAD": "1"}, warn=print).upload
        True
        """
        url = env.get("DSV4_REMOTE_CACHE", "").strip()
        if not url:
            return None
        return cls(
            url, token=env.get("DSV4_REMOTE_CACHE_TOKEN"), warn=warn,
            upload=_switch(env, "DSV4_REMOTE_CACHE_UPLOAD"),
            max_blob=int(_positive(env, "DSV4_REMOTE_CACHE_MAX_BLOB", MAX_BLOB, whole=True)),
            timeout=_positive(env, "DSV4_REMOTE_CACHE_TIMEOUT", TIMEOUT_S, whole=False),
        )

    def __repr__(self) -> str:
        return f"RemoteCache({self.shown!r}, upload={self.upload}, disabled={self.disabled})"

    # ------------------------------------------------------------------ protocol
    def get_record(self, key: str) -> bytes | None:
        """The result record stored under ``key``, or None: absent, over 1 MiB, or no answer.

        >>> remote.get_record("ab" * 32) is None  # doctest: +SKIP
        True
        """
        _check_name(key)
        return self._get(f"ac/{key}", MAX_RECORD)

    def get_blob(self, sha256: str) -> bytes | None:
        """The blob named ``sha256``, or None: absent, over the cap, no answer, or a body
        whose sha256 is not its name (so a damaged server costs a rerun, not a false pass).

        >>> remote.get_blob(hashlib.sha256(b"<junit/>").hexdigest())  # doctest: +SKIP
        b'<junit/>'
        """
        _check_name(sha256)
        data = self._get(f"cas/{sha256}", self.max_blob)
        if data is None or hashlib.sha256(data).hexdigest() == sha256:
            return data
        self._failed(f"GET cas/{sha256[:12]}…", "a miss",
                     RemoteUnavailable("sent a blob whose sha256 is not its name"))
        return None

    def put(self, kind: str, name: str, data: bytes) -> bool:
        """Upload one entry (``kind`` 'ac' or 'cas'); True when the server took it.

        False, and nothing sent, when uploads are off, the remote is switched off, or the
        entry is over its cap (readers would refuse it). A 401 or 403 means a read-only
        credential: one warning, then no more uploads in the run, while reads go on.

        >>> sha = hashlib.sha256(b"<junit/>").hexdigest()
        >>> remote.put("cas", sha, b"<junit/>")  # doctest: +SKIP
        True
        """
        if kind not in KINDS:
            raise ValueError(f"remote cache kind {kind!r}; accepted: {', '.join(KINDS)}")
        _check_name(name)
        cap = MAX_RECORD if kind == "ac" else self.max_blob
        if not self.upload or self.disabled or len(data) > cap:
            return False
        status = self._call("PUT", f"{kind}/{name}", body=data, cap=0)
        if status in (401, 403):
            self.upload = False
            self._say(f"upload refused by the server (HTTP {status}): this credential "
                      "cannot write; not uploading again in this run")
            return False
        return status is not None

    # ------------------------------------------------------------------ exchange
    def _get(self, path: str, cap: int) -> bytes | None:
        answer = self._call("GET", path, cap=cap)
        return answer if isinstance(answer, bytes) else None

    def _call(self, method: str, path: str, *, cap: int,
              body: bytes | None = None) -> bytes | int | None:
        """One exchange under the run's budget: the body of a 2xx GET, the status of a
        2xx or refused (401/403) PUT, 404 for a missing GET; None when it failed (warned)."""
        if self.disabled:
            return None
        seconds = min(self.timeout, self.budget_s - self._spent)
        if seconds <= 0:
            self._off(f"{self.budget_s:g} s of this run spent talking to it")
            return None
        started = time.monotonic()
        try:
            answer = self._judge(method, *self._exchange(method, path, body, cap, seconds))
            failure = None
        except RemoteUnavailable as exc:
            answer, failure = None, exc
        self._spent += time.monotonic() - started
        kind, _, name = path.partition("/")
        what = f"{method} {kind}/{name[:12]}…"
        if failure is not None:
            self._failed(what, "a miss" if method == "GET" else "not uploaded", failure)
        return answer

    @staticmethod
    def _judge(method: str, status: int, body: bytes | None) -> bytes | int | None:
        """What a status means: redirects and errors are failures; 404 on GET is a miss."""
        if 200 <= status < 300:
            return body if method == "GET" else status
        if method == "GET" and status == 404:
            return status
        if method == "PUT" and status in (401, 403):
            return status
        if 300 <= status < 400:
            raise RemoteUnavailable(f"answered HTTP {status}, a redirect, which is never followed")
        raise RemoteUnavailable(f"answered HTTP {status}")

    def _exchange(self, method: str, path: str, body: bytes | None, cap: int,
                  seconds: float) -> tuple[int, bytes | None]:
        """Status and (for a 2xx GET) body of one request, all of it within ``seconds``."""
        deadline = time.monotonic() + max(seconds, 0.0)
        watch = _Watchdog(deadline)
        sock: socket.socket | None = None
        conn: http.client.HTTPConnection | None = None
        try:
            sock = _connect(self._point, deadline, watch, self._context)
            conn = self._connection(sock)
            conn.request(method, f"{self._point.prefix}/{path}", body=body,
                         headers=self._headers(body is not None))
            sock.settimeout(_left(deadline))
            response = conn.getresponse()
            data = None
            if method == "GET" and 200 <= response.status < 300:
                data = _read_body(response, sock, cap, deadline)
            if watch.fired:  # a body cut by the watchdog can look complete
                raise _timed_out(seconds)
            return response.status, data
        except Exception as exc:  # whatever the network caused ends here, as a warning
            if watch.fired:
                raise _timed_out(seconds) from None
            if isinstance(exc, RemoteUnavailable):
                raise
            raise _why(exc, seconds) from None
        finally:
            watch.stop()
            if conn is not None:
                conn.close()
            elif sock is not None:
                sock.close()

    def _connection(self, sock: socket.socket) -> http.client.HTTPConnection:
        point = self._point
        if self._context is not None:
            conn = http.client.HTTPSConnection(point.host, point.port, context=self._context)
        else:
            conn = http.client.HTTPConnection(point.host, point.port)
        conn.sock = sock  # connected already, under the deadline: never reconnects
        return conn

    def _headers(self, has_body: bool) -> dict[str, str]:
        headers = {"User-Agent": "dsv4-remote-cache"}
        if self._auth is not None:
            headers["Authorization"] = self._auth.value
        if has_body:
            headers["Content-Type"] = "application/octet-stream"
        return headers

    # ------------------------------------------------------------------ budget and lines
    def _failed(self, what: str, outcome: str, failure: RemoteUnavailable) -> None:
        """Count a failure: one warning line, or the one line that switches the remote off."""
        if self.disabled:
            return
        self._failures += 1
        reason = self._mask(str(failure))
        if failure.fatal:
            self._off(f"{reason} on {what}")
        elif self._failures >= self.max_failures:
            self._off(f"{reason} on {what}; {self._failures} failures")
        elif self._spent >= self.budget_s:
            self._off(f"{reason} on {what}; {self.budget_s:g} s of this run spent talking to it")
        else:
            self._warn(self._clean(
                f"warning: remote cache {self.shown} {reason} ({what}); {outcome} (failure "
                f"{self._failures} of {self.max_failures} before it is switched off for the run)"
            ))

    def _off(self, reason: str) -> None:
        """The one line that says the remote is left alone for the rest of the run."""
        if self.disabled:
            return
        self.disabled = True
        self._warn(self._clean(
            f"warning: remote cache {self.shown} unusable ({reason}); "
            "running locally and not asking it again in this run"
        ))

    def _say(self, text: str) -> None:
        self._warn(self._clean(f"warning: remote cache {self.shown}: {text}"))

    def _mask(self, text: str) -> str:
        """``text`` with every form of the credential masked, then cut to a sane length
        (a server chose part of it); masking first, so a cut never leaves half a secret."""
        for secret in self._secrets:
            text = text.replace(secret.value, "***")
        return text if len(text) <= 200 else text[:199] + "…"

    @staticmethod
    def _clean(line: str) -> str:
        """One printable line: a server's bytes cannot break it or steer a terminal."""
        return "".join(c if c.isprintable() else "?" for c in line)


def _check_name(name: str) -> None:
    """Names are sha256 hex digests; anything else is a caller's bug, not a server's."""
    if not (isinstance(name, str) and len(name) == 64 and set(name) <= _HEX):
        raise ValueError(f"remote cache entry name {name!r:.80} is not a sha256 hex digest")


def _secrets_of(url: str, auth: _Secret | None) -> tuple[_Secret, ...]:
    """Every form a credential could take in a line: header value, token, password
    (encoded and decoded) and the base64 of user:password; longest first."""
    userinfo = urllib.parse.urlsplit(url.strip()).netloc.rpartition("@")[0]
    password = userinfo.partition(":")[2]
    forms = {userinfo, password, urllib.parse.unquote(password)}
    if auth is not None:
        forms |= {auth.value, auth.value.partition(" ")[2]}
    return tuple(_Secret(f) for f in sorted(forms - {""}, key=len, reverse=True))
