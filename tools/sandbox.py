"""Execution roots: a unit runs among exactly the files its cache key hashed.

A cached pass is only as good as the claim that nothing outside the key could change
it. Bazel makes that true by construction: an action runs in a sandbox holding its
declared inputs only. This module does the same for a unit. Its execution root is a
fresh folder (``.nox/_sandbox/<unit>/``) that mirrors the repository's layout but holds
only the files in the key, each copied and checked against the digest the key was made
of. A test, conftest or data file that the key did not hash (an ignored file, one
excluded by ``.git/info/exclude``, another package's) is simply not there, so it can
neither be collected nor read; an import of an unhashed module of our own packages
finds nothing either, because the run's ``PYTHONPATH`` puts the execution root's
sources first and the interpreter drops every path that leads back into the
repository (``sandbox_site/sitecustomize.py``).

The run writes its artifacts inside the execution root too (``artifacts/`` there,
pre-filled with the artifacts the key names). Afterwards only the files that match the
unit's declared output globs are brought back, atomically and without following links.

Stdlib only, and cheap: copying a unit's few hundred files costs milliseconds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cache_key import segments_match

SITE_DIR = Path(__file__).resolve().parent / "sandbox_site"
HIDE_VARIABLE = "DSV4_SANDBOX_HIDE"  # read by sandbox_site/sitecustomize.py


class SandboxError(RuntimeError):
    """An execution root could not be made as the key describes it: a file changed
    between hashing and copying, so the run would not be the one its key names.

    >>> raise SandboxError("tools/x.py changed after the cache key was computed")
    Traceback (most recent call last):
    SandboxError: tools/x.py changed after the cache key was computed
    """


@dataclass(frozen=True)
class ExecRoot:
    """One unit's execution root.

    ``root`` mirrors the repository (``root / "packages/policy"`` …); ``artifacts`` is
    where the run's ``DSV4_ARTIFACTS_DIR`` points; ``inputs`` maps each file copied in
    to its sha256, so that :func:`collect` can tell outputs from inputs.

    >>> exec_root = create(Path(".nox/_sandbox/policy"), repo_root=Path("."),
    ...                    artifacts_dir=Path("artifacts"), files=key.files())
    >>> exec_root.artifacts
    PosixPath('.nox/_sandbox/policy/artifacts')
    """

    root: Path
    artifacts: Path
    inputs: Mapping[str, str]

    def path(self, repo_path: Path, repo_root: Path) -> Path:
        """The execution root's copy of a repository path.

        >>> exec_root.path(Path("/repo/packages/policy"), Path("/repo"))
        PosixPath('/repo/.nox/_sandbox/policy/packages/policy')
        """
        return self.root / Path(repo_path).resolve().relative_to(repo_root)


def _copy_checked(source: Path, dest: Path, sha256: str) -> None:
    """Copy ``source`` to ``dest`` unless its content no longer has the key's digest."""
    data = source.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SandboxError(
            f"{source} changed after the cache key was computed; run the session again"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    shutil.copymode(source, dest)


def create(
    dest: Path, *, repo_root: Path, artifacts_dir: Path, files: Mapping[str, str],
) -> ExecRoot:
    """Make ``dest`` the execution root holding exactly ``files`` (``{path: sha256}``).

    Paths under ``artifacts/`` come from ``artifacts_dir``, the rest from
    ``repo_root``. Anything at ``dest`` before is removed first.

    >>> root = create(Path(".nox/_sandbox/policy"), repo_root=Path("."),
    ...               artifacts_dir=Path("artifacts"), files=key.files())
    >>> sorted(p.name for p in (root.root / "packages").iterdir())
    ['policy']
    """
    dest = Path(dest)
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    shutil.rmtree(dest, ignore_errors=True)
    artifacts = dest / "artifacts"
    artifacts.mkdir(parents=True)
    for name, sha in sorted(files.items()):
        head, _, rest = name.partition("/")
        if head == "artifacts":
            _copy_checked(artifacts_dir / rest, artifacts / rest, sha)
        else:
            _copy_checked(repo_root / name, dest / name, sha)
    return ExecRoot(root=dest, artifacts=artifacts, inputs=dict(files))


def collect(exec_root: ExecRoot, declared: Sequence[str]) -> dict[str, Path]:
    """The run's outputs: files of the execution root that match a declared glob and
    that the run wrote (an input copied in and left unchanged is not an output).

    ``artifacts/…`` globs are matched in the execution root's artifacts folder, the
    others against repository-relative paths; the result maps each logical path to
    the file to bring back.

    >>> collect(exec_root, ["artifacts/junit/policy.xml"])
    {'artifacts/junit/policy.xml': PosixPath('.nox/_sandbox/policy/artifacts/junit/policy.xml')}
    """
    found: dict[str, Path] = {}
    root = exec_root.root
    for current, dirs, names in os.walk(root, followlinks=False):
        here = Path(current)
        dirs[:] = [d for d in dirs if not (here / d).is_symlink()]
        for name in names:
            path = here / name
            if path.is_symlink() or not path.is_file():
                continue
            logical = path.relative_to(root).as_posix()
            if not any(segments_match(logical, glob.split("/")) for glob in declared):
                continue
            sha = exec_root.inputs.get(logical)
            if sha is not None and hashlib.sha256(path.read_bytes()).hexdigest() == sha:
                continue
            found[logical] = path
    return found


def run_environment(exec_root: ExecRoot, source_folders: Sequence[Path], repo_root: Path,
                    plugins: Path) -> dict[str, str]:
    """What a sandboxed run's environment adds: ``PYTHONPATH`` (the start-up guard, the
    pytest plugins, then the execution root's copy of each package's ``src``), the real
    source folders to hide, and where artifacts go.

    >>> run_environment(exec_root, [Path("/repo/packages/policy")], Path("/repo"),
    ...                 Path("/repo/tools/pytest_plugins"))
    {'PYTHONPATH': '…/_sandbox/policy/tools/sandbox_site:…/_sandbox/policy/tools/pytest_plugins:…',
     'DSV4_SANDBOX_HIDE': '/repo/packages/policy/src', 'DSV4_ARTIFACTS_DIR': '…/artifacts'}
    """
    site = exec_root.path(SITE_DIR, repo_root)
    paths = [site, exec_root.path(plugins, repo_root)]
    paths += [exec_root.path(folder, repo_root) / "src" for folder in source_folders]
    every_src = sorted(str(p) for p in Path(repo_root).glob("packages/*/src"))
    return {
        "PYTHONPATH": os.pathsep.join(str(p) for p in paths),
        HIDE_VARIABLE: os.pathsep.join(every_src),
        "DSV4_ARTIFACTS_DIR": str(exec_root.artifacts),
    }
