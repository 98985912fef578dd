"""A hostile cache server, end to end through nox: it writes nothing outside a unit's
declared outputs, and it neither fails nor stalls the build.

The server (``hostile_server.py``) serves records that the tests forge from a real
pass of the small workspace's ``alpha`` target: same key, same target, outputs that
name files no unit may write. Each run must pass by running the target locally, say
so in one warning naming the path, and leave every file outside ``alpha``'s declared
output exactly as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import time
from pathlib import Path

import pytest
from conftest import run_nox
from hostile_server import HostileServer, drip_body
from test_cache_e2e import _env, _outcome

PREFIX = "/cache"


def _snapshot(root: Path) -> dict[str, object]:
    """Every file and link under ``root`` (contents, link targets), less nox's own
    folders and the one output alpha may write."""
    seen: dict[str, object] = {}
    for current, dirs, names in os.walk(root):
        here = Path(current)
        dirs[:] = [d for d in dirs if d != ".nox" or here != root]
        for name in [*names, *(d for d in dirs if (here / d).is_symlink())]:
            path = here / name
            rel = path.relative_to(root).as_posix()
            if rel == "artifacts/junit/alpha.xml":
                continue
            seen[rel] = ("link", os.readlink(path)) if path.is_symlink() else path.read_bytes()
    return seen


def _first_pass(mini_repo: Path, tmp_path: Path) -> tuple[str, dict]:
    """Run alpha once with a scratch cache; return its key and its stored record."""
    cache = tmp_path / "cache-first"
    assert _outcome(run_nox(mini_repo, "-s", "alpha",
                            env={"DSV4_CACHE_DIR": str(cache)})) == {"alpha": "ran"}
    key = (cache / "targets" / "alpha").read_text().strip()
    return key, json.loads((cache / "ac" / key).read_bytes())


def _serve(server: HostileServer, key: str, record: dict, blobs: dict[str, bytes]) -> None:
    server.store[f"{PREFIX}/ac/{key}"] = json.dumps(record).encode()
    for sha, data in blobs.items():
        server.store[f"{PREFIX}/cas/{sha}"] = data


def _forged(record: dict, paths: list[str], rng: random.Random) -> tuple[dict, dict[str, bytes]]:
    outputs, blobs = [], {}
    for path in paths:
        data = b"# written by a hostile cache record\n" + rng.randbytes(32).hex().encode()
        sha = hashlib.sha256(data).hexdigest()
        blobs[sha] = data
        outputs.append({"path": path, "sha256": sha, "size": len(data)})
    return {**record, "outputs": outputs}, blobs


@pytest.mark.parametrize("path", [
    "noxfile.py",
    ".git/config",
    "packages/alpha/tests/conftest.py",
    "artifacts/junit/beta.xml",  # another target's artifact
    "artifacts/../noxfile.py",
])
def test_a_poisoned_record_writes_nothing_and_the_run_passes(
        mini_repo: Path, tmp_path: Path, path: str) -> None:
    key, record = _first_pass(mini_repo, tmp_path)
    forged, blobs = _forged(record, ["artifacts/junit/alpha.xml", path], random.Random(path))
    before = _snapshot(mini_repo)
    with HostileServer() as server:
        _serve(server, key, forged, blobs)
        result = run_nox(mini_repo, "-s", "alpha", env=_env(
            tmp_path, "fresh", DSV4_REMOTE_CACHE=server.url + PREFIX))
        assert _outcome(result) == {"alpha": "ran"}
        assert not [r for r in server.requests if r.target.startswith(f"{PREFIX}/cas/")]
    text = result.stdout + result.stderr
    assert repr(path)[:40] in text or path in text
    assert _snapshot(mini_repo) == before


def test_a_record_through_a_symlinked_folder_writes_nothing_outside(
        mini_repo: Path, tmp_path: Path) -> None:
    key, record = _first_pass(mini_repo, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "alpha.xml").write_text("not the cache's to overwrite\n")
    junit = mini_repo / "artifacts" / "junit"
    for stale in junit.iterdir():
        stale.unlink()
    junit.rmdir()
    junit.symlink_to(outside, target_is_directory=True)
    forged, blobs = _forged(record, ["artifacts/junit/alpha.xml"], random.Random(7))
    with HostileServer() as server:
        _serve(server, key, forged, blobs)
        result = run_nox(mini_repo, "-s", "alpha", env=_env(
            tmp_path, "fresh", DSV4_REMOTE_CACHE=server.url + PREFIX))
    assert _outcome(result) == {"alpha": "ran"}
    assert "symbolic link" in result.stdout + result.stderr
    assert (outside / "alpha.xml").read_text() == "not the cache's to overwrite\n"
    # the run's own output replaced the link with a real folder, inside artifacts/
    assert not junit.is_symlink() and 'tests="1"' in (junit / "alpha.xml").read_text()


def test_a_record_for_another_target_or_key_is_refused(mini_repo: Path, tmp_path: Path) -> None:
    key, record = _first_pass(mini_repo, tmp_path)
    with HostileServer() as server:
        _serve(server, key, {**record, "target": "beta"}, {})
        result = run_nox(mini_repo, "-s", "alpha", env=_env(
            tmp_path, "fresh", DSV4_REMOTE_CACHE=server.url + PREFIX))
    assert _outcome(result) == {"alpha": "ran"}
    assert "not alpha" in result.stdout + result.stderr


def test_a_drip_fed_server_costs_at_most_the_run_budget(mini_repo: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    local = run_nox(mini_repo, "-s", "alpha", "beta", env=_env(tmp_path, "local"))
    assert _outcome(local) == {"alpha": "ran", "beta": "ran"}
    local_s = time.monotonic() - started
    subprocess.run(["git", "clean", "-qfdx", "artifacts"], cwd=mini_repo, check=True)
    with HostileServer() as server:
        server.on(f"{PREFIX}/*", drip_body(interval=1.0, count=600))  # ten minutes a body
        started = time.monotonic()
        dripped = run_nox(mini_repo, "-s", "alpha", "beta", env=_env(
            tmp_path, "drip", DSV4_REMOTE_CACHE=server.url + PREFIX,
            DSV4_REMOTE_CACHE_TIMEOUT="2"))
        dripped_s = time.monotonic() - started
    assert _outcome(dripped) == {"alpha": "ran", "beta": "ran"}
    text = dripped.stdout + dripped.stderr
    assert text.count("warning: remote cache") >= 1
    # two lookups, each cut at its 2 s deadline: the drip adds about 4 s, never minutes
    assert dripped_s - local_s < 2 * 2 + 10, (local_s, dripped_s, text[-2000:])
