"""Probe points for a launch-table box, and the rule that accepts a tile for it.

A table entry promises "faster than the baseline launch at every key it matches", not
at one tuned shape. This module turns that promise into measurements, for any kernel
whose table entries are boxes of inclusive integer ranges. It knows nothing about a
kernel: the caller says how to time one launch.

Interface (all pure Python; nothing here imports torch)
--------------------------------------------------------
``Box``
    ``{field: (lo, hi)}``, inclusive integer ranges; a fixed field is ``(v, v)``. Only
    the fields the caller wants probed need to be there. Points always carry every
    field of the box, in the box's order.
``Point``
    ``{field: value}``, one key inside a box (a plain dict, hashable via :func:`key_of`).
``box_probes(box, seed=..., random_points=8, extremes=None, corner_fields=None)``
    Every corner of the box (each ranged field, or each of ``corner_fields``, at its
    minimum and maximum, all combinations), then ``extremes(box)`` if given (a
    per-kernel callback returning points such as "1 decode + the most prefill"; each is
    clamped into the box, a field it leaves out at its maximum), then
    ``random_points`` seeded random points (log-uniform on ranges wider than 64, so that
    small and large token counts both get drawn). Duplicates are dropped, order kept.
``choose_tile(probes, candidates, baseline, measure, ...) -> Verdict``
    The acceptance rule. ``measure(point, tile) -> float`` times one launch (lower is
    better, e.g. GPU µs). The baseline is timed once per probe; candidates are screened
    on the corner and extreme probes first, survivors on the random probes; the best
    survivor is then confirmed by a second, independent pass over every probe (baseline
    and candidate timed again). A tile is accepted only if it beats the baseline by
    ``margin`` at EVERY probe in BOTH passes. ``Verdict.worst_ratio`` is the smallest
    ``baseline / candidate`` over all probes and both passes. Among the tiles that pass,
    ``objective="worst"`` (the default) prefers the largest worst ratio, and
    ``objective="time"`` the least GPU time summed over the probes: the margin is the
    never-slower rule, and the time is what a box whose best tile changes inside it
    (a small T wants one tile, its large T another) actually costs the step.
``split_box(box, field) -> (low, high)``
    Halves a box along one field (geometric midpoint on wide ranges), for a tuner that
    splits a box where no single tile wins everywhere.
``keys_in_boxes(boxes, count, seed, weights=None) -> list[(box_index, Point)]``
    Seeded random keys inside a table's entries, for the never-slower gate: every box gets
    at least one key when ``count >= len(boxes)``, the rest are spread by ``weights``
    (default: equal).

Everything random comes from ``random.Random(seed)``, so a seed reproduces a run.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product

Box = Mapping[str, tuple[int, int]]
Point = dict[str, int]
Measure = Callable[[Point, Hashable], float]
LOG_UNIFORM_ABOVE = 64
"""Ranges wider than this (hi / max(lo, 1)) are sampled log-uniformly."""


@dataclass(frozen=True)
class Probe:
    """One point of a box and why it was chosen: ``corner``, ``extreme`` or ``random``."""

    kind: str
    point: Point

    def label(self) -> str:
        return f"{self.kind}:" + ",".join(f"{k}={v}" for k, v in self.point.items())


def key_of(point: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """A hashable form of a point (field order as given)."""
    return tuple(point.items())


def check_box(box: Box) -> None:
    """Raise ``ValueError`` on a range that is not two ints with ``lo <= hi``."""
    for name, span in box.items():
        if (not isinstance(span, tuple) or len(span) != 2
                or not all(type(v) is int for v in span) or span[0] > span[1]):
            raise ValueError(f"box field {name!r}: got {span!r}; expected (lo, hi) ints, "
                             "lo <= hi")


def clamp(point: Mapping[str, int], box: Box) -> Point:
    """``point`` with every field of ``box`` moved into its range; a field the point
    leaves out takes its maximum. The result has the box's fields, in the box's order."""
    return {name: min(max(point.get(name, hi), lo), hi) for name, (lo, hi) in box.items()}


def corners(box: Box, fields: Iterable[str] | None = None) -> list[Point]:
    """Each of ``fields`` (default: all) at its minimum and maximum, every combination;
    the other fields at their maximum. A fixed field counts once."""
    check_box(box)
    chosen = set(box) if fields is None else set(fields)
    ends = [sorted({lo, hi}) if name in chosen else [hi] for name, (lo, hi) in box.items()]
    return [dict(zip(box, values, strict=True)) for values in product(*ends)]


def draw(lo: int, hi: int, rng: random.Random) -> int:
    """One int in ``[lo, hi]``: uniform on narrow ranges, log-uniform on wide ones."""
    if lo == hi:
        return lo
    if hi / max(lo, 1) <= LOG_UNIFORM_ABOVE:
        return rng.randint(lo, hi)
    base = max(lo, 1)
    value = round(math.exp(rng.uniform(math.log(base), math.log(hi + 1))))
    return min(max(value, lo), hi)


def random_point(box: Box, rng: random.Random) -> Point:
    return {name: draw(lo, hi, rng) for name, (lo, hi) in box.items()}


def box_probes(
    box: Box,
    *,
    seed: int,
    random_points: int = 8,
    extremes: Callable[[Box], Iterable[Mapping[str, int]]] | None = None,
    corner_fields: Iterable[str] | None = None,
) -> list[Probe]:
    """Corners, then the kernel's extreme points, then seeded random points; no repeats.

    ``corner_fields`` limits the corners to some fields (the rest sit at their maximum
    there, and are still drawn over their whole range by the random points)."""
    check_box(box)
    rng = random.Random(seed)
    found: list[Probe] = []
    seen: set[tuple] = set()

    def add(kind: str, point: Mapping[str, int]) -> bool:
        p = clamp(point, box)
        k = key_of(p)
        if k in seen:
            return False
        seen.add(k)
        found.append(Probe(kind, p))
        return True

    for p in corners(box, corner_fields):
        add("corner", p)
    for p in extremes(box) if extremes is not None else ():
        add("extreme", p)
    drawn, attempts = 0, 0
    while drawn < random_points and attempts < 50 * max(random_points, 1):
        attempts += 1
        drawn += add("random", random_point(box, rng))
    return found


def split_box(box: Box, name: str) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
    """Two halves of ``box`` along ``name``: ``[lo, mid]`` and ``[mid + 1, hi]``.

    The cut is the geometric midpoint on wide ranges (token counts span decades), the
    arithmetic one otherwise. Raises ``ValueError`` when the range is a single value.
    """
    lo, hi = box[name]
    if lo >= hi:
        raise ValueError(f"cannot split {name!r}: the range {lo}..{hi} is a single value")
    mid = int(math.sqrt(max(lo, 1) * hi)) if hi / max(lo, 1) > 4 else (lo + hi) // 2
    mid = min(max(mid, lo), hi - 1)
    low, high = dict(box), dict(box)
    low[name] = (lo, mid)
    high[name] = (mid + 1, hi)
    return low, high


@dataclass
class Verdict:
    """The outcome of :func:`choose_tile` for one box."""

    tile: Hashable | None
    worst_ratio: float
    probes: int
    ratios: dict[str, float] = field(default_factory=dict)
    """``probe label -> baseline / tile`` (worst of both passes) for the chosen tile."""
    screened: dict[Hashable, float] = field(default_factory=dict)
    """Worst screening ratio of every candidate (``-inf`` when it failed to run)."""
    losing_probes: list[Probe] = field(default_factory=list)
    """Where the best candidate lost, when none was accepted (guides a split)."""


OBJECTIVES = ("worst", "time")
"""How :func:`choose_tile` ranks the tiles that pass its acceptance rule."""


def _worst(ratios: Iterable[float]) -> float:
    return min(ratios, default=math.inf)


def choose_tile(
    probes: Sequence[Probe],
    candidates: Sequence[Hashable],
    baseline: Hashable,
    measure: Measure,
    *,
    margin: float = 1.0,
    finalists: int = 3,
    objective: str = "worst",
    log: Callable[[str], None] | None = None,
) -> Verdict:
    """The best candidate that beats ``baseline`` at every probe, confirmed; or none.

    ``margin`` is the ratio a candidate must exceed (strictly) at each probe; 1.0 means
    "faster everywhere". Screening: baseline timed once per probe; each candidate on the
    corner/extreme probes, stopping at its first loss; up to ``finalists`` of the
    survivors (ranked by ``objective``) on the random probes; then the confirmation pass
    for the best one left, and the next if it fails. ``measure`` raising ``ValueError``
    disqualifies that candidate (a tile the kernel refuses). ``objective`` ranks the
    finalists and survivors: ``"worst"`` by their worst ratio, ``"time"`` by their total
    time over the probes measured so far (``baseline / ratio`` summed); the acceptance
    rule is the same for both.
    """
    say = log or (lambda _msg: None)
    if not probes:
        raise ValueError("choose_tile: no probes; a box needs at least one probe")
    if objective not in OBJECTIVES:
        raise ValueError(f"choose_tile: objective {objective!r} is not one of "
                         f"{', '.join(OBJECTIVES)}")
    base = {id(p): measure(p.point, baseline) for p in probes}

    def rank(ratios: dict[int, float]) -> float:
        """Sort key, smaller first: minus the worst ratio, or the summed tile time."""
        if objective == "time":
            return sum(base[k] / r for k, r in ratios.items())
        return -_worst(ratios.values())

    screen = [p for p in probes if p.kind != "random"] or list(probes)
    rest = [p for p in probes if p not in screen]
    first: dict[Hashable, dict[int, float]] = {}
    screened: dict[Hashable, float] = {}
    best_loser: tuple[float, Hashable, list[Probe]] | None = None
    for tile in candidates:
        if tile == baseline:
            continue
        ratios: dict[int, float] = {}
        try:
            for p in screen:
                ratios[id(p)] = base[id(p)] / measure(p.point, tile)
                if ratios[id(p)] <= margin:
                    break
        except ValueError:
            screened[tile] = -math.inf
            continue
        worst = _worst(ratios.values())
        screened[tile] = worst
        if len(ratios) == len(screen) and worst > margin:
            first[tile] = ratios
        elif best_loser is None or worst > best_loser[0]:
            lost = [p for p in screen if ratios.get(id(p), math.inf) <= margin]
            best_loser = (worst, tile, lost)
    ranked = sorted(first, key=lambda t: rank(first[t]))[:finalists]
    survivors = []
    for tile in ranked:
        ratios = first[tile]
        for p in rest:
            ratios[id(p)] = base[id(p)] / measure(p.point, tile)
            if ratios[id(p)] <= margin:
                break
        worst = _worst(ratios.values())
        if len(ratios) == len(probes) and worst > margin:
            survivors.append(tile)
        else:
            say(f"  {tile}: lost a random probe ({worst:.3f}x)")
            if best_loser is None or worst > best_loser[0]:
                best_loser = (worst, tile, [p for p in probes
                                            if ratios.get(id(p), math.inf) <= margin])
    survivors.sort(key=lambda t: rank(first[t]))
    for tile in survivors:
        again = {}
        for p in probes:
            again[id(p)] = measure(p.point, baseline) / measure(p.point, tile)
            if again[id(p)] <= margin:
                break
        worst_again = _worst(again.values())
        if len(again) == len(probes) and worst_again > margin:
            both = {p.label(): min(first[tile][id(p)], again[id(p)]) for p in probes}
            return Verdict(tile, _worst(both.values()), len(probes), both, screened)
        say(f"  {tile}: failed the confirmation pass ({worst_again:.3f}x)")
        if best_loser is None or worst_again > best_loser[0]:
            best_loser = (worst_again, tile, [p for p in probes
                                              if again.get(id(p), math.inf) <= margin])
    return Verdict(None, best_loser[0] if best_loser else -math.inf, len(probes),
                   screened=screened, losing_probes=best_loser[2] if best_loser else [])


def keys_in_boxes(
    boxes: Sequence[Box],
    count: int,
    seed: int,
    weights: Sequence[float] | None = None,
) -> list[tuple[int, Point]]:
    """``count`` seeded random ``(box index, point)`` pairs inside ``boxes``.

    With ``count >= len(boxes)`` every box gets one key first; the others go to boxes
    drawn with ``weights`` (equal by default). Points are drawn as in
    :func:`box_probes` (log-uniform on wide ranges).
    """
    if not boxes:
        raise ValueError("keys_in_boxes: no boxes to draw from")
    for box in boxes:
        check_box(box)
    rng = random.Random(seed)
    order = list(range(len(boxes))) if count >= len(boxes) else []
    w = list(weights) if weights is not None else [1.0] * len(boxes)
    order += rng.choices(range(len(boxes)), weights=w, k=count - len(order))
    return [(i, random_point(boxes[i], rng)) for i in order]
