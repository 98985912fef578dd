"""Fixtures for the repository-level tests: a scratch monorepo to declare targets in, a
small real workspace to run nox in, and a real WebDAV server for the remote cache."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest


@pytest.fixture
def make_repo(tmp_path: Path):
    """Write ``{folder: pyproject text}`` under ``tmp_path/packages`` and return the root."""

    def write(packages: dict[str, str]) -> Path:
        for folder, text in packages.items():
            pkg = tmp_path / "packages" / folder
            pkg.mkdir(parents=True, exist_ok=True)
            (pkg / "pyproject.toml").write_text(textwrap.dedent(text))
        return tmp_path

    return write


# --------------------------------------------------------------------------- result cache
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class DavServer:
    """A real WebDAV server (WsgiDAV) on 127.0.0.1, storing PUT bodies under ``root``."""

    url: str
    root: Path
    log: Path
    process: subprocess.Popen

    def requests(self, method: str) -> list[str]:
        """Request lines the server logged for one HTTP method, e.g. 'PUT /ac/…'."""
        return [line for line in self.log.read_text().splitlines() if f'"{method} ' in line]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@pytest.fixture
def dav_server(tmp_path: Path):
    """Start WsgiDAV as a child process, wait until it answers, stop it by PID after."""
    wsgidav = Path(sys.executable).parent / "wsgidav"
    if not wsgidav.is_file():
        pytest.fail(f"WsgiDAV is not installed beside {sys.executable}: run `nox -s meta`")
    root = tmp_path / "dav"
    for folder in ("cache/ac", "cache/cas"):  # WebDAV PUT wants the parent collection
        (root / folder).mkdir(parents=True)
    port = free_port()
    log = tmp_path / "dav.log"
    with log.open("w") as handle:
        process = subprocess.Popen(
            [str(wsgidav), "--host", "127.0.0.1", "--port", str(port), "--root", str(root),
             "--auth", "anonymous", "--no-config", "-v"],
            stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
        )
    server = DavServer(f"http://127.0.0.1:{port}/cache", root / "cache", log, process)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                pytest.fail(f"WsgiDAV did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
    try:
        yield server
    finally:
        server.stop()
        assert server.process.poll() is not None, "the WebDAV server outlived its test"


MINI_PACKAGES = {
    "alpha": ("mini-alpha", [], "def value():\n    return 41\n",
              "import os\nimport signal\n\nfrom mini_alpha import value\n\n\n"
              "def test_value():\n    assert value() + 1 == 42\n"
              "    if os.environ.get('MINI_KILL'):  # stop the cache server mid-run\n"
              "        os.kill(int(os.environ['MINI_KILL']), signal.SIGTERM)\n"),
    "beta": ("mini-beta", ["mini-alpha"], "from mini_alpha import value\n\n\ndef double():\n"
             "    return 2 * value()\n",
             "import os\n\nfrom mini_beta import double\n\n\ndef test_double():\n"
             "    assert double() == 82\n    assert os.environ.get('MINI_FLAVOUR', 'plain') != 'broken'\n"),
}


def _mini_pyproject(dist: str, deps: list[str], name: str) -> str:
    env = '\nenv = ["MINI_FLAVOUR"]' if name == "beta" else '\nenv = ["MINI_KILL"]'
    deps_line = ", ".join(f'"{d}"' for d in deps)
    return (
        f'[project]\nname = "{dist}"\nversion = "0.1.0"\ndependencies = [{deps_line}]\n'
        '[dependency-groups]\ntest = ["pytest"]\n'
        f'[[tool.dsv4.targets]]\nname = "{name}"\nkind = "test"\ntags = ["cpu"]\n'
        f'groups = ["test"]\npytest = ["tests", "-q"]\ntimeout = 120{env}\n'
    )


def _mini_lock(pytest_version: str) -> str:
    members = "\n".join(
        f'[[package]]\nname = "{dist}"\nversion = "0.1.0"\nsource = {{ editable = "packages/{n}" }}\n'
        + "dependencies = [" + ", ".join(f'{{ name = "{d}" }}' for d in deps) + "]\n"
        + '[package.dev-dependencies]\ntest = [{ name = "pytest" }]\n'
        for n, (dist, deps, _, _) in MINI_PACKAGES.items()
    )
    return (
        'version = 1\nrevision = 3\nrequires-python = ">=3.11"\n\n'
        + members
        + f'\n[[package]]\nname = "pytest"\nversion = "{pytest_version}"\n'
        'source = { registry = "https://pypi.org/simple" }\n'
        'wheels = [{ url = "https://example.invalid/pytest.whl", hash = "sha256:'
        + "ab" * 32 + '" }]\n'
    )


@pytest.fixture
def mini_repo(tmp_path: Path):
    """A small git repository with this repository's noxfile and tools, two packages
    (beta depends on alpha) and a lock: a real workspace to run nox in, in seconds."""
    repo = tmp_path / "mini"
    repo.mkdir()
    shutil.copy(ROOT / "noxfile.py", repo / "noxfile.py")
    shutil.copytree(ROOT / "tools", repo / "tools",
                    ignore=shutil.ignore_patterns("__pycache__", "tests"))
    for name, (dist, deps, source, test) in MINI_PACKAGES.items():
        pkg = repo / "packages" / name
        module = dist.replace("-", "_")
        (pkg / "src" / module).mkdir(parents=True)
        (pkg / "tests").mkdir()
        (pkg / "pyproject.toml").write_text(_mini_pyproject(dist, deps, name))
        (pkg / "src" / module / "__init__.py").write_text(source)
        (pkg / "tests" / f"test_{name}.py").write_text(test)
    import pytest as _pytest

    (repo / "uv.lock").write_text(_mini_lock(_pytest.__version__))
    (repo / "pyproject.toml").write_text('[project]\nname = "mini-workspace"\nversion = "0"\n')
    (repo / ".gitignore").write_text(".nox/\nartifacts/\n__pycache__/\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "mini"], cwd=repo, check=True)
    return repo


def run_nox(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m nox --no-venv`` in ``repo``, with a clean, explicit environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DSV4_", "PYTEST"))}
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "nox", "--no-venv", "-f", str(repo / "noxfile.py"), *args],
        cwd=repo, env=base, capture_output=True, text=True, timeout=600,
    )
