"""Loading pattern files: the data that tells ``logs`` and ``buckets`` what to look for.

Log formats and kernel names change between vLLM releases faster than the logic that
reads them, so both readers keep their regular expressions in TOML files shipped
inside the package (``dsv4_evals/data``) and accept a user file in their place. This
module does the part both share: reading the TOML and turning each field into a
checked Python value, with an error that names the file, the key and what is accepted.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any


class PatternError(ValueError):
    """A pattern file that cannot be used: the message names file, key and fix."""


def load_pattern_file(path: str | Path | None, default_name: str) -> tuple[dict[str, Any], str]:
    """Parse ``path``, or the shipped ``data/<default_name>`` when ``path`` is None.

    Returns the parsed table and a label for error messages and reports (the path,
    or ``shipped:<name>``).
    """
    if path is None:
        label = f"shipped:{default_name}"
        text = resources.files("dsv4_evals").joinpath("data", default_name).read_text("utf-8")
    else:
        label = str(path)
        try:
            text = Path(path).read_text("utf-8")
        except OSError as exc:
            raise PatternError(f"cannot read pattern file {label}: {exc.strerror}") from exc
    try:
        return tomllib.loads(text), label
    except tomllib.TOMLDecodeError as exc:
        raise PatternError(f"{label}: not valid TOML: {exc}") from exc


def field(
    table: Mapping[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    where: str,
    accepted: str,
    default: Any = ...,
) -> Any:
    """``table[key]`` checked against ``kind``; ``default`` (if given) when absent."""
    if key not in table:
        if default is ...:
            raise PatternError(f"{where}: missing key '{key}' (expected {accepted})")
        return default
    value = table[key]
    # bool is an int subclass; an int field must not silently accept true/false.
    if isinstance(value, bool) and bool not in _as_tuple(kind):
        raise PatternError(f"{where}.{key}: got {value!r}, expected {accepted}")
    if not isinstance(value, kind):
        raise PatternError(f"{where}.{key}: got {value!r}, expected {accepted}")
    return value


def table_list(table: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    """An array of tables (``[[key]]``), non-empty, each entry a table."""
    items = field(table, key, list, where, f"one or more [[{key}]] tables")
    if not items:
        raise PatternError(f"{where}: [[{key}]] is empty; at least one entry is needed")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise PatternError(f"{where}.{key}[{i}]: expected a table, got {item!r}")
    return items


def compile_regex(text: str, where: str, flags: int = 0) -> re.Pattern[str]:
    """Compile one pattern, naming its location when Python's ``re`` rejects it."""
    try:
        return re.compile(text, flags)
    except re.error as exc:
        raise PatternError(f"{where}: invalid regular expression {text!r}: {exc}") from exc


def reject_unknown(table: Mapping[str, Any], known: set[str], where: str) -> None:
    """Unknown keys are typos far more often than intent: refuse them by name."""
    extra = sorted(set(table) - known)
    if extra:
        raise PatternError(
            f"{where}: unknown key(s) {', '.join(extra)}; accepted: {', '.join(sorted(known))}"
        )


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)
