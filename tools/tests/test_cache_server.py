"""The shared cache server enforces who may write: pull requests read, main writes.

A client-side switch (``DSV4_REMOTE_CACHE_UPLOAD=0``) cannot keep a pull request from
uploading: the branch can change noxfile.py. So the server decides, as with Bazel's
remote caches: runners of untrusted code hold a reader credential, and the committed
nginx config (``ci/cache-server/nginx.conf``) answers a reader's PUT with 401. These
tests run that config on loopback, over raw HTTP, through the client, and through nox.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import run_nox
from nginx_server import CONFIG_DIR, OPENER, PREFIX, NginxCache, serving
from remote_cache import MAX_BLOB, RemoteCache
from test_cache_e2e import _outcome


@pytest.fixture
def nginx_cache(tmp_path: Path):
    """nginx with the committed config, a reader and a writer; stopped after the test."""
    with serving(tmp_path / "nginx") as server:
        yield server


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _call(server: NginxCache, method: str, path: str, user: str | None = None,
          password: str | None = None, body: bytes | None = None) -> tuple[int, bytes]:
    """(status, body) of one request, with basic auth when a user is given."""
    request = urllib.request.Request(f"{server.url()}/{path}", data=body, method=method)
    if user is not None:
        secret = server.passwords[user] if password is None else password
        request.add_header("Authorization",
                           "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode())
    try:
        with OPENER.open(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


# --------------------------------------------------------------------------- raw HTTP
def test_a_reader_reads_and_only_a_writer_writes(nginx_cache: NginxCache) -> None:
    blob = b"<testsuite tests='1'/>"
    path = f"cas/{_sha(blob)}"
    assert _call(nginx_cache, "GET", path, "reader")[0] == 404  # let in; nothing there yet
    assert _call(nginx_cache, "PUT", path, "reader", body=blob)[0] in (401, 403)
    assert nginx_cache.files() == set()
    assert _call(nginx_cache, "PUT", path, "writer", body=blob)[0] == 201
    assert nginx_cache.files() == {path}
    assert _call(nginx_cache, "GET", path, "reader") == (200, blob)
    assert _call(nginx_cache, "HEAD", path, "reader")[0] == 200
    assert _call(nginx_cache, "GET", path, "writer") == (200, blob)
    # a reader cannot overwrite what a writer stored, nor delete it
    assert _call(nginx_cache, "PUT", path, "reader", body=b"poison")[0] in (401, 403)
    assert _call(nginx_cache, "DELETE", path, "reader")[0] in (401, 403)
    assert (nginx_cache.store / path).read_bytes() == blob
    assert [(u, s) for u, _, s in nginx_cache.requests("PUT")] == [
        ("reader", 401), ("writer", 201), ("reader", 401)]


def test_no_credential_or_a_wrong_one_is_refused(nginx_cache: NginxCache) -> None:
    blob = b"record"
    path = f"ac/{_sha(blob)}"
    assert _call(nginx_cache, "PUT", path, "writer", body=blob)[0] == 201
    refused = [
        _call(nginx_cache, "GET", path),
        _call(nginx_cache, "PUT", path, body=b"x"),
        _call(nginx_cache, "GET", path, "reader", "not-the-password"),
        _call(nginx_cache, "GET", path, "writer", "not-the-password"),
        _call(nginx_cache, "PUT", path, "writer", "not-the-password", body=b"x"),
        _call(nginx_cache, "GET", path, "nobody", "whatever"),
    ]
    assert [status for status, _ in refused] == [401] * len(refused)
    assert (nginx_cache.store / path).read_bytes() == blob


def test_only_cache_entries_can_be_stored(nginx_cache: NginxCache) -> None:
    for path in ("notes.txt", "ac/not-a-sha256", f"cas/{'a' * 64}/x", f"cas/{'A' * 64}"):
        assert _call(nginx_cache, "PUT", path, "writer", body=b"x")[0] == 404, path
    assert _call(nginx_cache, "DELETE", f"cas/{'a' * 64}", "writer")[0] == 405
    assert not (nginx_cache.data / "store").exists()


def test_the_body_limit_is_the_clients_blob_cap(nginx_cache: NginxCache) -> None:
    """client_max_body_size is the client's cap: a body one byte over it is refused from
    its Content-Length alone; one of exactly the cap is let in (nginx waits for it)."""
    auth = base64.b64encode(f"writer:{nginx_cache.passwords['writer']}".encode()).decode()

    def announce(length: int) -> int | None:
        connection = http.client.HTTPConnection("127.0.0.1", nginx_cache.port, timeout=2)
        try:
            connection.putrequest("PUT", f"/{PREFIX}/cas/{'b' * 64}")
            connection.putheader("Authorization", f"Basic {auth}")
            connection.putheader("Content-Length", str(length))
            connection.endheaders()
            return connection.getresponse().status
        except TimeoutError:
            return None  # still waiting for the body
        finally:
            connection.close()

    assert announce(MAX_BLOB + 1) == 413
    assert announce(MAX_BLOB) is None


# --------------------------------------------------------------------------- the client
def _client(url: str, warnings: list[str]) -> RemoteCache:
    return RemoteCache(url, token=None, upload=True, warn=warnings.append)


def test_the_client_uploads_with_the_writer_credential(nginx_cache: NginxCache) -> None:
    blob, record = b"bench json", json.dumps({"passed": True}).encode()
    key = _sha(b"the key")
    warnings: list[str] = []
    writer = _client(nginx_cache.url("writer"), warnings)
    assert writer.put("cas", _sha(blob), blob) and writer.put("ac", key, record)
    assert nginx_cache.files() == {f"cas/{_sha(blob)}", f"ac/{key}"}
    reader = _client(nginx_cache.url("reader"), warnings)
    assert reader.get_record(key) == record
    assert reader.get_blob(_sha(blob)) == blob
    assert warnings == []
    asked = {user for user, path, _ in nginx_cache.requests("GET") if path.endswith((key, _sha(blob)))}
    assert asked == {"reader"}  # the credential went out as basic auth


def test_a_reader_upload_is_refused_once_and_reads_go_on(nginx_cache: NginxCache) -> None:
    stored = b"stored by main"
    assert _client(nginx_cache.url("writer"), []).put("cas", _sha(stored), stored)
    warnings: list[str] = []
    reader = _client(nginx_cache.url("reader"), warnings)
    assert reader.put("cas", _sha(b"a"), b"a") is False  # no exception: the build goes on
    assert reader.put("ac", _sha(b"b"), b"b") is False
    assert len(warnings) == 1 and "upload refused by the server" in warnings[0]
    assert nginx_cache.passwords["reader"] not in warnings[0]
    assert reader.get_blob(_sha(stored)) == stored  # reads go on
    assert nginx_cache.files() == {f"cas/{_sha(stored)}"}
    # the refusal stopped uploads for the run: the second PUT never left the client
    assert [(u, s) for u, _, s in nginx_cache.requests("PUT")] == [("writer", 201), ("reader", 401)]


# --------------------------------------------------------------------------- end to end
def _leaks(server: NginxCache, root: Path, texts: list[str]) -> list[str]:
    """Where a password shows up: in nox's output or in any file the runs left behind."""
    texts = texts + [p.read_bytes().decode(errors="replace") for p in root.rglob("*")
                     if p.is_file() and ".git" not in p.parts]
    return [user for user, password in server.passwords.items() if any(password in t for t in texts)]


def _nox(repo: Path, cache: Path, url: str, **extra: str) -> subprocess.CompletedProcess:
    env = {"DSV4_CACHE_DIR": str(cache), "DSV4_REMOTE_CACHE": url,
           "DSV4_REMOTE_CACHE_UPLOAD": "1", **extra}
    return run_nox(repo, "-s", "alpha", "beta", env=env)


def test_main_uploads_and_a_fresh_clone_replays_with_the_reader_credential(
    mini_repo: Path, tmp_path: Path, nginx_cache: NginxCache
) -> None:
    clone = tmp_path / "clone-b"
    subprocess.run(["git", "clone", "-q", str(mini_repo), str(clone)], check=True)
    first = _nox(mini_repo, tmp_path / "cache-a", nginx_cache.url("writer"))
    assert _outcome(first) == {"alpha": "ran", "beta": "ran"}
    stored = nginx_cache.files()
    assert len([f for f in stored if f.startswith("ac/")]) == 2  # one record per target
    assert any(f.startswith("cas/") for f in stored)
    assert nginx_cache.stored_puts() == len(stored)

    second = _nox(clone, tmp_path / "cache-b", nginx_cache.url("reader"), DSV4_CACHE="require")
    assert _outcome(second) == {"alpha": "cached remote", "beta": "cached remote"}
    assert "-m pytest" not in second.stdout + second.stderr
    assert nginx_cache.files() == stored
    assert _leaks(nginx_cache, tmp_path, [r.stdout + r.stderr for r in (first, second)]) == []


def test_a_reader_run_that_tries_to_upload_is_refused_and_passes(
    mini_repo: Path, tmp_path: Path, nginx_cache: NginxCache
) -> None:
    result = _nox(mini_repo, tmp_path / "cache-a", nginx_cache.url("reader"))
    assert _outcome(result) == {"alpha": "ran", "beta": "ran"}  # the build passes
    text = result.stdout + result.stderr
    assert text.count("upload refused by the server") == 1
    assert text.count("remote cache") == 1  # one warning, nothing else about the remote
    assert nginx_cache.files() == set() and nginx_cache.stored_puts() == 0
    assert [(u, s) for u, _, s in nginx_cache.requests("PUT")] == [("reader", 401)]
    assert nginx_cache.requests("GET")  # and it still read: beta's lookup went out
    assert _leaks(nginx_cache, tmp_path, [text]) == []


def test_the_server_runs_the_committed_config_and_keeps_no_password(
    nginx_cache: NginxCache,
) -> None:
    conf = nginx_cache.data.parent / "conf"
    assert (conf / "nginx.conf").read_bytes() == (CONFIG_DIR / "nginx.conf").read_bytes()
    readers, writers = ((conf / f"{n}.htpasswd").read_text() for n in ("readers", "writers"))
    assert [ln.split(":")[0] for ln in readers.splitlines()] == ["reader", "writer"]
    assert [ln.split(":")[0] for ln in writers.splitlines()] == ["writer"]
    assert not [p for p in nginx_cache.passwords.values() if p in readers + writers]
