"""``dsv4-evals matrix``: the runbook's communication matrix, measured and judged.

The seed-004 runbook runs the 64K control envelope under environment variants (NCCL
algorithm and protocol pairs, FlashInfer's allreduce backend, the allreduce + RMSNorm
fusion), compares their decode rates and names a winner. The variants are data
(``data/comm_matrix.toml``, ``--variants FILE``). Each is measured at least three
times with the ladder's decode-rate measurement, either on servers you started
(``--server NAME=URL``, or ``--base-url URL --label NAME``; runs interleaved) or on
servers launched per variant through ``dsv4-serve`` with the variant's environment
(``--launch``). The report gives each variant's median, spread and ratio to the
control; a winner is named only when it beats the control by more than the
run-to-run spread.

With ``--out DIR`` every run is appended to ``DIR/measurements.jsonl`` and the report
covers all runs there, so variants can be measured one invocation at a time (restart
the server with the next variant's environment in between).

Exit status: 0 when every run of this invocation measured a rate; 1 when a run failed;
2 for unusable arguments, variant files or output folders.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import dsv4_evals.ladder as ladder
from dsv4_evals._patterns import PatternError
from dsv4_evals.args import int_at_least, usage_error
from dsv4_evals.base_url import HELP as BASE_URL_HELP
from dsv4_evals.base_url import BaseURLError, normalize_base_url
from dsv4_evals.ladder.envelopes import select
from dsv4_evals.ladder.run import LaunchOptions
from dsv4_evals.matrix.report import as_json, header_lines, markdown, print_report
from dsv4_evals.matrix.run import Measurement, measure_launched, measure_running
from dsv4_evals.matrix.stats import MIN_REPEATS, judge
from dsv4_evals.matrix.variants import Matrix, Variant, load_matrix
from dsv4_evals.render import stdout_console, to_json, write_atomic

__all__ = ["Matrix", "Measurement", "Variant", "judge", "load_matrix", "register"]

MEASUREMENTS = "measurements.jsonl"
IDENTITY = "matrix-run.json"
_REPEATS = int_at_least(MIN_REPEATS, "runs per variant are needed to see the run-to-run spread")


class UsageError(ValueError):
    """Arguments or an output folder that cannot be used; the message says why."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "matrix",
        help="measure the comm-matrix variants' decode rates and name a winner",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--variants", metavar="FILE",
                   help="variant TOML replacing the shipped data/comm_matrix.toml")
    p.add_argument("--variant", metavar="NAME", action="append",
                   help="with --launch: only these variants (repeatable; the control always)")
    p.add_argument("--envelope", metavar="ID", help="serve-table envelope (default: the file's)")
    p.add_argument("--repeats", type=_REPEATS, default=MIN_REPEATS, metavar="N",
                   help=f"runs per variant, at least {MIN_REPEATS} (default {MIN_REPEATS})")
    where = p.add_argument_group("servers")
    where.add_argument("--server", metavar="NAME=URL", action="append", default=[],
                       help="a running server for variant NAME (repeatable; runs interleave)")
    where.add_argument("--base-url", help=BASE_URL_HELP + "; with --label: that variant's "
                       "server; with --launch: where launched servers listen")
    where.add_argument("--label", metavar="NAME", help="the variant the --base-url server runs")
    where.add_argument("--launch", action="store_true",
                       help="start each variant's server with dsv4-serve and its env")
    ladder.add_server_arguments(where)
    ladder.add_request_arguments(p)
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print JSON instead of the table")
    out.add_argument("--out", type=Path, metavar="DIR",
                     help="append runs to DIR/measurements.jsonl; write matrix.json/.md")
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        matrix = load_matrix(args.variants)
        (envelope,) = select(ladder.ENVELOPE_SOURCE(), [args.envelope or matrix.envelope])
        servers = _servers(args, matrix)
        variants = _launch_variants(args, matrix)
        base_url = normalize_base_url(args.base_url or "http://127.0.0.1:8000").root
        identity = _identity(args, envelope.id, matrix)
        previous = _previous(args.out, identity)
    except (PatternError, BaseURLError, UsageError, ImportError, ValueError) as exc:
        return usage_error("matrix", str(exc))
    options = ladder.options_from_args(args, base_url, None)
    first = 1 + max((m.repeat for m in previous), default=-1)
    new: list[Measurement] = []
    count = args.repeats * (len(variants) if args.launch else len(servers))
    sink = _Sink(args.out, new, count, args.no_progress)
    with sink:
        if args.launch:
            log_dir = args.out or Path(tempfile.mkdtemp(prefix="dsv4-matrix-"))
            launch = LaunchOptions(log_dir=log_dir, launcher=tuple(shlex.split(args.serve_command)),
                                   model_args=tuple(args.model_args),
                                   ready_timeout_s=args.launch_timeout)
            measure_launched(variants, envelope, options, launch, args.repeats, sink.add, first)
        else:
            measure_running([(matrix.get(n), u) for n, u in servers.items()], envelope,
                            options, args.repeats, sink.add, first)
    everything = [*previous, *new]
    runs: dict[str, list[float | None]] = {matrix.control.name: []}
    errors: dict[str, list[str]] = {}
    for v in matrix.variants:
        mine = [m for m in everything if m.variant == v.name]
        if mine or v.control:
            runs[v.name] = [m.tok_s for m in mine]
            errors[v.name] = [m.error for m in mine if m.error]
    ordered = {v.name: runs[v.name] for v in matrix.variants if v.name in runs}
    bunched = {n: sum(1 for m in everything if m.variant == n and m.bunched) for n in ordered}
    judgement = judge(ordered, errors, matrix.control.name, bunched=bunched)
    urls = {m.variant: m.base_url for m in everything}
    failed = [m for m in everything if m.error]
    head = header_lines(matrix, envelope.id, args.repeats, urls, args.launch)
    doc = as_json(matrix, judgement, envelope.id, urls, args.launch, everything)
    if args.out is not None:
        write_atomic(args.out / "matrix.json", to_json(doc))
        write_atomic(args.out / "matrix.md", markdown(matrix, judgement, head, failed, everything))
    if args.json:
        sys.stdout.write(to_json(doc))
    else:
        print_report(stdout_console(), matrix, judgement, head, failed, everything)
    return 1 if any(m.error for m in new) else 0


def _servers(args: argparse.Namespace, matrix: Matrix) -> dict[str, str]:
    """``{variant: server root}`` from --server and --base-url/--label, validated."""
    pairs: list[tuple[str, str]] = []
    for item in args.server:
        name, sep, url = item.partition("=")
        if not sep or not name or not url:
            raise UsageError(f"--server {item!r}: expected NAME=URL, e.g. control=http://h:8000")
        pairs.append((name, url))
    if args.label is not None:
        if args.base_url is None or args.launch:
            raise UsageError("--label names the variant of the --base-url server; give both, "
                             "without --launch")
        pairs.append((args.label, args.base_url))
    if args.launch and pairs:
        raise UsageError("--launch starts its own servers; drop --server/--label")
    if args.model_args and not args.launch:
        raise UsageError(f"arguments {args.model_args} are for --launch only")
    out: dict[str, str] = {}
    for name, url in pairs:
        matrix.get(name)  # refuses a label that is not a variant
        if name in out:
            raise UsageError(f"variant {name!r} is given two servers")
        out[name] = normalize_base_url(url, f"--server {name}").root
    if not out and not args.launch and args.out is None:
        raise UsageError("nothing to measure: give --server NAME=URL, --base-url with --label, "
                         "or --launch (or --out DIR to report runs already there)")
    return out


def _launch_variants(args: argparse.Namespace, matrix: Matrix) -> list[Variant]:
    if args.variant and not args.launch:
        raise UsageError("--variant selects variants to launch; with running servers name "
                         "them in --server")
    if not args.variant:
        return list(matrix.variants)
    wanted = {matrix.get(n).name for n in args.variant} | {matrix.control.name}
    return [v for v in matrix.variants if v.name in wanted]


def _identity(args: argparse.Namespace, envelope: str, matrix: Matrix) -> dict[str, object]:
    """What must match for runs of several invocations to be compared."""
    return {
        "envelope": envelope,
        "variants": {v.name: dict(v.env) for v in matrix.variants},
        "api": args.api,
        "model": args.model,
        "max_tokens": args.max_tokens,
        "prompt_tokens": args.prompt_tokens,
        "prompt_fraction": None if args.prompt_tokens else args.prompt_fraction,
        "shared_prefix": not args.distinct_prompts,
        "ignore_eos": not args.allow_eos,
    }


def _previous(out: Path | None, identity: dict[str, object]) -> list[Measurement]:
    """Runs already in ``out`` (refused when they were taken with other settings)."""
    if out is None:
        return []
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: not a folder")
    out.mkdir(parents=True, exist_ok=True)
    ident_path = out / IDENTITY
    if ident_path.exists():
        recorded = json.loads(ident_path.read_text())
        diffs = [f"{k}: recorded {recorded.get(k)!r}, now {v!r}" for k, v in identity.items()
                 if recorded.get(k) != v]
        if diffs:
            raise UsageError(f"--out {out} holds runs taken with other settings ("
                             + "; ".join(diffs) + "); use the same options or another --out")
    else:
        write_atomic(ident_path, to_json(identity))
    path = out / MEASUREMENTS
    if not path.exists():
        return []
    runs = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            runs.append(Measurement.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"{path}:{n}: not a matrix run ({exc})") from None
    return runs


class _Sink:
    """Receives each run: keeps it, appends it to the output file, advances the bar."""

    def __init__(self, out: Path | None, runs: list[Measurement], total: int,
                 no_progress: bool) -> None:
        self.path = out / MEASUREMENTS if out is not None else None
        self.runs = runs
        console = Console(stderr=True)
        self.progress = None
        if not no_progress and console.is_terminal:
            self.progress = Progress(TextColumn("matrix {task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TimeElapsedColumn(), console=console)
            self.task = self.progress.add_task("", total=total)

    def __enter__(self) -> _Sink:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def add(self, m: Measurement) -> None:
        self.runs.append(m)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(m.to_json(), sort_keys=True) + "\n")
        if self.progress is not None:
            rate = "failed" if m.tok_s is None else f"{m.tok_s:,.1f} tok/s"
            self.progress.update(self.task, advance=1, description=f"{m.variant}: {rate}")

