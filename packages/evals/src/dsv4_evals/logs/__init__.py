"""``dsv4-evals logs SERVER_LOG``: check the CUDA-graph capture shape in a server log.

The seed-004 runbook's fast path depends on one capture shape: no speculative tokens,
uniform decode query length 1, capture sizes ``[1]`` and FULL graphs for steady
decode. Any cudagraph skip or miss line is the next root cause. This command reads a
log and reports each of those, so a regression is found from the log, not by eye.
It also reads the runbook's spec-decode probe (``SPEC_CUDAGRAPH_DEBUG=4``): the draft's
``cg_mode`` per phase, and which of the runbook's two readings applies (``probe``).

Exit status: 0 when every check passes, no skip/miss line was found and no probe
outcome fails (an eager draft phase); 1 otherwise;
2 when the log or the pattern file cannot be used.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dsv4_evals._patterns import PatternError
from dsv4_evals.args import usage_error
from dsv4_evals.logs.report import as_json, print_human
from dsv4_evals.logs.rules import Rules, load_rules, with_expectations
from dsv4_evals.logs.scan import LogReport, scan
from dsv4_evals.render import stdout_console, to_json

__all__ = ["LogReport", "Rules", "check_log", "load_rules", "register", "scan"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "logs",
        help="check the CUDA-graph capture shape and list cudagraph skip/miss lines",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("log", metavar="SERVER_LOG", help="server log file ('-' reads stdin)")
    p.add_argument(
        "--patterns",
        metavar="FILE",
        help="TOML rule file replacing the shipped data/logs_patterns.toml",
    )
    p.add_argument(
        "--expect-capture-sizes",
        metavar="SIZES",
        help="expected capture sizes, e.g. '1' or '1,2,4' (default from the rules: [1])",
    )
    p.add_argument(
        "--expect",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="override any check's expected value, e.g. --expect num_spec_tokens=2",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=run)


def check_log(text: str, rules: Rules, log_name: str = "<log>") -> LogReport:
    """Library entry point: scan ``text`` with ``rules``."""
    return scan(text, rules, log_name)


def run(args: argparse.Namespace) -> int:
    try:
        rules = load_rules(args.patterns)
        overrides = _parse_expect(args.expect)
        if args.expect_capture_sizes is not None:
            overrides["capture_sizes"] = args.expect_capture_sizes
        rules = with_expectations(rules, overrides)
        text, name = _read_log(args.log)
    except PatternError as exc:
        return usage_error("logs", str(exc))
    except OSError as exc:
        return usage_error("logs", f"cannot read server log {args.log}: {exc.strerror}")
    report = scan(text, rules, name)
    if args.json:
        sys.stdout.write(to_json(as_json(report)))
    else:
        print_human(report, stdout_console())
    return 0 if report.ok else 1


def _parse_expect(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise PatternError(f"--expect {item!r}: expected NAME=VALUE, e.g. cg_mode=FULL")
        out[name.strip()] = value
    return out


def _read_log(path: str) -> tuple[str, str]:
    if path == "-":
        return sys.stdin.buffer.read().decode("utf-8", errors="replace"), "<stdin>"
    # Keep carriage returns (newline=""): line numbers must match an editor's view
    # of the file, where a redrawn progress bar is one line. Logs can carry stray
    # bytes from progress bars; never fail on decoding.
    with Path(path).open(encoding="utf-8", errors="replace", newline="") as fh:
        return fh.read(), path
