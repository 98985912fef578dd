"""``dsv4-evals logs``: capture-shape checks on vLLM 0.33.0-format server logs."""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

import pytest
from dsv4_evals import logs
from dsv4_evals._patterns import PatternError
from dsv4_evals.logs.rules import load_rules, normalise, with_expectations
from dsv4_evals.logs.scan import scan, split_lines
from hypothesis import given
from hypothesis import strategies as st

DATA = Path(__file__).parent / "data" / "logs"


def run_logs(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="dsv4-evals")
    logs.register(parser.add_subparsers(required=True))
    args = parser.parse_args(["logs", *argv])
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def read(name: str) -> str:
    with (DATA / name).open(encoding="utf-8", newline="") as fh:
        return fh.read()


def line_numbers(text: str, needle: str) -> list[int]:
    """1-based numbers of the newline-separated lines containing ``needle`` (any case)."""
    return [i for i, line in enumerate(text.split("\n"), 1) if needle.lower() in line.lower()]


def by_name(doc: dict) -> dict[str, dict]:
    return {c["name"]: c for c in doc["checks"]}


def test_good_log_passes_every_check(capsys):
    code, out, _ = run_logs([str(DATA / "good.log"), "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["ok"] is True
    checks = by_name(doc)
    assert set(checks) == {"num_spec_tokens", "uniform_decode_query_len", "capture_sizes", "cg_mode"}
    assert all(c["status"] == "pass" for c in checks.values())
    # The start-up config line is where the shape is first visible.
    engine_line = line_numbers(read("good.log"), "Initializing a V1 LLM engine")[0]
    assert checks["num_spec_tokens"]["first_line"] == engine_line
    # FULL_DECODE_ONLY (config and metrics summary) and the "(decode, FULL)" bar all
    # reduce to FULL for decode.
    assert checks["cg_mode"]["observed"] == {"FULL": 3}
    assert checks["capture_sizes"]["observed"] == {"[1]": 2}
    assert doc["findings"] == []


def test_good_log_human_table(capsys):
    code, out, _ = run_logs([str(DATA / "good.log")], capsys)
    assert code == 0
    assert "num_spec_tokens" in out and "verdict: OK" in out
    assert "no cudagraph skip/miss lines" in out


def test_skip_and_miss_lines_are_each_listed_as_root_causes(capsys):
    text = read("skip_miss.log")
    code, out, _ = run_logs([str(DATA / "skip_miss.log"), "--json"], capsys)
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False
    found = {(f["rule"], f["line"]) for f in doc["findings"]}
    assert ("cudagraph skip", line_numbers(text, "cudagraph skip")[0]) in found
    assert ("cudagraph miss", line_numbers(text, "cudagraph miss")[0]) in found
    # The metrics row of a one-token eager step is a miss too.
    eager_rows = [
        i
        for i, line in enumerate(text.split("\n"), 1)
        if re.search(r"\| 1 +\| 1 +\| 0 +\| NONE", line)
    ]
    assert len(eager_rows) == 1
    assert ("eager 1-token step", eager_rows[0]) in found
    assert len(doc["findings"]) == 3
    # The miss diagnostic also reports cg_mode=NONE: the decode mode check fails on it.
    cg = by_name(doc)["cg_mode"]
    assert cg["status"] == "fail"
    assert cg["first_wrong"]["line"] == line_numbers(text, "cudagraph miss")[0]


def test_wrong_capture_sizes_fail_unless_expected(capsys):
    path = str(DATA / "wrong_capture_sizes.log")
    code, out, _ = run_logs([path, "--json"], capsys)
    checks = by_name(json.loads(out))
    assert code == 1
    assert checks["capture_sizes"]["status"] == "fail"
    assert checks["capture_sizes"]["observed"] == {"[1, 2, 4, 8]": 2}
    assert all(checks[n]["status"] == "pass" for n in checks if n != "capture_sizes")
    code, out, _ = run_logs([path, "--json", "--expect-capture-sizes", "1,2, 4 8"], capsys)
    assert code == 0 and json.loads(out)["ok"] is True


def test_spec_tokens_fail_and_raise_the_decode_query_len(capsys):
    code, out, _ = run_logs([str(DATA / "spec_tokens.log"), "--json"], capsys)
    checks = by_name(json.loads(out))
    assert code == 1
    assert checks["num_spec_tokens"]["observed"] == {"2": 1}
    assert checks["num_spec_tokens"]["status"] == "fail"
    # Evidence is the matched part of the (very long) start-up line, not all of it.
    evidence = checks["num_spec_tokens"]["first_wrong"]["text"]
    assert "num_spec_tokens=2" in evidence and len(evidence) < 300
    assert checks["uniform_decode_query_len"]["observed"] == {"3": 1}
    # Spec decode rounds the capture sizes up to multiples of 1 + num_spec_tokens.
    assert checks["capture_sizes"]["observed"] == {"[3]": 2}
    code, out, _ = run_logs(
        [
            str(DATA / "spec_tokens.log"),
            "--json",
            "--expect",
            "num_spec_tokens=2",
            "--expect",
            "uniform_decode_query_len=3",
            "--expect-capture-sizes",
            "[3]",
        ],
        capsys,
    )
    assert code == 0


def test_a_log_without_the_shape_reports_missing(tmp_path, capsys):
    path = tmp_path / "short.log"
    path.write_text(read("good.log").split("\n")[0] + "\n")
    code, out, _ = run_logs([str(path), "--json"], capsys)
    doc = json.loads(out)
    assert code == 1
    assert {c["status"] for c in doc["checks"]} == {"missing"}


def test_carriage_returns_keep_editor_line_numbers():
    text = "first\n\rbar 0%\rCapturing CUDA graphs (decode, PIECEWISE): 100%\nlast\n"
    assert list(split_lines(text)) == [
        (1, "first"),
        (2, "bar 0%"),
        (2, "Capturing CUDA graphs (decode, PIECEWISE): 100%"),
        (3, "last"),
    ]
    report = scan(text, load_rules())
    cg = next(c for c in report.checks if c.name == "cg_mode")
    assert [(o.line, o.value) for o in cg.observations] == [(2, "PIECEWISE")]
    assert cg.status == "fail"


def test_ansi_colour_codes_are_ignored():
    line = "\x1b[33mWARNING\x1b[0m 11-30 09:15:44 SM86 \x1b[1mcudagraph\x1b[0m skip: num_tokens=1"
    report = scan(line + "\n", load_rules())
    assert [(f.rule, f.line) for f in report.findings] == [("cudagraph skip", 1)]


def test_downgrade_warning_to_none_fails_the_decode_mode():
    good = read("good.log")
    warning = (
        "(EngineCore_DP0 pid=22011) WARNING 11-30 09:14:30 [config/compilation.py:1418] "
        "CUDAGraphMode.FULL_DECODE_ONLY is not supported with FLASHMLA_SPARSE backend "
        "(support: AttentionCGSupport.NEVER); setting cudagraph_mode=NONE because "
        "attention is not compiled piecewise"
    )
    report = scan(good + warning + "\n", load_rules())
    cg = next(c for c in report.checks if c.name == "cg_mode")
    assert cg.status == "fail" and cg.observed()["NONE"] == 1


def test_seeded_noise_does_not_change_the_verdict():
    """Interleave the good log with random unrelated lines: same checks, same values."""
    rng = random.Random(20261130)
    words = ["INFO", "DEBUG", "tokens/s", "KV", "cache", "block", "rank", "prefill", "decode"]
    lines = read("good.log").split("\n")
    mixed: list[str] = []
    for line in lines:
        for _ in range(rng.randint(0, 3)):
            mixed.append(" ".join(rng.choice(words) for _ in range(rng.randint(1, 9))))
        mixed.append(line)
    report = scan("\n".join(mixed), load_rules())
    assert report.ok
    assert [c.observed() for c in report.checks] == [
        c.observed() for c in scan(read("good.log"), load_rules()).checks
    ]


@given(
    spec=st.integers(min_value=0, max_value=6),
    sizes=st.lists(st.integers(min_value=1, max_value=512), min_size=1, max_size=6),
    mode=st.sampled_from(["FULL", "NONE", "PIECEWISE"]),
)
def test_runbook_diagnostics_pass_only_at_the_expected_shape(spec, sizes, mode):
    line = (
        f"(Worker_TP0 pid=7) DEBUG dispatch num_spec_tokens={spec} "
        f"uniform_decode_query_len={spec + 1} capture_sizes={sizes} cg_mode={mode}"
    )
    report = scan(line + "\n", load_rules())
    status = {c.name: c.status for c in report.checks}
    assert status["num_spec_tokens"] == ("pass" if spec == 0 else "fail")
    assert status["uniform_decode_query_len"] == ("pass" if spec == 0 else "fail")
    assert status["capture_sizes"] == ("pass" if sizes == [1] else "fail")
    assert status["cg_mode"] == ("pass" if mode == "FULL" else "fail")


@given(values=st.lists(st.integers(min_value=0, max_value=10**6), min_size=0, max_size=8))
def test_int_list_forms_normalise_alike(values):
    canonical = "[" + ", ".join(map(str, values)) + "]"
    assert normalise("int_list", ",".join(map(str, values))) == canonical
    assert normalise("int_list", " ".join(map(str, values))) == canonical
    assert normalise("int_list", str(values)) == canonical


def test_custom_pattern_file_replaces_the_shipped_one(tmp_path, capsys):
    rules = tmp_path / "mine.toml"
    rules.write_text(
        'schema = 1\n[[check]]\nname = "max_capture"\nkind = "int"\nexpect = "1"\n'
        "[[check.pattern]]\nregex = \"'max_cudagraph_capture_size': (?P<value>\\\\d+)\"\n"
    )
    code, out, _ = run_logs([str(DATA / "wrong_capture_sizes.log"), "--json", "--patterns",
                             str(rules)], capsys)
    doc = json.loads(out)
    assert code == 1
    assert doc["patterns"] == str(rules)
    assert doc["checks"][0]["observed"] == {"8": 1}
    code, out, _ = run_logs([str(DATA / "good.log"), "--json", "--patterns", str(rules)], capsys)
    assert code == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('schema = 1\n[[check]]\nname = "x"\nkind = "int"\nexpect = "1"\n'
         '[[check.pattern]]\nregex = "(unclosed"\n', "invalid regular expression"),
        ('schema = 1\n[[check]]\nname = "x"\nkind = "float"\nexpect = "1"\n'
         '[[check.pattern]]\nregex = "(?P<value>1)"\n', "expected one of int, int_list, word"),
        ('schema = 1\n[[check]]\nname = "x"\nkind = "int"\nexpect = "1"\n'
         '[[check.pattern]]\nregex = "no group"\n', "exactly one of"),
        ('schema = 2\n', "schema = 1"),
        ('schema = 1\ncheks = []\n', "unknown key(s) cheks"),
        ("schema = [", "not valid TOML"),
    ],
)
def test_bad_pattern_files_are_refused_by_name(tmp_path, capsys, body, message):
    rules = tmp_path / "bad.toml"
    rules.write_text(body)
    code, out, err = run_logs([str(DATA / "good.log"), "--patterns", str(rules)], capsys)
    assert code == 2 and out == ""
    assert str(rules) in err and message in err


def test_unknown_expectation_and_missing_log_are_usage_errors(tmp_path, capsys):
    code, _, err = run_logs([str(DATA / "good.log"), "--expect", "nope=1"], capsys)
    assert code == 2 and "unknown check(s) nope" in err
    code, _, err = run_logs([str(tmp_path / "absent.log")], capsys)
    assert code == 2 and "absent.log" in err
    with pytest.raises(PatternError, match="not a list of integers"):
        with_expectations(load_rules(), {"capture_sizes": "1,x"})


def test_the_dsv4_evals_command_dispatches_to_logs(capsys):
    from dsv4_evals.cli import main

    assert main(["logs", str(DATA / "good.log"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert main(["logs", str(DATA / "spec_tokens.log"), "--json"]) == 1
