"""``dsv4-policy serve``, driven through main(argv)."""

from __future__ import annotations

import json
import shlex

import pytest
from dsv4_policy.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_serve_prints_the_262k_envelope(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "serve", "--arch", "sm86", "--tp", "8", "--context", "262144",
                       "--seqs", "1")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["source", "envelope:sm86-tp8-262k-x1"]
    assert "59.6 tok/s" in lines[1]
    command = shlex.split(lines[2].split(None, 1)[1])
    assert command[:3] == ["vllm", "serve", "MODEL"]
    assert command[command.index("--max-model-len") + 1] == "262144"
    assert json.loads(command[command.index("--compilation-config") + 1]) == {
        "cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [1]}
    assert "FUSE_ALLREDUCE_RMS                        1" in out
    assert "violations\n(none)" in out


def test_serve_passes_an_unknown_arch_through(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "serve", "--arch", "sm80", "--tp", "8", "--context", "262144",
                       "--seqs", "1")
    assert code == 0
    assert out.splitlines()[0].split() == ["source", "passthrough"]
    assert out.splitlines()[1].split() == ["expected", "rate", "-"]
    assert out.splitlines()[2].split(None, 1)[1] == "vllm serve MODEL"


def test_serve_json_with_extra_args_and_env_reports_violations(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "serve", "--arch", "sm86", "--tp", "8", "--context", "180224",
                       "--seqs", "2", "--env", "SPECULATIVE_CONFIG=mtp", "--json", "--",
                       "--served-model-name", "x", "-dcp", "2")
    data = json.loads(out)
    assert code == 1
    assert data["key"] == {"gpu": "sm86", "tp": 8, "context": 180224, "seqs": 2}
    assert data["source"] == "envelope:sm86-tp8-176k-x2"
    assert data["argv"][-4:] == ["--served-model-name", "x", "-dcp", "2"]
    assert data["env"]["SPECULATIVE_CONFIG"] == "mtp"
    assert [v["rule"] for v in data["violations"]] == ["avoid-decode-context-parallel",
                                                      "avoid-speculative-decoding"]
    code, out, _ = run(capsys, "serve", "--arch", "sm86", "--tp", "8", "--context", "180224",
                       "--seqs", "2", "--", "--enforce-eager")
    assert code == 1
    assert "keep-cuda-graphs  --enforce-eager" in out


def test_the_old_gpu_flag_still_works_and_warns(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--tp", "8", "--context", "262144", "--seqs", "1", "--json"]
    code, old, err = run(capsys, "serve", "--gpu", "sm86", *argv)
    assert code == 0
    assert err.splitlines() == ["dsv4-policy serve: warning: --gpu is deprecated; use --arch"]
    assert run(capsys, "serve", "--arch", "sm86", *argv) == (0, old, "")


def test_serve_needs_an_arch(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "serve", "--tp", "8", "--context", "1", "--seqs", "1")
    assert code == 2 and out == ""
    assert "required: --arch" in err
