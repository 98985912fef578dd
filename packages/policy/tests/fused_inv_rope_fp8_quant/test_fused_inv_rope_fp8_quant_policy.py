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

import policy_checks as shared
import pytest
from dsv4_policy import registry
from dsv4_policy.kernels import fused_inv_rope_fp8_quant as policy
from dsv4_policy.table import Entry, TableError
from hypothesis import given, settings
from hypothesis import strategies as st

INT32 = 2**31 - 1
TILES = [(t, h, w, body) for t in (1, 2, 4, 8, 16, 32, 64) for h in (1, 2, 4, 8, 16, 32, 64)
         for w in (1, 2, 4, 8, 16) for body in policy.BODIES if t * h * 512 <= 128 * 32 * w]


@st.composite
def keys(draw: st.DrawFn) -> policy.Key:
    return policy.Key(
        draw(st.sampled_from(shared.ARCHES)), draw(st.integers(0, 1 << 20) | st.integers(0, INT32)),
        draw(st.sampled_from([8, 16, 32, 64, 128]) | st.integers(1, 4096)),
        draw(st.sampled_from([512, 128]) | st.integers(1, 4096)),
        draw(st.sampled_from([128, 64]) | st.integers(1, 4096)),
        draw(st.integers(0, 1)), draw(st.integers(0, 1)))


def tables() -> st.SearchStrategy[policy.Table]:
    return shared.spanning_tables(policy, tiles=TILES, span_max=20_000,
                           sets={"num_heads": ([8, 16, 32, 64, 128], 3)},
                           flags=("tma_aligned_scales", "quantize"),
                           ranges={"head_dim": (1, 1024), "quant_group_size": (1, 256)})


@settings(max_examples=300)
@given(table=tables(), key=keys())
def test_resolve_is_total_and_warm_up_covers_it(table: policy.Table, key: policy.Key) -> None:
    shared.check_resolve(policy, table, key, {"num_heads": key.num_heads, "head_dim": key.head_dim,
                                       "quant_group_size": key.quant_group_size})


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
    shared.check_falls_back(policy, table, key)


@settings(max_examples=200)
@given(key=keys())
def test_the_shipped_table_and_an_empty_one_resolve_to_vllms_launch(key: policy.Key) -> None:
    shared.check_shipped_and_empty(policy, key, (1, 1, 1, "head_rows"))


@settings(max_examples=150)
@given(table=tables(), header=st.text(st.characters(codec="ascii", exclude_categories=["Cc"]),
                                     max_size=60))
def test_tables_round_trip_through_toml(table: policy.Table, header: str) -> None:
    assert shared.check_round_trip(policy, table.entries, header) == table


def test_the_shipped_table_is_valid_and_every_entry_has_its_evidence() -> None:
    shared.check_shipped_evidence(policy)
    assert policy.compile_keys(None, "sm90", num_heads=64) >= {(1, 1, 1, "head_rows")}


def test_the_kernel_spec_is_registered_and_describes_this_policy() -> None:
    assert registry.get("fused_inv_rope_fp8_quant") is policy.KERNEL
    shared.check_spec(policy,
                      compile_key_fields=("tokens_per_program", "heads_per_program", "num_warps",
                                          "body"),
                      deployment=["num_heads", "head_dim", "quant_group_size"])
    assert dict(policy.KERNEL.describe(policy.Key("sm90", 5, 64)))["tma_aligned_T"] == 8


def test_compile_keys_skip_entries_other_deployments_need() -> None:
    table = policy.make_table([
        Entry("h64", {"arch": "sm90", "num_heads": 64, "num_tokens": policy.Range(64, 8192)},
              policy.Tile(1, 4, 1), {"probes": 4, "worst_speedup": "1.5x"}),
        Entry("h8", {"arch": "sm90", "num_heads": 8, "num_tokens": policy.Range(512, 8192)},
              policy.Tile(1, 2, 1, "block_rows"), {"probes": 4, "worst_speedup": "1.2x"})])
    base = (1, 1, 1, "head_rows")
    assert policy.compile_keys(table, "sm90", num_heads=64) == {base, (1, 4, 1, "head_rows")}
    assert policy.compile_keys(table, "sm90", num_heads=8) == {base, (1, 2, 1, "block_rows")}
    assert policy.compile_keys(table, "sm100", num_heads=64) == {base}
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
    ((3, 1, 1, "head_rows"), "tokens_per_program must be a power of two in 1..64; got 3"),
    ((1, 128, 16, "block_rows"), "heads_per_program must be a power of two in 1..64; got 128"),
    ((8, 8, 1, "head_rows"), "exceeds 128 elements per thread"),
    ((1, 1, 3, "block_rows"), "num_warps must be one of 1, 2, 4, 8, 16; got integer 3"),
    ((1, 1, 1, "strip"), "body must be one of 'head_rows', 'block_rows'; got string 'strip'"),
    ((1, 1, 1, 2), "body must be one of 'head_rows', 'block_rows'; got integer 2"),
])
def test_bad_tiles_are_refused_in_code_and_in_files(tile: tuple[int, int, int, object],
                                                    message: str) -> None:
    shared.check_bad_tile(policy, tile, message)


def test_table_files_refuse_unknown_fields_and_overlaps() -> None:
    shared.check_files_refuse_unknown_fields_and_overlaps(
        policy, (1, 2, 1, "block_rows"), policy.Key("sm90", 1, 64),
        unknown_launch="cols_per_program", unknown_match="window_size")


def test_a_table_written_before_the_body_field_loads_as_head_rows() -> None:
    """``body`` may be left out of a file (tables tuned when there was one body): the
    entry is the head-rows body; a written table always spells it, and a wrong one is
    refused naming the field and the bodies there are."""
    tile = {"tokens_per_program": 2, "heads_per_program": 1, "num_warps": 1}
    old = policy.loads_table(shared.launch_toml(tile, 'arch = "sm90"\n'))
    assert old.entries[0].config == policy.Tile(2, 1, 1, "head_rows")
    assert policy.resolve(policy.Key("sm90", 64, 8), old).compile_key() == (2, 1, 1, "head_rows")
    assert 'body = "head_rows"' in policy.render_table(old.entries, "")
    rows = policy.loads_table(shared.launch_toml({**tile, "body": "block_rows"}))
    assert rows.entries[0].config.body == "block_rows"
    with pytest.raises(TableError, match=r"body must be one of 'head_rows', 'block_rows'; "
                                         r"got string 'rows'"):
        policy.loads_table(shared.launch_toml({**tile, "body": "rows"}))
