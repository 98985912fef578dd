"""Probe readouts: diagnostic lines whose values, taken together, name one outcome.

The capture-shape checks compare every sighting with one expected value. A probe is
read differently: the seed-004 runbook's spec-decode probe (``SPEC_CUDAGRAPH_DEBUG=4``)
prints the CUDA-graph mode of the draft's prefill and decode, and the *combination*
is the diagnosis. ``cg_mode=FULL`` everywhere means spec decode is captured and loses
on draft compute; ``cg_mode=NONE`` means spec dispatch or key selection is broken.

A probe is data (``[[probe]]`` in the rule file): regexes with a ``phase`` and a
``value`` group, and an ordered list of outcomes. Each outcome names a set of values
and whether ``any`` sighting or ``all`` of them must be in it; the first outcome that
holds is the readout, worded by its ``readout`` template. A probe whose lines never
appear is reported as absent, which is not a failure (the probe is opt-in).
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsv4_evals._patterns import (
    PatternError,
    compile_regex,
    reject_unknown,
    table_list,
)
from dsv4_evals._patterns import field as get_field

WHEN = ("any", "all")
TEMPLATE_FIELDS = {"phases", "values", "lines"}


@dataclass(frozen=True)
class ProbePattern:
    """One line shape of a probe: ``phase`` and ``value`` groups, values mapped."""

    regex: re.Pattern[str]
    mapping: Mapping[str, str]


@dataclass(frozen=True)
class Outcome:
    name: str
    when: str  # "any": some sighting's value is in ``values``; "all": every one is
    values: frozenset[str]
    fail: bool
    readout: str  # template over {phases}, {values}, {lines}


@dataclass(frozen=True)
class Probe:
    name: str
    title: str
    absent: str
    patterns: tuple[ProbePattern, ...]
    outcomes: tuple[Outcome, ...]


@dataclass(frozen=True)
class Sighting:
    line: int
    phase: str
    value: str
    text: str


@dataclass
class ProbeResult:
    probe: Probe
    sightings: list[Sighting] = field(default_factory=list)

    def by_phase(self) -> dict[str, dict[str, int]]:
        """phase -> value -> number of lines, in order of first appearance."""
        out: dict[str, dict[str, int]] = {}
        for s in self.sightings:
            counts = out.setdefault(s.phase, {})
            counts[s.value] = counts.get(s.value, 0) + 1
        return out

    def outcome(self) -> tuple[Outcome | None, list[Sighting]]:
        """The first outcome that holds and the sightings that made it hold."""
        if not self.sightings:
            return None, []
        for outcome in self.probe.outcomes:
            inside = [s for s in self.sightings if s.value in outcome.values]
            if (outcome.when == "any" and inside) or (
                outcome.when == "all" and len(inside) == len(self.sightings)
            ):
                return outcome, inside
        return None, []

    @property
    def status(self) -> str:
        """``absent``, ``undetermined`` (no outcome holds), or the outcome's name."""
        if not self.sightings:
            return "absent"
        outcome, _ = self.outcome()
        return outcome.name if outcome else "undetermined"

    @property
    def failed(self) -> bool:
        outcome, _ = self.outcome()
        return bool(outcome and outcome.fail)

    def readout(self) -> str:
        """The sentence the runbook would say for what the log shows."""
        if not self.sightings:
            return self.probe.absent
        outcome, why = self.outcome()
        if outcome is None:
            seen = sorted({s.value for s in self.sightings})
            known = sorted({v for o in self.probe.outcomes for v in o.values})
            return (
                f"undetermined: the probe shows {', '.join(seen)}; its rules read only "
                f"{', '.join(known)}"
            )
        return outcome.readout.format(**describe(why))


def describe(sightings: Sequence[Sighting]) -> dict[str, str]:
    """The template fields for the sightings behind an outcome."""
    phases = list(dict.fromkeys(s.phase for s in sightings))
    values = list(dict.fromkeys(s.value for s in sightings))
    lines = [str(s.line) for s in sightings[:5]] + (["..."] if len(sightings) > 5 else [])
    return {
        "phases": " and ".join(phases),
        "values": "/".join(values),
        "lines": ", ".join(lines),
    }


def load_probes(data: Mapping[str, Any], label: str) -> tuple[Probe, ...]:
    """``[[probe]]`` tables of a rule file (none is fine)."""
    if "probe" not in data:
        return ()
    probes = tuple(
        _probe(p, f"{label}.probe[{i}]") for i, p in enumerate(table_list(data, "probe", label))
    )
    names = [p.name for p in probes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PatternError(f"{label}: probe names must be unique; repeated: {', '.join(dupes)}")
    return probes


def observe(probe: Probe, segment: str) -> tuple[str, str] | None:
    """(phase, value) from the first pattern of ``probe`` matching ``segment``."""
    for pattern in probe.patterns:
        match = pattern.regex.search(segment)
        if match is None:
            continue
        raw = match.group("value").strip()
        return match.group("phase").strip(), pattern.mapping.get(raw, raw)
    return None


def _probe(table: Mapping[str, Any], where: str) -> Probe:
    reject_unknown(table, {"name", "title", "absent", "pattern", "outcome"}, where)
    name = get_field(table, "name", str, where, "a string")
    title = get_field(table, "title", str, where, "a string", default=name)
    absent = get_field(table, "absent", str, where, "a string",
                       default=f"no {name} lines in this log")
    patterns = tuple(
        _pattern(p, f"{where}.pattern[{j}]")
        for j, p in enumerate(table_list(table, "pattern", where))
    )
    outcomes = tuple(
        _outcome(o, f"{where}.outcome[{j}]")
        for j, o in enumerate(table_list(table, "outcome", where))
    )
    return Probe(name, title, absent, patterns, outcomes)


def _pattern(table: Mapping[str, Any], where: str) -> ProbePattern:
    reject_unknown(table, {"regex", "map"}, where)
    regex = compile_regex(get_field(table, "regex", str, where, "a regex string"),
                          f"{where}.regex")
    missing = sorted({"phase", "value"} - set(regex.groupindex))
    if missing:
        raise PatternError(
            f"{where}.regex: a probe pattern needs the named groups (?P<phase>...) and "
            f"(?P<value>...); missing: {', '.join(missing)}"
        )
    mapping = get_field(table, "map", dict, where, "a table of strings", default={})
    for k, v in mapping.items():
        if not isinstance(v, str):
            raise PatternError(f"{where}.map.{k}: got {v!r}, expected a string")
    return ProbePattern(regex, dict(mapping))


def _outcome(table: Mapping[str, Any], where: str) -> Outcome:
    reject_unknown(table, {"name", "when", "values", "fail", "readout"}, where)
    name = get_field(table, "name", str, where, "a string")
    when = get_field(table, "when", str, where, f"one of {', '.join(WHEN)}")
    if when not in WHEN:
        raise PatternError(f"{where}.when: got {when!r}, expected one of {', '.join(WHEN)}")
    values = get_field(table, "values", list, where, "a non-empty list of strings")
    if not values or not all(isinstance(v, str) and v.strip() for v in values):
        raise PatternError(f"{where}.values: got {values!r}, expected a non-empty list of strings")
    fail = get_field(table, "fail", bool, where, "true or false", default=False)
    readout = get_field(table, "readout", str, where, "a string")
    used = {f for _, f, _, _ in string.Formatter().parse(readout) if f is not None}
    unknown = sorted(used - TEMPLATE_FIELDS)
    if unknown:
        raise PatternError(
            f"{where}.readout: unknown field(s) {', '.join('{' + u + '}' for u in unknown)}; "
            f"accepted: {', '.join('{' + f + '}' for f in sorted(TEMPLATE_FIELDS))}"
        )
    return Outcome(name, when, frozenset(v.strip() for v in values), fail, readout)
