"""Scanning a server log for the signs of a broken engine.

A garbled-output regression may answer every request with HTTP 200 while the
server log shows CUDA faults, failed asserts or graph-capture errors. The patterns
are data (``data/stress_log_patterns.toml``, read like the ``logs`` and ``buckets``
pattern files), so a new symptom is one more table, and each pattern counts on its
own: one line such as "CUDA error: an illegal memory access" counts under both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .._patterns import (
    PatternError,
    compile_regex,
    load_pattern_file,
    reject_unknown,
    table_list,
)
from .._patterns import field as pattern_field

DEFAULT_FILE = "stress_log_patterns.toml"
FIRST_LINES = 5


@dataclass(frozen=True)
class LogPatterns:
    """The named patterns of one pattern file, compiled, in file order."""

    source: str
    patterns: tuple[tuple[str, re.Pattern[str]], ...]

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.patterns]


def load_log_patterns(path: str | Path | None = None) -> LogPatterns:
    """Read and check a pattern file (the shipped one when ``path`` is None)."""
    doc, label = load_pattern_file(path, DEFAULT_FILE)
    reject_unknown(doc, {"schema", "ignore_case", "pattern"}, label)
    flags = re.IGNORECASE if pattern_field(doc, "ignore_case", bool, label, "true or false",
                                           False) else 0
    out: list[tuple[str, re.Pattern[str]]] = []
    for i, item in enumerate(table_list(doc, "pattern", label)):
        where = f"{label}: pattern[{i}]"
        reject_unknown(item, {"name", "regex"}, where)
        name = pattern_field(item, "name", str, where, "a name")
        if name in (n for n, _ in out):
            raise PatternError(f"{where}: name {name!r} repeated")
        regex = pattern_field(item, "regex", str, where, "a regular expression")
        out.append((name, compile_regex(regex, f"{where}.regex", flags)))
    return LogPatterns(label, tuple(out))


# The shipped patterns, read once at import; a broken shipped file fails loudly here.
LOG_PATTERNS = load_log_patterns()


@dataclass
class PatternHits:
    """How often one pattern matched, and the first few matching lines."""

    count: int = 0
    first: list[str] = field(default_factory=list)


def scan_log(
    path: str | Path,
    patterns: LogPatterns = LOG_PATTERNS,
    keep: int = FIRST_LINES,
) -> dict[str, PatternHits]:
    """Count matching lines per pattern name; keep the first ``keep`` as 'LINENO: text'."""
    hits = {name: PatternHits() for name in patterns.names}
    p = Path(path)
    try:
        handle = p.open("r", encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ValueError(f"--server-log {p}: cannot read it ({exc.strerror or exc})") from exc
    with handle:
        for lineno, line in enumerate(handle, start=1):
            for name, rx in patterns.patterns:
                if rx.search(line):
                    h = hits[name]
                    h.count += 1
                    if len(h.first) < keep:
                        h.first.append(f"{lineno}: {line.rstrip()[:300]}")
    return hits
