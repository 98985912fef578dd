"""The repository's own checks, run through the executor: ``meta``, ``lint``, ``build``.

No package owns these, so ``units.py`` declares their units; this module says what
each one runs. Each runs in its execution root, so ``lint`` checks exactly the files
its key hashed and ``meta``'s tests see only what their key names.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import environments
from executor import Executor
from sandbox import ExecRoot
from targets import Package

# The CI pipelines and the schema each one is checked against (check-jsonschema's own).
PIPELINE_SCHEMAS = {
    "ci/github-actions.yml": "vendor.github-workflows",
    "ci/buildkite.yml": "vendor.buildkite",
}


def meta(session, executor: Executor) -> None:
    """Tests of the target graph, the result cache, the session environment, layering.

    >>> meta(session, executor)
    nox > meta: PASSED in 210.4 s, stored as 1c9e0f3a
    """
    venv = environments.venv_for(session, session.name)

    def run(exec_root: ExecRoot | None) -> None:
        environments.sync(session, executor.graph, venv, "dsv4-policy", ("test",))
        environments.sync(session, executor.graph, venv, environments.WORKSPACE, ("meta",),
                          exact=False)
        env = executor.run_environment(
            session, venv=venv, exec_root=exec_root,
            folders=[executor.graph.packages["dsv4-policy"].folder],
            session_dir=executor.session_dir(session) / "meta",
            extra_path=[executor.root / "tools"],
        )
        junit = Path(env["DSV4_ARTIFACTS_DIR"]) / "junit" / "meta.xml"
        junit.parent.mkdir(parents=True, exist_ok=True)
        with session.chdir(exec_root.root if exec_root else executor.root):
            session.run(
                environments.python(session, venv), "-m", "pytest", "tools/tests",
                "-p", "dsv4_hermetic", "-p", "no:cacheprovider", f"--junitxml={junit}",
                f"--basetemp={env['TMPDIR']}/pytest", *session.posargs,
                env=env, include_outer_env=False, external=True,
            )

    executor.run_check(session, "meta", run, args=session.posargs)


def lint(session, executor: Executor) -> None:
    """ruff, the lock's freshness, the layering contracts and the CI pipelines' schemas.

    >>> lint(session, executor)
    nox > lint: PASSED in 9.8 s, stored as 5d2a9c01
    """
    venv = environments.venv_for(session, session.name)

    def run(exec_root: ExecRoot | None) -> None:
        environments.sync(session, executor.graph, venv, environments.WORKSPACE, ("lint",))
        where = exec_root.root if exec_root else executor.root
        tool = (lambda name: str(venv / "bin" / name)) if venv else (lambda name: name)
        sources = [str(where / p.folder.relative_to(executor.root) / "src")
                   for p in executor.graph.packages.values()]
        with session.chdir(where):
            session.run("uv", "lock", "--check", external=True)
            # The execution root sits under .nox/, which the repository's .gitignore names:
            # ruff honouring it there would find no file at all. The root holds exactly
            # the key's files, so nothing ignored is in it to skip.
            ignore = ("--no-respect-gitignore",) if exec_root else ()
            session.run(tool("ruff"), "check", "--no-cache", *ignore, ".", external=True)
            session.run(tool("lint-imports"), "--config", ".importlinter",
                        env={"PYTHONPATH": ":".join(sources)}, external=True)
            for pipeline, schema in PIPELINE_SCHEMAS.items():
                session.run(tool("check-jsonschema"), "--builtin-schema", schema, pipeline,
                            external=True)

    executor.run_check(session, "lint", run)


def build(session, executor: Executor) -> None:
    """Wheel and sdist of each package; each wheel installed alone into an empty venv.

    Each package is its own cached unit (``build:<dist>``): a change to one package
    rebuilds it and the packages that depend on it, nothing else.

    >>> build(session, executor)
    nox > build:dsv4-policy: cached PASSED (key 0b6f…, local, ran 3.1 s on 2026-12-01)
    """
    for package in executor.graph.packages.values():
        executor.run_check(
            session, f"build:{package.dist}",
            lambda root, p=package: _build_alone(session, executor, p, root),
        )


def _build_alone(session, executor: Executor, package: Package, exec_root: ExecRoot | None
                 ) -> None:
    graph = executor.graph
    dist = Path(session.create_tmp()) / f"dist-{package.module}"
    shutil.rmtree(dist, ignore_errors=True)
    for name in graph.closure(package.dist):
        folder = graph.packages[name].folder
        source = exec_root.path(folder, executor.root) if exec_root else folder
        session.run("uv", "build", "--quiet", "--out-dir", str(dist), str(source),
                    external=True)
    # Intra-repo deps come from the wheels just built, everything else pinned by the lock.
    constraints = Path(session.create_tmp()) / "constraints.txt"
    with session.chdir(executor.root):
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


def _third_party(package: Package) -> bool:
    data = tomllib.loads((package.folder / "pyproject.toml").read_text())
    return bool(data.get("project", {}).get("dependencies"))
