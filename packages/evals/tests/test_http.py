"""The one HTTP client (``dsv4_evals.http``) and its policy, through every subcommand.

Each subcommand that talks to a server (``stress``, ``ladder``, ``ladder --launch``'s
readiness poll, ``matrix``) runs for real against loopback servers this file starts:

* with ``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` pointing at a recording proxy, the
  proxy sees nothing and the server everything; with ``--use-proxy-env`` it is the
  other way round (the proxy answers 502, so the run fails and says so);
* one timeout policy: a body sent one byte at a time, each byte well inside any
  per-read timeout, still ends at the whole-request deadline;
* no retries: a dropped request reaches the server once;
* no redirects, bounded bodies, paths only, no credentials in messages.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import dsv4_evals.http as http
import dsv4_evals.ladder as ladder
import pytest
from _http_recording_server import RecordingServer
from _http_scripted_server import ScriptedServer as ChatServer
from dsv4_evals.cli import main
from dsv4_evals.http import (
    CONNECT_TIMEOUT_S,
    RETRIES,
    ServerClient,
    env_proxy,
    probe,
    timeouts,
)
from test_ladder_server import ScriptedServer as StreamServer
from test_matrix import Envelope

PAYLOAD = Path(__file__).parent / "data" / "stress" / "payload.json"
FAKE_SERVE = f"{sys.executable} {Path(__file__).with_name('test_ladder_server.py')}"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
              "all_proxy")


@pytest.fixture(autouse=True)
def small_envelope(monkeypatch):
    """The matrix's envelope id (the ladder measures it too) with a small context."""
    monkeypatch.setattr(ladder, "ENVELOPE_SOURCE", lambda: [Envelope()])


@pytest.fixture
def proxy(monkeypatch):
    """A recording proxy named by every proxy variable; NO_PROXY unset."""
    with RecordingServer(status=502, body=b"proxy says no") as server:
        for name in PROXY_VARS:
            monkeypatch.setenv(name, server.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        yield server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# One run of each subcommand against a fresh target; returns the exit code, how many
# requests the target saw and the target's root URL.
Run = Callable[[Path, list[str]], tuple[int, int, str]]


def run_stress(tmp_path: Path, extra: list[str]) -> tuple[int, int, str]:
    with ChatServer(lambda i: "text") as target:
        code = main(["stress", "--base-url", target.base_url, "--payload", str(PAYLOAD),
                     "--concurrency", "2", "--warmup-waves", "0", "--waves", "1",
                     "--timeout", "10", "--out", str(tmp_path / "stress"), *extra])
        return code, len(target.received), target.base_url.removesuffix("/v1")


def run_ladder(tmp_path: Path, extra: list[str]) -> tuple[int, int, str]:
    with StreamServer(ttft_s=0.01, period_s=0.002) as target:
        code = main(["ladder", "--base-url", target.base_url, "--max-tokens", "8",
                     "--warmup", "0", "--json", "--no-progress", *extra])
        target.wait_idle()
        return code, len(target.bodies), target.base_url


def run_matrix(tmp_path: Path, extra: list[str]) -> tuple[int, int, str]:
    with StreamServer(ttft_s=0.01, period_s=0.002) as target:
        code = main(["matrix", "--base-url", target.base_url, "--label", "control",
                     "--max-tokens", "8", "--warmup", "0", "--json", "--no-progress", *extra])
        target.wait_idle()
        return code, len(target.bodies), target.base_url


def run_launch(tmp_path: Path, extra: list[str]) -> tuple[int, int, str]:
    port = _free_port()
    record = tmp_path / "record.json"
    code = main(["ladder", "--launch", "--serve-command", FAKE_SERVE,
                 "--base-url", f"http://127.0.0.1:{port}", "--launch-timeout", "3",
                 "--max-tokens", "8", "--warmup", "0", "--json", "--no-progress",
                 "--out", str(tmp_path / "launch"), *extra,
                 "--", "fake/model", "--port", str(port), "--record", str(record),
                 "--ttft", "0.01", "--period", "0.002"])
    seen = json.loads(record.read_text()) if record.exists() else {"bodies": []}
    return code, len(seen["bodies"]), f"http://127.0.0.1:{port}"


SUBCOMMANDS: dict[str, Run] = {
    "stress": run_stress,
    "ladder": run_ladder,
    "matrix": run_matrix,
    "ladder --launch": run_launch,
}


# --------------------------------------------------------------------------- proxies
@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_proxy_variables_are_ignored_by_every_subcommand(name, proxy, tmp_path, capsys):
    code, reached, _ = SUBCOMMANDS[name](tmp_path, [])
    out = capsys.readouterr().out
    assert proxy.requests == []
    assert code == 0, out
    assert reached > 0


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_use_proxy_env_sends_every_request_through_the_proxy(name, proxy, tmp_path, capsys):
    code, reached, root = SUBCOMMANDS[name](tmp_path, ["--use-proxy-env"])
    capsys.readouterr()
    assert code == 1  # the proxy answered 502 to everything
    assert reached == 0
    assert proxy.requests, "nothing reached the proxy"
    # Through a proxy a client names the absolute URL of the server it wants.
    for line in proxy.requests:
        target = line.split(" ", 1)[1]
        assert target.startswith(root + "/"), line


def test_stress_records_what_the_proxy_answered(proxy, tmp_path):
    code, _, _ = run_stress(tmp_path, ["--use-proxy-env"])
    records = [json.loads(x) for x in (tmp_path / "stress" / "results.jsonl").read_text()
               .splitlines()]
    assert code == 1
    assert [r["error_class"] for r in records] == ["http_502", "http_502"]
    assert all("proxy says no" in r["error_detail"] for r in records)


def test_no_proxy_is_honoured_when_proxies_are_used(proxy, tmp_path, monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    code, reached, _ = run_stress(tmp_path, ["--use-proxy-env"])
    assert (code, reached, proxy.requests) == (0, 2, [])


@pytest.mark.parametrize(
    ("variables", "root", "expected"),
    [
        ({"HTTP_PROXY": "http://p:1"}, "http://h:8000", "http://p:1"),
        ({"http_proxy": "http://p:2"}, "http://h:8000", "http://p:2"),
        ({"HTTPS_PROXY": "http://p:3"}, "http://h:8000", None),
        ({"HTTPS_PROXY": "http://p:3"}, "https://h", "http://p:3"),
        ({"ALL_PROXY": "http://p:4"}, "http://h:8000", "http://p:4"),
        ({"ALL_PROXY": "http://p:4", "HTTP_PROXY": "http://p:1"}, "http://h", "http://p:1"),
        ({"ALL_PROXY": "http://p:4", "NO_PROXY": "h"}, "http://h:8000/dsv4", None),
        ({"ALL_PROXY": "http://p:4", "NO_PROXY": "other"}, "http://u:pw@h:8000", "http://p:4"),
        ({}, "http://h:8000", None),
    ],
)
def test_env_proxy_reads_the_usual_variables(monkeypatch, variables, root, expected):
    for name in (*PROXY_VARS, "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert env_proxy(root) == expected


def test_a_client_uses_a_proxy_only_when_asked(proxy):
    assert ServerClient("http://127.0.0.1:1", timeout_s=1).proxy is None
    asked = ServerClient("http://127.0.0.1:1", timeout_s=1, use_proxy_env=True)
    assert asked.proxy == proxy.url


# ------------------------------------------------------------------ timeouts, retries
def test_the_timeout_policy():
    assert RETRIES == 0
    short, long_ = timeouts(2.0), timeouts(3600.0)
    assert (short.connect, short.read, short.write, short.pool) == (2.0, 2.0, 2.0, 2.0)
    assert long_.connect == CONNECT_TIMEOUT_S == 30.0 and long_.read == 3600.0
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        ServerClient("http://127.0.0.1:1", timeout_s=0)


def _trickle(body: bytes = b"x" * 60, every: float = 0.05) -> RecordingServer:
    """A server sending its answer one byte per ``every`` s: 3 s for the whole body."""
    return RecordingServer(mode="trickle", body=body, trickle_s=every)


def test_stress_timeout_bounds_the_whole_request(tmp_path):
    with _trickle() as slow:
        start = time.monotonic()
        code = main(["stress", "--base-url", slow.url, "--payload", str(PAYLOAD),
                     "--concurrency", "2", "--warmup-waves", "0", "--waves", "1",
                     "--timeout", "0.5", "--out", str(tmp_path / "o")])
        elapsed = time.monotonic() - start
        sent = list(slow.requests)
    records = [json.loads(x) for x in (tmp_path / "o" / "results.jsonl").read_text()
               .splitlines()]
    assert code == 1
    assert elapsed < 2.5  # every byte came within 0.05 s; the deadline ended it
    assert sent == ["POST /v1/chat/completions"] * 2  # no retry after the timeout
    for r in records:
        assert r["error_class"] == "timeout"
        assert r["error_detail"] == "TimeoutError: no complete response within 0.5 s"
        assert 0.45 <= r["latency_s"] < 1.5


LATE = "sequence 0: TimeoutError: no complete response within 0.5 s"


@pytest.mark.parametrize("command", ["ladder", "matrix"])
def test_ladder_and_matrix_timeout_bounds_the_whole_stream(command, capsys):
    sse = b'data: {"choices": [{"text": "a"}]}\n\n' * 4  # 2.8 s at one byte per 20 ms
    extra = ["--label", "control"] if command == "matrix" else []
    with _trickle(sse, every=0.02) as slow:
        start = time.monotonic()
        code = main([command, "--base-url", slow.url, *extra, "--model", "m",
                     "--no-calibrate", "--warmup", "0", "--request-timeout", "0.5", "--json",
                     "--no-progress"])
        elapsed = time.monotonic() - start
        sent = list(slow.requests)
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    if command == "ladder":
        (result,) = doc["results"]
        assert result["verdict"] == "error" and result["errors"] == [LATE]
    else:
        (control,) = doc["variants"]
        assert control["errors"] == [LATE] * 3
        assert [m["tok_s"] for m in doc["measurements"]] == [None] * 3
    runs = 1 if command == "ladder" else 3
    assert elapsed < 2.5 * runs
    assert sent == ["POST /v1/completions"] * runs


def test_the_readiness_probe_has_its_own_deadline():
    with RecordingServer(mode="hang", trickle_s=2.0) as hung:
        start = time.monotonic()
        assert probe(hung.url, ["/health"], timeout_s=0.3) is False
        assert time.monotonic() - start < 1.5
    with RecordingServer(status=200) as ready:
        assert probe(ready.url, ["/health", "/v1/models"]) is True
        assert ready.requests == ["GET /health"]
    with RecordingServer(status=503) as starting:
        assert probe(starting.url, ["/health", "/v1/models"]) is False
        assert starting.requests == ["GET /health", "GET /v1/models"]


def test_a_dropped_request_is_sent_once_by_every_client(tmp_path, capsys):
    with RecordingServer(mode="drop") as dropper:
        code = main(["stress", "--base-url", dropper.url, "--payload", str(PAYLOAD),
                     "--concurrency", "1", "--warmup-waves", "0", "--waves", "1",
                     "--out", str(tmp_path / "o")])
        assert code == 1
        (record,) = [json.loads(x) for x in (tmp_path / "o" / "results.jsonl").read_text()
                     .splitlines()]
        assert record["error_class"] == "connection_dropped"
        assert dropper.requests == ["POST /v1/chat/completions"]

        dropper.requests.clear()
        code = main(["ladder", "--base-url", dropper.url, "--warmup", "0", "--json",
                     "--no-progress"])
        (result,) = json.loads(capsys.readouterr().out)["results"]
        assert code == 1 and result["verdict"] == "error"
        assert dropper.requests == ["GET /v1/models"]

        dropper.requests.clear()
        assert probe(dropper.url, ["/health"]) is False
        assert dropper.requests == ["GET /health"]


# ------------------------------------------------------------ redirects, sizes, paths
def test_redirects_are_answers_not_followed(tmp_path, capsys):
    with RecordingServer(status=200) as elsewhere:
        headers = {"Location": elsewhere.url + "/v1/chat/completions"}
        with RecordingServer(status=307, headers=headers) as redirector:
            code = main(["stress", "--base-url", redirector.url, "--payload", str(PAYLOAD),
                         "--concurrency", "1", "--warmup-waves", "0", "--waves", "1",
                         "--out", str(tmp_path / "o")])
            (record,) = [json.loads(x) for x in (tmp_path / "o" / "results.jsonl")
                         .read_text().splitlines()]
            assert code == 1 and record["error_class"] == "http_307"
            code = main(["ladder", "--base-url", redirector.url, "--warmup", "0", "--json",
                         "--no-progress"])
            (result,) = json.loads(capsys.readouterr().out)["results"]
            assert code == 1
            assert "GET /v1/models returned HTTP 307" in result["errors"][0]
            assert probe(redirector.url, ["/health"]) is False
        assert elsewhere.requests == []


def test_bodies_over_the_cap_are_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(http, "MAX_BODY_BYTES", 64)
    with ChatServer(lambda i: "text") as server:
        code = main(["stress", "--base-url", server.base_url, "--payload", str(PAYLOAD),
                     "--concurrency", "1", "--warmup-waves", "0", "--waves", "1",
                     "--out", str(tmp_path / "o")])
    (record,) = [json.loads(x) for x in (tmp_path / "o" / "results.jsonl").read_text()
                 .splitlines()]
    assert code == 1 and record["error_class"] == "transport_error"
    assert record["error_detail"] == (
        "BodyTooLarge: POST /v1/chat/completions: response body over 64 bytes")
    with StreamServer(ttft_s=0.01, period_s=0.001) as stream:
        code = main(["ladder", "--base-url", stream.base_url, "--model", "m", "--no-calibrate",
                     "--warmup", "0", "--max-tokens", "40", "--json", "--no-progress"])
        stream.wait_idle()
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert code == 1
    assert result["errors"] == [
        "sequence 0: BodyTooLarge: POST /v1/completions: response body over 64 bytes"]


@pytest.mark.parametrize("path", ["http://127.0.0.1:1/x", "//127.0.0.1:1/x", "v1/models",
                                  "/redirect?to=http://elsewhere/"])
def test_a_client_takes_paths_never_urls(path):
    async def ask() -> None:
        async with ServerClient("http://127.0.0.1:1", timeout_s=1) as client:
            await client.request("GET", path)

    with pytest.raises(ValueError, match="a path under the server root, not a URL"):
        asyncio.run(ask())


def test_credentials_in_the_url_are_sent_but_never_echoed(tmp_path, capsys):
    with RecordingServer(status=503, body=b"busy") as server:
        root = server.url.replace("http://", "http://user:s3cret@")
        code = main(["ladder", "--base-url", root, "--warmup", "0", "--json",
                     "--no-progress"])
        (result,) = json.loads(capsys.readouterr().out)["results"]
        assert code == 1
        assert result["errors"] == ["ServerError: GET /v1/models returned HTTP 503; pass --model"]
        assert server.auth[0] is not None and server.auth[0].startswith("Basic ")
    with _trickle() as slow:
        root = slow.url.replace("http://", "http://user:s3cret@")
        main(["stress", "--base-url", root, "--payload", str(PAYLOAD), "--concurrency", "1",
              "--warmup-waves", "0", "--waves", "1", "--timeout", "0.3",
              "--out", str(tmp_path / "o")])
    detail = (tmp_path / "o" / "results.jsonl").read_text()
    assert "timeout" in detail and "s3cret" not in json.loads(detail)["error_detail"]


async def _lines(url: str) -> list[str]:
    async with (
        ServerClient(url, timeout_s=5) as client,
        client.stream("GET", "/events") as stream,
    ):
        return [line async for line in stream.lines()]


def test_stream_lines_end_at_any_line_break():
    body = b"data: a\r\ndata: b\rdata: c\ndata: \xff\n\nlast"
    want = ["data: a", "data: b", "data: c", "data: \ufffd", "", "last"]
    with RecordingServer(body=body) as whole:
        assert asyncio.run(_lines(whole.url)) == want
    with RecordingServer(mode="trickle", body=body, trickle_s=0.002) as bytewise:
        got = asyncio.run(_lines(bytewise.url))
    # Byte by byte: where the \r\n after "data: a" is split across two reads it reads as
    # two breaks (one extra empty line, right there); where the client is slow enough to
    # get both bytes in one read it is one break. No other change either way.
    assert [x for x in got if x] == [x for x in want if x]
    assert got in (want, [want[0], "", *want[1:]]), got
