"""A scripted OpenAI-compatible streaming server for the ladder tests, and its own checks.

It streams tokens on a fixed schedule: the first after ``ttft_s``, then one every
``period_s``, measured from when the request arrived and kept on absolute deadlines so
jitter never accumulates. It counts concurrent streams, answers ``/health``,
``/v1/models`` and (optionally) ``/tokenize`` with a scripted words-per-token ratio.

Run as a script it plays ``dsv4-serve``: ``--gpu G --tp T --context C --seqs S --
MODEL --port N [--record FILE] [--ttft S] [--period S]``, and records its argv and
stream statistics in FILE, so a test can check what ``--launch`` ran.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from _loopback import LoopbackServer


class ScriptedServer(LoopbackServer):
    def __init__(
        self,
        ttft_s: float = 0.2,
        period_s: float = 0.005,
        tokens_per_chunk: int = 1,
        send_usage: bool = True,
        tokenize_words_per_token: float | None = 0.8,
        model: str = "fake-dsv4",
        fail_status: int | None = None,
        port: int = 0,
        record: Path | None = None,
        argv: list[str] | None = None,
    ) -> None:
        self.ttft_s = ttft_s
        self.period_s = period_s
        self.tokens_per_chunk = tokens_per_chunk
        self.send_usage = send_usage
        self.tokenize_words_per_token = tokenize_words_per_token
        self.model = model
        self.fail_status = fail_status
        self.record = record
        self.argv = argv or []
        self.child_pid: int | None = None
        self.lock = threading.Lock()
        self.active = 0
        self.max_active = 0
        self.streams: list[dict[str, Any]] = []  # one per finished stream
        self.bodies: list[dict[str, Any]] = []
        super().__init__(_handler(self), port, poll_s=0.02)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stream_started(self) -> None:
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)

    def stream_finished(self, info: dict[str, Any]) -> None:
        with self.lock:
            self.active -= 1
            self.streams.append(info)
            if self.record is not None:
                tmp = self.record.with_suffix(".tmp")
                tmp.write_text(json.dumps(self.snapshot()))
                tmp.replace(self.record)

    def wait_idle(self, timeout_s: float = 5.0) -> None:
        """Block until every stream a client opened has been recorded as finished.

        A client can read a stream's last byte before the handler thread records it,
        so a test reads the records only after this."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.lock:
                if self.active == 0:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.active} streams still open after {timeout_s} s")
            time.sleep(0.005)

    def snapshot(self) -> dict[str, Any]:
        return {"argv": self.argv, "max_active": self.max_active, "streams": self.streams,
                "bodies": self.bodies, "child_pid": self.child_pid}


def _handler(script: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def setup(self) -> None:
            super().setup()
            # Each SSE event must leave now, not wait for Nagle to batch it.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, *args: object) -> None:
            return

        def _json(self, status: int, doc: Any) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._json(200, {})
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": script.model}]})
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:
            t0 = time.perf_counter()
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/tokenize" and script.tokenize_words_per_token:
                words = len(str(body.get("prompt", "")).split())
                self._json(200, {"count": math.ceil(words / script.tokenize_words_per_token)})
                return
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                self._json(404, {"error": "not found"})
                return
            if script.fail_status is not None:
                self._json(script.fail_status, {"error": {"message": "scripted failure"}})
                return
            with script.lock:
                script.bodies.append(body)
            self._stream(body, t0, chat=self.path.endswith("chat/completions"))

        def _event(self, doc: Any) -> None:
            payload = doc if isinstance(doc, str) else json.dumps(doc)
            self.wfile.write(f"data: {payload}\n\n".encode())

        def _stream(self, body: dict[str, Any], t0: float, chat: bool) -> None:
            n = int(body.get("max_tokens", 16))
            tpc = script.tokens_per_chunk
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            script.stream_started()
            start = time.perf_counter()
            prompt = body.get("prompt") or (body.get("messages") or [{}])[-1].get("content", "")
            tag = re.search(r"Request (\d+):", str(prompt))
            emits: list[float] = []  # when each text chunk actually left
            lateness = 0.0  # worst delay of an emission behind its scripted time
            try:
                if chat:  # role announcement, no text: must not count as a token
                    self._event({"object": "chat.completion.chunk",
                                 "choices": [{"index": 0, "delta": {"role": "assistant",
                                                                    "content": ""}}]})
                for first in range(0, n, tpc):
                    due = t0 + script.ttft_s + first * script.period_s
                    _sleep_until(due)
                    count = min(tpc, n - first)
                    text = " tok" * count
                    last = first + count >= n
                    finish = "length" if last else None
                    if chat:
                        choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
                    else:
                        choice = {"index": 0, "text": text, "finish_reason": finish}
                    self._event({"object": "text_completion", "choices": [choice]})
                    emits.append(time.perf_counter())
                    lateness = max(lateness, emits[-1] - due)
            finally:
                # Recorded before the closing events: a client that has read the whole
                # stream, and a launcher that then stops this server, always find it.
                script.stream_finished({
                    "start": start, "end": time.perf_counter(), "tokens": n,
                    "seq": int(tag.group(1)) - 1 if tag else None,
                    "emits": emits, "lateness": lateness,
                })
            want_usage = (body.get("stream_options") or {}).get("include_usage")
            if want_usage and script.send_usage:
                self._event({"choices": [], "usage": {"prompt_tokens": 10,
                                                      "completion_tokens": n,
                                                      "total_tokens": n + 10}})
            self._event("[DONE]")

    return Handler


def _sleep_until(deadline: float) -> None:
    remaining = deadline - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)


def main(argv: list[str]) -> None:
    """Play ``dsv4-serve``: launcher flags, then ``--`` and the model arguments."""
    launcher = argparse.ArgumentParser()
    for flag in ("--gpu", "--tp", "--context", "--seqs"):
        launcher.add_argument(flag, required=True)
    at = argv.index("--")
    launcher.parse_args(argv[:at])
    model = argparse.ArgumentParser()
    model.add_argument("model")
    model.add_argument("--port", type=int, required=True)
    model.add_argument("--record", type=Path)
    model.add_argument("--ttft", type=float, default=0.05)
    model.add_argument("--period", type=float, default=0.005)
    model.add_argument("--spawn-child", action="store_true",
                       help="start a long-lived child, as vLLM starts engine processes")
    m = model.parse_args(argv[at + 1 :])
    print(f"scripted server for {m.model} on port {m.port}", flush=True)
    server = ScriptedServer(ttft_s=m.ttft, period_s=m.period, model=m.model, port=m.port,
                            record=m.record, argv=argv)
    if m.spawn_child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        server.child_pid = child.pid
    if m.record is not None:
        m.record.write_text(json.dumps(server.snapshot()))
    server.httpd.serve_forever()


# ----------------------------------------------------------------------- self-checks
def test_scripted_server_streams_on_its_schedule():
    """Check the fixture with a plain http.client reader, independent of the ladder."""
    with ScriptedServer(ttft_s=0.1, period_s=0.004) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.httpd.server_address[1])
        body = json.dumps({"prompt": "x", "max_tokens": 50, "stream": True})
        t_sent = time.perf_counter()
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        stamps = []
        while line := resp.readline():
            if line.startswith(b"data: {") and b'"text"' in line:
                stamps.append(time.perf_counter())
        conn.close()
    assert len(stamps) == 50
    assert stamps[0] - t_sent == pytest.approx(0.1, abs=0.03)
    assert (stamps[-1] - stamps[0]) == pytest.approx(49 * 0.004, abs=0.006)


def test_scripted_tokenizer_counts_words():
    with ScriptedServer(tokenize_words_per_token=0.8) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.httpd.server_address[1])
        conn.request("POST", "/tokenize", json.dumps({"prompt": "a b c d e f g h"}))
        assert json.loads(conn.getresponse().read()) == {"count": 10}
        conn.close()


if __name__ == "__main__":
    main(sys.argv[1:])
