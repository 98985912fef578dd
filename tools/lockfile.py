"""What the lock file pins for one environment, read without uv.

A target's environment is one workspace package plus some of its dependency groups,
installed from ``uv.lock``. The result cache keys a target by exactly that slice of
the lock, so a lock change in some other environment (a new ruff, say) leaves the
target's cached result standing. The wheelhouse session uses the same slice to know
which wheels an offline runner needs.

Stdlib only: it runs before any environment exists, on offline runners that have no
uv, and inside ``nox -l``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path


class LockError(ValueError):
    """The lock file is missing, unreadable, or does not name what was asked for.

    Its message says what to do (usually ``uv lock``), because a stale lock is the
    common cause and the session that hits it should say so in one line.

    Example::

        >>> Lock.load(Path("nope.lock"))
        LockError: nope.lock: no lock file; run `uv lock` at the repository root
    """


@dataclass(frozen=True)
class Locked:
    """One pinned distribution of the lock, as the cache key and wheelhouse see it.

    Only the fields that decide what gets installed: name, version, where it comes
    from and the hashes of its files. ``editable`` marks the workspace's own packages,
    whose contents the key hashes as sources instead.

    Example::

        >>> Lock.load(Path("uv.lock")).closure("dsv4-policy", ["test"])[0]
        Locked(name='colorama', version='0.4.6', source='registry:https://pypi.org/simple',
               hashes=('sha256:08695f5c…', 'sha256:4f1d9991…'), editable=False)
    """

    name: str
    version: str
    source: str
    hashes: tuple[str, ...]  # "sha256:…" of every sdist and wheel the lock lists
    editable: bool

    def as_record(self) -> dict[str, object]:
        """The JSON form the cache key digests (``editable`` is left out: editable
        packages are never part of a key's environment component).

        Example::

            >>> Lock.load(Path("uv.lock")).closure("dsv4-policy", ["test"])[0].as_record()
            {'name': 'colorama', 'version': '0.4.6', 'source': 'registry:https://pypi.org/simple',
             'hashes': ['sha256:08695f5c…', 'sha256:4f1d9991…']}
        """
        return {
            "name": self.name,
            "version": self.version,
            "source": self.source,
            "hashes": list(self.hashes),
        }


def normalise(name: str) -> str:
    """PEP 503 name normalisation, the form the lock uses.

    Requirements and declarations spell names freely (``Typing_Extensions``); every
    lookup goes through this so that they all find the lock's entry.

    Example::

        >>> normalise("Typing_Extensions"), normalise("dsv4.policy")
        ('typing-extensions', 'dsv4-policy')
    """
    return re.sub(r"[-_.]+", "-", name).lower()


class Lock:
    """A parsed ``uv.lock``: look packages up and take dependency closures.

    Read with ``tomllib`` rather than ``uv``, so it works before any environment
    exists and on runners that have no uv.

    Example::

        >>> lock = Lock.load(Path("uv.lock"))
        >>> lock.source, len(lock.closure("dsv4-policy", ["test"]))
        ('uv.lock', 11)
    """

    def __init__(self, data: Mapping[str, object], source: str) -> None:
        self.source = source
        self._by_name: dict[str, list[dict]] = {}
        packages = data.get("package", [])
        if not isinstance(packages, list):
            raise LockError(f"{source}: 'package' is not an array of tables")
        for raw in packages:
            if isinstance(raw, dict) and isinstance(raw.get("name"), str):
                self._by_name.setdefault(normalise(raw["name"]), []).append(raw)

    @classmethod
    def load(cls, path: Path) -> Lock:
        """Read and parse the lock at ``path``; a missing or malformed file is a
        :class:`LockError` that names it, never a bare ``OSError`` or TOML error.

        Example::

            >>> Lock.load(Path("uv.lock")).source
            'uv.lock'
        """
        try:
            return cls(tomllib.loads(Path(path).read_text()), str(path))
        except FileNotFoundError:
            raise LockError(f"{path}: no lock file; run `uv lock` at the repository root") from None
        except tomllib.TOMLDecodeError as exc:
            raise LockError(f"{path}: not valid TOML: {exc}") from exc

    def _entries(self, name: str, version: str | None) -> list[dict]:
        found = self._by_name.get(normalise(name), [])
        if version is not None:
            found = [e for e in found if e.get("version") == version]
        if not found:
            wanted = f"{name}=={version}" if version else name
            raise LockError(f"{self.source}: {wanted} is not in the lock; run `uv lock`")
        return found

    def closure(self, package: str, groups: Iterable[str] = ()) -> list[Locked]:
        """Every distribution an environment of ``package`` plus ``groups`` can hold.

        Markers are not evaluated: a dependency that only some platform installs is
        still part of the slice. That can only make a key change more often, never
        let a changed environment keep its old key. Extras are followed; the result is
        sorted by name and version, and includes ``package`` itself (editable).

        Example::

            >>> lock = Lock.load(Path("uv.lock"))
            >>> [(d.name, d.version) for d in lock.closure("dsv4-policy", ["test"])][:3]
            [('colorama', '0.4.6'), ('dsv4-policy', '0.1.0'), ('hypothesis', '6.170.17')]
            >>> lock.closure("dsv4-policy", ["nosuch"])
            LockError: uv.lock: dsv4-policy has no locked group 'nosuch'; locked groups: test
        """
        roots = self._entries(package, None)
        todo: list[tuple[str, str | None, tuple[str, ...]]] = []
        for root in roots:
            todo += _deps(root.get("dependencies", []))
            dev = root.get("dev-dependencies", {})
            for group in groups:
                if group not in dev:
                    raise LockError(
                        f"{self.source}: {package} has no locked group {group!r}; "
                        f"locked groups: {', '.join(sorted(dev)) or 'none'}"
                    )
                todo += _deps(dev[group])
        seen: dict[tuple[str, str], dict] = {
            (normalise(r["name"]), str(r.get("version"))): r for r in roots
        }
        extras_done: set[tuple[str, str, str]] = set()
        while todo:
            name, version, extras = todo.pop()
            for entry in self._entries(name, version):
                ident = (normalise(entry["name"]), str(entry.get("version")))
                if ident not in seen:
                    seen[ident] = entry
                    todo += _deps(entry.get("dependencies", []))
                for extra in extras:
                    if (*ident, extra) not in extras_done:
                        extras_done.add((*ident, extra))
                        todo += _deps(entry.get("optional-dependencies", {}).get(extra, []))
        return sorted((_locked(e) for e in seen.values()), key=lambda p: (p.name, p.version))


def _deps(raw: object) -> list[tuple[str, str | None, tuple[str, ...]]]:
    out = []
    for dep in raw if isinstance(raw, list) else []:
        if isinstance(dep, dict) and isinstance(dep.get("name"), str):
            extras = dep.get("extra", [])
            out.append((dep["name"], dep.get("version"), tuple(extras)))
    return out


def _locked(entry: Mapping[str, object]) -> Locked:
    source = entry.get("source", {})
    source = source if isinstance(source, dict) else {}
    files = [entry.get("sdist")] if isinstance(entry.get("sdist"), dict) else []
    files += [w for w in entry.get("wheels", []) if isinstance(w, dict)]
    hashes = tuple(sorted(str(f["hash"]) for f in files if "hash" in f))
    kind, where = next(iter(source.items()), ("unknown", ""))
    return Locked(
        name=normalise(str(entry["name"])),
        version=str(entry.get("version", "")),
        source=f"{kind}:{where}",
        hashes=hashes,
        editable=kind in ("editable", "virtual", "directory"),
    )
