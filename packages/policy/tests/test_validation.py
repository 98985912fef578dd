"""Validation: every class of malformed table is refused, naming file, entry and field."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from dsv4_policy import serve
from dsv4_policy.detect import load_any
from dsv4_policy.kernels import c128a
from dsv4_policy.kernels.c128a import Entry, Key, Range, TableError, Tile, make_table
from dsv4_policy.table import Problem, resolve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_strategies import HEAVY_EXAMPLES, oracle_match

BAD = Path(__file__).parent / "data" / "bad"
GOOD = Path(__file__).parent / "data" / "good"

# file -> fragments its error must contain (besides the file's own path). One file per
# class of error; the fragments name the entry, the field and what was wrong.
EXPECTED: dict[str, list[str]] = {
    "syntax.toml": ["not valid TOML", "line 4"],
    "unknown_top_level.toml": ["field entries", "unknown field 'entries'", "accepted: schema, entry"],
    "missing_schema.toml": ["field schema", "missing the `schema = 1` header"],
    "wrong_schema.toml": ["field schema", "unsupported schema integer 2"],
    "entry_not_array.toml": ["field entry", "must be an array of tables", "got integer 5"],
    "unknown_entry_field.toml": ["entry 'a' (#1)", "field matc", "unknown field 'matc'"],
    "unknown_match_field.toml": ["entry 'a' (#1)", "field match.max_seq",
                                 "unknown match field 'max_seq'", "max_seq_len"],
    "int_field_wrong_type.toml": ["entry 'a' (#1)", "field match.compress_ratio",
                                  "got string '128'"],
    "str_field_wrong_type.toml": ["entry 'a' (#1)", "field match.arch", "got integer 90"],
    "bool_for_int.toml": ["field match.block_size", "got boolean true"],
    "float_for_int.toml": ["field match.max_model_len", "got float 1048576.0"],
    "empty_set.toml": ["field match.arch", "empty set [] matches nothing"],
    "empty_range.toml": ["field match.max_seq_len", "empty range {}"],
    "inverted_range.toml": ["entry 'a' (#1)", "field match.max_seq_len",
                            "inverted range: min 10 > max 5"],
    "range_on_string_field.toml": ["field match.arch", "ranges apply to integer fields only"],
    "unknown_range_bound.toml": ["field match.max_seq_len", "unknown range bound 'maxx'"],
    "range_bound_wrong_type.toml": ["field match.max_seq_len", "range max must be an integer"],
    "below_domain.toml": ["field match.compress_ratio",
                          "0 is below the smallest valid compress_ratio, 1"],
    "range_below_domain.toml": ["field match.max_model_len", "range min: 0 is below"],
    "set_wrong_element.toml": ["field match.num_decode_tokens", "got string '2'"],
    "duplicate_in_set.toml": ["field match.compress_ratio", "value 128 listed more than once"],
    "bad_arch.toml": ["field match.arch", "'hopper' is not an SM architecture name"],
    "missing_id.toml": ["entry #1", "field id", "missing; every entry needs an id"],
    "bad_id.toml": ["entry 'has space' (#1)", "field id", "id must be"],
    "duplicate_id.toml": ["entries 'a' (#1) and 'a' (#2)", "field id", "duplicate id 'a'"],
    "launch_missing.toml": ["entry 'a' (#1)", "field launch", "missing [entry.launch] table"],
    "launch_row_stride.toml": ["field launch.row_stride", "unknown field 'row_stride'",
                               "row stride stays the capacity"],
    "launch_width.toml": ["field launch.width", "unknown field 'width'"],
    "launch_missing_field.toml": ["field launch.num_warps", "missing"],
    "launch_tokens_not_pow2.toml": ["field launch.tokens_per_program",
                                    "power of two in 1..256; got 3"],
    "launch_tokens_too_big.toml": ["field launch.tokens_per_program", "got 512"],
    "launch_tile_too_big.toml": ["field launch.cols_per_program", "16384 exceeds 128 elements per thread"],
    "launch_cols_too_small.toml": ["field launch.cols_per_program",
                                   "power of two in 128..8192; got 64"],
    "launch_bad_warps.toml": ["field launch.num_warps", "one of 1, 2, 4, 8, 16; got integer 3"],
    "launch_split_not_bool.toml": ["field launch.split_width", "must be a boolean",
                                   "got string 'no'"],
    "provenance_nested.toml": ["field provenance.run", "provenance values are strings"],
    "overlap.toml": ["entries 'decode-short' (#1) and 'decode-long' (#2)", "field match",
                     "overlap", "max_seq_len=65536", "arch='sm90'"],
    "overlap_absent_field.toml": ["entries 'sm90-all' (#1) and 'ratio-128' (#2)", "overlap",
                                  "compress_ratio=128"],
    "too_many_boxes.toml": ["field match", "8000 boxes (limit 1024)"],
    "serve_range_context.toml": ["entry 'a' (#1)", "field match.context",
                                 "must be a single value, not a range"],
    "serve_set_gpu.toml": ["field match.gpu", "must be a single value, not a set"],
    "serve_missing_seqs.toml": ["field match.seqs", "missing; every entry must give seqs"],
    "serve_missing_rate.toml": ["field envelope.expected_tok_s", "control = true"],
    "serve_bad_rate.toml": ["field envelope.expected_tok_s", "positive number",
                            "got integer -3"],
    "serve_unknown_envelope_field.toml": ["field envelope.rate", "unknown field 'rate'"],
    "serve_duplicate_shape.toml": ["entries 'a' (#1) and 'b' (#2)", "overlap",
                                   "context=65536"],
    "serve_missing_launch.toml": ["field launch", "missing the [launch] table"],
    "serve_missing_placeholder.toml": ["field launch.argv", "placeholder {seqs} exactly once"],
    "serve_unknown_placeholder.toml": ["field launch.argv", "unknown placeholder '{sequences}'"],
    "serve_bad_rule_kind.toml": ["field rule 'keep-cuda-graphs' (#1).kind",
                                 "one of keep, avoid; got string 'prefer'"],
    "serve_rule_without_reason.toml": ["field rule 'keep-cuda-graphs' (#1).reason",
                                       "needs its reason", "missing"],
    "serve_rule_bad_scope.toml": ["(#1).scope", "always, envelope"],
    "serve_detector_flags_and_env.toml": ["(#1).when[1]", "exactly one of flags"],
    "serve_detector_above_and_unless.toml": ["(#1).when[1]", "at most one of above and unless"],
    "serve_envelope_breaks_rule.toml": ["entry 'a' (#1)", "field envelope",
                                        "breaks rule 'keep-cuda-graphs': --enforce-eager"],
    "serve_env_not_string.toml": ["field launch.env.FUSE_ALLREDUCE_RMS",
                                  "env entries are NAME = \"string\""],
}


def test_every_bad_file_has_an_expectation() -> None:
    assert sorted(p.name for p in BAD.glob("*.toml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_table_is_refused_with_a_precise_message(name: str) -> None:
    path = BAD / name
    with pytest.raises(TableError) as info:
        load_any(path)
    message = str(info.value)
    assert message.startswith(str(path) + ":"), message
    for fragment in EXPECTED[name]:
        assert fragment in message, f"{fragment!r} not in:\n{message}"
    assert all(p.source == str(path) for p in info.value.problems)


def test_every_problem_in_a_file_is_reported_at_once(tmp_path: Path) -> None:
    text = (BAD / "inverted_range.toml").read_text().replace(
        "split_width = false", "split_width = false\nrow_stride = 1").replace(
        'id = "a"', 'id = "a"\nweight = 2')
    path = tmp_path / "many.toml"
    path.write_text(text)
    with pytest.raises(TableError) as info:
        c128a.load_table(path)
    fields = sorted(p.field or "" for p in info.value.problems)
    assert fields == ["launch.row_stride", "match.max_seq_len", "weight"], info.value


def test_unreadable_files_are_reported_by_name(tmp_path: Path) -> None:
    with pytest.raises(TableError, match="cannot read the file"):
        c128a.load_table(tmp_path / "absent.toml")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"schema = 1\n\xff\xfe")
    with pytest.raises(TableError, match="not UTF-8"):
        c128a.load_table(binary)


def test_good_files_load_and_are_detected_by_kind() -> None:
    kind, table = load_any(GOOD / "c128a_example.toml")
    assert (kind, len(table)) == ("c128a", 2)
    assert load_any(Path(serve.shipped_table().source))[0] == "serve"
    assert load_any(Path(c128a.shipped_table().source))[0] == "c128a"


def test_problem_text_names_file_entries_and_field() -> None:
    problem = Problem("t.toml", "it broke", ("'a' (#1)", "'b' (#2)"), "match")
    assert str(problem) == "t.toml: entries 'a' (#1) and 'b' (#2): field match: it broke"


# --------------------------------------------------------------------------- programmatic
@pytest.mark.parametrize("match, fragment", [
    ({"arch": "hopper"}, "is not an SM architecture name"),
    ({"arch": Range(1, 2)}, "ranges apply to integer fields only"),
    ({"max_seq_len": frozenset()}, "empty set"),
    ({"compress_ratio": 0}, "below the smallest valid compress_ratio"),
    ({"max_model_len": Range(0, 5)}, "range min: 0 is below"),
    ({"num_decode_tokens": 2.5}, "got float 2.5"),
    ({"block_size": [True]}, "got boolean true"),
    ({"max_seq": 4}, "unknown match field 'max_seq'"),
])
def test_entries_built_in_code_are_validated_too(match: dict, fragment: str) -> None:
    with pytest.raises(TableError, match=fragment.replace("(", r"\(")):
        make_table([Entry("x", match, Tile(1, 1024, 4))])


def test_range_and_tile_refuse_bad_values_on_construction() -> None:
    with pytest.raises(ValueError, match="inverted range: min 5 > max 4"):
        Range(5, 4)
    with pytest.raises(TypeError, match=r"Range\.min must be an int"):
        Range("1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tokens_per_program must be a power of two"):
        Tile(3, 1024, 4)
    with pytest.raises(ValueError, match="num_warps must be one of"):
        Tile(1, 1024, 32)
    with pytest.raises(ValueError, match="split_width must be a boolean"):
        Tile(1, 1024, 4, 1)  # type: ignore[arg-type]


def test_ids_are_checked_whole() -> None:
    for bad in ("a\n", "", " a", "a b", "-a"):
        with pytest.raises(TableError, match="field id: id must be"):
            make_table([Entry(bad, {}, Tile(1, 1024, 4))])


def test_provenance_must_be_flat_and_finite() -> None:
    for bad, fragment in (({"speedup": float("nan")}, "must be finite"),
                          ({"runs": [1, 2]}, "strings, numbers or booleans")):
        with pytest.raises(TableError, match=fragment):
            make_table([Entry("x", {}, Tile(1, 1024, 4), bad)])


def test_with_entry_refuses_an_overlap_and_names_both() -> None:
    table = make_table([Entry("long", {"max_seq_len": Range(4096)}, Tile(1, 2048, 8))])
    with pytest.raises(TableError) as info:
        table.with_entry(Entry("mid", {"max_seq_len": Range(1000, 5000)}, Tile(4, 256, 4)))
    assert "entries 'long' (#1) and 'mid' (#2)" in str(info.value)
    assert "max_seq_len=4096" in str(info.value)
    assert len(table) == 1  # unchanged


def test_a_serve_table_needs_its_header() -> None:
    with pytest.raises(TypeError, match="needs its header sections"):
        serve.Table(serve.SCHEMA, [])


# --------------------------------------------------------------------------- exact overlap
SMALL = {"compress_ratio": (1, 6), "num_decode_tokens": (0, 6), "block_size": (1, 6)}
GRID_ARCHS = ("sm80", "sm90", "sm100", "sm120")


@st.composite
def small_entries(draw: st.DrawFn, entry_id: str) -> Entry:
    """An entry over a small domain so that brute force can check overlap exactly."""
    match: dict[str, object] = {}
    if draw(st.booleans()):
        match["arch"] = draw(st.frozensets(st.sampled_from(GRID_ARCHS[:3]), min_size=1))
    for name, (low, high) in SMALL.items():
        form = draw(st.integers(0, 3))
        if form == 1:
            match[name] = draw(st.integers(low, high))
        elif form == 2:
            match[name] = draw(st.frozensets(st.integers(low, high), min_size=1, max_size=3))
        elif form == 3:
            a, b = draw(st.integers(low, high)), draw(st.integers(low, high))
            match[name] = Range(min(a, b), None if draw(st.booleans()) else max(a, b))
    return Entry(entry_id, match, Tile(1, 1024, 4))


GRID = [Key(arch, cr, 4096, 100, nd, 0, bs) for arch, cr, nd, bs in itertools.product(
    GRID_ARCHS, range(1, 9), range(0, 9), range(1, 9))]


@settings(max_examples=HEAVY_EXAMPLES * 3, suppress_health_check=[HealthCheck.too_slow])
@given(small_entries("a"), small_entries("b"))
def test_overlap_detection_is_exact(a: Entry, b: Entry) -> None:
    """Refused iff some key matches both: brute force over a grid that covers every edge."""
    shared = [k for k in GRID if oracle_match(a, k) and oracle_match(b, k)]
    try:
        table = make_table([a, b])
    except TableError as exc:
        assert shared, f"refused without a shared key: {exc}"
        assert "entries 'a' (#1) and 'b' (#2)" in str(exc)
        return
    assert not shared, f"accepted, but both match {shared[0]}"
    for key in GRID[::7]:
        hits = [e.config for e in (a, b) if oracle_match(e, key)]
        sentinel = object()
        assert resolve(table, key, sentinel) is (hits[0] if hits else sentinel)
