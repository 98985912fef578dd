"""The never-slower and long-prefill results as numbers and markdown, from plain dicts.

Shared by the bench sessions (each kernel's ``conftest.py``), which measure and gate, and
the report sections, which show the last bench run's results; pure Python, so it is
tested on the CPU. Also the report's markdown table and progress bar.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Mapping, Sequence


def key_summary(rows: Sequence[Mapping], seed: int) -> dict:
    """min, p5 and median of the random keys' ratios, and the five worst keys."""
    if not rows:
        raise ValueError("key_summary: no keys")
    ratios = sorted(r["ratio"] for r in rows)
    p5 = ratios[int(0.05 * (len(ratios) - 1))]
    worst = sorted(rows, key=lambda r: r["ratio"])[:5]
    return {"seed": seed, "count": len(ratios), "min": ratios[0], "p5": p5,
            "median": statistics.median(ratios), "worst": worst}


def key_label(row: Mapping) -> str:
    k = row["key"]
    return (f"{row['entry']} decode {k['num_decode_tokens']} prefill "
            f"{k['num_prefill_tokens']} max_seq_len {k['max_seq_len']} max_model_len "
            f"{k['max_model_len']}")


def key_markdown(summary: Mapping) -> str:
    """The distribution line and the five worst keys, as markdown."""
    lines = [f"Random keys inside the table's entries: {summary['count']} keys, seed "
             f"{summary['seed']}; table launch over the baseline launch (GPU time, CUDA-graph "
             f"replay medians, same run): min **{summary['min']:.3f}x**, p5 "
             f"{summary['p5']:.3f}x, median {summary['median']:.3f}x.", "",
             "| worst keys | tile | ratio |", "|---|---|---|"]
    lines += [f"| {key_label(r)} | {tuple(r['tile'])} | {r['ratio']:.3f}x |"
              for r in summary["worst"]]
    return "\n".join(lines) + "\n"


def _floor_cell(r: Mapping) -> str:
    base = 100 * r["baseline_us"] / r["ideal_us"]
    fill = f", fill {100 * r['fill_us'] / r['ideal_us']:.0f}%" if "fill_us" in r else ""
    store = (f", store-only {100 * r['store_only_us'] / r['ideal_us']:.0f}%"
             if "store_only_us" in r else "")
    return f"{r['pct_of_ideal']:.0f}% ({base:.0f}%{fill}{store})"


def floor_markdown(floor: Mapping[str, Mapping]) -> str:
    """The long-prefill table: % of (empty launch + write floor), one row per T."""
    widths = sorted({r["width"] for r in floor.values()})
    tokens = sorted({r["tokens"] for r in floor.values()})
    by = {(r["width"], r["tokens"]): r for r in floor.values()}
    lines = ["Prefill, % of (empty launch + write floor), GPU time; table launch (in "
             "brackets: the baseline launch, torch's fill_ of the same strided view, and a "
             "launch that writes the same bytes and reads nothing):", "",
             "| T \\ width | " + " | ".join(str(w) for w in widths) + " |",
             "|---|" + "---|" * len(widths)]
    for t in tokens:
        cells = [_floor_cell(by[w, t]) if (w, t) in by else "" for w in widths]
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def floor_verdicts(floor: Mapping[str, Mapping], limit_pct: float) -> tuple[list[str], list[str]]:
    """(failures, target misses) of the long-prefill floor check.

    A shape above ``limit_pct`` of (empty launch + write floor) fails only where torch's
    own ``fill_`` of the same strided view is faster: there the launch, not the write
    pattern, is what is slow. Shapes above the target but faster than that fill are
    target misses, reported on every run and never hidden.
    """
    failures, misses = [], []
    for name, r in floor.items():
        if r["pct_of_ideal"] <= limit_pct:
            continue
        fill_pct = 100.0 * r["fill_us"] / r["ideal_us"]
        if r["table_us"] > r["fill_us"]:
            failures.append(f"{name}: {r['pct_of_ideal']:.0f}% of (empty launch + write floor), "
                            f"above {limit_pct:.0f}% and slower than torch's fill_ of the same "
                            f"view ({r['table_us']:.2f} vs {r['fill_us']:.2f} µs; {r['source']})")
        else:
            store = (f", a store-only launch {100.0 * r['store_only_us'] / r['ideal_us']:.0f}%"
                     if "store_only_us" in r else "")
            misses.append(f"{name}: {r['pct_of_ideal']:.0f}% of (empty launch + write floor); "
                          f"torch's fill_ of the same view {fill_pct:.0f}%{store}")
    return failures, misses


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table: one header row, one line per row of cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def progress(i: int, n: int, what: str) -> None:
    """A one-line progress bar on stderr: the report times many shapes."""
    width = 30
    done = int(width * i / n)
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {what:<40}")
    sys.stderr.flush()
    if i == n:
        sys.stderr.write("\n")
