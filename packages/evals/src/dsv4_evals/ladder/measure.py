"""Decode-rate arithmetic: from chunk arrival times to tok/s, leaving prefill out.

A streamed completion has two phases. Until its first token arrives the server is
queueing and prefilling the prompt (time to first token, TTFT); after it, each step
adds a token. The envelope rates of the serve table are *decode* rates, so TTFT must
not be in them: at a long context the prefill alone can take longer than the decode.

Definitions (all times from one monotonic clock on the client):

* ``t_sent``: the request was handed to the connection.
* chunk times ``c_1 < ... < c_n``: arrival of each streamed chunk that carries
  generated text. A chunk carries ``w = N / n`` tokens, where ``N`` is the server's
  ``usage.completion_tokens`` from the final chunk when it sends one
  (``stream_options.include_usage``), else ``n`` (one token per chunk, so ``w = 1``).
* TTFT = ``c_1 - t_sent``.
* per-sequence decode rate = tokens after the first chunk / (``c_n - c_1``)
  = ``w * (n - 1) / (c_n - c_1)``.
* aggregate decode rate: over the *overlap window* ``W = (max_s c_1(s), min_s c_n(s)]``,
  the stretch in which every sequence is decoding at once, it is the tokens of all
  sequences whose chunks arrive inside ``W``, divided by ``|W|``. That is the steady
  rate the server sustains with ``seqs`` sequences in flight, the quantity the serve
  table records. With one sequence it equals the per-sequence rate.
* when the sequences never all decode together (``W`` empty, or a sequence has fewer
  than two chunks inside it) the aggregate falls back to the *span*: all decode tokens
  / (``max c_n - min c_1``), and the result says so (``window_kind = "span"``); a longer
  ``--max-tokens`` restores the overlap.
* *bunched* stream: chunk times only time decode steps when each chunk is read as it
  is sent. A server whose API process is starved of CPU (or a client that is) hands
  over many chunks at once; they are then stamped microseconds apart and ``c_n - c_1``
  no longer spans the decode. A decode gap shorter than ``BURST_S`` (0.5 ms, i.e. more
  than 2,000 tok/s for one sequence) is counted as a burst gap; a stream with more
  than half of its gaps in bursts is *bunched*, and the ladder says so next to its
  rate instead of presenting that rate as a decode rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

BURST_S = 0.0005  # chunks closer than this arrived in one read, not one decode step apart


@dataclass
class StreamRecord:
    """What the client saw of one streamed request."""

    index: int
    t_sent: float = 0.0
    chunk_times: list[float] = field(default_factory=list)
    usage_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None

    @property
    def chunks(self) -> int:
        return len(self.chunk_times)

    @property
    def total_tokens(self) -> int:
        """Generated tokens: the server's usage count when sent, else the chunk count."""
        return self.usage_tokens if self.usage_tokens is not None else self.chunks

    @property
    def tokens_per_chunk(self) -> float:
        return self.total_tokens / self.chunks if self.chunks else 0.0


@dataclass(frozen=True)
class SequenceRate:
    index: int
    ttft_s: float | None
    decode_tokens: float
    decode_s: float | None
    tok_s: float | None
    total_tokens: int
    chunks: int
    token_source: str  # "usage" or "chunks"
    finish_reason: str | None
    burst_gaps: int = 0  # decode gaps shorter than BURST_S

    @property
    def bunched(self) -> bool:
        """More than half of the decode gaps are read bursts (see the module docstring)."""
        return self.chunks >= 2 and 2 * self.burst_gaps > self.chunks - 1


@dataclass(frozen=True)
class AggregateRate:
    tok_s: float | None
    window_s: float | None
    window_tokens: float
    window_kind: str  # "overlap", "span" or "none"


def sequence_rate(rec: StreamRecord) -> SequenceRate:
    """Per-sequence TTFT and decode rate, per the module definitions."""
    ttft = rec.chunk_times[0] - rec.t_sent if rec.chunks else None
    decode_tokens = rec.tokens_per_chunk * max(rec.chunks - 1, 0)
    decode_s = rec.chunk_times[-1] - rec.chunk_times[0] if rec.chunks >= 2 else None
    tok_s = decode_tokens / decode_s if decode_s else None
    return SequenceRate(
        index=rec.index,
        ttft_s=ttft,
        decode_tokens=decode_tokens,
        decode_s=decode_s,
        tok_s=tok_s,
        total_tokens=rec.total_tokens,
        chunks=rec.chunks,
        token_source="usage" if rec.usage_tokens is not None else "chunks",
        finish_reason=rec.finish_reason,
        burst_gaps=sum(1 for a, b in pairwise(rec.chunk_times) if b - a < BURST_S),
    )


def aggregate_rate(records: Sequence[StreamRecord]) -> AggregateRate:
    """Aggregate decode rate over the overlap window (or the span), per the definitions."""
    live = [r for r in records if r.chunks >= 2]
    if not live or len(live) < len(records):
        return AggregateRate(None, None, 0.0, "none")
    start = max(r.chunk_times[0] for r in live)
    end = min(r.chunk_times[-1] for r in live)
    if end > start:
        inside = [sum(1 for t in r.chunk_times if start < t <= end) for r in live]
        if min(inside) >= 2:
            tokens = sum(r.tokens_per_chunk * k for r, k in zip(live, inside, strict=True))
            return AggregateRate(tokens / (end - start), end - start, tokens, "overlap")
    first = min(r.chunk_times[0] for r in live)
    last = max(r.chunk_times[-1] for r in live)
    tokens = sum(r.tokens_per_chunk * (r.chunks - 1) for r in live)
    return AggregateRate(tokens / (last - first) if last > first else None, last - first, tokens,
                         "span")
