"""Every test marked gpu, in any kernel's folder, fails (never skips) without a GPU: the
root conftest's setup hook does it, so no kernel needs a conftest of its own for it."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

ROOT_CONFTEST = Path(__file__).with_name("conftest.py")


@pytest.fixture
def conftest(pytestconfig: pytest.Config) -> ModuleType:
    """The root conftest module as pytest loaded it (each kernel folder may have its own
    module named ``conftest`` too, so it is found by its file, not imported by name)."""
    for plugin in pytestconfig.pluginmanager.get_plugins():
        if Path(getattr(plugin, "__file__", "") or "") == ROOT_CONFTEST:
            return plugin  # type: ignore[no-any-return]
    raise LookupError(f"{ROOT_CONFTEST} is not loaded")


def _item(*markers: str) -> SimpleNamespace:
    return SimpleNamespace(get_closest_marker=lambda name: object() if name in markers
                           else None)


def test_a_gpu_test_fails_at_setup_when_there_is_no_gpu(conftest: ModuleType,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "gpu_problem", lambda: "no CUDA device visible: ...")
    with pytest.raises(RuntimeError, match="no CUDA device visible"):
        conftest.pytest_runtest_setup(_item("gpu"))  # type: ignore[arg-type]
    conftest.pytest_runtest_setup(_item())  # type: ignore[arg-type]
    monkeypatch.setattr(conftest, "gpu_problem", lambda: None)
    conftest.pytest_runtest_setup(_item("gpu"))  # type: ignore[arg-type]


def test_the_interpreter_is_no_gpu(conftest: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert conftest.interpreting()
    problem = conftest.gpu_problem()
    assert problem is not None and ("TRITON_INTERPRET is set" in problem
                                    or "no CUDA device visible" in problem)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not conftest.interpreting()
