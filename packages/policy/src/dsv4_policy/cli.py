"""``dsv4-policy``: resolve launches, list compile keys, plan serve launches, check tables.

Every kernel in :mod:`dsv4_policy.registry` gets a ``dsv4-policy <kernel>`` command
with one flag per key field; ``keys --kernel <name>`` and ``check`` cover them all.

Every subcommand names the GPU architecture ``--arch`` (``serve`` still takes its old
``--gpu``, with a warning). An arch that no entry of the table names still resolves to
the baseline, as every miss does; the command says so in one line on stderr (and in
the ``arch_note`` field of ``--json``), naming the arches the table knows, since that is
usually a GPU nobody has tuned for yet.

Exit codes: 0 success; 1 when ``check`` finds a problem or ``serve`` reports a rule
violation; 2 for usage errors (bad flags or values, an unreadable or invalid
``--table``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import asdict, fields
from typing import Any

from dsv4_policy import __version__, serve
from dsv4_policy.detect import load_any
from dsv4_policy.launch_table import KernelSpec, provenance_problems
from dsv4_policy.registry import KERNELS
from dsv4_policy.table import Problem, Table, TableError, entry_label
from dsv4_policy.text import aligned


class UsageError(Exception):
    """Bad input from the command line: reported with exit status 2."""


ARCH_HELP = "GPU architecture (SM name), e.g. sm90"


class _DeprecatedAlias(argparse.Action):
    """An old spelling of a flag: stores into the new flag's ``dest`` and warns once."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, replacement: str,
                 **kwargs: Any) -> None:
        self.replacement = replacement
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"{parser.prog}: warning: {option_string} is deprecated; use "
              f"{self.replacement}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def known_arches(table: Table[Any], field: str = "arch") -> tuple[tuple[str, ...], bool]:
    """The arches ``table``'s entries name, sorted, and whether some entry takes any arch."""
    named: set[str] = set()
    anywhere = False
    for e in table.entries:
        cond = e.match.get(field)
        if cond is None:
            anywhere = True
        else:
            named.update(cond)  # type: ignore[arg-type]
    return tuple(sorted(named)), anywhere


def arch_note(arch: str, table: Table[Any], kind: str, outcome: str,
              field: str = "arch") -> str | None:
    """One line when no entry of ``table`` can match ``arch`` (None otherwise).

    Such a key is a plain miss, so the result is still the baseline; the line names
    the arches the table does know, and ``outcome`` says what the miss means here.
    """
    named, anywhere = known_arches(table, field)
    if anywhere or arch in named:
        return None
    knows = ", ".join(named) if named else "none: it has no entries"
    return f"note: the {kind} table has no entry for {arch} (it knows {knows}); {outcome}"


def _note(line: str | None) -> None:
    if line is not None:
        print(line, file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsv4-policy",
        description="Declarative launch tables for DeepSeek-V4: kernel launches ("
                    + ", ".join(KERNELS) + ") and serve envelopes, with an unchanged "
                    "fallback to upstream behaviour.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for spec in KERNELS.values():
        p = sub.add_parser(spec.name, help=f"resolve the {spec.name} launch for one key "
                                           f"({spec.summary})")
        for f in spec.schema.fields:
            default = spec.key_defaults.get(f.name)
            flag = "--" + f.name.replace("_", "-")
            text = spec.key_help.get(f.name, ARCH_HELP if f.type is str
                                     else (f"default: {default}" if default is not None
                                           else None))
            p.add_argument(flag, dest=f.name, type=f.type, required=default is None,
                           default=default, help=text)
        p.add_argument("--table", help=f"a {spec.name} table file instead of the shipped one")
        p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("keys", help="list every compile key a deployment can use",
                       description="List every compile key a deployment can use. Each "
                                   "kernel has its own deployment flags: "
                                   + "; ".join(f"{k.name}: " + ", ".join(
                                       "--" + d.name.replace("_", "-") for d in k.deployment)
                                               for k in KERNELS.values()))
    p.add_argument("--kernel", choices=tuple(KERNELS), default=next(iter(KERNELS)),
                   help=f"which kernel (default: {next(iter(KERNELS))})")
    p.add_argument("--arch", required=True, help=ARCH_HELP)
    seen: set[str] = set()
    for spec in KERNELS.values():
        for d in spec.deployment:
            if d.name not in seen:
                seen.add(d.name)
                p.add_argument("--" + d.name.replace("_", "-"), dest=d.name, type=int,
                               default=None, help=f"{spec.name}: {d.help}")
    p.add_argument("--table", help="a table file of that kernel instead of the shipped one")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser(
        "serve", help="print the launch manifest for a serving shape",
        description="Print the launch manifest for a serving shape. Extra `vllm serve` "
                    "arguments go after `--`. Exits 1 when a rule is violated.",
    )
    p.add_argument("--arch", help=ARCH_HELP.replace("sm90", "sm86") + " (required)")
    p.add_argument("--gpu", dest="arch", action=_DeprecatedAlias, replacement="--arch",
                   help="deprecated spelling of --arch")
    p.add_argument("--tp", type=int, required=True, help="tensor-parallel size")
    p.add_argument("--context", type=int, required=True, help="context length (max model len)")
    p.add_argument("--seqs", type=int, required=True, help="concurrent sequences")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="a user environment variable (repeatable)")
    p.add_argument("--table", help="a serve table file instead of the shipped one")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("check", help="validate table files (any kernel's, or serve; detected)")
    p.add_argument("--kind", choices=(*KERNELS, "serve"),
                   help="read every file as this kind instead of detecting it")
    p.add_argument("files", nargs="+", metavar="FILE")
    return parser


def _kernel_table(spec: KernelSpec, path: str | None) -> Table[object]:
    if path is None:
        return spec.shipped_table()
    try:
        return spec.load_table(path)
    except TableError as exc:
        label = spec.name.upper()
        raise UsageError(f"--table {path}: invalid {label} table:\n{exc}") from None


def _serve_table(path: str | None) -> serve.Table:
    if path is None:
        return serve.shipped_table()
    try:
        return serve.load_table(path)
    except TableError as exc:
        raise UsageError(f"--table {path}: invalid serve table:\n{exc}") from None


def _print_json(data: object) -> None:
    print(json.dumps(data, indent=2))


def _arch_fields(table: Table[Any], note: str | None, field: str = "arch") -> dict[str, object]:
    """``--json``'s view of :func:`arch_note`: the arches the table knows and the note."""
    named, anywhere = known_arches(table, field)
    return {"known_arches": list(named) + (["any"] if anywhere else []), "arch_note": note}


def _cmd_kernel(spec: KernelSpec, args: argparse.Namespace) -> int:
    table = _kernel_table(spec, args.table)
    try:
        key = spec.key_type(**{f.name: getattr(args, f.name) for f in spec.schema.fields})
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    launch = spec.resolve(key, table)
    extra = spec.describe(key)
    note = arch_note(key.arch, table, spec.name, "the launch is the baseline")
    if args.json:
        _print_json({"key": asdict(key), **dict(extra), "launch": asdict(launch),
                     "compile_key": list(launch.compile_key()), **_arch_fields(table, note)})
        return 0
    _note(note)
    rows = [(f"key.{f.name}", getattr(key, f.name)) for f in fields(key)]
    rows += extra
    rows += [(f.name, getattr(launch, f.name)) for f in fields(launch)]
    print(aligned(("field", "value"), rows))
    return 0


def _cmd_keys(args: argparse.Namespace) -> int:
    spec = KERNELS[args.kernel]
    table = _kernel_table(spec, args.table)
    deployment: dict[str, int] = {}
    for d in spec.deployment:
        value = getattr(args, d.name)
        if value is None and d.default is None:
            flag = "--" + d.name.replace("_", "-")
            raise UsageError(f"{spec.name} needs {flag} ({d.help})")
        deployment[d.name] = d.default if value is None else value  # type: ignore[assignment]
    others = sorted(name for k in KERNELS.values() if k is not spec for name in
                    (d.name for d in k.deployment) if getattr(args, name) is not None
                    and name not in deployment)
    if others:
        flags = ", ".join("--" + n.replace("_", "-") for n in others)
        raise UsageError(f"{flags} do(es) not apply to --kernel {spec.name}; it takes "
                         + ", ".join("--" + d.name.replace("_", "-") for d in spec.deployment))
    try:
        found = spec.compile_key_sources(table, args.arch, **deployment)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    ordered = sorted(found.items())
    names = spec.compile_key_fields
    note = arch_note(args.arch, table, spec.name, "only the baseline's compile keys apply")
    if args.json:
        _print_json({"kernel": spec.name, "arch": args.arch, **deployment, "compile_keys": [
            {**dict(zip(names, k, strict=True)), "sources": list(src)} for k, src in ordered],
            **_arch_fields(table, note)})
        return 0
    _note(note)
    rows = []
    for k, src in ordered:
        entries = sum(1 for s in src if s != "baseline")
        parts = (["baseline"] if "baseline" in src else []) + (
            [f"{entries} entr{'y' if entries == 1 else 'ies'}"] if entries else [])
        rows.append((*k, " + ".join(parts)))
    print(aligned((*names, "from"), rows))
    return 0


def _user_env(pairs: Sequence[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name:
            raise UsageError(f"--env {pair!r}: expected NAME=VALUE")
        env[name] = value
    return env


def _cmd_serve(args: argparse.Namespace, extra: Sequence[str]) -> int:
    if args.arch is None:
        raise UsageError("the following arguments are required: --arch")
    table = _serve_table(args.table)
    try:
        key = serve.ServeKey(args.arch, args.tp, args.context, args.seqs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    manifest = serve.plan(key, extra, _user_env(args.env), table)
    note = arch_note(key.gpu, table, "serve", "your arguments pass through unchanged", "gpu")
    if args.json:
        _print_json({"key": asdict(key), **manifest.to_json(),
                     **_arch_fields(table, note, "gpu")})
        return 1 if manifest.violations else 0
    _note(note)
    rate = "-" if manifest.expected_tok_s is None else f"{manifest.expected_tok_s:g} tok/s"
    print(aligned(None, [
        ("source", manifest.source),
        ("expected rate", rate),
        ("command", shlex.join(["vllm", "serve", "MODEL", *manifest.argv])),
    ]))
    print("\nenvironment")
    print(aligned(("name", "value"), sorted(manifest.env.items())) if manifest.env
          else "(none)")
    print("\nviolations")
    print(aligned(("rule", "evidence", "reason"),
                  [(v.rule, v.evidence, v.reason) for v in manifest.violations])
          if manifest.violations else "(none)")
    print("\nnotes")
    print("\n".join(f"- {line}" for line in manifest.notes.splitlines()) or "(none)")
    return 1 if manifest.violations else 0


def _evidence_problems(path: str, kind: str, table: Table[object]) -> list[Problem]:
    """A kernel table's entries must carry their measurements (``probes``, ``worst_speedup``)."""
    if kind not in KERNELS:
        return []
    return [Problem(str(path), message, (entry_label(i, e.id),), name)
            for i, e in enumerate(table.entries, 1)
            for name, message in provenance_problems(e)]


def _cmd_check(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        try:
            kind, table = load_any(path, args.kind)
        except TableError as exc:
            failed += 1
            print(f"FAIL {path}: {len(exc.problems)} problem(s)")
            for problem in exc.problems:
                print(f"  {problem}")
            continue
        problems = _evidence_problems(path, kind, table)
        if problems:
            failed += 1
            print(f"FAIL {path}: {len(problems)} problem(s)")
            for problem in problems:
                print(f"  {problem}")
            continue
        print(f"ok   {path}: {kind} table, {len(table)} entries")
    if failed:
        print(f"{failed} of {len(args.files)} file(s) failed validation")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (argparse exits 2 on bad flags)."""
    try:
        return _main(argv)
    except BrokenPipeError:  # e.g. `dsv4-policy keys ... | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = _parser()
    args = parser.parse_args(argv)
    if extra and args.command != "serve":
        parser.error(f"arguments after -- are only accepted by serve, not {args.command}")
    try:
        if args.command in KERNELS:
            return _cmd_kernel(KERNELS[args.command], args)
        if args.command == "keys":
            return _cmd_keys(args)
        if args.command == "serve":
            return _cmd_serve(args, extra)
        return _cmd_check(args)
    except UsageError as exc:
        print(f"dsv4-policy {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
