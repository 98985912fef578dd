"""Scanning a server log for the signs of a broken engine.

A garbled-output regression may answer every request with HTTP 200 while the
server log shows CUDA faults, failed asserts or graph-capture errors. The patterns
are data, so a new symptom is one more row, and each pattern counts on its own: one
line such as "CUDA error: an illegal memory access" counts under both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

LOG_PATTERNS: tuple[tuple[str, str], ...] = (
    ("cuda_error", r"CUDA error|cudaError[A-Za-z]*|CUBLAS_STATUS_[A-Z_]+|CUDNN_STATUS_[A-Z_]+"),
    ("illegal_memory_access", r"illegal memory access|cudaErrorIllegalAddress"),
    ("assertion", r"AssertionError|Assertion .*failed|device-side assert"),
    (
        "graph_error",
        r"(?:cuda ?graph|graph capture|stream capture)[^\n]*(?:error|fail|invalid)"
        r"|cudaErrorStreamCapture[A-Za-z]*",
    ),
    ("fatal", r"(?<![\w-])fatal(?![\w-])"),
    ("traceback", r"Traceback \(most recent call last\)"),
)
FIRST_LINES = 5


@dataclass
class PatternHits:
    """How often one pattern matched, and the first few matching lines."""

    count: int = 0
    first: list[str] = field(default_factory=list)


def scan_log(
    path: str | Path,
    patterns: tuple[tuple[str, str], ...] = LOG_PATTERNS,
    keep: int = FIRST_LINES,
) -> dict[str, PatternHits]:
    """Count matching lines per pattern name; keep the first ``keep`` as 'LINENO: text'."""
    compiled = [(name, re.compile(rx, re.IGNORECASE)) for name, rx in patterns]
    hits = {name: PatternHits() for name, _ in patterns}
    p = Path(path)
    try:
        handle = p.open("r", encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ValueError(f"--server-log {p}: cannot read it ({exc.strerror or exc})") from exc
    with handle:
        for lineno, line in enumerate(handle, start=1):
            for name, rx in compiled:
                if rx.search(line):
                    h = hits[name]
                    h.count += 1
                    if len(h.first) < keep:
                        h.first.append(f"{lineno}: {line.rstrip()[:300]}")
    return hits
