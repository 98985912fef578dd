"""Turning one HTTP exchange into one result record.

The seed's failure mode is a turn that stops at the length cap with nothing in it:
``finish_reason == "length"``, empty content and no tool calls. That is a *hit*.
Everything that is not a well-formed response (a timeout, a dropped connection, a
non-2xx status, a body that is not the expected JSON) is an *error*, with a class
so a report can say which kind. Both make the run fail. Records are plain dicts
because they are written one per line to results.jsonl and read back on resume.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

# Error classes; "http_<status>" is used for non-2xx answers.
TIMEOUT = "timeout"
CONNECT_ERROR = "connect_error"
CONNECTION_DROPPED = "connection_dropped"
TRANSPORT_ERROR = "transport_error"
MALFORMED_JSON = "malformed_json"
MALFORMED_RESPONSE = "malformed_response"


@dataclass
class Result:
    """One request's outcome; the schema of each results.jsonl line."""

    index: int
    wave: int
    phase: str  # "warmup" or "measured"
    latency_s: float
    ok: bool = False
    error_class: str | None = None
    error_detail: str | None = None
    http_status: int | None = None
    finish_reason: str | None = None
    content_chars: int = 0
    empty_content: bool = True
    tool_calls: int = 0
    invalid_tool_calls: list[str] = field(default_factory=list)
    hit: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def classify_exception(exc: BaseException) -> str:
    """The error class of a failed exchange, from the exception the client raised."""
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return TIMEOUT
    if isinstance(exc, httpx.ConnectError):
        return CONNECT_ERROR
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return CONNECTION_DROPPED
    return TRANSPORT_ERROR


def classify_response(
    result: Result, status: int, body: bytes, tool_names: frozenset[str]
) -> Result:
    """Fill ``result`` from an HTTP status and body; returns the same object."""
    result.http_status = status
    if not 200 <= status < 300:
        return _fail(result, f"http_{status}", body[:200].decode("utf-8", "replace"))
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return _fail(result, MALFORMED_JSON, f"{exc}; body starts {body[:80]!r}")
    message, problem = _first_message(data)
    if problem:
        return _fail(result, MALFORMED_RESPONSE, problem)
    assert message is not None
    choice = data["choices"][0]
    result.finish_reason = choice.get("finish_reason")
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    result.content_chars = len(text)
    result.empty_content = not text.strip()
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        return _fail(result, MALFORMED_RESPONSE, "message.tool_calls is not a list")
    result.tool_calls = len(calls)
    result.invalid_tool_calls = [
        f"tool_calls[{i}]: {why}"
        for i, call in enumerate(calls)
        if (why := tool_call_problem(call, tool_names))
    ]
    result.hit = result.finish_reason == "length" and result.empty_content and not calls
    usage = data.get("usage")
    if isinstance(usage, dict):
        result.prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
        result.completion_tokens = _int_or_none(usage.get("completion_tokens"))
    result.ok = True
    return result


def tool_call_problem(call: Any, tool_names: frozenset[str]) -> str | None:
    """Why a tool call is invalid, or None: its name must be declared, its arguments JSON."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        return "no 'function' object"
    name = fn.get("name")
    if name not in tool_names:
        return f"undeclared tool name {name!r}"
    args = fn.get("arguments")
    if not isinstance(args, str):
        return f"arguments are {type(args).__name__}, not a JSON string"
    try:
        json.loads(args)
    except json.JSONDecodeError as exc:
        return f"arguments do not decode as JSON ({exc.msg} at {exc.pos})"
    return None


def _first_message(data: Any) -> tuple[dict | None, str | None]:
    if not isinstance(data, dict):
        return None, "body is not a JSON object"
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return None, "no 'choices' list"
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        return None, "choices[0] has no 'message' object"
    return choice["message"], None


def _fail(result: Result, error_class: str, detail: str) -> Result:
    result.ok = False
    result.error_class = error_class
    result.error_detail = detail
    return result


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
