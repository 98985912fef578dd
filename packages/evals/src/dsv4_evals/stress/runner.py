"""Sending the waves: ``concurrency`` requests in flight, wave after wave.

The seed's run is 8 warm-up waves then 8 measured waves of 32 concurrent requests.
A wave is a barrier: all of its requests are sent together and the next wave starts
when the last one returns, so every measured wave meets a server that has already
seen the warm-up's shapes. Request ``i`` belongs to wave ``i // concurrency``; the
first ``warmup_waves`` waves are the warm-up. Each result is handed to the store
the moment it arrives. On interrupt or cancellation the in-flight requests are
cancelled and nothing already stored is touched.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..base_url import api_path, normalize_base_url
from ..http import REQUEST_ERRORS, ServerClient
from .classify import Result, classify_exception, classify_response
from .payload import Payload

WARMUP = "warmup"
MEASURED = "measured"
CHAT_PATH = api_path("chat/completions")


@dataclass(frozen=True)
class StressConfig:
    """Everything that shapes the requests of one run."""

    base_url: str
    payload: Payload
    model: str | None = None
    concurrency: int = 32
    warmup_waves: int = 8
    waves: int = 8
    max_tokens: int | None = None
    temperature: float = 0.0
    timeout: float = 1800.0
    use_proxy_env: bool = False  # see dsv4_evals.http: proxies are ignored unless asked

    def __post_init__(self) -> None:
        # One rule for every subcommand (root or /v1, trailing slash or not): keep the root.
        object.__setattr__(self, "base_url", normalize_base_url(self.base_url).root)
        for name in ("concurrency", "warmup_waves", "waves"):
            value = getattr(self, name)
            low = 1 if name != "warmup_waves" else 0
            if not isinstance(value, int) or value < low:
                raise ValueError(f"--{name.replace('_', '-')} must be an integer >= {low}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError("--max-tokens must be >= 1")
        if not self.timeout > 0:
            raise ValueError("--timeout must be a positive number of seconds")

    @property
    def total(self) -> int:
        return (self.warmup_waves + self.waves) * self.concurrency

    @property
    def url(self) -> str:
        return normalize_base_url(self.base_url).api_url("chat/completions")

    def body(self) -> dict:
        return self.payload.request(
            model=self.model, max_tokens=self.max_tokens, temperature=self.temperature
        )

    def phase_of(self, index: int) -> tuple[int, str]:
        wave = index // self.concurrency
        return wave, WARMUP if wave < self.warmup_waves else MEASURED


OnResult = Callable[[dict], None]


async def run_stress(
    config: StressConfig,
    done: Iterable[int],
    on_result: OnResult,
    *,
    run_id: str = "run",
) -> None:
    """Send every request index not in ``done``; call ``on_result`` with each record.

    ``on_result`` runs in this coroutine, in arrival order; it is where the caller
    stores the record (and may raise to stop the run: the in-flight requests are
    cancelled before the exception leaves).
    """
    skip = set(done)
    body = config.body()
    async with ServerClient(
        config.base_url,
        timeout_s=config.timeout,
        connections=config.concurrency,
        use_proxy_env=config.use_proxy_env,
    ) as client:
        for wave in range(config.warmup_waves + config.waves):
            first = wave * config.concurrency
            indices = [i for i in range(first, first + config.concurrency) if i not in skip]
            if indices:
                await _run_wave(client, config, body, indices, on_result, run_id)


async def _run_wave(
    client: ServerClient,
    config: StressConfig,
    body: dict,
    indices: list[int],
    on_result: OnResult,
    run_id: str,
) -> None:
    tasks = [
        asyncio.create_task(_one(client, config, body, i, run_id), name=f"stress-{i}")
        for i in indices
    ]
    try:
        for next_done in asyncio.as_completed(tasks):
            on_result(await next_done)
    finally:
        pending = [t for t in tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


async def _one(
    client: ServerClient, config: StressConfig, body: dict, index: int, run_id: str
) -> dict:
    wave, phase = config.phase_of(index)
    start = time.perf_counter()
    result = Result(index=index, wave=wave, phase=phase, latency_s=0.0)
    headers = {"X-Request-Id": f"dsv4-stress-{run_id}-{index}"}
    try:
        reply = await client.request("POST", CHAT_PATH, json=body, headers=headers)
        classify_response(result, reply.status, reply.body, config.payload.tool_names)
    except REQUEST_ERRORS as exc:
        result.ok = False
        result.error_class = classify_exception(exc)
        detail = str(exc) or f"no complete response within {config.timeout:g} s"
        result.error_detail = f"{type(exc).__name__}: {detail}"[:300]
    result.latency_s = round(time.perf_counter() - start, 4)
    return result.to_dict()
