"""Properties of the compressed slot mapping launch policy.

- ``resolve`` is total: every valid key gets a launch, and its compile key is one that
  ``compile_keys`` lists for the key's deployment (so warm-up covers every call);
- a key outside every entry gets the baseline, the very same object, which is vLLM
  0.33.0's launch shape; a key inside an entry gets exactly that entry's tile;
- tables round-trip through ``render_table`` / ``loads_table``;
- the shipped table is valid and every entry in it carries its evidence.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from dsv4_policy import launch_table
from dsv4_policy.kernels import compressed_slot_mapping as policy
from dsv4_policy.table import Entry, TableError
from hypothesis import given, settings
from hypothesis import strategies as st

INT32 = 2**31 - 1
ARCHES = ["sm80", "sm86", "sm90", "sm90a", "sm100", "sm120"]
TILES = [(tpp, warps) for tpp in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
         for warps in (1, 2, 4, 8, 16) if tpp <= 4096 * warps]


@st.composite
def keys(draw: st.DrawFn) -> policy.Key:
    tokens = draw(st.integers(0, 1 << 20))
    return policy.Key(
        draw(st.sampled_from(ARCHES)), draw(st.sampled_from([1, 2, 4, 128]) | st.integers(1, INT32)),
        draw(st.integers(1, 4096)), draw(st.sampled_from([1, 2, 8]) | st.integers(1, 64)),
        draw(st.integers(0, 4096)), tokens, tokens + draw(st.integers(0, 1 << 20)))


def _range(draw: st.DrawFn, low: int, high: int) -> policy.Range:
    a, b = sorted(draw(st.integers(low, high)) for _ in range(2))
    return policy.Range(a, None if draw(st.booleans()) and b == high else b)


@st.composite
def tables(draw: st.DrawFn) -> policy.Table:
    """Valid tables: entries own disjoint num_tokens spans, so none overlap; every other
    field is left open or given a random condition."""
    cuts = sorted(draw(st.sets(st.integers(0, 200_000), min_size=1, max_size=7)))
    entries = []
    for i, (lo, hi) in enumerate(zip(cuts, [*cuts[1:], None], strict=True)):
        match: dict[str, object] = {"num_tokens": policy.Range(lo, None if hi is None
                                                                else hi - 1)}
        if draw(st.booleans()):
            match["arch"] = draw(st.lists(st.sampled_from(ARCHES), min_size=1, max_size=3,
                                          unique=True))
        if draw(st.booleans()):
            match["compress_ratio"] = draw(st.lists(st.sampled_from([2, 4, 8, 128]),
                                                    min_size=1, max_size=2, unique=True))
        for name, low, high in (("block_size", 1, 512), ("num_reqs", 0, 2048),
                                ("num_rows", 0, 1 << 20), ("dcp_world_size", 1, 8)):
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
        assert launch == policy.Launch(tile.tokens_per_program, tile.num_warps,
                                       f"table:{hits[0].id}")
    else:
        assert launch is policy.baseline(key)
    found = policy.compile_key_sources(table, key.arch, dcp_world_size=key.dcp_world_size)
    assert launch.compile_key() in found
    assert policy.KERNEL.deployment_of(key) == {"dcp_world_size": key.dcp_world_size}
    assert launch.compile_key() in policy.KERNEL.compile_keys(
        table, key.arch, **policy.KERNEL.deployment_of(key))


@settings(max_examples=200)
@given(table=tables(), data=st.data())
def test_a_key_outside_every_entry_gets_the_baseline(table: policy.Table,
                                                     data: st.DataObject) -> None:
    key = data.draw(keys())
    # Move the key to an arch no entry names, or past every num_tokens span's end.
    named = {a for e in table.entries for a in e.match.get("arch", ARCHES)}
    outside = [a for a in ("sm75", "sm89", "sm103") if a not in named]
    if all("arch" in e.match for e in table.entries) and outside:
        key = policy.Key(data.draw(st.sampled_from(outside)), key.compress_ratio,
                         key.block_size, key.dcp_world_size, key.num_reqs, key.num_tokens,
                         key.num_rows)
        assert not table.matches(key)
    if not table.matches(key):
        launch = policy.resolve(key, table)
        assert launch is policy.baseline(key)
        assert launch.source == "baseline"
        assert launch.compile_key() == (1024, 4)


@settings(max_examples=200)
@given(key=keys())
def test_the_shipped_table_and_an_empty_one_resolve_to_vllms_launch(key: policy.Key) -> None:
    empty = policy.make_table([])
    assert policy.resolve(key, empty) is policy.baseline(key)
    shipped = policy.shipped_table()
    if not shipped.matches(key):
        assert policy.resolve(key) is policy.baseline(key)
    base = policy.baseline(key)
    assert (base.tokens_per_program, base.num_warps) == (1024, 4)
    assert policy.Tile(1024, 4) == policy.BASELINE_TILE


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
    assert str(table.source).endswith("tables/compressed_slot_mapping.toml")
    for entry in table.entries:
        assert launch_table.provenance_problems(entry) == [], entry.id
        assert entry.match.get("dcp_world_size") is not None, entry.id
    assert policy.compile_keys(None, "sm90") >= {(1024, 4)}


def test_the_kernel_spec_describes_this_policy() -> None:
    spec = policy.KERNEL
    assert isinstance(spec, launch_table.KernelSpec)
    assert spec.name == "compressed_slot_mapping"
    assert spec.table_file == "tables/compressed_slot_mapping.toml"
    assert spec.key_type is policy.Key and spec.launch_type is policy.Launch
    assert spec.tile_type is policy.Tile and spec.baseline_tile == policy.BASELINE_TILE
    assert spec.compile_key_fields == ("tokens_per_program", "num_warps")
    assert [p.name for p in spec.deployment] == ["dcp_world_size"]
    assert set(spec.key_defaults) == set(policy.SCHEMA.field_names)
    defaults = {k: v for k, v in spec.key_defaults.items() if v is not None}
    key = policy.Key(arch="sm90", **defaults)  # type: ignore[arg-type]
    assert spec.resolve(key, None) == policy.resolve(key)
    assert spec.baseline(key) is policy.baseline(key)


@pytest.mark.parametrize(("args", "message"), [
    (("sm9", 4, 64, 1, 1, 1, 1), "Key.arch"),
    (("sm90", 0, 64, 1, 1, 1, 1), "Key.compress_ratio"),
    (("sm90", 4, 0, 1, 1, 1, 1), "Key.block_size"),
    (("sm90", 4, 64, 0, 1, 1, 1), "Key.dcp_world_size"),
    (("sm90", 4, 64, 1, -1, 1, 1), "Key.num_reqs"),
    (("sm90", 4, 64, 1, 1, 1.0, 1), "Key.num_tokens"),
    (("sm90", 4, 64, 1, 1, 10, 9), "Key.num_rows must be at least num_tokens = 10"),
    (("sm90", True, 64, 1, 1, 1, 1), "Key.compress_ratio"),
])
def test_bad_keys_name_the_field(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        policy.Key(*args)


@pytest.mark.parametrize(("tile", "message"), [
    ((1000, 4), "tokens_per_program must be a power of two in 16..8192; got 1000"),
    ((8, 4), "tokens_per_program must be a power of two in 16..8192; got 8"),
    ((8192, 1), "exceeds 128 elements per thread"),
    ((1024, 3), "num_warps must be one of 1, 2, 4, 8, 16; got integer 3"),
])
def test_bad_tiles_are_refused_in_code_and_in_files(tile: tuple[int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        policy.Tile(*tile)
    text = (f"schema = 1\n[[entry]]\nid = \"a\"\n[entry.launch]\ntokens_per_program = "
            f"{tile[0]}\nnum_warps = {tile[1]}\n")
    with pytest.raises(TableError, match=message):
        policy.loads_table(text)


def test_table_files_refuse_unknown_fields_and_overlaps() -> None:
    base = "schema = 1\n[[entry]]\nid = \"a\"\n[entry.launch]\ntokens_per_program = 256\n"
    with pytest.raises(TableError, match="missing; a launch gives tokens_per_program and "
                                         "num_warps"):
        policy.loads_table(base)
    with pytest.raises(TableError, match="unknown field 'cols_per_program'"):
        policy.loads_table(base + "num_warps = 4\ncols_per_program = 128\n")
    with pytest.raises(TableError, match="unknown match field 'window_size'"):
        policy.loads_table(base + "num_warps = 4\n[entry.match]\nwindow_size = 128\n")
    two = [Entry(f"e{i}", {"num_tokens": policy.Range(i * 10, 100)}, policy.Tile(256, 4))
           for i in range(2)]
    with pytest.raises(TableError, match="overlap"):
        policy.make_table(two)
    with pytest.raises(TypeError, match="compressed_slot_mapping launch table"):
        policy.resolve(policy.Key("sm90", 4, 64, 1, 1, 1, 1), object())  # type: ignore[arg-type]


def test_importing_the_policy_loads_no_torch_or_triton() -> None:
    code = ("import sys; import dsv4_policy.kernels.compressed_slot_mapping as p; "
            "p.shipped_table(); "
            "print(sorted(m for m in ('torch', 'triton', 'numpy', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
