"""The remote cache client against a server that misbehaves in every way it can.

Whatever the server does, the client answers "no answer" (a miss, an upload that did
not go) with one warning line, within its deadline, within its memory cap, without
following it anywhere and without printing a credential.
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import hostile_server as hs
import pytest
import remote_cache
from hostile_server import HostileServer
from remote_cache import MAX_RECORD, RemoteCache, redact

KEY = "a" * 64
BLOB = b"<testsuite tests='1'/>"
SHA = hashlib.sha256(BLOB).hexdigest()
TOKEN = "tok-" + "5ecret" * 4
USER, PASSWORD = "writer", "pa:ss@w/rd#1"
PASSWORD_IN_URL = "pa%3Ass%40w%2Frd%231"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
SECRETS = (TOKEN, PASSWORD, PASSWORD_IN_URL, BASIC, f"Bearer {TOKEN}", f"Basic {BASIC}")

TIMEOUT = 0.6  # the per-request deadline in these tests
SLACK = 0.5  # what the deadline may be overrun by (thread wake-ups, a loaded machine)

LINES: list[str] = []  # every warning line of the whole module, for the secrets check


def _assert_clean(texts: list[str]) -> None:
    """No secret in any text, not even the first 8 characters of one (a message cut short)."""
    fragments = {s.removeprefix("Bearer ").removeprefix("Basic ")[:8] for s in SECRETS}
    leaks = [(s, t) for t in texts for s in (*SECRETS, *fragments) if s in t]
    assert not leaks, leaks


@pytest.fixture
def lines() -> Iterator[list[str]]:
    """The warning sink: each test's lines must be single lines and hold no secret."""
    got: list[str] = []
    yield got
    LINES.extend(got)
    assert all("\n" not in line and "\r" not in line for line in got), got
    _assert_clean(got)


@pytest.fixture
def server() -> Iterator[HostileServer]:
    with HostileServer() as running:  # stops and joins every thread; raises if one lives on
        yield running


@pytest.fixture
def other() -> Iterator[HostileServer]:
    with HostileServer() as running:
        yield running


def _client(url: str, lines: list[str], *, basic: bool = False, **options) -> RemoteCache:
    """A client with a secret credential: the bearer token, or basic auth in the URL."""
    if basic:
        url = url.replace("://", f"://{USER}:{PASSWORD_IN_URL}@", 1)
    settings = {"token": None if basic else TOKEN, "upload": True, "timeout": TIMEOUT}
    return RemoteCache(url, warn=lines.append, **{**settings, **options})


def _timed(call: Callable[..., object], *args: object) -> tuple[object, float]:
    """What the call returned, and how many seconds it took."""
    started = time.monotonic()
    result = call(*args)
    return result, time.monotonic() - started


# --------------------------------------------------------------------------- an honest server
def test_an_honest_server_round_trip(server: HostileServer, lines: list[str]) -> None:
    remote = _client(server.url + "/cache", lines)
    assert remote.get_record(KEY) is None and remote.get_blob(SHA) is None  # 404s
    assert remote.put("cas", SHA, BLOB) and remote.put("ac", KEY, b"{}")
    assert remote.get_blob(SHA) == BLOB and remote.get_record(KEY) == b"{}"
    assert [r.line for r in server.requests][:2] == [
        f"GET /cache/ac/{KEY} HTTP/1.1", f"GET /cache/cas/{SHA} HTTP/1.1"]
    assert lines == [] and not remote.disabled


def test_a_404_is_a_plain_miss_not_a_failure(server: HostileServer, lines: list[str]) -> None:
    remote = _client(server.url, lines, max_failures=1)
    for _ in range(3):
        assert remote.get_record(KEY) is None
    server.store[f"/ac/{KEY}"] = b"{}"
    assert remote.get_record(KEY) == b"{}"  # one failure would have switched it off
    assert lines == [] and not remote.disabled


# --------------------------------------------------------------------------- broken answers
BROKEN_BODY = {  # a 200 whose body is broken (a PUT's answer body is never read)
    "closed mid-body": (hs.close_mid_body(b"0123456789", announced=1000),
                        "closed the connection mid-body (10 of 1000 bytes)"),
    "broken chunk size": (hs.raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n"),
                          "sent a broken answer (IncompleteRead"),
}
BROKEN = {  # what the server does, and what the warning line says about it
    **BROKEN_BODY,
    "garbage status line": (hs.garbage_status(), "sent a broken answer (BadStatusLine: BANANA"),
    "status out of range": (hs.raw(b"HTTP/1.1 99999 HUGE\r\n\r\n"), "(BadStatusLine: HTTP/1.1 99999"),
    "closed before answering": (hs.raw(b""), "closed the connection without answering"),
    "connection reset": (hs.reset(), "reset the connection"),
    "too many headers": (hs.raw(b"HTTP/1.1 200 OK\r\n" + b"X-A: 1\r\n" * 150 + b"\r\n"),
                         "got more than 100 headers"),
    "header line too long": (hs.raw(b"HTTP/1.1 200 OK\r\nX-A: " + b"a" * 70000 + b"\r\n\r\n"),
                             "(LineTooLong: got more than 65536 bytes"),
}


@pytest.mark.parametrize("name", BROKEN)
def test_a_broken_answer_is_one_line_and_no_answer(
    name: str, server: HostileServer, lines: list[str]
) -> None:
    behaviour, said = BROKEN[name]
    server.on("*", behaviour)
    remote = _client(server.url, lines, max_failures=10)
    assert remote.get_record(KEY) is None
    assert remote.get_blob(SHA) is None
    assert remote.put("cas", SHA, BLOB) is (name in BROKEN_BODY)
    assert len(lines) == 2 + (name not in BROKEN_BODY), lines
    assert all(line.startswith(f"warning: remote cache {server.url} ") for line in lines)
    assert all(said in line for line in lines), (said, lines)
    assert " (GET ac/aaaaaaaaaaaa…); a miss (failure 1 of 10 before" in lines[0]
    assert name in BROKEN_BODY or " (PUT cas/7add452b77b1…); not uploaded" in lines[2]
    assert not remote.disabled and remote.upload  # failures, not a read-only credential


def test_a_tls_failure_is_one_line(lines: list[str]) -> None:
    with HostileServer(greeting=b"HTTP/1.1 400 Not TLS\r\n\r\n") as plain:
        remote = _client(plain.url.replace("http://", "https://"), lines)
        assert remote.get_record(KEY) is None
    assert len(lines) == 1 and "failed TLS" in lines[0]


@pytest.fixture
def tls_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that clients made from now on trust (SSL_CERT_FILE)."""
    files = hs.self_signed(tmp_path)
    if files is None:
        pytest.fail("the openssl command is not installed: apt-get install -y openssl")
    monkeypatch.setenv("SSL_CERT_FILE", str(files[0]))
    return files


def test_https_with_basic_auth(tls_files: tuple[Path, Path], lines: list[str]) -> None:
    with HostileServer(tls=tls_files) as secure:
        remote = _client(secure.url + "/dsv4", lines, basic=True)
        assert remote.put("cas", SHA, BLOB) and remote.get_blob(SHA) == BLOB
        assert [r.headers["authorization"] for r in secure.requests] == [f"Basic {BASIC}"] * 2
    assert lines == []


def test_an_untrusted_certificate_is_one_line(tmp_path: Path, lines: list[str]) -> None:
    files = hs.self_signed(tmp_path)
    if files is None:
        pytest.fail("the openssl command is not installed: apt-get install -y openssl")
    with HostileServer(tls=files) as secure:
        assert _client(secure.url, lines).get_record(KEY) is None
        assert secure.requests == []  # the credential never went out
    assert len(lines) == 1 and "failed TLS (SSLCertVerificationError" in lines[0]


def test_a_drip_over_https_is_cut_at_the_deadline(tls_files: tuple[Path, Path],
                                                  lines: list[str]) -> None:
    with HostileServer(tls=tls_files) as secure:
        secure.on("*", hs.drip_headers(interval=0.1, count=30))
        got, elapsed = _timed(_client(secure.url, lines).get_record, KEY)
    assert got is None
    _assert_cut(elapsed, lines)


def test_a_blob_not_matching_its_name_is_a_miss(server: HostileServer, lines: list[str]) -> None:
    server.store[f"/cas/{SHA}"] = b"poisoned"
    assert _client(server.url, lines).get_blob(SHA) is None
    assert len(lines) == 1 and "sha256 is not its name" in lines[0]


# --------------------------------------------------------------------------- deadlines
def _assert_cut(elapsed: float, lines: list[str], deadline: float = TIMEOUT) -> None:
    assert deadline - 0.05 <= elapsed <= deadline + SLACK, elapsed
    assert len(lines) == 1 and f"no complete answer within {deadline:g} s" in lines[0], lines


@pytest.mark.parametrize("length", [True, False], ids=["announced", "until-close"])
def test_a_drip_fed_body_is_cut_at_the_deadline(
    length: bool, server: HostileServer, lines: list[str]
) -> None:
    # A byte every 0.1 s never trips a per-read timeout; only a whole-request deadline
    # stops it before the 3 s the drip lasts.
    server.on("*", hs.drip_body(interval=0.1, count=30, length=length))
    got, elapsed = _timed(_client(server.url, lines).get_record, KEY)
    assert got is None
    _assert_cut(elapsed, lines)


def test_drip_fed_headers_are_cut_at_the_deadline(server: HostileServer, lines: list[str]) -> None:
    server.on("*", hs.drip_headers(interval=0.1, count=30))
    got, elapsed = _timed(_client(server.url, lines).get_record, KEY)
    assert got is None
    _assert_cut(elapsed, lines)


def test_a_hanging_get_is_cut_at_the_deadline(server: HostileServer, lines: list[str]) -> None:
    server.on("*", hs.hang())
    got, elapsed = _timed(_client(server.url, lines).get_blob, SHA)
    assert got is None
    _assert_cut(elapsed, lines)


@pytest.mark.parametrize("reads_body", [True, False], ids=["body-taken", "body-never-read"])
def test_a_hanging_put_is_cut_at_the_deadline(
    reads_body: bool, server: HostileServer, lines: list[str]
) -> None:
    server.on("*", hs.hang(reads_body=reads_body), method="PUT")
    data = bytes(32 << 20)  # more than the socket buffers hold: the send itself blocks
    sha = hashlib.sha256(data).hexdigest()
    remote = _client(server.url, lines)
    sent, elapsed = _timed(remote.put, "cas", sha, data)
    assert sent is False
    _assert_cut(elapsed, lines)
    assert "not uploaded" in lines[0] and remote.upload  # a failure, not a refusal


def test_the_timeout_comes_from_the_environment(server: HostileServer, lines: list[str]) -> None:
    server.on("*", hs.hang())
    remote = RemoteCache.from_environment(
        {"DSV4_REMOTE_CACHE": server.url, "DSV4_REMOTE_CACHE_TIMEOUT": "0.3"}, warn=lines.append)
    got, elapsed = _timed(remote.get_record, KEY)
    assert got is None
    _assert_cut(elapsed, lines, deadline=0.3)


# --------------------------------------------------------------------------- size caps
CAP = 4 << 20


@pytest.mark.parametrize("framing", ["announced", "chunked", "until-close"])
def test_a_huge_body_is_refused_without_filling_memory(
    framing: str, server: HostileServer, lines: list[str]
) -> None:
    server.on("*", hs.stream(1 << 30, announce=framing == "announced",
                             chunked=framing == "chunked"))
    remote = _client(server.url, lines, max_blob=CAP, timeout=5.0)
    tracemalloc.start()
    try:
        got, elapsed = _timed(remote.get_blob, SHA)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got is None and elapsed < 3.0  # refused long before the 1 GiB (or the deadline)
    assert peak < CAP + (2 << 20), peak  # the cap and a chunk or two, never the body
    want = "announced a 1073741824-byte body" if framing == "announced" else "sent a body over"
    assert len(lines) == 1 and want in lines[0] and f"{CAP}-byte cap" in lines[0], lines


@pytest.mark.parametrize("framing", [True, False], ids=["announced", "until-close"])
def test_the_caps_are_exact(framing: bool, server: HostileServer, lines: list[str]) -> None:
    fits, over = bytes(1000), bytes(1001)
    server.on(f"/cas/{hashlib.sha256(fits).hexdigest()}", hs.answer(body=fits, length=framing))
    server.on(f"/cas/{hashlib.sha256(over).hexdigest()}", hs.answer(body=over, length=framing))
    server.on(f"/ac/{KEY}", hs.answer(body=bytes(MAX_RECORD), length=framing))
    server.on(f"/ac/{'b' * 64}", hs.answer(body=bytes(MAX_RECORD + 1), length=framing))
    remote = _client(server.url, lines, max_blob=1000, max_failures=10)
    assert remote.get_blob(hashlib.sha256(fits).hexdigest()) == fits
    assert remote.get_blob(hashlib.sha256(over).hexdigest()) is None
    assert remote.get_record(KEY) == bytes(MAX_RECORD)
    assert remote.get_record("b" * 64) is None
    assert len(lines) == 2 and "1000-byte cap" in lines[0] and f"{MAX_RECORD}-byte cap" in lines[1]


def test_an_entry_over_its_cap_is_not_uploaded(server: HostileServer, lines: list[str]) -> None:
    remote = _client(server.url, lines, max_blob=1000)
    big = bytes(1001)
    assert remote.put("cas", hashlib.sha256(big).hexdigest(), big) is False
    assert remote.put("ac", KEY, bytes(MAX_RECORD + 1)) is False
    assert server.requests == [] and lines == []


# --------------------------------------------------------------------------- redirects
@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_never_followed(
    status: int, server: HostileServer, other: HostileServer, lines: list[str]
) -> None:
    for basic in (False, True):
        server.on("*", hs.redirect(f"{other.url}/ac/{KEY}", status))
        remote = _client(server.url, lines, basic=basic)
        assert remote.get_record(KEY) is None
        assert remote.put("ac", KEY, b"{}") is False
    assert other.requests == []  # so it never saw a credential either
    assert len(lines) == 4 and all(f"HTTP {status}, a redirect" in line for line in lines)
    assert all(other.url not in line for line in lines)


# --------------------------------------------------------------------------- read-only
@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_put_stops_uploads_but_not_reads(
    status: int, server: HostileServer, lines: list[str]
) -> None:
    server.on("*", hs.answer(status), method="PUT")
    server.store[f"/cas/{SHA}"] = BLOB
    remote = _client(server.url, lines, basic=True, max_failures=1)
    assert remote.put("cas", SHA, BLOB) is False
    assert remote.put("cas", SHA, BLOB) is False
    assert remote.put("ac", KEY, b"{}") is False
    assert remote.get_blob(SHA) == BLOB  # reads go on
    assert remote.get_record(KEY) is None
    assert len(server.sent("PUT")) == 1 and len(server.sent("GET")) == 2
    assert lines == [
        f"warning: remote cache {server.url}: upload refused by the server (HTTP {status}): "
        "this credential cannot write; not uploading again in this run"]
    assert remote.upload is False and remote.disabled is False  # not a failure of the remote


# --------------------------------------------------------------------------- failures, budget
@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_5xx_is_a_failure(status: int, server: HostileServer, lines: list[str]) -> None:
    server.on("*", hs.answer(status, b"oops"))
    remote = _client(server.url, lines)
    assert remote.get_record(KEY) is None
    assert remote.put("cas", SHA, BLOB) is False
    assert [f"answered HTTP {status}" in line for line in lines] == [True, True]
    assert "failure 1 of 3" in lines[0] and "failure 2 of 3" in lines[1]
    assert remote.upload and not remote.disabled


def test_three_failures_switch_the_remote_off(server: HostileServer, lines: list[str]) -> None:
    server.on("*", hs.answer(500))
    remote = _client(server.url, lines)
    for _ in range(3):
        assert remote.get_record(KEY) is None
    assert remote.disabled
    assert len(lines) == 3 and "not asking it again in this run" in lines[2]
    assert "3 failures" in lines[2] and "not asking" not in lines[0] + lines[1]
    calls = (lambda: remote.get_record(KEY), lambda: remote.get_blob(SHA),
             lambda: remote.put("cas", SHA, BLOB))
    results, elapsed = _timed(lambda: [call() for _ in range(20) for call in calls])
    assert results == [None, None, False] * 20 and elapsed < 0.05
    assert len(server.requests) == 3 and len(lines) == 3  # silent, and nothing sent


def test_the_time_budget_switches_the_remote_off(server: HostileServer, lines: list[str]) -> None:
    server.on("*", hs.hang())
    remote = _client(server.url, lines, timeout=0.3, budget_s=1.0, max_failures=100)
    started = time.monotonic()
    while not remote.disabled and time.monotonic() - started < 10:
        remote.get_record(KEY)
    elapsed = time.monotonic() - started
    assert 1.0 - 0.05 <= elapsed <= 1.0 + SLACK, elapsed  # the last request gets what is left
    assert len(lines) == 4 and "1 s of this run spent talking to it" in lines[-1]
    assert sum("not asking it again" in line for line in lines) == 1
    assert remote.get_record(KEY) is None and len(server.requests) == 4


def test_the_budget_counts_slow_successes_too(server: HostileServer, lines: list[str]) -> None:
    server.on("*", hs.slow(0.25, hs.answer(200, b"{}")))
    remote = _client(server.url, lines, budget_s=0.6)
    assert remote.get_record(KEY) == b"{}"
    assert remote.get_record(KEY) == b"{}"
    assert remote.get_record(KEY) is None  # 0.1 s left: cut, and the remote is off
    assert remote.disabled and len(lines) == 1 and "spent talking to it" in lines[0]


def test_a_spent_budget_sends_nothing(server: HostileServer, lines: list[str]) -> None:
    remote = _client(server.url, lines, budget_s=0.0)
    assert remote.get_record(KEY) is None and remote.put("ac", KEY, b"{}") is False
    assert server.requests == [] and remote.disabled
    assert lines == [f"warning: remote cache {server.url} unusable (0 s of this run spent "
                     "talking to it); running locally and not asking it again in this run"]


def test_a_refused_connection_switches_off_at_once(lines: list[str]) -> None:
    with HostileServer() as gone:
        url = gone.url
    remote = _client(url, lines)
    assert remote.get_record(KEY) is None
    assert remote.put("cas", SHA, BLOB) is False and remote.get_blob(SHA) is None
    assert remote.disabled and len(lines) == 1
    assert "refused the connection" in lines[0] and "running locally" in lines[0]


def test_a_host_name_is_resolved_and_used(server: HostileServer, lines: list[str]) -> None:
    remote = _client(server.url.replace("127.0.0.1", "localhost"), lines)
    assert remote.put("cas", SHA, BLOB) and remote.get_blob(SHA) == BLOB
    assert server.requests[0].headers["host"] == f"localhost:{server.port}" and lines == []


def test_a_stuck_name_lookup_is_cut_at_the_deadline(monkeypatch: pytest.MonkeyPatch,
                                                    lines: list[str]) -> None:
    release = threading.Event()
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kw: release.wait(10) and [])
    try:
        got, elapsed = _timed(_client("http://cache.example:8080", lines).get_record, KEY)
    finally:
        release.set()  # the lookup thread ends with the test
    assert got is None
    _assert_cut(elapsed, lines)


def test_an_unknown_host_switches_off_at_once(monkeypatch: pytest.MonkeyPatch,
                                              lines: list[str]) -> None:
    def unknown(*args: object, **kw: object) -> list:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unknown)
    remote = _client("http://cache.example:8080", lines)
    assert remote.get_record(KEY) is None and remote.get_blob(SHA) is None
    assert remote.disabled and len(lines) == 1
    assert "has a host name that does not resolve" in lines[0]


# --------------------------------------------------------------------------- credentials
def test_basic_auth_is_sent_and_kept_out_of_the_url(server: HostileServer,
                                                    lines: list[str]) -> None:
    remote = _client(server.url + "/dsv4/", lines, basic=True)
    assert remote.shown == server.url + "/dsv4"
    remote.get_record(KEY)
    remote.put("cas", SHA, BLOB)
    for request in server.requests:
        assert request.headers["authorization"] == f"Basic {BASIC}"
        assert request.line in (f"GET /dsv4/ac/{KEY} HTTP/1.1", f"PUT /dsv4/cas/{SHA} HTTP/1.1")
        assert request.headers["host"] == f"127.0.0.1:{server.port}"
    assert len(server.requests) == 2 and lines == []


def test_a_bearer_token_is_sent_stripped(server: HostileServer, lines: list[str]) -> None:
    remote = _client(server.url, lines, token=f"  {TOKEN}\n")  # as read from a token file
    remote.get_record(KEY)
    (request,) = server.requests
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in request.line


def test_no_credential_sends_no_authorization(server: HostileServer, lines: list[str]) -> None:
    RemoteCache(server.url, token="\n", upload=False, warn=lines.append).get_record(KEY)
    assert "authorization" not in server.requests[0].headers


def _config_error(url: str, token: str | None = None, **env: str) -> str:
    with pytest.raises(ValueError) as caught:
        RemoteCache.from_environment(
            {"DSV4_REMOTE_CACHE": url, **({"DSV4_REMOTE_CACHE_TOKEN": token} if token else {}),
             **env}, warn=print)
    return str(caught.value)


@pytest.mark.parametrize("token", [f"{TOKEN} x", f"{TOKEN}\tx", f"{TOKEN}\r\nX-Evil: 1",
                                   f"{TOKEN}\0", f"{TOKEN}é"])
def test_a_malformed_token_is_an_error_that_hides_it(token: str) -> None:
    message = _config_error("http://cache.example:8080/x", token)
    assert message.startswith("DSV4_REMOTE_CACHE_TOKEN holds whitespace") and "printable" in message
    _assert_clean([message])


def test_credentials_and_a_token_together_are_an_error() -> None:
    message = _config_error(f"http://{USER}:{PASSWORD_IN_URL}@cache.example/x", TOKEN)
    assert "one of the two" in message and "http://cache.example/x" in message
    _assert_clean([message])


@pytest.mark.parametrize(("url", "problem"), [
    ("ftp://cache.example/x", "is not an http(s) URL"),
    ("cache.example:8080", "is not an http(s) URL"),
    ("http:///x", "is not an http(s) URL"),
    ("http://cache.example:http/x", "has no valid host and port"),
    ("http://cache.example:99999/x", "has no valid host and port"),
    ("http://cache.example/x?sig=1", "has a query"),
    ("http://cache.example/x#frag", "has a query"),
    ("http://cache.example/x y", "spaces or control characters"),
    (f"http://{USER}:pa:ss@w/rd@cache.example/x", "stray '@'"),  # an unencoded '/'
    (f"http://{USER}:pa:ss@w?rd@cache.example/x", "has a query"),  # an unencoded '?'
    (f"http://{USER}:pa:ss@w/rd:1@cache.example/x", "stray '@'"),
    (f"http://:{PASSWORD_IN_URL}@cache.example/x", "empty user name"),
    (f"http://a%3Ab:{PASSWORD_IN_URL}@cache.example/x", "holding ':'"),
])
def test_a_bad_url_is_an_error_that_hides_the_password(url: str, problem: str) -> None:
    message = _config_error(url)
    assert message.startswith("DSV4_REMOTE_CACHE=") and problem in message, message
    assert "expected e.g. http://" in message
    _assert_clean([message])
    assert "w/rd" not in message and "rd@" not in message and "ss@" not in message


@pytest.mark.parametrize(("name", "value", "accepted"), [
    ("DSV4_REMOTE_CACHE_UPLOAD", "maybe", "accepted: 1/true/yes/on (on)"),
    ("DSV4_REMOTE_CACHE_MAX_BLOB", "0", "a positive whole number of bytes"),
    ("DSV4_REMOTE_CACHE_MAX_BLOB", "-5", "a positive whole number of bytes"),
    ("DSV4_REMOTE_CACHE_MAX_BLOB", "1.5", "a positive whole number of bytes"),
    ("DSV4_REMOTE_CACHE_MAX_BLOB", "lots", "a positive whole number of bytes"),
    ("DSV4_REMOTE_CACHE_TIMEOUT", "0", "a positive number of seconds"),
    ("DSV4_REMOTE_CACHE_TIMEOUT", "nan", "a positive number of seconds"),
    ("DSV4_REMOTE_CACHE_TIMEOUT", "inf", "a positive number of seconds"),
    ("DSV4_REMOTE_CACHE_TIMEOUT", "soon", "a positive number of seconds"),
])
def test_a_bad_setting_names_the_variable(name: str, value: str, accepted: str) -> None:
    message = _config_error(f"http://{USER}:{PASSWORD_IN_URL}@cache.example/x", **{name: value})
    assert message.startswith(f"{name}={value!r}") and accepted in message, message
    _assert_clean([message])


def test_from_environment_reads_every_setting() -> None:
    assert RemoteCache.from_environment({}, warn=print) is None
    assert RemoteCache.from_environment({"DSV4_REMOTE_CACHE": "  "}, warn=print) is None
    remote = RemoteCache.from_environment({
        "DSV4_REMOTE_CACHE": f"https://{USER}:{PASSWORD_IN_URL}@cache.example:8443/dsv4/",
        "DSV4_REMOTE_CACHE_UPLOAD": "Yes", "DSV4_REMOTE_CACHE_MAX_BLOB": "1000",
        "DSV4_REMOTE_CACHE_TIMEOUT": "2.5"}, warn=print)
    assert (remote.shown, remote.upload, remote.max_blob, remote.timeout) == (
        "https://cache.example:8443/dsv4", True, 1000, 2.5)
    plain = RemoteCache.from_environment({"DSV4_REMOTE_CACHE": "http://c/x",
                                          "DSV4_REMOTE_CACHE_UPLOAD": "0"}, warn=print)
    assert (plain.upload, plain.max_blob, plain.timeout) == (False, 512 << 20, 5.0)


@pytest.mark.parametrize(("url", "shown"), [
    ("https://reader:s3cret@cache.example:8443/dsv4?sig=abc#x", "https://cache.example:8443/dsv4"),
    ("http://u:pa/ss?w#rd@host/x", "http://host/x"),
    ("u:secret@host:1/x", "host:1/x"),
    ("http://host/x\r\nInjected", "http://host/x??Injected"),
])
def test_redact(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_repr_and_str_hold_no_secret() -> None:
    for token, url in ((TOKEN, "http://c:1/x"), (None, f"http://{USER}:{PASSWORD_IN_URL}@c:1/x")):
        remote = RemoteCache(url, token=token, upload=True, warn=print)
        texts = [repr(remote), str(remote), repr(vars(remote)), remote.shown, remote.url]
        _assert_clean(texts)
        assert repr(remote) == "RemoteCache('http://c:1/x', upload=True, disabled=False)"


# --------------------------------------------------------------------------- no secret anywhere
def test_no_line_of_any_failure_holds_a_secret(server: HostileServer, other: HostileServer,
                                               lines: list[str]) -> None:
    behaviours = [*(b for b, _ in BROKEN.values()), hs.echo_authorization(),
                  hs.echo_authorization(pad=125), hs.hang(), hs.answer(500),
                  hs.answer(403), hs.redirect(other.url + "/x"), hs.drip_body(0.05, 40),
                  hs.stream(1 << 24, announce=False)]
    for behaviour in behaviours:
        for basic in (False, True):
            server.on("*", behaviour)
            remote = _client(server.url, lines, basic=basic, timeout=0.3, max_blob=1 << 20)
            remote.get_record(KEY)
            remote.get_blob(SHA)
            remote.put("ac", KEY, b"{}")
            remote.get_blob(SHA)
    echoed = [r for r in server.requests if r.headers.get("authorization")]
    assert len(echoed) > 2 * len(behaviours)  # the credentials really went out
    assert any("BadStatusLine" in line and "***" in line for line in lines)  # the echo, masked
    _assert_clean([*lines, *LINES])  # this test's lines, and those of every test before it


def test_every_public_function_says_why_with_an_example() -> None:
    public = [remote_cache.redact, RemoteCache, RemoteCache.from_environment,
              RemoteCache.get_record, RemoteCache.get_blob, RemoteCache.put]
    for item in public:
        doc = inspect.getdoc(item) or ""
        assert len(doc.splitlines()[0]) > 20 and ">>> " in doc, item
