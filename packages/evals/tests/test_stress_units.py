"""The stress harness's parts: payload checks, classification, log scan, result store,
and cancellation of a running run."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from _http_scripted_server import ScriptedServer
from dsv4_evals._patterns import PatternError
from dsv4_evals.stress.classify import (
    CONNECT_ERROR,
    CONNECTION_DROPPED,
    MALFORMED_JSON,
    MALFORMED_RESPONSE,
    TIMEOUT,
    Result,
    classify_exception,
    classify_response,
    tool_call_problem,
)
from dsv4_evals.stress.logscan import LOG_PATTERNS, load_log_patterns, scan_log
from dsv4_evals.stress.payload import PayloadError, load_payload, parse_payload
from dsv4_evals.stress.runner import StressConfig, run_stress
from dsv4_evals.stress.store import ResultStore, StoreError, load_results
from hypothesis import given
from hypothesis import strategies as st

PAYLOAD = Path(__file__).parent / "data" / "stress" / "payload.json"
TOOLS = frozenset({"get_weather", "search_docs"})


# ---- payload -----------------------------------------------------------------------


def test_payload_declares_its_tools_and_overrides_apply() -> None:
    p = load_payload(PAYLOAD)
    assert p.tool_names == {"get_weather", "search_docs", "run_query"}
    body = p.request(model="x", max_tokens=None, temperature=0.0)
    assert body["model"] == "x" and body["max_tokens"] == 16384 and body["stream"] is False
    body = p.request(model=None, max_tokens=5, temperature=0.3)
    assert body["model"] == "dsv4-flash" and body["max_tokens"] == 5 and body["temperature"] == 0.3
    assert "stream" not in p.body  # the loaded payload itself is not modified


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1, 2]", "expected a JSON object"),
        ('{"messages": []}', "'messages' must be a non-empty list"),
        ('{"messages": [{"content": "hi"}]}', "messages[0] must be an object with a 'role'"),
        ('{"messages": [{"role": "user"}], "n": 2}', "use n=1"),
        ('{"messages": [{"role": "user"}], "tools": [{"type": "function"}]}', "tools[0]"),
        ('{"messages": [{"role": "user"}], "tools": {}}', "'tools' must be a list"),
        ("{not json", "not valid JSON (line 1, column 2"),
    ],
)
def test_bad_payloads_are_named(tmp_path: Path, content: str, message: str) -> None:
    assert_refused_by_name(tmp_path / "payload.json", content, load_payload, PayloadError,
                           message)


def assert_refused_by_name(
    path: Path, content: str, load: Callable[[Path], object], error: type[Exception],
    message: str,
) -> None:
    """``load`` refuses ``content`` (written to ``path``) with a message naming both."""
    path.write_text(content)
    with pytest.raises(error) as info:
        load(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_payload_without_model_needs_model_flag() -> None:
    p = parse_payload({"messages": [{"role": "user", "content": "hi"}]}, "inline")
    with pytest.raises(PayloadError, match="no --model given"):
        p.request(model=None, max_tokens=None, temperature=0.0)


# ---- classification ----------------------------------------------------------------


def _body(content, finish, calls=None, usage=True) -> bytes:
    msg = {"role": "assistant", "content": content}
    if calls is not None:
        msg["tool_calls"] = calls
    data = {"choices": [{"message": msg, "finish_reason": finish}]}
    if usage:
        data["usage"] = {"prompt_tokens": 11, "completion_tokens": 7}
    return json.dumps(data).encode()


def _call(name, args) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": args}}


def classify(status: int, body: bytes) -> Result:
    return classify_response(Result(index=0, wave=0, phase="warmup", latency_s=0), status, body,
                             TOOLS)  # fmt: skip


@pytest.mark.parametrize(
    ("content", "finish", "calls", "hit"),
    [
        ("", "length", None, True),
        (None, "length", None, True),
        ("   \n", "length", [], True),
        ("x", "length", None, False),
        ("", "length", [_call("get_weather", "{}")], False),
        ("", "stop", None, False),
        ("", None, None, False),
    ],
)
def test_hit_is_length_and_empty_and_no_tools(content, finish, calls, hit) -> None:
    r = classify(200, _body(content, finish, calls))
    assert r.ok and r.hit is hit and r.error_class is None
    assert (r.prompt_tokens, r.completion_tokens) == (11, 7)


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (500, b'{"error": "boom"}', "http_500"),
        (404, b"not found", "http_404"),
        (302, b"", "http_302"),
        (200, b'{"choices": [', MALFORMED_JSON),
        (200, b"\xff\xfe", MALFORMED_JSON),
        (200, b'{"object": "error"}', MALFORMED_RESPONSE),
        (200, b'{"choices": []}', MALFORMED_RESPONSE),
        (200, b'{"choices": [{"text": "legacy"}]}', MALFORMED_RESPONSE),
        (200, b"[]", MALFORMED_RESPONSE),
        (200, _body("x", "stop", calls={"not": "a list"}), MALFORMED_RESPONSE),
    ],
)
def test_errors_get_a_class(status: int, body: bytes, error: str) -> None:
    r = classify(status, body)
    assert not r.ok and not r.hit and r.error_class == error and r.http_status == status


def test_tool_call_validity() -> None:
    assert tool_call_problem(_call("get_weather", '{"q": "Paris"}'), TOOLS) is None
    assert "undeclared tool name 'rm'" in tool_call_problem(_call("rm", "{}"), TOOLS)
    assert "do not decode as JSON" in tool_call_problem(_call("get_weather", "{"), TOOLS)
    assert "not a JSON string" in tool_call_problem(_call("get_weather", {"q": 1}), TOOLS)
    assert "no 'function'" in tool_call_problem({"type": "function"}, TOOLS)
    r = classify(200, _body("", "tool_calls", [_call("get_weather", "{}"), _call("x", "{}")]))
    assert r.ok and r.tool_calls == 2 and r.invalid_tool_calls == [
        "tool_calls[1]: undeclared tool name 'x'"
    ]


def test_transport_exceptions_get_a_class() -> None:
    req = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    assert classify_exception(httpx.ReadTimeout("t", request=req)) == TIMEOUT
    assert classify_exception(TimeoutError()) == TIMEOUT
    assert classify_exception(httpx.ConnectError("c", request=req)) == CONNECT_ERROR
    assert classify_exception(httpx.RemoteProtocolError("d", request=req)) == CONNECTION_DROPPED
    assert classify_exception(httpx.ReadError("r", request=req)) == CONNECTION_DROPPED


def test_a_refused_connection_is_a_connect_error(tmp_path: Path) -> None:
    with ScriptedServer(lambda i: "text") as server:
        url = server.base_url  # the port is free again once the server stops
    config = StressConfig(base_url=url, payload=load_payload(PAYLOAD), concurrency=2,
                          warmup_waves=0, waves=1, timeout=5)  # fmt: skip
    got: list[dict] = []
    asyncio.run(run_stress(config, (), got.append))
    assert [r["error_class"] for r in got] == [CONNECT_ERROR, CONNECT_ERROR]


# ---- log scan ----------------------------------------------------------------------

BENIGN = ["INFO engine step ok", "DEBUG scheduled 32 requests", "WARNING slow tokenizer",
          "INFO graph captured for sizes [1, 2, 4]", "INFO non-blocking transfer done"]  # fmt: skip
PLANTED = {
    "cuda_error": "CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmEx",
    "illegal_memory_access": "an illegal memory access was encountered",
    "assertion": "../aten/src/ATen/native/cuda/IndexKernel.cu:92: device-side assert triggered",
    "graph_error": "RuntimeError: stream capture invalidated",
    "fatal": "Fatal Python error: Segmentation fault",
    "traceback": "Traceback (most recent call last):",
}


def test_patterns_are_data_with_names() -> None:
    assert LOG_PATTERNS.names == list(PLANTED)
    assert LOG_PATTERNS.source == "shipped:stress_log_patterns.toml"
    assert load_log_patterns() == LOG_PATTERNS


def test_the_stress_module_holds_no_pattern_of_its_own() -> None:
    import dsv4_evals.stress.logscan as logscan

    source = Path(logscan.__file__).read_text()
    for _, rx in LOG_PATTERNS.patterns:
        assert rx.pattern not in source


def test_a_pattern_file_replaces_the_shipped_one(tmp_path: Path) -> None:
    rules = tmp_path / "p.toml"
    rules.write_text('ignore_case = false\n[[pattern]]\nname = "oom"\nregex = "OutOfMemory"\n'
                     '[[pattern]]\nname = "nccl"\nregex = "NCCL WARN"\n')
    log = tmp_path / "server.log"
    log.write_text("torch.OutOfMemoryError\noutofmemory\nNCCL WARN timeout\nCUDA error\n")
    patterns = load_log_patterns(rules)
    hits = scan_log(log, patterns)
    assert patterns.names == ["oom", "nccl"]
    assert {k: (h.count, h.first) for k, h in hits.items()} == {
        "oom": (1, ["1: torch.OutOfMemoryError"]), "nccl": (1, ["3: NCCL WARN timeout"])}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[[pattern]]\nname = 'a'\n", "missing key 'regex'"),
        ("[[pattern]]\nname = 'a'\nregex = '('\n", "invalid regular expression"),
        ("[[pattern]]\nname = 'a'\nregex = 'x'\n[[pattern]]\nname = 'a'\nregex = 'y'\n",
         "name 'a' repeated"),
        ("[[pattern]]\nname = 'a'\nregex = 'x'\nflags = 1\n", "unknown key(s) flags"),
        ("ignore_case = 1\n[[pattern]]\nname = 'a'\nregex = 'x'\n", "expected true or false"),
        ("pattern = []\n", "[[pattern]] is empty"),
        ("not toml [", "not valid TOML"),
    ],
)
def test_bad_pattern_files_are_named(tmp_path: Path, content: str, message: str) -> None:
    assert_refused_by_name(tmp_path / "bad.toml", content, load_log_patterns, PatternError,
                           message)


@given(st.integers(min_value=0, max_value=2**32), st.integers(min_value=0, max_value=400))
def test_log_scan_counts_planted_lines(tmp_path_factory, seed: int, noise: int) -> None:
    rng = random.Random(seed)
    counts = {name: rng.randint(0, 4) for name in PLANTED}
    lines = [rng.choice(BENIGN) for _ in range(noise)]
    for name, n in counts.items():
        for _ in range(n):
            lines.insert(rng.randrange(len(lines) + 1), PLANTED[name])
    path = tmp_path_factory.mktemp("log") / "server.log"
    path.write_text("\n".join(lines) + "\n")
    hits = scan_log(path, keep=2)
    assert {k: h.count for k, h in hits.items()} == counts
    for name, h in hits.items():
        assert len(h.first) == min(2, counts[name])
        for entry in h.first:
            lineno, text = entry.split(": ", 1)
            assert lines[int(lineno) - 1] == text == PLANTED[name]


def test_one_line_counts_under_every_pattern_it_matches(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    counts = {k: h.count for k, h in scan_log(path).items()}
    assert counts["cuda_error"] == 1 and counts["illegal_memory_access"] == 1
    assert sum(counts.values()) == 2


def test_missing_log_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--server-log"):
        scan_log(tmp_path / "nope.log")


# ---- store -------------------------------------------------------------------------

IDENTITY = {"base_url": "http://h/v1", "model": "m", "payload_sha256": "ab", "concurrency": 2,
            "warmup_waves": 1, "waves": 1, "max_tokens": 9, "temperature": 0.0,
            "run_id": "r1"}  # fmt: skip


def test_a_torn_last_line_is_dropped_and_cut(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    store.open(dict(IDENTITY), resume=False)
    for i in range(3):
        store.append({"index": i, "ok": True})
    store.close()
    with (tmp_path / "results.jsonl").open("a") as fh:
        fh.write('{"index": 3, "ok": tr')  # killed mid-write
    store = ResultStore(tmp_path)
    existing = store.open(dict(IDENTITY), resume=True)
    assert sorted(existing) == [0, 1, 2]
    store.append({"index": 3, "ok": True})
    store.close()
    assert sorted(load_results(tmp_path / "results.jsonl")) == [0, 1, 2, 3]


def test_store_rejects_corruption_and_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text('{"index": 0}\nnot json\n{"index": 1}\n')
    with pytest.raises(StoreError, match=r"results.jsonl:2"):
        load_results(path)
    path.write_text('{"index": 0}\n{"index": 0}\n')
    with pytest.raises(StoreError, match="recorded twice"):
        load_results(path)


def test_resume_keeps_the_first_run_id(tmp_path: Path) -> None:
    ResultStore(tmp_path).open(dict(IDENTITY), resume=False)
    again = dict(IDENTITY, run_id="other")
    store = ResultStore(tmp_path)
    store.open(again, resume=True)
    assert again["run_id"] == "r1"
    store.close()


# ---- cancellation ------------------------------------------------------------------


def test_cancelling_the_run_task_keeps_what_arrived(tmp_path: Path) -> None:
    k = random.Random(8).randint(3, 9)
    store = ResultStore(tmp_path)
    store.open(dict(IDENTITY), resume=False)
    config = StressConfig(base_url="http://127.0.0.1:1/v1", payload=load_payload(PAYLOAD),
                          concurrency=4, warmup_waves=1, waves=2, timeout=5)  # fmt: skip

    async def main(base_url: str) -> None:
        cfg = StressConfig(**{**config.__dict__, "base_url": base_url})
        count = 0

        def on_result(record: dict) -> None:
            nonlocal count
            store.append(record)
            count += 1
            if count == k:
                task.cancel()

        task = asyncio.create_task(run_stress(cfg, (), on_result))
        with pytest.raises(asyncio.CancelledError):
            await task

    with ScriptedServer(lambda i: "tools4") as server:
        asyncio.run(main(server.base_url))
    store.close()
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == k
    assert all(json.loads(line)["tool_calls"] == 4 for line in lines)


def test_config_rejects_bad_values() -> None:
    p = load_payload(PAYLOAD)
    with pytest.raises(ValueError, match="--base-url"):
        StressConfig(base_url="localhost:8000", payload=p)
    with pytest.raises(ValueError, match="--concurrency"):
        StressConfig(base_url="http://h/v1", payload=p, concurrency=0)
    with pytest.raises(ValueError, match="--timeout"):
        StressConfig(base_url="http://h/v1", payload=p, timeout=0)
    cfg = StressConfig(base_url="http://h/v1/", payload=p, concurrency=32)
    assert cfg.url == "http://h/v1/chat/completions" and cfg.total == 512
    assert cfg.phase_of(255) == (7, "warmup") and cfg.phase_of(256) == (8, "measured")
