"""The matrix's table (terminal and markdown) and its JSON."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console

from dsv4_evals.matrix.run import Measurement
from dsv4_evals.matrix.stats import Judgement, Summary
from dsv4_evals.matrix.variants import Matrix
from dsv4_evals.render import fmt, markdown_table, print_rich_table

HEADERS = ("variant", "env", "runs", "median tok/s", "spread tok/s (min-max)", "ratio",
           "verdict")
ALIGN = "llrrrrl"
RULE = ("a variant wins only when its median beats the control's by more than the "
        "larger of the two run-to-run spreads (max - min of each one's runs)")


def _env_text(env: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in env.items()) or "-"


def rows(matrix: Matrix, judgement: Judgement) -> list[tuple[str, ...]]:
    out = []
    for s in judgement.summaries:
        own = matrix.get(s.name).own_env
        spread = "-" if s.spread is None else (
            f"{fmt(s.spread, 1)} ({fmt(s.low, 1)}-{fmt(s.high, 1)})")
        ratio = "1.000" if s.control and s.median is not None else fmt(s.ratio)
        out.append((s.name, _env_text(own), str(len(s.rates)), fmt(s.median, 1), spread, ratio,
                    s.verdict.upper() if s.verdict == "winner" else s.verdict))
    return out


def header_lines(matrix: Matrix, envelope: str, repeats: int, servers: Mapping[str, str],
                 launched: bool) -> list[str]:
    urls = sorted(set(servers.values()))
    launch = "launched per variant at " if launched else ""
    if len(urls) == 1:
        where = f"server: {launch}{urls[0]} (API {urls[0]}/v1)"
    else:
        where = ("servers: " + (", ".join(f"{n} {u}" for n, u in servers.items()) or "-")
                 + " (API under <server>/v1)")
    return [
        f"comm matrix: envelope {envelope}, variants {matrix.source}",
        where,
        f"{repeats} run(s) per variant this time; rate = ladder aggregate decode tok/s, "
        "time to first token excluded",
        f"base env (every variant): {_env_text(matrix.base_env)}",
    ]


def bunched_lines(runs: Sequence[Measurement]) -> list[str]:
    """A warning when some runs' streams arrived in bursts (their rates are not decode)."""
    hit = [m for m in runs if m.bunched]
    if not hit:
        return []
    per: dict[str, int] = {}
    for m in hit:
        per[m.variant] = per.get(m.variant, 0) + 1
    return [f"warning: {len(hit)} of {len(runs)} runs had bunched streams (chunks read in "
            "bursts, see the ladder's warnings), so their rates are not decode rates: "
            + ", ".join(f"{v} {n}" for v, n in per.items())]


def print_report(console: Console, matrix: Matrix, judgement: Judgement,
                 head: Sequence[str], errors: Sequence[Measurement],
                 runs: Sequence[Measurement] = ()) -> None:
    for line in head:
        console.print(line, markup=False, highlight=False)
    print_rich_table(console, None, HEADERS, rows(matrix, judgement), ALIGN)
    for m in errors:
        console.print(f"{m.variant} run {m.repeat + 1}: {m.error}", markup=False,
                      highlight=False)
    for line in bunched_lines(runs):
        console.print(line, markup=False, highlight=False)
    console.print(f"rule: {RULE}", markup=False, highlight=False)
    console.print(judgement.reason, markup=False, highlight=False)


def markdown(matrix: Matrix, judgement: Judgement, head: Sequence[str],
             errors: Sequence[Measurement], runs: Sequence[Measurement] = ()) -> str:
    lines = ["# Comm matrix", "", *(f"- {h}" for h in head), "",
             markdown_table(HEADERS, rows(matrix, judgement), ALIGN), ""]
    if errors:
        lines += ["## Failed runs", "", *(f"- {m.variant} run {m.repeat + 1}: {m.error}"
                                          for m in errors), ""]
    lines += [*(f"{w}" + "\n" for w in bunched_lines(runs)),
              f"Rule: {RULE}.", "", f"**{judgement.reason}**", ""]
    return "\n".join(lines)


def as_json(matrix: Matrix, judgement: Judgement, envelope: str,
            servers: Mapping[str, str], launched: bool,
            measurements: Sequence[Measurement]) -> dict[str, Any]:
    def one(s: Summary) -> dict[str, Any]:
        return {
            "name": s.name, "control": s.control, "env": dict(matrix.get(s.name).env),
            "runs": list(s.rates), "median_tok_s": s.median, "min_tok_s": s.low,
            "max_tok_s": s.high, "spread_tok_s": s.spread, "ratio": s.ratio,
            "gain_tok_s": s.gain, "noise_tok_s": s.noise, "verdict": s.verdict,
            "errors": list(s.errors), "base_url": servers.get(s.name),
            "bunched_runs": sum(1 for m in measurements if m.variant == s.name and m.bunched),
            "api_url": (servers[s.name] + "/v1") if s.name in servers else None,
        }

    return {
        "variants_file": matrix.source,
        "envelope": envelope,
        "launched": launched,
        "rule": RULE,
        "winner": judgement.winner,
        "verdict": judgement.reason,
        "variants": [one(s) for s in judgement.summaries],
        "measurements": [m.to_json() for m in measurements],
    }
