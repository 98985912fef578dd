"""Each unit's environment holds its own lock slice, and a run that skips the sync says so.

``-R`` and ``--no-install`` reuse a venv as it is, so such a key must not claim to be
hermetic: it records what the venv really holds, and a change to that changes the key.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import cache_key
import environments
import targets
import units
from conftest import ROOT
from lockfile import Lock


def _session(tmp_path: Path, *, no_install: bool = False, backend: str = "uv",
             name: str = "gpu") -> SimpleNamespace:
    config = SimpleNamespace(no_install=no_install)
    return SimpleNamespace(
        name=name, venv_backend=backend, _runner=SimpleNamespace(global_config=config),
        virtualenv=SimpleNamespace(location=str(tmp_path / ".nox" / name)),
    )


def _venv(tmp_path: Path, dists: dict[str, str]) -> Path:
    venv = tmp_path / ".nox" / "kernels-gpu"
    site = venv / "lib" / "python3.11" / "site-packages"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / "bin" / "python").write_text("")
    for name, version in dists.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n"
                                       "Name: not-this-one\n")
    return venv


def test_each_target_of_an_aggregate_has_its_own_venv(tmp_path: Path) -> None:
    session = _session(tmp_path)
    assert environments.venv_for(session, "kernels-gpu") == (tmp_path / ".nox" / "kernels-gpu")
    assert environments.venv_for(session, "vllm-gpu") == (tmp_path / ".nox" / "vllm-gpu")
    assert environments.venv_for(_session(tmp_path, backend="none"), "kernels-gpu") is None


def test_the_flags_that_skip_the_sync_make_a_run_non_hermetic(tmp_path: Path) -> None:
    assert environments.hermetic(_session(tmp_path))
    assert not environments.hermetic(_session(tmp_path, no_install=True))
    assert not environments.hermetic(_session(tmp_path, backend="none"))


def test_a_venv_is_read_from_its_dist_info(tmp_path: Path) -> None:
    venv = _venv(tmp_path, {"pytest": "9.0.1", "Typing_Extensions": "4.15.0"})
    assert environments.venv_versions(venv) == {"pytest": "9.0.1", "typing-extensions": "4.15.0"}


def test_a_no_install_key_records_what_the_venv_holds(tmp_path: Path) -> None:
    graph = targets.load(ROOT)
    unit = units.target_unit(graph, graph.targets["kernels-gpu"])
    lock, tree = Lock.load(ROOT / "uv.lock"), cache_key.SourceTree(ROOT)

    def key(session, venv: Path) -> str:
        inputs = cache_key.KeyInputs(
            root=ROOT, tree=tree, lock=lock, outer_env=dict(os.environ),
            hermetic=environments.hermetic(session), gpu={"name": "test"},
            installed=environments.installed_reader(session, venv),
            note="--no-install" if environments.no_install(session) else "")
        return units.key_for(graph, unit, [], inputs).digest

    venv = _venv(tmp_path, {"pytest": "9.0.1"})
    synced = key(_session(tmp_path), venv)
    reused = key(_session(tmp_path, no_install=True), venv)
    assert reused != synced
    _venv(tmp_path, {"pytest": "9.0.1", "numpy": "2.0.0"})  # something else got in
    assert key(_session(tmp_path, no_install=True), venv) != reused
    assert key(_session(tmp_path), venv) == synced  # a synced venv is the lock's, whatever it held
