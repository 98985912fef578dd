"""The result cache end to end: real nox runs in a small real workspace.

Each test runs ``nox --no-venv`` in a git repository that holds this repository's own
noxfile and tools and two packages (``beta`` depends on ``alpha``), so every rule is
checked through the code users run, in seconds.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from conftest import run_nox


def _env(tmp_path: Path, name: str, **extra: str) -> dict[str, str]:
    return {"DSV4_CACHE_DIR": str(tmp_path / f"cache-{name}"), **extra}


def _outcome(result: subprocess.CompletedProcess) -> dict[str, str]:
    """Target -> 'cached local' / 'cached remote' / 'ran', read from nox's own lines."""
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    seen = {}
    for name, origin in re.findall(r"nox > (\S+): cached PASSED \(key \w{8}, (\w+), ran", out):
        seen[name] = f"cached {origin}"
    for name in re.findall(r"nox > (\S+): PASSED in [\d.]+ s, stored as", out):
        seen[name] = "ran"
    return seen


def _pytest_started(result: subprocess.CompletedProcess) -> bool:
    return "-m pytest" in result.stdout + result.stderr


def test_a_second_run_replays_and_starts_no_pytest(mini_repo: Path, tmp_path: Path) -> None:
    env = _env(tmp_path, "a")
    assert _outcome(run_nox(mini_repo, "-s", "alpha", "beta", env=env)) == {
        "alpha": "ran", "beta": "ran"}
    junit = mini_repo / "artifacts" / "junit" / "beta.xml"
    junit.unlink()
    again = run_nox(mini_repo, "-s", "alpha", "beta", env=env)
    assert _outcome(again) == {"alpha": "cached local", "beta": "cached local"}
    assert not _pytest_started(again)
    assert 'tests="1"' in junit.read_text()  # the outputs come back


def test_two_clones_share_a_remote_cache(mini_repo: Path, tmp_path: Path, dav_server) -> None:
    clone_b = tmp_path / "clone-b"
    subprocess.run(["git", "clone", "-q", str(mini_repo), str(clone_b)], check=True)
    remote = {"DSV4_REMOTE_CACHE": dav_server.url}
    first = run_nox(mini_repo, "-s", "alpha", "beta",
                    env=_env(tmp_path, "a", DSV4_REMOTE_CACHE_UPLOAD="1", **remote))
    assert _outcome(first) == {"alpha": "ran", "beta": "ran"}
    second = run_nox(clone_b, "-s", "alpha", "beta", env=_env(tmp_path, "b", **remote))
    assert _outcome(second) == {"alpha": "cached remote", "beta": "cached remote"}
    assert not _pytest_started(second)
    puts_before = len(dav_server.requests("PUT"))
    third = run_nox(clone_b, "-s", "alpha", "beta", env=_env(tmp_path, "b", **remote))
    assert _outcome(third) == {"alpha": "cached local", "beta": "cached local"}
    assert len(dav_server.requests("PUT")) == puts_before  # readers never write


def test_a_server_killed_mid_run_warns_and_the_run_passes(
    mini_repo: Path, tmp_path: Path, dav_server
) -> None:
    # alpha's own test stops the server; alpha's upload and beta's lookup then fail.
    env = _env(tmp_path, "a", DSV4_REMOTE_CACHE=dav_server.url, DSV4_REMOTE_CACHE_UPLOAD="1",
               MINI_KILL=str(dav_server.process.pid))
    result = run_nox(mini_repo, "-s", "alpha", "beta", env=env)
    assert _outcome(result) == {"alpha": "ran", "beta": "ran"}
    dav_server.process.wait(timeout=10)
    text = result.stdout + result.stderr
    assert text.count("remote cache") == 1 and "running locally" in text


def test_the_token_stays_secret_end_to_end(mini_repo: Path, tmp_path: Path, dav_server) -> None:
    token = "tok-" + "9f8e7d6c" * 4
    env = _env(tmp_path, "a", DSV4_REMOTE_CACHE=dav_server.url, DSV4_REMOTE_CACHE_UPLOAD="1",
               DSV4_REMOTE_CACHE_TOKEN=token)
    runs = [run_nox(mini_repo, "-s", "alpha", "beta", env=env)]
    runs.append(run_nox(mini_repo, "-s", "cache", "--", "stats", env=env))
    runs.append(run_nox(mini_repo, "-s", "cache", "--", "explain", "beta", "--json", env=env))
    dav_server.stop()
    runs.append(run_nox(mini_repo, "-s", "alpha", env={**env, "DSV4_CACHE": "refresh"}))
    assert "remote cache" in runs[-1].stderr  # the dead server was reported
    texts = [r.stdout + r.stderr for r in runs]
    texts += [p.read_bytes().decode(errors="replace") for p in tmp_path.rglob("*")
              if p.is_file() and ".git" not in p.parts]
    assert not [t for t in texts if token in t]


def test_changes_rerun_exactly_what_they_should(mini_repo: Path, tmp_path: Path) -> None:
    env = _env(tmp_path, "a")
    both = ("-s", "alpha", "beta")
    assert set(_outcome(run_nox(mini_repo, *both, env=env)).values()) == {"ran"}

    # one file of beta: beta only (nothing depends on beta)
    (mini_repo / "packages" / "beta" / "README.md").write_text("beta notes\n")
    assert _outcome(run_nox(mini_repo, *both, env=env)) == {"alpha": "cached local", "beta": "ran"}

    # one file of alpha: alpha and its dependant beta
    (mini_repo / "packages" / "alpha" / "README.md").write_text("alpha notes\n")
    assert _outcome(run_nox(mini_repo, *both, env=env)) == {"alpha": "ran", "beta": "ran"}

    # the value of beta's allowed variable: beta only
    flavoured = {**env, "MINI_FLAVOUR": "spicy"}
    assert _outcome(run_nox(mini_repo, *both, env=flavoured)) == {
        "alpha": "cached local", "beta": "ran"}

    # one group's locked entries: every target whose environment holds that group
    lock = mini_repo / "uv.lock"
    lock.write_text(lock.read_text().replace('hash = "sha256:' + "ab" * 32, 'hash = "sha256:'
                                             + "cd" * 32))
    assert _outcome(run_nox(mini_repo, *both, env=env)) == {"alpha": "ran", "beta": "ran"}

    # a lock entry no environment holds: nothing
    lock.write_text(lock.read_text() + '\n[[package]]\nname = "unused"\nversion = "1.0"\n'
                    'source = { registry = "https://pypi.org/simple" }\n')
    assert _outcome(run_nox(mini_repo, *both, env=env)) == {
        "alpha": "cached local", "beta": "cached local"}

    # the noxfile: everything
    noxfile = mini_repo / "noxfile.py"
    noxfile.write_text(noxfile.read_text() + "\n# changed\n")
    assert _outcome(run_nox(mini_repo, *both, env=env)) == {"alpha": "ran", "beta": "ran"}


def test_a_failure_is_never_cached(mini_repo: Path, tmp_path: Path) -> None:
    env = _env(tmp_path, "a", MINI_FLAVOUR="broken")
    failed = run_nox(mini_repo, "-s", "beta", env=env)
    assert failed.returncode != 0 and "cached PASSED" not in failed.stdout + failed.stderr
    again = run_nox(mini_repo, "-s", "beta", env=env)
    assert again.returncode != 0 and _pytest_started(again)  # ran again, failed again
    fixed = {**env, "MINI_FLAVOUR": "fixed"}
    assert _outcome(run_nox(mini_repo, "-s", "beta", env=fixed)) == {"beta": "ran"}
    assert _outcome(run_nox(mini_repo, "-s", "beta", env=fixed)) == {"beta": "cached local"}


def test_modes_off_refresh_and_require(mini_repo: Path, tmp_path: Path) -> None:
    env = _env(tmp_path, "a")
    run_nox(mini_repo, "-s", "alpha", env=env)
    off = run_nox(mini_repo, "-s", "alpha", env={**env, "DSV4_CACHE": "off"})
    assert off.returncode == 0 and _pytest_started(off) and "stored as" not in off.stderr
    assert _outcome(run_nox(mini_repo, "-s", "alpha", env={**env, "DSV4_CACHE": "refresh"})) == {
        "alpha": "ran"}
    assert _outcome(run_nox(mini_repo, "-s", "alpha", env={**env, "DSV4_CACHE": "require"})) == {
        "alpha": "cached local"}
    (mini_repo / "packages" / "alpha" / "src" / "mini_alpha" / "__init__.py").write_text(
        "def value():\n    return 41  # same value, new text\n")
    missed = run_nox(mini_repo, "-s", "alpha", env={**env, "DSV4_CACHE": "require"})
    text = missed.stdout + missed.stderr
    assert missed.returncode != 0 and "cache miss under DSV4_CACHE=require" in text
    assert "sources:mini-alpha" in text and "mini_alpha/__init__.py modified" in text
    bad = run_nox(mini_repo, "-s", "alpha", env={**env, "DSV4_CACHE": "maybe"})
    assert bad.returncode != 0 and "accepted: on, off, refresh, require" in bad.stderr


def test_explain_names_the_changed_component_and_files(mini_repo: Path, tmp_path: Path) -> None:
    env = _env(tmp_path, "a")
    run_nox(mini_repo, "-s", "beta", env=env)
    (mini_repo / "packages" / "alpha" / "NOTES.md").write_text("new\n")
    explained = run_nox(mini_repo, "-s", "cache", "--", "explain", "beta", env=env)
    assert explained.returncode == 0, explained.stderr
    lines = explained.stdout.splitlines()
    status = {ln.split()[0]: ln.split()[2] for ln in lines[2:] if len(ln.split()) >= 3
              and not ln.startswith("    ")}
    assert status["sources:mini-alpha"] == "changed"
    assert status["sources:mini-beta"] == "same" and status["build"] == "same"
    assert "packages/alpha/NOTES.md added" in explained.stdout
    stats = run_nox(mini_repo, "-s", "cache", "--", "stats", "--json", env=env)
    assert '"runs": 1' in stats.stdout
    unknown = run_nox(mini_repo, "-s", "cache", "--", "explain", "gamma", env=env)
    assert unknown.returncode != 0 and "unknown target 'gamma'" in unknown.stderr
    cleaned = run_nox(mini_repo, "-s", "cache", "--", "clean", env=env)
    assert cleaned.returncode == 0 and "removed" in cleaned.stdout
    assert not (tmp_path / "cache-a").exists()


def test_explain_no_venv_keys_a_target_as_the_no_venv_run_did(mini_repo: Path,
                                                              tmp_path: Path) -> None:
    env = _env(tmp_path, "a")
    run_nox(mini_repo, "-s", "alpha", env=env)  # run_nox runs with --no-venv
    explained = run_nox(mini_repo, "-s", "cache", "--", "explain", "alpha", "--no-venv",
                        "--json", env=env)
    assert explained.returncode == 0, explained.stderr
    data = json.loads(explained.stdout)
    assert data["stored_locally"], data
    assert {c["since_last_pass"] for c in data["components"]} == {"same"}, data
