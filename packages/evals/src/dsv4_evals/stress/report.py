"""Summarising results.jsonl into report.json and report.md, shaped like the seed's.

The seed's acceptance run reads: warm-up and measured counts, hits and errors, finish
reasons, a histogram of tool-call counts, the largest prompt-plus-completion token
count, and a server-log scan with zero matches. The report says the same things in
the same order, from the recorded results alone, so it can be rebuilt after a
resume and compared with the seed line by line.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from ..render import markdown_table
from .logscan import PatternHits
from .runner import MEASURED, WARMUP
from .width import c128a_widths

HIT_DEFINITION = 'finish_reason == "length", empty content, and no tool calls'


def _phase_summary(records: list[dict]) -> dict[str, Any]:
    ok = [r for r in records if r["ok"]]
    return {
        "requests": len(records),
        "responses": len(ok),
        "hits": sum(1 for r in ok if r["hit"]),
        "errors": len(records) - len(ok),
        "error_classes": dict(Counter(r["error_class"] for r in records if not r["ok"])),
        "finish_reasons": dict(Counter(str(r["finish_reason"]) for r in ok)),
        "empty_content": sum(1 for r in ok if r["empty_content"]),
        "invalid_tool_call_responses": sum(1 for r in ok if r["invalid_tool_calls"]),
    }


def build_report(
    records: Mapping[int, dict],
    identity: Mapping[str, Any],
    expected: int,
    log_scan: Mapping[str, PatternHits] | None,
    log_path: str | None,
    max_model_len: int | None = None,
) -> dict[str, Any]:
    """The report as a JSON-ready dict; ``verdict.passed`` decides the exit code."""
    ordered = [records[i] for i in sorted(records)]
    phases = {
        WARMUP: _phase_summary([r for r in ordered if r["phase"] == WARMUP]),
        MEASURED: _phase_summary([r for r in ordered if r["phase"] == MEASURED]),
        "total": _phase_summary(ordered),
    }
    ok = [r for r in ordered if r["ok"]]
    histogram = Counter(r["tool_calls"] for r in ok)
    report: dict[str, Any] = {
        "config": dict(identity),
        "hit_definition": HIT_DEFINITION,
        "expected_requests": expected,
        "recorded_requests": len(ordered),
        "complete": len(ordered) == expected,
        "phases": phases,
        "tool_call_histogram": {str(k): histogram[k] for k in sorted(histogram)},
        "invalid_tool_calls": [
            {"index": r["index"], "problems": r["invalid_tool_calls"]}
            for r in ok
            if r["invalid_tool_calls"]
        ][:20],
        "tokens": _token_summary(ok),
        "errors_sample": [
            {"index": r["index"], "class": r["error_class"], "detail": r["error_detail"]}
            for r in ordered
            if not r["ok"]
        ][:20],
        "log_scan": None
        if log_scan is None
        else {
            "path": log_path,
            "matches": {
                name: {"count": h.count, "first": list(h.first)} for name, h in log_scan.items()
            },
        },
    }
    report["c128a"] = (
        c128a_widths(max_model_len, report["tokens"]["largest_prompt_plus_completion"])
        if max_model_len is not None
        else None
    )
    report["verdict"] = _verdict(report)
    return report


def _token_summary(ok: list[dict]) -> dict[str, Any]:
    prompts = [r["prompt_tokens"] for r in ok if r["prompt_tokens"] is not None]
    totals = [
        (r["prompt_tokens"] + r["completion_tokens"], r["index"])
        for r in ok
        if r["prompt_tokens"] is not None and r["completion_tokens"] is not None
    ]
    largest = max(totals) if totals else None
    return {
        "responses_with_usage": len(totals),
        "prompt_tokens_min": min(prompts) if prompts else None,
        "prompt_tokens_max": max(prompts) if prompts else None,
        "largest_prompt_plus_completion": largest[0] if largest else None,
        "largest_at_index": largest[1] if largest else None,
    }


def _verdict(report: dict[str, Any]) -> dict[str, Any]:
    total = report["phases"]["total"]
    log_matches = 0
    if report["log_scan"] is not None:
        log_matches = sum(m["count"] for m in report["log_scan"]["matches"].values())
    reasons = []
    if not report["complete"]:
        reasons.append(
            f"incomplete: {report['recorded_requests']}/{report['expected_requests']} recorded"
        )
    if total["hits"]:
        reasons.append(f"{total['hits']} hit(s)")
    if total["errors"]:
        reasons.append(f"{total['errors']} transport/server error(s)")
    if total["invalid_tool_call_responses"]:
        bad = total["invalid_tool_call_responses"]
        reasons.append(f"{bad} response(s) with invalid tool calls")
    if log_matches:
        reasons.append(f"{log_matches} server-log match(es)")
    return {"passed": not reasons, "reasons": reasons}


def _finishes(summary: dict[str, Any]) -> str:
    n = summary["requests"]
    parts = [
        f"{count}/{n} {reason} finishes"
        for reason, count in sorted(summary["finish_reasons"].items(), key=lambda kv: -kv[1])
    ]
    return ", ".join(parts) if parts else "no finishes"


def _phase_line(label: str, s: dict[str, Any]) -> str:
    return f"- {label}: {s['hits']}/{s['requests']} hits, {s['errors']} errors, {_finishes(s)}."


def render_markdown(report: dict[str, Any]) -> str:
    """report.md: the seed's bullet summary, then the tables behind it."""
    cfg = report["config"]
    ph = report["phases"]
    tok = report["tokens"]
    verdict = report["verdict"]
    verdict_line = f"**Verdict: {'PASS' if verdict['passed'] else 'FAIL'}**"
    if not verdict["passed"]:
        verdict_line += " (" + "; ".join(verdict["reasons"]) + ")"
    lines = ["# Stress report", ""]
    if not report["complete"]:
        lines += [
            f"**Incomplete:** {report['recorded_requests']} of {report['expected_requests']} "
            "requests recorded; rerun with `--resume` to finish.",
            "",
        ]
    lines += [
        f"- Server: {cfg.get('base_url')} (requests to {cfg.get('url')}), "
        f"model {cfg.get('model')}.",
        f"- Load: concurrency {cfg.get('concurrency')}, {cfg.get('warmup_waves')} warm-up waves "
        f"followed by {cfg.get('waves')} measured waves, {report['expected_requests']} requests "
        f"total. Each request used the payload {cfg.get('payload')} (sha256 "
        f"{str(cfg.get('payload_sha256'))[:12]}), temperature={cfg.get('temperature'):g}, "
        f"max_tokens={cfg.get('max_tokens')}.",
        f"- Issue hit definition: {report['hit_definition']}.",
        _phase_line("Warm-up", ph[WARMUP]),
        _phase_line(f"Measured after the first {ph[WARMUP]['requests']} requests", ph[MEASURED]),
        f"- Total: {ph['total']['hits']}/{ph['total']['requests']} hits and "
        f"{ph['total']['errors']}/{ph['total']['requests']} transport/server errors.",
        _tool_line(report),
        _log_line(report),
        _token_line(tok),
        *_width_lines(report.get("c128a")),
        "",
        verdict_line,
        "",
        "## Finish reasons",
        "",
        _by_phase_table("finish reason", ph, "finish_reasons"),
        "",
        "## Tool-call counts",
        "",
        markdown_table(
            ["tool calls", "responses"],
            [[k, v] for k, v in report["tool_call_histogram"].items()],
            "rr",
        ),
    ]
    if ph["total"]["errors"]:
        lines += ["", "## Errors", "", _by_phase_table("error class", ph, "error_classes")]
        lines += ["", "First errors:", ""]
        lines += [f"- #{e['index']} {e['class']}: {e['detail']}" for e in report["errors_sample"]]
    if report["invalid_tool_calls"]:
        lines += ["", "## Invalid tool calls", ""]
        lines += [
            f"- #{e['index']}: {'; '.join(e['problems'])}" for e in report["invalid_tool_calls"]
        ]
    if report["log_scan"] is not None:
        lines += ["", "## Server log scan", "", f"`{report['log_scan']['path']}`", ""]
        rows = [
            [name, m["count"], "<br>".join(m["first"]) or "-"]
            for name, m in report["log_scan"]["matches"].items()
        ]
        lines.append(markdown_table(["pattern", "matches", "first lines"], rows, "lrl"))
    return "\n".join(lines) + "\n"


def _by_phase_table(label: str, ph: dict[str, Any], key: str) -> str:
    names: Iterable[str] = sorted(ph["total"][key], key=lambda k: -ph["total"][key][k])
    rows = [
        [n, ph[WARMUP][key].get(n, 0), ph[MEASURED][key].get(n, 0), ph["total"][key][n]]
        for n in names
    ]
    return markdown_table([label, "warm-up", "measured", "total"], rows, "lrrr")


def _tool_line(report: dict[str, Any]) -> str:
    total = report["phases"]["total"]
    hist = ", ".join(
        f"{k} for {v} response{'s' if v != 1 else ''}"
        for k, v in report["tool_call_histogram"].items()
    )
    bad = total["invalid_tool_call_responses"]
    validity = (
        "all tool calls used declared tool names with JSON-decodable arguments"
        if not bad
        else f"{bad} responses had invalid tool calls"
    )
    return (
        f"- Non-empty content in {total['responses'] - total['empty_content']}/"
        f"{total['responses']} responses; {validity}. Tool-call count was {hist or 'n/a'}."
    )


def _log_line(report: dict[str, Any]) -> str:
    scan = report["log_scan"]
    if scan is None:
        return "- Server error scan: not run (no --server-log)."
    found = {k: m["count"] for k, m in scan["matches"].items() if m["count"]}
    names = ", ".join(k.replace("_", " ") for k in scan["matches"])
    if not found:
        return f"- Server error scan: zero {names} matches."
    return "- Server error scan: " + ", ".join(f"{v} {k}" for k, v in found.items()) + " matches."


def _token_line(tok: dict[str, Any]) -> str:
    if tok["largest_prompt_plus_completion"] is None:
        return "- Token usage: not reported by the server."
    lo, hi = tok["prompt_tokens_min"], tok["prompt_tokens_max"]
    prompt = f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"
    return (
        f"- The prompt was {prompt} tokens and the largest prompt-plus-completion was "
        f"{tok['largest_prompt_plus_completion']:,} tokens (request #{tok['largest_at_index']})."
    )


def _width_lines(c: dict[str, Any] | None) -> list[str]:
    if c is None:
        return []
    return [
        f"- With max_model_len {c['max_model_len']:,}, the longest sequence "
        f"({c['longest_sequence']:,} tokens) exercised logical C128A width {c['width']} "
        f"with the capacity row stride {c['capacity']}."
    ]
