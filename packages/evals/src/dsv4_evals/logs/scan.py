"""Apply capture-shape rules to a server log, line by line.

Server logs are not tidy: progress bars redraw with carriage returns, several
processes interleave, and terminals add colour codes. The scanner splits on both
``\\n`` and ``\\r``, strips ANSI escapes, and keeps the 1-based line number (counted
in ``\\n`` lines) so every observation and finding points back into the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from dsv4_evals._patterns import PatternError
from dsv4_evals.logs.probe import ProbeResult, Sighting, observe
from dsv4_evals.logs.rules import Check, Rules, normalise

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
EXCERPT_CHARS = 400  # lines up to this long are kept whole as evidence
EXCERPT_CONTEXT = 100  # else: the match and this many characters either side


@dataclass(frozen=True)
class Observation:
    line: int
    value: str  # normalised
    text: str


@dataclass(frozen=True)
class Finding:
    rule: str
    line: int
    text: str


@dataclass
class CheckResult:
    name: str
    expect: str
    observations: list[Observation] = field(default_factory=list)

    @property
    def status(self) -> str:
        """``pass``, ``fail`` (some observation differs) or ``missing`` (never seen)."""
        if not self.observations:
            return "missing"
        return "pass" if all(o.value == self.expect for o in self.observations) else "fail"

    def observed(self) -> dict[str, int]:
        """Distinct observed values, with how many lines showed each."""
        counts: dict[str, int] = {}
        for o in self.observations:
            counts[o.value] = counts.get(o.value, 0) + 1
        return counts

    def first_wrong(self) -> Observation | None:
        return next((o for o in self.observations if o.value != self.expect), None)


@dataclass
class LogReport:
    log: str
    rules: str
    lines: int
    checks: list[CheckResult]
    findings: list[Finding]
    probes: list[ProbeResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            not self.findings
            and all(c.status == "pass" for c in self.checks)
            and not any(p.failed for p in self.probes)
        )


def split_lines(text: str) -> Iterable[tuple[int, str]]:
    """(line number, segment) for every ``\\r``/``\\n``-separated, de-coloured segment."""
    for number, line in enumerate(text.split("\n"), start=1):
        for segment in line.split("\r"):
            clean = _ANSI.sub("", segment).strip()
            if clean:
                yield number, clean


def scan(text: str, rules: Rules, log_name: str = "<log>") -> LogReport:
    """Every check's observations and every finding in ``text``."""
    results = [CheckResult(c.name, c.expect) for c in rules.checks]
    findings: list[Finding] = []
    probes = [ProbeResult(p) for p in rules.probes]
    last_line = 0
    for number, segment in split_lines(text):
        last_line = number
        for check, result in zip(rules.checks, results, strict=True):
            seen = _observe(check, segment, f"{log_name}:{number}")
            if seen is None:
                continue
            value, excerpt = seen
            last = result.observations[-1] if result.observations else None
            # A redrawn progress bar repeats itself within one line: count it once.
            if last is None or (last.line, last.value) != (number, value):
                result.observations.append(Observation(number, value, excerpt))
        for rule in rules.findings:
            match = rule.regex.search(segment)
            if match:
                findings.append(Finding(rule.name, number, _excerpt(segment, *match.span())))
        for probe in probes:
            seen_probe = observe(probe.probe, segment)
            if seen_probe is not None:
                phase, value = seen_probe
                probe.sightings.append(Sighting(number, phase, value, _excerpt(segment, 0, 0)))
    return LogReport(log_name, rules.source, last_line, results, findings, probes)


def _observe(check: Check, segment: str, where: str) -> tuple[str, str] | None:
    """(normalised value, evidence excerpt) from the first pattern matching ``segment``."""
    for pattern in check.patterns:
        match = pattern.regex.search(segment)
        if match is None:
            continue
        raw = pattern.value if pattern.value is not None else match.group("value")
        raw = pattern.mapping.get(raw.strip(), raw)
        excerpt = _excerpt(segment, match.start(), match.end())
        try:
            value = normalise(check.kind, raw, pattern.add, where=f"{where} ({check.name})")
        except PatternError:
            # An unreadable value is still evidence: keep it verbatim so it fails loudly.
            value = raw.strip()
        return value, excerpt
    return None


def _excerpt(text: str, start: int, end: int) -> str:
    """The match with some context: start-up config lines run to thousands of chars."""
    if len(text) <= EXCERPT_CHARS:
        return text
    lo = max(0, start - EXCERPT_CONTEXT)
    hi = min(len(text), max(end, start + 1) + EXCERPT_CONTEXT)
    return ("..." if lo > 0 else "") + text[lo:hi] + ("..." if hi < len(text) else "")
