"""What a tuner keeps of a shipped table: every entry for another GPU architecture.

A tuner measures only the GPU it runs on, so it may replace only that arch's entries.
An entry whose ``arch`` condition does not admit the tuned arch was measured somewhere
else and is kept as it is, in its place, ahead of the new entries.
"""

from __future__ import annotations

from typing import Any

from dsv4_policy import registry
from dsv4_policy.conditions import contains


def other_arch_entries(kernel: str, arch: str) -> list[Any]:
    """The shipped ``kernel`` table's entries whose ``arch`` condition excludes ``arch``.

    An entry with no ``arch`` condition matches every arch, so a tune replaces it.
    """
    table = registry.get(kernel).shipped_table()
    return [e for e in table.entries
            if "arch" in e.match and not contains(e.match["arch"], arch)]
