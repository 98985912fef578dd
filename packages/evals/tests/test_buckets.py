"""``dsv4-evals buckets``: GPU time per bucket from torch profiler chrome traces."""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import random
from pathlib import Path

import pytest
import torch
from dsv4_evals import buckets
from dsv4_evals.buckets.rules import load_rules
from dsv4_evals.buckets.tally import tally
from dsv4_evals.buckets.trace import TimedEvent
from hypothesis import given, settings
from hypothesis import strategies as st

TRACES = Path(__file__).parent / "data" / "traces"


def _load_generator():
    spec = importlib.util.spec_from_file_location("make_traces", TRACES / "make_traces.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_traces = _load_generator()


def run_buckets(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="dsv4-evals")
    buckets.register(parser.add_subparsers(required=True))
    args = parser.parse_args(["buckets", *argv])
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", sorted(make_traces.FIXTURES))
def test_committed_fixture_is_what_the_seeded_script_writes(name):
    body, expected = make_traces.render(name)
    committed = (TRACES / name).read_bytes()
    if name.endswith(".gz"):
        body, committed = gzip.decompress(body), gzip.decompress(committed)
    assert json.loads(committed) == json.loads(body)
    assert (TRACES / make_traces.expected_name(name)).read_text() == expected


@pytest.mark.parametrize("name", sorted(make_traces.FIXTURES))
def test_fixture_totals_match_the_generator_ground_truth(name, capsys):
    expected = json.loads((TRACES / make_traces.expected_name(name)).read_text())
    code, out, _ = run_buckets([str(TRACES / name), "--json"], capsys)
    doc = json.loads(out)
    assert code == 0
    assert doc["graph_launches"] == expected["graph_launches"]
    assert doc["graph_launch_source"] == "trace"
    got = {b["name"]: b for b in doc["buckets"]}
    # Every shipped bucket is reported, even an empty one, in file order.
    assert list(got) == list(load_rules().names())
    for name_, truth in expected["buckets"].items():
        assert got[name_]["calls"] == truth["calls"], name_
        assert got[name_]["total_ms"] == pytest.approx(truth["total_us"] / 1000, rel=1e-9)
        assert got[name_]["ms_per_graph"] == pytest.approx(
            truth["total_us"] / 1000 / expected["graph_launches"], rel=1e-9
        )
    total_us = sum(t["total_us"] for t in expected["buckets"].values())
    assert doc["total_ms"] == pytest.approx(total_us / 1000, rel=1e-9)
    assert sum(b["percent"] for b in doc["buckets"]) == pytest.approx(100.0)
    for b in doc["buckets"]:
        share = expected["buckets"].get(b["name"], {"total_us": 0.0})["total_us"] / total_us
        assert b["percent"] == pytest.approx(100 * share, rel=1e-9)


def test_seed_shape_fixture_reads_like_the_trace_result(capsys):
    """The TP8 fixture mimics the seed: 87 allreduce calls and ~17.5 ms of it per graph."""
    code, out, _ = run_buckets([str(TRACES / "decode_tp8_rank0.json.gz"), "--json"], capsys)
    doc = json.loads(out)
    assert code == 0
    got = {b["name"]: b for b in doc["buckets"]}
    assert got["TP allreduce"]["calls"] == 87 * doc["graph_launches"]
    assert 16.0 < got["TP allreduce"]["ms_per_graph"] < 19.0
    assert max(doc["buckets"], key=lambda b: b["total_ms"])["name"] == "TP allreduce"
    # Linear Marlin kernels are dense GEMM; MoE Marlin kernels are MoE.
    gemm = [k["name"] for k in got["GEMM (dense linear)"]["top_kernels"]]
    moe = [k["name"] for k in got["MoE routing/experts"]["top_kernels"]]
    assert any(k.startswith("void marlin::Marlin<") for k in gemm)
    assert any(k.startswith("void marlin_moe_wna16::Marlin<") for k in moe)
    # Memsets are not a counted category by default.
    assert all("Memset" not in k["name"] for b in doc["buckets"] for k in b["top_kernels"])


def test_graph_launch_override_changes_only_the_per_graph_column(capsys):
    path = str(TRACES / "decode_small.json")
    _, base, _ = run_buckets([path, "--json"], capsys)
    _, over, _ = run_buckets([path, "--json", "--graph-launches", "227"], capsys)
    base_doc, over_doc = json.loads(base), json.loads(over)
    assert over_doc["graph_launches"] == 227 and over_doc["graph_launch_source"] == "override"
    for a, b in zip(base_doc["buckets"], over_doc["buckets"], strict=True):
        assert a["total_ms"] == b["total_ms"] and a["calls"] == b["calls"]
        assert b["ms_per_graph"] == pytest.approx(a["total_ms"] / 227)


def test_human_table_lists_every_bucket(capsys):
    code, out, _ = run_buckets([str(TRACES / "decode_small.json"), "--top", "1"], capsys)
    assert code == 0
    for name in load_rules().names():
        assert name in out
    assert "3 graph launches (trace)" in out
    assert "ncclDevKernel_AllReduce_Sum_bf16_RING_LL" in out


def _profile_cpu_ops(tmp_path: Path, seed: int) -> tuple[Path, dict[str, int]]:
    """Profile a seeded mix of CPU ops; return the exported trace and the call counts."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(48, 48, generator=gen)
    b = torch.randn(48, 48, generator=gen)
    rng = random.Random(seed)
    counts = {"aten::mm": rng.randint(3, 9), "aten::tanh": rng.randint(2, 7)}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(counts["aten::mm"]):
            c = torch.mm(a, b)
        for _ in range(counts["aten::tanh"]):
            c = torch.tanh(c)
    assert float(c.abs().sum()) > 0
    path = tmp_path / "cpu_trace.json"
    prof.export_chrome_trace(str(path))
    return path, counts


CPU_PATTERNS = """
schema = 1
categories = ["kernel"]
graph_launch = "^cudaGraphLaunch$"
ignore_case = false
other = "rest"

[[bucket]]
name = "matmul"
regex = "^aten::mm$"

[[bucket]]
name = "activation"
regex = "^aten::tanh$"
"""


@pytest.mark.parametrize("zipped", [False, True])
def test_reads_the_trace_torch_profiler_writes(tmp_path, capsys, zipped):
    trace, counts = _profile_cpu_ops(tmp_path, seed=1234 + zipped)
    if zipped:
        gz = tmp_path / "cpu_trace.json.gz"
        gz.write_bytes(gzip.compress(trace.read_bytes()))
        trace = gz
    patterns = tmp_path / "cpu.toml"
    patterns.write_text(CPU_PATTERNS)
    argv = [str(trace), "--json", "--patterns", str(patterns), "--category", "cpu_op"]
    code, out, _ = run_buckets(argv, capsys)
    doc = json.loads(out)
    assert code == 0 and doc["categories"] == ["cpu_op"]
    got = {b["name"]: b for b in doc["buckets"]}
    assert got["matmul"]["calls"] == counts["aten::mm"]
    assert got["activation"]["calls"] == counts["aten::tanh"]
    assert got["matmul"]["total_ms"] > 0 and got["activation"]["total_ms"] > 0
    # A CPU trace has no graph launches, so there is no per-graph figure.
    assert doc["graph_launches"] == 0 and got["matmul"]["ms_per_graph"] is None
    # Cross-check the durations against torch's own record of the same run.
    raw = json.loads(gzip.decompress(trace.read_bytes()) if zipped else trace.read_text())
    mm_us = sum(e["dur"] for e in raw["traceEvents"] if e.get("name") == "aten::mm"
                and e.get("cat") == "cpu_op" and e.get("ph") == "X")
    assert got["matmul"]["total_ms"] == pytest.approx(mm_us / 1000)


def test_without_category_a_cpu_trace_counts_nothing_and_says_why(tmp_path, capsys):
    trace, _ = _profile_cpu_ops(tmp_path, seed=77)
    code, out, err = run_buckets([str(trace), "--json"], capsys)
    assert code == 0
    assert json.loads(out)["calls"] == 0
    assert "no 'X' events of categories kernel, gpu_memcpy" in err and "cpu_op" in err


@settings(max_examples=40)
@given(
    st.lists(
        st.tuples(st.sampled_from(["ar", "moe", "gemm", "misc"]), st.integers(1, 5_000_000)),
        min_size=1,
        max_size=60,
    )
)
def test_totals_are_exact_sums_of_the_labelled_events(items):
    """Events named after their bucket land in it; totals are plain sums in µs."""
    rules = load_rules()
    names = {
        "ar": ("TP allreduce", "ncclDevKernel_AllReduce_Sum_f32_TREE_SIMPLE"),
        "moe": ("MoE routing/experts", "fused_moe_kernel"),
        "gemm": ("GEMM (dense linear)", "sm80_xmma_gemm_bf16bf16_bf16f32"),
        "misc": ("other", "elementwise_kernel"),
    }
    events = [TimedEvent(names[k][1], "kernel", us / 1000) for k, us in items]
    result = tally(events, rules, graph_launches=3)
    by = {b.name: b for b in result.buckets}
    for key, (bucket, _) in names.items():
        want = [us / 1000 for k, us in items if k == key]
        assert by[bucket].calls == len(want)
        assert by[bucket].total_us == pytest.approx(sum(want))
    assert result.per_graph_ms(result.total_us) == pytest.approx(result.total_us / 3000)


def test_first_matching_bucket_wins(tmp_path):
    patterns = tmp_path / "order.toml"
    patterns.write_text(
        'schema = 1\ncategories = ["kernel"]\ngraph_launch = "^g$"\nignore_case = true\n'
        '[[bucket]]\nname = "first"\nregex = "marlin_moe"\n'
        '[[bucket]]\nname = "second"\nregex = "marlin"\n'
    )
    rules = load_rules(patterns)
    assert rules.classify("void marlin_moe_wna16::Marlin<>") == "first"
    assert rules.classify("void marlin::Marlin<>") == "second"
    assert rules.classify("MARLIN_MOE") == "first"  # ignore_case applies
    assert rules.classify("cutlass") == "other"


def test_bare_array_traces_are_accepted(tmp_path, capsys):
    rng = random.Random(9)
    durs = [round(rng.uniform(1, 500), 3) for _ in range(7)]
    events = [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL",
               "ts": i * 1000, "dur": d} for i, d in enumerate(durs)]
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 0, "dur": 3})
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(events))
    code, out, _ = run_buckets([str(path), "--json"], capsys)
    got = {b["name"]: b for b in json.loads(out)["buckets"]}
    assert code == 0
    assert got["logits all-gather"]["calls"] == 7
    assert got["logits all-gather"]["ms_per_graph"] == pytest.approx(sum(durs) / 1000)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not json at all", "not chrome-trace JSON"),
        (b'{"events": []}', "no 'traceEvents' array"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "dur": "5"}]}',
         "traceEvents[0] ('k', cat 'kernel') has dur '5'"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k"}]}', "has dur None"),
        (gzip.compress(b"{}")[:12], "gzip data is corrupt"),
    ],
)
def test_bad_traces_are_refused_by_name(tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    code, out, err = run_buckets([str(path)], capsys)
    assert code == 2 and out == ""
    assert str(path) in err and message in err


def test_bad_bucket_files_and_arguments_are_refused(tmp_path, capsys):
    patterns = tmp_path / "dup.toml"
    patterns.write_text(
        'schema = 1\ncategories = ["kernel"]\ngraph_launch = "x"\nignore_case = false\n'
        '[[bucket]]\nname = "other"\nregex = "a"\n'
    )
    code, _, err = run_buckets([str(TRACES / "decode_small.json"), "--patterns", str(patterns)],
                               capsys)
    assert code == 2 and "repeated: other" in err
    with pytest.raises(SystemExit):
        run_buckets([str(TRACES / "decode_small.json"), "--graph-launches", "0"], capsys)
    code, _, err = run_buckets([str(tmp_path / "absent.json")], capsys)
    assert code == 2 and "cannot read trace" in err


def test_the_dsv4_evals_command_dispatches_to_buckets(capsys):
    from dsv4_evals.cli import main

    assert main(["buckets", str(TRACES / "decode_small.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["graph_launches"] == 3
