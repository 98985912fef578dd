"""Telling a C128A launch table from a serve table, for ``dsv4-policy check``."""

from __future__ import annotations

import tomllib
from pathlib import Path

from dsv4_policy import c128a_table, serve_table
from dsv4_policy.table import Problem, Table, TableError, loads

SERVE_ONLY = ("launch", "rule")
"""Top-level sections only a serve table has; anything else is read as a C128A table."""


def kind_of(text: str) -> str:
    """``"serve"`` when the TOML has a serve-only section, else ``"c128a"``.

    Text that is not valid TOML counts as ``"c128a"``; loading it then reports the
    syntax error with its line and column.
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return "c128a"
    return "serve" if any(name in doc for name in SERVE_ONLY) else "c128a"


def load_any(path: str | Path) -> tuple[str, Table[object]]:
    """Load a table file of either kind; returns ``(kind, table)`` or raises TableError."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise TableError([Problem(str(path), f"cannot read the file: {exc.strerror or exc}")]) \
            from None
    except UnicodeDecodeError as exc:
        raise TableError([Problem(str(path), f"not UTF-8 text: {exc}")]) from None
    kind = kind_of(text)
    schema = serve_table.SCHEMA if kind == "serve" else c128a_table.SCHEMA
    return kind, loads(text, schema, str(path))  # type: ignore[arg-type]
