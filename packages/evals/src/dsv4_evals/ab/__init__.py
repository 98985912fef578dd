"""``dsv4-evals ab``: is the candidate's accuracy different from the base's, or noise?

It reads two lm-eval output directories, pairs their per-document samples by task,
filter and doc_id, tests every metric (exact McNemar for 0/1 scores, a seeded paired
bootstrap for continuous ones, an unpaired z-test from the stderrs when there are no
samples), Holm-adjusts the p-values and prints the seed's table with a verdict per
row. Exit code 1 on any significant regression, 2 on unusable input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..args import non_negative_float, positive_int, probability, usage_error
from ..render import to_json
from .compare import Options, Report, compare
from .lmeval_io import LmEvalFormatError, load_run
from .render import render_markdown

__all__ = ["Options", "Report", "compare", "load_run", "register", "run_command"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "ab",
        help="paired accuracy A/B gate over two lm-eval output directories",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--base", required=True, type=Path, help="lm-eval --output_path of the base")
    p.add_argument("--candidate", required=True, type=Path,
                   help="lm-eval --output_path of the candidate")  # fmt: skip
    p.add_argument("--alpha", type=probability, default=0.05, help="significance level")
    p.add_argument("--margin", type=non_negative_float, default=0.0,
                   help="non-inferiority margin: a significant drop counts as a regression "
                   "only when the (oriented) delta is below -margin")  # fmt: skip
    p.add_argument("--correction", choices=("holm", "none"), default="holm",
                   help="multiple-comparison correction across all rows")  # fmt: skip
    p.add_argument("--bootstrap-iters", type=positive_int, default=10_000,
                   help="paired bootstrap resamples (continuous metrics)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--base-label", default="base", help="column title for the base")
    p.add_argument("--candidate-label", default="candidate",
                   help="column title for the candidate")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    try:
        options = Options(
            alpha=args.alpha,
            margin=args.margin,
            correction=args.correction,
            bootstrap_iters=args.bootstrap_iters,
            seed=args.seed,
        )
        report = compare(load_run(args.base), load_run(args.candidate), options)
    except (LmEvalFormatError, ValueError) as exc:
        return usage_error("ab", str(exc))
    if args.json:
        data = report.to_dict()
        data["base"], data["candidate"] = str(args.base), str(args.candidate)
        sys.stdout.write(to_json(data))
    else:
        sys.stdout.write(render_markdown(report, args.base_label, args.candidate_label))
    return 1 if report.regression else 0
