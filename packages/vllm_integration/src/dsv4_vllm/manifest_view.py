"""How the launcher shows a serve manifest: as text for people, as JSON for tools.

The text form is meant to be pasted: the environment block is a list of ``export``
lines and the command is one ``shlex.join`` line, so what is printed is exactly
what runs. Values of variables whose names look secret are never printed: the text
form exports them from the shell's own value, the JSON form shows a mask.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dsv4_policy.serve import Manifest, ServeKey, Violation

_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
MASK = "***"


def shown_value(name: str, value: str) -> str:
    """``value``, or a mask when ``name`` looks like it holds a secret."""
    return MASK if any(word in name.upper() for word in _SECRET_WORDS) else value


@dataclass(frozen=True)
class LaunchView:
    """Everything the launcher reports about one launch."""

    key: ServeKey
    manifest: Manifest
    command: tuple[str, ...]
    allowed: frozenset[str] = frozenset()
    dry_run: bool = False
    problems: tuple[str, ...] = field(default=())

    @property
    def refused(self) -> tuple[Violation, ...]:
        return tuple(v for v in self.manifest.violations if v.rule not in self.allowed)


def _env_lines(env: Mapping[str, str]) -> list[str]:
    """``export NAME=value``; a masked variable is exported from the shell's own value."""
    return [
        f"export {name}={shlex.quote(env[name])}"
        if shown_value(name, env[name]) == env[name]
        else f"export {name}  # value hidden; exported from your shell"
        for name in sorted(env)
    ]


def _rate(expected: float | None) -> str:
    return "unknown (no measured envelope)" if expected is None else (
        f"{expected:g} tok/s aggregate decode"
    )


def render_text(view: LaunchView) -> str:
    """The human manifest: key, source, rate, notes, env block and command line."""
    m, k = view.manifest, view.key
    lines = [
        "dsv4-serve manifest",
        f"  key:      gpu={k.gpu} tp={k.tp} context={k.context} seqs={k.seqs}",
        f"  source:   {m.source}",
        f"  expected: {_rate(m.expected_tok_s)}",
    ]
    if m.source == "passthrough":
        lines.append("  note:     no envelope matches this key; your arguments pass through "
                     "unchanged")
    for i, note in enumerate(m.notes.splitlines()):
        lines.append(f"  {'notes:' if i == 0 else '':<9} {note}")
    for v in m.violations:
        state = "allowed by --allow-avoided" if v.rule in view.allowed else "REFUSED"
        lines.append(f"  avoid:    {v.rule} ({state}): {v.reason} [{v.evidence}]")
    lines.append("  env:")
    lines.extend(f"    {line}" for line in _env_lines(m.env) or ["(none)"])
    lines.append("  argv:")
    lines.append(f"    {shlex.join(view.command)}")
    if view.dry_run:
        lines.append("  (dry run: vLLM is not started)")
    return "\n".join(lines)


def render_json(view: LaunchView) -> str:
    """The same facts as one JSON object (``argv`` is the complete command)."""
    m, k = view.manifest, view.key
    doc = {
        "key": {"gpu": k.gpu, "tp": k.tp, "context": k.context, "seqs": k.seqs},
        "source": m.source,
        "passthrough": m.source == "passthrough",
        "expected_tok_s": m.expected_tok_s,
        "notes": m.notes,
        "argv": list(view.command),
        "command": shlex.join(view.command),
        "env": {name: shown_value(name, m.env[name]) for name in sorted(m.env)},
        "violations": [
            {
                "rule": v.rule,
                "reason": v.reason,
                "evidence": v.evidence,
                "allowed": v.rule in view.allowed,
            }
            for v in m.violations
        ],
        "refused": bool(view.refused) or bool(view.problems),
        "problems": list(view.problems),
        "dry_run": view.dry_run,
    }
    return json.dumps(doc, indent=2)


def refusal_text(violations: Sequence[Violation]) -> str:
    """Why the launch is refused, naming the flag that would allow each rule."""
    lines = ["dsv4-serve: refusing to launch: the arguments break avoid-rules:"]
    for v in violations:
        lines.append(f"  {v.rule}: {v.reason} (from {v.evidence}); "
                     f"pass --allow-avoided {v.rule} to launch anyway")
    return "\n".join(lines)
