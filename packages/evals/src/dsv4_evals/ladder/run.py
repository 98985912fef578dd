"""Climb the ladder: for each envelope, (start a server,) measure decode, judge it.

One envelope at a time: size the prompt to its context, send one short warm-up
request, then ``seqs`` concurrent streaming requests, and turn their chunk times into
per-sequence and aggregate decode rates (see ``measure``). A failure on one envelope
(server refused, launch timed out) becomes that envelope's ``error`` verdict and the
ladder moves on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dsv4_evals.base_url import normalize_base_url
from dsv4_evals.http import REQUEST_ERRORS, ServerClient
from dsv4_evals.ladder.client import (
    RequestShape,
    ServerError,
    count_tokens,
    first_model,
    stream_concurrently,
    stream_one,
)
from dsv4_evals.ladder.envelopes import EnvelopeLike, verdict
from dsv4_evals.ladder.measure import (
    BURST_S,
    AggregateRate,
    SequenceRate,
    StreamRecord,
    aggregate_rate,
    sequence_rate,
)
from dsv4_evals.ladder.prompt import (
    DEFAULT_WORDS_PER_TOKEN,
    TEMPLATE_MARGIN_TOKENS,
    plan,
    prompts,
    target_tokens,
    words_text,
)
from dsv4_evals.ladder.server import LaunchedServer, LaunchError, serve_command

CALIBRATION_WORDS = 2000
WARMUP_MAX_TOKENS = 8


@dataclass(frozen=True)
class LaunchOptions:
    """How ``--launch`` starts a server per envelope."""

    log_dir: Path
    launcher: tuple[str, ...] = ("dsv4-serve",)
    model_args: tuple[str, ...] = ()
    ready_timeout_s: float = 1800.0
    stop_grace_s: float = 30.0


@dataclass(frozen=True)
class LadderOptions:
    base_url: str = "http://127.0.0.1:8000"
    api: str = "completions"
    model: str | None = None
    prompt_fraction: float = 0.5
    prompt_tokens: int | None = None
    words_per_token: float = DEFAULT_WORDS_PER_TOKEN
    calibrate: bool = True
    shared_prefix: bool = True
    max_tokens: int = 512
    ignore_eos: bool = True
    tolerance: float = 0.10
    warmup: int = 1
    request_timeout_s: float = 3600.0
    launch: LaunchOptions | None = None
    use_proxy_env: bool = False  # see dsv4_evals.http: proxies are ignored unless asked

    def __post_init__(self) -> None:
        # One rule for every subcommand (root or /v1, trailing slash or not): keep the root.
        object.__setattr__(self, "base_url", normalize_base_url(self.base_url).root)


class ProgressSink(Protocol):
    """Receives progress events while an envelope is measured."""

    def begin(self, envelope: EnvelopeLike, max_tokens: int) -> None: ...
    def chunk(self, seq: int) -> None: ...
    def end(self, result: EnvelopeResult) -> None: ...


@dataclass
class EnvelopeResult:
    id: str
    gpu: str
    tp: int
    context: int
    seqs: int
    expected_tok_s: float | None
    verdict: str = "error"
    ratio: float | None = None
    model: str | None = None
    prompt: dict[str, Any] = field(default_factory=dict)
    aggregate: AggregateRate | None = None
    sequences: list[SequenceRate] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    server_log: str | None = None
    # The raw chunk stamps behind ``sequences``, for callers that want to re-derive.
    records: list[StreamRecord] = field(default_factory=list, repr=False)

    @property
    def aggregate_tok_s(self) -> float | None:
        return self.aggregate.tok_s if self.aggregate else None

    @property
    def warnings(self) -> list[str]:
        """Why a measured rate may not be a decode rate (bunched streams)."""
        return [
            f"sequence {s.index}: {s.burst_gaps} of {s.chunks - 1} chunk gaps under "
            f"{BURST_S * 1e3:g} ms (chunks read in bursts): its chunk times do not time "
            "decode steps, so this rate is not a decode rate"
            for s in self.sequences if s.bunched
        ]

    def per_seq(self) -> list[float]:
        return [s.tok_s for s in self.sequences if s.tok_s is not None]

    def to_json(self) -> dict[str, Any]:
        rates = self.per_seq()
        ttfts = [s.ttft_s for s in self.sequences if s.ttft_s is not None]
        agg = self.aggregate
        return {
            "id": self.id,
            "gpu": self.gpu,
            "tp": self.tp,
            "context": self.context,
            "seqs": self.seqs,
            "expected_tok_s": self.expected_tok_s,
            "aggregate_tok_s": self.aggregate_tok_s,
            "ratio": self.ratio,
            "verdict": self.verdict,
            "window_kind": agg.window_kind if agg else None,
            "window_s": agg.window_s if agg else None,
            "window_tokens": agg.window_tokens if agg else None,
            "per_seq_tok_s": rates,
            "mean_per_seq_tok_s": sum(rates) / len(rates) if rates else None,
            "mean_ttft_s": sum(ttfts) / len(ttfts) if ttfts else None,
            "model": self.model,
            "prompt": self.prompt,
            "sequences": [
                {
                    "index": s.index,
                    "ttft_s": s.ttft_s,
                    "decode_tokens": s.decode_tokens,
                    "decode_s": s.decode_s,
                    "tok_s": s.tok_s,
                    "total_tokens": s.total_tokens,
                    "chunks": s.chunks,
                    "token_source": s.token_source,
                    "finish_reason": s.finish_reason,
                    "burst_gaps": s.burst_gaps,
                    "bunched": s.bunched,
                }
                for s in self.sequences
            ],
            "errors": self.errors,
            "warnings": self.warnings,
            "server_log": self.server_log,
        }


@dataclass
class LadderReport:
    options: LadderOptions
    results: list[EnvelopeResult]

    @property
    def ok(self) -> bool:
        """False when any envelope is below tolerance or could not be measured."""
        return all(r.verdict not in ("below", "error") for r in self.results)

    def to_json(self) -> dict[str, Any]:
        o = self.options
        return {
            "ok": self.ok,
            "base_url": o.base_url,
            "api_url": o.base_url + "/v1",
            "api": o.api,
            "tolerance": o.tolerance,
            "max_tokens": o.max_tokens,
            "prompt_fraction": o.prompt_fraction if o.prompt_tokens is None else None,
            "prompt_tokens": o.prompt_tokens,
            "launched": o.launch is not None,
            "results": [r.to_json() for r in self.results],
        }


def run_ladder(
    envelopes: Sequence[EnvelopeLike],
    options: LadderOptions,
    progress: ProgressSink | None = None,
) -> LadderReport:
    """Measure every envelope in order; see the module docstring."""
    results = []
    for env in envelopes:
        result = _blank(env)
        if progress is not None:
            progress.begin(env, options.max_tokens)
        try:
            if options.launch is None:
                asyncio.run(_measure(env, options, result, progress))
            else:
                _measure_launched(env, options, options.launch, result, progress)
        except (ServerError, LaunchError, *REQUEST_ERRORS, ValueError) as exc:
            result.errors.append(f"{type(exc).__name__}: {exc}")
            result.verdict = "error"
        if progress is not None:
            progress.end(result)
        results.append(result)
    return LadderReport(options, results)


def _measure_launched(
    env: EnvelopeLike,
    options: LadderOptions,
    launch: LaunchOptions,
    result: EnvelopeResult,
    progress: ProgressSink | None,
) -> None:
    argv = serve_command(launch.launcher, env.gpu, env.tp, env.context, env.seqs,
                         launch.model_args)
    log_path = launch.log_dir / f"server-{env.id}.log"
    result.server_log = str(log_path)
    with LaunchedServer(argv, options.base_url, log_path, launch.ready_timeout_s,
                        launch.stop_grace_s, use_proxy_env=options.use_proxy_env):
        asyncio.run(_measure(env, options, result, progress))


def _blank(env: EnvelopeLike) -> EnvelopeResult:
    return EnvelopeResult(env.id, env.gpu, env.tp, env.context, env.seqs, env.expected_tok_s)


async def _measure(
    env: EnvelopeLike,
    options: LadderOptions,
    result: EnvelopeResult,
    progress: ProgressSink | None,
) -> None:
    async with ServerClient(options.base_url, timeout_s=options.request_timeout_s,
                            connections=env.seqs + 4,
                            use_proxy_env=options.use_proxy_env) as client:
        model = options.model or await first_model(client)
        result.model = model
        texts = await _prompts(client, model, env, options, result)
        warm = RequestShape(options.api, model, WARMUP_MAX_TOKENS, options.ignore_eos)
        for _ in range(options.warmup):
            await stream_one(client, warm, "Say hello.", StreamRecord(index=-1))
        shape = RequestShape(options.api, model, options.max_tokens, options.ignore_eos)
        on_chunk: Callable[[int], None] | None = progress.chunk if progress else None
        records = await stream_concurrently(client, shape, texts, on_chunk)
    result.records = records
    result.sequences = [sequence_rate(r) for r in records]
    result.errors.extend(f"sequence {r.index}: {r.error}" for r in records if r.error)
    result.aggregate = aggregate_rate(records)
    measured = None if result.errors else result.aggregate.tok_s
    result.verdict = verdict(measured, env.expected_tok_s, options.tolerance)
    if measured is not None and env.expected_tok_s:
        result.ratio = measured / env.expected_tok_s


async def _prompts(
    client: ServerClient,
    model: str,
    env: EnvelopeLike,
    options: LadderOptions,
    result: EnvelopeResult,
) -> list[str]:
    """Size the prompts; measure the word/token ratio on the server when it can."""
    target = target_tokens(env.context, options.max_tokens, options.prompt_fraction,
                           options.prompt_tokens)
    room = env.context - options.max_tokens - TEMPLATE_MARGIN_TOKENS
    ratio, source = options.words_per_token, "assumed"
    if options.calibrate:
        sample = await count_tokens(client, model, words_text(CALIBRATION_WORDS))
        if sample:
            ratio, source = CALIBRATION_WORDS / sample, "measured"
    p = plan(target, ratio, source)
    words = p.words
    texts = prompts(words, env.seqs, options.shared_prefix)
    counted = await count_tokens(client, model, texts[0]) if source == "measured" else None
    if counted is not None and counted > room:
        words = max(1, int(words * room / counted))
        texts = prompts(words, env.seqs, options.shared_prefix)
        counted = await count_tokens(client, model, texts[0])
    result.prompt = {
        "target_tokens": target,
        "words": words,
        "words_per_token": ratio,
        "ratio_source": source,
        "counted_tokens": counted,
        "shared_prefix": options.shared_prefix,
    }
    return texts
