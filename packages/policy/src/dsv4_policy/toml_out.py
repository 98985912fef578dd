"""A small, exact TOML writer for the value shapes policy tables use.

The standard library reads TOML (``tomllib``) but cannot write it, and a tuner has to
write launch tables. This writer covers exactly what the tables hold: strings,
integers, finite floats, booleans, lists of those, and one level of inline tables;
its output reads back through ``tomllib`` to the same values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {
    "\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
    "\r": "\\r",
}


def string(text: str) -> str:
    """A TOML basic string with every character that needs it escaped."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def key(name: str) -> str:
    """A key, bare when TOML allows it and quoted otherwise."""
    return name if _BARE_KEY.fullmatch(name) else string(name)


def value(v: object) -> str:
    """One TOML value. Raises ``ValueError`` for anything this writer does not cover."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"cannot write the non-finite float {v!r}; use a finite number")
        return repr(v)  # shortest round-trip form; always has '.' or 'e'
    if isinstance(v, str):
        return string(v)
    if isinstance(v, Mapping):
        if not v:
            return "{}"
        parts = (f"{key(str(k))} = {value(x)}" for k, x in v.items())
        return "{ " + ", ".join(parts) + " }"
    if isinstance(v, Sequence):
        return "[" + ", ".join(value(x) for x in v) + "]"
    raise ValueError(
        f"cannot write {type(v).__name__} {v!r} as TOML; accepted: str, int, float, bool, "
        "lists of those and inline tables"
    )


def comment(text: str) -> list[str]:
    """``text`` as comment lines (``# ...``), one per ``\\n``; other control characters
    (TOML allows none but tab in a comment) are refused."""
    lines = []
    for line in text.split("\n") if text else ():
        bad = [ch for ch in line if (ord(ch) < 0x20 and ch != "\t") or ord(ch) == 0x7F]
        if bad:
            raise ValueError(f"comment line {line!r} holds a control character {bad[0]!r}")
        lines.append(("# " + line).rstrip())
    return lines


def table(header: str, items: Mapping[str, object]) -> list[str]:
    """A ``[header]`` (or ``[[header]]`` when given that way) and its ``key = value`` lines."""
    return [header, *(f"{key(k)} = {value(v)}" for k, v in items.items())]
