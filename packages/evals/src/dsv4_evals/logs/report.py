"""Human and JSON views of a ``LogReport``."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from dsv4_evals.logs.probe import ProbeResult
from dsv4_evals.logs.scan import LogReport
from dsv4_evals.render import print_rich_table

_MAX_TEXT = 160


def as_json(report: LogReport) -> dict[str, Any]:
    return {
        "log": report.log,
        "patterns": report.rules,
        "lines": report.lines,
        "ok": report.ok,
        "checks": [
            {
                "name": c.name,
                "expect": c.expect,
                "status": c.status,
                "observed": c.observed(),
                "first_line": c.observations[0].line if c.observations else None,
                "first_wrong": (
                    None
                    if (w := c.first_wrong()) is None
                    else {"line": w.line, "value": w.value, "text": w.text}
                ),
            }
            for c in report.checks
        ],
        "findings": [{"rule": f.rule, "line": f.line, "text": f.text} for f in report.findings],
        "probes": {p.probe.name: _probe_json(p) for p in report.probes},
    }


def _probe_json(result: ProbeResult) -> dict[str, Any]:
    return {
        "title": result.probe.title,
        "status": result.status,
        "failed": result.failed,
        "readout": result.readout(),
        "by_phase": result.by_phase(),
        "lines": [
            {"line": s.line, "phase": s.phase, "value": s.value, "text": s.text}
            for s in result.sightings
        ],
    }


def print_human(report: LogReport, console: Console) -> None:
    rows = []
    for c in report.checks:
        observed = ", ".join(f"{v} x{n}" for v, n in c.observed().items()) or "-"
        wrong = c.first_wrong()
        where = (
            f"line {wrong.line}"
            if wrong
            else (f"line {c.observations[0].line}" if c.observations else "-")
        )
        rows.append((c.name, c.expect, observed, where, c.status.upper()))
    print_rich_table(
        console,
        f"capture shape: {report.log} ({report.lines} lines, patterns {report.rules})",
        ("check", "expected", "observed", "evidence", "status"),
        rows,
        "lllll",
    )
    if report.findings:
        print_rich_table(
            console,
            f"root causes: {len(report.findings)} cudagraph skip/miss line(s)",
            ("line", "rule", "text"),
            [(f.line, f.rule, _short(f.text)) for f in report.findings],
            "rll",
        )
    else:
        console.print("root causes: no cudagraph skip/miss lines")
    for probe in report.probes:
        _print_probe(probe, console)
    console.print("verdict: " + ("OK" if report.ok else "FAIL"))


def _print_probe(result: ProbeResult, console: Console) -> None:
    phases = result.by_phase()
    if phases:
        first: dict[str, int] = {}
        for s in result.sightings:
            first.setdefault(s.phase, s.line)
        print_rich_table(
            console,
            result.probe.title,
            ("phase", "observed", "first line"),
            [
                (phase, ", ".join(f"{v} x{n}" for v, n in counts.items()), first[phase])
                for phase, counts in phases.items()
            ],
            "llr",
        )
    label = result.probe.title if not phases else "readout"
    console.print(f"{label}: {result.readout()}", markup=False, highlight=False)


def _short(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."
