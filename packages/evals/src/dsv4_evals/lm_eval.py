"""``dsv4-evals lm-eval``: run lm-eval against a server exactly as the seed did.

An A/B comparison is only honest when both runs used the same tasks, shots,
generation settings, concurrency and seed. This command fixes them to the seed's:
``local-completions`` against ``<server root>/v1/completions`` with ``num_concurrent=32``,
``max_gen_toks=32768,temperature=0.0,do_sample=False``, ``--log_samples`` (the A/B
gate pairs those samples) and ``--seed 0``; gpqa_diamond_cot_zeroshot zero-shot and
gsm8k 5-shot, one lm-eval invocation per task, each under ``<out>/<task>/``.
``--dry-run`` prints the argv; otherwise lm-eval runs as a subprocess. lm-eval is not
a dependency of this package: install it where you run this (``pip install
"lm-eval[api]"``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .args import positive_int, usage_error
from .base_url import HELP as BASE_URL_HELP
from .base_url import normalize_base_url

# task -> number of few-shot examples, as in the seed's tables
SEED_TASKS: dict[str, int] = {"gpqa_diamond_cot_zeroshot": 0, "gsm8k": 5}
GEN_KWARGS = "max_gen_toks=32768,temperature=0.0,do_sample=False"
NUM_CONCURRENT = 32
SEED = 0
REQUEST_TIMEOUT_S = 7200


@dataclass(frozen=True)
class LmEvalPlan:
    """The settings that make two lm-eval runs comparable."""

    base_url: str
    model: str
    output_path: Path
    tasks: tuple[tuple[str, int], ...] = tuple(SEED_TASKS.items())
    tokenizer: str | None = None
    trust_remote_code: bool = False
    limit: int | None = None
    lm_eval_bin: str = "lm_eval"
    extra: tuple[str, ...] = ()

    def completions_url(self) -> str:
        return normalize_base_url(self.base_url).api_url("completions")

    def model_args(self) -> str:
        parts = [f"model={self.model}"]
        if self.tokenizer:
            parts.append(f"tokenizer={self.tokenizer}")
        parts += [
            f"base_url={self.completions_url()}",
            f"num_concurrent={NUM_CONCURRENT}",
            "tokenized_requests=False",
        ]
        if self.trust_remote_code:
            parts.append("trust_remote_code=True")
        parts.append(f"timeout={REQUEST_TIMEOUT_S}")
        return ",".join(parts)

    def argvs(self) -> list[list[str]]:
        """One lm-eval command line per task."""
        out = []
        for task, shots in self.tasks:
            argv = [
                self.lm_eval_bin,
                "--model", "local-completions",
                "--model_args", self.model_args(),
                "--tasks", task,
                "--num_fewshot", str(shots),
                "--gen_kwargs", GEN_KWARGS,
                "--output_path", str(self.output_path / task),
                "--log_samples",
                "--seed", str(SEED),
            ]  # fmt: skip
            if self.limit is not None:
                argv += ["--limit", str(self.limit)]
            out.append(argv + list(self.extra))
        return out


def _parse_task(spec: str) -> tuple[str, int]:
    name, _, shots = spec.partition(":")
    if not name:
        raise argparse.ArgumentTypeError(f"--task {spec!r}: expected NAME or NAME:SHOTS")
    if not shots:
        if name not in SEED_TASKS:
            raise argparse.ArgumentTypeError(
                f"--task {spec!r}: give the shots as {name}:N (known defaults: "
                + ", ".join(f"{t}:{s}" for t, s in SEED_TASKS.items())
                + ")"
            )
        return name, SEED_TASKS[name]
    if not shots.isdigit():
        raise argparse.ArgumentTypeError(f"--task {spec!r}: SHOTS must be a whole number")
    return name, int(shots)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "lm-eval",
        help="run lm-eval against a server with the seed's arguments",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--base-url",
        required=True,
        help=BASE_URL_HELP + "; lm-eval gets <root>/v1/completions",
    )
    p.add_argument("--model", required=True, help="the served model name")
    p.add_argument(
        "--output-path",
        required=True,
        type=Path,
        help="lm-eval output root; each task writes under <output-path>/<task>/",
    )
    p.add_argument("--tokenizer", help="tokenizer path or name passed in model_args")
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="add trust_remote_code=True to model_args (the seed did)",
    )
    p.add_argument(
        "--task",
        dest="tasks",
        action="append",
        type=_parse_task,
        metavar="NAME[:SHOTS]",
        help="replace the seed's tasks (repeatable); default "
        + " ".join(f"{t}:{s}" for t, s in SEED_TASKS.items()),
    )
    p.add_argument("--limit", type=positive_int, help="documents per task (smoke runs only)")
    p.add_argument("--lm-eval-bin", default="lm_eval", help="the lm-eval executable")
    p.add_argument(
        "--extra-arg",
        dest="extra",
        action="append",
        default=[],
        help="one more argument for lm-eval (repeatable)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the command lines, run nothing")
    p.set_defaults(func=run_command)  # fmt: skip


def run_command(args: argparse.Namespace) -> int:
    try:
        root = normalize_base_url(args.base_url).root
    except ValueError as exc:
        return usage_error("lm-eval", str(exc))
    plan = LmEvalPlan(
        base_url=root,
        model=args.model,
        output_path=args.output_path,
        tasks=tuple(args.tasks) if args.tasks else tuple(SEED_TASKS.items()),
        tokenizer=args.tokenizer,
        trust_remote_code=args.trust_remote_code,
        limit=args.limit,
        lm_eval_bin=args.lm_eval_bin,
        extra=tuple(args.extra),
    )
    argvs = plan.argvs()
    print(f"dsv4-evals lm-eval: server {plan.base_url}; lm-eval sends to "
          f"{plan.completions_url()}", file=sys.stderr)
    if args.dry_run:
        for argv in argvs:
            print(shlex.join(argv))
        return 0
    if shutil.which(plan.lm_eval_bin) is None:
        return usage_error(
            "lm-eval",
            f"{plan.lm_eval_bin!r} not found on PATH; lm-eval is not a dependency of "
            'dsv4-evals: install it with pip install "lm-eval[api]" '
            "(or point --lm-eval-bin at it)",
        )
    plan.output_path.mkdir(parents=True, exist_ok=True)
    manifest = plan.output_path / "dsv4-lm-eval.json"
    manifest.write_text(
        json.dumps({"base_url": plan.base_url, "url": plan.completions_url(), "argv": argvs},
                   indent=2) + "\n"
    )
    for argv in argvs:
        print(f"dsv4-evals lm-eval: running {shlex.join(argv)}", file=sys.stderr)
        code = subprocess.run(argv, check=False).returncode
        if code != 0:
            print(f"dsv4-evals lm-eval: lm-eval exited {code}; stopping", file=sys.stderr)
            return code if code > 0 else 128 - code  # killed by a signal: 128 + signum
    return 0
