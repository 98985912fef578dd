"""A record is not trusted: a poisoned or damaged cache entry costs a rerun, never a file.

Every case builds a scratch checkout (a noxfile, a package's conftest, ``.git/config``,
other targets' artifacts, files outside the checkout that symlinks point at), plants a
record in the local store or serves it from a fake remote, and checks that the lookup
is a miss with exactly one warning naming the unit and the path, and that not one file
anywhere (checkout, outside, the local cache) changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from result_cache import (
    MAX_RECORD_BYTES,
    LocalStore,
    Output,
    Record,
    ResultCache,
    matches_declared,
    nesting_exceeds,
)
from safe_fs import UnsafePath, check_relative, check_under, write_atomic_under

TOOLS = Path(__file__).resolve().parents[1]
UNIT = "policy"
DECLARED = ("artifacts/junit/policy.xml",)
WIDE = ("*", "*/*", "*/*/*", "*/*/*/*")  # a unit that may write anything: only path rules hold


# --------------------------------------------------------------------------- scratch world
@dataclass
class World:
    """A checkout, the folder outside it that links point at, and a cache to test."""

    root: Path  # tmp_path: everything the snapshot covers
    repo: Path
    outside: Path
    cache_dir: Path
    rng: random.Random
    warnings: list[str] = field(default_factory=list)

    @property
    def artifacts(self) -> Path:
        return self.repo / "artifacts"

    def resolve(self, logical: str) -> tuple[Path, str]:
        head, _, rest = logical.partition("/")
        return (self.artifacts, rest) if head == "artifacts" else (self.repo, logical)

    def cache(self, remote: FakeRemote | None = None) -> ResultCache:
        return ResultCache(local=LocalStore(self.cache_dir, warn=self.warnings.append),
                           remote=remote, mode="on", resolve_output=self.resolve,
                           warn=self.warnings.append)

    def key(self) -> str:
        return self.rng.randbytes(32).hex()

    def data(self, size: int = 200) -> bytes:
        return self.rng.randbytes(size)

    def snapshot(self) -> dict[str, tuple]:
        """Every entry under ``root`` with what it is and holds; links are read, never
        followed, so a changed link target shows as the target's own change."""
        entries: dict[str, tuple] = {}
        for folder, dirs, files in os.walk(self.root):
            for name in dirs + files:
                path = Path(folder) / name
                relative = str(path.relative_to(self.root))
                if path.is_symlink():
                    entries[relative] = ("link", os.readlink(path))
                elif path.is_dir():
                    entries[relative] = ("dir",)
                elif path.is_file():
                    entries[relative] = ("file", path.read_bytes())
                else:
                    entries[relative] = ("special", path.lstat().st_mode)
        return entries


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> World:
    rng = random.Random(zlib.crc32(request.node.nodeid.encode()))
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    files = {
        repo / "noxfile.py": b"# the noxfile\n" + rng.randbytes(64),
        repo / "packages/policy/tests/conftest.py": rng.randbytes(64),
        repo / ".git/config": b"[core]\n" + rng.randbytes(32),
        repo / "artifacts/bench-c128a.json": rng.randbytes(128),
        repo / "artifacts/junit/evals.xml": rng.randbytes(128),
        outside / "secret.txt": rng.randbytes(64),
        outside / "dir/keep.txt": rng.randbytes(64),
    }
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return World(tmp_path, repo, outside, tmp_path / "cache", rng)


@dataclass
class FakeRemote:
    """A remote cache in memory, with the calls it got."""

    records: dict[str, bytes] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    upload: bool = False
    shown: str = "fake://remote"
    calls: list[tuple[str, str]] = field(default_factory=list)

    def get_record(self, key: str) -> bytes | None:
        self.calls.append(("get", f"ac/{key}"))
        return self.records.get(key)

    def get_blob(self, sha256: str) -> bytes | None:
        self.calls.append(("get", f"cas/{sha256}"))
        return self.blobs.get(sha256)

    def put(self, kind: str, name: str, data: bytes) -> bool:
        self.calls.append(("put", f"{kind}/{name}"))
        (self.records if kind == "ac" else self.blobs)[name] = data
        return True


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_fields(key: str, outputs: dict[str, bytes], *, target: str = UNIT) -> dict:
    """The JSON fields of a well-formed record: tests change one field at a time."""
    return {
        "key": key, "target": target, "status": "passed", "duration_s": 12.5,
        "date": "2026-01-02T03:04:05+00:00", "host": "builder", "fingerprint": {},
        "components": {"build": "1" * 64}, "files": {"packages/policy/x.py": "2" * 64},
        "outputs": [{"path": p, "sha256": sha(d), "size": len(d)} for p, d in outputs.items()],
    }


def plant(world: World, key: str, raw: bytes, blobs: list[bytes],
          remote: FakeRemote | None = None) -> None:
    """Put a record and its blobs in the local store (or the fake remote)."""
    if remote is not None:
        remote.records[key] = raw
        remote.blobs.update({sha(b): b for b in blobs})
        return
    for folder in ("ac", "cas"):
        (world.cache_dir / folder).mkdir(parents=True, exist_ok=True)
    (world.cache_dir / "ac" / key).write_bytes(raw)
    for blob in blobs:
        (world.cache_dir / "cas" / sha(blob)).write_bytes(blob)


def encode(fields: dict) -> bytes:
    return json.dumps(fields, indent=1).encode()


def assert_one_warning(world: World, *needles: str) -> None:
    assert len(world.warnings) == 1, world.warnings
    [line] = world.warnings
    assert "\n" not in line and line.startswith("warning: result cache: ")
    for needle in needles:
        assert needle in line, (needle, line)


ORIGINS = ["local", "remote"]


def _remote(origin: str) -> FakeRemote | None:
    return FakeRemote() if origin == "remote" else None


def refused(world: World, origin: str, key: str, raw: bytes, blobs: list[bytes], *,
            unit: str = UNIT, declared: tuple[str, ...] = DECLARED) -> None:
    """Plant ``raw``, look it up, and check it is a miss that changed nothing."""
    remote = _remote(origin)
    plant(world, key, raw, blobs, remote)
    before = world.snapshot()
    assert world.cache(remote).lookup(key, unit=unit, outputs=declared) is None
    assert world.snapshot() == before


# --------------------------------------------------------------------------- paths
POISONED = [
    "noxfile.py",
    ".git/config",
    ".GIT/config",
    "packages/policy/tests/conftest.py",
    "artifacts/bench-c128a.json",  # another target's artifact
    "artifacts/junit/evals.xml",
    "artifacts/../noxfile.py",
    "artifacts/junit/../../noxfile.py",
    "artifacts/./junit/policy.xml",
    "artifacts//junit/policy.xml",
    "artifacts/junit/policy.xml/",
    "./artifacts/junit/policy.xml",
    "artifacts\\junit\\policy.xml",
    "artifacts/junit/policy.xml\x00",
    "artifacts/junit/\x1b[2Jpolicy.xml",
    "",
]
UNSAFE_ANYWHERE = [  # refused even by a unit whose globs match everything
    ".git/config",
    ".GIT/config",
    "packages/.Git/hooks/pre-commit",
    "artifacts/../noxfile.py",
    "artifacts/./x",
    "artifacts//x",
    "artifacts/x/",
    "artifacts\\..\\noxfile.py",
    "artifacts/x\x00y",
    "artifacts/\u202ex",
]


@pytest.mark.parametrize("origin", ORIGINS)
@pytest.mark.parametrize("path", POISONED, ids=repr)
def test_a_record_naming_a_file_the_unit_does_not_declare_is_refused(
        world: World, origin: str, path: str) -> None:
    key, body = world.key(), world.data()
    refused(world, origin, key, encode(record_fields(key, {path: body})), [body])
    assert_one_warning(world, f"{UNIT}: {origin} record {key[:8]} refused", repr(path)[:30])


@pytest.mark.parametrize("origin", ORIGINS)
@pytest.mark.parametrize("path", UNSAFE_ANYWHERE, ids=repr)
def test_an_unsafe_path_is_refused_whatever_the_globs(world: World, origin: str,
                                                      path: str) -> None:
    key, body = world.key(), world.data()
    refused(world, origin, key, encode(record_fields(key, {path: body})), [body],
            declared=WIDE)
    assert_one_warning(world, "refused", repr(path)[:20])


@pytest.mark.parametrize("origin", ORIGINS)
def test_absolute_paths_are_refused(world: World, origin: str) -> None:
    key, body = world.key(), world.data()
    path = str(world.repo / "noxfile.py")
    refused(world, origin, key, encode(record_fields(key, {path: body})), [body],
            declared=(path,))  # even a unit that declares it
    assert_one_warning(world, "is absolute", repr(path)[:30])


@pytest.mark.parametrize("origin", ORIGINS)
def test_one_bad_output_means_no_output_is_written(world: World, origin: str) -> None:
    key, good, bad = world.key(), world.data(), world.data()
    fields = record_fields(key, {"artifacts/junit/policy.xml": good, "noxfile.py": bad})
    refused(world, origin, key, encode(fields), [good, bad])
    assert not (world.artifacts / "junit/policy.xml").exists()
    assert_one_warning(world, "'noxfile.py'")


@pytest.mark.parametrize("origin", ORIGINS)
def test_a_path_through_a_symlinked_folder_is_refused(world: World, origin: str) -> None:
    (world.artifacts / "junit").rename(world.outside / "junit")
    (world.artifacts / "junit").symlink_to(world.outside / "junit")
    key, body = world.key(), world.data()
    refused(world, origin, key, encode(record_fields(key, {DECLARED[0]: body})), [body])
    assert not (world.outside / "junit/policy.xml").exists()
    assert_one_warning(world, "'artifacts/junit/policy.xml'", "symbolic link")
    if origin == "remote":  # refused before anything was copied into the local store
        assert not world.cache_dir.exists()


def test_a_symlinked_folder_in_the_checkout_is_refused(world: World) -> None:
    (world.repo / "report").symlink_to(world.outside / "dir")
    key, body = world.key(), world.data()
    fields = record_fields(key, {"report/r.md": body}, target="c128a-report")
    refused(world, "local", key, encode(fields), [body], unit="c128a-report",
            declared=("report/*",))
    assert_one_warning(world, "c128a-report", "'report/r.md'", "symbolic link")


def test_a_directory_in_an_outputs_place_is_refused(world: World) -> None:
    (world.artifacts / "junit/policy.xml").mkdir()
    (world.artifacts / "junit/policy.xml/inside").write_bytes(world.data())
    key, body = world.key(), world.data()
    refused(world, "local", key, encode(record_fields(key, {DECLARED[0]: body})), [body])
    assert_one_warning(world, "'artifacts/junit/policy.xml'", "is a directory")


@pytest.mark.parametrize("dangling", [False, True])
@pytest.mark.parametrize("origin", ORIGINS)
def test_a_symlink_in_an_outputs_place_is_replaced_not_followed(
        world: World, origin: str, dangling: bool) -> None:
    target = world.outside / ("nothing-here" if dangling else "secret.txt")
    link = world.artifacts / "junit/policy.xml"
    link.symlink_to(target)
    key, body = world.key(), world.data()
    remote = _remote(origin)
    plant(world, key, encode(record_fields(key, {DECLARED[0]: body})), [body], remote)
    before = world.snapshot()
    cache = world.cache(remote)
    hit = cache.lookup(key, unit=UNIT, outputs=DECLARED)
    assert hit is not None and hit.origin == origin
    assert cache.restore(hit.record, outputs=DECLARED) == [link]
    assert not link.is_symlink() and link.read_bytes() == body
    after = world.snapshot()
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    assert {p for p in changed if p.split("/")[0] != "cache"} == {"repo/artifacts/junit/policy.xml"}
    if dangling:
        assert not target.exists()
    else:
        assert target.read_bytes() == before["outside/secret.txt"][1]
    assert world.warnings == []


def test_a_forged_record_object_is_refused_by_restore(world: World) -> None:
    body = world.data()
    cache = world.cache()
    cache.local.put_blob(sha(body), body)
    before = world.snapshot()
    forged = Record(key=world.key(), target=UNIT, duration_s=1.0, date="d", host="h",
                    fingerprint={}, components={}, files={},
                    outputs=(Output("noxfile.py", sha(body), len(body)),))
    assert cache.restore(forged, outputs=DECLARED) == []
    assert world.snapshot() == before
    assert_one_warning(world, "restore of record", "'noxfile.py'")


def test_restore_checks_every_blob_before_writing(world: World) -> None:
    first, second = world.data(), world.data()
    cache = world.cache()
    cache.local.put_blob(sha(first), first)  # the second blob is missing
    outputs = ("artifacts/junit/policy.xml", "artifacts/bench-policy.json")
    record = Record(key=world.key(), target=UNIT, duration_s=1.0, date="d", host="h",
                    fingerprint={}, components={}, files={},
                    outputs=(Output(outputs[0], sha(first), len(first)),
                             Output(outputs[1], sha(second), len(second))))
    before = world.snapshot()
    assert cache.restore(record, outputs=outputs) == []
    assert world.snapshot() == before
    assert_one_warning(world, "blob is missing")


# --------------------------------------------------------------------------- record fields
def _variants(key: str, body: bytes) -> dict[str, tuple[bytes, str]]:
    """Records that differ from a good one in one way, each with the reason to expect."""
    good = record_fields(key, {DECLARED[0]: body})

    def with_(**changes: object) -> bytes:
        return encode({**good, **changes})

    def output(**changes: object) -> bytes:
        return with_(outputs=[{**good["outputs"][0], **changes}])

    deep = b"[" * 100_000 + b"]" * 100_000
    padded = {**good, "fingerprint": {"pad": "x" * (2 * MAX_RECORD_BYTES)}}
    return {
        "another target": (with_(target="evals"), "for target 'evals'"),
        "another key": (with_(key="c" * 64), "for key 'cccc"),
        "a failure": (with_(status="failed"), "not a pass"),
        "no status": (encode({k: v for k, v in good.items() if k != "status"}), "not a pass"),
        "empty": (b"", "it is empty"),
        "invalid JSON": (b"{not json", "not valid JSON"),
        "a JSON array": (b"[]", "not an object"),
        "not UTF-8": (with_(host="h").replace(b'"h"', b'"\xff"'), "UnicodeDecodeError"),
        "size 1e999": (output(size=1).replace(b'"size": 1', b'"size": 1e999'), "has size inf"),
        "negative size": (output(size=-1), "has size -1"),
        "bool size": (output(size=True), "has size True"),
        "float size": (output(size=float(len(body))), f"has size {float(len(body))}"),
        "huge size": (output(size=10**40), "has size 1000"),
        "size of 5000 digits": (output(size=1).replace(b'"size": 1', b'"size": ' + b"9" * 5000),
                                "4300 digits"),
        "duration 1e999": (with_(duration_s=1).replace(b'"duration_s": 1', b'"duration_s": 1e999'),
                           "duration inf"),
        "duration NaN": (with_(duration_s=1).replace(b'"duration_s": 1', b'"duration_s": NaN'),
                         "NaN"),
        "negative duration": (with_(duration_s=-3), "duration -3"),
        "bool duration": (with_(duration_s=False), "'duration_s' is False"),
        "uppercase sha": (output(sha256=sha(body).upper()), "has sha256"),
        "short sha": (output(sha256=sha(body)[:63]), "has sha256"),
        "100,000-deep nesting": (deep, "nests deeper than 32"),
        "100,000-deep fingerprint": (
            encode(good).replace(b'"fingerprint": {}', b'"fingerprint": ' + deep),
            "nests deeper than 32"),
        "2 MiB record": (encode(padded), "larger than 1048576 bytes"),
        "a repeated field": (encode(good)[:-2] + b', "key": "' + b"d" * 64 + b'"\n}',
                             "duplicate field 'key'"),
        "a long host": (with_(host="h" * 1000), "'host' is not a short"),
        "an escape in the date": (with_(date="\x1b[2J2026"), "'date' is not a short"),
        "components not strings": (with_(components={"build": 1}), "'components' maps"),
        "files not an object": (with_(files=["x"]), "'files' is ['x']"),
        "fingerprint not an object": (with_(fingerprint="gpu"), "'fingerprint' is 'gpu'"),
        "outputs not a list": (with_(outputs={"path": DECLARED[0]}), "'outputs' is {"),
        "an output not an object": (with_(outputs=[DECLARED[0]]), "an output is"),
        "an output named twice": (with_(outputs=good["outputs"] * 2), "is named twice"),
    }


VARIANTS = list(_variants("0" * 64, b"x"))


@pytest.mark.parametrize("origin", ORIGINS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_malformed_record_is_a_miss_with_one_warning(world: World, origin: str,
                                                        variant: str) -> None:
    key, body = world.key(), world.data()
    raw, reason = _variants(key, body)[variant]
    refused(world, origin, key, raw, [body])
    assert_one_warning(world, f"{UNIT}: {origin} record {key[:8]} refused", reason)


def test_the_good_record_of_those_variants_is_served(world: World) -> None:
    key, body = world.key(), world.data()
    plant(world, key, encode(record_fields(key, {DECLARED[0]: body})), [body])
    hit = world.cache().lookup(key, unit=UNIT, outputs=DECLARED)
    assert hit is not None and hit.record.outputs[0].size == len(body)
    assert world.warnings == []


def test_nesting_is_measured_without_recursion() -> None:
    assert not nesting_exceeds(b'{"a": [[1]], "b": "[[[[[[", "c": "\\"[[["}', 3)
    assert nesting_exceeds(b'{"a": [[[1]]]}', 3)
    assert nesting_exceeds(b"[" * 1_000_000, 32)
    assert Record.from_json(b"[" * 1_000_000, key="0" * 64) is None


# --------------------------------------------------------------------------- unit names
@pytest.mark.parametrize("name", ["../../x", "", "..", "Policy", "a/b", "x" * 101, "a..b"])
def test_a_bad_unit_name_is_never_a_path(world: World, name: str) -> None:
    cache = world.cache()
    junit = world.artifacts / "junit/policy.xml"
    junit.write_bytes(world.data())
    before = world.snapshot()
    key = world.key()
    assert cache.store(key=key, target=name, duration_s=1.0, fingerprint={}, components={},
                       files={}, outputs={DECLARED[0]: junit}, declared=DECLARED) is None
    assert cache.lookup(key, unit=name, outputs=DECLARED) is None
    assert world.snapshot() == before
    assert len(world.warnings) == 2 and all("not a unit name" in w for w in world.warnings)
    assert cache.local.latest(name) is None


def test_a_record_whose_target_climbs_out_is_refused(world: World) -> None:
    key, body = world.key(), world.data()
    fields = record_fields(key, {DECLARED[0]: body}, target="../../x")
    refused(world, "local", key, encode(fields), [body])
    assert_one_warning(world, "is for target '../../x', not policy")


def test_a_bad_key_is_refused(world: World) -> None:
    assert world.cache().lookup("../ac/x", unit=UNIT, outputs=DECLARED) is None
    assert_one_warning(world, "is not a cache key")


# --------------------------------------------------------------------------- the local store
def _no_hang(call: Callable[[], object], seconds: float = 10) -> object:
    """Run ``call`` in a thread: a FIFO opened for reading would block the test forever."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked (a FIFO was opened?)"
    return result[0] if result else None


def _spoil(path: Path, kind: str, outside: Path, good: bytes) -> None:
    """Put a ``kind`` of entry where ``path`` should be a regular file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "directory":
        path.mkdir()
        (path / "inside").write_bytes(good)
    elif kind == "dangling link":
        path.symlink_to(outside / "nothing-here")
    elif kind == "link out":  # to a perfectly good copy outside the cache
        copy = outside / f"copy-of-{path.name}"
        copy.write_bytes(good)
        path.symlink_to(copy)
    elif kind == "FIFO":
        os.mkfifo(path)


ENTRY_KINDS = ["directory", "dangling link", "link out", "FIFO"]


def _stored_pass(world: World, cache: ResultCache, key: str, body: bytes) -> Record | None:
    junit = world.artifacts / "junit/policy.xml"
    junit.write_bytes(body)
    return cache.store(key=key, target=UNIT, duration_s=2.0, fingerprint={}, components={},
                       files={}, outputs={DECLARED[0]: junit}, declared=DECLARED)


@pytest.mark.parametrize("entry", ["record", "blob"])
@pytest.mark.parametrize("kind", ENTRY_KINDS)
def test_a_store_entry_that_is_not_a_file_is_a_miss_and_is_replaced(
        world: World, kind: str, entry: str) -> None:
    key, body = world.key(), world.data()
    raw = encode(record_fields(key, {DECLARED[0]: body}))
    plant(world, key, raw, [body])
    spoiled = world.cache_dir / ("ac" if entry == "record" else "cas") / (
        key if entry == "record" else sha(body))
    _spoil(spoiled, kind, world.outside, raw if entry == "record" else body)
    outside_before = {p: v for p, v in world.snapshot().items() if p.startswith("outside")}
    cache = world.cache()
    assert _no_hang(lambda: cache.lookup(key, unit=UNIT, outputs=DECLARED)) is None
    assert_one_warning(world, f"{UNIT}: local record {key[:8]} refused")

    world.warnings.clear()
    assert _no_hang(lambda: _stored_pass(world, cache, key, body)) is not None
    assert world.warnings == []
    assert spoiled.is_file() and not spoiled.is_symlink()
    assert cache.lookup(key, unit=UNIT, outputs=DECLARED) is not None
    outside_after = {p: v for p, v in world.snapshot().items() if p.startswith("outside")}
    assert outside_after == outside_before  # no link was followed out of the cache


@pytest.mark.parametrize("folder", ["ac", "cas", "targets"])
@pytest.mark.parametrize("kind", ["file", "link out"])
def test_a_file_or_link_where_a_store_folder_should_be(world: World, folder: str,
                                                       kind: str) -> None:
    key, body = world.key(), world.data()
    world.cache_dir.mkdir()
    place = world.cache_dir / folder
    if kind == "file":
        place.write_bytes(world.data())
    else:
        place.symlink_to(world.outside / "dir", target_is_directory=True)
    outside_before = {p: v for p, v in world.snapshot().items() if p.startswith("outside")}
    cache = world.cache()
    assert cache.lookup(key, unit=UNIT, outputs=DECLARED) is None
    assert _stored_pass(world, cache, key, body) is not None
    assert place.is_dir() and not place.is_symlink()
    assert cache.lookup(key, unit=UNIT, outputs=DECLARED) is not None
    assert cache.local.latest(UNIT).key == key
    outside_after = {p: v for p, v in world.snapshot().items() if p.startswith("outside")}
    assert outside_after == outside_before


def test_a_store_that_cannot_be_written_warns_and_never_raises(world: World) -> None:
    world.cache_dir.write_bytes(b"not a folder")
    cache = world.cache()
    assert _stored_pass(world, cache, world.key(), world.data()) is None
    assert_one_warning(world, "could not store the pass")
    cache.local.event(kind="run")  # the log cannot be written either: one more line, once
    cache.local.event(kind="run")
    assert len(world.warnings) == 2 and cache.local.events() == []


def test_events_never_block_or_follow_links(world: World) -> None:
    world.cache_dir.mkdir()
    os.mkfifo(world.cache_dir / "events.jsonl")
    store = LocalStore(world.cache_dir, warn=world.warnings.append)
    _no_hang(lambda: store.event(kind="hit"))
    assert _no_hang(store.events) == []
    assert_one_warning(world, "events.jsonl")
    (world.cache_dir / "events.jsonl").unlink()
    (world.cache_dir / "events.jsonl").write_bytes(b"[" * 100_000 + b'\n"x"\n{"kind": "run"}\n')
    assert store.events() == [{"kind": "run"}]


# --------------------------------------------------------------------------- the remote
def test_a_remote_hit_is_copied_over_a_broken_local_entry(world: World) -> None:
    key, body = world.key(), world.data()
    remote = FakeRemote()
    plant(world, key, encode(record_fields(key, {DECLARED[0]: body})), [body], remote)
    (world.cache_dir / "ac" / key).mkdir(parents=True)
    cache = world.cache(remote)
    hit = cache.lookup(key, unit=UNIT, outputs=DECLARED)
    assert hit is not None and hit.origin == "remote"
    assert_one_warning(world, "local record", "not a regular file")
    assert cache.lookup(key, unit=UNIT, outputs=DECLARED).origin == "local"
    assert cache.restore(hit.record, outputs=DECLARED)[0].read_bytes() == body


def test_a_remote_blob_that_lies_is_refused_and_nothing_is_copied(world: World) -> None:
    key, body = world.key(), world.data()
    remote = FakeRemote()
    plant(world, key, encode(record_fields(key, {DECLARED[0]: body})), [], remote)
    remote.blobs[sha(body)] = world.data()  # a remote that does not check what it serves
    assert world.cache(remote).lookup(key, unit=UNIT, outputs=DECLARED) is None
    assert_one_warning(world, "remote blob does not match")
    assert not world.cache_dir.exists()


def test_a_refused_remote_record_downloads_no_blob(world: World) -> None:
    key, body = world.key(), world.data()
    remote = FakeRemote()
    plant(world, key, encode(record_fields(key, {"noxfile.py": body})), [body], remote)
    assert world.cache(remote).lookup(key, unit=UNIT, outputs=DECLARED) is None
    assert remote.calls == [("get", f"ac/{key}")]


def test_a_remote_that_raises_is_a_miss(world: World) -> None:
    class Broken(FakeRemote):
        def get_record(self, key: str) -> bytes | None:
            raise ConnectionResetError("reset by peer")

    assert world.cache(Broken()).lookup(world.key(), unit=UNIT, outputs=DECLARED) is None
    assert_one_warning(world, "lookup of", "ConnectionResetError")


def test_uploads_send_blobs_before_the_record(world: World) -> None:
    remote = FakeRemote(upload=True)
    key, body = world.key(), world.data()
    record = _stored_pass(world, world.cache(remote), key, body)
    assert record is not None
    assert [c for c in remote.calls if c[0] == "put"] == [("put", f"cas/{sha(body)}"),
                                                          ("put", f"ac/{key}")]
    reader = World(world.root, world.repo, world.outside, world.root / "cache2", world.rng)
    assert reader.cache(remote).lookup(key, unit=UNIT, outputs=DECLARED).origin == "remote"


# --------------------------------------------------------------------------- store
def test_store_refuses_an_undeclared_output(world: World) -> None:
    remote = FakeRemote(upload=True)
    cache = world.cache(remote)
    nox = world.repo / "noxfile.py"
    assert cache.store(key=world.key(), target=UNIT, duration_s=1.0, fingerprint={},
                       components={}, files={}, outputs={"noxfile.py": nox},
                       declared=DECLARED) is None
    assert_one_warning(world, "not storing", "'noxfile.py'", "not an output policy declares")
    assert not world.cache_dir.exists() and remote.calls == []


def test_store_never_reads_through_a_symlinked_output(world: World) -> None:
    remote = FakeRemote(upload=True)
    junit = world.artifacts / "junit/policy.xml"
    junit.symlink_to(world.outside / "secret.txt")
    assert world.cache(remote).store(
        key=world.key(), target=UNIT, duration_s=1.0, fingerprint={}, components={},
        files={}, outputs={DECLARED[0]: junit}, declared=DECLARED) is None
    assert_one_warning(world, "symbolic link")
    assert not world.cache_dir.exists() and remote.calls == []


def test_store_refuses_a_file_that_is_not_at_the_outputs_path(world: World) -> None:
    cache = world.cache()
    assert cache.store(key=world.key(), target=UNIT, duration_s=1.0, fingerprint={},
                       components={}, files={}, outputs={DECLARED[0]: world.repo / "noxfile.py"},
                       declared=DECLARED) is None
    assert_one_warning(world, "does not end in 'junit/policy.xml'")


def test_store_reads_an_output_from_an_execution_root(world: World) -> None:
    exec_root = world.root / "exec"
    junit = exec_root / "artifacts/junit/policy.xml"
    junit.parent.mkdir(parents=True)
    body = world.data()
    junit.write_bytes(body)
    cache = world.cache()
    key = world.key()
    assert cache.store(key=key, target=UNIT, duration_s=1.0, fingerprint={}, components={},
                       files={}, outputs={DECLARED[0]: junit}, declared=DECLARED) is not None
    hit = cache.lookup(key, unit=UNIT, outputs=DECLARED)
    assert cache.restore(hit.record, outputs=DECLARED)[0].read_bytes() == body
    assert world.warnings == []


def test_store_never_reads_through_a_symlinked_folder_of_an_execution_root(
        world: World) -> None:
    exec_root = world.root / "exec"
    (exec_root / "artifacts").mkdir(parents=True)
    (world.outside / "dir/policy.xml").write_bytes(world.data())
    (exec_root / "artifacts/junit").symlink_to(world.outside / "dir")
    cache = world.cache(FakeRemote(upload=True))
    assert cache.store(key=world.key(), target=UNIT, duration_s=1.0, fingerprint={},
                       components={}, files={}, outputs={DECLARED[0]: exec_root /
                                                         "artifacts/junit/policy.xml"},
                       declared=DECLARED) is None
    assert_one_warning(world, "'junit' in 'junit/policy.xml' is a symbolic link")
    assert not world.cache_dir.exists() and cache.remote.calls == []


# --------------------------------------------------------------------------- safe_fs
def test_check_relative() -> None:
    assert check_relative("junit/policy.xml") is None
    assert check_relative("a/.gitignore") is None  # only the .git folder itself is refused
    for bad in ("", "/x", "a//b", "a/./b", "a/../b", "a/", ".git", "x/.gIT/y", "a\\b",
                "a\x00b", "a\nb", "a\x7fb", "\ud800", 7, None, b"x", "x" * 300,
                "/".join(["abc"] * 300)):
        assert check_relative(bad) is not None, bad


def test_write_atomic_under_never_follows_a_link(world: World) -> None:
    base = world.artifacts
    (base / "linked").symlink_to(world.outside / "dir", target_is_directory=True)
    before = world.snapshot()
    with pytest.raises(UnsafePath, match="symbolic link"):
        write_atomic_under(base, "linked/keep.txt", b"changed")
    assert check_under(base, "linked/keep.txt") is not None
    assert world.snapshot() == before
    path = write_atomic_under(base, "new/deeper/file.bin", b"data")
    assert path.read_bytes() == b"data" and path == base / "new/deeper/file.bin"
    assert not [p for p in world.root.rglob(".tmp-*")]


def test_the_glob_match_is_segment_by_segment() -> None:
    assert matches_declared("report/r.md", ["report/*"])
    assert not matches_declared("report/sub/r.md", ["report/*"])
    assert not matches_declared("artifacts/junit/x.xml", ["artifacts/*.xml"])
    assert matches_declared("artifacts/bench-swa.json", ["artifacts/bench-*.json"])
    assert not matches_declared("artifacts/Bench-swa.json", ["artifacts/bench-*.json"])


# --------------------------------------------------------------------------- concurrency
WORKER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from result_cache import LocalStore, ResultCache

    cache_dir, artifacts, worker, keys, declared = sys.argv[1], sys.argv[2], int(sys.argv[3]), \\
        json.loads(sys.argv[4]), json.loads(sys.argv[5])
    warnings = []
    cache = ResultCache(
        local=LocalStore(Path(cache_dir)), remote=None, mode="on", warn=warnings.append,
        resolve_output=lambda logical: (Path(artifacts), logical.partition("/")[2]))
    for i in range(50):
        hit = cache.lookup(keys[(i + worker) % len(keys)], unit="bench", outputs=declared)
        assert hit is not None, warnings
        assert len(cache.restore(hit.record, outputs=declared)) == 2, warnings
    assert not warnings, warnings
""")


def test_concurrent_restores_never_tear_a_file(world: World) -> None:
    declared = ["artifacts/bench-*.json", "artifacts/deep/er/*.json"]
    paths = ["artifacts/bench-x.json", "artifacts/deep/er/r.json"]
    valid: dict[str, set[bytes]] = {p: set() for p in paths}
    keys = []
    for _ in range(4):
        key = world.key()
        blobs = {p: world.data(world.rng.randrange(64 << 10, 256 << 10)) for p in paths}
        plant(world, key, encode(record_fields(key, blobs, target="bench")), list(blobs.values()))
        keys.append(key)
        for p, b in blobs.items():
            valid[p].add(b)
    env = {**os.environ, "PYTHONPATH": str(TOOLS)}
    workers = [subprocess.Popen(
        [sys.executable, "-c", WORKER, str(world.cache_dir), str(world.artifacts), str(n),
         json.dumps(keys), json.dumps(declared)], env=env, stderr=subprocess.PIPE)
        for n in range(8)]
    reads = 0
    deadline = time.monotonic() + 60
    while any(w.poll() is None for w in workers) and time.monotonic() < deadline:
        for p in paths:
            try:
                data = (world.repo / p).read_bytes()
            except FileNotFoundError:
                continue
            assert data in valid[p], f"{p}: a torn file of {len(data)} bytes"
            reads += 1
    errors = [w.communicate(timeout=30)[1].decode() for w in workers]
    assert [w.returncode for w in workers] == [0] * 8, errors
    assert reads > 0
    assert not [p for p in world.artifacts.rglob("*") if p.name.startswith(".tmp-")]


def test_a_hard_link_in_an_outputs_place_keeps_its_other_name(world: World) -> None:
    secret = world.outside / "secret.txt"
    os.link(secret, world.artifacts / "junit/policy.xml")
    before = secret.read_bytes()
    key, body = world.key(), world.data()
    plant(world, key, encode(record_fields(key, {DECLARED[0]: body})), [body])
    cache = world.cache()
    hit = cache.lookup(key, unit=UNIT, outputs=DECLARED)
    assert hit is not None and len(cache.restore(hit.record, outputs=DECLARED)) == 1
    assert (world.artifacts / "junit/policy.xml").read_bytes() == body
    assert secret.read_bytes() == before  # a new file was renamed in: the old inode is untouched


def test_clean_removes_links_without_following_them(world: World) -> None:
    cache = world.cache()
    assert _stored_pass(world, cache, world.key(), world.data()) is not None
    (world.cache_dir / "cas" / "out").symlink_to(world.outside / "dir", target_is_directory=True)
    outside_before = {p: v for p, v in world.snapshot().items() if p.startswith("outside")}
    files, size = cache.local.clean()
    assert files == 4 and size > 0 and not world.cache_dir.exists()
    assert {p: v for p, v in world.snapshot().items() if p.startswith("outside")} == outside_before
