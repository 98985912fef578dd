"""Serve envelopes: turn a serving shape into the exact ``vllm serve`` launch that was measured.

:func:`plan` looks the key (gpu, tp, context, seqs) up in the serve table:

- On a hit, the manifest's argv is the envelope's argv followed by the user's, and its
  env the envelope's env under the user's. A user flag (in any spelling) or variable
  that the envelope also sets replaces the envelope's, and the notes say so.
- On a miss, the user's argv and env come back unchanged (source ``"passthrough"``):
  a shape nobody measured behaves exactly as upstream.

In both cases the user's arguments and environment are checked against the table's
rules; every :class:`Violation` names the rule, its reason and the evidence, so a
launcher can refuse the launch and say why.

The table itself (schema, envelopes, rules) is :mod:`dsv4_policy.serve.table`, and
reading flags the way ``vllm serve`` does is :mod:`dsv4_policy.serve.argv`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dsv4_policy.arch import arch_major
from dsv4_policy.serve.argv import scan
from dsv4_policy.serve.table import (
    SCHEMA,
    Envelope,
    Header,
    Index,
    Rule,
    Spec,
    Violation,
    load_table,
    loads_table,
    shipped_table,
    violations,
)
from dsv4_policy.table import Table, TableError, what

PASSTHROUGH = "passthrough"


@dataclass(frozen=True)
class ServeKey:
    """A serving shape: GPU architecture, tensor-parallel size, context length, sequences."""

    gpu: str
    tp: int
    context: int
    seqs: int

    def __post_init__(self) -> None:
        try:
            arch_major(self.gpu)
        except ValueError as exc:
            raise ValueError(f"ServeKey.gpu: {exc}") from None
        for name in ("tp", "context", "seqs"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"ServeKey.{name} must be a positive integer; got {what(value)}")


@dataclass(frozen=True)
class Manifest:
    """Everything a launcher needs, and shows: the argv, the env and where they came from.

    ``argv`` is the ``vllm serve`` arguments (without ``vllm serve`` and the model);
    ``source`` is ``"envelope:<id>"`` or ``"passthrough"``; ``expected_tok_s`` the
    envelope's measured aggregate decode rate (None on passthrough and for a control
    shape); ``notes`` one line per remark.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str]
    source: str
    expected_tok_s: float | None
    violations: tuple[Violation, ...]
    notes: str

    def to_json(self) -> dict[str, object]:
        """A plain-JSON rendering (lists and dicts)."""
        return {
            "argv": list(self.argv),
            "env": dict(self.env),
            "source": self.source,
            "expected_tok_s": self.expected_tok_s,
            "violations": [{"rule": v.rule, "reason": v.reason, "evidence": v.evidence}
                           for v in self.violations],
            "notes": self.notes,
        }


def _index(table: Table[Spec] | None) -> tuple[Table[Spec], Index]:
    table = shipped_table() if table is None else table
    if not isinstance(table, Table) or table.schema is not SCHEMA:
        raise TypeError(f"expected a serve table, got {table!r}")
    return table, table.compiled  # type: ignore[return-value]


def envelopes(table: Table[Spec] | None = None) -> list[Envelope]:
    """Every envelope of the table (the shipped one by default), in table order."""
    return list(_index(table)[1].envelopes)


def rules(table: Table[Spec] | None = None) -> tuple[Rule, ...]:
    """The table's keep- and avoid-rules, in table order."""
    header = _index(table)[1].header
    return header.rules if header is not None else ()


def _user_inputs(
    user_argv: Sequence[str], user_env: Mapping[str, str] | None,
) -> tuple[tuple[str, ...], dict[str, str]]:
    if isinstance(user_argv, str | bytes):
        raise TypeError("user_argv must be a sequence of arguments, not one string; "
                        f"got {user_argv!r} (split it, e.g. with shlex.split)")
    argv = tuple(user_argv)
    for i, item in enumerate(argv):
        if not isinstance(item, str):
            raise TypeError(f"user_argv[{i}] must be a string; got {what(item)}")
    env = dict(user_env) if user_env is not None else {}
    for name, value in env.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"user_env entries must be str -> str; got {name!r} -> {what(value)}")
    return argv, env


def _merge(
    envelope: Envelope, argv: tuple[str, ...], env: dict[str, str], header: Header,
) -> tuple[tuple[str, ...], dict[str, str], list[str]]:
    """Envelope args then user args, dropping envelope flags the user sets again."""
    aliases = header.launch.aliases
    mine = scan(envelope.argv, aliases)
    theirs = scan(argv, aliases)
    user_flags = {occ.flag: occ for occ in theirs}
    notes = []
    dropped: set[int] = set()
    for occ in mine:
        if occ.flag in user_flags:
            dropped.update(range(occ.start, occ.stop))
            notes.append(f"user {user_flags[occ.flag].written} overrides the envelope's "
                         f"{occ.written}")
    kept = tuple(item for i, item in enumerate(envelope.argv) if i not in dropped)
    merged_env = dict(envelope.env)
    for name, value in env.items():
        if name in merged_env and merged_env[name] != value:
            notes.append(f"user {name}={value} overrides the envelope's {name}={merged_env[name]}")
        merged_env[name] = value
    return kept + argv, merged_env, notes


def plan(
    key: ServeKey, user_argv: Sequence[str] = (), user_env: Mapping[str, str] | None = None,
    table: Table[Spec] | None = None,
) -> Manifest:
    """The launch manifest for ``key``; see the module docstring for the rules."""
    if not isinstance(key, ServeKey):
        raise TypeError(f"key must be a ServeKey; got {what(key)}")
    table, index = _index(table)
    argv, env = _user_inputs(user_argv, user_env)
    header = index.header
    hits = table.matches(key)
    envelope = index.by_id[hits[0].id] if len(hits) == 1 else None
    found = () if header is None else violations(
        header.rules, argv, env, header.launch.aliases, in_envelope=envelope is not None)
    if envelope is None or header is None:
        same = [e for e in index.envelopes if (e.gpu, e.tp) == (key.gpu, key.tp)]
        note = (f"no envelope for gpu={key.gpu} tp={key.tp} context={key.context} "
                f"seqs={key.seqs}; the arguments and environment pass through unchanged")
        if same:
            note += "\nenvelopes for this gpu and tp (context x seqs): " + ", ".join(
                f"{e.context} x {e.seqs}" for e in same)
        return Manifest(argv, env, PASSTHROUGH, None, found, note)
    merged_argv, merged_env, notes = _merge(envelope, argv, env, header)
    if envelope.notes:
        notes.insert(0, envelope.notes)
    if envelope.expected_tok_s is None:
        notes.insert(1 if envelope.notes else 0, "control shape: no published decode rate")
    return Manifest(merged_argv, merged_env, f"envelope:{envelope.id}", envelope.expected_tok_s,
                    found, "\n".join(notes))


__all__ = [
    "PASSTHROUGH", "SCHEMA", "Envelope", "Manifest", "Rule", "ServeKey", "Spec", "Table",
    "TableError", "Violation", "envelopes", "load_table", "loads_table", "plan", "rules",
    "shipped_table",
]
