"""dsv4-serve: manifests, refusals, vLLM's own parser, passthrough and exec."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from importlib.metadata import entry_points
from typing import Any

import pytest
import torch
from dsv4_policy import serve as policy_serve
from dsv4_vllm import serve
from dsv4_vllm.vllm_cli import ArgsRejected, check_serve_args

MODEL = "deepseek-ai/DeepSeek-V4-Flash"
ENVELOPES = policy_serve.envelopes()


class Exec:
    """Records what would replace the process."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str], dict[str, str]]] = []

    def __call__(self, file: str, argv: list[str], env: dict[str, str]) -> None:
        self.calls.append((file, argv, env))


def _key_args(e: Any) -> list[str]:
    return ["--gpu", e.gpu, "--tp", str(e.tp), "--context", str(e.context),
            "--seqs", str(e.seqs)]


def _run(argv: list[str], capsys, environ: dict[str, str] | None = None):
    exe = Exec()
    code = serve.main(argv, environ={} if environ is None else environ, execvpe=exe)
    out = capsys.readouterr()
    return code, out.out, out.err, exe


def test_there_are_envelopes_to_check() -> None:
    assert len(ENVELOPES) >= 4


@pytest.mark.parametrize("envelope", ENVELOPES, ids=lambda e: e.id)
def test_every_envelope_manifest_is_accepted_by_vllms_parser(envelope, capsys) -> None:
    code, out, err, exe = _run([*_key_args(envelope), "--dry-run", "--json", "--", MODEL],
                               capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["source"] == f"envelope:{envelope.id}" and not doc["refused"]
    assert doc["argv"][:3] == ["vllm", "serve", MODEL]
    assert shlex.split(doc["command"]) == doc["argv"]
    assert doc["env"] == dict(envelope.env)
    assert doc["expected_tok_s"] == envelope.expected_tok_s
    assert exe.calls == []
    parsed = check_serve_args(doc["argv"][2:])  # what vLLM will run with
    assert parsed.model_tag == MODEL
    assert parsed.tensor_parallel_size == envelope.tp
    assert parsed.max_model_len == envelope.context
    assert parsed.max_num_seqs == envelope.seqs
    assert parsed.kv_cache_dtype == "fp8_ds_mla"
    assert parsed.compilation_config.cudagraph_mode.name == "FULL_DECODE_ONLY"
    assert parsed.compilation_config.cudagraph_capture_sizes == [1]


def test_text_manifest_is_copy_pasteable(capsys) -> None:
    e = ENVELOPES[0]
    code, out, err, _ = _run([*_key_args(e), "--dry-run", "--", MODEL, "--port", "8123"],
                             capsys)
    assert code == 0, err
    manifest = policy_serve.plan(policy_serve.ServeKey(e.gpu, e.tp, e.context, e.seqs),
                                 ["--port", "8123"], {})
    command = ["vllm", "serve", MODEL, *manifest.argv]
    lines = out.splitlines()
    assert f"    {shlex.join(command)}" in lines
    for name, value in manifest.env.items():
        assert f"    export {name}={shlex.quote(value)}" in lines
    assert f"envelope:{e.id}" in out and f"{e.expected_tok_s:g} tok/s" in out
    assert command[-2:] == ["--port", "8123"]


def _avoid_cases() -> list[tuple[str, list[str], dict[str, str]]]:
    return [
        ("dcp", ["--decode-context-parallel-size", "2"], {}),
        ("dcp-alias", ["-dcp", "2"], {}),
        ("no-hybrid", ["--disable-hybrid-kv-cache-manager"], {}),
        ("mtp", ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'], {}),
        ("mtp-env", [], {"SPECULATIVE_CONFIG": "mtp"}),
    ]


@pytest.mark.parametrize("case", _avoid_cases(), ids=lambda c: c[0])
def test_avoid_rule_arguments_are_refused_with_exit_2(case, capsys) -> None:
    _, extra, env = case
    e = ENVELOPES[0]
    expected = policy_serve.plan(policy_serve.ServeKey(e.gpu, e.tp, e.context, e.seqs),
                                 extra, env).violations
    assert expected, "the policy should report this as a violation"
    code, out, err, exe = _run([*_key_args(e), "--", MODEL, *extra], capsys, env)
    assert code == 2 and exe.calls == []
    for v in expected:
        assert v.rule in err and v.reason in err and f"--allow-avoided {v.rule}" in err
        assert "REFUSED" in out

    allow = [arg for v in expected for arg in ("--allow-avoided", v.rule)]
    code, out, err, exe = _run([*_key_args(e), *allow, "--", MODEL, *extra], capsys, env)
    assert code == 0, err
    (file, argv, run_env), = exe.calls
    assert file == "vllm" and argv[:3] == ["vllm", "serve", MODEL]
    assert argv[-len(extra):] == extra if extra else True
    assert all(run_env[k] == v for k, v in env.items())


def test_allowing_one_rule_does_not_allow_another(capsys) -> None:
    e = ENVELOPES[0]
    extra = ["--disable-hybrid-kv-cache-manager", "--decode-context-parallel-size", "2"]
    rules = {v.rule for v in policy_serve.plan(
        policy_serve.ServeKey(e.gpu, e.tp, e.context, e.seqs), extra, {}).violations}
    assert len(rules) >= 2
    first = sorted(rules)[0]
    code, _, err, exe = _run([*_key_args(e), "--allow-avoided", first, "--", MODEL, *extra],
                             capsys)
    assert code == 2 and exe.calls == []
    assert all(rule in err for rule in rules - {first})


@pytest.mark.parametrize("gpu_args", [
    ["--gpu", "sm86", "--tp", "8", "--context", "262144", "--seqs", "1"],
    ["--gpu", "sm80", "--tp", "2", "--context", "4096", "--seqs", "3"],  # passthrough
])
def test_unknown_flag_is_caught_by_dry_run(gpu_args, capsys) -> None:
    code, _out, err, exe = _run([*gpu_args, "--dry-run", "--", MODEL, "--no-such-flag", "3"],
                               capsys)
    assert code == 2 and exe.calls == []
    assert "unrecognized arguments: --no-such-flag 3" in err
    assert "nothing was started" in err


def test_vllms_own_validation_runs_too() -> None:
    with pytest.raises(ArgsRejected, match="--enable-auto-tool-choice requires"):
        check_serve_args([MODEL, "--enable-auto-tool-choice"])
    with pytest.raises(ArgsRejected, match="invalid int value"):
        check_serve_args([MODEL, "--max-num-seqs", "many"])


def test_passthrough_prints_and_runs_the_users_arguments_unchanged(capsys) -> None:
    extra = [MODEL, "--tensor-parallel-size", "2", "--max-model-len", "4096", "--port", "9"]
    env = {"VLLM_LOGGING_LEVEL": "DEBUG", "HOME": "/root", "NCCL_ALGO": "Tree"}
    code, out, err, exe = _run(["--gpu", "sm80", "--tp", "2", "--context", "4096",
                                "--seqs", "3", "--", *extra], capsys, env)
    assert code == 0, err
    assert "source:   passthrough" in out and "pass through unchanged" in out
    assert f"    {shlex.join(['vllm', 'serve', *extra])}" in out.splitlines()
    assert "export NCCL_ALGO=Tree" in out and "HOME" not in out
    (_file, argv, run_env), = exe.calls
    assert argv == ["vllm", "serve", *extra]
    assert run_env == env


def test_model_given_with_the_model_flag(capsys) -> None:
    e = ENVELOPES[0]
    code, out, err, _exe = _run([*_key_args(e), "--dry-run", "--json", "--", "--model", MODEL],
                               capsys)
    assert code == 0, err
    argv = json.loads(out)["argv"]
    assert argv[:2] == ["vllm", "serve"] and argv[-2:] == ["--model", MODEL]


def test_a_missing_model_is_refused(capsys) -> None:
    code, _, err, exe = _run([*_key_args(ENVELOPES[0]), "--dry-run"], capsys)
    assert code == 2 and "no model given" in err and exe.calls == []


def test_secrets_are_masked_but_still_passed(capsys) -> None:
    e = ENVELOPES[0]
    env = {"VLLM_API_KEY": "s3cr3t-value"}
    code, out, err, exe = _run([*_key_args(e), "--", MODEL], capsys, env)
    assert code == 0, err
    assert "s3cr3t-value" not in out
    assert "    export VLLM_API_KEY  # value hidden; exported from your shell" in out.splitlines()
    assert exe.calls[0][2]["VLLM_API_KEY"] == "s3cr3t-value"


def test_exec_environment_is_the_process_env_plus_the_manifest(capsys) -> None:
    e = ENVELOPES[0]
    environ = {"PATH": "/usr/bin", "FUSE_ALLREDUCE_RMS": "0", "OTHER": "x"}
    manifest = policy_serve.plan(policy_serve.ServeKey(e.gpu, e.tp, e.context, e.seqs),
                                 [], {"FUSE_ALLREDUCE_RMS": "0"})
    code, out, err, exe = _run([*_key_args(e), "--allow-avoided", "keep-fuse-allreduce-rms",
                                "--", MODEL], capsys, environ)
    assert code == 0, err
    assert "user FUSE_ALLREDUCE_RMS=0 overrides" in out
    (file, argv, run_env), = exe.calls
    assert file == "vllm"
    assert run_env == {**environ, **manifest.env}
    assert argv == ["vllm", "serve", MODEL, *manifest.argv]


@pytest.mark.parametrize("bad", [
    ["--gpu", "ampere", "--tp", "8", "--context", "1", "--seqs", "1"],
    ["--gpu", "sm86", "--tp", "0", "--context", "1", "--seqs", "1"],
    ["--gpu", "sm86", "--tp", "8", "--context", "lots", "--seqs", "1"],
    ["--gpu", "sm86", "--tp", "8", "--context", "1"],
])
def test_bad_launcher_arguments_exit_2_with_the_accepted_form(bad, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        serve.main(bad, environ={}, execvpe=Exec())
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "expected" in err or "required" in err


def test_gpu_auto_without_a_gpu_is_a_clear_error(capsys, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, _, err, exe = _run(["--gpu", "auto", "--tp", "8", "--context", "262144",
                              "--seqs", "1", "--", MODEL], capsys)
    assert code == 2 and exe.calls == []
    assert "--gpu auto" in err and "no CUDA GPU" in err and "--gpu sm86" in err


def test_gpu_auto_reads_the_compute_capability(capsys, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (8, 6))
    code, out, err, _ = _run(["--gpu", "auto", "--tp", "8", "--context", "262144",
                              "--seqs", "1", "--dry-run", "--json", "--", MODEL], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["key"]["gpu"] == "sm86" and doc["source"].startswith("envelope:")


def test_console_script_end_to_end() -> None:
    ours = [ep for ep in entry_points(group="console_scripts") if ep.name == "dsv4-serve"]
    assert len(ours) == 1 and ours[0].value == "dsv4_vllm.serve:main"
    script = os.path.join(os.path.dirname(sys.executable), "dsv4-serve")
    env = {k: v for k, v in os.environ.items() if k != "VLLM_TARGET_DEVICE"}
    e = ENVELOPES[0]
    done = subprocess.run([script, *_key_args(e), "--dry-run", "--json", "--", MODEL],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    start = done.stdout.index("{\n")
    doc = json.loads(done.stdout[start:])
    assert doc["source"] == f"envelope:{e.id}" and doc["argv"][2] == MODEL
