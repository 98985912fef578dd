"""A scripted OpenAI-style chat-completions server on 127.0.0.1 for the stress tests.

The harness tags each request with ``X-Request-Id: dsv4-stress-<run>-<index>``; the
server reads the index and answers with the behaviour the test's plan gives that
index, so each response class is produced on purpose and the expected report can be
computed from the plan alone. It runs in a thread (stdlib ``http.server``) on a port
the OS picks.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from _loopback import LoopbackServer

TOOLS = ("get_weather", "search_docs", "run_query")

# Behaviour name -> what the harness must make of it.
#   kind: "ok" or an error class; finish; tool calls; valid tools; hit
BEHAVIOURS: dict[str, dict[str, Any]] = {
    "text": {"kind": "ok", "finish": "stop", "tools": 0, "valid": True, "hit": False},
    "tools1": {"kind": "ok", "finish": "tool_calls", "tools": 1, "valid": True, "hit": False},
    "tools4": {"kind": "ok", "finish": "tool_calls", "tools": 4, "valid": True, "hit": False},
    "tools6": {"kind": "ok", "finish": "tool_calls", "tools": 6, "valid": True, "hit": False},
    "bad_tool_name": {
        "kind": "ok", "finish": "tool_calls", "tools": 2, "valid": False, "hit": False,
    },
    "bad_tool_args": {
        "kind": "ok", "finish": "tool_calls", "tools": 1, "valid": False, "hit": False,
    },
    "length_empty": {"kind": "ok", "finish": "length", "tools": 0, "valid": True, "hit": True},
    "length_null": {"kind": "ok", "finish": "length", "tools": 0, "valid": True, "hit": True},
    "length_text": {"kind": "ok", "finish": "length", "tools": 0, "valid": True, "hit": False},
    "length_tools": {"kind": "ok", "finish": "length", "tools": 1, "valid": True, "hit": False},
    "stop_empty": {"kind": "ok", "finish": "stop", "tools": 0, "valid": True, "hit": False},
    "http_500": {"kind": "http_500"},
    "http_429": {"kind": "http_429"},
    "malformed_json": {"kind": "malformed_json"},
    "no_choices": {"kind": "malformed_response"},
    "slow": {"kind": "timeout"},
    "drop": {"kind": "connection_dropped"},
    "drop_mid_body": {"kind": "connection_dropped"},
}

PROMPT_TOKENS = 6543


def completion_tokens(index: int) -> int:
    """A per-request completion length the test can recompute."""
    return 200 + (index * 37) % 2500


def _tool_call(i: int, name: str, args: str) -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}


def _valid_calls(n: int, index: int) -> list[dict]:
    return [
        _tool_call(i, TOOLS[(index + i) % len(TOOLS)], json.dumps({"q": f"r{index}-{i}"}))
        for i in range(n)
    ]


def response_body(behaviour: str, index: int, model: str) -> dict:
    """The JSON answer for the non-error behaviours."""
    content: str | None = f"Answer for request {index}."
    calls: list[dict] = []
    finish = BEHAVIOURS[behaviour]["finish"]
    if behaviour.startswith("tools"):
        calls = _valid_calls(BEHAVIOURS[behaviour]["tools"], index)
    elif behaviour == "bad_tool_name":
        calls = [*_valid_calls(1, index), _tool_call(1, "delete_everything", "{}")]
    elif behaviour == "bad_tool_args":
        calls = [_tool_call(0, TOOLS[0], '{"q": "unterminated')]
    elif behaviour in ("length_empty", "stop_empty"):
        content = ""
    elif behaviour == "length_null":
        content = None
    elif behaviour == "length_text":
        content = "partial answer that ran out of"
    elif behaviour == "length_tools":
        content = ""
        calls = _valid_calls(1, index)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{index}",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": completion_tokens(index),
            "total_tokens": PROMPT_TOKENS + completion_tokens(index),
        },
    }


class ScriptedServer(LoopbackServer):
    """Start with ``with ScriptedServer(plan) as srv:``; ``srv.base_url`` ends in /v1."""

    def __init__(self, plan: Callable[[int], str], slow_s: float = 2.0) -> None:
        self.plan = plan
        self.slow_s = slow_s
        self.received: list[int] = []
        self.bodies: list[dict] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                rid = self.headers.get("X-Request-Id", "")
                index = int(rid.rsplit("-", 1)[-1])
                with server._lock:
                    server.received.append(index)
                    server.bodies.append(body)
                    server.paths.append(self.path)
                server._answer(self, server.plan(index), index, body.get("model", ""))

        super().__init__(Handler)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _answer(self, h: BaseHTTPRequestHandler, behaviour: str, index: int, model: str) -> None:
        if behaviour == "slow":
            time.sleep(self.slow_s)
            behaviour = "text"
        if behaviour == "drop":
            h.close_connection = True
            return
        if behaviour == "drop_mid_body":
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", "4096")
            h.end_headers()
            h.wfile.write(b'{"choices": [')
            h.wfile.flush()
            h.close_connection = True
            return
        if behaviour in ("http_500", "http_429"):
            status = int(behaviour[5:])
            payload = json.dumps({"error": {"message": "scripted", "code": status}}).encode()
        elif behaviour == "malformed_json":
            status, payload = 200, b'{"id": "x", "choices": [{"message": '
        elif behaviour == "no_choices":
            status, payload = 200, json.dumps({"object": "error", "message": "oops"}).encode()
        else:
            status, payload = 200, json.dumps(response_body(behaviour, index, model)).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True  # the client gave up first (its deadline or size cap)
