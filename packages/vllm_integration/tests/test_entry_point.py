"""The plugin is discoverable through vLLM's general-plugin entry point group."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points

from dsv4_vllm import plugin, registry

SCRIPT = """
from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging
configure_logging(LoggingConfig())
import vllm.plugins
vllm.plugins.load_general_plugins()
vllm.plugins.load_general_plugins()
import importlib
from dsv4_vllm import registry
for name, target in registry.targets().items():
    obj = getattr(importlib.import_module(target.module), target.attribute)
    print("TARGET-TYPE", name, type(obj).__name__)
"""


def _run_vllm(**extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_PLUGINS", "DSV4_POLICY")}
    env.update(VLLM_TARGET_DEVICE="cpu", VLLM_CONFIGURE_LOGGING="1", VLLM_LOGGING_LEVEL="INFO")
    env.update(extra)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    return out


def _dsv4_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "dsv4" in line and "TARGET-TYPE" not in line]


def test_entry_point_is_declared_and_loads_register() -> None:
    ours = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == "dsv4"]
    assert len(ours) == 1
    assert ours[0].value == "dsv4_vllm.plugin:register"
    assert ours[0].load() is plugin.register


def test_vllm_loads_the_plugin_and_logs_it() -> None:
    out = _run_vllm()
    lines = _dsv4_lines(out)
    targets = registry.targets()
    assert len(lines) == len(targets), out
    for line, target in zip(lines, targets.values(), strict=True):
        assert f"dsv4: {target.label} launch policy active on vLLM 0.33.0" in line
        assert f"TARGET-TYPE {target.name} {target.dispatch.__name__}" in out


def test_kill_switch_in_a_vllm_process() -> None:
    out = _run_vllm(DSV4_POLICY="Off")
    lines = _dsv4_lines(out)
    assert len(lines) == 1, out
    assert "DSV4_POLICY=Off turns every dsv4 launch policy off; vLLM runs unchanged" in lines[0]
    for target in registry.targets().values():
        assert f"TARGET-TYPE {target.name} {target.dispatch.__name__}" not in out
