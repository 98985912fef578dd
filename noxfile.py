"""Sessions for the dsv4 monorepo, generated from the targets each package declares.

Nothing here names a package or a test path: every ``packages/*/pyproject.toml``
declares ``[[tool.dsv4.targets]]`` and ``tools/targets.py`` validates them. Each
target becomes a session of its own name; the aggregate sessions ``gpu``, ``bench``,
``tune`` and ``report`` run every target of that tag or kind.

Results are cached like Bazel's (``tools/result_cache.py``): every target run, and
the repository checks ``meta``, ``lint`` and ``build``, is keyed by the sha256 of all
it depends on (``tools/cache_key.py``). A key that was seen to pass is replayed, from
the local cache or a shared remote one, without building an environment; only a miss
runs. ``nox -s cache -- explain TARGET`` says what a key is made of.

Environments come from the one lock file (``uv.lock``, installed with
``uv sync --locked``, which fails when the lock is stale), or offline from a
wheelhouse of the lock's own wheels (``DSV4_WHEELHOUSE``). Tests run with an
allowlisted environment: only the variables named below or by the target get in,
and HOME, TMPDIR and TRITON_CACHE_DIR point into the session's own directory.

Offline runners that already hold torch and triton may run ``nox --no-venv -s gpu``:
no environment is built, the workspace sources are put on PYTHONPATH, the same
environment rules apply, and the run is recorded as non-hermetic, with every
installed version that differs from the lock printed and keyed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))

import cache_cli  # noqa: E402
import cache_key  # noqa: E402
import gpu_fingerprint  # noqa: E402
import targets as target_graph  # noqa: E402
import units as build_units  # noqa: E402
from hermetic import hermetic_env  # noqa: E402
from lockfile import Lock, LockError  # noqa: E402
from result_cache import CacheError, ResultCache  # noqa: E402

try:
    GRAPH = target_graph.load(ROOT)
except target_graph.TargetError as exc:  # a broken declaration must fail `nox -l` legibly
    sys.stderr.write(f"error: invalid target declaration: {exc}\n")
    raise SystemExit(2) from None

nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True
# Environments are kept between runs and brought to the lock by `uv sync`, which is
# exact for the first target of a session: a kept venv can never drift from the lock.
nox.options.reuse_venv = "yes"

ARTIFACTS = Path(os.environ.get("DSV4_ARTIFACTS_DIR", ROOT / "artifacts")).resolve()
PLUGIN_DIR = ROOT / "tools" / "pytest_plugins"
CPU_TARGETS = [
    t for t in GRAPH.targets.values() if not build_units.needs_gpu(t) and t.kind == "test"
]
UNITS = build_units.all_units(GRAPH)


# --------------------------------------------------------------------------- helpers
def _offline(session: nox.Session) -> bool:
    """True under ``--no-venv``: use the interpreter as found, install nothing."""
    return session.venv_backend == "none"


def _python(session: nox.Session) -> str:
    return sys.executable if _offline(session) else str(Path(session.bin) / "python")


def _venv_env(session: nox.Session) -> dict[str, str]:
    return {"UV_PROJECT_ENVIRONMENT": session.virtualenv.location}


def _wheelhouse() -> Path | None:
    raw = os.environ.get("DSV4_WHEELHOUSE", "").strip()
    return Path(raw).resolve() if raw else None


def _sync(session: nox.Session, package: str, groups: tuple[str, ...], *, exact: bool) -> None:
    """Bring the session's venv to the lock: one package (or the root) and its groups."""
    if _offline(session):
        return
    house = _wheelhouse()
    if house is not None:
        _install_from_wheelhouse(session, house, package, groups)
        return
    args = ["uv", "sync", "--locked", "--no-default-groups"]
    args += ["--package", package] if package != build_units.WORKSPACE else ["--no-install-project"]
    for group in groups:
        args += ["--group", group]
    if not exact:
        args.append("--inexact")
    session.run_install(*args, env=_venv_env(session), external=True, silent=True)


def _install_from_wheelhouse(
    session: nox.Session, house: Path, package: str, groups: tuple[str, ...]
) -> None:
    """Offline and hermetic: the lock's pins and hashes, wheels from ``house``."""
    requirements = Path(session.create_tmp()) / f"wheelhouse-{package}.txt"
    session.run_install(
        "uv", "export", "--locked", "--offline", "--no-emit-workspace", "--no-default-groups",
        "--quiet", *(["--package", package] if package != build_units.WORKSPACE else []),
        *(a for g in groups for a in ("--group", g)), "-o", str(requirements),
        external=True, silent=True,
    )
    common = ["--offline", "--no-index", "--find-links", str(house), "--python", _python(session)]
    session.run_install("uv", "pip", "install", "--quiet", "--require-hashes", "--no-deps",
                        *common, "-r", str(requirements), external=True, silent=True)
    if package != build_units.WORKSPACE:
        folders = [str(GRAPH.packages[d].folder) for d in GRAPH.closure(package)]
        session.run_install("uv", "pip", "install", "--quiet", "--no-deps", *common,
                            *(a for f in folders for a in ("-e", f)), external=True, silent=True)


def _source_path(target: target_graph.Target) -> list[str]:
    """PYTHONPATH for offline runs: the target's package and its intra-repo deps."""
    return [str(GRAPH.packages[d].folder / "src") for d in GRAPH.target_packages(target)]


def _aux_environments(session: nox.Session, target: target_graph.Target) -> dict[str, str]:
    """Build each side environment the target declares; return ``{VARIABLE: python}``.

    A side environment lives outside the workspace lock (a server the tests start, say)
    and comes from a fully pinned, hash-checked requirements file. It is rebuilt only
    when that file changes: its folder is named by the file's digest.
    """
    found: dict[str, str] = {}
    for aux in target.aux_envs.values():
        requirements = target.package.folder / aux.requirements
        digest = cache_key.sha256_bytes(requirements.read_bytes())[:16]
        venv = ROOT / ".nox" / "_aux" / f"{aux.name}-py{aux.python}-{digest}"
        python = venv / "bin" / "python"
        if not (venv / ".complete").is_file():
            interpreter = shutil.which(f"python{aux.python}")
            if interpreter is None:
                session.error(
                    f"{target.name}: side environment {aux.name!r} needs python{aux.python} "
                    "on PATH"
                )
            shutil.rmtree(venv, ignore_errors=True)
            session.log(f"{target.name}: building side environment {aux.name} from {requirements}")
            session.run(interpreter, "-m", "venv", str(venv), external=True, silent=True)
            session.run(
                str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--require-hashes",
                "--disable-pip-version-check", "-r", str(requirements), external=True,
                silent=True,  # pip's output is shown if the install fails
            )
            (venv / ".complete").write_text(str(requirements) + "\n")
        found[aux.variable] = str(python)
    return found


def _run_target(session: nox.Session, target: target_graph.Target, extra: list[str]) -> None:
    offline = _offline(session)
    session_dir = (
        Path(session.create_tmp()).resolve().parent if not offline else ARTIFACTS / session.name
    )
    set_env = {**target.set_env, **_aux_environments(session, target)}
    env = hermetic_env(
        outer=os.environ,
        session_dir=session_dir / target.name,
        bin_dir=str(Path(_python(session)).parent),
        allow=target.env,
        set_env=set_env,
        gpu=build_units.needs_gpu(target) or target.kind == "report",
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


# --------------------------------------------------------------------------- the result cache
_LOCK: list[Lock] = []
_TREE: list[cache_key.SourceTree] = []
_CACHE: list[ResultCache] = []


def _cache(session: nox.Session) -> ResultCache:
    """One cache per nox run, so that a remote that failed is warned about once."""
    if not _CACHE:
        try:
            _CACHE.append(ResultCache.from_environment(
                os.environ, resolve_output=_resolve_output, warn=session.warn
            ))
        except CacheError as exc:
            session.error(str(exc))
    return _CACHE[0]


def _resolve_output(logical: str) -> Path:
    """``artifacts/…`` lives in the artifacts folder (DSV4_ARTIFACTS_DIR); the rest in
    the repository."""
    head, _, rest = logical.partition("/")
    return ARTIFACTS / rest if head == "artifacts" else ROOT / logical


def _key_inputs(session: nox.Session, gpu: dict | None) -> cache_key.KeyInputs:
    if not _LOCK:
        try:
            _LOCK.append(Lock.load(ROOT / "uv.lock"))
        except LockError as exc:
            session.error(str(exc))
        _TREE.append(cache_key.SourceTree(ROOT))
    return cache_key.KeyInputs(
        root=ROOT, tree=_TREE[0], lock=_LOCK[0], outer_env=os.environ,
        hermetic=not _offline(session), gpu=gpu, artifacts=ARTIFACTS,
    )


def _key(session: nox.Session, unit: build_units.Unit, args: list[str], gpu: dict | None):
    try:
        return build_units.key_for(GRAPH, unit, args, _key_inputs(session, gpu))
    except LockError as exc:
        session.error(f"{unit.name}: {exc}")
        raise


def _replay(session: nox.Session, cache: ResultCache, unit: build_units.Unit, key) -> bool:
    """Serve a stored pass of ``key``: restore its outputs and say so. False on a miss."""
    if not unit.cacheable:
        return False
    hit = cache.lookup(key.digest)
    if hit is None:
        if cache.mode == "require":
            why = cache_cli.changes_since_latest(cache.local, key)
            session.error(
                f"{unit.name}: cache miss under DSV4_CACHE=require (key {key.digest[:8]}; "
                f"{why})"
            )
        return False
    cache.restore(hit.record)
    cache.local.event(kind="hit", target=unit.name, key=key.digest, origin=hit.origin,
                      saved_s=hit.record.duration_s)
    session.log(f"{cache_cli.hit_line(unit.name, hit)}")
    return True


def _collect_outputs(unit: build_units.Unit, started: float) -> dict[str, Path]:
    """The unit's output files written by this run (older leftovers are not outputs)."""
    found: dict[str, Path] = {}
    for pattern in unit.outputs:
        head, _, rest = pattern.partition("/")
        base, glob = (ARTIFACTS, rest) if head == "artifacts" else (ROOT, pattern)
        for path in sorted(base.glob(glob)):
            if path.is_file() and path.stat().st_mtime >= started - 1:
                logical = ("artifacts/" if base == ARTIFACTS else "") + str(
                    path.relative_to(base).as_posix()
                )
                found[logical] = path
    return found


def _run_cached(session: nox.Session, cache: ResultCache, unit: build_units.Unit, key,
                run, fingerprint: dict | None = None) -> None:
    """Run ``run()`` for a missed unit and store the pass. A failure raises and is
    never stored."""
    started = time.time()
    run()
    duration = time.time() - started
    cache.local.event(kind="run", target=unit.name, key=key.digest, duration_s=round(duration, 3))
    if not unit.cacheable:
        return
    record = cache.store(
        key=key.digest, target=unit.name, duration_s=duration, fingerprint=fingerprint or {},
        components=key.component_digests(), files=key.files(),
        outputs=_collect_outputs(unit, started),
    )
    if record is not None:
        session.log(f"{unit.name}: PASSED in {duration:.1f} s, stored as {key.digest[:8]}")


# --------------------------------------------------------------------------- GPU checks
def _gpu_identity(session: nox.Session) -> dict:
    """Fail unless a CUDA device is visible; return what the key needs (no torch)."""
    data = gpu_fingerprint.smi()
    if "error" in data:
        session.error(
            f"no CUDA device visible: {data['error']}. The gpu and bench sessions need an "
            "NVIDIA GPU; on a CPU machine run `nox` (the CPU sessions) instead"
        )
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        data["visible_devices"] = visible
        data["device_count"] = len([d for d in visible.split(",") if d.strip()])
    return data


def _full_fingerprint(session: nox.Session, chosen: list[target_graph.Target]) -> dict:
    """The torch-side fingerprint, after install: GPU, CUDA, torch, triton, hermeticity."""
    probe = ROOT / "tools" / "gpu_fingerprint.py"
    env = hermetic_env(
        outer=os.environ, session_dir=ARTIFACTS / session.name / "probe",
        bin_dir=str(Path(_python(session)).parent), allow=(), set_env={}, gpu=True,
        python_path=[],
    )
    out = session.run(
        _python(session), str(probe), env=env, include_outer_env=False,
        external=True, silent=True, success_codes=[0, 3],
    )
    data = json.loads(str(out).strip().splitlines()[-1])
    if "error" in data:
        session.error(f"no CUDA device visible: {data['error']}")
    data["hermetic"] = not _offline(session)
    if _offline(session):
        data["versions"], data["version_drift"] = _drift(session, chosen)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{session.name}-fingerprint.json").write_text(json.dumps(data, indent=2) + "\n")
    shown = {k: v for k, v in data.items() if k != "versions"}
    shown["version_drift"] = len(data.get("version_drift", []))
    session.log(f"GPU fingerprint: {json.dumps(shown)} (in full: "
                f"{ARTIFACTS / f'{session.name}-fingerprint.json'})")
    return data


def _drift(session: nox.Session, chosen: list[target_graph.Target]) -> tuple[dict, list[str]]:
    """Under --no-venv: every installed version beside the lock's; the differences are
    printed."""
    lock = _key_inputs(session, None).lock
    locked = {d.name: d for t in chosen for d in lock.closure(t.package.dist, t.groups)}
    pinned = sorted(locked.values(), key=lambda d: d.name)
    installed = cache_key.installed_versions(pinned)
    lines = cache_key.version_drift(pinned, installed)
    if lines:
        session.warn(
            "non-hermetic run (--no-venv): the interpreter's packages differ from uv.lock; "
            "results are cached under their own key:\n  " + "\n  ".join(lines)
        )
    versions = {d.name: {"locked": d.version, "installed": installed[d.name]}
                for d in pinned if d.name in installed}
    return versions, lines


def _gpu_pytest_args(identity: dict | None, target: target_graph.Target) -> list[str]:
    """One pytest-xdist worker per visible GPU; each worker pins its own device.

    Benchmarks stay in one process: pytest-benchmark turns itself off under xdist, and
    timings taken while another GPU test runs on the host would not be worth keeping."""
    count = int((identity or {}).get("device_count", 1))
    if count > 1 and target.pytest and target.kind == "test":
        return ["-n", str(count), "--dist", "load"]
    return []


# --------------------------------------------------------------------------- target sessions
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


def _run_targets(session: nox.Session, chosen: list[target_graph.Target], extra: list[str],
                 *, needs_gpu: bool) -> None:
    """Replay every target whose key was seen to pass; install and run only the rest."""
    cache = _cache(session)
    if needs_gpu:
        identity = _gpu_identity(session)
    elif any(UNITS[t.name].gpu_in_key for t in chosen):
        identity = gpu_fingerprint.identity_or_none()
    else:
        identity = None
    if _offline(session) and not needs_gpu:
        _drift(session, chosen)
    misses = []
    for target in chosen:
        unit = UNITS[target.name]
        args = [*_gpu_pytest_args(identity, target), *extra]
        key = _key(session, unit, args, identity if unit.gpu_in_key else None)
        if not _replay(session, cache, unit, key):
            misses.append((target, unit, args, key))
    for i, (target, *_rest) in enumerate(misses):
        _sync(session, target.package.dist, target.groups, exact=i == 0)
    fingerprint = _full_fingerprint(session, [m[0] for m in misses]) if needs_gpu and misses else {}
    for target, unit, args, key in misses:
        session.log(f"target {target.name} ({target.package.dist}, {target.kind})")
        _run_cached(session, cache, unit, key, lambda t=target, a=args: _run_target(session, t, a),
                    fingerprint if unit.needs_gpu else None)


def _make_target_session(target: target_graph.Target) -> None:
    def session_fn(session: nox.Session) -> None:
        _run_targets(session, [target], list(session.posargs),
                     needs_gpu=build_units.needs_gpu(target))

    session_fn.__doc__ = (
        f"{target.kind} target of {target.package.dist} (tags: {', '.join(sorted(target.tags))})"
    )
    nox.session(name=target.name)(session_fn)


for _target in GRAPH.targets.values():
    _make_target_session(_target)


def _aggregate(session: nox.Session, pool: list[target_graph.Target], *, needs_gpu: bool) -> None:
    chosen, extra = _select(session, pool)
    _run_targets(session, chosen, extra, needs_gpu=needs_gpu)


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
def _repo_check(session: nox.Session, name: str, run) -> None:
    unit = UNITS[name]
    cache = _cache(session)
    key = _key(session, unit, list(session.posargs), None)
    if not _replay(session, cache, unit, key):
        _run_cached(session, cache, unit, key, run)


@nox.session
def meta(session: nox.Session) -> None:
    """Tests of the target graph, the result cache, the session environment and layering."""

    def run() -> None:
        _sync(session, "dsv4-policy", ("test",), exact=True)
        _sync(session, build_units.WORKSPACE, ("meta",), exact=False)
        env = hermetic_env(
            outer=os.environ,
            session_dir=Path(session.create_tmp()).resolve().parent / "meta",
            bin_dir=str(Path(_python(session)).parent),
            allow=(),
            set_env={},
            gpu=False,
            python_path=[str(ROOT / "tools"), str(PLUGIN_DIR)],
        )
        junit = ARTIFACTS / "junit" / "meta.xml"
        junit.parent.mkdir(parents=True, exist_ok=True)
        with session.chdir(ROOT):
            session.run(
                _python(session), "-m", "pytest", "tools/tests", "-p", "dsv4_hermetic",
                "-p", "no:cacheprovider", f"--junitxml={junit}",
                f"--basetemp={env['TMPDIR']}/pytest", *session.posargs,
                env=env, include_outer_env=False, external=True,
            )

    _repo_check(session, "meta", run)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, the lock's freshness, and the one-way layering contracts (import-linter)."""

    def run() -> None:
        _sync(session, build_units.WORKSPACE, ("lint",), exact=True)
        session.run("uv", "lock", "--check", external=True)
        session.run("ruff", "check", str(ROOT))
        sources = [str(p.folder / "src") for p in GRAPH.packages.values()]
        env = {"PYTHONPATH": os.pathsep.join(sources)}
        with session.chdir(ROOT):
            session.run("lint-imports", "--config", str(ROOT / ".importlinter"), env=env)

    _repo_check(session, "lint", run)


@nox.session
def build(session: nox.Session) -> None:
    """Wheel and sdist of each package; each wheel installed alone into an empty venv.

    Each package is its own cached unit (``build:<dist>``): a change to one package
    rebuilds it and the packages that depend on it, nothing else."""
    cache = _cache(session)
    for package in GRAPH.packages.values():
        unit = UNITS[f"build:{package.dist}"]
        key = _key(session, unit, [], None)
        if not _replay(session, cache, unit, key):
            _run_cached(session, cache, unit, key, lambda p=package: _build_alone(session, p))


def _build_alone(session: nox.Session, package: target_graph.Package) -> None:
    dist = Path(session.create_tmp()) / f"dist-{package.module}"
    shutil.rmtree(dist, ignore_errors=True)
    for name in GRAPH.closure(package.dist):
        session.run("uv", "build", "--quiet", "--out-dir", str(dist),
                    str(GRAPH.packages[name].folder), external=True)
    # Intra-repo deps come from the wheels just built, everything else pinned by the lock.
    constraints = Path(session.create_tmp()) / "constraints.txt"
    session.run(
        "uv", "export", "--locked", "--all-packages", "--no-hashes", "--no-emit-workspace",
        "--no-default-groups", "--quiet", "-o", str(constraints), external=True,
    )
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


def _third_party(package: target_graph.Package) -> bool:
    import tomllib

    data = tomllib.loads((package.folder / "pyproject.toml").read_text())
    return bool(data.get("project", {}).get("dependencies"))


# --------------------------------------------------------------------------- cache, wheelhouse
@nox.session(venv_backend="none")
def cache(session: nox.Session) -> None:
    """The result cache: ``explain TARGET [--no-venv]``, ``stats``, ``clean``; ``--json``.

    ``explain`` prints each component of the target's key with its digest, and what
    changed since the target's last stored pass."""
    try:
        results = _cache(session)
        code = cache_cli.main(
            list(session.posargs), graph=GRAPH, units=UNITS, cache=results,
            key_inputs=lambda hermetic, gpu: cache_key.KeyInputs(
                root=ROOT, tree=cache_key.SourceTree(ROOT), lock=Lock.load(ROOT / "uv.lock"),
                outer_env=os.environ, hermetic=hermetic, gpu=gpu, artifacts=ARTIFACTS,
            ),
            gpu_identity=gpu_fingerprint.smi,
        )
    except (cache_cli.UsageError, CacheError, LockError) as exc:
        session.error(str(exc))
    if code:
        session.error(f"cache {' '.join(session.posargs)} failed")


@nox.session(venv_backend="none")
def wheelhouse(session: nox.Session) -> None:
    """Download, hash-checked, every locked wheel the GPU targets need, for offline runners.

    ``nox -s wheelhouse -- --python 3.12 --platform manylinux_2_28_x86_64 --out DIR
    [--targets a,b]``; then on the runner ``DSV4_WHEELHOUSE=DIR nox -s gpu``."""
    args = cache_cli.parse_wheelhouse_args(
        list(session.posargs),
        default_targets=[t.name for t in GRAPH.targets.values() if build_units.needs_gpu(t)],
        known=list(GRAPH.targets),
    )
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    slices = [(build_units.WORKSPACE, ("backend", "nox"))]
    slices += [(GRAPH.targets[n].package.dist, GRAPH.targets[n].groups) for n in args.targets]
    requirements = out / "requirements.txt"
    lines: dict[str, str] = {}
    for package, groups in slices:
        part = Path(session.create_tmp()) / "part.txt"
        session.run(
            "uv", "export", "--locked", "--no-emit-workspace", "--no-default-groups", "--quiet",
            *(["--package", package] if package != build_units.WORKSPACE else []),
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


# --------------------------------------------------------------------------- affected
@nox.session(venv_backend="none")
def affected(session: nox.Session) -> None:
    """Sessions whose targets, or whose reverse deps, changed since a git base ref.

    ``nox -s affected -- origin/main`` prints the session names. Flags: ``--run`` runs
    them, ``--cpu-only`` / ``--gpu-only`` keep one runner's share, ``--no-venv`` runs
    them offline. Like Bazel's rdeps: a change to a package affects its own targets
    and every target whose environment holds that package. With the result cache, a
    plain `nox` already reruns only what changed; this narrows which runner is asked.
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
