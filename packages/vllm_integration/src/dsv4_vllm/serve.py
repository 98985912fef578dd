"""``dsv4-serve``: launch ``vllm serve`` from a validated serve envelope.

::

    dsv4-serve --gpu sm86 --tp 8 --context 262144 --seqs 1 [--dry-run] [--json]
               [--allow-avoided RULE ...] -- MODEL [vllm serve arguments ...]

The key (gpu, tp, context, seqs) is resolved by ``dsv4_policy.serve.plan``: an
envelope contributes its measured arguments and environment, a key with no envelope
passes the user's arguments through unchanged. The launcher then

1. prints the manifest (the complete command as one shell line, the critical
   environment block, the source, the expected rate, the notes; ``--json`` for JSON);
2. refuses, with exit code 2, arguments that break an avoid-rule, unless each broken
   rule is named with ``--allow-avoided``;
3. checks the command with vLLM's own ``serve`` parser, so a flag vLLM does not know
   fails here (exit 2, vLLM's message), also under ``--dry-run``;
4. replaces itself with ``vllm serve ...`` (``os.execvpe``, environment = the current
   one plus the manifest's), unless ``--dry-run``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence

from dsv4_policy import serve as policy_serve

from dsv4_vllm.arch import detect_arch
from dsv4_vllm.manifest_view import LaunchView, refusal_text, render_json, render_text
from dsv4_vllm.vllm_cli import ArgsRejected, check_serve_args

EXIT_REFUSED = 2
_GPU = re.compile(r"^sm[1-9][0-9]*[0-9][a-z]?$")
CRITICAL_ENV_PREFIXES = (
    "VLLM_",
    "NCCL_",
    "CUDA_",
    "FUSE_",
    "TORCH_",
    "PYTORCH_",
    "SPECULATIVE_",
    "FLASHINFER_",
)
"""The user's own variables with these prefixes are passed to the policy and shown."""


class UsageError(Exception):
    """A bad ``dsv4-serve`` argument; the message says what is accepted."""


def _positive_int(flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(
                f"{flag}: got {text!r}; expected a positive integer such as "
                f"{'262144' if flag == '--context' else '8'}"
            )
        return value

    return parse


def _gpu(text: str) -> str:
    if text == "auto" or _GPU.match(text):
        return text
    raise argparse.ArgumentTypeError(
        f"--gpu: got {text!r}; expected 'auto' or an SM name such as sm80, sm86, sm90, "
        "sm100, sm120"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsv4-serve",
        description="Launch `vllm serve` from a validated DeepSeek-V4 serve envelope.",
        epilog="Arguments after `--` go to `vllm serve`: the model first (or --model), "
        "then any vLLM flags.",
    )
    parser.add_argument("--gpu", required=True, type=_gpu,
                        help="GPU arch such as sm86, or 'auto' to detect GPU 0")
    parser.add_argument("--tp", required=True, type=_positive_int("--tp"),
                        help="tensor-parallel size")
    parser.add_argument("--context", required=True, type=_positive_int("--context"),
                        help="context length (max model length) in tokens")
    parser.add_argument("--seqs", required=True, type=_positive_int("--seqs"),
                        help="concurrent sequences")
    parser.add_argument("--dry-run", action="store_true",
                        help="print and check the manifest, do not start vLLM")
    parser.add_argument("--json", action="store_true", help="print the manifest as JSON")
    parser.add_argument("--allow-avoided", action="append", default=[], metavar="RULE",
                        help="launch even though this avoid-rule is broken (repeatable)")
    return parser


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(launcher arguments, vllm serve arguments)``, split at the first ``--``."""
    argv = list(argv)
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1 :]
    return argv, []


def split_model(extra: Sequence[str]) -> tuple[str | None, list[str]]:
    """The positional model (first, when not a flag) and the remaining arguments."""
    if extra and not extra[0].startswith("-"):
        return extra[0], list(extra[1:])
    return None, list(extra)


def _names_model(args: Sequence[str]) -> bool:
    return any(
        a in ("--model", "--config") or a.startswith(("--model=", "--config="))
        for a in args
    )


def critical_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The user's variables that can change how vLLM serves (see the prefixes)."""
    return {k: v for k, v in environ.items() if k.startswith(CRITICAL_ENV_PREFIXES)}


def resolve_gpu(gpu: str) -> str:
    if gpu != "auto":
        return gpu
    try:
        return detect_arch()
    except RuntimeError as exc:
        raise UsageError(f"--gpu auto: {exc}") from None


def main(
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    execvpe: Callable[[str, list[str], dict[str, str]], object] = os.execvpe,
) -> int:
    """Run the launcher; return the exit code (``execvpe`` does not return on success)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    environ = os.environ if environ is None else environ
    own, extra = split_argv(argv)
    parser = build_parser()
    opts = parser.parse_args(own)
    try:
        gpu = resolve_gpu(opts.gpu)
    except UsageError as exc:
        print(f"dsv4-serve: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    model, rest = split_model(extra)
    if model is None and not _names_model(rest):
        print(
            "dsv4-serve: no model given; put it first after `--` (e.g. `-- "
            "deepseek-ai/DeepSeek-V4-Flash`) or pass --model",
            file=sys.stderr,
        )
        return EXIT_REFUSED

    key = policy_serve.ServeKey(gpu=gpu, tp=opts.tp, context=opts.context, seqs=opts.seqs)
    manifest = policy_serve.plan(key, rest, critical_env(environ))
    command = ("vllm", "serve", *([model] if model else []), *manifest.argv)
    allowed = frozenset(opts.allow_avoided)
    view = LaunchView(key, manifest, command, allowed, opts.dry_run)

    problems: list[str] = []
    if view.refused:
        problems.append(refusal_text(view.refused))
    else:
        try:
            check_serve_args(list(command[2:]))
        except ArgsRejected as exc:
            problems.append(
                f"{exc}\ndsv4-serve: vLLM's `serve` parser rejects this command; "
                "nothing was started"
            )
    view = LaunchView(key, manifest, command, allowed, opts.dry_run, tuple(problems))

    print(render_json(view) if opts.json else render_text(view), flush=True)
    if problems:
        print("\n".join(problems), file=sys.stderr, flush=True)
        return EXIT_REFUSED
    if opts.dry_run:
        return 0
    env = {**environ, **manifest.env}
    sys.stderr.flush()
    execvpe("vllm", list(command), env)
    return 0  # reached only with a stand-in execvpe (tests)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
