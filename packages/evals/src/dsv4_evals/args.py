"""The command-line conventions every ``dsv4-evals`` subcommand shares.

A value that cannot be right (a zero concurrency, a tolerance of 2) is refused while
the arguments are parsed, by an ``argparse`` ``type=`` function, before a file is
written or a request sent; each such validator is defined here once so the same flag
means the same thing and fails with the same words in every subcommand. Problems only
the command can see (an unreadable file, an endpoint URL) go through ``usage_error``,
which writes the one message format argparse also uses, ``dsv4-evals CMD: error: ...``,
and returns the usage exit code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

EXIT_USAGE = 2
PROXY_HELP = (
    "take a proxy from HTTP_PROXY/HTTPS_PROXY/ALL_PROXY (honouring NO_PROXY); "
    "by default they are ignored and only --base-url is contacted"
)


def usage_error(command: str, message: str) -> int:
    """Report an unusable option or input on one unwrapped stderr line; returns 2."""
    print(f"dsv4-evals {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def warning(command: str, message: str) -> None:
    """A note that does not change the exit code, in the same one-line format."""
    print(f"dsv4-evals {command}: warning: {message}", file=sys.stderr)


def add_proxy_flag(group: Any) -> None:
    """``--use-proxy-env`` for a subcommand that talks to a server (``dsv4_evals.http``)."""
    group.add_argument("--use-proxy-env", action="store_true", help=PROXY_HELP)


def _number(text: str, kind: Callable[[str], float]) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
        ) from None


def positive_int(text: str) -> int:
    """An integer >= 1 (counts, token budgets, sizes)."""
    value = _number(text, int)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0 (counts that may be zero: warm-up waves or requests)."""
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text}")
    return value


def int_at_least(minimum: int, why: str) -> Callable[[str], int]:
    """An integer >= ``minimum``; the message says ``why`` fewer will not do."""

    def parse(text: str) -> int:
        value = _number(text, int)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"at least {minimum} {why}, got {value}")
        return value

    return parse


def positive_float(text: str) -> float:
    """A number > 0 (seconds, ratios)."""
    value = _number(text, float)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """A number >= 0 (margins)."""
    value = _number(text, float)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def fraction(text: str) -> float:
    """A number in (0, 1]: a share of something that must not be empty."""
    value = _number(text, float)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text}")
    return value


def tolerance(text: str) -> float:
    """A number in [0, 1): a relative band around an expected value."""
    value = _number(text, float)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text}")
    return value


def probability(text: str) -> float:
    """A number in (0, 1): a significance level."""
    value = _number(text, float)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text}")
    return value
