"""The one report renderer of ``dsv4-evals``: markdown, terminal tables and JSON.

Every report is read by people (a table in the terminal, markdown in a file) and by
tools (JSON). Keeping the table shapes, number formats, JSON layout and file writes in
one place keeps the outputs of all subcommands consistent with each other.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

_MARKS = {"l": ":---", "r": "---:", "c": ":---:"}


def markdown_table(
    headers: Sequence[Any], rows: Sequence[Sequence[Any]], align: str | None = None
) -> str:
    """A GitHub pipe table; ``align`` holds one of ``l``/``r``/``c`` per column (default l)."""
    if align is None:
        align = "l" * len(headers)
    if len(align) != len(headers):
        raise ValueError(f"align {align!r} has {len(align)} marks for {len(headers)} columns")
    lines = ["| " + " | ".join(str(h) for h in headers) + " |"]
    lines.append("|" + "|".join(_MARKS[a] for a in align) + "|")
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row {row!r} has {len(row)} cells for {len(headers)} columns")
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def stdout_console() -> Console:
    """A console for report tables; wide when piped, so files keep one row per line."""
    if sys.stdout.isatty() or "COLUMNS" in os.environ:
        return Console()
    return Console(width=160)


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


def fmt(value: float | None, digits: int = 3) -> str:
    """A fixed-point number, or ``-`` for a value that could not be measured."""
    return "-" if value is None else f"{value:,.{digits}f}"


def to_json(data: Any) -> str:
    """Stable, human-diffable JSON: sorted keys, two-space indent, trailing newline."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
