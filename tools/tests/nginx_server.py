"""The shared cache server the way a team deploys it: nginx running the committed
``ci/cache-server/nginx.conf``, with a reader and a writer credential.

The config is copied byte for byte; only the files a deployment adds itself are written
here (``site.conf`` with the loopback port, and the two htpasswd files with random
passwords), so a test of this server is a test of the committed config. A missing
nginx fails the tests that need it, with the command to install it: the read-only rule
for pull requests rests on this server, and a skipped test would prove nothing.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "ci" / "cache-server"
PREFIX = "cache"
INSTALL = "apt-get install -y nginx-light  (Debian; `nginx` on Ubuntu; any build with the DAV module)"
# Debian keeps nginx in /usr/sbin, which a non-root PATH often lacks.
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
# Straight to loopback: an http_proxy in the outer environment must not get in between.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def htpasswd_line(user: str, password: str) -> str:
    """``user:{SSHA}...``: salted SHA-1, which nginx checks itself, made with the stdlib
    (the passwords are random, so the hash's speed does not matter here)."""
    salt = secrets.token_bytes(8)
    digest = hashlib.sha1(password.encode() + salt).digest()
    return f"{user}:{{SSHA}}{base64.b64encode(digest + salt).decode()}\n"


def nginx_binary() -> str:
    """The nginx to run; fails the test, saying how to install it, when there is none."""
    found = shutil.which("nginx", path=SEARCH_PATH)
    if found is None:
        pytest.fail(f"nginx is not installed; the cache-server tests run it: {INSTALL}",
                    pytrace=False)
    built = subprocess.run([found, "-V"], capture_output=True, text=True, check=False).stderr
    if "--with-http_dav_module" not in built:
        pytest.fail(f"{found} has no DAV module (nginx -V lacks --with-http_dav_module): {INSTALL}",
                    pytrace=False)
    return found


@dataclass
class NginxCache:
    """A running cache server: its data directory, access log and two credentials."""

    port: int
    data: Path  # nginx's -p: pid, logs, tmp/ and store/
    process: subprocess.Popen
    passwords: dict[str, str]  # user -> password, for 'reader' and 'writer'

    @property
    def store(self) -> Path:
        """Where the cache entries land: ``store/<prefix>/ac`` and ``.../cas``."""
        return self.data / "store" / PREFIX

    @property
    def log(self) -> Path:
        return self.data / "access.log"

    def url(self, user: str | None = None, password: str | None = None) -> str:
        """The cache URL as a client is given it, with ``user``'s credential in it."""
        if user is None:
            return f"http://127.0.0.1:{self.port}/{PREFIX}"
        password = self.passwords[user] if password is None else password
        return f"http://{user}:{password}@127.0.0.1:{self.port}/{PREFIX}"

    def files(self) -> set[str]:
        """Every stored entry, as 'ac/<sha256>' or 'cas/<sha256>'."""
        if not self.store.exists():
            return set()
        return {p.relative_to(self.store).as_posix() for p in self.store.rglob("*") if p.is_file()}

    def requests(self, method: str) -> list[tuple[str, str, int]]:
        """(user, path, status) of every logged request with this method."""
        pattern = re.compile(rf'^\S+ (\S+) \[[^]]*\] "{method} (\S+) [^"]*" (\d{{3}}) ')
        return [(m[1], m[2], int(m[3])) for m in map(pattern.match, self.log.read_text().splitlines())
                if m]

    def stored_puts(self) -> int:
        """How many PUTs the server answered 2xx: what was written, whoever asked."""
        return sum(200 <= status < 300 for _, _, status in self.requests("PUT"))

    def stop(self) -> None:
        """SIGTERM to the master (nginx's fast shutdown stops the workers first); its
        process group is killed only if it has not gone in 10 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def start(tmp_path: Path) -> NginxCache:
    """Start nginx in the foreground from the committed config; wait until it answers."""
    binary = nginx_binary()
    conf, data = tmp_path / "conf", tmp_path / "data"
    conf.mkdir(parents=True)
    (data / "tmp").mkdir(parents=True)
    shutil.copyfile(CONFIG_DIR / "nginx.conf", conf / "nginx.conf")
    port = free_port()
    (conf / "site.conf").write_text(f"listen 127.0.0.1:{port};\n")
    passwords = {user: secrets.token_urlsafe(24) for user in ("reader", "writer")}
    (conf / "readers.htpasswd").write_text(
        htpasswd_line("reader", passwords["reader"]) + htpasswd_line("writer", passwords["writer"]))
    (conf / "writers.htpasswd").write_text(htpasswd_line("writer", passwords["writer"]))
    command = [binary, "-p", f"{data}/", "-c", str(conf / "nginx.conf"), "-e", str(data / "error.log")]
    if os.geteuid() == 0:  # nginx would hand its workers to `nobody`, who cannot reach tmp_path
        command += ["-g", "user root;"]
    with (tmp_path / "nginx.out").open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    server = NginxCache(port, data, process, passwords)
    probe = f"{server.url()}/ac/{'0' * 64}"
    deadline = time.monotonic() + 30
    while True:
        try:
            OPENER.open(probe, timeout=1).close()
        except urllib.error.HTTPError as exc:
            if exc.code == 401:  # our config, asking for a credential: it is up
                return server
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            logs = [p.read_text()[-2000:] for p in (tmp_path / "nginx.out", data / "error.log")
                    if p.exists()]
            pytest.fail(f"nginx did not start ({' '.join(command)}):\n" + "\n".join(logs))
        time.sleep(0.05)


@contextmanager
def serving(tmp_path: Path) -> Iterator[NginxCache]:
    """The committed cache server on 127.0.0.1 for the ``with`` block, then stopped by
    its PID; leaving the block asserts that the master and every worker are gone."""
    server = start(tmp_path)
    try:
        yield server
    finally:
        server.stop()
        assert server.process.poll() is not None, "nginx outlived its test"
        assert not _group_alive(server.process.pid), "an nginx worker outlived its test"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
