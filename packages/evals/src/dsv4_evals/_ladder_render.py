"""Rendering shared by the ``ladder``, ``logs`` and ``buckets`` reports.

Each report is read by people (a table in the terminal, markdown in a file) and by
tools (JSON). Keeping the table shapes and the number formats in one place keeps the
three commands' outputs consistent with each other.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


def stdout_console() -> Console:
    """A console for report tables; wide when piped, so files keep one row per line."""
    if sys.stdout.isatty() or "COLUMNS" in os.environ:
        return Console()
    return Console(width=160)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str) -> str:
    """A GitHub pipe table; ``align`` holds one of ``l``/``r`` per column."""
    if len(align) != len(headers):
        raise ValueError(f"align {align!r} has {len(align)} marks for {len(headers)} columns")
    marks = {"l": ":---", "r": "---:"}
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row {row!r} has {len(row)} cells for {len(headers)} columns")
        out.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(out)


def print_rich_table(
    console: Console,
    title: str | None,
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    align: str,
) -> None:
    """The same rows as ``markdown_table``, drawn for a terminal, under a title line."""
    if title:
        console.print(Text(title))
    table = Table()
    for name, a in zip(headers, align, strict=True):
        table.add_column(name, justify="right" if a == "r" else "left")
    for row in rows:
        # Text, not markup: log lines and kernel names are full of square brackets.
        table.add_row(*(Text(str(c)) for c in row))
    console.print(table)


def to_json(data: Any) -> str:
    """Stable JSON for diffs and tools: sorted keys, two-space indent, final newline."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def fmt(value: float | None, digits: int = 3) -> str:
    """A fixed-point number, or ``-`` for a value that could not be measured."""
    return "-" if value is None else f"{value:,.{digits}f}"


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def error(command: str, message: str) -> None:
    """One unwrapped line on stderr, so error messages stay greppable."""
    print(f"dsv4-evals {command}: {message}", file=sys.stderr)
