"""The ``dsv4-evals`` command: one subcommand per module, each owning its flags."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module exposes ``register(subparsers) -> None``; the parser it adds sets
# ``func`` to a callable taking the parsed namespace and returning an exit code.
SUBCOMMAND_MODULES = (
    "dsv4_evals.stress",
    "dsv4_evals.ab",
    "dsv4_evals.lm_eval",
    "dsv4_evals.ladder",
    "dsv4_evals.logs",
    "dsv4_evals.buckets",
    "dsv4_evals.matrix",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsv4-evals",
        description="Evidence that a DeepSeek-V4 serving change is safe and fast.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
