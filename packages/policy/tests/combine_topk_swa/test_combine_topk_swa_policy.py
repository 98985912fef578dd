"""Properties of the combine_topk_swa launch policy: resolve is total, a key no entry
matches gets vLLM's launch (the very baseline object), a hit gets exactly its entry's
tile, warm-up covers every launch, and tables round-trip through TOML.

The match oracle (``policy_strategies.oracle_match``) restates the table semantics
plainly (a loop over the entry's conditions), independent of the package's index.
"""

from __future__ import annotations

import dataclasses

import policy_checks as shared
import pytest
from dsv4_policy import launch_table
from dsv4_policy import table as generic
from dsv4_policy.conditions import Range
from dsv4_policy.kernels import combine_topk_swa as policy
from dsv4_policy.table import Entry, TableError
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from policy_strategies import oracle_match

ARCHS = ("sm80", "sm86", "sm90", "sm90a", "sm100", "sm120")
INT_NAMES = [f.name for f in policy.INT_FIELDS]
VALUES = {
    "compress_ratio": [1, 4, 128, 2, 64],
    "top_k": [0, 128, 256, 512, 1024, 2048, 7],
    "window_size": [1, 64, 128, 256],
    "max_image_tokens": [0, 576, 1, 4096],
    "has_image": [0, 1],
    "num_reqs": [0, 1, 2, 3, 4, 8, 9, 300],
    "num_tokens": [0, 1, 511, 512, 1024, 1025, 4096, 8192, 16384, 32768, 65536, 65537, 1 << 30],
}


def keys() -> st.SearchStrategy[policy.Key]:
    fields = {"arch": st.sampled_from(ARCHS)}
    fields.update({name: st.sampled_from(VALUES[name]) for name in INT_NAMES})
    return st.fixed_dictionaries(fields).map(lambda d: policy.Key(**d))


tiles = st.builds(
    lambda t, c, w: policy.Tile(t, c, w) if not policy.tile_problems(t, c, w) else None,
    st.sampled_from([1, 2, 4, 8, 16, 64]), st.sampled_from([16, 64, 128, 256, 1024, 8192]),
    st.sampled_from([1, 2, 4, 8, 16]),
).filter(lambda t: t is not None)


@st.composite
def matches(draw: st.DrawFn) -> dict[str, object]:
    match: dict[str, object] = {}
    if draw(st.booleans()):
        match["arch"] = frozenset(draw(st.lists(st.sampled_from(ARCHS), min_size=1,
                                                max_size=3, unique=True)))
    for name in INT_NAMES:
        if draw(st.booleans()):
            continue
        lo, hi = sorted(draw(st.lists(st.sampled_from(VALUES[name]), min_size=2, max_size=2)))
        match[name] = draw(st.sampled_from([frozenset({lo}), frozenset({lo, hi}), Range(lo, hi),
                                            Range(lo)]))
    return match


@st.composite
def entry_lists(draw: st.DrawFn) -> list[Entry]:
    found: list[Entry] = []
    for i in range(draw(st.integers(0, 5))):
        candidate = Entry(f"e{i}", draw(matches()), draw(tiles),
                          {"probes": draw(st.integers(1, 40)), "worst_speedup": "1.10x"})
        if all(generic.overlap(policy.SCHEMA, candidate, e) is None for e in found):
            found.append(candidate)
    return found


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(entry_lists(), st.lists(keys(), min_size=1, max_size=6))
def test_resolve_is_total_and_falls_back_unchanged(entries: list[Entry],
                                                   probe: list[policy.Key]) -> None:
    table = policy.make_table(entries)
    for key in probe:
        launch = policy.resolve(key, table)
        hits = [e for e in entries if oracle_match(e, key)]
        assert len(hits) <= 1
        assert isinstance(launch, policy.Launch)
        assert not policy.tile_problems(*launch.compile_key())
        if not hits:
            event("miss")
            assert launch is policy.baseline(key)
            assert launch.source == "baseline"
            assert launch.compile_key() == (1, 1024, 4)
            continue
        event("hit")
        assert launch == shared.tile_launch(policy, hits[0])
        deployment = policy.deployment_of(key)
        if deployment is not None:
            assert launch.compile_key() in policy.compile_keys(table, key.arch, **deployment)


@settings(max_examples=200)
@given(keys())
def test_the_shipped_table_gives_every_key_vllms_launch(key: policy.Key) -> None:
    # A key the shipped table has no entry for runs vLLM's own function.
    assert policy.resolve(key) == policy.resolve(key, policy.shipped_table())
    shared.check_shipped_and_empty(policy, key, (1, 1024, 4))


def test_a_key_just_outside_an_entry_gets_the_baseline() -> None:
    entry = Entry("c4a-big", {"arch": "sm90", "compress_ratio": 4, "top_k": 512,
                              "num_tokens": Range(16385, 65536), "num_reqs": Range(1, 8)},
                  policy.Tile(2, 128, 1), {"probes": 7, "worst_speedup": "1.50x"})
    table = policy.make_table([entry])
    inside = policy.Key("sm90", 4, 512, 128, 0, 0, 4, 32768)
    assert policy.resolve(inside, table).source == "table:c4a-big"
    for outside in (dataclasses.replace(inside, num_tokens=16384),
                    dataclasses.replace(inside, num_tokens=65537),
                    dataclasses.replace(inside, num_reqs=9),
                    dataclasses.replace(inside, top_k=1024),
                    dataclasses.replace(inside, compress_ratio=128),
                    dataclasses.replace(inside, arch="sm100")):
        assert policy.resolve(outside, table) is policy.baseline(outside)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(entry_lists())
def test_tables_round_trip_through_toml(entries: list[Entry]) -> None:
    shared.check_round_trip(policy, entries, "a header\nover two lines")


def test_compile_keys_cover_the_baseline_and_only_applicable_entries() -> None:
    entries = [
        Entry("a", {"arch": "sm90", "window_size": 128, "max_image_tokens": 0},
              policy.Tile(4, 256, 4)),
        Entry("b", {"arch": "sm100"}, policy.Tile(2, 128, 1)),
        Entry("c", {"arch": "sm90", "window_size": 64}, policy.Tile(8, 128, 4)),
        Entry("d", {"arch": "sm90", "window_size": 128, "max_image_tokens": Range(1)},
              policy.Tile(1, 512, 4)),
    ]
    table = policy.make_table(entries)
    sources = policy.compile_key_sources(table, "sm90", window_size=128)
    assert sources == {(1, 1024, 4): ("baseline",), (4, 256, 4): ("table:a",)}
    assert policy.compile_keys(table, "sm90", window_size=128, max_image_tokens=576) == {
        (1, 1024, 4), (1, 512, 4)}
    assert policy.compile_keys(None, "sm80", window_size=128) >= {(1, 1024, 4)}
    with pytest.raises(ValueError, match="window_size"):
        policy.compile_keys(table, "sm90", window_size=0)


def test_keys_and_tiles_refuse_bad_values_naming_the_field() -> None:
    good = dict(arch="sm90", compress_ratio=4, top_k=512, window_size=128, max_image_tokens=0,
                has_image=0, num_reqs=1, num_tokens=10)
    for name, value in (("compress_ratio", 0), ("top_k", -1), ("window_size", 0),
                        ("max_image_tokens", -3), ("has_image", 2), ("num_reqs", -1),
                        ("num_tokens", 1.5), ("arch", "hopper")):
        with pytest.raises(ValueError, match=name if name != "arch" else "arch"):
            policy.Key(**{**good, name: value})  # type: ignore[arg-type]
    for tile, message in (((1, 8, 4), "cols_per_program must be a power of two in 16..8192"),
                          ((1, 128, 3), "num_warps must be one of"),
                          ((256, 8192, 4), "exceeds 128 elements per thread")):
        shared.check_bad_tile(policy, tile, message)


def test_tables_refuse_bad_entries_naming_entry_and_field() -> None:
    cases = [
        ([Entry("a", {"no_such": 1}, policy.BASELINE_TILE)], "match.no_such"),
        ([Entry("a", {"top_k": -1}, policy.BASELINE_TILE)], "match.top_k"),
        ([Entry("a", {}, "a tile")], "launch.tile"),
        ([Entry("a", {"num_tokens": Range(1, 10)}, policy.BASELINE_TILE),
          Entry("b", {"num_tokens": Range(10)}, policy.BASELINE_TILE)], "match"),
    ]
    for entries, field in cases:
        with pytest.raises(TableError) as info:
            policy.make_table(entries)
        assert any(p.field == field for p in info.value.problems), str(info.value)
    shared.check_files_refuse_unknown_fields_and_overlaps(
        policy, (2, 128, 1), policy.Key("sm90", 4, 512, 128, 0, 0, 1, 1),
        unknown_launch="row_stride", unknown_match="no_such")


def test_tuner_entries_carry_the_provenance_check_needs() -> None:
    good = Entry("e", {"compress_ratio": 4}, policy.Tile(2, 128, 1),
                 {"probes": 7, "worst_speedup": "1.52x"})
    slow = Entry("s", {"compress_ratio": 1}, policy.Tile(2, 128, 1),
                 {"probes": 7, "worst_speedup": "0.98x"})
    bare = Entry("b", {"compress_ratio": 128}, policy.Tile(2, 128, 1))
    assert launch_table.provenance_problems(good) == []
    assert [f for f, _ in launch_table.provenance_problems(slow)] == ["provenance.worst_speedup"]
    assert {f for f, _ in launch_table.provenance_problems(bare)} == {
        "provenance.probes", "provenance.worst_speedup"}


def test_the_kernel_spec_describes_this_module() -> None:
    spec = policy.KERNEL
    key = shared.check_spec(policy,
                            compile_key_fields=("tokens_per_program", "cols_per_program",
                                                "num_warps"),
                            deployment=["window_size", "max_image_tokens"])
    assert spec.name == "combine_topk_swa" and spec.baseline_tile == policy.Tile(1, 1024, 4)
    assert spec.describe(key) == [("combined_topk", 640)]
    assert spec.compile_keys(None, "sm90", window_size=128) >= {(1, 1024, 4)}
