"""Stored results of passing target runs: a local cache, read through to a remote one.

Layout of the local cache (``~/.cache/dsv4``, or ``DSV4_CACHE_DIR``), the same shape
as Bazel's disk cache so that a remote one mirrors it:

- ``ac/<key>``: the result record of a passing run (JSON: key, target, duration,
  date, host, the GPU fingerprint, the key's component digests, the outputs);
- ``cas/<sha256>``: output files (JUnit XML, bench JSON, reports), by content;
- ``targets/<name>``: the key of the target's latest stored run, for ``explain``;
- ``events.jsonl``: one line per hit, run and store, for ``stats``.

Only passes are stored. A record is served only when every blob it names is present
and matches its sha256, so a damaged cache costs a rerun, never a false pass.

A record is not trusted either: it may come from a shared remote or a store someone
else can write. One is served only when it parses under strict limits (1 MiB, 32
levels of nesting, typed fields), is a pass of exactly the key asked for and of the
unit asking, and names only that unit's declared outputs, as normalised relative paths
with no ``.git`` part. All of it is checked, and every destination too, before the
first file is written; files are then written atomically and never through a symlink
(``safe_fs``). Anything else is a miss with one warning line, never an exception.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import re
import shutil
import socket
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Protocol

from remote_cache import RemoteCache
from safe_fs import (
    UnsafePath,
    append_under,
    check_relative,
    check_under,
    read_regular_under,
    write_atomic_under,
)

MODES = ("on", "off", "refresh", "require")
MAX_RECORD_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_BLOB_BYTES = 512 << 20  # the remote's default cap: what one side takes, the other does
MAX_TOTAL_BYTES = 2 << 30  # all outputs of one record, held in memory while restoring
MAX_OUTPUTS = 1000
MAX_SHORT = 255  # date, host
MAX_EVENTS_BYTES = 64 << 20

_KEY = re.compile(r"[0-9a-f]{64}")
_UNIT = re.compile(r"[a-z][a-z0-9:._-]{0,99}")
# Strings (with their escapes) or brackets: what a nesting scan must tell apart.
_JSON_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)

Warn = Callable[[str], None]
Resolver = Callable[[str], tuple[Path, str]]


class CacheError(ValueError):
    """A setting the cache cannot work with: the message says which and what is accepted.

    Example::

        >>> ResultCache.from_environment({"DSV4_CACHE": "sometimes"}, ...)
        Traceback (most recent call last):
        CacheError: DSV4_CACHE='sometimes' is not a cache mode; accepted: on, off, ...
    """


class RecordError(ValueError):
    """A stored record that cannot be served; the message says what is wrong with it.

    Example::

        >>> Record.parse(b"{}", key="ab" * 32)
        Traceback (most recent call last):
        RecordError: it is not a pass (status None)
    """


class BadEntry(ValueError):
    """An entry of the local store that is there but unusable (a link, a directory, a
    FIFO, too big, or not matching its name): a miss, and a warning.

    Example::

        >>> LocalStore(root).blob(sha)  # cas/<sha> is a symlink
        Traceback (most recent call last):
        BadEntry: cas/1a2b3c4d5e6f: 'cas/1a2b…' is a symbolic link
    """


class Remote(Protocol):
    """What the cache needs of a remote: ``remote_cache.RemoteCache``, or a test double,
    so that the cache's checks can be tested against any answer a server could give.

    Example::

        >>> ResultCache(local=store, remote=RemoteCache.from_environment(os.environ,
        ...             warn=print), mode="on", resolve_output=resolve, warn=print)
    """

    upload: bool
    shown: str

    def get_record(self, key: str) -> bytes | None:
        """The bytes stored under ``ac/<key>``, or None (absent, or no answer). They are
        untrusted: the cache parses and checks them like a local record.

        Example::

            >>> remote.get_record("ab" * 32) is None
            True
        """
        ...

    def get_blob(self, sha256: str) -> bytes | None:
        """The blob ``cas/<sha256>`` whose digest matched its name, or None. The cache
        checks size and digest again against the record.

        Example::

            >>> remote.get_blob(hashlib.sha256(b"<junit/>").hexdigest())
            b'<junit/>'
        """
        ...

    def put(self, kind: str, name: str, data: bytes) -> bool:
        """Upload one entry (``kind`` 'ac' or 'cas'); True when the server took it, so
        that a record is sent only after all its blobs went up.

        Example::

            >>> remote.put("cas", hashlib.sha256(b"x").hexdigest(), b"x")
            True
        """
        ...


# --------------------------------------------------------------------------- checks
def is_key(text: object) -> bool:
    """Whether ``text`` is a cache key (64 lowercase hex): the only names used under
    ``ac/``, so that a key can never be a path.

    Example::

        >>> is_key("ab" * 32), is_key("../x")
        (True, False)
    """
    return isinstance(text, str) and _KEY.fullmatch(text) is not None


def is_sha256(text: object) -> bool:
    """Whether ``text`` can name a blob (64 lowercase hex): checked before it is used as
    a file name under ``cas/``.

    Example::

        >>> is_sha256(hashlib.sha256(b"").hexdigest()), is_sha256("C" * 64)
        (True, False)
    """
    return is_key(text)


def unit_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a unit under ``targets/``, or None when it can.

    Unit names become file names; a name that could climb out of ``targets/`` (or be
    empty) is refused before it is ever joined to a path.

    Example::

        >>> unit_name_problem("build:dsv4-policy") is None
        True
        >>> unit_name_problem("../../x")
        "'../../x' is not a unit name ([a-z][a-z0-9:._-]{0,99}, no '..')"
    """
    if isinstance(name, str) and _UNIT.fullmatch(name) and ".." not in name:
        return None
    return f"{_shown(name, 60)} is not a unit name ([a-z][a-z0-9:._-]{{0,99}}, no '..')"


def matches_declared(path: str, declared: Sequence[str]) -> bool:
    """Whether the logical ``path`` is one a unit declares with its output globs.

    Glob and path are compared segment by segment with ``fnmatchcase``, with equal
    segment counts, so a ``*`` never crosses a ``/``: ``report/*`` matches
    ``report/r.md`` but not ``report/sub/r.md``, and no glob reaches another unit's files.

    Example::

        >>> matches_declared("artifacts/bench-c128a.json", ["artifacts/bench-*.json"])
        True
        >>> matches_declared("artifacts/bench-c128a.json", ["artifacts/junit/policy.xml"])
        False
    """
    parts = path.split("/")
    for glob in declared:
        pattern = glob.split("/")
        if len(pattern) == len(parts) and all(map(fnmatchcase, parts, pattern)):
            return True
    return False


def nesting_exceeds(raw: bytes, limit: int) -> bool:
    """Whether JSON text nests arrays and objects deeper than ``limit``.

    Scans the bytes (skipping string contents) instead of parsing, so that a record
    nested 100,000 deep is refused before ``json.loads`` could recurse on it.

    Example::

        >>> nesting_exceeds(b'{"a": [[1]], "b": "[[[["}', 3), nesting_exceeds(b"[" * 99, 32)
        (False, True)
    """
    depth = 0
    for match in _JSON_TOKENS.finditer(raw):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False


def _shown(value: object, width: int = 100) -> str:
    """``repr(value)`` cut to ``width``: fit to quote an untrusted value in one line."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _why(exc: BaseException) -> str:
    """An exception in a few words, quoted safely (repr escapes control characters)."""
    text = repr(f"{type(exc).__name__}: {exc}")[1:-1]
    return text if len(text) <= 200 else text[:199] + "…"


def _globs(outputs: Sequence[str]) -> tuple[str, ...]:
    """The declared globs as a tuple; a lone string is one glob, not its letters."""
    return (outputs,) if isinstance(outputs, str) else tuple(outputs)


def _declared_text(declared: Sequence[str]) -> str:
    text = ", ".join(declared) or "nothing"
    return text if len(text) <= 120 else text[:119] + "…"


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Output:
    """One output file: its logical path (``artifacts/…`` or repo-relative) and digest,
    enough to find its blob and to check it before it is written back.

    Example::

        >>> Output("artifacts/junit/policy.xml", hashlib.sha256(b"<x/>").hexdigest(), 4)
    """

    path: str
    sha256: str
    size: int


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    data: dict[str, object] = {}
    for name, value in pairs:
        if name in data:  # parsers disagree on which copy wins: refuse both
            raise ValueError(f"duplicate field {name!r:.40}")
        data[name] = value
    return data


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number JSON allows")


def _field(data: Mapping[str, object], name: str, kind: type | tuple[type, ...]) -> object:
    value = data.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise RecordError(f"its {name!r} is {_shown(value, 40)}, not a {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "string", dict: "JSON object", list: "JSON array"}
    return "number" if isinstance(kind, tuple) else names[kind]


def _short_text(data: Mapping[str, object], name: str) -> str:
    value = _field(data, name, str)
    assert isinstance(value, str)
    if len(value) > MAX_SHORT or not value.isprintable():
        raise RecordError(f"its {name!r} is not a short printable string")
    return value


def _string_map(data: Mapping[str, object], name: str) -> dict[str, str]:
    value = _field(data, name, dict)
    assert isinstance(value, dict)
    if not all(isinstance(v, str) for v in value.values()):
        raise RecordError(f"its {name!r} maps to something other than strings")
    return dict(value)


def _outputs(data: Mapping[str, object]) -> tuple[Output, ...]:
    items = _field(data, "outputs", list)
    assert isinstance(items, list)
    if len(items) > MAX_OUTPUTS:
        raise RecordError(f"it names more than {MAX_OUTPUTS} outputs")
    outputs = []
    for item in items:
        if not isinstance(item, dict):
            raise RecordError(f"an output is {_shown(item, 40)}, not a JSON object")
        path = item.get("path")
        reason = check_relative(path)
        if reason is not None:
            raise RecordError(f"output {_shown(path)} {reason}")
        assert isinstance(path, str)
        sha, size = item.get("sha256"), item.get("size")
        if not is_sha256(sha):
            raise RecordError(f"output {_shown(path)} has sha256 {_shown(sha, 80)}")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_BLOB_BYTES:
            raise RecordError(f"output {_shown(path)} has size {_shown(size, 40)}, not an "
                              f"integer from 0 to {MAX_BLOB_BYTES}")
        outputs.append(Output(path, sha, size))  # type: ignore[arg-type]
    _check_output_set(outputs)
    return tuple(outputs)


def _check_output_set(outputs: Sequence[Output]) -> None:
    paths = [o.path for o in outputs]
    seen: set[str] = set()
    for path in paths:
        if path in seen:
            raise RecordError(f"output {_shown(path)} is named twice")
        seen.add(path)
    folders = {"/".join(p.split("/")[:n]) for p in paths for n in range(1, p.count("/") + 1)}
    for path in paths:
        if path in folders:
            raise RecordError(f"output {_shown(path)} is both a file and a folder of others")
    if sum(o.size for o in outputs) > MAX_TOTAL_BYTES:
        raise RecordError(f"its outputs add up to more than {MAX_TOTAL_BYTES} bytes")


@dataclass(frozen=True)
class Record:
    """What a passing run left behind, enough to replay it and to explain a later miss
    (the key's component digests and file digests).

    Example::

        >>> record = Record.parse(store.read_record(key), key=key)
        >>> record.target, [o.path for o in record.outputs]
        ('policy', ['artifacts/junit/policy.xml'])
    """

    key: str
    target: str
    duration_s: float
    date: str
    host: str
    fingerprint: Mapping[str, object]
    components: Mapping[str, str]
    files: Mapping[str, str]
    outputs: tuple[Output, ...]

    def to_json(self) -> bytes:
        """The record as stored under ``ac/<key>``: sorted, indented JSON.

        Example::

            >>> json.loads(record.to_json())["status"]
            'passed'
        """
        data = {
            "key": self.key, "target": self.target, "status": "passed",
            "duration_s": round(self.duration_s, 3), "date": self.date, "host": self.host,
            "fingerprint": dict(self.fingerprint), "components": dict(self.components),
            "files": dict(self.files),
            "outputs": [{"path": o.path, "sha256": o.sha256, "size": o.size}
                        for o in self.outputs],
        }
        return json.dumps(data, indent=1, sort_keys=True, allow_nan=False).encode()

    @classmethod
    def parse(cls, raw: object, *, key: str) -> Record:
        """Parse a stored record of ``key``; RecordError says why it cannot be served.

        Strict, because the bytes may come from anyone who can write to a shared cache:
        at most 1 MiB and 32 levels deep (checked before parsing), UTF-8 JSON without
        NaN or repeated fields, a pass of exactly ``key``, every field of its type
        (a JSON ``true`` is not a size), every output a safe relative path.

        Example::

            >>> Record.parse(stored_bytes, key=key).target
            'policy'
            >>> Record.parse(b"[" * 100_000, key=key)
            Traceback (most recent call last):
            RecordError: it nests deeper than 32 levels
        """
        if not isinstance(raw, (bytes, bytearray)):
            raise RecordError(f"it is a {type(raw).__name__}, not bytes")
        if len(raw) > MAX_RECORD_BYTES:
            raise RecordError(f"it is larger than {MAX_RECORD_BYTES} bytes")
        if not raw:
            raise RecordError("it is empty")
        if nesting_exceeds(bytes(raw), MAX_DEPTH):
            raise RecordError(f"it nests deeper than {MAX_DEPTH} levels")
        try:
            data = json.loads(bytes(raw).decode("utf-8"), object_pairs_hook=_no_duplicates,
                              parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            raise RecordError(f"it is not valid JSON ({_why(exc)})") from None
        if not isinstance(data, dict):
            raise RecordError(f"it is a JSON {type(data).__name__}, not an object")
        return cls._from_fields(data, key=key)

    @classmethod
    def _from_fields(cls, data: dict[str, object], *, key: str) -> Record:
        if data.get("status") != "passed":
            raise RecordError(f"it is not a pass (status {_shown(data.get('status'), 40)})")
        if data.get("key") != key:
            raise RecordError(f"it is for key {_shown(data.get('key'), 80)}, not {key}")
        duration = _field(data, "duration_s", (int, float))
        assert isinstance(duration, (int, float))
        if not math.isfinite(duration) or duration < 0:
            raise RecordError(f"its duration {_shown(duration, 40)} is not a finite number ≥ 0")
        target = _field(data, "target", str)
        fingerprint = _field(data, "fingerprint", dict)
        assert isinstance(target, str) and isinstance(fingerprint, dict)
        return cls(
            key=key, target=target, duration_s=float(duration),
            date=_short_text(data, "date"), host=_short_text(data, "host"),
            fingerprint=fingerprint, components=_string_map(data, "components"),
            files=_string_map(data, "files"), outputs=_outputs(data),
        )

    @classmethod
    def from_json(cls, raw: object, *, key: str) -> Record | None:
        """:meth:`parse`, with None for a record that cannot be served.

        Example::

            >>> Record.from_json(b"{not json", key=key) is None
            True
        """
        try:
            return cls.parse(raw, key=key)
        except RecordError:
            return None


# --------------------------------------------------------------------------- local store


class LocalStore:
    """The on-disk cache, written atomically and never through a symlink.

    Its root is configuration and trusted; every entry below it is not (another
    process, a bad copy or a person may have left anything there). Reading an entry
    that is not a plain file is a miss; writing one replaces whatever is in the way.

    Example::

        >>> store = LocalStore(Path("~/.cache/dsv4").expanduser())
        >>> store.latest("policy").key[:8]
        '1a2b3c4d'
    """

    def __init__(self, root: Path, *, warn: Warn | None = None) -> None:
        self.root = Path(root)
        self._warn = warn
        self._event_warned = False

    def read_record(self, key: str) -> bytes | None:
        """The bytes stored under ``ac/<key>``, or None when there are none.

        Raises BadEntry for an entry that is there but not a regular file of at most
        1 MiB (so that a FIFO never blocks and a link is never followed).

        Example::

            >>> store.read_record("ab" * 32) is None
            True
        """
        if not is_key(key):
            raise BadEntry(f"{_shown(key, 80)} is not a cache key")
        relative = f"ac/{key}"
        try:
            return read_regular_under(self.root, relative, limit=MAX_RECORD_BYTES)
        except UnsafePath as exc:
            raise BadEntry(str(exc)) from None

    def record(self, key: str) -> Record | None:
        """The record stored under ``key`` if it parses, else None; never raises.

        For ``explain`` and ``stats``, which only read it; serving a record takes
        :meth:`ResultCache.lookup`, which also checks it against the unit.

        Example::

            >>> store.record(key).duration_s
            118.2
        """
        try:
            raw = self.read_record(key)
            return None if raw is None else Record.parse(raw, key=key)
        except (OSError, ValueError):
            return None

    def blob(self, sha256: str, *, size: int | None = None) -> bytes | None:
        """The blob ``cas/<sha256>``, or None when it is absent.

        Raises BadEntry when it is there but unusable: not a regular file, over the
        blob cap, of another ``size`` than the record says, or not matching its name.

        Example::

            >>> store.blob(hashlib.sha256(b"<junit/>").hexdigest())
            b'<junit/>'
        """
        if not is_sha256(sha256):
            raise BadEntry(f"{_shown(sha256, 80)} is not a sha256")
        relative = f"cas/{sha256}"
        try:
            data = read_regular_under(self.root, relative, limit=MAX_BLOB_BYTES)
        except UnsafePath as exc:
            raise BadEntry(str(exc)) from None
        if data is None:
            return None
        if size is not None and len(data) != size:
            raise BadEntry(f"{relative[:15]}…: {len(data)} bytes, not the {size} recorded")
        if hashlib.sha256(data).hexdigest() != sha256:
            raise BadEntry(f"{relative[:15]}…: its content does not match its sha256")
        return data

    def put_blob(self, sha256: str, data: bytes) -> None:
        """Store ``data`` as ``cas/<sha256>``; ValueError when the name is not its digest.

        Example::

            >>> store.put_blob(hashlib.sha256(b"x").hexdigest(), b"x")
        """
        if not is_sha256(sha256) or hashlib.sha256(data).hexdigest() != sha256:
            raise BadEntry(f"{_shown(sha256, 80)} is not the sha256 of the data")
        write_atomic_under(self.root, f"cas/{sha256}", data, replace=True)

    def put_record(self, record: Record) -> None:
        """Store ``record`` under ``ac/<key>``, then point ``targets/<target>`` at it.

        The record is re-parsed first: the store never holds what a reader refuses.

        Example::

            >>> store.put_record(record); store.latest(record.target) == record
            True
        """
        problem = unit_name_problem(record.target)
        if problem is not None:
            raise BadEntry(problem)
        raw = record.to_json()
        Record.parse(raw, key=record.key)
        write_atomic_under(self.root, f"ac/{record.key}", raw, replace=True)
        write_atomic_under(self.root, f"targets/{record.target}", record.key.encode(),
                           replace=True)

    def latest(self, target: str) -> Record | None:
        """The latest stored pass of ``target``, for ``explain``; None when there is none
        or the entry is unusable (never raises).

        Example::

            >>> store.latest("policy").components["build"]
            '9f8e…'
        """
        if unit_name_problem(target) is not None:
            return None
        try:
            raw = read_regular_under(self.root, f"targets/{target}", limit=128)
            key = raw.decode("ascii").strip() if raw is not None else ""
        except (OSError, ValueError):
            return None
        return self.record(key) if is_key(key) else None

    def event(self, **fields: object) -> None:
        """Append one line to ``events.jsonl`` for ``stats``; a failure warns once and is
        otherwise ignored, since statistics must never fail a build.

        Example::

            >>> store.event(kind="hit", target="policy", origin="local", saved_s=118.2)
        """
        line = json.dumps({"at": _now(), **fields}, sort_keys=True, default=str) + "\n"
        try:
            append_under(self.root, "events.jsonl", line.encode())
        except (OSError, ValueError) as exc:
            if self._warn is not None and not self._event_warned:
                self._event_warned = True
                self._warn(f"warning: result cache: cannot log to events.jsonl ({_why(exc)})")

    def events(self) -> list[dict]:
        """The logged events, skipping lines that do not parse; [] when there is no
        usable log.

        Example::

            >>> [e["kind"] for e in store.events()]
            ['run', 'hit']
        """
        try:
            raw = read_regular_under(self.root, "events.jsonl", limit=MAX_EVENTS_BYTES)
        except (OSError, ValueError):
            return []
        out = []
        for line in (raw or b"").splitlines():
            if nesting_exceeds(line, MAX_DEPTH):
                continue
            try:
                item = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(item, dict):
                out.append(item)
        return out

    def clean(self) -> tuple[int, int]:
        """Remove everything; return (files, bytes) removed. Links are removed, never
        followed.

        Example::

            >>> store.clean()
            (42, 1048576)
        """
        files = size = 0
        if not self.root.is_dir():
            return files, size
        for folder, dirs, names in os.walk(self.root):
            for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
                info = os.lstat(os.path.join(folder, name))
                files += 1
                size += info.st_size if stat.S_ISREG(info.st_mode) else 0
        with os.scandir(self.root) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
        if not self.root.is_symlink():
            self.root.rmdir()
        return files, size


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Hit:
    """A record that may be served, and where it came from ("local" or "remote"), for
    the hit line and the ``stats`` counts.

    Example::

        >>> hit = cache.lookup(key, unit="policy", outputs=["artifacts/junit/policy.xml"])
        >>> hit.origin
        'remote'
    """

    record: Record
    origin: str


class _Refused(Exception):
    """Why a record is not served, for the one warning line. ``final``: asking the
    remote would be refused the same way (the destination is the problem)."""

    def __init__(self, what: str, *, final: bool = False) -> None:
        super().__init__(what)
        self.what = what
        self.final = final


# --------------------------------------------------------------------------- the cache
class ResultCache:
    """Look up, restore and store target results under the configured mode.

    ``resolve_output`` maps a logical output path to (base directory, path below it):
    ``artifacts/junit/x.xml -> (ARTIFACTS, "junit/x.xml")``, ``report/r.md -> (ROOT,
    "report/r.md")``. The base is trusted configuration; the path below it is not,
    and is written without following any symlink. ``warn`` receives each warning line.

    Example::

        >>> cache = ResultCache(local=LocalStore(root), remote=None, mode="on",
        ...                     resolve_output=resolve, warn=print)
        >>> hit = cache.lookup(key, unit="policy", outputs=["artifacts/junit/policy.xml"])
        >>> cache.restore(hit.record, outputs=["artifacts/junit/policy.xml"])
        [PosixPath('/repo/artifacts/junit/policy.xml')]
    """

    def __init__(
        self,
        *,
        local: LocalStore,
        remote: Remote | None,
        mode: str,
        resolve_output: Resolver,
        warn: Warn,
    ) -> None:
        if mode not in MODES:
            raise CacheError(
                f"DSV4_CACHE={mode!r} is not a cache mode; accepted: {', '.join(MODES)}"
            )
        self.local = local
        self.remote = remote
        self.mode = mode
        self._resolve = resolve_output
        self._warn = warn

    @classmethod
    def from_environment(
        cls, env: Mapping[str, str], *, resolve_output: Resolver, warn: Warn,
    ) -> ResultCache:
        """The cache the environment configures: ``DSV4_CACHE`` (mode), ``DSV4_CACHE_DIR``
        (local root) and the remote's ``DSV4_REMOTE_CACHE*`` variables.

        A bad setting raises CacheError naming the variable, before any work is done.

        Example::

            >>> ResultCache.from_environment({"DSV4_CACHE": "off"}, resolve_output=resolve,
            ...                              warn=print).writes
            False
        """
        mode = env.get("DSV4_CACHE", "on").strip().lower() or "on"
        if mode not in MODES:
            raise CacheError(
                f"DSV4_CACHE={mode!r} is not a cache mode; accepted: {', '.join(MODES)}"
            )
        root = Path(env.get("DSV4_CACHE_DIR") or Path.home() / ".cache" / "dsv4").expanduser()
        remote = None
        if mode != "off":
            try:
                remote = RemoteCache.from_environment(env, warn=warn)
            except ValueError as exc:
                raise CacheError(str(exc)) from None
        return cls(local=LocalStore(root, warn=warn), remote=remote, mode=mode,
                   resolve_output=resolve_output, warn=warn)

    @property
    def reads(self) -> bool:
        """Whether stored passes are served (``on``, ``require``).

        Example::

            >>> cache.reads  # DSV4_CACHE=refresh runs everything and stores the passes
            False
        """
        return self.mode in ("on", "require")

    @property
    def writes(self) -> bool:
        """Whether passes are stored (every mode but ``off``).

        Example::

            >>> cache.writes
            True
        """
        return self.mode != "off"

    def _say(self, unit: object, text: str) -> None:
        name = unit if unit_name_problem(unit) is None else _shown(unit, 60)
        self._warn(f"warning: result cache: {name}: {text}")

    # ------------------------------------------------------------------ lookup
    def lookup(self, key: str, *, unit: str, outputs: Sequence[str]) -> Hit | None:
        """A stored pass of ``key`` by ``unit`` that may be restored, else None.

        ``outputs`` are the unit's declared output globs. A record is served only when
        it is a pass of exactly ``key`` and ``unit``, names only files ``outputs``
        matches, has every blob present and intact, and every destination can be
        written without following a link. A remote record is checked the same way
        before anything of it is copied into the local store. Anything else is a
        miss with one warning line.

        Example::

            >>> hit = cache.lookup(key, unit="policy", outputs=["artifacts/junit/policy.xml"])
            >>> hit.origin, hit.record.duration_s
            ('local', 118.2)
        """
        if not self.reads:
            return None
        try:
            return self._lookup(key, unit, _globs(outputs))
        except Exception as exc:
            # The boundary. The cache only saves time: whatever a damaged store or a
            # hostile record makes go wrong below, the answer is a miss and a rerun,
            # never a failed build, never a false pass.
            self._say(unit, f"lookup of {_shown(key, 20)} failed ({_why(exc)}); "
                            "running the target")
            return None

    def _lookup(self, key: str, unit: str, declared: tuple[str, ...]) -> Hit | None:
        problem = unit_name_problem(unit) or (None if is_key(key) else
                                              f"{_shown(key, 80)} is not a cache key")
        if problem is not None:
            self._say(unit, f"lookup refused: {problem}")
            return None
        try:
            hit = self._local_hit(key, unit, declared)
        except _Refused as refusal:
            self._say(unit, f"local record {key[:8]} refused: {refusal.what}; "
                            "running the target")
            if refusal.final:
                return None
            hit = None
        if hit is not None or self.remote is None:
            return hit
        try:
            return self._remote_hit(key, unit, declared)
        except _Refused as refusal:
            self._say(unit, f"remote record {key[:8]} refused: {refusal.what}; "
                            "running the target")
            return None

    def _accept(self, raw: object, key: str, unit: str, declared: Sequence[str]) -> Record:
        """The record in ``raw`` if ``unit`` may be served it; _Refused says why not."""
        try:
            record = Record.parse(raw, key=key)
        except RecordError as exc:
            raise _Refused(str(exc)) from None
        if record.target != unit:
            raise _Refused(f"it is for target {_shown(record.target, 60)}, not {unit}")
        for output in record.outputs:
            if not matches_declared(output.path, declared):
                raise _Refused(f"output {_shown(output.path)} is not an output {unit} "
                               f"declares ({_declared_text(declared)})")
        return record

    def _local_blobs(self, record: Record) -> dict[str, bytes] | None:
        """Every blob of ``record`` from the local store; None when one is absent."""
        blobs = {}
        for output in record.outputs:
            try:
                data = self.local.blob(output.sha256, size=output.size)
            except BadEntry as exc:
                raise _Refused(f"output {_shown(output.path)}: {exc}") from None
            if data is None:
                return None
            blobs[output.sha256] = data
        return blobs

    def _destinations(self, record: Record) -> list[tuple[Path, str]]:
        """Where each output goes, all checked writable without following a link."""
        places: list[tuple[Path, str]] = []
        for output in record.outputs:
            base, relative = self._resolve(output.path)
            problem = check_relative(relative) or check_under(Path(base), relative)
            if problem is not None:
                raise _Refused(f"output {_shown(output.path)} cannot be written: {problem}",
                               final=True)
            places.append((Path(base), relative))
        if len(set(places)) != len(places):
            raise _Refused("two outputs resolve to the same file", final=True)
        return places

    def _local_hit(self, key: str, unit: str, declared: Sequence[str]) -> Hit | None:
        try:
            raw = self.local.read_record(key)
        except BadEntry as exc:
            raise _Refused(str(exc)) from None
        if raw is None:
            return None
        record = self._accept(raw, key, unit, declared)
        if self._local_blobs(record) is None:
            return None
        self._destinations(record)
        return Hit(record, "local")

    def _remote_hit(self, key: str, unit: str, declared: Sequence[str]) -> Hit | None:
        assert self.remote is not None
        raw = self.remote.get_record(key)
        if raw is None:
            return None
        record = self._accept(raw, key, unit, declared)
        self._destinations(record)
        blobs = {}
        for output in record.outputs:
            data = self.remote.get_blob(output.sha256)
            if data is None:  # absent, unreachable or corrupt: the remote said so if needed
                return None
            if (not isinstance(data, bytes) or len(data) != output.size
                    or hashlib.sha256(data).hexdigest() != output.sha256):
                raise _Refused(f"output {_shown(output.path)}: the remote blob does not "
                               "match the record")
            blobs[output.sha256] = data
        try:  # blobs first: a local reader never sees a record whose blobs are not there
            for sha, data in blobs.items():
                self.local.put_blob(sha, data)
            self.local.put_record(record)
        except (OSError, ValueError) as exc:
            raise _Refused(f"it could not be copied into the local cache ({_why(exc)})",
                           final=True) from None
        return Hit(record, "remote")

    # ------------------------------------------------------------------ restore
    def restore(self, record: Record, *, outputs: Sequence[str]) -> list[Path]:
        """Write the record's outputs back where the run left them; return the paths.

        Everything is checked again first (the record, its paths against the declared
        ``outputs`` globs, every blob, every destination), so that a refused record
        writes nothing. Each file is then written atomically and never through a
        symlink: a concurrent reader sees the old file or the new one, whole.
        On any failure it warns once and returns the paths written so far, fewer than
        ``record.outputs``: the caller then runs the unit instead.

        Example::

            >>> cache.restore(hit.record, outputs=["artifacts/junit/policy.xml"])
            [PosixPath('/repo/artifacts/junit/policy.xml')]
        """
        unit = getattr(record, "target", None)
        written: list[Path] = []
        try:
            plan = self._plan(record, _globs(outputs))
            for (base, relative), data in plan:
                written.append(write_atomic_under(base, relative, data))
        except _Refused as refusal:
            key = getattr(record, "key", None)
            self._say(unit, f"restore of record {_shown(key, 20)} refused: {refusal.what}; "
                            "running the target")
        except Exception as exc:
            # The boundary (see lookup): a restore that cannot finish is a rerun.
            self._say(unit, f"restore failed after {len(written)} of "
                            f"{len(getattr(record, 'outputs', ()))} files ({_why(exc)}); "
                            "running the target")
        return written

    def _plan(self, record: Record, declared: tuple[str, ...]
              ) -> list[tuple[tuple[Path, str], bytes]]:
        checked = self._accept(record.to_json(), record.key, record.target, declared)
        blobs = self._local_blobs(checked)
        if blobs is None:
            raise _Refused("a blob is missing from the local cache")
        places = self._destinations(checked)
        return [(place, blobs[o.sha256]) for place, o in zip(places, checked.outputs,
                                                               strict=True)]

    # ------------------------------------------------------------------ store
    def store(
        self, *, key: str, target: str, duration_s: float, fingerprint: Mapping[str, object],
        components: Mapping[str, str], files: Mapping[str, str], outputs: Mapping[str, Path],
        declared: Sequence[str],
    ) -> Record | None:
        """Record a pass: local always (unless off), remote only with uploads on.

        ``outputs`` maps each logical path to the file the run wrote: where
        ``resolve_output`` puts it, or the same path below another folder (an
        execution root); ``declared`` are the unit's output globs. An output they do
        not match, a file reached through a symlink below that folder or not a regular
        file, or a record a reader would refuse is not stored (one warning, None): the
        cache never holds what it would not serve, nor a file a link pointed it at.
        Blobs go up before the record, so a remote reader never sees a record
        without its blobs. Returns the record when the local store or the remote
        took it.

        Example::

            >>> cache.store(key=key, target="policy", duration_s=118.2, fingerprint={},
            ...             components={...}, files={...},
            ...             outputs={"artifacts/junit/policy.xml": junit},
            ...             declared=["artifacts/junit/policy.xml"]).key == key
            True
        """
        if not self.writes:
            return None
        try:
            return self._store(key, target, duration_s, fingerprint, components, files,
                               outputs, _globs(declared))
        except _Refused as refusal:
            self._say(target, f"not storing the pass of {_shown(key, 20)}: {refusal.what}")
        except Exception as exc:
            # The boundary (see lookup): a pass that cannot be stored is still a pass.
            self._say(target, f"storing the pass of {_shown(key, 20)} failed ({_why(exc)})")
        return None

    def _store(self, key: str, target: str, duration_s: float,
               fingerprint: Mapping[str, object], components: Mapping[str, str],
               files: Mapping[str, str], outputs: Mapping[str, Path],
               declared: tuple[str, ...]) -> Record | None:
        problem = unit_name_problem(target) or (None if is_key(key) else
                                                f"{_shown(key, 80)} is not a cache key")
        if problem is not None:
            raise _Refused(problem)
        stored: list[Output] = []
        blobs: dict[str, bytes] = {}
        for logical, path in sorted(outputs.items()):
            data = self._read_output(logical, path, target, declared)
            sha = hashlib.sha256(data).hexdigest()
            blobs[sha] = data
            stored.append(Output(logical, sha, len(data)))
        record = Record(
            key=key, target=target, duration_s=duration_s, date=_now(),
            host=socket.gethostname()[:MAX_SHORT], fingerprint=dict(fingerprint),
            components=dict(components), files=dict(files), outputs=tuple(stored),
        )
        raw = record.to_json()
        self._accept(raw, key, target, declared)  # the checks a reader applies
        kept = self._store_locally(record, blobs)
        if self.remote is not None and self.remote.upload:
            # Blobs before the record: a reader never sees a record whose blobs are not up.
            sent = all(self.remote.put("cas", sha, data) for sha, data in blobs.items())
            if sent and self.remote.put("ac", key, raw):
                kept = True
        return record if kept else None

    def _read_output(self, logical: str, path: Path, unit: str,
                     declared: Sequence[str]) -> bytes:
        problem = check_relative(logical)
        if problem is not None:
            raise _Refused(f"output {_shown(logical)} {problem}")
        if not matches_declared(logical, declared):
            raise _Refused(f"output {_shown(logical)} is not an output {unit} declares "
                           f"({_declared_text(declared)})")
        _, relative = self._resolve(logical)  # the base is where a restore writes it
        problem = check_relative(relative)
        if problem is not None:
            raise _Refused(f"output {_shown(logical)} resolves to {relative!r:.100}, which "
                           f"{problem}")
        # The file may be where a restore puts it or in an execution root; either way it
        # must end in the same path below a folder, read from there without following a
        # link: a run that left a symlink to a secret never gets that secret uploaded.
        given, parts = Path(os.path.abspath(path)).parts, tuple(relative.split("/"))
        if given[-len(parts):] != parts:
            raise _Refused(f"output {_shown(logical)} was given as {str(path)!r:.100}, which "
                           f"does not end in {relative!r:.100}")
        try:
            data = read_regular_under(Path(*given[:-len(parts)]), relative,
                                      limit=MAX_BLOB_BYTES)
        except UnsafePath as exc:
            raise _Refused(f"output {_shown(logical)}: {exc}") from None
        if data is None:
            raise _Refused(f"output {_shown(logical)} is gone")
        return data

    def _store_locally(self, record: Record, blobs: Mapping[str, bytes]) -> bool:
        try:
            for sha, data in blobs.items():
                self.local.put_blob(sha, data)
            self.local.put_record(record)
        except (OSError, ValueError) as exc:
            self._say(record.target, f"could not store the pass of {record.key[:8]} locally "
                                     f"({_why(exc)})")
            return False
        return True
