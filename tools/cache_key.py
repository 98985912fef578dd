"""The content key of one target run: a sha256 over everything its result depends on.

A target's result is a function of declared inputs only (the hermetic rules in
``hermetic.py`` make that true), so equal keys mean the stored result stands. The key
is the digest of named *components*, each digested on its own, so that
``nox -s cache -- explain TARGET`` can say which one changed:

- ``declaration``: the target's own fields, normalised;
- ``build``: the build definitions (``noxfile.py``, ``tools/``, ``.importlinter``,
  ``ci/bootstrap.txt``, the root ``pyproject.toml``);
- ``sources:<dist>``: file contents (never mtimes) of the target's package and of
  every intra-repo package in its environment;
- ``inputs``: other repository files the target declares it reads (stored baselines);
- ``artifacts``: files of the artifacts folder the target declares it reads (the last
  bench results, for the report);
- ``environment``: the lock's slice for the target's package and groups; on a
  non-hermetic run (``--no-venv``) also each installed version beside the lock's;
- ``variables``: the values of the variables the target lets in, and of ``CI``;
- ``interpreter``: Python implementation, version and platform;
- ``gpu``: for targets that need one, or whose result depends on whether there is one
  (the report), the GPU (names, compute capability, driver, count; none at all on a
  CPU machine) and whether the run is hermetic;
- ``vllm-sources``: on a non-hermetic run with ``DSV4_VLLM_SOURCES`` set, for targets
  whose environment holds vLLM only, the bundle's manifest (the vLLM wheel's sha256, the
  sources zip's and every import-time wheel's), never the folder's path;
- ``arguments``: the extra arguments given after ``--``.

Stdlib only, and cheap: a cache hit must cost about a second, before any
environment is built.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import platform
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import vllm_sources
from lockfile import Lock, Locked

SCHEMA = "dsv4-result-cache/1"
BUILD_FILES = ("noxfile.py", ".importlinter", "ci/bootstrap.txt", "pyproject.toml")
BUILD_FOLDERS = ("tools",)
# Never inputs: caches and outputs that live inside the tree but are not sources.
_JUNK_PARTS = {"__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache", ".benchmarks"}


def sha256_bytes(data: bytes) -> str:
    """The hex sha256 of ``data``: the one digest every file and component uses.

    >>> sha256_bytes(b"")
    'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'
    """
    return hashlib.sha256(data).hexdigest()


def digest_json(value: object) -> str:
    """sha256 of a canonical JSON form: key order and spacing never change a digest.

    >>> digest_json({"b": 1, "a": 2}) == digest_json({"a": 2, "b": 1})
    True
    >>> digest_json({"a": 2, "b": 1})
    'd3626ac30a87e6f7a6428233b3c68299976865fa5508e4267c5415c76af7a772'
    """
    return sha256_bytes(json.dumps(value, sort_keys=True, separators=(",", ":")).encode())


@dataclass(frozen=True)
class Component:
    """One named input of a key. ``files`` maps path -> sha256 for file components.

    A key is made of components, each digested on its own, so that ``explain`` can
    say which input changed; ``detail`` is what it shows beside the digest, and
    ``files`` lets it name the changed files.

    >>> c = file_component("sources:dsv4-policy", SourceTree(Path(".")), ["packages/policy"])
    >>> c.name, c.digest[:12], c.detail
    ('sources:dsv4-policy', '911963f4562e', '92 files')
    """

    name: str
    digest: str
    detail: object = None
    files: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Key:
    """A target run's key and the components it was computed from.

    The components are kept, not only the digest, so that a stored pass can record
    them and a later miss can be compared with it.

    >>> key = compute(name="policy", …)  # or units.key_for(graph, unit, [], inputs)
    >>> key.target, [c.name for c in key.components]
    ('policy', ['declaration', 'build', 'sources:dsv4-policy', 'environment', 'variables',
                'interpreter', 'arguments'])
    """

    target: str
    components: tuple[Component, ...]

    @property
    def digest(self) -> str:
        """The key itself: a digest over the schema, the target name and every
        component's name and digest, in order. Equal digests mean the stored result
        stands; ``SCHEMA`` changes when the key's meaning does.

        >>> key.digest
        'aba86dc1c9afc44f3716152defa279a600498179942472db0d5fcf811c55c852'
        """
        return digest_json([SCHEMA, self.target, [[c.name, c.digest] for c in self.components]])

    def component_digests(self) -> dict[str, str]:
        """``{component name: digest}``: what a stored record keeps for ``explain``.

        >>> key.component_digests()["build"]
        '1b985346058457db1c35ddc43d75d32dc26431e1a295d208235b32ac10f237e5'
        """
        return {c.name: c.digest for c in self.components}

    def files(self) -> dict[str, str]:
        """Every file any component hashed, ``{path: sha256}``, so that a miss can be
        explained file by file.

        >>> list(key.files())[:3]
        ['noxfile.py', '.importlinter', 'ci/bootstrap.txt']
        """
        merged: dict[str, str] = {}
        for c in self.components:
            merged.update(c.files)
        return merged


class SourceTree:
    """Content digests of the files under a repository root, listed by git.

    git names the files (tracked, plus untracked files it does not ignore), so build
    outputs and caches never enter a key; the contents are hashed here from the
    working tree, so an uncommitted edit changes the key as it should. Outside a git
    checkout every file counts, less the usual caches. One tree is shared by every key
    of a nox run, so each file is listed and hashed once.

    >>> tree = SourceTree(Path("."))
    >>> sorted(tree.files_under("packages/*/pyproject.toml"))
    ['packages/evals/pyproject.toml', 'packages/kernels/pyproject.toml',
     'packages/policy/pyproject.toml', 'packages/vllm_integration/pyproject.toml']
    """

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._listing: list[str] | None = None
        self._digests: dict[str, str] = {}

    def _list(self) -> list[str]:
        if self._listing is None:
            try:
                top = subprocess.run(
                    ["git", "rev-parse", "--show-toplevel"],
                    cwd=self.root, capture_output=True, check=True, text=True,
                ).stdout.strip()
                if Path(top).resolve() != self.root:  # a folder inside another checkout
                    raise subprocess.CalledProcessError(1, "git rev-parse")
                out = subprocess.run(
                    ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                    cwd=self.root, capture_output=True, check=True,
                ).stdout.decode()
                names = sorted({n for n in out.split("\0") if n})
            except (OSError, subprocess.CalledProcessError):
                ignored = _ignore_rules(self.root / ".gitignore")
                names = sorted(
                    rel for p in self.root.rglob("*")
                    if p.is_file()
                    and not _ignored(rel := p.relative_to(self.root).as_posix(), ignored)
                )
            self._listing = names
        return self._listing

    def files_under(self, prefix: str) -> dict[str, str]:
        """``{relative path: sha256}`` of every existing file at or below ``prefix``.

        ``prefix`` may be a glob (``packages/*/pyproject.toml``): then it names the
        files it matches segment by segment, a ``*`` never crossing a ``/``.

        >>> SourceTree(Path(".")).files_under("tools")
        {'tools/cache_key.py': '3f1c…', …}
        """
        prefix = prefix.rstrip("/")
        pattern = prefix.split("/") if is_glob(prefix) else None
        out: dict[str, str] = {}
        for name in self._list():
            if pattern is not None:
                if not segments_match(name, pattern):
                    continue
            elif prefix and name != prefix and not name.startswith(prefix + "/"):
                continue
            if name not in self._digests:
                path = self.root / name
                if not path.is_file():  # deleted in the working tree, or a dangling link
                    continue
                self._digests[name] = sha256_bytes(path.read_bytes())
            out[name] = self._digests[name]
        return out


def is_glob(text: str) -> bool:
    """True when ``text`` holds glob characters.

    >>> is_glob("packages/*/pyproject.toml"), is_glob("tools")
    (True, False)
    """
    return any(ch in text for ch in "*?[")


def segments_match(path: str, pattern: Sequence[str]) -> bool:
    """``path`` matches ``pattern`` (split on ``/``) segment by segment.

    >>> segments_match("packages/kernels/pyproject.toml", ["packages", "*", "pyproject.toml"])
    True
    >>> segments_match("packages/a/b/pyproject.toml", ["packages", "*", "pyproject.toml"])
    False
    """
    parts = path.split("/")
    return len(parts) == len(pattern) and all(
        fnmatch.fnmatchcase(part, glob) for part, glob in zip(parts, pattern, strict=True)
    )


def _ignore_rules(gitignore: Path) -> list[tuple[str, bool]]:
    """(pattern, anchored) pairs of a .gitignore, for trees that are not git checkouts
    (a copy of the working tree on a GPU runner): enough of git's rules for plain
    names, globs and root-anchored paths."""
    rules = [(".git", False)]
    if gitignore.is_file():
        for line in gitignore.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "!")):
                rules.append((line.strip("/"), line.startswith("/")))
    return rules


def _ignored(rel: str, rules: list[tuple[str, bool]]) -> bool:
    parts = rel.split("/")
    for pattern, anchored in rules:
        if anchored:
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(rel, pattern + "/*"):
                return True
        elif any(fnmatch.fnmatch(part, pattern) for part in parts):
            return True
    return False


def file_component(name: str, tree: SourceTree, prefixes: Iterable[str]) -> Component:
    """A component over the files at or below each of ``prefixes`` (folders, files or
    globs): digested by content, with the file digests kept for ``explain``.

    A declared input that git does not list (ignored, or generated at run time) is
    hashed from disk instead, so it still counts.

    >>> c = file_component("build", SourceTree(Path(".")), [*BUILD_FILES, *BUILD_FOLDERS])
    >>> c.detail, list(c.files)[:2]
    ('36 files', ['noxfile.py', '.importlinter'])
    """
    files: dict[str, str] = {}
    for prefix in prefixes:
        found = tree.files_under(prefix)
        files.update(found or _on_disk(tree.root, prefix))
    return Component(name, digest_json(files), detail=f"{len(files)} files", files=files)


def _on_disk(root: Path, prefix: str) -> dict[str, str]:
    """A declared input that git ignores (a folder extracted at run time, say): every
    file under it, hashed from disk; nothing when it does not exist yet."""
    if is_glob(prefix):
        return {}
    base = root / prefix
    paths = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
    return {p.relative_to(root).as_posix(): sha256_bytes(p.read_bytes()) for p in paths
            if not _JUNK_PARTS & set(p.parts)}


def artifact_component(artifacts: Path | None, patterns: Sequence[str]) -> Component:
    """Files another target leaves in the artifacts folder (e.g. the last bench results
    that the report shows): hashed as they are now, so that a new bench run changes the
    report's key.

    ``patterns`` start with ``artifacts/``; no artifacts folder (or no match yet) is an
    empty component, not an error.

    >>> artifact_component(Path("artifacts"), ["artifacts/bench/*.json"]).detail
    '0 files'
    """
    files: dict[str, str] = {}
    for pattern in patterns:
        glob = pattern.partition("/")[2]
        for path in sorted(artifacts.glob(glob)) if artifacts is not None else []:
            if path.is_file():
                files[f"artifacts/{path.relative_to(artifacts).as_posix()}"] = sha256_bytes(
                    path.read_bytes()
                )
    return Component("artifacts", digest_json(files), detail=f"{len(files)} files", files=files)


def interpreter() -> dict[str, str]:
    """The interpreter a session runs with: the one running nox (venvs are made from it).

    Keyed because a new Python version or platform can change any result.

    >>> interpreter()
    {'implementation': 'cpython', 'version': '3.11.7', 'platform': 'linux-x86_64'}
    """
    return {
        "implementation": sys.implementation.name,
        "version": platform.python_version(),
        "platform": sysconfig.get_platform(),
    }


def installed_versions(locked: Sequence[Locked]) -> dict[str, str]:
    """The version this interpreter has of each locked third-party distribution.

    A non-hermetic run (``--no-venv``) uses whatever is installed, not the lock, so its
    key includes these; editable (workspace) packages are skipped, their sources
    being keyed already.

    >>> installed_versions(Lock.load(Path("uv.lock")).closure("dsv4-policy", ["test"])[:4])
    {'colorama': '(not installed)', 'hypothesis': '6.170.17', 'iniconfig': '2.3.1'}
    """
    from importlib import metadata

    out: dict[str, str] = {}
    for dist in locked:
        if dist.editable:
            continue
        try:
            out[dist.name] = metadata.version(dist.name)
        except metadata.PackageNotFoundError:
            out[dist.name] = "(not installed)"
    return out


def version_drift(locked: Sequence[Locked], installed: Mapping[str, str]) -> list[str]:
    """Human lines for each distribution whose installed version is not the lock's.

    Shown to warn that a non-hermetic result may not match what CI would get.

    >>> version_drift(Lock.load(Path("uv.lock")).closure("dsv4-policy", ["test"]),
    ...               {"pytest": "7.0.0"})
    ['pytest: locked 9.2.0, installed 7.0.0']
    """
    lines = []
    for dist in locked:
        have = installed.get(dist.name)
        if have is not None and have != dist.version:
            lines.append(f"{dist.name}: locked {dist.version}, installed {have}")
    return lines


@dataclass
class KeyInputs:
    """Everything a key needs beyond the target itself, gathered once per nox run.

    Gathered once so that the tree listing, the lock and the build component are
    shared by every target's key, keeping a cache hit cheap.

    >>> inputs = KeyInputs(root=ROOT, tree=SourceTree(ROOT), lock=Lock.load(ROOT / "uv.lock"),
    ...                    outer_env=os.environ, hermetic=True, artifacts=ROOT / "artifacts")
    >>> inputs.build_component().detail
    '36 files'
    """

    root: Path
    tree: SourceTree
    lock: Lock
    outer_env: Mapping[str, str]
    hermetic: bool
    gpu: Mapping[str, object] | None = None
    artifacts: Path | None = None
    # What a non-hermetic environment really holds: the running interpreter's packages
    # under --no-venv, a reused venv's under --no-install.
    installed: Callable[[Sequence[Locked]], Mapping[str, str]] | None = None
    note: str = ""  # why the run is not hermetic, e.g. "--no-install"
    # vLLM's Python sources (DSV4_VLLM_SOURCES), already checked; "auto" reads the variable
    # from ``outer_env`` on first use, so that ``cache explain`` keys as the run does.
    sources: vllm_sources.Bundle | str | None = "auto"
    _build: Component | None = None

    def build_component(self) -> Component:
        """The ``build`` component (``BUILD_FILES`` and ``BUILD_FOLDERS``), computed on
        first use and then reused: every key of the run has the same one.

        >>> inputs.build_component().name, inputs.build_component().digest[:12]
        ('build', '1b9853460584')
        """
        if self._build is None:
            self._build = file_component("build", self.tree, [*BUILD_FILES, *BUILD_FOLDERS])
        return self._build

    def vllm_bundle(self) -> vllm_sources.Bundle | None:
        """The sources bundle this run puts on the path of targets that hold vLLM: only
        on a non-hermetic run (a venv installs vLLM from the lock), and checked against
        the lock; a damaged bundle raises :class:`vllm_sources.SourcesError`.

        >>> KeyInputs(…, outer_env={"DSV4_VLLM_SOURCES": ".vllm-sources"},
        ...           hermetic=False).vllm_bundle().describe()
        '0.33.0 (python sources, no compiled extensions)'
        """
        if self.hermetic:
            return None
        if self.sources == "auto":
            self.sources = vllm_sources.from_environment(self.outer_env, self.root, self.lock)
        return self.sources


def compute(
    *,
    name: str,
    declaration: Mapping[str, object],
    package_folders: Mapping[str, Path],
    lock_slices: Sequence[tuple[str, Sequence[str]]],
    variables: Iterable[str],
    set_env: Mapping[str, str],
    keyed_by_gpu: bool,
    extra_paths: Sequence[str],
    arguments: Sequence[str],
    inputs: KeyInputs,
) -> Key:
    """The key of one run of target ``name``.

    ``package_folders`` maps each intra-repo distribution in the environment to its
    folder; ``lock_slices`` lists (workspace package, groups) whose locked closure the
    environment holds. ``extra_paths`` are the declared inputs: ``artifacts/…`` ones go
    to the ``artifacts`` component, the rest to ``inputs``. The GPU component is added
    only when ``keyed_by_gpu``.

    >>> key = compute(
    ...     name="policy", declaration=graph.targets["policy"].declaration(),
    ...     package_folders={"dsv4-policy": ROOT / "packages/policy"},
    ...     lock_slices=[("dsv4-policy", ["test"])], variables=[], set_env={},
    ...     keyed_by_gpu=False, extra_paths=[], arguments=[], inputs=inputs)
    >>> key.digest[:8], [c.name for c in key.components][:3]
    ('aba86dc1', ['declaration', 'build', 'sources:dsv4-policy'])
    """
    components = [
        Component("declaration", digest_json(declaration), detail=declaration),
        inputs.build_component(),
    ]
    for dist, folder in sorted(package_folders.items()):
        rel = folder.resolve().relative_to(inputs.root).as_posix()
        components.append(file_component(f"sources:{dist}", inputs.tree, [rel]))
    repo_paths = [p for p in extra_paths if not p.startswith("artifacts/")]
    if repo_paths:
        components.append(file_component("inputs", inputs.tree, repo_paths))
    produced = [p for p in extra_paths if p.startswith("artifacts/")]
    if produced:
        components.append(artifact_component(inputs.artifacts, produced))

    locked: dict[tuple[str, str], Locked] = {}
    for package, groups in lock_slices:
        for dist in inputs.lock.closure(package, groups):
            locked[(dist.name, dist.version)] = dist
    pinned = sorted(locked.values(), key=lambda d: (d.name, d.version))
    environment: dict[str, object] = {
        "hermetic": inputs.hermetic,
        "locked": [d.as_record() for d in pinned if not d.editable],
    }
    sources = (inputs.vllm_bundle()
               if any(d.name == vllm_sources.VLLM for d in pinned) else None)
    if not inputs.hermetic:
        installed = dict((inputs.installed or installed_versions)(pinned))
        if sources is not None:  # what the run imports first: the bundle's
            names = {d.name for d in pinned}
            installed.update({n: v for n, v in sources.versions().items() if n in names})
        environment["installed"] = installed
        if inputs.note:
            environment["note"] = inputs.note
    components.append(Component(
        "environment", digest_json(environment),
        detail=f"{len(environment['locked'])} locked distributions"
        + ("" if inputs.hermetic else ", non-hermetic: installed versions included"),
    ))
    if sources is not None:
        components.append(Component(
            "vllm-sources", digest_json(sources.key_record()),
            detail=f"non-hermetic: {sources.summary()}, manifest {sources.digest[:12]}",
        ))

    names = sorted({"CI", *variables})
    values = {n: inputs.outer_env.get(n) for n in names}
    values.update({f"set_env:{k}": v for k, v in sorted(set_env.items())})
    components.append(Component("variables", digest_json(values), detail=values))
    components.append(Component("interpreter", digest_json(interpreter()), detail=interpreter()))
    if keyed_by_gpu:
        gpu = {**(inputs.gpu or {}), "hermetic": inputs.hermetic}
        components.append(Component("gpu", digest_json(gpu), detail=gpu))
    components.append(Component("arguments", digest_json(list(arguments)), detail=list(arguments)))
    return Key(target=name, components=tuple(components))
