"""Sessions for the dsv4 monorepo, generated from the targets each package declares.

Nothing here names a package or a test path: every ``packages/*/pyproject.toml``
declares ``[[tool.dsv4.targets]]`` and ``tools/targets.py`` validates them. Each
target becomes a session of its own name; the aggregate sessions ``gpu``, ``bench``,
``tune`` and ``report`` run every target of that tag or kind.

Environments come from the one lock file (``uv.lock``, installed with
``uv sync --locked``, which fails when the lock is stale). Tests run with an
allowlisted environment: only the variables named below or by the target get in,
and HOME, TMPDIR and TRITON_CACHE_DIR point into the session's own directory.

Offline runners that already hold torch and triton run ``nox --no-venv -s gpu``:
no environment is built, the workspace sources are put on PYTHONPATH, and the same
environment rules apply.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))

import targets as target_graph  # noqa: E402
from hermetic import hermetic_env  # noqa: E402

try:
    GRAPH = target_graph.load(ROOT)
except target_graph.TargetError as exc:  # a broken declaration must fail `nox -l` legibly
    sys.stderr.write(f"error: invalid target declaration: {exc}\n")
    raise SystemExit(2) from None

nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True

ARTIFACTS = Path(os.environ.get("DSV4_ARTIFACTS_DIR", ROOT / "artifacts")).resolve()
PLUGIN_DIR = ROOT / "tools" / "pytest_plugins"
CPU_TARGETS = [t for t in GRAPH.targets.values() if "gpu" not in t.tags and t.kind == "test"]
GPU_KINDS = ("bench", "tune")


# --------------------------------------------------------------------------- helpers
def _offline(session: nox.Session) -> bool:
    """True under ``--no-venv``: use the interpreter as found, install nothing."""
    return session.venv_backend == "none"


def _python(session: nox.Session) -> str:
    return sys.executable if _offline(session) else str(Path(session.bin) / "python")


def _install(session: nox.Session, target: target_graph.Target, *, exact: bool) -> None:
    """Sync the session's venv from the lock: the target's package and its groups."""
    if _offline(session):
        return
    args = ["uv", "sync", "--locked", "--no-default-groups", "--package", target.package.dist]
    for group in target.groups:
        args += ["--group", group]
    if not exact:
        args.append("--inexact")
    session.run_install(
        *args,
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
        external=True,
        silent=True,
    )


def _needs_gpu(target: target_graph.Target) -> bool:
    """The session fails without a CUDA device: gpu-tagged tests, benches and tuning."""
    return "gpu" in target.tags or target.kind in GPU_KINDS


def _gpu_env(target: target_graph.Target) -> bool:
    """The CUDA driver variables get in: every GPU target, and the report, which times
    on a GPU when one is visible and falls back to the interpreter when not."""
    return _needs_gpu(target) or target.kind == "report"


def _source_path(target: target_graph.Target) -> list[str]:
    """PYTHONPATH for offline runs: the target's package and its intra-repo deps."""
    return [str(GRAPH.packages[d].folder / "src") for d in GRAPH.target_packages(target)]


def _run_target(session: nox.Session, target: target_graph.Target, extra: list[str]) -> None:
    offline = _offline(session)
    session_dir = Path(session.create_tmp()).parent if not offline else ARTIFACTS / session.name
    env = hermetic_env(
        outer=os.environ,
        session_dir=session_dir / target.name,
        bin_dir=str(Path(_python(session)).parent),
        allow=target.env,
        set_env=target.set_env,
        gpu=_gpu_env(target),
        python_path=[str(PLUGIN_DIR), *(_source_path(target) if offline else [])],
    )
    env["DSV4_ARTIFACTS_DIR"] = str(ARTIFACTS)  # where results go: the session's, not a leak
    timeout = ["timeout", "--kill-after=30", str(int(target.timeout))]
    if target.pytest:
        junit = ARTIFACTS / "junit" / f"{target.name}.xml"
        junit.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            _python(session), "-m", "pytest", *target.pytest,
            "-p", "dsv4_hermetic", "-p", "no:cacheprovider",
            f"--junitxml={junit}", f"--basetemp={env['TMPDIR']}/pytest", *extra,
        ]
    else:
        head, *rest = target.command
        cmd = [_python(session) if head == "python" else head, *rest, *extra]
    with session.chdir(target.package.folder):
        session.run(*timeout, *cmd, env=env, include_outer_env=False, external=True)


def _cuda_fingerprint(session: nox.Session) -> dict:
    """Fail the session unless a CUDA device is visible; return the GPU fingerprint."""
    if not _offline(session):
        smi = shutil.which("nvidia-smi")
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True) if smi else None
        if listing is None or listing.returncode != 0 or "GPU" not in listing.stdout:
            session.error(
                "no CUDA device visible: nvidia-smi found no GPU on this machine. "
                "The gpu and bench sessions need an NVIDIA GPU; on a CPU machine run "
                "`nox` (the CPU sessions) instead"
            )
    probe = ROOT / "tools" / "gpu_fingerprint.py"
    env = hermetic_env(
        outer=os.environ,
        session_dir=ARTIFACTS / session.name / "probe",
        bin_dir=str(Path(_python(session)).parent),
        allow=(),
        set_env={},
        gpu=True,
        python_path=[],
    )
    out = session.run(
        _python(session), str(probe), env=env, include_outer_env=False,
        external=True, silent=True, success_codes=[0, 3],
    )
    data = json.loads(str(out).strip().splitlines()[-1])
    if "error" in data:
        session.error(f"no CUDA device visible: {data['error']}")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{session.name}-fingerprint.json").write_text(json.dumps(data, indent=2) + "\n")
    session.log(f"GPU fingerprint: {json.dumps(data)}")
    return data


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


def _gpu_pytest_args(fingerprint: dict, target: target_graph.Target) -> list[str]:
    """One pytest-xdist worker per visible GPU; each worker pins its own device.

    Benchmarks stay in one process: pytest-benchmark turns itself off under xdist, and
    timings taken while another GPU test runs on the host would not be worth keeping."""
    count = int(fingerprint.get("device_count", 1))
    if count > 1 and target.pytest and target.kind == "test":
        return ["-n", str(count), "--dist", "load"]
    return []


def _aggregate(session: nox.Session, pool: list[target_graph.Target], *, needs_gpu: bool) -> None:
    chosen, extra = _select(session, pool)
    fingerprint = _cuda_fingerprint(session) if needs_gpu else {}
    for i, target in enumerate(chosen):
        _install(session, target, exact=i == 0)
    for target in chosen:
        session.log(f"target {target.name} ({target.package.dist}, {target.kind})")
        _run_target(session, target, [*_gpu_pytest_args(fingerprint, target), *extra])


# --------------------------------------------------------------------------- target sessions
def _make_target_session(target: target_graph.Target) -> None:
    needs_gpu = _needs_gpu(target)

    def session_fn(session: nox.Session) -> None:
        fingerprint = _cuda_fingerprint(session) if needs_gpu else {}
        _install(session, target, exact=True)
        _run_target(session, target, [*_gpu_pytest_args(fingerprint, target), *session.posargs])

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
    """Sweep launch tiles on this GPU and update the policy's launch table."""
    _aggregate(session, GRAPH.of_kind("tune"), needs_gpu=True)


@nox.session
def report(session: nox.Session) -> None:
    """The main job: benchmark report on a GPU, interpreter check and tables without one."""
    _aggregate(session, GRAPH.of_kind("report"), needs_gpu=False)


# --------------------------------------------------------------------------- repo sessions
@nox.session
def meta(session: nox.Session) -> None:
    """Tests of the target graph, the session environment and the layering rules."""
    if not _offline(session):
        session.run_install(
            "uv", "sync", "--locked", "--no-default-groups", "--package", "dsv4-policy",
            "--group", "test",
            env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
            external=True, silent=True,
        )
    env = hermetic_env(
        outer=os.environ,
        session_dir=Path(session.create_tmp()).parent / "meta",
        bin_dir=str(Path(_python(session)).parent),
        allow=(),
        set_env={},
        gpu=False,
        python_path=[str(ROOT / "tools"), str(PLUGIN_DIR)],
    )
    with session.chdir(ROOT):
        session.run(
            _python(session), "-m", "pytest", "tools/tests", "-p", "dsv4_hermetic",
            "-p", "no:cacheprovider", f"--basetemp={env['TMPDIR']}/pytest", *session.posargs,
            env=env, include_outer_env=False, external=True,
        )


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, the lock's freshness, and the one-way layering contracts (import-linter)."""
    if not _offline(session):
        session.run_install(
            "uv", "sync", "--locked", "--only-group", "lint",
            env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
            external=True, silent=True,
        )
    session.run("uv", "lock", "--check", external=True)
    session.run("ruff", "check", str(ROOT))
    env = {"PYTHONPATH": os.pathsep.join(str(p.folder / "src") for p in GRAPH.packages.values())}
    with session.chdir(ROOT):
        session.run("lint-imports", "--config", str(ROOT / ".importlinter"), env=env)


@nox.session
def build(session: nox.Session) -> None:
    """Wheel and sdist of each package; each wheel installed alone into an empty venv."""
    dist = Path(session.create_tmp()) / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    for package in GRAPH.packages.values():
        session.run("uv", "build", "--quiet", "--out-dir", str(dist), str(package.folder),
                    external=True)
    # Intra-repo deps come from the wheels just built, everything else pinned by the lock.
    constraints = Path(session.create_tmp()) / "constraints.txt"
    session.run(
        "uv", "export", "--locked", "--all-packages", "--no-hashes", "--no-emit-workspace",
        "--no-default-groups", "--quiet", "-o", str(constraints), external=True,
    )
    for package in GRAPH.packages.values():
        wheels = sorted(dist.glob(f"{package.module}-*.whl"))
        sdists = sorted(dist.glob(f"{package.module}-*.tar.gz"))
        if len(wheels) != 1 or len(sdists) != 1:
            session.error(f"{package.dist}: expected one wheel and one sdist in {dist}")
        venv = Path(session.create_tmp()) / f"alone-{package.module}"
        shutil.rmtree(venv, ignore_errors=True)
        session.run("uv", "venv", "--quiet", str(venv), external=True)
        python = str(venv / "bin" / "python")
        session.run(
            "uv", "pip", "install", "--quiet", "--python", python, "--find-links", str(dist),
            "-c", str(constraints), str(wheels[0]), external=True,
        )
        alone = not package.runtime_deps and not _third_party(package)
        probe = (
            f"import importlib.metadata as md, {package.module} as m; "
            "names = sorted(d.metadata['Name'] for d in md.distributions()); "
            "print(m.__name__, 'imports alone;', len(names), 'distributions:', names); "
            # A package with no dependencies installs into an empty venv as itself only.
            f"assert not {alone} or names == [{package.dist!r}], names"
        )
        session.run(python, "-c", probe, external=True)
    session.log(f"built and installed alone: {', '.join(GRAPH.packages)}")


def _third_party(package: target_graph.Package) -> bool:
    import tomllib

    data = tomllib.loads((package.folder / "pyproject.toml").read_text())
    return bool(data.get("project", {}).get("dependencies"))


@nox.session(venv_backend="none")
def affected(session: nox.Session) -> None:
    """Sessions whose targets, or whose reverse deps, changed since a git base ref.

    ``nox -s affected -- origin/main`` prints the session names. Flags: ``--run`` runs
    them, ``--cpu-only`` / ``--gpu-only`` keep one runner's share, ``--no-venv`` runs
    them offline. Like Bazel's rdeps: a change to a package affects its own targets
    and every target whose environment holds that package.
    """
    flags = {"--run", "--cpu-only", "--gpu-only", "--no-venv"}
    args = [a for a in session.posargs if a not in flags]
    given = set(session.posargs) & flags
    base = args[0] if args else "origin/main"
    diff = subprocess.run(
        ["git", "diff", "--name-only", f"{base}...HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    if diff.returncode != 0:
        session.error(f"git diff against {base!r} failed: {diff.stderr.strip()}")
    changed = [line for line in diff.stdout.splitlines() if line]
    chosen = target_graph.affected_sessions(GRAPH, changed)
    gpu_sessions = {"gpu", "bench", "tune", *(t.name for t in GRAPH.tagged("gpu"))}
    if "--cpu-only" in given:
        chosen = [name for name in chosen if name not in gpu_sessions]
    if "--gpu-only" in given:
        chosen = [name for name in chosen if name in gpu_sessions]
    print(" ".join(chosen) if chosen else "(nothing affected)")
    if "--run" in given and chosen:
        offline = ["--no-venv"] if "--no-venv" in given else []
        session.run(sys.executable, "-m", "nox", *offline, "-s", *chosen, external=True)


# A bare `nox`: every CPU session, and the main job, which runs its CPU path without a GPU.
nox.options.sessions = [*(t.name for t in CPU_TARGETS), "meta", "lint", "build", "report"]
