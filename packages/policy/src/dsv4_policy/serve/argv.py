"""Reading command-line flags the way a ``vllm serve`` argument parser would see them.

Serve rules must spot a flag however it was written: ``--flag value``,
``--flag=value``, with underscores (``--max_model_len``, which vLLM accepts) or by a
short alias (``-dcp``). This module reduces every spelling to one canonical long
flag; the aliases themselves are data, kept in the serve table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_NUMBER = re.compile(r"^-\.?[0-9]")


def is_flag(item: str) -> bool:
    """Whether an argv item is an option (``-x``/``--x``), not a value such as ``-1``."""
    return len(item) > 1 and item.startswith("-") and not _NUMBER.match(item)


def canonical(flag: str, aliases: Mapping[str, str]) -> str:
    """The flag's canonical spelling: no ``=value``, dashes for underscores, aliases resolved."""
    name = flag.split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return aliases.get(name, name)


@dataclass(frozen=True)
class Occurrence:
    """One flag as found in an argv: canonical name, its value if any, and how it was written."""

    flag: str
    value: str | None
    written: str  # as written, with its value: "-dcp 2", "-dcp=2" or "--enforce-eager"
    start: int
    stop: int  # one past the last argv item this occurrence uses


def scan(argv: Sequence[str], aliases: Mapping[str, str]) -> list[Occurrence]:
    """Every flag in ``argv`` in order. A value is the ``=`` part or, failing that, the next
    item when it is not itself a flag (what an option taking one value would consume)."""
    found = []
    for i, item in enumerate(argv):
        if not is_flag(item):
            continue
        name, eq, value = item.partition("=")
        if eq:
            found.append(Occurrence(canonical(name, aliases), value, item, i, i + 1))
        elif i + 1 < len(argv) and not is_flag(argv[i + 1]):
            found.append(Occurrence(canonical(name, aliases), argv[i + 1],
                                    f"{item} {argv[i + 1]}", i, i + 2))
        else:
            found.append(Occurrence(canonical(name, aliases), None, item, i, i + 1))
    return found
