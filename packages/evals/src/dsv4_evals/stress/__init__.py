"""``dsv4-evals stress``: reproduce the seed's acceptance run against a served model.

It sends one chat-completions payload in waves of ``--concurrency`` requests to any
OpenAI-compatible server, classifies every response (hit, error, finish reason, tool
calls and their validity, token usage), writes each result to ``results.jsonl`` as
it arrives, scans the server log, and writes ``report.md`` / ``report.json``. The
exit code is 1 when anything failed, so the run can gate a change.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..args import (
    add_proxy_flag,
    non_negative_int,
    positive_float,
    positive_int,
    usage_error,
)
from ..base_url import HELP as BASE_URL_HELP
from ..render import to_json, write_atomic
from .logscan import scan_log
from .payload import PayloadError, load_payload
from .report import build_report, render_markdown
from .runner import StressConfig, run_stress
from .store import ResultStore, StoreError, load_results

__all__ = ["register", "run_command"]

EXIT_INTERRUPTED = 130


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "stress",
        help="reproduce the seed's acceptance run against an OpenAI-compatible server",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--base-url",
        required=True,
        help=BASE_URL_HELP + "; the only address contacted",
    )
    add_proxy_flag(p)
    p.add_argument("--model", help="model name sent in each request (default: the payload's)")
    p.add_argument(
        "--payload",
        required=True,
        type=Path,
        help="JSON file holding one chat-completions request, tools included",
    )
    p.add_argument(
        "--concurrency", type=positive_int, default=32, help="requests in flight per wave"
    )
    p.add_argument(
        "--warmup-waves", type=non_negative_int, default=8, help="waves reported as warm-up"
    )
    p.add_argument(
        "--waves", type=positive_int, default=8, help="measured waves after the warm-up"
    )
    p.add_argument(
        "--max-tokens",
        type=positive_int,
        default=None,
        help="override the payload's max_tokens (without either: 16384)",
    )
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument(
        "--timeout", type=positive_float, default=1800.0, help="seconds per request, total"
    )
    p.add_argument("--server-log", type=Path, help="server log file to scan for errors")
    p.add_argument(
        "--max-model-len",
        type=positive_int,
        help="the server's max_model_len: report the C128A width the run exercised",
    )
    p.add_argument("--out", type=Path, default=Path("stress-out"), help="output directory")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out, skipping requests already recorded",
    )
    p.add_argument("--json", action="store_true", help="print report.json to stdout at the end")
    p.set_defaults(func=run_command)


class _Progress:
    """A rich progress bar on stderr; shown only on a terminal, harmless elsewhere."""

    def __init__(self, total: int, already: int, console: Console | None) -> None:
        console = console or Console(stderr=True)
        self._bar = Progress(
            TextColumn("stress"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("hits {task.fields[hits]} errors {task.fields[errors]}"),
            TimeElapsedColumn(),
            console=console,
            disable=not console.is_terminal,
        )
        self._task = self._bar.add_task("stress", total=total, completed=already, hits=0, errors=0)
        self._hits = 0
        self._errors = 0

    def __enter__(self) -> _Progress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def advance(self, record: dict) -> None:
        self._hits += bool(record.get("hit"))
        self._errors += not record.get("ok")
        self._bar.update(self._task, advance=1, hits=self._hits, errors=self._errors)


def run_command(
    args: argparse.Namespace,
    *,
    after_result: Callable[[dict], None] | None = None,
    console: Console | None = None,
) -> int:
    """Run (or resume) a stress run and write its report; returns the exit code.

    ``after_result`` is called after each record is stored; raising from it stops the
    run exactly as Ctrl-C does.
    """
    try:
        payload = load_payload(args.payload)
        config = StressConfig(
            base_url=args.base_url,
            payload=payload,
            model=args.model,
            concurrency=args.concurrency,
            warmup_waves=args.warmup_waves,
            waves=args.waves,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            timeout=args.timeout,
            use_proxy_env=args.use_proxy_env,
        )
        body = config.body()
        if args.server_log is not None and not args.server_log.is_file():
            raise ValueError(f"--server-log {args.server_log}: no such file")
        identity = {
            "base_url": config.base_url,
            "url": config.url,
            "model": body["model"],
            "payload": str(args.payload),
            "payload_sha256": payload.sha256,
            "concurrency": config.concurrency,
            "warmup_waves": config.warmup_waves,
            "waves": config.waves,
            "max_tokens": body.get("max_tokens", body.get("max_completion_tokens")),
            "temperature": config.temperature,
            "timeout": config.timeout,
            "run_id": secrets.token_hex(4),
        }
        store = ResultStore(args.out)
        existing = store.open(identity, resume=args.resume)
    except (PayloadError, StoreError, ValueError) as exc:
        return usage_error("stress", str(exc))

    interrupted = False
    try:
        with _Progress(config.total, len(existing), console) as progress:

            def on_result(record: dict) -> None:
                store.append(record)
                progress.advance(record)
                if after_result is not None:
                    after_result(record)

            asyncio.run(run_stress(config, existing, on_result, run_id=identity["run_id"]))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        store.close()

    records = load_results(store.results_path)
    log_scan = scan_log(args.server_log) if args.server_log is not None else None
    report = build_report(
        records,
        identity,
        config.total,
        log_scan,
        str(args.server_log) if args.server_log is not None else None,
        max_model_len=args.max_model_len,
    )
    write_atomic(store.dir / "report.json", to_json(report))
    write_atomic(store.dir / "report.md", render_markdown(report))
    if args.json:
        sys.stdout.write(to_json(report))
    if interrupted:
        print(
            f"dsv4-evals stress: interrupted; {len(records)}/{config.total} results kept in "
            f"{store.results_path}; rerun with --resume to finish",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return 0 if report["verdict"]["passed"] else 1
