"""The chat-completions request a stress run repeats, loaded and checked up front.

A stress run sends one payload hundreds of times; a typo in it would otherwise show
up as hundreds of identical server errors. Loading validates the parts the harness
relies on (messages, declared tools, a single choice) and names the file and key
that is wrong.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_MAX_TOKENS = 16384  # the seed's acceptance run


class PayloadError(ValueError):
    """The payload file is not a usable chat-completions request."""


@dataclass(frozen=True)
class Payload:
    """A validated request body and the tool names it declares."""

    path: str
    body: dict[str, Any]
    tool_names: frozenset[str]
    sha256: str

    def request(self, *, model: str | None, max_tokens: int | None, temperature: float) -> dict:
        """The body actually sent: the payload with the run's overrides applied.

        ``model`` and ``max_tokens`` replace the payload's when given; without a
        ``max_tokens`` from either place the seed's 16384 is used. ``temperature``
        always replaces the payload's, and streaming is always off, because the
        classification needs one complete JSON response per request.
        """
        body = dict(self.body)
        if model is not None:
            body["model"] = model
        if "model" not in body:
            raise PayloadError(f"{self.path}: no 'model' in the payload and no --model given")
        if max_tokens is not None:
            body.pop("max_completion_tokens", None)
            body["max_tokens"] = max_tokens
        elif "max_tokens" not in body and "max_completion_tokens" not in body:
            body["max_tokens"] = DEFAULT_MAX_TOKENS
        body["temperature"] = temperature
        body["stream"] = False
        return body


def load_payload(path: str | Path) -> Payload:
    """Read and validate a chat-completions request from a JSON file."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise PayloadError(f"--payload {p}: cannot read it ({exc.strerror or exc})") from exc
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise PayloadError(
            f"--payload {p}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc
    return parse_payload(body, str(p), hashlib.sha256(raw).hexdigest())


def parse_payload(body: Any, where: str, sha256: str = "") -> Payload:
    """Validate an already-decoded request body; ``where`` names it in errors."""
    if not isinstance(body, dict):
        raise PayloadError(f"{where}: expected a JSON object (a chat-completions request)")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise PayloadError(f"{where}: 'messages' must be a non-empty list of chat messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise PayloadError(f"{where}: messages[{i}] must be an object with a 'role'")
    n = body.get("n", 1)
    if n != 1:
        raise PayloadError(f"{where}: 'n' is {n!r}; the harness classifies one choice, use n=1")
    return Payload(
        path=where,
        body=body,
        tool_names=_declared_tools(body.get("tools"), where),
        sha256=sha256,
    )


def _declared_tools(tools: Any, where: str) -> frozenset[str]:
    if tools is None:
        return frozenset()
    if not isinstance(tools, list):
        raise PayloadError(f"{where}: 'tools' must be a list of tool objects")
    names = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            raise PayloadError(
                f"{where}: tools[{i}] must look like "
                '{"type": "function", "function": {"name": "...", ...}}'
            )
        names.append(name)
    return frozenset(names)
