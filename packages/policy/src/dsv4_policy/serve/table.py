"""The serve table: validated serving envelopes, their launch template and the rules.

An envelope is one measured serving shape (gpu, tp, context, seqs) with its decode
rate. The table also holds, as data:

- ``[launch]``: the ``vllm serve`` argv template and environment every envelope
  uses (flag spellings live here, not in code), and the short-flag aliases;
- ``[[rule]]``: keep-rules and avoid-rules, each with its reason and, where a
  violation can be seen in a command line, detectors that find it.

On load, every envelope's own argv and env are checked against every rule, so the
shipped envelopes are known to obey them.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType

from dsv4_policy.arch import ARCH_ACCEPTED, ARCH_PATTERN
from dsv4_policy.serve.argv import Occurrence, canonical, is_flag, scan
from dsv4_policy.table import (
    ID_ACCEPTED,
    ID_PATTERN,
    Entry,
    KeyField,
    Report,
    Schema,
    Table,
    load,
    loads,
    unknown_keys,
    what,
)

PLACEHOLDERS = ("tp", "context", "seqs")
_PLACEHOLDER = re.compile(r"^\{([A-Za-z_]+)\}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RULE_KINDS = ("keep", "avoid")
SCOPES = ("always", "envelope")
SHIPPED = "tables/serve.toml"


# --------------------------------------------------------------------------- data types
@dataclass(frozen=True)
class Violation:
    """A broken keep- or avoid-rule: which rule, why it exists, and what broke it."""

    rule: str
    reason: str
    evidence: str  # the offending argv item(s) or NAME=value


@dataclass(frozen=True)
class Detector:
    """One way a rule shows in a launch: a flag (any spelling) or an environment variable.

    With neither ``above`` nor ``unless``, being present is the violation. ``above``: a
    value that is not an integer <= above violates. ``unless``: a value outside the
    list violates (exact for flags; trimmed and case-insensitive for env values).
    """

    flags: tuple[str, ...] = ()
    env: str | None = None
    above: int | None = None
    unless: tuple[str, ...] | None = None

    def _violates(self, value: str | None, *, env: bool) -> bool:
        if self.above is not None:
            try:
                return int(value) > self.above  # type: ignore[arg-type]
            except (TypeError, ValueError):
                return True  # missing or not an integer: cannot show it is allowed
        if self.unless is not None:
            if value is None:
                return True
            if env:
                return value.strip().casefold() not in {u.casefold() for u in self.unless}
            return value not in self.unless
        return True

    def evidence(self, found: Sequence[Occurrence], env: Mapping[str, str]) -> list[str]:
        """How this detector's condition shows in the scanned argv and the env."""
        if self.env is not None:
            if self.env in env and self._violates(env[self.env], env=True):
                return [f"{self.env}={env[self.env]}"]
            return []
        return [occ.written for occ in found
                if occ.flag in self.flags and self._violates(occ.value, env=False)]


@dataclass(frozen=True)
class Rule:
    """A keep- or avoid-rule. ``scope`` "always" applies to every launch, "envelope" only
    when an envelope is used (it protects a setting the envelope makes)."""

    id: str
    kind: str
    reason: str
    scope: str = "always"
    when: tuple[Detector, ...] = ()


@dataclass(frozen=True)
class LaunchTemplate:
    """The table-level ``[launch]`` section: argv template, env and flag aliases."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    aliases: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "aliases", MappingProxyType(dict(self.aliases)))


@dataclass(frozen=True)
class Header:
    """Everything in a serve table besides its entries."""

    launch: LaunchTemplate
    rules: tuple[Rule, ...]


@dataclass(frozen=True)
class Spec:
    """An envelope entry's own data (``[entry.envelope]``).

    ``expected_tok_s`` is the measured aggregate decode rate; it is None only for a
    control shape (``control = true``), which has no published rate.
    """

    expected_tok_s: float | None
    control: bool = False
    notes: str = ""


@dataclass(frozen=True)
class Envelope:
    """A validated serving shape and the exact launch it was measured with."""

    id: str
    gpu: str
    tp: int
    context: int
    seqs: int
    argv: tuple[str, ...]  # `vllm serve` arguments, without "vllm serve" and the model
    env: Mapping[str, str]
    expected_tok_s: float | None  # aggregate decode rate; None for a control shape
    notes: str


# --------------------------------------------------------------------------- rules
def violations(
    rules: Iterable[Rule], argv: Sequence[str], env: Mapping[str, str],
    aliases: Mapping[str, str], *, in_envelope: bool,
) -> tuple[Violation, ...]:
    """Every rule broken by ``argv``/``env``, in rule order; envelope-scoped rules only
    when ``in_envelope``."""
    found = scan(argv, aliases)
    out = []
    for rule in rules:
        if rule.scope == "envelope" and not in_envelope:
            continue
        for detector in rule.when:
            out.extend(Violation(rule.id, rule.reason, ev) for ev in detector.evidence(found, env))
    return tuple(out)


def build_envelope(entry: Entry[Spec], launch: LaunchTemplate) -> Envelope:
    """The envelope an entry describes: the template with its tp/context/seqs filled in."""
    values = {name: next(iter(entry.match[name])) for name in ("gpu", *PLACEHOLDERS)}
    argv = []
    for item in launch.argv:
        found = _PLACEHOLDER.fullmatch(item)
        argv.append(str(values[found.group(1)]) if found else item)
    spec = entry.config
    return Envelope(entry.id, values["gpu"], values["tp"], values["context"], values["seqs"],
                    tuple(argv), launch.env, spec.expected_tok_s, spec.notes)


# --------------------------------------------------------------------------- parsing
def _strings(raw: object, where: str, report: Report, *, nonempty: bool = True) -> tuple | None:
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        report.add(f"expected an array of strings; got {what(raw)}", field=where)
        return None
    if nonempty and not raw:
        report.add("must not be empty", field=where)
        return None
    return tuple(raw)


def _parse_launch(raw: object, report: Report) -> LaunchTemplate | None:
    if not isinstance(raw, dict):
        report.add(f"[launch] must be a table; got {what(raw)}", field="launch")
        return None
    before = len(report.problems)
    unknown_keys(raw, ("argv", "env", "aliases"), report, where="launch")
    argv = _strings(raw.get("argv"), "launch.argv", report) if "argv" in raw else None
    if "argv" not in raw:
        report.add("missing; give the `vllm serve` argument template", field="launch.argv")
    if argv is not None:
        seen: list[str] = []
        for item in argv:
            found = _PLACEHOLDER.fullmatch(item)
            if found and found.group(1) not in PLACEHOLDERS:
                report.add(f"unknown placeholder {item!r}; accepted: "
                           f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}", field="launch.argv")
            elif found:
                seen.append(found.group(1))
        for name in PLACEHOLDERS:
            if seen.count(name) != 1:
                report.add(f"must hold the placeholder {{{name}}} exactly once "
                           f"(found {seen.count(name)})", field="launch.argv")
    env = raw.get("env", {})
    if not isinstance(env, dict):
        report.add(f"expected a table of NAME = \"value\"; got {what(env)}", field="launch.env")
        env = {}
    for name, value in env.items():
        if not _ENV_NAME.fullmatch(name) or not isinstance(value, str):
            report.add(f"{name!r} = {what(value)}: env entries are NAME = \"string\"",
                       field=f"launch.env.{name}")
    aliases = raw.get("aliases", {})
    if not isinstance(aliases, dict):
        report.add(f"expected a table of \"-short\" = \"--long\"; got {what(aliases)}",
                   field="launch.aliases")
        aliases = {}
    for short, long in aliases.items():
        if not is_flag(short) or not isinstance(long, str) or not long.startswith("--"):
            report.add(f"{short!r} = {what(long)}: an alias maps a flag to a --long flag",
                       field=f"launch.aliases.{short}")
    if len(report.problems) != before or argv is None:
        return None
    return LaunchTemplate(argv, env, aliases)


def _parse_detector(raw: object, where: str, report: Report,
                    aliases: Mapping[str, str]) -> Detector | None:
    if not isinstance(raw, dict):
        report.add(f"a detector is a table such as {{ flags = [\"--x\"] }} or "
                   f"{{ env = \"NAME\", unless = [\"0\"] }}; got {what(raw)}", field=where)
        return None
    before = len(report.problems)
    unknown_keys(raw, ("flags", "env", "above", "unless"), report, where=where)
    if ("flags" in raw) == ("env" in raw):
        report.add("give exactly one of flags (a list of spellings) or env (a variable name)",
                   field=where)
    flags: tuple[str, ...] = ()
    if "flags" in raw:
        listed = _strings(raw["flags"], f"{where}.flags", report)
        for item in listed or ():
            if not is_flag(item) or "=" in item:
                report.add(f"{item!r} is not a flag spelling such as '--name' or '-x'",
                           field=f"{where}.flags")
        flags = tuple(canonical(f, aliases) for f in listed or ())
    env = raw.get("env")
    if env is not None and (not isinstance(env, str) or not _ENV_NAME.fullmatch(env)):
        report.add(f"expected an environment variable name; got {what(env)}", field=f"{where}.env")
    above = raw.get("above")
    if above is not None and type(above) is not int:
        report.add(f"expected an integer; got {what(above)}", field=f"{where}.above")
    unless = None
    if "unless" in raw:
        unless = _strings(raw["unless"], f"{where}.unless", report)
    if above is not None and unless is not None:
        report.add("give at most one of above and unless", field=where)
    if len(report.problems) != before:
        return None
    return Detector(flags, env, above, unless)


def _parse_rules(raw: object, aliases: Mapping[str, str], report: Report) -> tuple[Rule, ...]:
    if not isinstance(raw, list):
        report.add(f"`rule` must be an array of tables ([[rule]]); got {what(raw)}", field="rule")
        return ()
    rules = []
    seen: set[str] = set()
    for position, item in enumerate(raw, start=1):
        rid = item.get("id") if isinstance(item, dict) else None
        where = f"rule {rid!r} (#{position})" if isinstance(rid, str) else f"rule #{position}"
        if not isinstance(item, dict):
            report.add(f"each [[rule]] must be a table; got {what(item)}", field=where)
            continue
        before = len(report.problems)
        unknown_keys(item, ("id", "kind", "scope", "reason", "when"), report, where=where)
        if not isinstance(rid, str) or not ID_PATTERN.fullmatch(rid):
            report.add(f"id must be {ID_ACCEPTED}; got {what(rid)}", field=f"{where}.id")
        elif rid in seen:
            report.add(f"duplicate rule id {rid!r}", field=f"{where}.id")
        else:
            seen.add(rid)
        kind = item.get("kind")
        if kind not in RULE_KINDS:
            report.add(f"expected one of {', '.join(RULE_KINDS)}; got {what(kind)}",
                       field=f"{where}.kind")
        scope = item.get("scope", "always")
        if scope not in SCOPES:
            report.add(f"expected one of {', '.join(SCOPES)}; got {what(scope)}",
                       field=f"{where}.scope")
        reason = item.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            report.add(f"every rule needs its reason (a non-empty string); got {what(reason)}",
                       field=f"{where}.reason")
        when_raw = item.get("when", [])
        detectors = []
        if not isinstance(when_raw, list):
            report.add(f"expected an array of detector tables; got {what(when_raw)}",
                       field=f"{where}.when")
        else:
            for i, d in enumerate(when_raw, start=1):
                det = _parse_detector(d, f"{where}.when[{i}]", report, aliases)
                if det is not None:
                    detectors.append(det)
        if len(report.problems) == before:
            rules.append(Rule(rid, kind, reason, scope, tuple(detectors)))  # type: ignore[arg-type]
    return tuple(rules)


def _parse_header(doc: Mapping[str, object], report: Report) -> Header | None:
    before = len(report.problems)
    if "launch" not in doc:
        report.add("missing the [launch] table (argv template, env, aliases)", field="launch")
        launch = None
    else:
        launch = _parse_launch(doc["launch"], report)
    aliases = launch.aliases if launch is not None else {}
    rules = _parse_rules(doc.get("rule", []), aliases, report)
    if launch is None or len(report.problems) != before:
        return None
    return Header(launch, rules)


def _parse_spec(raw: Mapping[str, object], report: Callable[[str, str], None]) -> Spec | None:
    ok = True
    for name in raw:
        if name not in ("expected_tok_s", "control", "notes"):
            report(name, f"unknown field {name!r}; accepted: expected_tok_s, control, notes")
            ok = False
    rate = raw.get("expected_tok_s")
    control = raw.get("control", False)
    notes = raw.get("notes", "")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float)
                             or not math.isfinite(rate) or rate <= 0):
        report("expected_tok_s", f"expected a positive number (tokens/s); got {what(rate)}")
        ok = False
    if type(control) is not bool:
        report("control", f"expected true or false; got {what(control)}")
        ok = False
    elif rate is None and not control:
        report("expected_tok_s", "missing; give the measured aggregate decode rate, or mark "
                                 "a control shape with control = true")
        ok = False
    if not isinstance(notes, str):
        report("notes", f"expected a string; got {what(notes)}")
        ok = False
    if not ok:
        return None
    return Spec(None if rate is None else float(rate), control, notes)


def _check_spec(config: object) -> list[tuple[str, str]]:
    if not isinstance(config, Spec):
        return [("spec", f"an envelope entry's config must be a Spec; got {what(config)}")]
    if config.expected_tok_s is None and not config.control:
        return [("expected_tok_s", "missing; only a control shape may omit its rate")]
    return []


def _check_entry(entry: Entry[Spec], header: object) -> list[tuple[str, str]]:
    if not isinstance(header, Header):
        return []  # the header's own problems are already reported
    env = build_envelope(entry, header.launch)
    broken = violations(header.rules, env.argv, env.env, header.launch.aliases, in_envelope=True)
    return [("envelope", f"the envelope's own launch breaks rule {v.rule!r}: {v.evidence}")
            for v in broken]


@dataclass(frozen=True)
class Index:
    """A serve table's envelopes, built once: in table order and by id."""

    header: Header | None
    envelopes: tuple[Envelope, ...]
    by_id: Mapping[str, Envelope]


def _compile(entries: tuple[Entry[Spec], ...], header: object) -> Index:
    if not isinstance(header, Header):
        return Index(None, (), {})
    built = tuple(build_envelope(e, header.launch) for e in entries)
    return Index(header, built, {e.id: e for e in built})


FIELDS = (
    KeyField("gpu", str, pattern=ARCH_PATTERN, accepted=ARCH_ACCEPTED, exact_only=True,
             required=True),
    KeyField("tp", int, minimum=1, exact_only=True, required=True),
    KeyField("context", int, minimum=1, exact_only=True, required=True),
    KeyField("seqs", int, minimum=1, exact_only=True, required=True),
)

SCHEMA: Schema[Spec] = Schema(
    name="serve",
    fields=FIELDS,
    config_section="envelope",
    parse_config=_parse_spec,
    check_config=_check_spec,
    header_sections=("launch", "rule"),
    parse_header=_parse_header,
    check_entry=_check_entry,
    compile=_compile,
)


def load_table(path: str | Path) -> Table[Spec]:
    """Read and validate a serve table file."""
    return load(path, SCHEMA)


def loads_table(text: str, source: str = "<string>") -> Table[Spec]:
    """Parse and validate serve table text."""
    return loads(text, SCHEMA, source)


@functools.cache
def shipped_table() -> Table[Spec]:
    """The serve table shipped inside the package (``dsv4_policy/tables/serve.toml``)."""
    ref = resources.files("dsv4_policy").joinpath(SHIPPED)
    return loads(ref.read_text(encoding="utf-8"), SCHEMA, source=str(ref))
