"""``nox -s wheelhouse``: every locked wheel an offline runner needs, hash-checked.

Offline GPU runners reach no package index, yet their runs should still be hermetic:
this downloads the lock's own wheels for the chosen targets (plus nox, uv and the build
backend), so that ``DSV4_WHEELHOUSE=DIR nox -s gpu`` installs the same pins with the
same hashes from that folder alone.

``--vllm-sources`` makes the other offline bundle instead: vLLM's Python sources from
the locked wheel plus the import-time wheels a GPU runner lacks, for
``DSV4_VLLM_SOURCES=DIR nox --no-venv -s gpu`` where the locked vLLM cannot be
installed (``vllm_sources.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import cache_cli
import units as build_units
import vllm_sources
from environments import WORKSPACE
from lockfile import Lock, LockError
from targets import Graph

SOURCES_FLAG = "--vllm-sources"


def download(session, graph: Graph) -> None:
    """Parse the session's arguments and fill the wheelhouse.

    >>> download(session, graph)   # nox -s wheelhouse -- --python 3.12 \\
    ...                            #   --platform manylinux_2_28_x86_64 --out /tmp/wh
    nox > wheelhouse /tmp/wh: 131 pinned distributions for kernels-gpu, vllm-gpu, …
    >>> download(session, graph)   # nox -s wheelhouse -- --vllm-sources --python 3.12 \\
    ...                            #   --platform manylinux_2_31_x86_64 --out .vllm-sources
    nox > vllm sources .vllm-sources: vllm 0.33.0 (python sources, no compiled extensions), …
    """
    posargs = list(session.posargs)
    sources = SOURCES_FLAG in posargs
    if sources:
        posargs.remove(SOURCES_FLAG)
    try:
        args = cache_cli.parse_wheelhouse_args(
            posargs,
            default_targets=[t.name for t in graph.targets.values() if build_units.needs_gpu(t)],
            known=list(graph.targets),
        )
    except cache_cli.UsageError as exc:
        session.error(str(exc))
    if sources:
        try:
            vllm_sources.download(session, Lock.load(graph.root / "uv.lock"), python=args.python,
                                  platforms=args.platform, out=Path(args.out).resolve())
        except (vllm_sources.SourcesError, LockError) as exc:
            session.error(str(exc))
        return
    _locked_wheels(session, graph, args)


def _locked_wheels(session, graph: Graph, args) -> None:
    """The wheelhouse proper: every locked wheel of the chosen targets' slices."""
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    slices = [(WORKSPACE, ("backend", "nox"))]
    slices += [(graph.targets[n].package.dist, graph.targets[n].groups) for n in args.targets]
    requirements = out / "requirements.txt"
    lines: dict[str, str] = {}
    for package, groups in slices:
        part = Path(session.create_tmp()) / "part.txt"
        session.run(
            "uv", "export", "--locked", "--no-emit-workspace", "--no-default-groups", "--quiet",
            *(["--package", package] if package != WORKSPACE else []),
            *(a for g in groups for a in ("--group", g)), "-o", str(part), external=True,
        )
        lines.update(cache_cli.requirement_blocks(part.read_text()))
    requirements.write_text("".join(lines[name] for name in sorted(lines)))
    session.run(
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
        "--only-binary=:all:", "--python-version", args.python, "--implementation", "cp",
        *(a for p in args.platform for a in ("--platform", p)),
        "-d", str(out), "-r", str(requirements), external=True,
    )
    session.log(
        f"wheelhouse {out}: {len(lines)} pinned distributions for {', '.join(args.targets)} "
        f"(Python {args.python}, {', '.join(args.platform)}); use DSV4_WHEELHOUSE={out}"
    )
