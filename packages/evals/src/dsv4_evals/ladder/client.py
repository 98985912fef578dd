"""Talk to an OpenAI-compatible server: streaming completions and a few helpers.

Streaming uses server-sent events: the body is lines of ``data: <json>``, blank lines
between events, and ``data: [DONE]`` at the end. Each chunk's generated text is in
``choices[].text`` (completions) or ``choices[].delta.content`` (chat; reasoning
models may use ``delta.reasoning_content`` or ``delta.reasoning``). The client stamps
each chunk that carries text with a monotonic clock as soon as its line arrives;
``measure`` turns the stamps into rates.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dsv4_evals.base_url import api_path
from dsv4_evals.http import REQUEST_ERRORS, ServerClient
from dsv4_evals.ladder.measure import StreamRecord

API_PATHS = {"completions": api_path("completions"), "chat": api_path("chat/completions")}
MODELS_PATH = api_path("models")
TOKENIZE_PATH = "/tokenize"


class ServerError(RuntimeError):
    """The server refused or broke a request; the message says which and why."""


@dataclass(frozen=True)
class RequestShape:
    api: str  # "completions" or "chat"
    model: str
    max_tokens: int
    ignore_eos: bool = True

    def body(self, prompt: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.ignore_eos:
            # vLLM extension: generate exactly max_tokens, so every run decodes as long.
            body["ignore_eos"] = True
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body


def chunk_text(chunk: dict[str, Any]) -> tuple[bool, str | None]:
    """(whether the chunk carries generated text, its finish_reason if any)."""
    carries = False
    finish = None
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
        for piece in (
            choice.get("text"),
            delta.get("content"),
            delta.get("reasoning_content"),
            delta.get("reasoning"),
        ):
            if isinstance(piece, str) and piece:
                carries = True
        finish = choice.get("finish_reason") or finish
    return carries, finish


async def stream_one(
    client: ServerClient,
    shape: RequestShape,
    prompt: str,
    record: StreamRecord,
    on_chunk: Callable[[int], None] | None = None,
) -> StreamRecord:
    """Send one streaming request and fill ``record`` with what arrives."""
    path = API_PATHS[shape.api]
    record.t_sent = time.perf_counter()
    async with client.stream("POST", path, json=shape.body(prompt)) as resp:
        if resp.status != 200:
            detail = (await resp.read()).text()
            raise ServerError(f"POST {path} returned HTTP {resp.status}: {detail}")
        async for line in resp.lines():
            now = time.perf_counter()
            if not line.startswith("data:"):
                continue  # blank separators, comments, event names
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            try:
                chunk = json.loads(payload)
            except json.JSONDecodeError:
                raise ServerError(
                    f"POST {path}: stream line is not JSON: {payload[:200]!r}"
                ) from None
            if not isinstance(chunk, dict):
                raise ServerError(f"POST {path}: stream chunk is not an object: {payload[:200]!r}")
            if "error" in chunk:
                raise ServerError(f"POST {path}: server error in stream: {chunk['error']}")
            usage = chunk.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                record.usage_tokens = usage["completion_tokens"]
            carries, finish = chunk_text(chunk)
            if carries:
                record.chunk_times.append(now)
                if on_chunk is not None:
                    on_chunk(record.index)
            if finish:
                record.finish_reason = finish
    return record


async def stream_concurrently(
    client: ServerClient,
    shape: RequestShape,
    prompts: Sequence[str],
    on_chunk: Callable[[int], None] | None = None,
) -> list[StreamRecord]:
    """All prompts at once, one stream each; a failed stream records its error."""
    records = [StreamRecord(index=i) for i in range(len(prompts))]

    async def guarded(i: int) -> None:
        try:
            await stream_one(client, shape, prompts[i], records[i], on_chunk)
        except (ServerError, *REQUEST_ERRORS) as exc:
            records[i].error = f"{type(exc).__name__}: {exc}"

    await asyncio.gather(*(guarded(i) for i in range(len(prompts))))
    return records


async def first_model(client: ServerClient) -> str:
    """The first model id the server lists at ``GET /v1/models``."""
    resp = await client.request("GET", MODELS_PATH)
    if resp.status != 200:
        raise ServerError(f"GET {MODELS_PATH} returned HTTP {resp.status}; pass --model")
    doc = resp.json()
    data = (doc.get("data") if isinstance(doc, dict) else None) or []
    if not data or not isinstance(data[0], dict) or not data[0].get("id"):
        raise ServerError(f"GET {MODELS_PATH} lists no model; pass --model")
    return str(data[0]["id"])


async def count_tokens(client: ServerClient, model: str, text: str) -> int | None:
    """Token count of ``text`` from vLLM's ``POST /tokenize``; None when not offered."""
    try:
        resp = await client.request("POST", TOKENIZE_PATH, json={"model": model, "prompt": text})
    except REQUEST_ERRORS:
        return None
    if resp.status != 200:
        return None
    try:
        doc = resp.json()
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("count"), int):
        return int(doc["count"])
    if isinstance(doc.get("tokens"), list):
        return len(doc["tokens"])
    return None
