"""The result store: local replay, a real Bazel-protocol remote, and no false pass."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
from result_cache import CacheError, LocalStore, Record, ResultCache

KEY_A = "a" * 64
KEY_B = "b" * 64
UNIT = "policy"
DECLARED = ("artifacts/junit/policy.xml",)
TOKEN = "tok-" + "5ecret" * 4


def _cache(tmp_path: Path, name: str, *, remote: str | None = None, upload: bool = False,
           mode: str = "on", warnings: list[str] | None = None) -> ResultCache:
    env = {"DSV4_CACHE_DIR": str(tmp_path / name), "DSV4_CACHE": mode}
    if remote:
        env.update(DSV4_REMOTE_CACHE=remote, DSV4_REMOTE_CACHE_TOKEN=TOKEN)
        if upload:
            env["DSV4_REMOTE_CACHE_UPLOAD"] = "1"
    sink = warnings if warnings is not None else []
    return ResultCache.from_environment(
        env, resolve_output=lambda logical: (tmp_path / f"restored-{name}", logical),
        warn=sink.append,
    )


def _lookup(cache: ResultCache, key: str = KEY_A):
    return cache.lookup(key, unit=UNIT, outputs=DECLARED)


def _store(cache: ResultCache, tmp_path: Path, key: str = KEY_A, body: bytes = b"<junit/>"):
    base, relative = cache._resolve(DECLARED[0])
    out = base / relative
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(body)
    return cache.store(
        key=key, target=UNIT, duration_s=12.5, fingerprint={}, components={"build": "1"},
        files={"packages/policy/x.py": "2"}, outputs={DECLARED[0]: out}, declared=DECLARED,
    )


def test_a_stored_pass_is_replayed_with_its_outputs(tmp_path: Path) -> None:
    cache = _cache(tmp_path, "local")
    _store(cache, tmp_path, body=b"<testsuite tests='7'/>")
    hit = _lookup(cache)
    assert hit is not None and hit.origin == "local" and hit.record.duration_s == 12.5
    [path] = cache.restore(hit.record, outputs=DECLARED)
    assert path.read_bytes() == b"<testsuite tests='7'/>"
    assert _lookup(cache, KEY_B) is None


def test_a_corrupt_local_blob_is_a_miss(tmp_path: Path) -> None:
    cache = _cache(tmp_path, "local")
    record = _store(cache, tmp_path)
    blob = cache.local.root / "cas" / record.outputs[0].sha256
    blob.write_bytes(b"tampered")
    assert _lookup(cache) is None


def test_records_that_lie_are_refused() -> None:
    good = {
        "key": KEY_A, "target": "t", "status": "passed", "duration_s": 1, "date": "d",
        "host": "h", "fingerprint": {}, "components": {}, "files": {}, "outputs": [{"path": "artifacts/x", "sha256": "c" * 64, "size": 1}],
    }
    assert Record.from_json(json.dumps(good).encode(), key=KEY_A) is not None
    assert Record.from_json(json.dumps(good).encode(), key=KEY_B) is None  # another key
    for bad in ({"status": "failed"}, {"outputs": [{"path": "../../etc/passwd", "sha256": "c" * 64,
                                                    "size": 1}]},
                {"outputs": [{"path": "/abs", "sha256": "c" * 64, "size": 1}]},
                {"outputs": [{"path": "x", "sha256": "not-a-sha", "size": 1}]}):
        assert Record.from_json(json.dumps({**good, **bad}).encode(), key=KEY_A) is None
    assert Record.from_json(b"{not json", key=KEY_A) is None


def test_modes(tmp_path: Path) -> None:
    off = _cache(tmp_path, "off", mode="off")
    assert _store(off, tmp_path) is None and not (tmp_path / "off").exists()
    refresh = _cache(tmp_path, "r", mode="refresh")
    _store(refresh, tmp_path)
    assert _lookup(refresh) is None  # refresh runs everything ...
    assert _lookup(_cache(tmp_path, "r")) is not None  # ... and stores the passes
    with pytest.raises(CacheError, match="DSV4_CACHE='sometimes' is not a cache mode; accepted: on"):
        _cache(tmp_path, "x", mode="sometimes")


def test_remote_url_is_checked(tmp_path: Path) -> None:
    with pytest.raises(CacheError, match="is not an http"):
        _cache(tmp_path, "x", remote="ftp://cache.example/x")


# --------------------------------------------------------------------------- real server
def test_remote_round_trip_through_a_real_server(tmp_path: Path, dav_server) -> None:
    writer = _cache(tmp_path, "a", remote=dav_server.url, upload=True)
    record = _store(writer, tmp_path, body=b"<suite ok/>")
    sha = record.outputs[0].sha256
    assert (dav_server.root / "cas" / sha).read_bytes() == b"<suite ok/>"
    assert json.loads((dav_server.root / "ac" / KEY_A).read_bytes())["key"] == KEY_A

    reader = _cache(tmp_path, "b", remote=dav_server.url)
    hit = _lookup(reader)
    assert hit is not None and hit.origin == "remote"
    assert _lookup(reader).origin == "local"  # copied into the local cache
    assert reader.restore(hit.record, outputs=DECLARED)[0].read_bytes() == b"<suite ok/>"


def test_a_tampered_remote_blob_is_a_miss(tmp_path: Path, dav_server) -> None:
    record = _store(_cache(tmp_path, "a", remote=dav_server.url, upload=True), tmp_path)
    (dav_server.root / "cas" / record.outputs[0].sha256).write_bytes(b"poisoned result")
    reader = _cache(tmp_path, "b", remote=dav_server.url)
    assert _lookup(reader) is None
    assert not (tmp_path / "b" / "ac" / KEY_A).exists()  # nothing half-copied


def test_a_missing_remote_blob_is_a_miss(tmp_path: Path, dav_server) -> None:
    record = _store(_cache(tmp_path, "a", remote=dav_server.url, upload=True), tmp_path)
    (dav_server.root / "cas" / record.outputs[0].sha256).unlink()
    assert _lookup(_cache(tmp_path, "b", remote=dav_server.url)) is None


def test_uploads_are_opt_in(tmp_path: Path, dav_server) -> None:
    reader = _cache(tmp_path, "a", remote=dav_server.url, upload=False)
    _store(reader, tmp_path)
    assert _lookup(reader).origin == "local"
    assert dav_server.requests("PUT") == []
    assert not any(dav_server.root.rglob("*.*")) and not any((dav_server.root / "ac").iterdir())


def test_a_dead_server_warns_once_and_never_fails(tmp_path: Path, dav_server) -> None:
    warnings: list[str] = []
    cache = _cache(tmp_path, "a", remote=dav_server.url, upload=True, warnings=warnings)
    dav_server.stop()
    started = time.monotonic()
    assert _lookup(cache) is None
    assert _lookup(cache, KEY_B) is None
    assert _store(cache, tmp_path) is not None  # the local store still works
    assert time.monotonic() - started < 10
    assert len(warnings) == 1 and "unusable" in warnings[0] and "running locally" in warnings[0]


def test_the_token_is_never_written_or_printed(tmp_path: Path, dav_server, capsys) -> None:
    warnings: list[str] = []
    cache = _cache(tmp_path, "a", remote=dav_server.url, upload=True, warnings=warnings)
    _store(cache, tmp_path)
    _lookup(_cache(tmp_path, "b", remote=dav_server.url, warnings=warnings))
    dav_server.stop()
    _lookup(_cache(tmp_path, "c", remote=dav_server.url, warnings=warnings), KEY_B)
    assert warnings  # the dead server was reported ...
    printed = capsys.readouterr()
    texts = [*warnings, printed.out, printed.err]
    texts += [p.read_bytes().decode(errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
    assert not [t for t in texts if TOKEN in t]  # ... and the token is nowhere


def test_a_record_is_uploaded_only_after_its_blobs(tmp_path: Path, dav_server) -> None:
    _store(_cache(tmp_path, "a", remote=dav_server.url, upload=True), tmp_path)
    puts = dav_server.requests("PUT")
    assert [("/cas/" in p, "/ac/" in p) for p in puts] == [(True, False), (False, True)]


def test_blob_names_are_their_content_digest(tmp_path: Path) -> None:
    cache = _cache(tmp_path, "a")
    record = _store(cache, tmp_path, body=b"content")
    assert record.outputs[0].sha256 == hashlib.sha256(b"content").hexdigest()
    assert LocalStore(tmp_path / "a").latest("policy").key == KEY_A
