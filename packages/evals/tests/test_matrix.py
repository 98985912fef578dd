"""``dsv4-evals matrix``: the judgement rule, and runs against scripted servers.

Each variant gets a scripted streaming server whose decode rate the test sets (one
token per ``period``), so the expected medians and the winner follow from the
script, never from the harness. The rule itself is checked against an independent
restatement on random runs.
"""

from __future__ import annotations

import json
import random
import socket
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import dsv4_evals.ladder as ladder
import pytest
from dsv4_evals.cli import main
from dsv4_evals.matrix import judge, load_matrix
from dsv4_evals.matrix.stats import MIN_REPEATS
from hypothesis import given
from hypothesis import strategies as st
from test_ladder_server import ScriptedServer

CONTROL_PERIOD = 0.005  # 200 tok/s per sequence
COMMON = ["--max-tokens", "60", "--warmup", "0", "--no-progress", "--json"]


@dataclass(frozen=True)
class Envelope:
    id: str = "sm86-tp8-64k-control"
    gpu: str = "sm86"
    tp: int = 8
    context: int = 8192
    seqs: int = 1
    expected_tok_s: float | None = None


@pytest.fixture(autouse=True)
def small_control(monkeypatch):
    """The matrix's envelope id with a small context, so prompts stay short."""
    monkeypatch.setattr(ladder, "ENVELOPE_SOURCE", lambda: [Envelope()])


def run(argv: list[str], capsys) -> tuple[int, dict | None, str]:
    code = main(["matrix", *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip().startswith("{") else None), err


# --------------------------------------------------------------------------- the rule
rates = st.lists(st.floats(1.0, 1000.0, allow_nan=False), min_size=MIN_REPEATS, max_size=7)


@given(control=rates, others=st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), rates,
                                             max_size=4))
def test_winner_only_when_beating_the_control_by_more_than_the_spread(control, others):
    runs = {"control": control, **others}
    j = judge(runs, {}, "control")
    cmed, cspread = statistics.median(control), max(control) - min(control)
    beating = {
        n: statistics.median(r) for n, r in others.items()
        if statistics.median(r) - cmed > max(cspread, max(r) - min(r))
    }
    if beating:
        best = max(beating, key=beating.get)
        assert j.winner == best and j.reason.startswith(f"winner: {best},")
    else:
        assert j.winner is None and j.reason.startswith("no winner")
    by = {s.name: s for s in j.summaries}
    assert [s.name for s in j.summaries] == list(runs)
    for name, r in runs.items():
        s = by[name]
        assert s.median == statistics.median(r) and s.spread == max(r) - min(r)
        assert s.ratio == pytest.approx(statistics.median(r) / cmed)
        if name in beating:
            assert s.verdict in ("winner", "beats control")
        elif name != "control":
            assert s.verdict in ("within spread", "slower")


def test_a_failed_run_or_too_few_runs_cannot_win():
    j = judge({"control": [100, 101, 102], "a": [500, None, 510], "b": [900, 905]},
              {"a": ["ServerError: boom"]}, "control")
    by = {s.name: s for s in j.summaries}
    assert by["a"].verdict == "error" and by["b"].verdict == "too few runs"
    assert j.winner is None
    j = judge({"control": [100, None, 102], "a": [500, 505, 510]}, {"control": ["x"]}, "control")
    assert j.winner is None and j.reason.startswith("no verdict: the control was not measured")


def test_runs_read_in_bursts_are_shown_but_never_compared():
    runs = {"control": [100, 101, 102], "a": [500, 505, 510], "b": [300, 301, 302]}
    j = judge(runs, {}, "control", bunched={"a": 1})
    by = {s.name: s for s in j.summaries}
    assert by["a"].verdict == "bunched" and by["a"].median == 505 and by["a"].ratio is None
    assert j.winner == "b"  # the faster "a" is not a decode rate
    j = judge(runs, {}, "control", bunched={"control": 3})
    assert j.winner is None and j.reason.startswith("no winner: the control's streams")
    assert {s.verdict for s in j.summaries} == {"bunched", "measured"}


# --------------------------------------------------------------------------- scripted servers
def test_running_servers_name_the_fast_variant(tmp_path, capsys):
    rng = random.Random(1401)
    speedup = rng.uniform(1.6, 2.4)
    periods = {"control": CONTROL_PERIOD, "tree-simple": CONTROL_PERIOD / speedup,
               "ring-simple": CONTROL_PERIOD * 2, "tree-ll128": CONTROL_PERIOD * 1.5}
    servers = {n: ScriptedServer(ttft_s=0.05, period_s=p) for n, p in periods.items()}
    for s in servers.values():
        s.__enter__()
    try:
        code, doc, _ = run([*(f"--server={n}={s.base_url}/v1/" for n, s in servers.items()),
                            *COMMON, "--out", str(tmp_path / "m")], capsys)
    finally:
        for s in servers.values():
            s.__exit__()
    assert code == 0 and doc is not None
    by = {v["name"]: v for v in doc["variants"]}
    assert list(by) == ["control", "tree-simple", "ring-simple", "tree-ll128"]  # file order
    assert doc["winner"] == "tree-simple" and by["tree-simple"]["verdict"] == "winner"
    assert by["tree-simple"]["ratio"] == pytest.approx(speedup, rel=0.08)
    assert by["ring-simple"]["ratio"] == pytest.approx(0.5, rel=0.08)
    assert by["ring-simple"]["verdict"] == "slower" and by["tree-ll128"]["verdict"] == "slower"
    for name, v in by.items():
        assert len(v["runs"]) == 3
        assert v["median_tok_s"] == pytest.approx(1 / periods[name], rel=0.08)
        assert v["base_url"] == servers[name].base_url  # the root, whatever was typed
        assert v["env"] == {"SPECULATIVE_CONFIG": "none", **load_matrix().get(name).own_env}
    # Runs interleave: repeat by repeat, each variant in turn.
    order = [(m["repeat"], m["variant"]) for m in doc["measurements"]]
    assert order == [(r, n) for r in range(3) for n in periods]
    md = (tmp_path / "m" / "matrix.md").read_text()
    assert "**winner: tree-simple, median" in md and "| tree-simple | NCCL_ALGO=Tree" in md
    lines = (tmp_path / "m" / "measurements.jsonl").read_text().splitlines()
    assert len(lines) == 12


def test_one_variant_at_a_time_accumulates_in_out(tmp_path, capsys):
    out = tmp_path / "acc"
    with ScriptedServer(ttft_s=0.05, period_s=CONTROL_PERIOD) as server:
        code, doc, _ = run(["--base-url", server.base_url, "--label", "tree-simple", *COMMON,
                            "--out", str(out)], capsys)
        assert code == 0 and doc["winner"] is None
        assert doc["verdict"].startswith("no verdict: the control was not measured")
        code, doc, _ = run(["--base-url", server.base_url + "/v1", "--label", "control",
                            *COMMON, "--repeats", "4", "--out", str(out)], capsys)
    assert code == 0
    by = {v["name"]: v for v in doc["variants"]}
    assert set(by) == {"control", "tree-simple"}
    assert len(by["control"]["runs"]) == 4 and len(by["tree-simple"]["runs"]) == 3
    # Same server, same rate: no winner, however the medians fall.
    assert by["tree-simple"]["ratio"] == pytest.approx(1.0, rel=0.08)
    assert [m["repeat"] for m in doc["measurements"]] == [0, 1, 2, 3, 4, 5, 6]
    # Other settings into the same folder are refused before anything is sent.
    code, _, err = run(["--base-url", server.base_url, "--label", "control", "--max-tokens",
                        "30", "--no-progress", "--out", str(out)], capsys)
    assert code == 2 and "max_tokens: recorded 60, now 30" in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SERVE_BY_ENV = """
import json, os, subprocess, sys
seen = {{k: os.environ.get(k) for k in ("SPECULATIVE_CONFIG", "NCCL_ALGO", "NCCL_PROTO")}}
with open({record!r}, "a") as fh:
    fh.write(json.dumps(seen) + "\\n")
period = {fast} if seen["NCCL_ALGO"] == "Tree" and seen["NCCL_PROTO"] == "Simple" else {slow}
os.execv(sys.executable, [sys.executable, {server!r}, *sys.argv[1:], "--period", str(period)])
"""


def test_launch_starts_each_variant_with_its_env(tmp_path, capsys):
    record = tmp_path / "envs.jsonl"
    script = tmp_path / "serve_by_env.py"
    script.write_text(SERVE_BY_ENV.format(
        record=str(record), fast=CONTROL_PERIOD / 2, slow=CONTROL_PERIOD,
        server=str(Path(__file__).with_name("test_ladder_server.py"))))
    port = _free_port()
    code, doc, _ = run(["--launch", "--serve-command", f"{sys.executable} {script}",
                        "--variant", "tree-simple", "--variant", "ring-simple",
                        "--base-url", f"http://127.0.0.1:{port}", "--launch-timeout", "30",
                        *COMMON, "--out", str(tmp_path / "l"), "--",
                        "fake/DeepSeek-V4", "--port", str(port), "--ttft", "0.05"], capsys)
    assert code == 0 and doc is not None and doc["launched"] is True
    envs = [json.loads(line) for line in record.read_text().splitlines()]
    assert envs == [  # one launch per variant, in file order, the control first
        {"SPECULATIVE_CONFIG": "none", "NCCL_ALGO": None, "NCCL_PROTO": None},
        {"SPECULATIVE_CONFIG": "none", "NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"},
        {"SPECULATIVE_CONFIG": "none", "NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"},
    ]
    by = {v["name"]: v for v in doc["variants"]}
    assert doc["winner"] == "tree-simple"
    assert by["tree-simple"]["ratio"] == pytest.approx(2.0, rel=0.1)
    assert by["ring-simple"]["verdict"] != "winner"
    assert all(len(v["runs"]) == 3 for v in by.values())
    assert (tmp_path / "l" / "server-tree-simple.log").is_file()


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('schema = 1\nenvelope = "e"\n[[variant]]\nname = "a"\n', "exactly one variant needs"),
        ('schema = 1\nenvelope = "e"\n[[variant]]\nname = "a"\ncontrol = true\n'
         '[[variant]]\nname = "b"\ncontrol = true\n', "found 2 (a, b)"),
        ('schema = 1\nenvelope = "e"\n[[variant]]\nname = "a"\ncontrol = true\n'
         'env = { NCCL_NTHREADS = 512 }\n', "expected a string (quote numbers)"),
        ('schema = 1\nenvelope = "e"\n[[variant]]\nname = "A b"\ncontrol = true\n',
         "not a lowercase label"),
        ('schema = 1\nenvelope = "e"\nvariants = []\n', "unknown key(s) variants"),
    ],
)
def test_bad_variant_files_are_refused_by_name(tmp_path, capsys, body, message):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    code, doc, err = run(["--variants", str(path), "--server", "a=http://127.0.0.1:1"], capsys)
    assert code == 2 and doc is None
    assert str(path) in err and message in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--server", "nope=http://127.0.0.1:1"], "variant 'nope' is not in"),
        (["--server", "control"], "expected NAME=URL"),
        (["--server", "control=127.0.0.1:1"], "--server control '127.0.0.1:1'"),
        (["--label", "control"], "give both"),
        ([], "nothing to measure"),
        (["--launch", "--server", "control=http://h:1"], "drop --server"),
        (["--variant", "tree-simple", "--server", "control=http://h:1"], "--variant selects"),
        (["--server", "control=http://h:1", "--envelope", "nope"], "not in the serve table"),
    ],
)
def test_unusable_arguments_exit_2_before_any_request(capsys, argv, message):
    code, doc, err = run(argv, capsys)
    assert code == 2 and doc is None and message in err


def test_fewer_than_three_repeats_are_refused(capsys):
    with pytest.raises(SystemExit) as info:
        main(["matrix", "--server", "control=http://h:1", "--repeats", "2"])
    assert info.value.code == 2
    assert "at least 3 runs per variant" in capsys.readouterr().err
