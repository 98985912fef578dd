"""The capture-shape rules of ``dsv4-evals logs``, read from a pattern file.

A rule file (``data/logs_patterns.toml`` by default) declares *checks*, each a
property of the capture shape with an expected value and the regexes that reveal it,
*findings*, lines that are a root cause wherever they appear (a cudagraph skip or
miss), and *probes*, diagnostic lines read together into one outcome (``probe``).
This module turns the TOML into validated objects; ``scan`` applies them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsv4_evals._patterns import (
    PatternError,
    compile_regex,
    field,
    load_pattern_file,
    reject_unknown,
    table_list,
)
from dsv4_evals.logs.probe import Probe, load_probes

DEFAULT_FILE = "logs_patterns.toml"
KINDS = ("int", "int_list", "word")


@dataclass(frozen=True)
class ValuePattern:
    """One way a check's value shows up in a log line."""

    regex: re.Pattern[str]
    value: str | None  # fixed value when the regex has no `value` group
    add: int
    mapping: Mapping[str, str]


@dataclass(frozen=True)
class Check:
    """One capture-shape property: every observation must equal ``expect``."""

    name: str
    kind: str
    expect: str  # normalised
    patterns: tuple[ValuePattern, ...]


@dataclass(frozen=True)
class FindingRule:
    """A line that is a root cause by itself, e.g. a cudagraph skip or miss."""

    name: str
    regex: re.Pattern[str]


@dataclass(frozen=True)
class Rules:
    source: str
    checks: tuple[Check, ...]
    findings: tuple[FindingRule, ...]
    probes: tuple[Probe, ...] = ()


def normalise(kind: str, raw: str, add: int = 0, where: str = "value") -> str:
    """Canonical text for a value of ``kind``, so ``[1]``, ``1`` and `` [ 1 ]`` compare equal.

    int: a decimal integer (plus ``add``); int_list: ``[a, b, ...]`` from comma- or
    space-separated integers, brackets optional; word: stripped text.
    """
    text = raw.strip()
    if kind == "int":
        try:
            return str(int(text) + add)
        except ValueError:
            raise PatternError(f"{where}: {raw!r} is not an integer") from None
    if kind == "int_list":
        body = text[1:-1] if text.startswith("[") and text.endswith("]") else text
        parts = [p for p in re.split(r"[,\s]+", body) if p]
        try:
            return "[" + ", ".join(str(int(p)) for p in parts) + "]"
        except ValueError:
            raise PatternError(
                f"{where}: {raw!r} is not a list of integers (accepted: '1,2,4' or '[1, 2, 4]')"
            ) from None
    if kind == "word":
        return text
    raise PatternError(f"{where}: unknown kind {kind!r}; accepted: {', '.join(KINDS)}")


def load_rules(path: str | Path | None = None) -> Rules:
    """Read and validate a rule file; ``None`` reads the shipped defaults."""
    data, label = load_pattern_file(path, DEFAULT_FILE)
    reject_unknown(data, {"schema", "check", "finding", "probe"}, label)
    schema = field(data, "schema", int, label, "schema = 1")
    if schema != 1:
        raise PatternError(f"{label}.schema: got {schema}, this reader understands schema = 1")
    checks = tuple(
        _check(c, f"{label}.check[{i}]") for i, c in enumerate(table_list(data, "check", label))
    )
    names = [c.name for c in checks]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PatternError(f"{label}: check names must be unique; repeated: {', '.join(dupes)}")
    finding_tables = table_list(data, "finding", label) if "finding" in data else []
    findings = tuple(
        _finding(f, f"{label}.finding[{i}]") for i, f in enumerate(finding_tables)
    )
    return Rules(source=label, checks=checks, findings=findings,
                 probes=load_probes(data, label))


def with_expectations(rules: Rules, overrides: Mapping[str, str]) -> Rules:
    """A copy of ``rules`` whose named checks expect the given (raw) values."""
    by_name = {c.name: c for c in rules.checks}
    unknown = sorted(set(overrides) - set(by_name))
    if unknown:
        raise PatternError(
            f"--expect names unknown check(s) {', '.join(unknown)}; "
            f"checks in {rules.source}: {', '.join(by_name)}"
        )
    checks = tuple(
        Check(
            c.name,
            c.kind,
            normalise(c.kind, overrides[c.name], where=f"--expect {c.name}")
            if c.name in overrides
            else c.expect,
            c.patterns,
        )
        for c in rules.checks
    )
    return Rules(rules.source, checks, rules.findings, rules.probes)


def _check(table: Mapping[str, Any], where: str) -> Check:
    reject_unknown(table, {"name", "kind", "expect", "pattern"}, where)
    name = field(table, "name", str, where, "a string")
    kind = field(table, "kind", str, where, f"one of {', '.join(KINDS)}")
    if kind not in KINDS:
        raise PatternError(f"{where}.kind: got {kind!r}, expected one of {', '.join(KINDS)}")
    raw_expect = field(table, "expect", str, where, "a string")
    expect = normalise(kind, raw_expect, where=f"{where}.expect")
    patterns = tuple(
        _pattern(p, kind, f"{where}.pattern[{j}]")
        for j, p in enumerate(table_list(table, "pattern", where))
    )
    return Check(name, kind, expect, patterns)


def _pattern(table: Mapping[str, Any], kind: str, where: str) -> ValuePattern:
    reject_unknown(table, {"regex", "value", "add", "map"}, where)
    regex = compile_regex(field(table, "regex", str, where, "a regex string"), f"{where}.regex")
    value = field(table, "value", str, where, "a string", default=None)
    has_group = "value" in regex.groupindex
    if has_group == (value is not None):
        raise PatternError(
            f"{where}: give exactly one of a (?P<value>...) group in regex or a fixed 'value'"
        )
    add = field(table, "add", int, where, "an integer", default=0)
    if add and kind != "int":
        raise PatternError(f"{where}.add: only int checks accept 'add' (this check is {kind})")
    mapping = field(table, "map", dict, where, "a table of strings", default={})
    for k, v in mapping.items():
        if not isinstance(v, str):
            raise PatternError(f"{where}.map.{k}: got {v!r}, expected a string")
    return ValuePattern(regex, value, add, dict(mapping))


def _finding(table: Mapping[str, Any], where: str) -> FindingRule:
    reject_unknown(table, {"name", "regex"}, where)
    name = field(table, "name", str, where, "a string")
    regex = compile_regex(field(table, "regex", str, where, "a regex string"), f"{where}.regex")
    return FindingRule(name, regex)
