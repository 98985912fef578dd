"""``dsv4-policy``: resolve launches, list compile keys, plan serve launches, check tables.

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

from dsv4_policy import __version__, c128a, serve
from dsv4_policy.detect import load_any
from dsv4_policy.table import TableError
from dsv4_policy.text import aligned


class UsageError(Exception):
    """Bad input from the command line: reported with exit status 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsv4-policy",
        description="Declarative launch tables for DeepSeek-V4: C128A launches and serve "
                    "envelopes, with an unchanged fallback to upstream behaviour.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("c128a", help="resolve the C128A launch for one key")
    p.add_argument("--arch", required=True, help="SM architecture, e.g. sm90")
    p.add_argument("--compress-ratio", type=int, default=128, help="default: 128")
    p.add_argument("--max-model-len", type=int, required=True)
    p.add_argument("--max-seq-len", type=int, required=True,
                   help="longest sequence in the batch, in tokens")
    p.add_argument("--num-decode-tokens", type=int, default=1, help="default: 1")
    p.add_argument("--num-prefill-tokens", type=int, default=0, help="default: 0")
    p.add_argument("--block-size", type=int, default=2,
                   help="KV block size in compressed units (default: 2)")
    p.add_argument("--table", help="a C128A table file instead of the shipped one")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("keys", help="list every compile key a deployment can use")
    p.add_argument("--arch", required=True, help="SM architecture, e.g. sm90")
    p.add_argument("--max-model-len", type=int, required=True)
    p.add_argument("--table", help="a C128A table file instead of the shipped one")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser(
        "serve", help="print the launch manifest for a serving shape",
        description="Print the launch manifest for a serving shape. Extra `vllm serve` "
                    "arguments go after `--`. Exits 1 when a rule is violated.",
    )
    p.add_argument("--gpu", required=True, help="SM architecture, e.g. sm86")
    p.add_argument("--tp", type=int, required=True, help="tensor-parallel size")
    p.add_argument("--context", type=int, required=True, help="context length (max model len)")
    p.add_argument("--seqs", type=int, required=True, help="concurrent sequences")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="a user environment variable (repeatable)")
    p.add_argument("--table", help="a serve table file instead of the shipped one")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("check", help="validate table files (C128A or serve, detected)")
    p.add_argument("files", nargs="+", metavar="FILE")
    return parser


def _c128a_table(path: str | None) -> c128a.Table | None:
    if path is None:
        return None
    try:
        return c128a.load_table(path)
    except TableError as exc:
        raise UsageError(f"--table {path}: invalid C128A table:\n{exc}") from None


def _serve_table(path: str | None) -> serve.Table | None:
    if path is None:
        return None
    try:
        return serve.load_table(path)
    except TableError as exc:
        raise UsageError(f"--table {path}: invalid serve table:\n{exc}") from None


def _print_json(data: object) -> None:
    print(json.dumps(data, indent=2))


def _cmd_c128a(args: argparse.Namespace) -> int:
    table = _c128a_table(args.table)
    try:
        key = c128a.Key(args.arch, args.compress_ratio, args.max_model_len, args.max_seq_len,
                        args.num_decode_tokens, args.num_prefill_tokens, args.block_size)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    launch = c128a.resolve(key, table)
    cap = c128a.capacity(key.max_model_len, key.compress_ratio)
    if args.json:
        _print_json({"key": asdict(key), "capacity": cap, "launch": asdict(launch),
                     "compile_key": list(launch.compile_key())})
        return 0
    rows = [(f"key.{f.name}", getattr(key, f.name)) for f in fields(key)]
    rows.append(("capacity", cap))
    rows += [(f.name, getattr(launch, f.name)) for f in fields(launch)]
    print(aligned(("field", "value"), rows))
    return 0


def _cmd_keys(args: argparse.Namespace) -> int:
    table = _c128a_table(args.table)
    try:
        found = c128a.compile_key_sources(table, args.arch, args.max_model_len)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    ordered = sorted(found.items())
    if args.json:
        _print_json({"arch": args.arch, "max_model_len": args.max_model_len, "compile_keys": [
            {"tokens_per_program": k[0], "cols_per_program": k[1], "num_warps": k[2],
             "sources": list(src)} for k, src in ordered]})
        return 0
    rows = []
    for k, src in ordered:
        entries = sum(1 for s in src if s != "baseline")
        parts = (["baseline"] if "baseline" in src else []) + (
            [f"{entries} entr{'y' if entries == 1 else 'ies'}"] if entries else [])
        rows.append((*k, " + ".join(parts)))
    print(aligned(("tokens_per_program", "cols_per_program", "num_warps", "from"), rows))
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
    table = _serve_table(args.table)
    try:
        key = serve.ServeKey(args.gpu, args.tp, args.context, args.seqs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    manifest = serve.plan(key, extra, _user_env(args.env), table)
    if args.json:
        _print_json({"key": asdict(key), **manifest.to_json()})
        return 1 if manifest.violations else 0
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


def _cmd_check(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        try:
            kind, table = load_any(path)
        except TableError as exc:
            failed += 1
            print(f"FAIL {path}: {len(exc.problems)} problem(s)")
            for problem in exc.problems:
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
        if args.command == "c128a":
            return _cmd_c128a(args)
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
