"""The ladder's outputs: a terminal table, a markdown file, JSON, and live progress."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from dsv4_evals.ladder.envelopes import EnvelopeLike
from dsv4_evals.ladder.run import EnvelopeResult, LadderReport
from dsv4_evals.render import fmt, markdown_table, print_rich_table

HEADERS = (
    "envelope",
    "context",
    "seqs",
    "prompt tok",
    "expected tok/s",
    "aggregate tok/s",
    "per-seq tok/s",
    "TTFT s",
    "window",
    "ratio",
    "verdict",
)
ALIGN = "lrrrrrrrlrl"


def rows(report: LadderReport) -> list[tuple[str, ...]]:
    out = []
    for r in report.results:
        doc = r.to_json()
        rates = r.per_seq()
        per_seq = (
            "-"
            if not rates
            else fmt(doc["mean_per_seq_tok_s"], 1)
            + (f" ({min(rates):.1f}-{max(rates):.1f})" if len(rates) > 1 else "")
        )
        prompt_tokens = r.prompt.get("counted_tokens") or r.prompt.get("target_tokens")
        window = (
            f"{r.aggregate.window_kind} {r.aggregate.window_s:.2f}s"
            if r.aggregate and r.aggregate.window_s is not None
            else "-"
        )
        out.append(
            (
                r.id,
                f"{r.context:,}",
                str(r.seqs),
                f"{prompt_tokens:,}" if prompt_tokens else "-",
                fmt(r.expected_tok_s, 1),
                fmt(r.aggregate_tok_s, 1),
                per_seq,
                fmt(doc["mean_ttft_s"], 2),
                window,
                fmt(r.ratio, 3),
                r.verdict.upper(),
            )
        )
    return out


def print_table(report: LadderReport, console: Console) -> None:
    print_rich_table(
        console,
        f"decode ladder: {report.options.base_url} (API {report.options.base_url}/v1), tolerance "
        f"±{report.options.tolerance:.0%}, {report.options.max_tokens} tokens per sequence",
        HEADERS,
        rows(report),
        ALIGN,
    )
    for r in report.results:
        for err in r.errors:
            console.print(f"{r.id}: {err}", markup=False, highlight=False)
        for warning in r.warnings:
            console.print(f"{r.id}: warning: {warning}", markup=False, highlight=False)
    console.print("verdict: " + ("OK" if report.ok else "FAIL (below tolerance or error)"))


def markdown(report: LadderReport) -> str:
    o = report.options
    lines = [
        "# Decode ladder",
        "",
        f"- server: {o.base_url} (API {o.base_url}/v1)"
        + (", launched per envelope" if o.launch else ""),
        f"- API: {o.api}, {o.max_tokens} generated tokens per sequence, "
        f"tolerance ±{o.tolerance:.0%}",
        "- rates exclude time to first token; aggregate = tokens over the window in which "
        "all sequences decode at once",
        "",
        markdown_table(HEADERS, rows(report), ALIGN),
        "",
    ]
    errors = [f"- {r.id}: {e}" for r in report.results for e in r.errors]
    if errors:
        lines += ["## Errors", "", *errors, ""]
    warnings = [f"- {r.id}: {w}" for r in report.results for w in r.warnings]
    if warnings:
        lines += ["## Warnings", "", *warnings, ""]
    lines.append("Verdict: " + ("OK" if report.ok else "FAIL"))
    return "\n".join(lines) + "\n"


class RichProgress:
    """Live bars on stderr: one per sequence (tokens received of max_tokens)."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=console,
            transient=False,
        )
        self.tasks: list[TaskID] = []

    def __enter__(self) -> RichProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def begin(self, envelope: EnvelopeLike, max_tokens: int) -> None:
        self.tasks = [
            self.progress.add_task(f"{envelope.id} seq {i + 1}/{envelope.seqs}", total=max_tokens)
            for i in range(envelope.seqs)
        ]

    def chunk(self, seq: int) -> None:
        if 0 <= seq < len(self.tasks):
            self.progress.advance(self.tasks[seq])

    def end(self, result: EnvelopeResult) -> None:
        rate = fmt(result.aggregate_tok_s, 1)
        for task in self.tasks:
            self.progress.update(task, visible=False)
        self.progress.console.print(
            f"{result.id}: aggregate {rate} tok/s, verdict {result.verdict}",
            markup=False,
            highlight=False,
        )
        self.tasks = []
