"""Telling the kind of a table file (a registered kernel's, or serve), for ``dsv4-policy check``."""

from __future__ import annotations

import tomllib
from pathlib import Path

from dsv4_policy.launch_table import KernelSpec
from dsv4_policy.registry import KERNELS
from dsv4_policy.serve import table as serve_table
from dsv4_policy.table import Problem, Schema, Table, TableError, loads

SERVE_ONLY = ("launch", "rule")
"""Top-level sections only a serve table has; anything else is read as a kernel table."""


def _fit(spec: KernelSpec, entries: list[object]) -> int:
    """How many entries use only this kernel's match fields and launch fields."""
    schema = spec.schema
    fields = set(schema.field_names)
    tile = set(schema.config_to_toml(spec.baseline_tile))  # type: ignore[misc]
    count = 0
    for raw in entries:
        if not isinstance(raw, dict):
            continue
        match = raw.get("match", {})
        launch = raw.get(schema.config_section, {})
        if (isinstance(match, dict) and isinstance(launch, dict) and set(match) <= fields
                and set(launch) <= tile):
            count += 1
    return count


def kind_of(text: str, hint: str | None = None) -> str:
    """``"serve"`` when the TOML has a serve-only section, else a registered kernel's name.

    A kernel table is the kernel whose match and launch fields fit the most entries
    On a tie (a table with no entries, say) a ``hint`` naming a kernel (the file's
    stem, as in ``tables/swa.toml``) decides, else the first registered kernel, C128A.
    Text that is not valid TOML counts as the first kernel; loading it then reports the
    syntax error with its line and column.
    """
    first = next(iter(KERNELS))
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return first
    if any(name in doc for name in SERVE_ONLY):
        return "serve"
    entries = doc.get("entry", [])
    if not isinstance(entries, list):
        return first
    fits = {name: _fit(spec, entries) for name, spec in KERNELS.items()}
    top = max(fits.values())
    if hint in fits and fits[hint] == top:
        return hint  # type: ignore[return-value]
    return next(name for name, fit in fits.items() if fit == top)


def schema_of(kind: str) -> Schema[object]:
    """The schema of a table kind: ``"serve"`` or a registered kernel's name."""
    if kind == "serve":
        return serve_table.SCHEMA  # type: ignore[return-value]
    return KERNELS[kind].schema


def load_any(path: str | Path, kind: str | None = None) -> tuple[str, Table[object]]:
    """Load a table file of any kind (detected unless given); ``(kind, table)`` or TableError."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise TableError([Problem(str(path), f"cannot read the file: {exc.strerror or exc}")]) \
            from None
    except UnicodeDecodeError as exc:
        raise TableError([Problem(str(path), f"not UTF-8 text: {exc}")]) from None
    kind = kind_of(text, Path(path).stem) if kind is None else kind
    return kind, loads(text, schema_of(kind), str(path))
