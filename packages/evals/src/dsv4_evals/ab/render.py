"""The A/B table in the seed's layout, with the test, p-values and verdict added."""

from __future__ import annotations

from ..render import markdown_table
from .compare import MCNEMAR, REGRESSION, Report


def _fmt(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _p(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.2e}" if x < 1e-3 else f"{x:.4f}"


def render_markdown(report: Report, base_label: str, candidate_label: str) -> str:
    opts = report.options
    headers = [
        "Tasks", "Filter", "n-shot", "Metric", "", base_label, "±", candidate_label, "±",
        "Delta", "Test", "n", "lost/won", "p", "p (Holm)" if opts.correction == "holm" else "p'",
        "Verdict",
    ]  # fmt: skip
    rows = []
    last_task = None
    for c in report.comparisons:
        rows.append([
            c.task if c.task != last_task else "",
            c.filter,
            "-" if c.n_shot is None else c.n_shot,
            c.metric,
            "↑" if c.higher_is_better else "↓",
            _fmt(c.base),
            _fmt(c.base_stderr),
            _fmt(c.candidate),
            _fmt(c.candidate_stderr),
            f"{c.delta:+.4f}",
            c.test,
            "-" if c.n_paired is None else c.n_paired,
            f"{c.lost}/{c.won}" if c.test == MCNEMAR else "-",
            _p(c.p),
            _p(c.p_adjusted),
            f"**{c.verdict}**" if c.verdict == REGRESSION else c.verdict,
        ])  # fmt: skip
        last_task = c.task
    lines = [markdown_table(headers, rows, "llrlcrcrcrlrrrrl"), ""]
    corr = "Holm-adjusted across all rows" if opts.correction == "holm" else "not adjusted"
    lines.append(
        f"alpha = {opts.alpha}, margin = {opts.margin}; p-values two-sided, {corr}; "
        "verdicts use the adjusted p. lost/won = documents the candidate got wrong/right "
        "where the base got them right/wrong."
    )
    details = [
        f"- {c.task},{c.filter},{c.metric}: {c.detail}" for c in report.comparisons if c.detail
    ]
    if details or report.notes:
        lines += ["", "Notes:"]
        lines += details
        lines += [f"- {n}" for n in report.notes]
    lines += [
        "",
        "Result: "
        + ("SIGNIFICANT REGRESSION" if report.regression else "no significant regression"),
    ]
    return "\n".join(lines) + "\n"
