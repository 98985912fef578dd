"""``dsv4-evals buckets TRACE``: where the GPU time of a decode step goes.

Reads a torch profiler chrome trace (``.json`` or ``.json.gz``), sorts every GPU
kernel into the buckets of the seed-004 runbook (TP allreduce, MoE, CSA indexer,
CSA sparse MQA, HCA, SWA, mHC, logits all-gather, dense GEMM, other) and reports
each bucket's total time, calls, time per CUDA-graph launch and share. It answers
"which bucket to work on next" from data, e.g. that 17.5 of an 18 ms TP8 decode step
is allreduce.

Exit status: 0 on success; 2 when the trace or the pattern file cannot be used.
"""

from __future__ import annotations

import argparse
import sys

from dsv4_evals._patterns import PatternError
from dsv4_evals.args import non_negative_int, positive_int, usage_error, warning
from dsv4_evals.buckets.report import as_json, print_human
from dsv4_evals.buckets.rules import BucketRules, load_rules, with_categories
from dsv4_evals.buckets.tally import Tally, tally
from dsv4_evals.buckets.trace import TraceError, read_trace
from dsv4_evals.render import stdout_console, to_json

__all__ = ["BucketRules", "Tally", "bucket_trace", "load_rules", "register", "tally"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "buckets",
        help="bucket the GPU kernel time of a torch profiler trace",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("trace", metavar="TRACE", help="chrome-trace JSON from torch.profiler (.gz ok)")
    p.add_argument(
        "--patterns",
        metavar="FILE",
        help="TOML bucket file replacing the shipped data/buckets_patterns.toml",
    )
    p.add_argument(
        "--category",
        metavar="CAT",
        action="append",
        help="count events of this trace category instead of the file's list "
        "(repeatable; e.g. cpu_op for a CPU-only trace)",
    )
    p.add_argument(
        "--graph-launches",
        metavar="N",
        type=positive_int,
        help="divide by N graph launches instead of counting cudaGraphLaunch events",
    )
    p.add_argument(
        "--top",
        metavar="K",
        type=non_negative_int,
        default=0,
        help="also list the K largest kernels per bucket",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=run)


def bucket_trace(
    path: str,
    rules: BucketRules,
    graph_launches: int | None = None,
) -> Tally:
    """Library entry point: read ``path`` and bucket its events under ``rules``."""
    trace = read_trace(path, rules.categories, rules.graph_launch)
    if graph_launches is None:
        return tally(trace.events, rules, trace.graph_launches, "trace", trace.categories_seen)
    return tally(trace.events, rules, graph_launches, "override", trace.categories_seen)


def run(args: argparse.Namespace) -> int:
    try:
        rules = load_rules(args.patterns)
        if args.category:
            rules = with_categories(rules, args.category)
        result = bucket_trace(args.trace, rules, args.graph_launches)
    except (PatternError, TraceError) as exc:
        return usage_error("buckets", str(exc))
    if result.calls == 0:
        warning(
            "buckets",
            f"no 'X' events of categories {', '.join(rules.categories)} in "
            f"{args.trace}; categories present: "
            f"{', '.join(sorted(result.categories_seen)) or 'none'} (see --category)",
        )
    if args.json:
        # JSON always names a few kernels per bucket: tools want the evidence too.
        doc = as_json(result, args.trace, rules.source, rules.categories, max(args.top, 5))
        sys.stdout.write(to_json(doc))
    else:
        print_human(result, args.trace, stdout_console(), args.top)
    return 0

