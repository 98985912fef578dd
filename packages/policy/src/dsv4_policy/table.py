"""Declarative lookup tables: load from TOML, validate, and resolve keys with a fallback.

Both policy tables (C128A launches and serve envelopes) share this mechanism. A table
is a list of entries; each entry names conditions on some key fields (exact values,
sets, or inclusive integer ranges) and carries a config. Validation happens on load
and on every programmatic change, and refuses anything ambiguous: unknown fields,
wrong types, empty or inverted ranges, and overlapping entries (two entries that
some key could both match). That is what makes :func:`resolve` safe: at most one
entry matches any key, and a key that matches none gets the caller's baseline back,
the very same object.

Every error names the file, the entry (id and 1-based position) and the field.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from dsv4_policy.conditions import (
    INT_MAX,
    Condition,
    Range,
    contains,
    describe,
    intersection,
    normalize,
    witness,
)

C = TypeVar("C")
T = TypeVar("T")
SCHEMA_VERSION = 1
ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ID_ACCEPTED = "1-100 characters: letters, digits, '.', '_' or '-', starting with a letter or digit"
ProvenanceValue = str | int | float | bool


# --------------------------------------------------------------------------- errors
@dataclass(frozen=True)
class Problem:
    """One thing wrong with a table: where (file, entries, field) and what."""

    source: str
    message: str
    entries: tuple[str, ...] = ()
    field: str | None = None

    def __str__(self) -> str:
        parts = [self.source]
        if self.entries:
            noun = "entries" if len(self.entries) > 1 else "entry"
            parts.append(f"{noun} {' and '.join(self.entries)}")
        if self.field:
            parts.append(f"field {self.field}")
        return ": ".join(parts) + ": " + self.message


class TableError(ValueError):
    """A table failed validation; ``problems`` lists every problem found, not just one."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def entry_label(position: int, entry_id: object) -> str:
    """How messages name an entry: its id when it has a usable one, and its position."""
    if isinstance(entry_id, str) and entry_id:
        return f"{entry_id!r} (#{position})"
    return f"#{position}"


def what(value: object) -> str:
    """A short description of a TOML value's type and value, for error messages."""
    if value is None:
        return "nothing (it is missing)"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value!r}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"{type(value).__name__} {value!r}"


class Report:
    """Collects problems for one source, so a load reports every error at once."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[Problem] = []

    def add(self, message: str, *, entries: tuple[str, ...] = (), field: str | None = None) -> None:
        self.problems.append(Problem(self.source, message, entries, field))

    def raise_if_any(self) -> None:
        if self.problems:
            raise TableError(self.problems)


def unknown_keys(
    raw: Mapping[str, object], allowed: Iterable[str], report: Report, *,
    where: str, entries: tuple[str, ...] = (), hints: Mapping[str, str] | None = None,
) -> None:
    """Report every key of ``raw`` not in ``allowed``, listing what is accepted."""
    allowed = tuple(allowed)
    for name in raw:
        if name not in allowed:
            hint = (hints or {}).get(name)
            message = f"unknown field {name!r}; accepted: {', '.join(allowed)}"
            report.add(message + (f" ({hint})" if hint else ""), entries=entries,
                       field=f"{where}.{name}" if where else name)


# --------------------------------------------------------------------------- schema
@dataclass(frozen=True)
class KeyField:
    """A key field a table may match on, with the domain its values live in."""

    name: str
    type: type  # str or int
    minimum: int = 0
    pattern: re.Pattern[str] | None = None
    accepted: str = ""
    exact_only: bool = False
    required: bool = False

    def forms(self) -> str:
        """What a TOML match value for this field may look like."""
        if self.type is str:
            one = f"a string ({self.accepted})" if self.accepted else "a string"
            return one if self.exact_only else f"{one} or a list of them (set)"
        if self.exact_only:
            return f"an integer >= {self.minimum}"
        return (f"an integer >= {self.minimum} (exact), a list of them (set) or "
                "{min = A, max = B} (inclusive range; either bound may be left out)")

    def value_problem(self, value: object) -> str | None:
        """Why ``value`` is not a valid value of this field, or None."""
        if self.type is str:
            if not isinstance(value, str):
                return f"expected {self.forms()}; got {what(value)}"
            if self.pattern is not None and not self.pattern.fullmatch(value):
                return f"{value!r} is not {self.accepted}"
            return None
        if type(value) is not int:
            return f"expected {self.forms()}; got {what(value)}"
        if value < self.minimum:
            return f"{value} is below the smallest valid {self.name}, {self.minimum}"
        if value > INT_MAX:
            return f"{value} is above the largest valid {self.name}, 2**63-1"
        return None

    def condition_problem(self, cond: object) -> str | None:
        """Why a normalized condition is unusable for this field, or None."""
        if isinstance(cond, Range):
            if self.type is not int:
                return f"ranges apply to integer fields only; {self.name} takes {self.forms()}"
            if self.exact_only:
                return f"must be a single value, not a range; {self.name} takes {self.forms()}"
            low = self.value_problem(cond.min)
            if low:
                return f"range min: {low}"
            return self.value_problem(cond.max) if cond.max is not None else None
        if isinstance(cond, frozenset):
            if not cond:
                return "an empty set [] matches nothing; list at least one value"
            if self.exact_only and len(cond) > 1:
                return f"must be a single value, not a set; {self.name} takes {self.forms()}"
            for value in sorted(cond, key=repr):
                problem = self.value_problem(value)
                if problem:
                    return problem
            return None
        return f"expected {self.forms()}; got {what(cond)}"


@dataclass(frozen=True)
class Schema(Generic[C]):
    """What one kind of table looks like: its key fields, config section and hooks.

    ``parse_config(raw, report_field)`` turns an entry's config section into a config
    object (or None after reporting); ``check_config(config)`` lists ``(field, message)``
    problems of a config built in code; ``config_to_toml`` is the inverse of
    ``parse_config`` for writing; ``parse_header(doc, report)`` reads the table-level
    sections; ``check_entry(entry, header)`` checks an otherwise valid entry against
    them; ``compile(entries, header)`` builds whatever fast index the table's resolver
    wants, once per table.
    """

    name: str
    fields: tuple[KeyField, ...]
    config_section: str
    parse_config: Callable[..., C | None]
    check_config: Callable[[object], list[tuple[str, str]]]
    config_to_toml: Callable[[C], dict[str, object]] | None = None
    header_sections: tuple[str, ...] = ()
    parse_header: Callable[[Mapping[str, object], Report], object] | None = None
    check_entry: Callable[[Entry[C], object], list[tuple[str, str]]] | None = None
    compile: Callable[[tuple[Entry[C], ...], object], object] | None = None

    def field(self, name: str) -> KeyField:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


# --------------------------------------------------------------------------- entries
@dataclass(frozen=True, eq=True)
class Entry(Generic[C]):
    """One table entry: an id, its match conditions, its config and free-form provenance.

    ``match`` maps key-field names to conditions. A scalar means that exact value, a
    list/set/tuple a set of values, and :class:`~dsv4_policy.conditions.Range` an
    inclusive range; they are normalized here so equal entries compare equal however
    they were written. A field left out of ``match`` matches anything.
    """

    id: str
    match: Mapping[str, Any]
    config: C
    provenance: Mapping[str, ProvenanceValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.match, Mapping):
            raise TypeError(f"Entry.match must be a mapping of field -> condition, "
                            f"got {what(self.match)}")
        if not isinstance(self.provenance, Mapping):
            raise TypeError(f"Entry.provenance must be a mapping, got {what(self.provenance)}")
        match = {name: normalize(raw) for name, raw in self.match.items()}
        object.__setattr__(self, "match", MappingProxyType(match))
        object.__setattr__(self, "provenance", MappingProxyType(dict(self.provenance)))

    __hash__ = None  # type: ignore[assignment]  # holds mappings

    def matches(self, key: object) -> bool:
        """Whether every condition of this entry admits the key's value."""
        return all(contains(cond, getattr(key, name)) for name, cond in self.match.items())


def overlap(schema: Schema[Any], a: Entry[Any], b: Entry[Any]) -> dict[str, Condition] | None:
    """The common box of two entries (field -> shared condition), or None if disjoint.

    Exact for box-shaped entries: two entries share a key iff every field's conditions
    intersect, since fields vary independently over their domains.
    """
    common: dict[str, Condition] = {}
    for f in schema.fields:
        ca, cb = a.match.get(f.name), b.match.get(f.name)
        if ca is None and cb is None:
            continue
        if ca is None or cb is None:
            common[f.name] = ca if cb is None else cb  # type: ignore[assignment]
            continue
        both = intersection(ca, cb)
        if both is None:
            return None
        common[f.name] = both
    return common


def _provenance_problems(provenance: Mapping[str, object]) -> list[tuple[str, str]]:
    found = []
    for name, value in provenance.items():
        if not isinstance(name, str) or not name:
            found.append((str(name), "provenance keys must be non-empty strings"))
        elif not isinstance(value, str | int | float | bool):
            found.append((name, f"provenance values are strings, numbers or booleans; "
                                f"got {what(value)}"))
        elif isinstance(value, float) and not math.isfinite(value):
            found.append((name, f"provenance numbers must be finite; got {value!r}"))
    return found


def validate(
    schema: Schema[Any], labelled: list[tuple[str, Entry[Any]]], header: object, report: Report,
) -> None:
    """Report every problem of these entries: fields, values, configs, ids and overlaps."""
    usable: list[tuple[str, Entry[Any]]] = []
    seen: dict[str, str] = {}
    for label, entry in labelled:
        # An id problem does not stop the overlap check: report both at once.
        if not isinstance(entry.id, str) or not ID_PATTERN.fullmatch(entry.id):
            report.add(f"id must be {ID_ACCEPTED}; got {what(entry.id)}", entries=(label,),
                       field="id")
        elif entry.id in seen:
            report.add(f"duplicate id {entry.id!r}; ids must be unique",
                       entries=(seen[entry.id], label), field="id")
        else:
            seen[entry.id] = label
        before = len(report.problems)
        for name, cond in entry.match.items():
            try:
                f = schema.field(name)
            except KeyError:
                report.add(f"unknown match field {name!r}; accepted: "
                           f"{', '.join(schema.field_names)}", entries=(label,),
                           field=f"match.{name}")
                continue
            problem = f.condition_problem(cond)
            if problem:
                report.add(problem, entries=(label,), field=f"match.{name}")
        for f in schema.fields:
            if f.required and f.name not in entry.match:
                report.add(f"missing; every entry must give {f.name} ({f.forms()})",
                           entries=(label,), field=f"match.{f.name}")
        for name, message in schema.check_config(entry.config):
            report.add(message, entries=(label,), field=f"{schema.config_section}.{name}")
        for name, message in _provenance_problems(entry.provenance):
            report.add(message, entries=(label,), field=f"provenance.{name}")
        if len(report.problems) == before and schema.check_entry is not None:
            for name, message in schema.check_entry(entry, header):
                report.add(message, entries=(label,), field=name)
        if len(report.problems) == before:
            usable.append((label, entry))
    for (la, a), (lb, b) in combinations(usable, 2):
        common = overlap(schema, a, b)
        if common is not None:
            shown = ", ".join(f"{k}={witness(v)!r}" for k, v in common.items()) or "every key"
            box = "; ".join(f"{k} in {describe(v)}" for k, v in common.items()) or "all keys"
            report.add(f"overlap: both match e.g. {shown} (shared: {box}); make their "
                       "match conditions disjoint", entries=(la, lb), field="match")


# --------------------------------------------------------------------------- tables
class Table(Generic[C]):
    """A validated, immutable table. Build one with :func:`load`, :func:`loads` or directly.

    Construction validates every entry and raises :class:`TableError` listing every
    problem. ``with_entry`` and ``without_entry`` return new tables.
    """

    __slots__ = ("_by_id", "compiled", "entries", "header", "schema", "source")

    def __init__(
        self, schema: Schema[C], entries: Iterable[Entry[C]] = (), *,
        source: str = "<memory>", header: object = None, _checked: bool = False,
    ) -> None:
        entries = tuple(entries)
        if schema.parse_header is not None and header is None:
            raise TypeError(f"{source}: a {schema.name} table needs its header sections "
                            f"({', '.join(schema.header_sections)})")
        if not _checked:
            for i, entry in enumerate(entries):
                if not isinstance(entry, Entry):
                    raise TypeError(f"{source}: entry #{i + 1} must be an Entry, got {what(entry)}")
            report = Report(source)
            validate(schema, [(entry_label(i + 1, e.id), e) for i, e in enumerate(entries)],
                     header, report)
            report.raise_if_any()
        self.schema = schema
        self.entries: tuple[Entry[C], ...] = entries
        self.source = source
        self.header = header
        self._by_id = {e.id: e for e in entries}
        self.compiled = schema.compile(entries, header) if schema.compile is not None else None

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Entry[C]]:
        return iter(self.entries)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Table):
            return NotImplemented
        return (self.schema is other.schema and self.entries == other.entries
                and self.header == other.header)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Table({self.schema.name!r}, {len(self.entries)} entries, source={self.source!r})"

    def get(self, entry_id: str) -> Entry[C] | None:
        """The entry with this id, or None."""
        return self._by_id.get(entry_id)

    def matches(self, key: object) -> tuple[Entry[C], ...]:
        """Every entry matching ``key`` (at most one in a valid table)."""
        return tuple(e for e in self.entries if e.matches(key))

    def with_entry(self, entry: Entry[C]) -> Table[C]:
        """A new table with ``entry`` added; raises TableError if it clashes with one."""
        return Table(self.schema, (*self.entries, entry), source=self.source, header=self.header)

    def without_entry(self, entry_id: str) -> Table[C]:
        """A new table without the entry ``entry_id``; raises KeyError if there is none."""
        if entry_id not in self._by_id:
            raise KeyError(f"no entry with id {entry_id!r} in {self.source}; "
                           f"ids: {', '.join(self._by_id) or '(none)'}")
        kept = tuple(e for e in self.entries if e.id != entry_id)
        return Table(self.schema, kept, source=self.source, header=self.header, _checked=True)


def resolve(table: Table[C], key: object, baseline: T) -> C | T:
    """The config of the one entry matching ``key``; otherwise ``baseline`` itself."""
    hits = table.matches(key)
    if len(hits) == 1:
        return hits[0].config
    return baseline


# --------------------------------------------------------------------------- loading
def _parse_condition(f: KeyField, raw: object) -> tuple[object, str | None]:
    """A TOML match value as a normalized condition, or a message saying what's wrong."""
    if isinstance(raw, dict):
        if f.type is not int:
            return None, f"ranges apply to integer fields only; {f.name} takes {f.forms()}"
        extra = sorted(set(raw) - {"min", "max"})
        if extra:
            return None, (f"unknown range bound {extra[0]!r}; a range is "
                          "{min = A, max = B} with either bound optional")
        if not raw:
            return None, "empty range {}: give min and/or max"
        for bound in ("min", "max"):
            if bound in raw and type(raw[bound]) is not int:
                return None, f"range {bound} must be an integer; got {what(raw[bound])}"
        low, high = raw.get("min", f.minimum), raw.get("max")
        if high is not None and low > high:
            return None, f"inverted range: min {low} > max {high}, which matches nothing"
        return Range(low, high), None
    if isinstance(raw, list):
        for item in raw:
            if not isinstance(item, str | int) or isinstance(item, bool):
                return None, f"a set holds {f.forms()}; got an element {what(item)}"
        if len(set(raw)) != len(raw):
            dupes = sorted({repr(v) for v in raw if raw.count(v) > 1})
            return None, f"value {dupes[0]} listed more than once in the set"
        return frozenset(raw), None
    if isinstance(raw, str | int) and not isinstance(raw, bool):
        return frozenset((raw,)), None
    return None, f"expected {f.forms()}; got {what(raw)}"


def _parse_entry(
    schema: Schema[C], raw: object, position: int, report: Report,
) -> tuple[str, Entry[C] | None]:
    label = entry_label(position, raw.get("id") if isinstance(raw, dict) else None)
    if not isinstance(raw, dict):
        report.add(f"each [[entry]] must be a table; got {what(raw)}", entries=(label,))
        return label, None
    here = (label,)
    ok = True
    allowed = ("id", "match", schema.config_section, "provenance")
    unknown_keys(raw, allowed, report, where="", entries=here)
    ok &= set(raw) <= set(allowed)
    if "id" not in raw:
        report.add(f"missing; every entry needs an id ({ID_ACCEPTED})", entries=here, field="id")
        ok = False
    match_raw = raw.get("match", {})
    match: dict[str, object] = {}
    if not isinstance(match_raw, dict):
        report.add(f"[entry.match] must be a table; got {what(match_raw)}", entries=here,
                   field="match")
        ok = False
    else:
        for name, value in match_raw.items():
            if name not in schema.field_names:
                report.add(f"unknown match field {name!r}; accepted: "
                           f"{', '.join(schema.field_names)}", entries=here, field=f"match.{name}")
                ok = False
                continue
            cond, problem = _parse_condition(schema.field(name), value)
            if problem:
                report.add(problem, entries=here, field=f"match.{name}")
                ok = False
            else:
                match[name] = cond
    section = schema.config_section
    config = None
    if section not in raw:
        report.add(f"missing [entry.{section}] table", entries=here, field=section)
        ok = False
    elif not isinstance(raw[section], dict):
        report.add(f"[entry.{section}] must be a table; got {what(raw[section])}", entries=here,
                   field=section)
        ok = False
    else:
        def report_field(name: str, message: str) -> None:
            report.add(message, entries=here, field=f"{section}.{name}")

        before = len(report.problems)
        config = schema.parse_config(raw[section], report_field)
        ok &= config is not None and len(report.problems) == before
    provenance = raw.get("provenance", {})
    if not isinstance(provenance, dict):
        report.add(f"[entry.provenance] must be a table; got {what(provenance)}", entries=here,
                   field="provenance")
        ok = False
    if not ok:
        return label, None
    return label, Entry(raw["id"], match, config, provenance)


def loads(text: str, schema: Schema[C], source: str = "<string>") -> Table[C]:
    """Parse and validate a table from TOML text; raise TableError with every problem."""
    report = Report(source)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        report.add(f"not valid TOML: {exc}")
        report.raise_if_any()
    allowed = ("schema", "entry", *schema.header_sections)
    unknown_keys(doc, allowed, report, where="")
    if "schema" not in doc:
        report.add(f"missing the `schema = {SCHEMA_VERSION}` header", field="schema")
    elif type(doc["schema"]) is not int or doc["schema"] != SCHEMA_VERSION:
        report.add(f"unsupported schema {what(doc['schema'])}; this version reads "
                   f"schema = {SCHEMA_VERSION}", field="schema")
    header = schema.parse_header(doc, report) if schema.parse_header is not None else None
    raw_entries = doc.get("entry", [])
    labelled: list[tuple[str, Entry[C]]] = []
    if not isinstance(raw_entries, list):
        report.add(f"`entry` must be an array of tables ([[entry]]); got {what(raw_entries)}",
                   field="entry")
        raw_entries = []
    for position, raw in enumerate(raw_entries, start=1):
        label, entry = _parse_entry(schema, raw, position, report)
        if entry is not None:
            labelled.append((label, entry))
    validate(schema, labelled, header, report)
    report.raise_if_any()
    return Table(schema, [e for _, e in labelled], source=source, header=header, _checked=True)


def load(path: str | Path, schema: Schema[C]) -> Table[C]:
    """Read and validate a table file; errors name this path."""
    source = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        message = f"cannot read the file: {exc.strerror or exc}"
        raise TableError([Problem(source, message)]) from None
    except UnicodeDecodeError as exc:
        raise TableError([Problem(source, f"not UTF-8 text: {exc}")]) from None
    return loads(text, schema, source)
