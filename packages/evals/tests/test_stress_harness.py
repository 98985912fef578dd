"""The stress harness end to end, against a scripted server on 127.0.0.1.

Every expected number below is computed from the test's own plan (which behaviour
each request index gets) and the behaviour table, never from the harness.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from _http_scripted_server import BEHAVIOURS, PROMPT_TOKENS, ScriptedServer, completion_tokens
from dsv4_evals import stress
from dsv4_evals.stress import run_command
from dsv4_evals.stress.width import c128a_widths
from rich.console import Console

PAYLOAD = Path(__file__).parent / "data" / "stress" / "payload.json"
CONCURRENCY, WARMUP, WAVES = 4, 2, 3
TOTAL = CONCURRENCY * (WARMUP + WAVES)


def build_parser() -> argparse.ArgumentParser:
    """Only this subcommand, so these tests do not depend on the others being present."""
    parser = argparse.ArgumentParser(prog="dsv4-evals")
    stress.register(parser.add_subparsers(dest="command", required=True))
    return parser


def main(args: list[str]) -> int:
    ns = build_parser().parse_args(args)
    return int(ns.func(ns))


def make_plan(seed: int, names: list[str]) -> list[str]:
    """Every behaviour at least once, the rest drawn at random, shuffled; seeded."""
    rng = random.Random(seed)
    plan = list(names) + [rng.choice(names) for _ in range(TOTAL - len(names))]
    rng.shuffle(plan)
    return plan


def write_log(path: Path, seed: int) -> dict[str, int]:
    """A server log of benign lines plus planted error lines; returns expected counts."""
    rng = random.Random(seed)
    planted = {
        "cuda_error": "RuntimeError: CUDA error: misaligned address",
        "illegal_memory_access": "torch.AcceleratorError: an illegal memory access was met",
        "assertion": "AssertionError: width must be a multiple of 128",
        "graph_error": "CUDA graph capture failed for batch size 8",
        "fatal": "FATAL: engine core died unexpectedly",
        "traceback": "Traceback (most recent call last):",
    }
    counts = {name: rng.randint(1, 3) for name in planted}
    lines = [f"INFO 08-18 12:{i:02d}:00 engine step {i} ok" for i in range(200)]
    for name, text in planted.items():
        for _ in range(counts[name]):
            lines.insert(rng.randrange(len(lines) + 1), text)
    path.write_text("\n".join(lines) + "\n")
    # The CUDA error line above names no other pattern; the illegal-access line does
    # not say "CUDA error", so each planted line counts under exactly its own name.
    return counts


def argv(server: ScriptedServer, out: Path, *extra: str) -> list[str]:
    return [
        "stress", "--base-url", server.base_url, "--payload", str(PAYLOAD),
        "--model", "scripted-model", "--concurrency", str(CONCURRENCY),
        "--warmup-waves", str(WARMUP), "--waves", str(WAVES),
        "--timeout", "0.5", "--out", str(out), *extra,
    ]  # fmt: skip


def expected_phase(plan: list[str], phase_indices: range) -> dict:
    kinds = [BEHAVIOURS[plan[i]] for i in phase_indices]
    ok = [k for k in kinds if k["kind"] == "ok"]
    return {
        "requests": len(kinds),
        "responses": len(ok),
        "hits": sum(k["hit"] for k in ok),
        "errors": len(kinds) - len(ok),
        "error_classes": dict(Counter(k["kind"] for k in kinds if k["kind"] != "ok")),
        "finish_reasons": dict(Counter(k["finish"] for k in ok)),
        "invalid_tool_call_responses": sum(not k["valid"] for k in ok),
    }


@pytest.mark.parametrize("seed", [11, 2024])
def test_every_response_class_is_counted(tmp_path: Path, seed: int) -> None:
    plan = make_plan(seed, list(BEHAVIOURS))
    log = tmp_path / "server.log"
    log_counts = write_log(log, seed)
    out = tmp_path / "run"
    with ScriptedServer(plan.__getitem__, slow_s=1.5) as server:
        code = main(argv(server, out, "--server-log", str(log)))
    assert code == 1
    report = json.loads((out / "report.json").read_text())

    split = CONCURRENCY * WARMUP
    for name, indices in (
        ("warmup", range(split)),
        ("measured", range(split, TOTAL)),
        ("total", range(TOTAL)),
    ):
        got = report["phases"][name]
        for key, value in expected_phase(plan, indices).items():
            assert got[key] == value, (name, key)

    ok = [i for i in range(TOTAL) if BEHAVIOURS[plan[i]]["kind"] == "ok"]
    hist = Counter(BEHAVIOURS[plan[i]]["tools"] for i in ok)
    assert report["tool_call_histogram"] == {str(k): v for k, v in sorted(hist.items())}
    largest = max(ok, key=lambda i: (completion_tokens(i), i))
    assert report["tokens"]["largest_prompt_plus_completion"] == PROMPT_TOKENS + completion_tokens(
        largest
    )
    assert report["tokens"]["prompt_tokens_max"] == PROMPT_TOKENS
    assert {k: m["count"] for k, m in report["log_scan"]["matches"].items()} == log_counts
    assert report["complete"] and not report["verdict"]["passed"]

    lines = (out / "results.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["index"] for line in lines) == list(range(TOTAL))
    md = (out / "report.md").read_text()
    hits = sum(BEHAVIOURS[plan[i]].get("hit", False) for i in range(TOTAL))
    assert f"- Total: {hits}/{TOTAL} hits" in md
    assert "**Verdict: FAIL**" in md


def test_overrides_reach_the_server_and_only_the_base_url(tmp_path: Path, monkeypatch) -> None:
    # A proxy from the environment must not be used: it points at a closed port.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    plan = make_plan(5, ["text", "tools1", "tools4", "tools6", "length_text"])
    log = tmp_path / "clean.log"
    log.write_text("".join(f"INFO step {i} ok\n" for i in range(50)))
    out = tmp_path / "run"
    with ScriptedServer(plan.__getitem__) as server:
        code = main(argv(server, out, "--server-log", str(log), "--max-tokens", "777",
                         "--temperature", "0.25"))  # fmt: skip
    assert code == 0
    assert sorted(server.received) == list(range(TOTAL))
    assert set(server.paths) == {"/v1/chat/completions"}
    for body in server.bodies:
        assert body["model"] == "scripted-model"
        assert body["max_tokens"] == 777
        assert body["temperature"] == 0.25
        assert body["stream"] is False
        assert [t["function"]["name"] for t in body["tools"]] == [
            "get_weather", "search_docs", "run_query",
        ]  # fmt: skip
    md = (out / "report.md").read_text()
    assert "**Verdict: PASS**" in md
    assert "Server error scan: zero" in md


def test_json_flag_prints_the_report(tmp_path: Path, capsys) -> None:
    plan = ["text"] * TOTAL
    with ScriptedServer(plan.__getitem__) as server:
        code = main(argv(server, tmp_path / "run", "--json"))
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "run" / "report.json").read_text())
    assert printed["phases"]["total"]["finish_reasons"] == {"stop": TOTAL}


def test_progress_bar_on_a_terminal_does_not_break_the_run(tmp_path: Path) -> None:
    plan = make_plan(3, ["text", "tools6", "length_empty"])
    sink = io.StringIO()
    console = Console(file=sink, force_terminal=True, width=100)
    with ScriptedServer(plan.__getitem__) as server:
        args = build_parser().parse_args(argv(server, tmp_path / "run"))
        code = run_command(args, console=console)
    assert code == (1 if "length_empty" in plan else 0)
    assert f"{TOTAL}/{TOTAL}" in sink.getvalue()


def test_interrupt_keeps_every_result_and_resume_finishes(tmp_path: Path) -> None:
    rng = random.Random(77)
    plan = [rng.choice(["text", "tools1", "tools6", "http_500"]) for _ in range(TOTAL)]
    k = rng.randint(CONCURRENCY + 1, TOTAL - CONCURRENCY - 1)  # stop inside a later wave
    seen: list[int] = []

    def stop_after_k(record: dict) -> None:
        seen.append(record["index"])
        if len(seen) == k:
            raise KeyboardInterrupt

    out = tmp_path / "run"
    with ScriptedServer(plan.__getitem__) as server:
        args = build_parser().parse_args(argv(server, out))
        assert run_command(args, after_result=stop_after_k) == 130
        lines = (out / "results.jsonl").read_text().splitlines()
        assert len(lines) == k
        first = [json.loads(line)["index"] for line in lines]  # every line is complete JSON
        assert first == seen
        report = json.loads((out / "report.json").read_text())
        assert not report["complete"] and report["recorded_requests"] == k

        server.received.clear()
        assert main(argv(server, out, "--resume")) == (1 if "http_500" in plan else 0)
        resent = list(server.received)

    lines = (out / "results.jsonl").read_text().splitlines()
    indices = [json.loads(line)["index"] for line in lines]
    assert len(indices) == len(set(indices)) == TOTAL
    assert sorted(indices) == list(range(TOTAL))
    assert sorted(resent) == sorted(set(range(TOTAL)) - set(first))
    report = json.loads((out / "report.json").read_text())
    assert report["complete"]
    assert report["phases"]["total"]["errors"] == plan.count("http_500")


def test_resume_refuses_a_different_run(tmp_path: Path, capsys) -> None:
    plan = ["text"] * TOTAL
    out = tmp_path / "run"
    with ScriptedServer(plan.__getitem__) as server:
        assert main(argv(server, out)) == 0
        assert main(argv(server, out)) == 2
        assert "--resume" in capsys.readouterr().err
        changed = argv(server, out, "--resume")
        changed[changed.index("--concurrency") + 1] = "2"
        assert main(changed) == 2
    err = capsys.readouterr().err
    assert "concurrency: recorded 4, now 2" in err


def _expected_width(max_model_len: int, seq: int) -> tuple[int, int]:
    """The seed's formula, written out here: capacity and active width."""
    cap = -(-max_model_len // 128)
    cap = -(-cap // 128) * 128
    n = max(seq // 128, 1)
    pow2 = 1 << (n - 1).bit_length()
    return cap, min(max(pow2, 128), cap)


def test_the_report_names_the_c128a_width_exercised(tmp_path: Path) -> None:
    plan = make_plan(21, ["text", "tools1", "tools6"])
    out = tmp_path / "run"
    with ScriptedServer(plan.__getitem__) as server:
        assert main(argv(server, out, "--max-model-len", "81920")) == 0
    report = json.loads((out / "report.json").read_text())
    longest = PROMPT_TOKENS + max(completion_tokens(i) for i in range(TOTAL))
    cap, width = _expected_width(81920, longest)
    assert (cap, width) == (640, 128)  # the seed's run: width 128, row stride 640
    assert report["c128a"] == {
        "max_model_len": 81920, "longest_sequence": longest, "capacity": cap, "width": width,
    }  # fmt: skip
    md = (out / "report.md").read_text()
    assert f"exercised logical C128A width {width} with the capacity row stride {cap}" in md


@pytest.mark.parametrize(("max_model_len", "seq"), [(1 << 20, 100_000), (131072, 70_000),
                                                    (1 << 20, 1 << 20), (4096, 10)])  # fmt: skip
def test_c128a_width_follows_the_formula(max_model_len: int, seq: int) -> None:
    cap, width = _expected_width(max_model_len, seq)
    got = c128a_widths(max_model_len, seq)
    assert got is not None and (got["capacity"], got["width"]) == (cap, width)


def test_ctrl_c_in_a_real_process_keeps_results_and_resume_finishes(tmp_path: Path) -> None:
    """SIGINT to a running ``stress`` process: exit 130, every stored line intact."""
    behaviour = {"later": "slow"}
    first_waves = CONCURRENCY * 2

    def plan(i: int) -> str:
        return "text" if i < first_waves else behaviour["later"]

    out = tmp_path / "run"
    code = (
        "import argparse, sys\n"
        "from dsv4_evals import stress\n"
        "p = argparse.ArgumentParser()\n"
        "stress.register(p.add_subparsers())\n"
        "ns = p.parse_args(sys.argv[1:])\n"
        "sys.exit(ns.func(ns))\n"
    )
    with ScriptedServer(plan, slow_s=4.0) as server:
        args = argv(server, out)
        args[args.index("--timeout") + 1] = "60"
        proc = subprocess.Popen([sys.executable, "-c", code, *args], env=dict(os.environ),
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        results = out / "results.jsonl"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if results.exists() and len(results.read_text().splitlines()) >= first_waves:
                break
            time.sleep(0.05)
        time.sleep(0.3)  # the third wave is now in flight, stuck on slow answers
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert "--resume" in err
        lines = results.read_text().splitlines()
        assert sorted(json.loads(x)["index"] for x in lines) == list(range(first_waves))
        assert not json.loads((out / "report.json").read_text())["complete"]

        behaviour["later"] = "tools4"
        assert main(argv(server, out, "--resume")) == 0
    indices = [json.loads(x)["index"] for x in results.read_text().splitlines()]
    assert sorted(indices) == list(range(TOTAL))
