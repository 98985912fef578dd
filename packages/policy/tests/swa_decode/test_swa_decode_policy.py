"""Properties of the SWA decode launch policy.

- ``resolve`` is total: every valid key gets a launch, and its compile key is one that
  ``compile_keys`` lists for the key's arch (so warm-up covers every call);
- a key outside every entry gets the baseline, the very same object (vLLM's own build);
  a key inside an entry gets exactly that entry's tile;
- tables round-trip through ``render_table`` / ``loads_table``;
- the shipped table is valid and every entry in it carries its evidence;
- tiles are refused where the kernel's own checks refuse them.
"""

from __future__ import annotations

import subprocess
import sys

import policy_checks as shared
import pytest
from dsv4_policy.kernels import indexer_decode, swa
from dsv4_policy.kernels import swa_decode as policy
from hypothesis import given, settings
from hypothesis import strategies as st

INT32 = 2**31 - 1
POWERS = [1 << k for k in range(11)]
TILES = [(tpp, cols, warps) for tpp in POWERS for cols in POWERS if cols >= 16
         for warps in (1, 2, 4, 8, 16) if tpp * cols <= 4096 * warps]
WIDTHS = [64, 128, 256, 512]


@st.composite
def keys(draw: st.DrawFn) -> policy.Key:
    width = draw(st.sampled_from(WIDTHS) | st.integers(1, 1024) | st.integers(1, INT32))
    tokens = draw(st.integers(0, 4096) | st.integers(0, 1 << 20) | st.integers(0, INT32))
    return policy.Key(draw(st.sampled_from(shared.ARCHES)), width, tokens)


def tables() -> st.SearchStrategy[policy.Table]:
    return shared.spanning_tables(policy, tiles=TILES, span_max=200_000,
                                  sets={"index_width": (WIDTHS, 2)})


@settings(max_examples=300)
@given(table=tables(), key=keys())
def test_resolve_is_total_and_warm_up_covers_it(table: policy.Table, key: policy.Key) -> None:
    shared.check_resolve(policy, table, key, {})


@settings(max_examples=200)
@given(table=tables(), data=st.data())
def test_a_key_outside_every_entry_gets_the_baseline(table: policy.Table,
                                                     data: st.DataObject) -> None:
    key = data.draw(keys())
    # Move the key to an arch no entry names, when every entry names one.
    named = {a for e in table.entries for a in e.match.get("arch", shared.ARCHES)}
    outside = [a for a in ("sm75", "sm89", "sm103") if a not in named]
    if all("arch" in e.match for e in table.entries) and outside:
        key = policy.Key(data.draw(st.sampled_from(outside)), key.index_width, key.num_tokens)
        assert not table.matches(key)
    shared.check_falls_back(policy, table, key)


@settings(max_examples=200)
@given(table=tables(), data=st.data())
def test_a_key_past_every_entrys_width_gets_the_baseline(table: policy.Table,
                                                         data: st.DataObject) -> None:
    # Every entry that names a width names one of WIDTHS; give the key another one.
    key = data.draw(keys())
    width = data.draw(st.integers(1, 1024).filter(lambda w: w not in WIDTHS))
    key = policy.Key(key.arch, width, key.num_tokens)
    if all("index_width" in e.match for e in table.entries):
        assert not table.matches(key)
    shared.check_falls_back(policy, table, key)


@settings(max_examples=200)
@given(key=keys())
def test_the_shipped_table_and_an_empty_one_resolve_to_vllms_build(key: policy.Key) -> None:
    shared.check_shipped_and_empty(policy, key, (8, 128, 4))


@settings(max_examples=150)
@given(table=tables(), header=st.text(st.characters(codec="ascii", exclude_categories=["Cc"]),
                                     max_size=60))
def test_tables_round_trip_through_toml(table: policy.Table, header: str) -> None:
    assert shared.check_round_trip(policy, table.entries, header) == table


def test_the_shipped_table_is_valid_and_every_entry_has_its_evidence() -> None:
    for entry in shared.check_shipped_evidence(policy).entries:
        assert entry.match.get("arch") is not None, entry.id
    assert policy.compile_keys(None, "sm90") >= {(8, 128, 4)}


def test_the_shipped_file_names_its_tuner() -> None:
    with open(policy.shipped_table().source, encoding="utf-8") as f:
        head = f.readline()
    assert head.startswith("# ") and "python -m dsv4_evals.bench.swa_decode.tune --write" in head


def test_the_kernel_spec_describes_this_policy() -> None:
    key = shared.check_spec(policy, compile_key_fields=("tokens_per_program",
                                                        "cols_per_program", "num_warps"),
                            deployment=[])
    assert key == policy.Key("sm90", 128, 1)


def test_compile_keys_are_the_baseline_and_every_entry_of_the_arch() -> None:
    table = policy.loads_table("""schema = 1

[[entry]]
id = "a"
match = { arch = "sm90", index_width = 128, num_tokens = { min = 1, max = 64 } }
launch = { tokens_per_program = 4, cols_per_program = 128, num_warps = 2 }

[[entry]]
id = "b"
match = { arch = "sm100", num_tokens = { min = 1, max = 64 } }
launch = { tokens_per_program = 16, cols_per_program = 128, num_warps = 4 }

[[entry]]
id = "c"
match = { num_tokens = { min = 65 } }
launch = { tokens_per_program = 8, cols_per_program = 128, num_warps = 4 }

[[entry]]
id = "d"
match = { arch = "sm90", index_width = 256, num_tokens = { min = 1, max = 64 } }
launch = { tokens_per_program = 4, cols_per_program = 128, num_warps = 2 }
""")
    assert policy.compile_key_sources(table, "sm90") == {
        (8, 128, 4): ("baseline", "table:c"), (4, 128, 2): ("table:a", "table:d")}
    assert policy.compile_keys(table, "sm80") == {(8, 128, 4)}
    hit = policy.resolve(policy.Key("sm90", 128, 64), table)
    assert (hit.compile_key(), hit.source) == ((4, 128, 2), "table:a")
    assert policy.resolve(policy.Key("sm90", 256, 1), table).source == "table:d"
    assert policy.resolve(policy.Key("sm90", 64, 1), table) is policy.baseline(
        policy.Key("sm90", 64, 1))
    assert policy.resolve(policy.Key("sm90", 128, 0), table) is policy.baseline(
        policy.Key("sm90", 128, 0))
    assert policy.resolve(policy.Key("sm80", 128, 65), table).source == "table:c"
    assert policy.resolve(policy.Key("sm80", 128, 64), table) is policy.baseline(
        policy.Key("sm80", 128, 64))


@pytest.mark.parametrize(("args", "message"), [
    (("sm9", 128, 1), "Key.arch"),
    (("sm90", 0, 1), "Key.index_width"),
    (("sm90", 128, -1), "Key.num_tokens"),
    (("sm90", True, 1), "Key.index_width"),
    (("sm90", 128, 1.0), "Key.num_tokens"),
    (("sm90", 128, False), "Key.num_tokens"),
    (("sm90", 2**63, 1), "Key.index_width"),
])
def test_bad_keys_name_the_field(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        policy.Key(*args)


@pytest.mark.parametrize(("tile", "message"), [
    ((0, 128, 4), "tokens_per_program must be a power of two in 1..1024; got 0"),
    ((6, 128, 4), "tokens_per_program must be a power of two in 1..1024; got 6"),
    ((2048, 16, 16), "tokens_per_program must be a power of two in 1..1024; got 2048"),
    ((8, 8, 4), "cols_per_program must be a power of two in 16..1024; got 8"),
    ((8, 2048, 16), "cols_per_program must be a power of two in 16..1024; got 2048"),
    ((8, 100, 4), "cols_per_program must be a power of two in 16..1024; got 100"),
    ((64, 128, 1), "exceeds 128 elements per thread"),
    ((1024, 1024, 16), "exceeds 128 elements per thread"),
    ((8, 128, 3), "num_warps must be one of 1, 2, 4, 8, 16; got integer 3"),
    ((8.0, 128, 4), "tokens_per_program must be an integer power of two"),
])
def test_bad_tiles_are_refused_in_code_and_in_files(tile: tuple, message: str) -> None:
    shared.check_bad_tile(policy, tile, message)


def test_the_tile_limits_are_the_kernels() -> None:
    # The edges the kernel's checks accept: 1..1024 rows, 16..1024 columns, 128 elements
    # per thread; swa's own policy stops at 256 rows, this one does not.
    for tile in [(1, 16, 1), (1024, 16, 4), (1, 1024, 8), (32, 128, 1), (128, 512, 16)]:
        assert policy.Tile(*tile).tokens_per_program == tile[0]
        assert policy.tile_problems(*tile) == []
    assert policy.tile_problems(1024, 16, 2)[0][0] == "cols_per_program"
    assert swa.tile_problems(512, 16, 4) and not policy.tile_problems(512, 16, 4)
    assert len(TILES) == len({t for t in TILES if not policy.tile_problems(*t)})


def test_table_files_refuse_unknown_fields_and_overlaps() -> None:
    shared.check_files_refuse_unknown_fields_and_overlaps(
        policy, (8, 128, 4), policy.Key("sm90", 128, 1),
        unknown_launch="window_size", unknown_match="block_size")


def test_resolve_refuses_another_kernels_table() -> None:
    with pytest.raises(TypeError, match="expected a swa_decode launch table"):
        policy.resolve(policy.Key("sm90", 128, 1),
                       indexer_decode.shipped_table())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected a swa_decode launch table"):
        policy.compile_keys(swa.shipped_table(), "sm90")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sm9"):
        policy.compile_keys(None, "sm9")


def test_importing_the_policy_loads_no_torch_or_triton() -> None:
    code = ("import sys; import dsv4_policy.kernels.swa_decode as p; "
            "p.shipped_table(); "
            "print(sorted(m for m in ('torch', 'triton', 'numpy', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
