"""Which envelopes the ladder climbs, and how a measured rate is judged against one.

The envelopes come from the serve table (``dsv4_policy.serve.envelopes()``); the
ladder only needs their shape and expected rate, so anything with those attributes
will do, which is how tests inject their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

VERDICTS = ("pass", "below", "above", "measured", "error")


class EnvelopeLike(Protocol):
    """The part of ``dsv4_policy.serve.Envelope`` the ladder reads."""

    @property
    def id(self) -> str: ...
    @property
    def gpu(self) -> str: ...
    @property
    def tp(self) -> int: ...
    @property
    def context(self) -> int: ...
    @property
    def seqs(self) -> int: ...
    @property
    def expected_tok_s(self) -> float | None: ...


def shipped_envelopes() -> list[EnvelopeLike]:
    """Every envelope of the shipped serve table, in table order."""
    from dsv4_policy.serve import envelopes

    return list(envelopes())


def select(envelopes: Sequence[EnvelopeLike], ids: Iterable[str] | None) -> list[EnvelopeLike]:
    """The envelopes named by ``ids`` (in the order given), or all of them."""
    if not ids:
        return list(envelopes)
    by_id = {e.id: e for e in envelopes}
    chosen: list[EnvelopeLike] = []
    for wanted in ids:
        if wanted not in by_id:
            known = ", ".join(by_id) or "none"
            raise ValueError(f"--envelope {wanted!r} is not in the serve table; known: {known}")
        chosen.append(by_id[wanted])
    return chosen


def verdict(measured: float | None, expected: float | None, tolerance: float) -> str:
    """``pass`` within ``tolerance`` (relative) of ``expected``, else ``below``/``above``.

    ``measured`` for an envelope without an expected rate (a control shape), ``error``
    when nothing could be measured.
    """
    if measured is None:
        return "error"
    if expected is None or expected <= 0:
        return "measured"
    ratio = measured / expected
    if ratio < 1.0 - tolerance:
        return "below"
    if ratio > 1.0 + tolerance:
        return "above"
    return "pass"
