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


# --------------------------------------------------------------------------- spec-decode probe
SPEC_SHAPE = ["--expect", "num_spec_tokens=2", "--expect", "uniform_decode_query_len=3",
              "--expect-capture-sizes", "3"]  # the MTP shape of the probe logs: checks pass
CAPTURED = "spec is captured and loses on draft compute"
BROKEN = "spec dispatch/key selection is broken and may be worth fixing"


def probe_lines(text: str, phase: str) -> list[int]:
    return [i for i, line in enumerate(text.split("\n"), 1)
            if "SPEC_CUDAGRAPH_DEBUG" in line and f"phase={phase}" in line]


def test_spec_probe_full_reads_captured_and_passes(capsys):
    text = read("spec_probe_full.log")
    code, out, _ = run_logs([str(DATA / "spec_probe_full.log"), "--json", *SPEC_SHAPE], capsys)
    doc = json.loads(out)
    probe = doc["probes"]["spec_decode"]
    assert code == 0 and doc["ok"] is True
    assert probe["status"] == "captured" and probe["failed"] is False
    assert probe["readout"] == f"cg_mode=FULL for draft prefill and decode: {CAPTURED}"
    # FULL_DECODE_ONLY on a draft decode line counts as FULL, as for steady decode.
    assert probe["by_phase"] == {"prefill": {"FULL": 3}, "decode": {"FULL": 3}}
    assert [x["line"] for x in probe["lines"] if x["phase"] == "prefill"] == \
        probe_lines(text, "prefill")
    # Without the spec shape the capture checks fail, but the readout stays the same.
    code, out, _ = run_logs([str(DATA / "spec_probe_full.log"), "--json"], capsys)
    assert code == 1 and json.loads(out)["probes"]["spec_decode"]["status"] == "captured"


def test_spec_probe_none_reads_broken_and_fails(capsys):
    text = read("spec_probe_none.log")
    code, out, _ = run_logs([str(DATA / "spec_probe_none.log"), "--json", *SPEC_SHAPE], capsys)
    doc = json.loads(out)
    probe = doc["probes"]["spec_decode"]
    assert code == 1 and doc["ok"] is False
    assert all(c["status"] == "pass" for c in doc["checks"])  # only the probe fails
    assert probe["status"] == "dispatch broken" and probe["failed"] is True
    lines = sorted(probe_lines(text, "prefill") + probe_lines(text, "decode"))
    assert probe["readout"] == (
        f"cg_mode=NONE for draft prefill and decode (lines "
        f"{', '.join(map(str, lines[:5]))}, ...): {BROKEN}"
    )
    # The draft's NONE lines are not steady decode: the cg_mode check does not read them.
    assert by_name(doc)["cg_mode"]["observed"] == {"FULL": 4}


def test_spec_probe_mixed_names_the_eager_phase(capsys):
    text = read("spec_probe_mixed.log")
    code, out, _ = run_logs([str(DATA / "spec_probe_mixed.log"), *SPEC_SHAPE], capsys)
    assert code == 1
    prefill = ", ".join(map(str, probe_lines(text, "prefill")))
    assert f"readout: cg_mode=NONE for draft prefill (lines {prefill}): {BROKEN}" in out
    assert "verdict: FAIL" in out
    doc_code, doc_out, _ = run_logs([str(DATA / "spec_probe_mixed.log"), "--json"], capsys)
    assert doc_code == 1
    probe = json.loads(doc_out)["probes"]["spec_decode"]
    assert probe["by_phase"] == {"prefill": {"NONE": 3}, "decode": {"FULL": 3}}


def test_a_log_without_the_probe_says_so_and_is_not_failed(capsys):
    code, out, _ = run_logs([str(DATA / "good.log")], capsys)
    assert code == 0
    assert "no spec-decode probe lines (run the 64K control with SPEC_CUDAGRAPH_DEBUG=4" in out
    code, out, _ = run_logs([str(DATA / "good.log"), "--json"], capsys)
    probe = json.loads(out)["probes"]["spec_decode"]
    assert probe["status"] == "absent" and probe["lines"] == [] and probe["failed"] is False


MODES = ["FULL", "FULL_DECODE_ONLY", "NONE", "PIECEWISE"]


@given(st.lists(st.tuples(st.sampled_from(["prefill", "decode"]), st.sampled_from(MODES)),
                min_size=1, max_size=12),
       st.integers(0, 2**32 - 1))
def test_probe_outcome_matches_the_runbook_reading(steps, seed):
    rng = random.Random(seed)
    lines = [f"INFO 11-30 09:00:{i:02d} engine step {i} ok" for i in range(20)]
    for k, (phase, mode) in enumerate(steps):
        lines.insert(rng.randrange(len(lines) + 1),
                     f"(Worker_TP{k % 8} pid=9) DEBUG SPEC_CUDAGRAPH_DEBUG draft=mtp "
                     f"phase={phase} num_tokens={rng.randint(1, 4)} cg_mode={mode}")
    report = scan("\n".join(lines), load_rules())
    (probe,) = report.probes
    modes = {"FULL" if m.startswith("FULL") else m for _, m in steps}
    if "NONE" in modes:  # any eager draft step: dispatch is broken
        in_log = [ln for ln in lines if "SPEC_CUDAGRAPH_DEBUG" in ln]
        eager = list(dict.fromkeys(re.search(r"phase=(\w+)", ln).group(1)
                                   for ln in in_log if ln.endswith("cg_mode=NONE")))
        assert probe.status == "dispatch broken" and probe.failed
        assert probe.readout().startswith(f"cg_mode=NONE for draft {' and '.join(eager)} (lines ")
    elif modes == {"FULL"}:
        assert probe.status == "captured" and not probe.failed
        assert probe.readout().endswith(CAPTURED)
    else:  # PIECEWISE somewhere, no NONE: the runbook has no reading for it
        assert probe.status == "undetermined" and not probe.failed
        assert "PIECEWISE" in probe.readout()
    assert [s.line for s in probe.sightings] == [
        i for i, line in enumerate(lines, 1) if "SPEC_CUDAGRAPH_DEBUG" in line
    ]


PROBE_HEAD = ('schema = 1\n[[check]]\nname = "x"\nkind = "int"\nexpect = "1"\n'
              '[[check.pattern]]\nregex = "x=(?P<value>\\\\d+)"\n[[probe]]\nname = "p"\n')
OUTCOME = ('[[probe.outcome]]\nname = "o"\nwhen = "any"\nvalues = ["NONE"]\n'
           'readout = "r"\n')


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (PROBE_HEAD + '[[probe.pattern]]\nregex = "cg_mode=(?P<value>\\\\w+)"\n' + OUTCOME,
         "missing: phase"),
        (PROBE_HEAD + '[[probe.pattern]]\nregex = "(?P<phase>\\\\w+) (?P<value>\\\\w+)"\n'
         + OUTCOME.replace('"any"', '"most"'), "expected one of any, all"),
        (PROBE_HEAD + '[[probe.pattern]]\nregex = "(?P<phase>\\\\w+) (?P<value>\\\\w+)"\n'
         + OUTCOME.replace('"r"', '"{phase} broken"'), "unknown field(s) {phase}"),
        (PROBE_HEAD + '[[probe.pattern]]\nregex = "(?P<phase>\\\\w+) (?P<value>\\\\w+)"\n'
         + OUTCOME.replace('["NONE"]', "[]"), "non-empty list of strings"),
        (PROBE_HEAD + '[[probe.pattern]]\nregex = "(?P<phase>\\\\w+) (?P<value>\\\\w+)"\n',
         "[[outcome]]"),
    ],
)
def test_bad_probe_tables_are_refused_by_name(tmp_path, capsys, body, message):
    rules = tmp_path / "bad.toml"
    rules.write_text(body)
    code, out, err = run_logs([str(DATA / "good.log"), "--patterns", str(rules)], capsys)
    assert code == 2 and out == ""
    assert str(rules) in err and message in err
