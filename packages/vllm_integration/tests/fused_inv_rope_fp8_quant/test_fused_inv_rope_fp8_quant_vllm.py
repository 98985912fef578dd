"""Inside vLLM 0.33.0's real op: plugin on equals plugin off, bit for bit, in the interpreter.

vLLM keeps its real Triton on a machine without a GPU only with ``CUDA_VISIBLE_DEVICES``
empty at import, so the comparisons run in a child process (``firq_vllm_check.py``)
where vLLM's wrapper ``fused_inv_rope_fp8_quant``, its custom op and its op
implementation (which allocates the buffers, poisoned here, and launches the module
global) run as shipped, with vLLM's kernel object (off) or the plugin's stand-in (on)
behind the global, both kernels in Triton's interpreter. Tiny shapes: T 1..9
(non-multiples of 4, so scale pad rows), 8 and 16 heads in several groupings, both scale
layouts, quantize on and off, both DeepSeek-V4 rope tables, positions up to 1M - 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CHECK = Path(__file__).with_name("firq_vllm_check.py")


@pytest.fixture(scope="module")
def check(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("firq") / "check.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1",
           "VLLM_TARGET_DEVICE": "cpu"}
    env.pop("DSV4_POLICY", None)
    proc = subprocess.run([sys.executable, str(CHECK), str(out)], env=env,
                          capture_output=True, text=True, timeout=1500)
    if proc.returncode != 0 or not out.exists():
        pytest.fail(f"{CHECK.name} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-6000:]}", pytrace=False)
    return json.loads(out.read_text())


def test_vllms_own_kernel_ran_with_real_triton(check: dict[str, Any]) -> None:
    assert check["has_triton"] is True
    assert check["patched"] is True and check["restored"] is True


def test_plugin_on_equals_off_through_vllms_wrapper(check: dict[str, Any]) -> None:
    rows = check["cases"]
    assert len(rows) >= 14
    for row in rows:
        assert row["same"], row
        # Off ran vLLM's kernel and on ran dsv4's: the stand-in hit exactly once, on.
        assert row["hits_off"] == 0 and row["hits_on"] == 1, row
    # What the cases cover: both layouts, quantize on and off, T not a multiple of 4.
    assert {(r["tma"], r["quantize"]) for r in rows} == {(False, False), (False, True),
                                                         (True, False), (True, True)}
    assert any(r["num_tokens"] % 4 for r in rows if r["quantize"])
    assert check["misses"] == 0


def test_every_byte_is_written_on_both_sides(check: dict[str, Any]) -> None:
    """No poison survives in the output or anywhere in the scale buffer (pad rows
    included), with either kernel: the equality above is over written bytes only."""
    for row in check["cases"]:
        assert not row["poison_left_off"] and not row["poison_left_on"], row


def test_the_stand_in_returns_what_vllms_object_returns(check: dict[str, Any]) -> None:
    assert check["returns"] == {"vllm": "None", "stand_in": "None"}


def test_the_op_stays_vllms_and_opaque_to_torch_compile(check: dict[str, Any]) -> None:
    """A fullgraph ``torch.compile`` of vLLM's wrapper traces one call of vLLM's custom op
    (and the two tuple reads of its result), nothing else; run with the plugin on, the
    op's implementation reaches the stand-in, and the result equals the plugin-off one.
    The implementation vLLM registered is untouched."""
    compiled = check["compiled"]
    calls = [t for t in compiled["targets"] if "getitem" not in t]
    assert calls == ["vllm.fused_inv_rope_fp8_quant_kernel"], compiled
    assert compiled["hits"] == 1 and compiled["same"] is True
    assert check["impl_unchanged"] is True
