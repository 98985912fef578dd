"""Aligned plain-text tables for the command line."""

from __future__ import annotations

from collections.abc import Sequence


def aligned(headers: Sequence[str] | None, rows: Sequence[Sequence[object]]) -> str:
    """Rows in left-aligned columns two spaces apart, under an optional header and rule.

    The last column is not padded, so long values (reasons, command lines) do not
    leave trailing spaces.
    """
    table = [list(map(str, headers))] if headers else []
    table += [[str(cell) for cell in row] for row in rows]
    if not table:
        return ""
    columns = max(len(row) for row in table)
    widths = [max((len(row[i]) for row in table if i < len(row)), default=0)
              for i in range(columns)]
    lines = []
    for n, row in enumerate(table):
        cells = [cell.ljust(widths[i]) if i < len(row) - 1 else cell for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
        if headers and n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
