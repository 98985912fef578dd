"""``dsv4-evals ladder``: measure the serve table's envelopes against their decode rates.

For each envelope (context x concurrent sequences) of the serve table, or those named
with ``--envelope``, the ladder either starts the server with ``dsv4-serve``
(``--launch``) or uses a running one (``--base-url``), streams ``seqs`` concurrent
requests with prompts filling a fraction of the context, and measures the steady
decode rate with time to first token left out. Each envelope's aggregate rate is
compared with its expected rate: ``pass`` within ``--tolerance``, else ``below`` or
``above``; a control shape without an expected rate is ``measured``.

Exit status: 0 when no envelope is below tolerance or failed; 1 otherwise; 2 for
unusable arguments.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console

from dsv4_evals.args import (
    add_proxy_flag,
    fraction,
    non_negative_int,
    positive_float,
    positive_int,
    tolerance,
    usage_error,
)
from dsv4_evals.base_url import HELP as BASE_URL_HELP
from dsv4_evals.base_url import BaseURLError, normalize_base_url
from dsv4_evals.ladder.envelopes import EnvelopeLike, select, shipped_envelopes, verdict
from dsv4_evals.ladder.measure import StreamRecord, aggregate_rate, sequence_rate
from dsv4_evals.ladder.prompt import DEFAULT_WORDS_PER_TOKEN
from dsv4_evals.ladder.report import RichProgress, markdown, print_table
from dsv4_evals.ladder.run import LadderOptions, LadderReport, LaunchOptions, run_ladder
from dsv4_evals.render import stdout_console, to_json, write_atomic

__all__ = [
    "LadderOptions",
    "LadderReport",
    "LaunchOptions",
    "StreamRecord",
    "aggregate_rate",
    "register",
    "run_ladder",
    "sequence_rate",
    "verdict",
]

# Where the envelopes come from; tests replace it to inject their own table.
ENVELOPE_SOURCE: Callable[[], Sequence[EnvelopeLike]] = shipped_envelopes


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ladder",
        help="measure decode tok/s per serve envelope and compare with the table",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--envelope", metavar="ID", action="append",
                   help="measure only this envelope (repeatable; default: all)")
    where = p.add_argument_group("server")
    where.add_argument("--base-url", default="http://127.0.0.1:8000",
                       help=BASE_URL_HELP + "; also where --launch waits for it")
    where.add_argument("--launch", action="store_true",
                       help="start the server per envelope with dsv4-serve, stop it after")
    add_server_arguments(where)
    add_request_arguments(p)
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print JSON instead of the table")
    out.add_argument("--out", type=Path, metavar="DIR",
                     help="write ladder.json and ladder.md (and server logs) here")
    out.add_argument("--no-progress", action="store_true", help="no live progress bars")
    p.set_defaults(func=run)


def add_server_arguments(where: argparse._ArgumentGroup) -> None:
    """The launcher and connection flags after ``--launch`` (shared with ``matrix``)."""
    where.add_argument("--serve-command", default="dsv4-serve", metavar="CMD",
                       help="launcher command line for --launch (default: dsv4-serve)")
    add_proxy_flag(where)
    where.add_argument("--launch-timeout", type=positive_float, default=1800.0, metavar="S",
                       help="seconds to wait for /health or /v1/models (default 1800)")
    where.add_argument("model_args", nargs="*", metavar="-- MODEL_ARGS",
                       help="after --: the model and vllm serve flags for --launch")


def add_request_arguments(p: argparse.ArgumentParser) -> None:
    """The request flags of one decode-rate measurement (shared with ``matrix``)."""
    req = p.add_argument_group("requests")
    req.add_argument("--model", help="model name for requests (default: first of /v1/models)")
    req.add_argument("--api", choices=("completions", "chat"), default="completions")
    req.add_argument("--prompt-fraction", type=fraction, default=0.5, metavar="F",
                     help="prompt length as a fraction of the context (default 0.5)")
    req.add_argument("--prompt-tokens", type=positive_int, metavar="N",
                     help="prompt length in tokens, overriding --prompt-fraction")
    req.add_argument("--words-per-token", type=positive_float, default=DEFAULT_WORDS_PER_TOKEN,
                     metavar="R", help="words per token when the server has no /tokenize "
                     f"(default {DEFAULT_WORDS_PER_TOKEN})")
    req.add_argument("--no-calibrate", action="store_true",
                     help="do not measure the words/token ratio with the server's /tokenize")
    req.add_argument("--distinct-prompts", action="store_true",
                     help="give every sequence its own prompt body (no shared prefix)")
    req.add_argument("--max-tokens", type=positive_int, default=512, metavar="N",
                     help="tokens generated per sequence (default 512)")
    req.add_argument("--allow-eos", action="store_true",
                     help="do not send ignore_eos (sequences may stop early)")
    req.add_argument("--warmup", type=non_negative_int, default=1, metavar="N",
                     help="short requests sent before measuring (default 1)")
    req.add_argument("--request-timeout", type=positive_float, default=3600.0, metavar="S",
                     help="seconds per request, a stream from sending it to its last chunk "
                     "(default 3600)")
    req.add_argument("--tolerance", type=tolerance, default=0.10, metavar="T",
                     help="relative band around the expected rate that passes (default 0.10)")


def run(args: argparse.Namespace) -> int:
    if args.model_args and not args.launch:
        return usage_error("ladder", f"arguments {args.model_args} are for --launch only")
    try:
        chosen = select(ENVELOPE_SOURCE(), args.envelope)
    except (ImportError, ValueError) as exc:
        # ImportError: dsv4-policy missing; ValueError: its table or --envelope is bad.
        return usage_error("ladder", str(exc))
    if not chosen:
        return usage_error("ladder", "the serve table has no envelopes to measure")
    try:
        normalize_base_url(args.base_url)
    except BaseURLError as exc:
        return usage_error("ladder", str(exc))
    launch = None
    if args.launch:
        log_dir = args.out or Path(tempfile.mkdtemp(prefix="dsv4-ladder-"))
        launch = LaunchOptions(
            log_dir=log_dir,
            launcher=tuple(shlex.split(args.serve_command)),
            model_args=tuple(args.model_args),
            ready_timeout_s=args.launch_timeout,
        )
    options = options_from_args(args, args.base_url, launch)
    err_console = Console(stderr=True)
    if args.no_progress or not err_console.is_terminal:
        report = run_ladder(chosen, options)
    else:
        with RichProgress(err_console) as progress:
            report = run_ladder(chosen, options, progress)
    if args.out is not None:
        write_atomic(args.out / "ladder.json", to_json(report.to_json()))
        write_atomic(args.out / "ladder.md", markdown(report))
    if args.json:
        sys.stdout.write(to_json(report.to_json()))
    else:
        print_table(report, stdout_console())
    return 0 if report.ok else 1


def options_from_args(
    args: argparse.Namespace, base_url: str, launch: LaunchOptions | None
) -> LadderOptions:
    """The measurement options of the request flags (shared with ``matrix``)."""
    return LadderOptions(
        base_url=base_url,
        api=args.api,
        model=args.model,
        prompt_fraction=args.prompt_fraction,
        prompt_tokens=args.prompt_tokens,
        words_per_token=args.words_per_token,
        calibrate=not args.no_calibrate,
        shared_prefix=not args.distinct_prompts,
        max_tokens=args.max_tokens,
        ignore_eos=not args.allow_eos,
        tolerance=args.tolerance,
        warmup=args.warmup,
        request_timeout_s=args.request_timeout,
        launch=launch,
        use_proxy_env=args.use_proxy_env,
    )

