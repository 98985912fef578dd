"""The session environment: nothing leaks in, and a hostile outer environment
changes no test result."""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from dsv4_hermetic import NetworkBlocked
from hermetic import hermetic_env

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "tools" / "pytest_plugins"


def _hostile(tmp_path: Path) -> dict[str, str]:
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "dsv4_policy.py").write_text("raise ImportError('junk PYTHONPATH won')\n")
    (junk / "hypothesis.py").write_text("raise ImportError('junk PYTHONPATH won')\n")
    readonly = tmp_path / "readonly-triton"
    readonly.mkdir()
    readonly.chmod(stat.S_IRUSR | stat.S_IXUSR)
    return {
        **os.environ,
        "PYTHONPATH": str(junk),
        "TRITON_INTERPRET": "0" if os.environ.get("TRITON_INTERPRET") == "1" else "1",
        "VLLM_PLUGINS": "somebody_elses_plugin",
        "TRITON_CACHE_DIR": str(readonly),
        "HYPOTHESIS_PROFILE": "nonsense",
        "PYTEST_ADDOPTS": "--this-flag-does-not-exist",
        "DSV4_POLICY": "off",
    }


def _env(outer: dict[str, str], session_dir: Path) -> dict[str, str]:
    return hermetic_env(
        outer=outer,
        session_dir=session_dir,
        bin_dir=str(Path(sys.executable).parent),
        allow=(),
        set_env={},
        gpu=False,
        python_path=[str(PLUGINS)],
    )


def test_hostile_variables_do_not_leak(tmp_path: Path) -> None:
    env = _env(_hostile(tmp_path), tmp_path / "s")
    for name in ("VLLM_PLUGINS", "PYTEST_ADDOPTS", "HYPOTHESIS_PROFILE", "DSV4_POLICY",
                 "TRITON_INTERPRET"):
        assert name not in env
    assert env["PYTHONPATH"] == str(PLUGINS)
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "s" / "triton-cache")
    assert env["HOME"] == str(tmp_path / "s" / "home")
    assert Path(env["TMPDIR"]).is_dir() and not any(Path(env["TMPDIR"]).iterdir())


def test_allowlist_and_fixed_values(tmp_path: Path) -> None:
    outer = {"CI": "true", "CUDA_VISIBLE_DEVICES": "3", "SECRET_TOKEN": "x", "FOO": "1"}
    env = hermetic_env(outer=outer, session_dir=tmp_path, bin_dir="/b", allow=("FOO",),
                       set_env={"TRITON_INTERPRET": "1"}, gpu=False, python_path=[])
    assert env["CI"] == "true" and env["FOO"] == "1" and env["TRITON_INTERPRET"] == "1"
    assert "SECRET_TOKEN" not in env and "CUDA_VISIBLE_DEVICES" not in env
    assert "PYTHONPATH" not in env and env["PATH"].startswith("/b:")
    gpu_env = hermetic_env(outer=outer, session_dir=tmp_path, bin_dir="/b", allow=(),
                           set_env={}, gpu=True, python_path=[])
    assert gpu_env["CUDA_VISIBLE_DEVICES"] == "3"


def _without_ci(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k != "CI"}


def _policy_summary(env: dict[str, str]) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests", "-q", "-p", "dsv4_hermetic",
         "-p", "no:cacheprovider", "-k", "not benchmark"],
        cwd=ROOT / "packages" / "policy", env=env, capture_output=True, text=True, timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    found = re.findall(r"^(\d+ passed.*?) in ", run.stdout, flags=re.M)
    assert found, run.stdout[-2000:]
    return found[-1]


def test_policy_tests_give_the_same_result_under_a_hostile_environment(tmp_path: Path) -> None:
    # Both runs use Hypothesis' quicker dev profile (CI unset in both): the point is that
    # the outer environment changes nothing, not to repeat the policy session's 10,000
    # examples twice more.
    clean = _policy_summary(_env(_without_ci(dict(os.environ)), tmp_path / "clean"))
    hostile = _policy_summary(_env(_without_ci(_hostile(tmp_path)), tmp_path / "hostile"))
    assert clean == hostile


def test_network_is_blocked_but_loopback_is_not() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(NetworkBlocked, match="only loopback"):
            sock.connect(("192.0.2.1", 80))  # TEST-NET-1: never routed
    finally:
        sock.close()
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname(), timeout=5)
    client.close()
    server.close()
