"""Match conditions: the per-field sets that table entries are built from.

A table entry matches a key when every field it names holds a value inside that
field's condition. A condition is either a finite set of values (an exact value is
a set of one) or an inclusive integer range. Because each entry is a product of
per-field conditions (a box), two entries can both match some key exactly when
every field's conditions intersect; that makes overlap detection exact and cheap.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

Scalar = str | int
INT_MAX = 2**63 - 1
"""The largest integer a key field may hold (int64), so every range has a finite top."""


@dataclass(frozen=True)
class Range:
    """An inclusive integer range ``min <= value <= max``; ``max=None`` has no top.

    ``min`` is always concrete so that two equal ranges compare equal however they
    were written; a TOML range that omits ``min`` is given the field's smallest value.
    """

    min: int
    max: int | None = None

    def __post_init__(self) -> None:
        for name in ("min", "max"):
            value = getattr(self, name)
            if name == "max" and value is None:
                continue
            if type(value) is not int:
                raise TypeError(f"Range.{name} must be an int, got {value!r}")
        if self.max is not None and self.min > self.max:
            raise ValueError(
                f"inverted range: min {self.min} > max {self.max}; a range needs min <= max"
            )

    @property
    def top(self) -> int:
        """The inclusive upper bound, with ``None`` read as ``INT_MAX``."""
        return INT_MAX if self.max is None else self.max

    def __contains__(self, value: object) -> bool:
        return type(value) is int and self.min <= value <= self.top

    def __str__(self) -> str:
        return f"[{self.min}, {'inf' if self.max is None else self.max}]"


Condition = frozenset[Scalar] | Range


def normalize(raw: object) -> object:
    """Turn what a caller wrote into a condition: a scalar or collection into a frozenset.

    Values that are neither are returned as they are, for validation to report.
    """
    if isinstance(raw, Range | frozenset):
        return raw
    if isinstance(raw, str) or (isinstance(raw, int) and not isinstance(raw, bool)):
        return frozenset((raw,))
    if isinstance(raw, set | list | tuple):
        return frozenset(raw)
    return raw


def contains(cond: Condition, value: Scalar) -> bool:
    """Whether ``value`` lies inside ``cond``."""
    if isinstance(cond, Range):
        return value in cond
    return value in cond


def intersection(a: Condition, b: Condition) -> Condition | None:
    """The values both conditions admit, or ``None`` when they share none."""
    if isinstance(a, Range) and isinstance(b, Range):
        lo, hi = max(a.min, b.min), min(a.top, b.top)
        return Range(lo, None if hi == INT_MAX else hi) if lo <= hi else None
    if isinstance(a, Range):
        a, b = b, a
    common = frozenset(v for v in a if contains(b, v))
    return common or None


def witness(cond: Condition) -> Scalar:
    """One concrete value inside ``cond`` (the smallest), to show in messages."""
    if isinstance(cond, Range):
        return cond.min
    return sorted(cond)[0]


def describe(cond: Condition) -> str:
    """A short human rendering: ``128``, ``{64, 128}`` or ``[1, 4096]``."""
    if isinstance(cond, Range):
        return str(cond)
    values = sorted(cond)
    if len(values) == 1:
        return repr(values[0])
    return "{" + ", ".join(repr(v) for v in values) + "}"


def expand(cond: Condition | None, minimum: int) -> Iterable[tuple[int, int]]:
    """The condition as a list of inclusive ``(lo, hi)`` integer spans, for fast matching.

    An absent condition is the whole domain ``[minimum, INT_MAX]``; a set becomes one
    single-value span per member.
    """
    if cond is None:
        return ((minimum, INT_MAX),)
    if isinstance(cond, Range):
        return ((cond.min, cond.top),)
    return tuple((v, v) for v in sorted(cond))
