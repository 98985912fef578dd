"""The plugin is discoverable through vLLM's general-plugin entry point group."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points

from dsv4_vllm import plugin

SCRIPT = """
from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging
configure_logging(LoggingConfig())
import vllm.plugins
vllm.plugins.load_general_plugins()
vllm.plugins.load_general_plugins()
import vllm.models.deepseek_v4.sparse_mla as m
print("TARGET-TYPE", type(m.build_c128a_topk_metadata).__name__)
import vllm.v1.attention.backends.mla.sparse_swa as s
print("SWA-TYPE", type(s._COMPUTE_SWA_INDICES_AND_LENS_KERNEL).__name__)
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
    assert len(lines) == 2, out
    assert "dsv4: C128A launch policy active on vLLM 0.33.0" in lines[0]
    assert "dsv4: SWA launch policy active on vLLM 0.33.0" in lines[1]
    assert "TARGET-TYPE C128ADispatch" in out
    assert "SWA-TYPE SWADispatch" in out


def test_kill_switch_in_a_vllm_process() -> None:
    out = _run_vllm(DSV4_POLICY="Off")
    lines = _dsv4_lines(out)
    assert len(lines) == 1, out
    assert "DSV4_POLICY=Off turns the C128A launch policy off; vLLM runs unchanged" in lines[0]
    assert "TARGET-TYPE function" in out
    assert "SWA-TYPE ComputeSWAIndicesAndLensKernel" in out
