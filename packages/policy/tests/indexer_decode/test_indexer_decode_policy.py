"""Properties of the indexer decode launch policy.

- ``resolve`` is total: every valid key gets a launch, and its compile key is one that
  ``compile_keys`` lists for the key's arch (so warm-up covers every call);
- a key outside every entry gets the baseline, the very same object (vLLM's own build);
  a key inside an entry gets exactly that entry's tile;
- tables round-trip through ``render_table`` / ``loads_table``;
- the shipped table is valid and every entry in it carries its evidence.
"""

from __future__ import annotations

import subprocess
import sys

import policy_checks as shared
import pytest
from dsv4_policy.kernels import indexer_decode as policy
from hypothesis import given, settings
from hypothesis import strategies as st

INT32 = 2**31 - 1
TILES = [(tpp, warps) for tpp in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
         for warps in (1, 2, 4, 8, 16) if tpp <= 4096 * warps]


@st.composite
def keys(draw: st.DrawFn) -> policy.Key:
    reqs = draw(st.integers(0, 4096) | st.integers(0, INT32))
    tokens = draw(st.sampled_from([reqs, max(reqs - 1, 0), reqs + 1]) | st.integers(0, 1 << 20))
    return policy.Key(draw(st.sampled_from(shared.ARCHES)),
                      draw(st.sampled_from([1, 2, 4, 128]) | st.integers(1, INT32)),
                      draw(st.integers(0, 1)), reqs, tokens)


def tables() -> st.SearchStrategy[policy.Table]:
    return shared.spanning_tables(policy, tiles=TILES, span_max=200_000,
                                  sets={"compress_ratio": ([2, 4, 8, 128], 2)},
                                  flags=("deep_gemm",), ranges={"num_reqs": (0, 8192)})


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
        key = policy.Key(data.draw(st.sampled_from(outside)), key.compress_ratio,
                         key.deep_gemm, key.num_reqs, key.num_tokens)
        assert not table.matches(key)
    shared.check_falls_back(policy, table, key)


@settings(max_examples=200)
@given(key=keys())
def test_the_shipped_table_and_an_empty_one_resolve_to_vllms_build(key: policy.Key) -> None:
    shared.check_shipped_and_empty(policy, key, (1024, 4))


@settings(max_examples=150)
@given(table=tables(), header=st.text(st.characters(codec="ascii", exclude_categories=["Cc"]),
                                     max_size=60))
def test_tables_round_trip_through_toml(table: policy.Table, header: str) -> None:
    assert shared.check_round_trip(policy, table.entries, header) == table


def test_the_shipped_table_is_valid_and_every_entry_has_its_evidence() -> None:
    for entry in shared.check_shipped_evidence(policy).entries:
        assert entry.match.get("arch") is not None, entry.id
    assert policy.compile_keys(None, "sm90") >= {(1024, 4)}


def test_the_kernel_spec_describes_this_policy() -> None:
    key = shared.check_spec(policy, compile_key_fields=("tokens_per_program", "num_warps"),
                            deployment=[])
    assert key == policy.Key("sm90", 4, 0, 1, 1)


def test_compile_keys_are_the_baseline_and_every_entry_of_the_arch() -> None:
    table = policy.loads_table("""schema = 1

[[entry]]
id = "a"
match = { arch = "sm90", num_tokens = { min = 1, max = 64 } }
launch = { tokens_per_program = 64, num_warps = 1 }

[[entry]]
id = "b"
match = { arch = "sm100", num_tokens = { min = 1, max = 64 } }
launch = { tokens_per_program = 128, num_warps = 2 }

[[entry]]
id = "c"
match = { num_tokens = { min = 65 } }
launch = { tokens_per_program = 1024, num_warps = 4 }
""")
    assert policy.compile_key_sources(table, "sm90") == {(1024, 4): ("baseline", "table:c"),
                                                         (64, 1): ("table:a",)}
    assert policy.compile_keys(table, "sm80") == {(1024, 4)}
    hit = policy.resolve(policy.Key("sm90", 4, 1, 64, 64), table)
    assert (hit.tokens_per_program, hit.num_warps, hit.source) == (64, 1, "table:a")
    assert policy.resolve(policy.Key("sm80", 4, 0, 64, 64), table) is policy.baseline(
        policy.Key("sm80", 4, 0, 64, 64))


@pytest.mark.parametrize(("args", "message"), [
    (("sm9", 4, 0, 1, 1), "Key.arch"),
    (("sm90", 0, 0, 1, 1), "Key.compress_ratio"),
    (("sm90", 4, 2, 1, 1), "Key.deep_gemm must be 0 or 1; got 2"),
    (("sm90", 4, -1, 1, 1), "Key.deep_gemm"),
    (("sm90", 4, 0, -1, 1), "Key.num_reqs"),
    (("sm90", 4, 0, 1, 1.0), "Key.num_tokens"),
    (("sm90", True, 0, 1, 1), "Key.compress_ratio"),
    (("sm90", 4, False, 1, 1), "Key.deep_gemm"),
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
    shared.check_bad_tile(policy, tile, message)


def test_table_files_refuse_unknown_fields_and_overlaps() -> None:
    shared.check_files_refuse_unknown_fields_and_overlaps(
        policy, (256, 4), policy.Key("sm90", 4, 0, 1, 1),
        unknown_launch="cols_per_program", unknown_match="dcp_world_size")


def test_importing_the_policy_loads_no_torch_or_triton() -> None:
    code = ("import sys; import dsv4_policy.kernels.indexer_decode as p; "
            "p.shipped_table(); "
            "print(sorted(m for m in ('torch', 'triton', 'numpy', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
