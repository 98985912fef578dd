"""Properties of the FusedInvRopeFP8Quant launch policy.

- ``resolve`` is total: every valid key gets a launch, and its tile is one that
  ``compile_keys`` lists for the key's deployment (so the warm-up before graph capture
  covers every call);
- a key outside every entry gets the baseline, the very same object, which is vLLM
  0.33.0's launch shape (one token, one head, one warp); a key inside an entry gets
  exactly that entry's tile;
- tables round-trip through ``render_table`` / ``loads_table``;
- the shipped table is valid and every entry in it carries its evidence.
"""

from __future__ import annotations

import pytest
from dsv4_policy import launch_table, registry
from dsv4_policy.kernels import fused_inv_rope_fp8_quant as policy
from dsv4_policy.table import Entry, TableError
from hypothesis import given, settings
from hypothesis import strategies as st

INT32 = 2**31 - 1
ARCHES = ["sm80", "sm86", "sm90", "sm90a", "sm100", "sm120"]
TILES = [(t, h, w) for t in (1, 2, 4, 8, 16, 32, 64) for h in (1, 2, 4, 8, 16, 32, 64)
         for w in (1, 2, 4, 8, 16) if t * h * 512 <= 128 * 32 * w]


@st.composite
def keys(draw: st.DrawFn) -> policy.Key:
    return policy.Key(
        draw(st.sampled_from(ARCHES)), draw(st.integers(0, 1 << 20) | st.integers(0, INT32)),
        draw(st.sampled_from([8, 16, 32, 64, 128]) | st.integers(1, 4096)),
        draw(st.sampled_from([512, 128]) | st.integers(1, 4096)),
        draw(st.sampled_from([128, 64]) | st.integers(1, 4096)),
        draw(st.integers(0, 1)), draw(st.integers(0, 1)))


def _range(draw: st.DrawFn, low: int, high: int) -> policy.Range:
    a, b = sorted(draw(st.integers(low, high)) for _ in range(2))
    return policy.Range(a, None if draw(st.booleans()) and b == high else b)


@st.composite
def tables(draw: st.DrawFn) -> policy.Table:
    """Valid tables: entries own disjoint num_tokens spans, so none overlap; every other
    field is left open or given a random condition."""
    cuts = sorted(draw(st.sets(st.integers(0, 20_000), min_size=1, max_size=7)))
    entries = []
    for i, (lo, hi) in enumerate(zip(cuts, [*cuts[1:], None], strict=True)):
        match: dict[str, object] = {"num_tokens": policy.Range(lo, None if hi is None
                                                                else hi - 1)}
        if draw(st.booleans()):
            match["arch"] = draw(st.lists(st.sampled_from(ARCHES), min_size=1, max_size=3,
                                          unique=True))
        if draw(st.booleans()):
            match["num_heads"] = draw(st.lists(st.sampled_from([8, 16, 32, 64, 128]),
                                               min_size=1, max_size=3, unique=True))
        for name in ("tma_aligned_scales", "quantize"):
            if draw(st.booleans()):
                match[name] = draw(st.integers(0, 1))
        for name, low, high in (("head_dim", 1, 1024), ("quant_group_size", 1, 256)):
            if draw(st.booleans()):
                match[name] = _range(draw, low, high)
        tile = policy.Tile(*draw(st.sampled_from(TILES)))
        provenance = {"probes": draw(st.integers(1, 99)),
                      "worst_speedup": f"{draw(st.floats(1.0, 9.0)):.3f}x"}
        entries.append(Entry(f"e{i}-{lo}", match, tile, provenance))
    return policy.make_table(entries)


@settings(max_examples=300)
@given(table=tables(), key=keys())
def test_resolve_is_total_and_warm_up_covers_it(table: policy.Table, key: policy.Key) -> None:
    launch = policy.resolve(key, table)
    assert isinstance(launch, policy.Launch)
    hits = table.matches(key)
    assert len(hits) <= 1
    if hits:
        tile = hits[0].config
        assert launch == policy.Launch(tile.tokens_per_program, tile.heads_per_program,
                                       tile.num_warps, f"table:{hits[0].id}")
    else:
        assert launch is policy.baseline(key)
    deployment = policy.KERNEL.deployment_of(key)
    assert deployment == {"num_heads": key.num_heads, "head_dim": key.head_dim,
                          "quant_group_size": key.quant_group_size}
    assert launch.compile_key() in policy.compile_key_sources(table, key.arch, **deployment)
    assert launch.compile_key() in policy.KERNEL.compile_keys(table, key.arch, **deployment)


@settings(max_examples=200)
@given(table=tables(), data=st.data())
def test_a_key_outside_every_entry_gets_the_baseline(table: policy.Table,
                                                     data: st.DataObject) -> None:
    key = data.draw(keys())
    # Move the key past every entry's num_tokens span, or to an arch no entry names.
    last = max(e.match["num_tokens"].min for e in table.entries)
    ends = [e.match["num_tokens"].max for e in table.entries]
    if all(end is not None for end in ends):
        key = policy.Key(key.arch, max(ends) + 1 + data.draw(st.integers(0, 99)),
                         key.num_heads, key.head_dim, key.quant_group_size,
                         key.tma_aligned_scales, key.quantize)
        assert not table.matches(key)
    elif all("arch" in e.match for e in table.entries):
        named = {a for e in table.entries for a in e.match["arch"]}
        outside = [a for a in ("sm75", "sm89", "sm103") if a not in named]
        key = policy.Key(data.draw(st.sampled_from(outside)), key.num_tokens, key.num_heads,
                         key.head_dim, key.quant_group_size, key.tma_aligned_scales,
                         key.quantize)
        assert not table.matches(key)
    assert last >= 0
    if not table.matches(key):
        launch = policy.resolve(key, table)
        assert launch is policy.baseline(key)
        assert launch.source == "baseline"
        assert launch.compile_key() == (1, 1, 1)


@settings(max_examples=200)
@given(key=keys())
def test_the_shipped_table_and_an_empty_one_resolve_to_vllms_launch(key: policy.Key) -> None:
    empty = policy.make_table([])
    assert policy.resolve(key, empty) is policy.baseline(key)
    if not policy.shipped_table().matches(key):
        assert policy.resolve(key) is policy.baseline(key)
    base = policy.baseline(key)
    assert (base.tokens_per_program, base.heads_per_program, base.num_warps) == (1, 1, 1)
    assert policy.Tile(1, 1, 1) == policy.BASELINE_TILE


@settings(max_examples=150)
@given(table=tables(), header=st.text(st.characters(codec="ascii", exclude_categories=["Cc"]),
                                     max_size=60))
def test_tables_round_trip_through_toml(table: policy.Table, header: str) -> None:
    text = policy.render_table(table.entries, header)
    again = policy.loads_table(text, "<round trip>")
    assert again == table
    assert policy.render_table(again.entries, header) == text


def test_the_shipped_table_is_valid_and_every_entry_has_its_evidence() -> None:
    table = policy.shipped_table()
    assert table.schema is policy.SCHEMA
    assert str(table.source).endswith("tables/fused_inv_rope_fp8_quant.toml")
    for entry in table.entries:
        assert launch_table.provenance_problems(entry) == [], entry.id
    assert policy.compile_keys(None, "sm90", num_heads=64) >= {(1, 1, 1)}


def test_the_kernel_spec_is_registered_and_describes_this_policy() -> None:
    spec = registry.get("fused_inv_rope_fp8_quant")
    assert spec is policy.KERNEL
    assert isinstance(spec, launch_table.KernelSpec)
    assert spec.table_file == "tables/fused_inv_rope_fp8_quant.toml"
    assert spec.key_type is policy.Key and spec.launch_type is policy.Launch
    assert spec.tile_type is policy.Tile and spec.baseline_tile == policy.BASELINE_TILE
    assert spec.compile_key_fields == ("tokens_per_program", "heads_per_program", "num_warps")
    assert [p.name for p in spec.deployment] == ["num_heads", "head_dim", "quant_group_size"]
    assert set(spec.key_defaults) == set(policy.SCHEMA.field_names)
    defaults = {k: v for k, v in spec.key_defaults.items() if v is not None}
    key = policy.Key(arch="sm90", **defaults)  # type: ignore[arg-type]
    assert spec.resolve(key, None) == policy.resolve(key)
    assert spec.baseline(key) is policy.baseline(key)
    assert dict(spec.describe(policy.Key("sm90", 5, 64)))["tma_aligned_T"] == 8


def test_compile_keys_skip_entries_other_deployments_need() -> None:
    table = policy.make_table([
        Entry("h64", {"arch": "sm90", "num_heads": 64, "num_tokens": policy.Range(64, 8192)},
              policy.Tile(1, 4, 1), {"probes": 4, "worst_speedup": "1.5x"}),
        Entry("h8", {"arch": "sm90", "num_heads": 8, "num_tokens": policy.Range(512, 8192)},
              policy.Tile(1, 2, 1), {"probes": 4, "worst_speedup": "1.2x"})])
    assert policy.compile_keys(table, "sm90", num_heads=64) == {(1, 1, 1), (1, 4, 1)}
    assert policy.compile_keys(table, "sm90", num_heads=8) == {(1, 1, 1), (1, 2, 1)}
    assert policy.compile_keys(table, "sm100", num_heads=64) == {(1, 1, 1)}
    assert policy.resolve(policy.Key("sm90", 63, 64), table).source == "baseline"
    assert policy.resolve(policy.Key("sm90", 64, 64), table).source == "table:h64"
    assert policy.resolve(policy.Key("sm90", 64, 64, quantize=0), table).source == "table:h64"
    with pytest.raises(ValueError, match="num_heads must be an integer >= 1"):
        policy.compile_keys(table, "sm90", num_heads=0)


@pytest.mark.parametrize(("args", "message"), [
    (("sm9", 1, 64), "Key.arch"),
    (("sm90", -1, 64), "Key.num_tokens"),
    (("sm90", 1, 0), "Key.num_heads"),
    (("sm90", 1, 64, 0), "Key.head_dim"),
    (("sm90", 1, 64, 512, 0), "Key.quant_group_size"),
    (("sm90", 1, 64, 512, 128, 2), "Key.tma_aligned_scales must be 0 or 1"),
    (("sm90", 1, 64, 512, 128, 0, 2), "Key.quantize must be 0 or 1"),
    (("sm90", 1.0, 64), "Key.num_tokens"),
    (("sm90", True, 64), "Key.num_tokens"),
])
def test_bad_keys_name_the_field(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        policy.Key(*args)


@pytest.mark.parametrize(("tile", "message"), [
    ((3, 1, 1), "tokens_per_program must be a power of two in 1..64; got 3"),
    ((1, 128, 16), "heads_per_program must be a power of two in 1..64; got 128"),
    ((8, 8, 1), "exceeds 128 elements per thread"),
    ((1, 1, 3), "num_warps must be one of 1, 2, 4, 8, 16; got integer 3"),
])
def test_bad_tiles_are_refused_in_code_and_in_files(tile: tuple[int, int, int],
                                                    message: str) -> None:
    with pytest.raises(ValueError, match=message):
        policy.Tile(*tile)
    text = (f"schema = 1\n[[entry]]\nid = \"a\"\n[entry.launch]\ntokens_per_program = "
            f"{tile[0]}\nheads_per_program = {tile[1]}\nnum_warps = {tile[2]}\n")
    with pytest.raises(TableError, match=message):
        policy.loads_table(text)


def test_table_files_refuse_unknown_fields_and_overlaps() -> None:
    base = "schema = 1\n[[entry]]\nid = \"a\"\n[entry.launch]\ntokens_per_program = 1\n"
    with pytest.raises(TableError, match="missing; a launch gives tokens_per_program, "
                                         "heads_per_program and num_warps"):
        policy.loads_table(base + "num_warps = 1\n")
    with pytest.raises(TableError, match="unknown field 'cols_per_program'"):
        policy.loads_table(base + "heads_per_program = 2\nnum_warps = 1\ncols_per_program = 1\n")
    with pytest.raises(TableError, match="unknown match field 'window_size'"):
        policy.loads_table(base + "heads_per_program = 2\nnum_warps = 1\n[entry.match]\n"
                                  "window_size = 128\n")
    two = [Entry(f"e{i}", {"num_tokens": policy.Range(i * 10, 100)}, policy.Tile(1, 2, 1))
           for i in range(2)]
    with pytest.raises(TableError, match="overlap"):
        policy.make_table(two)
