"""Human and JSON views of a bucket ``Tally``."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from dsv4_evals.buckets.tally import Tally
from dsv4_evals.render import fmt, print_rich_table

_MAX_NAME = 90


def as_json(t: Tally, trace: str, patterns: str, categories: tuple[str, ...], top: int) -> dict:
    buckets: list[dict[str, Any]] = []
    for b in t.buckets:
        buckets.append(
            {
                "name": b.name,
                "total_ms": b.total_us / 1000.0,
                "calls": b.calls,
                "ms_per_graph": t.per_graph_ms(b.total_us),
                "percent": t.percent(b.total_us),
                "top_kernels": [
                    {"name": k, "total_ms": us / 1000.0, "calls": n}
                    for k, us, n in b.top_kernels(top)
                ],
            }
        )
    return {
        "trace": trace,
        "patterns": patterns,
        "categories": list(categories),
        "graph_launches": t.graph_launches,
        "graph_launch_source": t.graph_launch_source,
        "total_ms": t.total_us / 1000.0,
        "calls": t.calls,
        "ms_per_graph": t.per_graph_ms(t.total_us),
        "buckets": buckets,
    }


def print_human(t: Tally, trace: str, console: Console, top: int) -> None:
    rows = [
        (
            b.name,
            fmt(b.total_us / 1000.0),
            f"{b.calls:,}",
            fmt(t.per_graph_ms(b.total_us)),
            fmt(t.percent(b.total_us), 1),
        )
        for b in t.buckets
    ]
    rows.append(
        (
            "total",
            fmt(t.total_us / 1000.0),
            f"{t.calls:,}",
            fmt(t.per_graph_ms(t.total_us)),
            fmt(100.0 if t.total_us > 0 else None, 1),
        )
    )
    launches = (
        f"{t.graph_launches:,} graph launches ({t.graph_launch_source})"
        if t.graph_launches
        else "no graph launches in trace (per-graph column needs --graph-launches)"
    )
    print_rich_table(
        console,
        f"GPU time by bucket: {trace}, {launches}",
        ("bucket", "total ms", "calls", "ms/graph", "%"),
        rows,
        "lrrrr",
    )
    if top > 0:
        kernel_rows = [
            (b.name, _short(k), fmt(us / 1000.0), f"{n:,}")
            for b in t.buckets
            for k, us, n in b.top_kernels(top)
        ]
        print_rich_table(
            console,
            f"top {top} kernel(s) per bucket",
            ("bucket", "kernel", "total ms", "calls"),
            kernel_rows,
            "llrr",
        )


def _short(name: str) -> str:
    return name if len(name) <= _MAX_NAME else name[: _MAX_NAME - 3] + "..."
