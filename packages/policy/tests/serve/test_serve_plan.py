"""Serve envelopes: the seed's ladder, manifests, overrides, rules and the passthrough."""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path

import pytest
from dsv4_policy import serve
from dsv4_policy.serve import Manifest, ServeKey, envelopes, plan
from hypothesis import event, given, settings
from hypothesis import strategies as st
from policy_strategies import HEAVY_EXAMPLES, KEYS_PER_EXAMPLE, PROPERTY_EXAMPLES, batches

# The SM86 ladder as the runbook states it: (context, seqs) -> aggregate tok/s.
LADDER = {(262144, 1): 59.6, (180224, 2): 81.3, (116736, 3): 104.5, (81920, 4): 120.1}
CONTROL = (65536, 1)
COMPILATION = {"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [1]}
ENV = {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0", "FUSE_ALLREDUCE_RMS": "1"}


def envelope_argv(context: int, seqs: int) -> list[str]:
    return ["--tensor-parallel-size", "8", "--max-model-len", str(context), "--max-num-seqs",
            str(seqs), "--kv-cache-dtype", "fp8_ds_mla", "--compilation-config",
            json.dumps(COMPILATION)]


# --------------------------------------------------------------------------- the data
def test_the_shipped_envelopes_are_the_seed_ladder_and_the_control_shape() -> None:
    found = {(e.context, e.seqs): e for e in envelopes()}
    assert set(found) == {*LADDER, CONTROL}
    for shape, envelope in found.items():
        assert (envelope.gpu, envelope.tp) == ("sm86", 8)
        assert envelope.expected_tok_s == LADDER.get(shape)  # None for the control shape
        assert list(envelope.argv) == envelope_argv(*shape)
        assert json.loads(envelope.argv[envelope.argv.index("--compilation-config") + 1]) \
            == COMPILATION
        assert dict(envelope.env) == ENV
        assert envelope.notes
    assert "control" in found[CONTROL].notes


def test_every_rule_has_a_reason_and_the_seed_rules_are_all_there() -> None:
    rules = {r.id: r for r in serve.rules()}
    assert {r.kind for r in rules.values()} == {"keep", "avoid"}
    assert all(r.reason.strip() for r in rules.values())
    for rule_id in ("keep-kv-cache-dtype-fp8-ds-mla", "keep-hybrid-kv-cache-manager",
                    "keep-cudagraph-memory-estimate-off", "keep-cuda-graphs",
                    "keep-fuse-allreduce-rms", "keep-no-speculative-decoding",
                    "avoid-decode-context-parallel", "avoid-disable-hybrid-kv-cache-manager",
                    "avoid-speculative-decoding"):
        assert rule_id in rules
    assert "uniform KV groups" in rules["avoid-decode-context-parallel"].reason


def test_flag_spellings_live_in_the_data_not_the_code() -> None:
    source = Path(serve.__file__).read_text() + Path(serve.SCHEMA.parse_header.__code__
                                                     .co_filename).read_text()
    for spelling in ("--kv-cache-dtype", "--max-model-len", "fp8_ds_mla", "FULL_DECODE_ONLY",
                     "FUSE_ALLREDUCE_RMS", "--enforce-eager", "-dcp", "--speculative-config"):
        assert spelling not in source, spelling


# --------------------------------------------------------------------------- plans
def test_a_ladder_key_gets_its_envelope_with_user_args_appended() -> None:
    rng = random.Random(11)
    name = f"dsv4-{rng.randint(0, 999)}"
    m = plan(ServeKey("sm86", 8, 262144, 1), ["--served-model-name", name], {"NCCL_ALGO": "Tree"})
    assert m.source == "envelope:sm86-tp8-262k-x1"
    assert m.expected_tok_s == 59.6
    assert list(m.argv) == [*envelope_argv(262144, 1), "--served-model-name", name]
    assert dict(m.env) == {**ENV, "NCCL_ALGO": "Tree"}
    assert m.violations == ()


def test_the_control_shape_has_no_rate_and_says_so() -> None:
    m = plan(ServeKey("sm86", 8, 65536, 1))
    assert (m.source, m.expected_tok_s) == ("envelope:sm86-tp8-64k-control", None)
    assert "control shape: no published decode rate" in m.notes


@pytest.mark.parametrize("user, dropped, note", [
    (["--max-model-len=131072"], ["--max-model-len", "262144"],
     "user --max-model-len=131072 overrides the envelope's --max-model-len 262144"),
    (["--max_model_len", "131072"], ["--max-model-len", "262144"],
     "user --max_model_len 131072 overrides"),
    (["-tp", "4"], ["--tensor-parallel-size", "8"],
     "user -tp 4 overrides the envelope's --tensor-parallel-size 8"),
    (["--compilation-config", "{}"], ["--compilation-config", json.dumps(COMPILATION)],
     "user --compilation-config {} overrides"),
])
def test_a_user_flag_the_envelope_sets_replaces_it(user: list[str], dropped: list[str],
                                                    note: str) -> None:
    m = plan(ServeKey("sm86", 8, 262144, 1), user)
    expected = envelope_argv(262144, 1)
    at = expected.index(dropped[0])
    assert expected[at:at + 2] == dropped
    del expected[at:at + 2]
    assert list(m.argv) == expected + user
    assert note in m.notes


def test_a_user_env_var_the_envelope_sets_replaces_it_and_is_noted() -> None:
    m = plan(ServeKey("sm86", 8, 81920, 4), user_env={"FUSE_ALLREDUCE_RMS": "1", "X": "y"})
    assert "overrides" not in m.notes  # same value: nothing to note
    m = plan(ServeKey("sm86", 8, 81920, 4), user_env={"FUSE_ALLREDUCE_RMS": "0"})
    assert m.env["FUSE_ALLREDUCE_RMS"] == "0"
    assert "user FUSE_ALLREDUCE_RMS=0 overrides the envelope's FUSE_ALLREDUCE_RMS=1" in m.notes
    assert [v.rule for v in m.violations] == ["keep-fuse-allreduce-rms"]


def test_an_unknown_shape_passes_through_unchanged_and_names_the_nearby_envelopes() -> None:
    argv = ["--max-model-len", "200000", "--kv-cache-dtype", "auto"]
    env = {"FUSE_ALLREDUCE_RMS": "0"}
    m = plan(ServeKey("sm86", 8, 200000, 1), argv, env)
    assert (m.argv, m.env, m.source, m.expected_tok_s) == (tuple(argv), env, "passthrough", None)
    assert m.violations == ()  # envelope-scoped keep-rules do not apply to a passthrough
    assert "262144 x 1" in m.notes and "65536 x 1" in m.notes
    assert "pass through unchanged" in plan(ServeKey("sm80", 8, 262144, 1)).notes


# --------------------------------------------------------------------------- rules
@pytest.mark.parametrize("argv, env, rule, evidence", [
    (["-dcp", "2"], {}, "avoid-decode-context-parallel", "-dcp 2"),
    (["-dcp=4"], {}, "avoid-decode-context-parallel", "-dcp=4"),
    (["--decode-context-parallel-size", "8"], {}, "avoid-decode-context-parallel",
     "--decode-context-parallel-size 8"),
    (["--decode_context_parallel_size=2"], {}, "avoid-decode-context-parallel",
     "--decode_context_parallel_size=2"),
    (["-dcp", "two"], {}, "avoid-decode-context-parallel", "-dcp two"),
    (["-dcp"], {}, "avoid-decode-context-parallel", "-dcp"),
    (["--disable-hybrid-kv-cache-manager"], {}, "avoid-disable-hybrid-kv-cache-manager",
     "--disable-hybrid-kv-cache-manager"),
    (["--speculative-config", '{"method": "mtp"}'], {}, "avoid-speculative-decoding",
     '--speculative-config {"method": "mtp"}'),
    (["--speculative-config={}"], {}, "avoid-speculative-decoding", "--speculative-config={}"),
    ([], {"SPECULATIVE_CONFIG": "mtp"}, "avoid-speculative-decoding", "SPECULATIVE_CONFIG=mtp"),
    (["--enforce-eager"], {}, "keep-cuda-graphs", "--enforce-eager"),
    (["--enforce_eager", "--trust-remote-code"], {}, "keep-cuda-graphs", "--enforce_eager"),
])
@pytest.mark.parametrize("gpu", ["sm86", "sm80"])
def test_avoided_settings_are_reported_with_rule_reason_and_evidence(
        argv: list[str], env: dict[str, str], rule: str, evidence: str, gpu: str) -> None:
    m = plan(ServeKey(gpu, 8, 262144, 1), argv, env)
    assert [(v.rule, v.evidence) for v in m.violations] == [(rule, evidence)]
    reasons = {r.id: r.reason for r in serve.rules()}
    assert m.violations[0].reason == reasons[rule]


@pytest.mark.parametrize("argv, env", [
    (["-dcp", "1"], {}),
    (["--decode-context-parallel-size=1"], {}),
    ([], {"SPECULATIVE_CONFIG": "none"}),
    ([], {"SPECULATIVE_CONFIG": " None "}),
    (["--no-enable-prefix-caching", "--kv-cache-dtype", "fp8_ds_mla"], {}),
])
def test_allowed_settings_are_not_violations(argv: list[str], env: dict[str, str]) -> None:
    assert plan(ServeKey("sm86", 8, 180224, 2), argv, env).violations == ()


def test_envelope_scoped_keep_rules_guard_the_envelope_settings() -> None:
    argv, env = ["--kv-cache-dtype", "auto"], {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"}
    hit = plan(ServeKey("sm86", 8, 116736, 3), argv, env)
    assert [v.rule for v in hit.violations] == ["keep-kv-cache-dtype-fp8-ds-mla",
                                                "keep-cudagraph-memory-estimate-off"]
    miss = plan(ServeKey("sm86", 8, 116737, 3), argv, env)
    assert miss.violations == ()


def test_bad_inputs_are_refused_clearly() -> None:
    key = ServeKey("sm86", 8, 262144, 1)
    with pytest.raises(TypeError, match="not one string"):
        plan(key, "--enforce-eager")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"user_argv\[1\] must be a string"):
        plan(key, ["--max-model-len", 4096])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="user_env entries must be str -> str"):
        plan(key, [], {"X": 1})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="key must be a ServeKey"):
        plan(("sm86", 8, 262144, 1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"ServeKey\.gpu"):
        ServeKey("ampere", 8, 1, 1)
    with pytest.raises(ValueError, match=r"ServeKey\.seqs must be a positive integer; got integer 0"):
        ServeKey("sm86", 8, 1, 0)
    with pytest.raises(TypeError, match="expected a serve table"):
        plan(key, table=serve.SCHEMA)  # type: ignore[arg-type]


def test_manifest_json_is_plain() -> None:
    m = plan(ServeKey("sm86", 8, 262144, 1), ["-dcp", "2"])
    data = json.loads(json.dumps(m.to_json()))
    assert data["source"] == "envelope:sm86-tp8-262k-x1"
    assert data["violations"][0]["rule"] == "avoid-decode-context-parallel"
    assert isinstance(m, Manifest)


# --------------------------------------------------------------------------- properties
# argv fragments, each with the rules it breaks (scope "always" rules only), so the
# expected violations follow from how the argv was built, not from the code.
FRAGMENTS: list[tuple[tuple[str, ...], frozenset[str]]] = [
    (("--enforce-eager",), frozenset({"keep-cuda-graphs"})),
    (("--enforce_eager",), frozenset({"keep-cuda-graphs"})),
    (("-dcp", "2"), frozenset({"avoid-decode-context-parallel"})),
    (("-dcp", "1"), frozenset()),
    (("-dcp",), frozenset({"avoid-decode-context-parallel"})),
    (("--decode-context-parallel-size=4",), frozenset({"avoid-decode-context-parallel"})),
    (("--decode_context_parallel_size", "1"), frozenset()),
    (("--disable-hybrid-kv-cache-manager",), frozenset({"avoid-disable-hybrid-kv-cache-manager"})),
    (("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'),
     frozenset({"avoid-speculative-decoding"})),
    (("--max-model-len", "4096"), frozenset()),
    (("--max-num-seqs=3",), frozenset()),
    (("--kv-cache-dtype", "auto"), frozenset()),
    (("--trust-remote-code",), frozenset()),
    (("--served-model-name", "dsv4"), frozenset()),
    (("-tp", "2"), frozenset()),
    (("--gpu-memory-utilization", "0.9"), frozenset()),
]
ENV_FRAGMENTS: list[tuple[str, list[tuple[str, frozenset[str]]]]] = [
    ("SPECULATIVE_CONFIG", [("none", frozenset()), ("None", frozenset()),
                            ("mtp", frozenset({"avoid-speculative-decoding"}))]),
    ("FUSE_ALLREDUCE_RMS", [("0", frozenset()), ("1", frozenset())]),
    ("NCCL_ALGO", [("Tree", frozenset()), ("Ring", frozenset())]),
    ("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", [("1", frozenset())]),
]
SHAPES = [(e.gpu, e.tp, e.context, e.seqs) for e in envelopes()]
# The strategies the composites below draw from, built once rather than on every draw.
_PICKS = st.lists(st.integers(0, len(FRAGMENTS) - 1), max_size=5)
_ENV_CHOICES = {name: st.integers(-1, len(options) - 1) for name, options in ENV_FRAGMENTS}


@st.composite
def user_inputs(draw: st.DrawFn) -> tuple[list[str], dict[str, str], frozenset[str]]:
    picks = draw(_PICKS)
    argv = [item for i in picks for item in FRAGMENTS[i][0]]
    broken = frozenset().union(*(FRAGMENTS[i][1] for i in picks))
    env: dict[str, str] = {}
    for name, options in ENV_FRAGMENTS:
        choice = draw(_ENV_CHOICES[name])
        if choice >= 0:
            env[name] = options[choice][0]
            broken |= options[choice][1]
    return argv, env, broken


_SHAPE = st.integers(0, len(SHAPES) - 1)
_HOW = st.integers(0, 5)
_GPUS = st.sampled_from(["sm80", "sm89", "sm90", "sm120", "sm86"])
_TPS = st.sampled_from([1, 2, 4, 7, 8, 9, 16])
_CONTEXT_SHIFTS = st.sampled_from([-1, 1, -65536, 4096])
_FEW_SEQS = st.integers(1, 6)
_CONTEXTS = st.integers(1, 1 << 21)
_SEQS = st.integers(1, 512)


@st.composite
def serve_keys(draw: st.DrawFn) -> ServeKey:
    """Keys on, next to (off by one in one field, other gpu/tp) and far from envelopes."""
    gpu, tp, context, seqs = SHAPES[draw(_SHAPE)]
    how = draw(_HOW)
    if how == 0:
        gpu = draw(_GPUS)
    elif how == 1:
        tp = draw(_TPS)
    elif how == 2:
        context += draw(_CONTEXT_SHIFTS)
    elif how == 3:
        seqs = draw(_FEW_SEQS)
    elif how == 4:
        context, seqs = draw(_CONTEXTS), draw(_SEQS)
    return ServeKey(gpu, tp, max(context, 1), seqs)


def check_passthrough(key: ServeKey,
                      inputs: tuple[list[str], dict[str, str], frozenset[str]]) -> None:
    """``plan`` leaves its inputs alone; a key without an envelope passes them through."""
    argv, env, broken = inputs
    argv_before, env_before = list(argv), dict(env)
    m = plan(key, argv, env)
    assert (argv, env) == (argv_before, env_before)  # the inputs are not touched
    assert {v.rule for v in m.violations} >= broken
    if (key.gpu, key.tp, key.context, key.seqs) in SHAPES:
        event("envelope")
        assert m.source.startswith("envelope:")
        return
    event("passthrough")
    assert m.argv == tuple(argv)
    assert m.env == env
    assert (m.source, m.expected_tok_s) == ("passthrough", None)
    assert {v.rule for v in m.violations} == broken


@settings(max_examples=PROPERTY_EXAMPLES // KEYS_PER_EXAMPLE)
@given(batches(st.tuples(serve_keys(), user_inputs())))
def test_keys_without_an_envelope_pass_through_unchanged(
        cases: list[tuple[ServeKey, tuple[list[str], dict[str, str], frozenset[str]]]]) -> None:
    for key, inputs in cases:
        check_passthrough(key, inputs)


@settings(max_examples=HEAVY_EXAMPLES * 3)
@given(st.sampled_from(SHAPES), user_inputs())
def test_envelope_hits_put_user_args_last_and_user_env_on_top(
        shape: tuple[str, int, int, int], inputs: tuple[list[str], dict[str, str], frozenset[str]],
) -> None:
    argv, env, broken = inputs
    m = plan(ServeKey(*shape), argv, env)
    envelope = {(e.gpu, e.tp, e.context, e.seqs): e for e in envelopes()}[shape]
    assert m.argv[len(m.argv) - len(argv):] == tuple(argv)
    kept = m.argv[:len(m.argv) - len(argv)]
    assert set(kept) <= set(envelope.argv)  # only envelope items, some maybe dropped
    assert m.env == {**envelope.env, **env}
    assert {v.rule for v in m.violations} >= broken
    assert m.expected_tok_s == envelope.expected_tok_s


def synthetic_serve_table(seed: int) -> serve.Table:
    """The shipped header (launch, rules) with random envelopes of distinct shapes."""
    rng = random.Random(seed)
    header = Path(serve.shipped_table().source).read_text().split("\n[[entry]]\n")[0] + "\n"
    shapes = {(rng.choice(["sm80", "sm86", "sm89", "sm90"]), rng.choice([1, 2, 4, 8]),
               rng.randint(1, 1 << 20), rng.randint(1, 8)) for _ in range(rng.randint(0, 6))}
    blocks = []
    for i, (gpu, tp, context, seqs) in enumerate(sorted(shapes)):
        rate = "control = true" if rng.random() < 0.2 else f"expected_tok_s = {rng.uniform(1, 200)!r}"
        blocks.append(f'[[entry]]\nid = "s{i}"\n[entry.match]\ngpu = "{gpu}"\ntp = {tp}\n'
                      f"context = {context}\nseqs = {seqs}\n[entry.envelope]\n{rate}\n")
    return serve.loads_table(header + "\n".join(blocks), source=f"<synthetic {seed}>")


SYNTHETIC = [synthetic_serve_table(seed) for seed in range(16)]
_TABLE = st.integers(0, len(SYNTHETIC) - 1)
_SHIFTS = st.sampled_from([0, 0, 1, -1])
_WHICH = st.integers(0, 3)


@functools.cache
def _indices(count: int) -> st.SearchStrategy[int]:
    return st.integers(0, count - 1)


@st.composite
def synthetic_cases(draw: st.DrawFn) -> tuple[serve.Table, ServeKey]:
    table = SYNTHETIC[draw(_TABLE)]
    shapes = [(e.gpu, e.tp, e.context, e.seqs) for e in envelopes(table)] or SHAPES
    gpu, tp, context, seqs = shapes[draw(_indices(len(shapes)))]
    shift = draw(_SHIFTS)
    which = draw(_WHICH)
    if which == 0:
        context = max(1, context + shift)
    elif which == 1:
        seqs = max(1, seqs + shift)
    elif which == 2:
        tp = max(1, tp + shift)
    return table, ServeKey(gpu, tp, context, seqs)


def check_synthetic_case(case: tuple[serve.Table, ServeKey],
                         inputs: tuple[list[str], dict[str, str], frozenset[str]]) -> None:
    """Through a synthetic table: a key without an envelope passes through unchanged, and
    one with an envelope gets that envelope."""
    table, key = case
    argv, env, broken = inputs
    m = plan(key, argv, env, table)
    shapes = {(e.gpu, e.tp, e.context, e.seqs): e for e in envelopes(table)}
    envelope = shapes.get((key.gpu, key.tp, key.context, key.seqs))
    if envelope is None:
        event("passthrough")
        assert (m.argv, m.env, m.source, m.expected_tok_s) == (tuple(argv), env, "passthrough",
                                                                None)
        assert {v.rule for v in m.violations} == broken
    else:
        event("envelope")
        assert m.source == f"envelope:{envelope.id}"
        assert m.expected_tok_s == envelope.expected_tok_s


@settings(max_examples=PROPERTY_EXAMPLES // 2 // KEYS_PER_EXAMPLE)
@given(batches(st.tuples(synthetic_cases(), user_inputs())))
def test_synthetic_serve_tables_pass_unknown_shapes_through(
        cases: list[tuple[tuple[serve.Table, ServeKey],
                          tuple[list[str], dict[str, str], frozenset[str]]]]) -> None:
    for case, inputs in cases:
        check_synthetic_case(case, inputs)
