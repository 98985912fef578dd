"""``nox -s cache -- explain TARGET | stats | clean`` and the cache's one-line messages.

``explain`` exists because a cache that misses for no visible reason is not trusted:
it lists each component of the target's key with its digest and says which ones
changed since the target's last stored pass, down to the files.
"""

from __future__ import annotations

import argparse
import json
import stat
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import cache_key
import gpu_fingerprint
import units as build_units
from result_cache import Hit, LocalStore, ResultCache
from targets import Graph


class UsageError(ValueError):
    """Bad arguments to the cache or wheelhouse session.

    Raised instead of argparse's exit, so that the noxfile turns it into one
    ``session.error`` line rather than nox seeing a ``SystemExit``.

    Example::

        >>> main(["bogus"], cache=cache)
        UsageError: nox -s cache --: argument command: invalid choice: 'bogus'
        (choose from 'explain', 'stats', 'clean')
    """


def hit_line(name: str, hit: Hit) -> str:
    """``policy: cached PASSED (key 1a2b3c4d, local, ran 118.2 s on 2026-12-01)``.

    The line a session logs instead of running: it says the result is a replay, which
    key and store it came from, and how long the original run took, so that a cached
    pass is never mistaken for a fresh one.

    Example::

        >>> hit_line("policy", Hit(record, "local"))
        'policy: cached PASSED (key 1a2b3c4d, local, ran 118.2 s on 2026-12-01)'
    """
    record = hit.record
    return (
        f"{name}: cached PASSED (key {record.key[:8]}, {hit.origin}, "
        f"ran {record.duration_s:.1f} s on {record.date[:10]})"
    )


def _file_changes(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    both = sorted(before.keys() & after.keys())
    changes = [f"{p} modified" for p in both if before[p] != after[p]]
    changes += [f"{p} added" for p in sorted(after.keys() - before.keys())]
    changes += [f"{p} removed" for p in sorted(before.keys() - after.keys())]
    return changes


@dataclass(frozen=True)
class Comparison:
    """How a key's components compare with the target's last stored pass.

    Kept apart from its printing so that ``explain`` (a table, or ``--json``) and the
    one-phrase miss reason share one comparison.

    Example::

        >>> compare(store, key)
        Comparison(status={'declaration': 'same', 'build': 'same',
                           'sources:dsv4-policy': 'changed', 'environment': 'same', …},
                   files=['packages/policy/src/dsv4_policy/__init__.py modified'], removed=[])
    """

    status: dict[str, str]  # component -> "same" | "changed" | "new" | "no stored pass"
    files: list[str]  # file-level changes inside changed file components
    removed: list[str]  # components the stored pass had and this key lacks


def compare(local: LocalStore, key: cache_key.Key) -> Comparison:
    """Compare ``key`` with the latest stored pass of its target in ``local``.

    The stored record keeps its component and file digests for exactly this: a miss
    can then be explained down to the files, not only as "the key changed". With no
    stored pass every component reads ``"no stored pass"``.

    Example::

        >>> compare(LocalStore(empty_dir), key).status["build"]
        'no stored pass'
        >>> compare(store, key).files
        ['packages/policy/src/dsv4_policy/__init__.py modified']
    """
    latest = local.latest(key.target)
    if latest is None:
        return Comparison({c.name: "no stored pass" for c in key.components}, [], [])
    status = {}
    for c in key.components:
        old = latest.components.get(c.name)
        status[c.name] = "new" if old is None else ("same" if old == c.digest else "changed")
    removed = sorted(set(latest.components) - {c.name for c in key.components})
    return Comparison(status, _file_changes(latest.files, key.files()), removed)


def changes_since_latest(local: LocalStore, key: cache_key.Key) -> str:
    """One phrase for a miss: which components changed, and the first files.

    Logged beside every run that the cache could not serve, so that an unexpected
    miss shows its cause without a separate ``explain``. At most five files are named.

    Example::

        >>> changes_since_latest(store, key)
        'changed: sources:dsv4-policy (packages/policy/src/dsv4_policy/__init__.py modified)'
        >>> changes_since_latest(LocalStore(empty_dir), key)
        'no stored pass of this target in the local cache'
    """
    result = compare(local, key)
    if all(v == "no stored pass" for v in result.status.values()):
        return "no stored pass of this target in the local cache"
    changed = [n for n, s in result.status.items() if s != "same"] + result.removed
    if not changed:
        return "the latest stored pass has the same components but was not served"
    files = "; ".join(result.files[:5]) + (" …" if len(result.files) > 5 else "")
    return f"changed: {', '.join(changed)}" + (f" ({files})" if files else "")


# --------------------------------------------------------------------------- commands
def _explain(args: argparse.Namespace, *, graph: Graph, units: Mapping[str, build_units.Unit],
             cache: ResultCache, key_inputs: Callable, gpu_identity: Callable) -> int:
    if args.target not in units:
        raise UsageError(
            f"explain: unknown target {args.target!r}; known: {', '.join(sorted(units))}"
        )
    unit = units[args.target]
    gpu = None
    if unit.gpu_in_key:
        gpu = gpu_identity()
        if "error" in gpu and unit.needs_gpu:
            raise UsageError(
                f"explain {unit.name}: the key needs a GPU fingerprint: {gpu['error']}"
            )
        if "error" in gpu:
            gpu = dict(gpu_fingerprint.NO_GPU)
    key = build_units.key_for(graph, unit, args.args, key_inputs(not args.no_venv, gpu))
    result = compare(cache.local, key)
    stored = cache.local.record(key.digest)
    data = {
        "target": unit.name,
        "key": key.digest,
        "hermetic": not args.no_venv,
        "stored_locally": stored is not None,
        "components": [
            {"name": c.name, "digest": c.digest, "since_last_pass": result.status[c.name],
             "detail": c.detail}
            for c in key.components
        ],
        "changed_files": result.files,
        "removed_components": result.removed,
    }
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
        return 0
    print(f"{unit.name}: key {key.digest} ({'hermetic' if not args.no_venv else 'non-hermetic'})")
    print(f"  {'component':<28}{'digest':<14}{'since last pass':<17}detail")
    for c in data["components"]:
        detail = c["detail"] if isinstance(c["detail"], str) else json.dumps(c["detail"])
        detail = detail if len(detail) <= 70 else detail[:67] + "..."
        print(f"  {c['name']:<28}{c['digest'][:12]:<14}{c['since_last_pass']:<17}{detail}")
    for line in result.files[:20]:
        print(f"    {line}")
    if len(result.files) > 20:
        print(f"    … and {len(result.files) - 20} more files")
    for name in result.removed:
        print(f"  {name:<28}{'':<14}removed")
    print(f"  local cache: {'hit' if stored else 'miss'} ({cache.local.root})")
    return 0


def _stats(args: argparse.Namespace, *, cache: ResultCache, **_: object) -> int:
    root = cache.local.root
    def entries(folder: Path) -> list[Path]:
        # lstat, and no leftover temporary files: a dangling link or a half-written
        # entry is not a record, and must not crash the listing.
        if not folder.is_dir() or folder.is_symlink():
            return []
        return sorted(p for p in folder.iterdir()
                      if not p.name.startswith(".tmp-") and stat.S_ISREG(p.lstat().st_mode))

    records, blobs = entries(root / "ac"), entries(root / "cas")
    size = sum(p.lstat().st_size for p in [*records, *blobs])
    events = cache.local.events()
    kinds = Counter(
        (e.get("kind"), e.get("origin")) if e.get("kind") == "hit" else (e.get("kind"), None)
        for e in events
    )
    latest = {}
    targets_dir = root / "targets"
    for path in sorted(targets_dir.glob("*")) if targets_dir.is_dir() else []:
        record = cache.local.latest(path.name)
        if record is not None:
            latest[path.name] = {"key": record.key[:8], "date": record.date,
                                 "duration_s": record.duration_s}
    data = {
        "directory": str(root),
        "mode": cache.mode,
        "remote": cache.remote.shown if cache.remote else None,
        "remote_uploads": bool(cache.remote and cache.remote.upload),
        "records": len(records),
        "blobs": len(blobs),
        "bytes": size,
        "hits_local": kinds[("hit", "local")],
        "hits_remote": kinds[("hit", "remote")],
        "runs": kinds[("run", None)],
        "seconds_saved": round(sum(float(e.get("saved_s", 0)) for e in events), 1),
        "latest": latest,
    }
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
        return 0
    print(f"result cache {root} (mode {cache.mode}; remote: {data['remote'] or 'none'}"
          + (", uploads on" if data["remote_uploads"] else "") + ")")
    print(f"  {data['records']} records, {data['blobs']} blobs, {size / 1e6:.1f} MB")
    print(f"  {data['hits_local']} local hits, {data['hits_remote']} remote hits, "
          f"{data['runs']} runs; {data['seconds_saved']} s of runs replayed")
    for name, info in latest.items():
        print(f"  {name:<24} key {info['key']}  ran {info['duration_s']:.1f} s on "
              f"{info['date'][:10]}")
    return 0


def _clean(args: argparse.Namespace, *, cache: ResultCache, **_: object) -> int:
    files, size = cache.local.clean()
    if args.json:
        print(json.dumps({"directory": str(cache.local.root), "files": files, "bytes": size}))
    else:
        print(f"removed {files} files ({size / 1e6:.1f} MB) from {cache.local.root}")
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # raise, so nox reports it as a session error
        raise UsageError(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nox -s cache --", description="Inspect the result cache.")
    sub = parser.add_subparsers(dest="command", required=True)
    explain = sub.add_parser("explain", help="each component of a target's key, and what changed")
    explain.add_argument("target")
    explain.add_argument("args", nargs="*", help="the extra arguments the run would get")
    explain.add_argument("--no-venv", action="store_true",
                         help="the key of a --no-venv (non-hermetic) run")
    explain.add_argument("--json", action="store_true")
    for name, text in (("stats", "records, size, hits and runs"), ("clean", "remove everything")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--json", action="store_true")
    return parser


def main(argv: list[str], **context: object) -> int:
    """Run ``nox -s cache -- explain TARGET | stats | clean`` with ``argv``.

    ``context`` is what the commands need from the noxfile (``graph``, ``units``,
    ``cache``, ``key_inputs``, ``gpu_identity``), passed in so that this module reads
    no global state and can be driven from tests. Returns the exit status; bad
    arguments raise :class:`UsageError`.

    Example::

        >>> main(["stats"], cache=cache, graph=graph, units=units)
        result cache /home/me/.cache/dsv4 (mode on; remote: none)
          0 records, 0 blobs, 0.0 MB
          0 local hits, 0 remote hits, 0 runs; 0 s of runs replayed
        0
    """
    args = _parser().parse_args(argv)
    command = {"explain": _explain, "stats": _stats, "clean": _clean}[args.command]
    return command(args, **context)


# --------------------------------------------------------------------------- wheelhouse
def parse_wheelhouse_args(argv: list[str], *, default_targets: list[str], known: list[str]):
    """Parse ``nox -s wheelhouse -- …``: Python version, platforms, output folder, targets.

    It lives here, beside the cache's parser, to share :class:`UsageError` handling;
    ``--targets`` is split on commas and checked against ``known``.

    Example::

        >>> parse_wheelhouse_args(
        ...     ["--python", "3.12", "--platform", "manylinux_2_28_x86_64", "--out", "wh"],
        ...     default_targets=["kernels-gpu", "vllm-gpu"], known=sorted(units))
        Namespace(python='3.12', platform=['manylinux_2_28_x86_64'], out='wh',
                  targets=['kernels-gpu', 'vllm-gpu'])
    """
    parser = _Parser(prog="nox -s wheelhouse --",
                     description="Download the locked wheels that targets need, for offline use.")
    parser.add_argument("--python", required=True, help="e.g. 3.12")
    parser.add_argument("--platform", action="append", required=True,
                        help="e.g. manylinux_2_28_x86_64 (repeat for several)")
    parser.add_argument("--out", required=True, help="the wheelhouse folder")
    parser.add_argument("--targets", default=",".join(default_targets),
                        help="comma-separated targets (default: every GPU target)")
    args = parser.parse_args(argv)
    args.targets = [t for t in args.targets.split(",") if t]
    unknown = sorted(set(args.targets) - set(known))
    if unknown or not args.targets:
        raise UsageError(f"--targets: unknown {unknown or 'none given'}; known: {', '.join(known)}")
    return args


def requirement_blocks(text: str) -> dict[str, str]:
    """Split ``uv export`` output into one block per requirement (line plus hashes),
    keyed by its requirement line, so that several exports merge without repeats.

    Comments and blank lines are dropped, as are continuation lines other than
    ``--hash`` (such as ``# via`` notes).

    Example::

        >>> text = Path("gpu.txt").read_text()  # from uv export
        >>> list(requirement_blocks(text))
        ['filelock==3.16.1', "numpy==2.1.0 ; python_version >= '3.10'"]
        >>> requirement_blocks(text)["numpy==2.1.0 ; python_version >= '3.10'"].count("--hash")
        2
    """
    blocks: dict[str, str] = {}
    current: list[str] = []

    def flush() -> None:
        if current:
            blocks[current[0].rstrip(" \\")] = "\n".join(current) + "\n"
            current.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if line[0].isspace():
            if current and stripped.startswith("--hash"):
                current.append(line)
            continue
        flush()
        current.append(line)
    flush()
    return blocks

