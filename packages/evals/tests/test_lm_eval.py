"""The lm-eval helper: the seed's argv, the missing-binary error, and running it."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import stat
import sys
from pathlib import Path

import pytest
from dsv4_evals import lm_eval


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="dsv4-evals")
    lm_eval.register(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args(["lm-eval", *argv])
    return int(ns.func(ns))


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_dry_run_prints_the_seed_arguments(tmp_path: Path, capsys) -> None:
    out = tmp_path / "results"
    assert run("--base-url", "http://127.0.0.1:18004/v1", "--model", "dsv4-flash",
               "--output-path", str(out), "--dry-run") == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    argvs = [shlex.split(line) for line in lines]
    assert [flag(a, "--tasks") for a in argvs] == ["gpqa_diamond_cot_zeroshot", "gsm8k"]
    assert [flag(a, "--num_fewshot") for a in argvs] == ["0", "5"]
    for a, task in zip(argvs, ["gpqa_diamond_cot_zeroshot", "gsm8k"], strict=True):
        assert a[0] == "lm_eval"
        assert flag(a, "--model") == "local-completions"
        model_args = dict(kv.split("=", 1) for kv in flag(a, "--model_args").split(","))
        assert model_args["model"] == "dsv4-flash"
        assert model_args["base_url"] == "http://127.0.0.1:18004/v1/completions"
        assert model_args["num_concurrent"] == "32"
        assert model_args["tokenized_requests"] == "False"
        assert flag(a, "--gen_kwargs") == "max_gen_toks=32768,temperature=0.0,do_sample=False"
        assert "--log_samples" in a
        assert flag(a, "--seed") == "0"
        assert flag(a, "--output_path") == str(out / task)
    assert not out.exists()  # a dry run writes nothing


def test_options_reach_the_argv(tmp_path: Path, capsys) -> None:
    assert run("--base-url", "http://10.0.0.5:8000/", "--model", "m",
               "--output-path", str(tmp_path), "--tokenizer", "/models/tok",
               "--trust-remote-code", "--task", "gsm8k:8", "--limit", "20",
               "--extra-arg=--verbosity", "--extra-arg", "DEBUG", "--dry-run") == 0  # fmt: skip
    (line,) = capsys.readouterr().out.splitlines()
    a = shlex.split(line)
    model_args = dict(kv.split("=", 1) for kv in flag(a, "--model_args").split(","))
    assert model_args["base_url"] == "http://10.0.0.5:8000/v1/completions"
    assert model_args["tokenizer"] == "/models/tok"
    assert model_args["trust_remote_code"] == "True"
    assert flag(a, "--num_fewshot") == "8" and flag(a, "--limit") == "20"
    assert a[-2:] == ["--verbosity", "DEBUG"]


def test_bad_options_are_named(tmp_path: Path, capsys) -> None:
    assert run("--base-url", "127.0.0.1:8000", "--model", "m", "--output-path",
               str(tmp_path), "--dry-run") == 2  # fmt: skip
    assert "--base-url" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run("--base-url", "http://h/v1", "--model", "m", "--output-path", str(tmp_path),
            "--task", "arc_easy")  # fmt: skip
    assert "arc_easy:N" in capsys.readouterr().err


def test_missing_lm_eval_is_a_clear_error(tmp_path: Path, capsys) -> None:
    code = run("--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--output-path",
               str(tmp_path), "--lm-eval-bin", "lm_eval_not_installed_here")  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "not found on PATH" in err and "lm-eval[api]" in err


def _fake_lm_eval(tmp_path: Path, fail_on: str | None) -> Path:
    """An executable that records its argv and fails for one task."""
    script = tmp_path / "fake_lm_eval"
    log = tmp_path / "calls.jsonl"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "task = sys.argv[sys.argv.index('--tasks') + 1]\n"
        f"sys.exit(3 if task == {fail_on!r} else 0)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.mark.parametrize("fail_on", [None, "gsm8k"])
def test_runs_each_task_and_propagates_failure(tmp_path: Path, fail_on: str | None) -> None:
    script = _fake_lm_eval(tmp_path, fail_on)
    out = tmp_path / "out"
    code = run("--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--output-path",
               str(out), "--lm-eval-bin", str(script))  # fmt: skip
    assert code == (3 if fail_on else 0)
    calls = [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [flag(c, "--tasks") for c in calls] == ["gpqa_diamond_cot_zeroshot", "gsm8k"]
    manifest = json.loads((out / "dsv4-lm-eval.json").read_text())
    assert [a[1:] for a in manifest["argv"]] == calls
    assert os.access(script, os.X_OK)
