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
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from remote_cache import RemoteCache

MODES = ("on", "off", "refresh", "require")
_HEX = set("0123456789abcdef")


class CacheError(ValueError):
    """A setting the cache cannot work with: the message says which and what is accepted."""


def _is_sha256(text: object) -> bool:
    return isinstance(text, str) and len(text) == 64 and set(text) <= _HEX


def _safe_relpath(text: object) -> bool:
    if not isinstance(text, str) or not text or "\\" in text:
        return False
    path = PurePosixPath(text)
    return not path.is_absolute() and ".." not in path.parts


@dataclass(frozen=True)
class Output:
    """One output file: its logical path (``artifacts/…`` or repo-relative) and digest."""

    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Record:
    """What a passing run left behind, enough to replay it."""

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
        data = {
            "key": self.key, "target": self.target, "status": "passed",
            "duration_s": round(self.duration_s, 3), "date": self.date, "host": self.host,
            "fingerprint": dict(self.fingerprint), "components": dict(self.components),
            "files": dict(self.files),
            "outputs": [o.__dict__ for o in self.outputs],
        }
        return json.dumps(data, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, *, key: str) -> Record | None:
        """Parse a stored record; None for anything malformed or not a pass of ``key``."""
        try:
            data = json.loads(raw)
            outputs = tuple(
                Output(str(o["path"]), str(o["sha256"]), int(o["size"])) for o in data["outputs"]
            )
            record = cls(
                key=str(data["key"]), target=str(data["target"]),
                duration_s=float(data["duration_s"]), date=str(data["date"]),
                host=str(data["host"]), fingerprint=dict(data.get("fingerprint", {})),
                components=dict(data.get("components", {})), files=dict(data.get("files", {})),
                outputs=outputs,
            )
        except (ValueError, KeyError, TypeError):
            return None
        if data.get("status") != "passed" or record.key != key:
            return None
        if not all(_is_sha256(o.sha256) and _safe_relpath(o.path) for o in outputs):
            return None
        return record


class LocalStore:
    """The on-disk cache. Writes go through a temporary file and a rename."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _write(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)

    def record(self, key: str) -> Record | None:
        path = self.root / "ac" / key
        return Record.from_json(path.read_bytes(), key=key) if path.is_file() else None

    def blob(self, sha256: str) -> bytes | None:
        path = self.root / "cas" / sha256
        if not path.is_file():
            return None
        data = path.read_bytes()
        return data if hashlib.sha256(data).hexdigest() == sha256 else None

    def put_blob(self, sha256: str, data: bytes) -> None:
        self._write(self.root / "cas" / sha256, data)

    def put_record(self, record: Record) -> None:
        self._write(self.root / "ac" / record.key, record.to_json())
        self._write(self.root / "targets" / record.target, record.key.encode())

    def latest(self, target: str) -> Record | None:
        path = self.root / "targets" / target
        return self.record(path.read_text().strip()) if path.is_file() else None

    def event(self, **fields: object) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"at": _now(), **fields}, sort_keys=True)
        with (self.root / "events.jsonl").open("a") as handle:
            handle.write(line + "\n")

    def events(self) -> list[dict]:
        path = self.root / "events.jsonl"
        if not path.is_file():
            return []
        out = []
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def clean(self) -> tuple[int, int]:
        """Remove everything; return (files, bytes) removed."""
        files = size = 0
        if self.root.is_dir():
            for path in self.root.rglob("*"):
                if path.is_file():
                    files += 1
                    size += path.stat().st_size
            shutil.rmtree(self.root)
        return files, size


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Hit:
    record: Record
    origin: str  # "local" or "remote"


class ResultCache:
    """Look up, restore and store target results under the configured mode.

    ``resolve_output`` turns a logical output path into the file to write on restore.
    """

    def __init__(
        self,
        *,
        local: LocalStore,
        remote: RemoteCache | None,
        mode: str,
        resolve_output: Callable[[str], Path],
    ) -> None:
        if mode not in MODES:
            raise CacheError(
                f"DSV4_CACHE={mode!r} is not a cache mode; accepted: {', '.join(MODES)}"
            )
        self.local = local
        self.remote = remote
        self.mode = mode
        self._resolve = resolve_output

    @classmethod
    def from_environment(
        cls, env: Mapping[str, str], *, resolve_output: Callable[[str], Path],
        warn: Callable[[str], None],
    ) -> ResultCache:
        mode = env.get("DSV4_CACHE", "on").strip().lower() or "on"
        root = Path(env.get("DSV4_CACHE_DIR") or Path.home() / ".cache" / "dsv4").expanduser()
        remote = None
        url = env.get("DSV4_REMOTE_CACHE", "").strip()
        if url and mode != "off":
            upload = env.get("DSV4_REMOTE_CACHE_UPLOAD", "").strip().lower() in ("1", "true", "yes")
            try:
                remote = RemoteCache(
                    url, token=env.get("DSV4_REMOTE_CACHE_TOKEN"), upload=upload, warn=warn
                )
            except ValueError as exc:
                raise CacheError(str(exc)) from None
        return cls(local=LocalStore(root), remote=remote, mode=mode, resolve_output=resolve_output)

    @property
    def reads(self) -> bool:
        return self.mode in ("on", "require")

    @property
    def writes(self) -> bool:
        return self.mode != "off"

    # ------------------------------------------------------------------ lookup
    def lookup(self, key: str) -> Hit | None:
        """A stored pass of ``key`` whose outputs are all intact, else None."""
        if not self.reads:
            return None
        record = self.local.record(key)
        intact = record is not None and all(
            self.local.blob(o.sha256) is not None for o in record.outputs
        )
        if record is not None and intact:
            return Hit(record, "local")
        if self.remote is None:
            return None
        raw = self.remote.get_record(key)
        record = Record.from_json(raw, key=key) if raw is not None else None
        if record is None:
            return None
        blobs = {}
        for output in record.outputs:
            data = self.remote.get_blob(output.sha256)
            if data is None:  # missing, unreachable, or not matching its sha256: a miss
                return None
            blobs[output.sha256] = data
        for sha, data in blobs.items():
            self.local.put_blob(sha, data)
        self.local.put_record(record)
        return Hit(record, "remote")

    def restore(self, record: Record) -> list[Path]:
        """Write the record's outputs back where the run left them."""
        written = []
        for output in record.outputs:
            data = self.local.blob(output.sha256)
            if data is None:
                raise CacheError(f"cache blob {output.sha256[:12]} vanished during restore")
            path = self._resolve(output.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            written.append(path)
        return written

    # ------------------------------------------------------------------ store
    def store(
        self, *, key: str, target: str, duration_s: float, fingerprint: Mapping[str, object],
        components: Mapping[str, str], files: Mapping[str, str], outputs: Mapping[str, Path],
    ) -> Record | None:
        """Record a pass: local always (unless off), remote only with uploads on."""
        if not self.writes:
            return None
        stored: list[Output] = []
        blobs: dict[str, bytes] = {}
        for logical, path in sorted(outputs.items()):
            data = path.read_bytes()
            sha = hashlib.sha256(data).hexdigest()
            blobs[sha] = data
            stored.append(Output(logical, sha, len(data)))
        record = Record(
            key=key, target=target, duration_s=duration_s, date=_now(),
            host=socket.gethostname(), fingerprint=dict(fingerprint),
            components=dict(components), files=dict(files), outputs=tuple(stored),
        )
        for sha, data in blobs.items():
            self.local.put_blob(sha, data)
        self.local.put_record(record)
        if self.remote is not None and self.remote.upload:
            # Blobs before the record: a reader never sees a record whose blobs are not up.
            sent = all(self.remote.put("cas", sha, data) for sha, data in blobs.items())
            if sent:
                self.remote.put("ac", key, record.to_json())
        return record
