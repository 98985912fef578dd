"""Sessions for the dsv4 monorepo, generated from the targets each package declares.

This file reads like a BUILD file: options, then session declarations. Nothing here
names a package or a test path: every ``packages/*/pyproject.toml`` declares
``[[tool.dsv4.targets]]`` and ``tools/targets.py`` validates them. Each target becomes
a session of its own name; the aggregate sessions ``gpu``, ``bench``, ``tune`` and
``report`` run every target of that tag or kind.

The engine lives in ``tools/``, one module per job:

- ``executor.py`` runs each unit through the result cache and its execution root;
- ``cache_key.py`` / ``units.py`` say what a unit's result depends on;
- ``result_cache.py`` / ``remote_cache.py`` / ``safe_fs.py`` store and replay passes,
  trusting nothing a cache record says;
- ``sandbox.py`` makes the execution root: exactly the files the key hashed;
- ``environments.py`` brings each unit's own venv to its lock slice (or a wheelhouse);
- ``hermetic.py`` gives every run an allowlisted environment;
- ``gpu_checks.py``, ``repo_checks.py``, ``wheelhouse.py``, ``affected.py``,
  ``cache_cli.py``: the GPU checks, the repository checks and the helper sessions.

Offline runners that already hold torch and triton may run ``nox --no-venv -s gpu``:
no environment is built, and the run is keyed as non-hermetic with every installed
version that differs from the lock printed and keyed; ``--no-install``/``-R`` runs are
keyed as non-hermetic too, with what each reused venv holds.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))

import affected as affected_sessions  # noqa: E402
import cache_cli  # noqa: E402
import cache_key  # noqa: E402
import gpu_fingerprint  # noqa: E402
import repo_checks  # noqa: E402
import targets as target_graph  # noqa: E402
import units as build_units  # noqa: E402
import wheelhouse as wheels  # noqa: E402
from executor import Executor  # noqa: E402
from lockfile import Lock, LockError  # noqa: E402
from result_cache import CacheError  # noqa: E402

try:
    GRAPH = target_graph.load(ROOT)
except target_graph.TargetError as exc:  # a broken declaration must fail `nox -l` legibly
    sys.stderr.write(f"error: invalid target declaration: {exc}\n")
    raise SystemExit(2) from None

nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True
# Venvs are kept between runs; each target's own venv is brought to its lock slice by an
# exact `uv sync` before it runs, so a kept venv never drifts from the lock.
nox.options.reuse_venv = "yes"

ARTIFACTS = Path(os.environ.get("DSV4_ARTIFACTS_DIR", ROOT / "artifacts")).resolve()
EXECUTOR = Executor(root=ROOT, graph=GRAPH, artifacts=ARTIFACTS)
CPU_TARGETS = [
    t for t in GRAPH.targets.values() if not build_units.needs_gpu(t) and t.kind == "test"
]


def _select(session: nox.Session, pool: list[target_graph.Target]) -> tuple[list, list[str]]:
    """``-- --targets a,b`` narrows an aggregate session; the rest of posargs go to pytest."""
    args = list(session.posargs)
    chosen = pool
    if "--targets" in args:
        i = args.index("--targets")
        if i + 1 >= len(args):
            session.error(f"--targets needs a comma-separated list of {[t.name for t in pool]}")
        names = args[i + 1].split(",")
        del args[i : i + 2]
        unknown = sorted(set(names) - {t.name for t in pool})
        if unknown:
            session.error(
                f"--targets: unknown {unknown}; this session runs {[t.name for t in pool]}"
            )
        chosen = [t for t in pool if t.name in names]
    if not chosen:
        session.error(f"session {session.name} has no targets to run")
    return chosen, args


def _aggregate(session: nox.Session, pool: list[target_graph.Target], *, needs_gpu: bool) -> None:
    chosen, extra = _select(session, pool)
    EXECUTOR.run_targets(session, chosen, extra, needs_gpu=needs_gpu)


# --------------------------------------------------------------------------- target sessions
def _make_target_session(target: target_graph.Target) -> None:
    def session_fn(session: nox.Session) -> None:
        EXECUTOR.run_targets(session, [target], list(session.posargs),
                             needs_gpu=build_units.needs_gpu(target))

    session_fn.__doc__ = (
        f"{target.kind} target of {target.package.dist} (tags: {', '.join(sorted(target.tags))})"
    )
    nox.session(name=target.name)(session_fn)


for _target in GRAPH.targets.values():
    _make_target_session(_target)


# --------------------------------------------------------------------------- aggregates
@nox.session
def gpu(session: nox.Session) -> None:
    """Every gpu-tagged test target of every package; fails when no CUDA device is visible."""
    _aggregate(session, [t for t in GRAPH.tagged("gpu") if t.kind == "test"], needs_gpu=True)


@nox.session
def bench(session: nox.Session) -> None:
    """pytest-benchmark GPU regression gates (every bench target)."""
    _aggregate(session, GRAPH.of_kind("bench"), needs_gpu=True)


@nox.session
def tune(session: nox.Session) -> None:
    """Sweep launch tiles on this GPU and update the policy's launch tables."""
    _aggregate(session, GRAPH.of_kind("tune"), needs_gpu=True)


@nox.session
def report(session: nox.Session) -> None:
    """The main job: benchmark report on a GPU, interpreter check and tables without one."""
    _aggregate(session, GRAPH.of_kind("report"), needs_gpu=False)


# --------------------------------------------------------------------------- repo sessions
@nox.session
def meta(session: nox.Session) -> None:
    """Tests of the target graph, the result cache, the session environment and layering."""
    repo_checks.meta(session, EXECUTOR)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, the lock's freshness, the layering contracts and the CI pipelines' schemas."""
    repo_checks.lint(session, EXECUTOR)


@nox.session
def build(session: nox.Session) -> None:
    """Wheel and sdist of each package; each wheel installed alone into an empty venv."""
    repo_checks.build(session, EXECUTOR)


# --------------------------------------------------------------------------- helpers
@nox.session(venv_backend="none")
def cache(session: nox.Session) -> None:
    """The result cache: ``explain TARGET [--no-venv]``, ``stats``, ``clean``; ``--json``."""
    try:
        code = cache_cli.main(
            list(session.posargs), graph=GRAPH, units=EXECUTOR.units,
            cache=EXECUTOR.cache(session),
            key_inputs=lambda hermetic, gpu: cache_key.KeyInputs(
                root=ROOT, tree=cache_key.SourceTree(ROOT), lock=Lock.load(ROOT / "uv.lock"),
                outer_env=os.environ, hermetic=hermetic, gpu=gpu, artifacts=ARTIFACTS,
                note="" if hermetic else "--no-venv",  # as the run itself keys it
                sources=None if hermetic else EXECUTOR.sources(session),
            ),
            gpu_identity=gpu_fingerprint.smi,
        )
    except (cache_cli.UsageError, CacheError, LockError) as exc:
        session.error(str(exc))
    if code:
        session.error(f"cache {' '.join(session.posargs)} failed")


@nox.session(venv_backend="none")
def wheelhouse(session: nox.Session) -> None:
    """Download, hash-checked, every locked wheel the GPU targets need, for offline runners:
    ``-- --python 3.12 --platform manylinux_2_28_x86_64 --out DIR [--targets a,b]``."""
    wheels.download(session, GRAPH)


@nox.session(venv_backend="none")
def affected(session: nox.Session) -> None:
    """Sessions whose targets, or whose reverse deps, changed since a git base ref:
    ``-- origin/main [--run] [--cpu-only|--gpu-only] [--no-venv]``."""
    affected_sessions.main(session, GRAPH, ROOT)


# A bare `nox`: every CPU session, and the main job, which runs its CPU path without a GPU.
nox.options.sessions = [*(t.name for t in CPU_TARGETS), "meta", "lint", "build", "report"]
