"""Properties of the combine_topk_swa launch policy: resolve is total, a key no entry
matches gets vLLM's launch (the very baseline object), a hit gets exactly its entry's
tile, warm-up covers every launch, and tables round-trip through TOML.

The match oracle here restates the table semantics plainly (a loop over the entry's
conditions), independent of the package's index.
"""

from __future__ import annotations

import dataclasses

import pytest
from dsv4_policy import launch_table
from dsv4_policy.conditions import Range
from dsv4_policy.kernels import combine_topk_swa as policy
from dsv4_policy.table import Entry, TableError
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

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
    from dsv4_policy import table as generic

    found: list[Entry] = []
    for i in range(draw(st.integers(0, 5))):
        candidate = Entry(f"e{i}", draw(matches()), draw(tiles),
                          {"probes": draw(st.integers(1, 40)), "worst_speedup": "1.10x"})
        if all(generic.overlap(policy.SCHEMA, candidate, e) is None for e in found):
            found.append(candidate)
    return found


def oracle_matches(entry: Entry, key: policy.Key) -> bool:
    """Whether ``key`` satisfies every condition of ``entry``, by plain comparisons."""
    for name, cond in entry.match.items():
        value = getattr(key, name)
        if isinstance(cond, Range):
            if value < cond.min or (cond.max is not None and value > cond.max):
                return False
        elif value not in cond:  # type: ignore[operator]
            return False
    return True


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(entry_lists(), st.lists(keys(), min_size=1, max_size=6))
def test_resolve_is_total_and_falls_back_unchanged(entries: list[Entry],
                                                   probe: list[policy.Key]) -> None:
    table = policy.make_table(entries)
    for key in probe:
        launch = policy.resolve(key, table)
        hits = [e for e in entries if oracle_matches(e, key)]
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
        tile = hits[0].config
        assert launch.source == f"table:{hits[0].id}"
        assert launch.compile_key() == (tile.tokens_per_program, tile.cols_per_program,
                                        tile.num_warps)
        deployment = policy.deployment_of(key)
        if deployment is not None:
            assert launch.compile_key() in policy.compile_keys(table, key.arch, **deployment)


@settings(max_examples=200)
@given(keys())
def test_the_shipped_table_gives_every_key_vllms_launch(key: policy.Key) -> None:
    # The shipped table starts empty; the tuner fills it. Until then every call runs vLLM's.
    table = policy.shipped_table()
    launch = policy.resolve(key)
    assert launch == policy.resolve(key, table)
    if not table.entries:
        assert launch is policy.baseline(key) and launch.source == "baseline"


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
    text = policy.render_table(entries, "a header\nover two lines")
    loaded = policy.loads_table(text, "<test>")
    assert loaded.entries == tuple(entries)
    assert policy.render_table(loaded.entries, "a header\nover two lines") == text


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
    with pytest.raises(ValueError, match="cols_per_program"):
        policy.Tile(1, 8, 4)
    with pytest.raises(ValueError, match="num_warps"):
        policy.Tile(1, 128, 3)
    with pytest.raises(ValueError, match="exceeds 128 elements per thread"):
        policy.Tile(256, 8192, 4)


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
    text = ('schema = 1\n[[entry]]\nid = "x"\n[entry.launch]\ntokens_per_program = 1\n'
            'cols_per_program = 128\nnum_warps = 4\nrow_stride = 8\n')
    with pytest.raises(TableError) as info:
        policy.loads_table(text)
    assert {p.field for p in info.value.problems} == {"launch.row_stride"}


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
    assert spec.name == "combine_topk_swa" and spec.table_file == "tables/combine_topk_swa.toml"
    assert spec.key_type is policy.Key and spec.launch_type is policy.Launch
    assert spec.tile_type is policy.Tile and spec.baseline_tile == policy.Tile(1, 1024, 4)
    assert spec.compile_key_fields == ("tokens_per_program", "cols_per_program", "num_warps")
    assert [d.name for d in spec.deployment] == ["window_size", "max_image_tokens"]
    key = policy.Key(**{k: v for k, v in spec.key_defaults.items() if v is not None},
                     arch="sm90")
    assert spec.baseline(key) is policy.baseline(key)
    assert spec.describe(key) == [("combined_topk", 640)]
    assert spec.shipped_table().source.endswith(spec.table_file)
    assert spec.compile_keys(None, "sm90", window_size=128) >= {(1, 1024, 4)}
