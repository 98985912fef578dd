"""The executor: every unit runs through the result cache and its execution root.

For each unit a session asks for, in order:

1. compute its key (``units.key_for``), before any environment exists;
2. replay a stored pass of that key, restoring only the unit's declared outputs
   (``result_cache.py`` checks every path a record names);
3. otherwise bring the unit's own venv to its lock slice (``environments.py``), make
   an execution root of exactly the files the key hashed (``sandbox.py``), and run it
   there with an allowlisted environment (``hermetic.py``);
4. bring back the files that match the unit's declared outputs, pass or fail, and
   store the result if it passed.

With ``DSV4_VLLM_SOURCES`` set (``vllm_sources.py``), a ``--no-venv`` run puts vLLM's
Python sources first on the path of every target whose environment holds vLLM, keys it
by the bundle's manifest and says so in the GPU fingerprint; such a target with no vLLM
at all fails before pytest with one message that says how to provide it.

The noxfile only declares sessions and hands each one's units to :class:`Executor`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import cache_cli
import cache_key
import environments
import gpu_checks
import gpu_fingerprint
import safe_fs
import sandbox
import units as build_units
import vllm_sources
from hermetic import hermetic_env
from lockfile import Lock, LockError
from result_cache import CacheError, ResultCache
from targets import Graph, Target

TOOLS = Path(__file__).resolve().parent
PLUGIN_DIR = TOOLS / "pytest_plugins"

MAX_OUTPUT = 512 * 2**20  # the largest output a run may bring back (the blob cap)

# A run: given its execution root (None for units that run in the repository).
Run = Callable[[sandbox.ExecRoot | None], None]


class Executor:
    """Runs a repository's units: one per nox invocation, shared by its sessions.

    >>> executor = Executor(root=ROOT, graph=GRAPH, artifacts=ROOT / "artifacts")
    >>> executor.run_targets(session, [GRAPH.targets["policy"]], [], needs_gpu=False)
    nox > policy: cached PASSED (key 577cd300, local, ran 244.1 s on 2026-12-01)
    """

    def __init__(self, *, root: Path, graph: Graph, artifacts: Path) -> None:
        self.root = Path(root).resolve()
        self.graph = graph
        self.units = build_units.all_units(graph)
        self.artifacts = Path(artifacts).resolve()
        self._cache: ResultCache | None = None
        self._lock: Lock | None = None
        self._tree: cache_key.SourceTree | None = None
        self._sources: vllm_sources.Bundle | str | None = "unread"

    # ------------------------------------------------------------------ the cache
    def resolve_output(self, logical: str) -> tuple[Path, str]:
        """A logical output path as (trusted base folder, path below it).

        >>> executor.resolve_output("artifacts/junit/policy.xml")
        (PosixPath('/repo/artifacts'), 'junit/policy.xml')
        >>> executor.resolve_output("report/report.md")
        (PosixPath('/repo'), 'report/report.md')
        """
        head, _, rest = logical.partition("/")
        return (self.artifacts, rest) if head == "artifacts" else (self.root, logical)

    def cache(self, session) -> ResultCache:
        """One cache per nox run, so that a failing remote is warned about once.

        >>> executor.cache(session).mode
        'on'
        """
        if self._cache is None:
            try:
                self._cache = ResultCache.from_environment(
                    os.environ, resolve_output=self.resolve_output, warn=session.warn
                )
            except (CacheError, ValueError) as exc:
                session.error(str(exc))
        return self._cache

    def lock(self, session) -> Lock:
        """``uv.lock``, parsed once per run; a broken one fails the session legibly.

        >>> executor.lock(session).closure("dsv4-policy", ["test"])[0].name
        'attrs'
        """
        if self._lock is None:
            try:
                self._lock = Lock.load(self.root / "uv.lock")
            except LockError as exc:
                session.error(str(exc))
        return self._lock

    def sources(self, session) -> vllm_sources.Bundle | None:
        """The vLLM sources bundle ``DSV4_VLLM_SOURCES`` names, checked against the lock
        once per run; a damaged or stale one fails the session legibly.

        >>> executor.sources(session).describe()   # DSV4_VLLM_SOURCES=.vllm-sources
        '0.33.0 (python sources, no compiled extensions)'
        """
        if self._sources == "unread":
            try:
                self._sources = vllm_sources.from_environment(os.environ, self.root,
                                                              self.lock(session))
            except vllm_sources.SourcesError as exc:
                session.error(str(exc))
        return self._sources

    def key_inputs(self, session, gpu: Mapping[str, object] | None,
                   venv: Path | None = None) -> cache_key.KeyInputs:
        """What every key of this run is computed from, for one unit's venv.

        >>> executor.key_inputs(session, None).hermetic
        True
        """
        if self._tree is None:
            self._tree = cache_key.SourceTree(self.root)
        note = "--no-venv" if environments.offline(session) else (
            "--no-install" if environments.no_install(session) else "")
        return cache_key.KeyInputs(
            root=self.root, tree=self._tree, lock=self.lock(session), outer_env=os.environ,
            hermetic=environments.hermetic(session), gpu=gpu, artifacts=self.artifacts,
            installed=environments.installed_reader(session, venv), note=note,
            sources=self.sources(session),
        )

    def key(self, session, unit: build_units.Unit, args: Sequence[str],
            gpu: Mapping[str, object] | None, venv: Path | None = None) -> cache_key.Key:
        """The unit's key for this run; a lock that lacks a slice fails the session.

        >>> executor.key(session, executor.units["policy"], [], None).digest[:8]
        'de7793d5'
        """
        try:
            return build_units.key_for(self.graph, unit, list(args),
                                       self.key_inputs(session, gpu, venv))
        except LockError as exc:
            session.error(f"{unit.name}: {exc}")
            raise

    def replay(self, session, unit: build_units.Unit, key: cache_key.Key) -> bool:
        """Serve a stored pass of ``key``: restore its declared outputs and say so.

        >>> executor.replay(session, executor.units["policy"], key)
        nox > policy: cached PASSED (key de7793d5, local, ran 187.6 s on 2026-12-01)
        True
        """
        if not unit.cacheable:
            return False
        cache = self.cache(session)
        hit = cache.lookup(key.digest, unit=unit.name, outputs=unit.outputs)
        if hit is None:
            if cache.mode == "require":
                why = cache_cli.changes_since_latest(cache.local, key)
                session.error(f"{unit.name}: cache miss under DSV4_CACHE=require "
                              f"(key {key.digest[:8]}; {why})")
            return False
        written = cache.restore(hit.record, outputs=unit.outputs)
        if len(written) != len(hit.record.outputs):  # refused or failed part-way: warned
            return False
        cache.local.event(kind="hit", target=unit.name, key=key.digest, origin=hit.origin,
                          saved_s=hit.record.duration_s)
        session.log(cache_cli.hit_line(unit.name, hit))
        return True

    # ------------------------------------------------------------------ running
    def execute(self, session, unit: build_units.Unit, key: cache_key.Key, run: Run,
                fingerprint: Mapping[str, object] | None = None) -> None:
        """Run a missed unit in its execution root; bring its declared outputs back;
        store the pass. A failure raises, after its outputs (JUnit) are back, and is
        never stored.

        >>> executor.execute(session, unit, key, lambda root: run_pytest(root))
        nox > policy: PASSED in 187.6 s, stored as de7793d5
        """
        exec_root = None
        if unit.sandboxed:
            started = time.perf_counter()
            exec_root = sandbox.create(
                self.root / ".nox" / "_sandbox" / unit.name.replace(":", "-"),
                repo_root=self.root, artifacts_dir=self.artifacts, files=key.files(),
            )
            session.log(f"{unit.name}: execution root of {len(key.files())} files in "
                        f"{time.perf_counter() - started:.2f} s")
        started = time.time()
        try:
            run(exec_root)
        finally:
            outputs = self._bring_back(exec_root, unit) if exec_root is not None else {}
        duration = time.time() - started
        cache = self.cache(session)
        cache.local.event(kind="run", target=unit.name, key=key.digest,
                          duration_s=round(duration, 3))
        if not unit.cacheable:
            return
        record = cache.store(
            key=key.digest, target=unit.name, duration_s=duration,
            fingerprint=dict(fingerprint or {}), components=key.component_digests(),
            files=key.files(), outputs=outputs, declared=unit.outputs,
        )
        if record is not None:
            session.log(f"{unit.name}: PASSED in {duration:.1f} s, stored as {key.digest[:8]}")

    def _bring_back(self, exec_root: sandbox.ExecRoot, unit: build_units.Unit) -> dict[str, Path]:
        """Copy the run's declared outputs to their real places; return them."""
        found = sandbox.collect(exec_root, unit.outputs)
        for logical, path in found.items():
            data = safe_fs.read_regular_under(
                exec_root.root, path.relative_to(exec_root.root).as_posix(), limit=MAX_OUTPUT)
            if data is None:
                continue
            base, relative = self.resolve_output(logical)
            # A declared output's place is the build's own: a link or folder in the way
            # is removed, never written through.
            safe_fs.write_atomic_under(base, relative, data, replace=True)
        return found

    def run_environment(self, session, *, venv: Path | None, exec_root: sandbox.ExecRoot | None,
                        folders: Sequence[Path], session_dir: Path, allow: Sequence[str] = (),
                        set_env: Mapping[str, str] | None = None, gpu: bool = False,
                        extra_path: Sequence[Path] = (),
                        outside_path: Sequence[Path] = ()) -> dict[str, str]:
        """The complete environment of one run: allowlisted, with its own HOME, TMPDIR
        and Triton cache, and, in an execution root, its sources only.

        ``extra_path`` are repository folders (their execution-root copies go on the
        path); ``outside_path`` are folders outside the repository's files that the key
        names by content (the unpacked vLLM sources), put on the path as they are.

        >>> env = executor.run_environment(session, venv=None, exec_root=root,
        ...                                folders=[], session_dir=Path("/tmp/s"))
        >>> env["DSV4_ARTIFACTS_DIR"]
        '/repo/.nox/_sandbox/policy/artifacts'
        """
        if exec_root is not None:
            added = sandbox.run_environment(exec_root, folders, self.root, PLUGIN_DIR)
            paths = [*added["PYTHONPATH"].split(os.pathsep),
                     *(str(exec_root.path(p, self.root)) for p in extra_path)]
        else:
            added = {"DSV4_ARTIFACTS_DIR": str(self.artifacts)}
            paths = [str(PLUGIN_DIR), *(str(p) for p in extra_path)]
            if venv is None:
                paths += [str(f / "src") for f in folders]
        paths += [str(p) for p in outside_path]
        env = hermetic_env(
            outer=os.environ, session_dir=session_dir,
            bin_dir=str(Path(environments.python(session, venv)).parent),
            allow=allow, set_env=dict(set_env or {}), gpu=gpu, python_path=paths,
        )
        env.update({k: v for k, v in added.items() if k != "PYTHONPATH"})
        return env

    def run_target(self, session, target: Target, venv: Path | None,
                   exec_root: sandbox.ExecRoot | None, extra: Sequence[str],
                   sources: Path | None = None) -> None:
        """One declared target's command: pytest with JUnit, or its own command.

        ``sources`` is the unpacked vLLM sources bundle, for targets that hold vLLM in
        that mode: last on ``PYTHONPATH`` (before the interpreter's own packages), and
        named to the run in ``DSV4_VLLM_SOURCES``.

        >>> executor.run_target(session, graph.targets["policy"], venv, root, [])
        nox > /repo/.nox/policy/bin/python -m pytest tests -p dsv4_hermetic …
        """
        unit = self.units[target.name]
        set_env = {**target.set_env, **environments.aux_environments(session, self.root, target)}
        if sources is not None:
            set_env[vllm_sources.VARIABLE] = str(sources)
        env = self.run_environment(
            session, venv=venv, exec_root=exec_root,
            folders=environments.source_folders(self.graph, target),
            session_dir=self.session_dir(session) / target.name, allow=target.env,
            set_env=set_env, gpu=unit.gpu_environment,
            outside_path=[sources] if sources is not None else (),
        )
        python = environments.python(session, venv)
        if target.pytest:
            junit = Path(env["DSV4_ARTIFACTS_DIR"]) / "junit" / f"{target.name}.xml"
            junit.parent.mkdir(parents=True, exist_ok=True)
            cmd = [python, "-m", "pytest", *target.pytest, "-p", "dsv4_hermetic",
                   "-p", "no:cacheprovider", f"--junitxml={junit}",
                   f"--basetemp={env['TMPDIR']}/pytest", *extra]
        else:
            head, *rest = target.command
            cmd = [python if head == "python" else head, *rest, *extra]
        folder = exec_root.path(target.package.folder, self.root) if exec_root else (
            target.package.folder)
        with session.chdir(folder):
            session.run("timeout", "--kill-after=30", str(int(target.timeout)), *cmd,
                        env=env, include_outer_env=False, external=True)

    def session_dir(self, session) -> Path:
        """The session's own folder, for HOME, TMPDIR and the Triton cache.

        >>> executor.session_dir(session)
        PosixPath('/repo/.nox/policy')
        """
        if environments.offline(session):
            return self.artifacts / session.name
        return Path(session.create_tmp()).resolve().parent

    def run_targets(self, session, chosen: Sequence[Target], extra: Sequence[str], *,
                    needs_gpu: bool) -> None:
        """Replay every target whose key was seen to pass; sync and run only the rest.

        >>> executor.run_targets(session, [graph.targets["policy"]], [], needs_gpu=False)
        nox > policy: cached PASSED (key de7793d5, local, ran 187.6 s on 2026-12-01)
        """
        if needs_gpu:
            gpu = gpu_checks.identity(session)
        elif any(self.units[t.name].gpu_in_key for t in chosen):
            gpu = gpu_fingerprint.identity_or_none()
        else:
            gpu = None
        bundle = self.sources(session)
        holders = {t.name for t in chosen if self.holds_vllm(session, t)}
        if bundle is not None and holders and not environments.offline(session):
            session.error(
                f"{vllm_sources.VARIABLE} is for --no-venv runs: a venv installs vllm from "
                f"uv.lock. Run `nox --no-venv -s {session.name}`, or unset the variable")
        if bundle is not None and holders:
            try:
                bundle.check_python(environments.python_version(session, None))
            except vllm_sources.SourcesError as exc:
                session.error(str(exc))
        if environments.offline(session) and not needs_gpu:
            gpu_checks.drift(session, self.lock(session), chosen,
                             overrides=bundle.versions() if bundle and holders else None)
        misses = []
        for target in chosen:
            unit = self.units[target.name]
            venv = environments.venv_for(session, target.name)
            args = [*gpu_checks.pytest_args(gpu, target), *extra]
            key = self.key(session, unit, args, gpu if unit.gpu_in_key else None, venv)
            if not self.replay(session, unit, key):
                misses.append((target, unit, venv, args, key))
        missed_holders = [m[0].name for m in misses if m[0].name in holders]
        if bundle is None and missed_holders:
            self.require_vllm(session, missed_holders, [t.name for t in chosen])
        fingerprint: dict = {}
        for target, unit, venv, args, key in misses:
            session.log(f"target {target.name} ({target.package.dist}, {target.kind})")
            environments.sync(session, self.graph, venv, target.package.dist, target.groups)
            site = None
            if bundle is not None and target.name in holders:
                site = bundle.site(self.root)
                session.log(f"{target.name}: vllm {bundle.describe()} from {site}")
            if needs_gpu and not fingerprint:
                fingerprint = gpu_checks.full_fingerprint(
                    session, python=environments.python(session, venv),
                    artifacts=self.artifacts, hermetic=environments.hermetic(session),
                    lock=self.lock(session), chosen=[m[0] for m in misses],
                    sources=bundle if missed_holders else None,
                )
            self.execute(
                session, unit, key,
                lambda root, t=target, v=venv, a=args, s=site: self.run_target(
                    session, t, v, root, a, sources=s),
                fingerprint if unit.needs_gpu else None,
            )

    def holds_vllm(self, session, target: Target) -> bool:
        """Whether the target's environment holds vLLM (its lock slice names it).

        >>> executor.holds_vllm(session, GRAPH.targets["vllm-gpu"])
        True
        """
        return vllm_sources.holds_vllm(self.lock(session), target.package.dist, target.groups)

    def require_vllm(self, session, names: Sequence[str], chosen: Sequence[str]) -> None:
        """Fail before anything runs when targets that need vLLM cannot have it: under
        ``--no-venv`` the interpreter cannot import it; with a venv, the offline
        wheelhouse it would come from lacks its wheel. One message names the targets,
        the locked version and the two ways to provide it.

        >>> executor.require_vllm(session, ["vllm-gpu"], ["kernels-gpu", "vllm-gpu"])
        nox > Session gpu aborted: vllm-gpu needs vllm 0.33.0 (pinned in uv.lock), and …
        """
        version = vllm_sources.locked(self.lock(session))[vllm_sources.VLLM].version
        house = environments.wheelhouse()
        if environments.offline(session):
            python = environments.python(session, None)
            if vllm_sources.importable(python):
                return
            why = (f"--no-venv, and {python} cannot import vllm (nor is "
                   f"{vllm_sources.VARIABLE} set)")
        elif house is not None and not vllm_sources.wheelhouse_has_vllm(house, version):
            why = f"the wheelhouse DSV4_WHEELHOUSE={house} holds no vllm-{version} wheel"
        else:
            return
        others = [n for n in chosen if n not in names]
        session.error(vllm_sources.missing_message(names, version, why, session=session.name,
                                                   others=others))

    def run_check(self, session, name: str, run: Run, *, args: Sequence[str] = ()) -> None:
        """A repository check (``meta``, ``lint``, ``build:<dist>``) through the cache.

        >>> executor.run_check(session, "lint", run_lint)
        nox > lint: PASSED in 1.4 s, stored as 2813f126
        """
        unit = self.units[name]
        venv = environments.venv_for(session, session.name)
        key = self.key(session, unit, list(args), None, venv)
        if not self.replay(session, unit, key):
            self.execute(session, unit, key, run)

