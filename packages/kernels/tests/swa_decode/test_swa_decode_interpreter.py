"""The SWA decode kernel, run by Triton's CPU interpreter, against the torch reference.

Every check compares the three whole buffers, poisoned with seeded random values before
each launch: what the step writes (the validity mask over the slot mapping's length,
every token's window row and length, zeros in ``swa_lens`` to its end) and every
element it must leave alone (``is_valid_token`` past the slot mapping, ``swa_indices``
rows past the step's tokens, columns past a row's width).
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
from dsv4_kernels.swa_decode import checks, launch, reference
from dsv4_kernels.swa_decode import kernel as _kernel
from dsv4_kernels.swa_decode.testing import (
    BUFFERS,
    SWADecodeCall,
    assert_same_buffers,
    make_step,
    poison,
    random_step,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from triton.runtime.jit import JITFunction

pytestmark = pytest.mark.usefixtures("interpreter")

BASELINE = launch.BASELINE_TILE
Tile = tuple[int, int, int]
TILES: list[Tile] = [BASELINE, (1, 128, 4), (2, 64, 2), (16, 128, 8), (1, 16, 1), (32, 16, 4),
                     (4, 256, 8), (1024, 16, 16)]
WIDE: list[Tile] = [(1024, 16, 16), (256, 16, 4), (64, 64, 4)]
"""Tiles for steps of many tokens (the interpreter runs a program at a time)."""


def check(call: SWADecodeCall, tiles: list[Tile] = TILES) -> SWADecodeCall:
    """Every tile leaves exactly the reference's three buffers, and the reference leaves
    alone what the step must not write."""
    want = call.run(reference.build_swa_decode)
    assert_same_buffers(want, want, call)
    for tpp, cpp, warps in tiles:
        got = call.run(launch.build_swa_decode, tokens_per_program=tpp, cols_per_program=cpp,
                       num_warps=warps)
        assert_same_buffers(got, want, call)
    return want


def test_hand_computed_step() -> None:
    # Requests at contexts 1, 3 and 10, window 4, blocks of 2 slots, two padding tokens;
    # buffers of 7 rows.
    call = make_step(1, [1, 3, 10], pad_tokens=2, window=4, block_size=2, buffer_rows=7)
    table = call.block_table.long()
    want = check(call)
    assert want.is_valid_token[:5].tolist() == [True, True, True, False, False]
    assert want.swa_lens.tolist() == [1, 3, 4, 0, 0, 0, 0]

    def slot(r: int, pos: int) -> int:
        return int(table[r, pos // 2]) * 2 + pos % 2

    rows = want.swa_indices[:, 0]
    assert rows[0].tolist() == [slot(0, 0), -1, -1, -1]
    assert rows[1].tolist() == [slot(1, 0), slot(1, 1), slot(1, 2), -1]
    assert rows[2].tolist() == [slot(2, 6), slot(2, 7), slot(2, 8), slot(2, 9)]
    assert rows[3].tolist() == rows[4].tolist() == [-1] * 4
    assert torch.equal(want.swa_indices[5:], call.swa_indices[5:])
    assert torch.equal(want.is_valid_token[5:], call.is_valid_token[5:])
    # The slot mapping is the step's own: each window ends at the token's slot.
    assert [slot(r, c - 1) for r, c in enumerate([1, 3, 10])] == call.slot_mapping[:3].tolist()


def test_every_window_ends_at_its_tokens_slot() -> None:
    contexts = [1, 2, 63, 64, 65, 127, 128, 129, 1000, 4097, 70_000]
    want = check(make_step(2, contexts, window=128, block_size=16))
    lens = want.swa_lens[: len(contexts)]
    assert lens.tolist() == [min(c, 128) for c in contexts]
    last = want.swa_indices[torch.arange(len(contexts)), 0, lens.long() - 1]
    assert torch.equal(last.long(), want.slot_mapping)
    assert bool((want.swa_indices[:1, 0, 1:] == -1).all())


def test_cuda_graph_padding_tokens_get_cleared_rows() -> None:
    want = check(make_step(3, [100, 4096, 7, 3, 131072], pad_tokens=3, block_size=64,
                           buffer_rows=40))
    assert want.is_valid_token[:8].tolist() == [True] * 5 + [False] * 3
    assert want.swa_lens[5:].tolist() == [0] * 35
    assert bool((want.swa_indices[5:8] == -1).all())


def test_an_all_padding_batch() -> None:
    for pads in (1, 8, 37):
        want = check(make_step(4 + pads, [], pad_tokens=pads, buffer_rows=64))
        assert not bool(want.is_valid_token[:pads].any())
        assert bool((want.swa_lens == 0).all())
        assert bool((want.swa_indices[:pads] == -1).all())


def test_padding_tokens_request_indices_are_never_read_through() -> None:
    call = make_step(5, [30, 900, 2], pad_tokens=5, window=16, block_size=4)
    # Garbage request indices, far outside the batch, for every padding token.
    call.token_to_req_indices[3:] = torch.tensor([-7, 10**6, 2**31 - 1, 4, -1],
                                                 dtype=torch.int32)
    check(call)


def test_replay_starts_shorten_windows_and_can_pass_the_token() -> None:
    contexts = [90, 300, 20, 500, 64, 65, 1, 3000]
    plain = make_step(6, contexts, window=64, block_size=16)
    replayed = dataclasses.replace(plain, replay_start=plain.replay_start.clone())
    replayed.replay_start[:8] = torch.tensor([0, 290, 21, 450, 64, 66, 1, 2999],
                                             dtype=torch.int32)
    a = check(replayed).swa_lens[:8].tolist()
    b = check(plain).swa_lens[:8].tolist()
    assert b == [64, 64, 20, 64, 64, 64, 1, 64]
    assert a == [64, 10, -1, 50, 0, -1, 0, 1]
    seeded = make_step(7, contexts * 4, window=64, block_size=16, replay=True)
    assert bool(seeded.replay_start.any())
    check(seeded)


@pytest.mark.parametrize("num_tokens", [1, 2, 7, 8, 9, 31, 33])
def test_token_counts_around_the_tiles(num_tokens: int) -> None:
    g = torch.Generator().manual_seed(num_tokens)
    real = max(num_tokens - int(torch.randint(0, 3, (1,), generator=g)), 1)
    contexts = torch.randint(1, 20_000, (real,), generator=g).tolist()
    check(make_step(num_tokens, contexts, pad_tokens=num_tokens - real, block_size=32,
                    buffer_rows=300))


@pytest.mark.parametrize("num_tokens", [1023, 1024, 1025, 1500])
def test_more_than_a_thousand_tokens(num_tokens: int) -> None:
    g = torch.Generator().manual_seed(num_tokens)
    contexts = torch.randint(1, 1 << 20, (num_tokens - 9,), generator=g).tolist()
    call = make_step(num_tokens, contexts, pad_tokens=9, block_size=64, buffer_rows=4096)
    check(call, WIDE + ([BASELINE] if num_tokens == 1025 else []))


def test_one_token_fills_a_long_lens_buffer_alone() -> None:
    # One program fills all of swa_lens' tail and the mask: many fill blocks each.
    want = check(make_step(8, [77], buffer_rows=8192), [BASELINE, (1, 16, 1)])
    assert bool((want.swa_lens[1:] == 0).all()) and int(want.swa_lens[0]) == 77
    long = make_step(9, [5, 6], buffer_rows=4000)
    long.slot_mapping = torch.cat([long.slot_mapping, poison(
        torch.Generator().manual_seed(9), (3000,), torch.int32).long()])
    want = check(long, [BASELINE, (2, 16, 1), (1, 16, 1)])
    assert torch.equal(want.is_valid_token[:3002], long.slot_mapping >= 0)


def test_buffers_without_a_tail() -> None:
    call = make_step(10, [40, 50, 60], pad_tokens=1, buffer_rows=1)
    assert call.swa_lens.shape[0] == call.num_tokens == call.is_valid_token.shape[0]
    check(call)


def test_a_slot_mapping_longer_than_the_tokens() -> None:
    # Only the first num_tokens tokens get rows; the mask covers the whole slot mapping.
    call = make_step(11, [40, 50, 60, 70, 80], pad_tokens=2, window=16, block_size=4,
                     buffer_rows=20)
    call = dataclasses.replace(call, num_tokens=4)
    want = check(call)
    assert want.is_valid_token[:7].tolist() == [True] * 5 + [False] * 2
    assert torch.equal(want.swa_indices[4:], call.swa_indices[4:])
    assert bool((want.swa_lens[4:] == 0).all())


def test_a_mixed_steps_prefill_slots_spread_the_validity_fill(monkeypatch) -> None:
    # A mixed step: 4 decode tokens, then 3,000 prefill tokens' slots (some -1). The
    # validity mask covers all of them, so the grid grows to one program per fill block
    # while only the first programs write rows.
    call = make_step(16, [40, 5000, 7], pad_tokens=1, buffer_rows=4096)
    g = torch.Generator().manual_seed(16)
    prefill = torch.randint(0, 1 << 30, (3000,), generator=g)
    prefill[torch.rand(3000, generator=g) < 0.2] = -1
    call = dataclasses.replace(call, slot_mapping=torch.cat([call.slot_mapping, prefill]))
    grids: list[int] = []
    real = launch._LAUNCHER

    def recording(index, grid, *rest):
        grids.append(grid)
        return real(index, grid, *rest)

    monkeypatch.setattr(launch, "_LAUNCHER", recording)
    want = check(call, [BASELINE, (1, 16, 1), (16, 128, 8)])
    assert grids == [3, 4, 3]  # cdiv(3004, 1024) = 3 fill programs; 4 rows at one per program
    assert want.is_valid_token[4:3004].tolist() == (prefill >= 0).tolist()
    assert torch.equal(want.swa_indices[4:], call.swa_indices[4:])


def test_int32_slot_mapping() -> None:
    call = make_step(12, [5, 500, 5000], pad_tokens=2)
    want = check(call)
    call32 = dataclasses.replace(call, slot_mapping=call.slot_mapping.int())
    assert_same_buffers(check(call32), want)


def test_windows_other_than_the_row_width() -> None:
    call = make_step(13, [3, 30, 300, 3000], pad_tokens=1, window=64, block_size=8)
    for window in (1, 3, 40, 64, 100, 5000):
        want = check(dataclasses.replace(call, window_size=window), [BASELINE, (2, 16, 1)])
        assert want.swa_lens[:4].tolist() == [min(c, window) for c in (3, 30, 300, 3000)]


def test_a_two_dimensional_buffer_with_padded_rows() -> None:
    call = make_step(14, [9, 99, 999], pad_tokens=2, window=100, block_size=16,
                     buffer_rows=12)
    base = poison(torch.Generator().manual_seed(14), (12, 113), torch.int32)
    view = base[:, :100]
    assert view.stride() == (113, 1)
    want = call.run(reference.build_swa_decode)
    for tile in [BASELINE, (1, 64, 1), (4, 16, 2)]:
        got = base.clone()
        launch.build_swa_decode(got[:, :100], *call.fresh().args()[1:], **call.kwargs(),
                                tokens_per_program=tile[0], cols_per_program=tile[1],
                                num_warps=tile[2])
        assert torch.equal(got[:5, :100], want.swa_indices[:5, 0])
        assert torch.equal(got[5:], base[5:]) and torch.equal(got[:, 100:], base[:, 100:])
        ref = base.clone()
        fresh = call.fresh()
        reference.build_swa_decode(ref[:, :100], *fresh.args()[1:], **fresh.kwargs())
        assert torch.equal(got, ref)


@pytest.mark.parametrize("seed", range(12))
def test_random_steps(seed: int) -> None:
    call = random_step(seed, max_tokens=48)
    check(call, [BASELINE, (1, 16, 1), (32, 64, 4), (4, 128, 2)])


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(100, 10**6), tile=st.sampled_from(TILES))
def test_generated_steps(seed: int, tile: Tile) -> None:
    check(random_step(seed, max_tokens=40), [tile])


def test_checked_then_launched_equals_the_function() -> None:
    call = make_step(15, [5, 6, 700], pad_tokens=2)
    want = call.run(launch.build_swa_decode, tokens_per_program=2, cols_per_program=32,
                    num_warps=1)
    got = call.fresh()
    checked = launch.check(*got.check_args())
    assert checked == checks.Checked(5, 8192, 128, 128, got.block_table.stride(0), -1)
    launch.launch_checked(checked, *got.check_args(), 2, 32, 1)
    assert_same_buffers(got, want, call)


def test_the_signature_is_the_specs() -> None:
    params = list(inspect.signature(launch.build_swa_decode).parameters.values())
    assert [p.name for p in params] == [*checks.NAMES, "window_size", "block_size",
                                        "num_tokens", "tokens_per_program",
                                        "cols_per_program", "num_warps"]
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params[:9])
    assert all(p.kind is p.KEYWORD_ONLY for p in params[9:])
    tile = tuple(p.default for p in params[12:])
    assert tile == BASELINE == (8, 128, 4)
    ref = list(inspect.signature(reference.build_swa_decode).parameters)
    assert ref == [p.name for p in params[:12]]
    assert list(inspect.signature(launch.check).parameters) == ref
    assert list(inspect.signature(launch.launch_checked).parameters) == [
        "checked", *ref, "tokens_per_program", "cols_per_program", "num_warps"]


# --------------------------------------------------------------------------- bad arguments
def _base() -> SWADecodeCall:
    return make_step(21, [10, 20, 30], pad_tokens=2, window=16, block_size=4, buffer_rows=9)


def _set(name: str, value: object):
    return lambda c: setattr(c, name, value(c) if callable(value) else value)


BAD = [
    ("num_tokens", _set("num_tokens", 0), "num_tokens: got 0"),
    ("num_tokens", _set("num_tokens", -1), "num_tokens: got -1"),
    ("num_tokens", _set("num_tokens", 2.0), "num_tokens: got 2.0"),
    ("num_tokens", _set("num_tokens", True), "num_tokens: got True"),
    ("num_tokens", _set("num_tokens", 6), "num_tokens: got 6; expected at most slot_mapping.shape[0] = 5"),
    ("window_size", _set("window_size", 0), "window_size: got 0"),
    ("window_size", _set("window_size", "16"), "window_size: got '16'"),
    ("block_size", _set("block_size", 0), "block_size: got 0"),
    ("block_size", _set("block_size", 4.0), "block_size: got 4.0"),
    ("block_size", _set("block_size", 2**31), "block_size: got"),
    ("slot_mapping", _set("slot_mapping", lambda c: c.slot_mapping.float()), "slot_mapping: got dtype torch.float32"),
    ("slot_mapping", _set("slot_mapping", lambda c: c.slot_mapping.short()), "slot_mapping: got dtype torch.int16"),
    ("slot_mapping", _set("slot_mapping", lambda c: c.slot_mapping.reshape(1, -1)), "slot_mapping: got 2 dimensions"),
    ("slot_mapping", _set("slot_mapping", lambda c: c.slot_mapping.repeat(2)[::2]), "slot_mapping: got stride 2"),
    ("slot_mapping", _set("slot_mapping", lambda c: c.slot_mapping.tolist()), "slot_mapping: got list"),
    ("is_valid_token", _set("is_valid_token", lambda c: c.is_valid_token.int()), "is_valid_token: got dtype torch.int32"),
    ("is_valid_token", _set("is_valid_token", lambda c: c.is_valid_token[:4]), "is_valid_token: got 4 entries; expected at least 5"),
    ("is_valid_token", _set("is_valid_token", lambda c: c.is_valid_token[::2]), "is_valid_token: got stride 2"),
    ("is_valid_token", _set("is_valid_token", lambda c: c.is_valid_token[:8].reshape(2, 4)), "is_valid_token: got 2 dimensions"),
    ("swa_indices", _set("swa_indices", lambda c: c.swa_indices.long()), "swa_indices: got dtype torch.int64"),
    ("swa_indices", _set("swa_indices", lambda c: c.swa_indices[:4]), "swa_indices: got 4 rows; expected at least num_tokens = 5"),
    ("swa_indices", _set("swa_indices", lambda c: c.swa_indices.reshape(9, 2, 8)), "swa_indices: got shape (9, 2, 8)"),
    ("swa_indices", _set("swa_indices", lambda c: c.swa_indices.reshape(-1)), "swa_indices: got 1 dimensions"),
    ("swa_indices", _set("swa_indices", lambda c: c.swa_indices[:, 0].t().contiguous().t()), "swa_indices: got stride 9 in the last dimension"),
    ("swa_indices", _set("swa_indices", lambda c: c.swa_indices.as_strided((9, 16), (8, 1))), "swa_indices: got row stride 8"),
    ("swa_indices", _set("swa_indices", lambda c: c.swa_indices[:, :, :0]), "swa_indices: got shape (9, 0)"),
    ("swa_lens", _set("swa_lens", lambda c: c.swa_lens[:4]), "swa_lens: got 4 entries; expected at least 5"),
    ("swa_lens", _set("swa_lens", lambda c: c.swa_lens.long()), "swa_lens: got dtype torch.int64"),
    ("swa_lens", _set("swa_lens", lambda c: c.swa_lens[::2]), "swa_lens: got stride 2"),
    ("query_start_loc", _set("query_start_loc", lambda c: c.query_start_loc[:1]), "query_start_loc: got 1 entries; expected at least 2"),
    ("query_start_loc", _set("query_start_loc", lambda c: c.query_start_loc.long()), "query_start_loc: got dtype torch.int64"),
    ("seq_lens", _set("seq_lens", lambda c: c.seq_lens[:0]), "seq_lens: got 0 entries"),
    ("seq_lens", _set("seq_lens", lambda c: c.seq_lens.reshape(1, -1)), "seq_lens: got 2 dimensions"),
    ("token_to_req_indices", _set("token_to_req_indices", lambda c: c.token_to_req_indices[:4]), "token_to_req_indices: got 4 entries; expected at least 5"),
    ("token_to_req_indices", _set("token_to_req_indices", lambda c: c.token_to_req_indices.long()), "token_to_req_indices: got dtype torch.int64"),
    ("block_table", _set("block_table", lambda c: c.block_table.reshape(-1)), "block_table: got 1 dimensions"),
    ("block_table", _set("block_table", lambda c: c.block_table.long()), "block_table: got dtype torch.int64"),
    ("block_table", _set("block_table", lambda c: c.block_table.t().contiguous().t()), "block_table: got stride 5 in the last dimension"),
    ("replay_start", _set("replay_start", lambda c: c.replay_start[:0]), "replay_start: got 0 entries"),
    ("replay_start", _set("replay_start", lambda c: c.replay_start.long()), "replay_start: got dtype torch.int64"),
    ("device", _set("seq_lens", lambda c: c.seq_lens.to("meta")), "seq_lens: got device meta"),
    ("device", _set("block_table", lambda c: c.block_table.to("meta")), "block_table: got device meta"),
]


@pytest.mark.parametrize(("name", "mutate", "message"), BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("fn", [launch.build_swa_decode, reference.build_swa_decode],
                         ids=["kernel", "reference"])
def test_bad_arguments_raise_before_writing(name: str, mutate, message: str, fn) -> None:
    template = _base()
    call = template.fresh()
    # The buffers the call received (a bad argument may be a view of one of them).
    received = {n: getattr(call, n) for n in BUFFERS}
    mutate(call)
    with pytest.raises(ValueError) as info:
        fn(*call.args(), **call.kwargs())
    text = str(info.value)
    assert text.startswith(f"{checks.FN}: "), text
    assert message in text, text
    assert "expected" in text, text
    for n, buffer in received.items():
        assert torch.equal(buffer, getattr(template, n)), f"{n} was written"


@pytest.mark.parametrize(("tile", "message"), [
    ((3, 128, 4), "tokens_per_program: got 3"),
    ((0, 128, 4), "tokens_per_program: got 0"),
    ((2048, 16, 16), "tokens_per_program: got 2048"),
    ((8, 8, 4), "cols_per_program: got 8"),
    ((8, 2048, 16), "cols_per_program: got 2048"),
    ((8, 100, 4), "cols_per_program: got 100"),
    ((8, 128, 3), "num_warps: got 3"),
    ((8, 128, 32), "num_warps: got 32"),
    ((1024, 1024, 16), "tokens_per_program * cols_per_program: got 1048576 with num_warps=16"),
    ((64, 128, 1), "tokens_per_program * cols_per_program: got 8192 with num_warps=1"),
    (("8", 128, 4), "tokens_per_program: got '8'"),
    ((8, True, 4), "cols_per_program: got True"),
])
def test_bad_tiles_raise_before_writing(tile: Tile, message: str) -> None:
    template = _base()
    call = template.fresh()
    with pytest.raises(ValueError, match=f"^{checks.FN}: ") as info:
        launch.build_swa_decode(*call.args(), **call.kwargs(), tokens_per_program=tile[0],
                                cols_per_program=tile[1], num_warps=tile[2])
    assert message in str(info.value)
    assert_same_buffers(call, template)
    with pytest.raises(ValueError, match=message.replace("*", "\\*")):
        launch.warmup([tile], "cpu")


def test_the_largest_tiles_are_accepted() -> None:
    for tile in [(1024, 16, 4), (32, 128, 1), (1, 1024, 1), (256, 256, 16), (1024, 64, 16)]:
        checks.check_tile(*tile)
    check(make_step(22, [100, 3000], pad_tokens=1), [(1024, 16, 4), (1, 1024, 1),
                                                     (256, 256, 16)])


@pytest.mark.parametrize("seed", range(24))
def test_the_fast_path_accepts_only_what_the_detailed_checks_accept(seed: int) -> None:
    call = random_step(400 + seed, max_tokens=32)
    g = torch.Generator().manual_seed(seed)
    # Sometimes an argument the fast path must hand over to the detailed checks.
    choice = int(torch.randint(0, 6, (1,), generator=g))
    if choice == 1:
        call.swa_indices = call.swa_indices[:, 0]
    elif choice == 2:
        call.swa_lens = call.swa_lens[: call.num_tokens - 1]
    elif choice == 3:
        call.num_tokens = call.slot_mapping.shape[0] + 1
    elif choice == 4:
        call.seq_lens = torch.zeros((call.seq_lens.shape[0], 2), dtype=torch.int32)[:, 0]
    elif choice == 5:
        call.slot_mapping = call.slot_mapping.int()
    args = call.check_args()
    fast = checks._accept_fast(*args)
    try:
        detailed = checks.explain_inputs(*args)
    except ValueError:
        assert fast is None
        with pytest.raises(ValueError):
            checks.check_inputs(*args)
        return
    if fast is not None:
        assert fast == detailed
    assert checks.check_inputs(*args) == detailed
    if choice in (0, 5):
        assert fast is not None, "a plain valid call should take the fast path"


# --------------------------------------------------------------------------- compile key
def test_only_the_tile_is_constexpr_and_everything_else_is_unspecialised() -> None:
    fn = _kernel.swa_decode_kernel.fn
    params = list(inspect.signature(fn).parameters.values())
    assert [p.name for p in params if "constexpr" in str(p.annotation)] == list(
        _kernel.CONSTEXPRS) == ["TOKENS_PER_PROGRAM", "COLS_PER_PROGRAM"]
    assert [p.name for p in params if "constexpr" not in str(p.annotation)] == list(
        _kernel.RUNTIME_ARGS)
    kernel = _kernel.swa_decode_kernel
    declared = getattr(kernel, "do_not_specialize", None)
    if declared is None:
        declared = kernel.kwargs["do_not_specialize"]
    assert list(declared) == list(_kernel.RUNTIME_ARGS)
    jit = JITFunction(kernel.fn, do_not_specialize=declared)
    assert [p.name for p in jit.params if p.do_not_specialize] == list(_kernel.RUNTIME_ARGS)
    assert [p.name for p in jit.params if p.is_constexpr] == list(_kernel.CONSTEXPRS)


def test_the_launcher_passes_the_kernel_its_arguments_in_order() -> None:
    # The direct launcher hands the C launcher positional arguments: tensors, then
    # scalars, then constexprs. The host entry point builds them in the kernel's order.
    source = inspect.getsource(launch.launch_checked)
    assert ("tensors = (swa_indices, swa_lens, is_valid_token, slot_mapping, query_start_loc, "
            "seq_lens,\n               token_to_req_indices, block_table, replay_start)"
            ) in source
    assert ("(checked.row_stride, checked.table_stride, window_size, checked.index_width,\n"
            "               block_size, num_tokens, checked.num_slots, checked.num_lens)"
            ) in source
    assert "(tokens_per_program, cols_per_program), num_warps)" in source
    pointers = ("indices_ptr", "lens_ptr", "is_valid_ptr", "slot_mapping_ptr",
                "query_start_ptr", "seq_lens_ptr", "token_to_req_ptr", "block_table_ptr",
                "replay_start_ptr")
    assert len(pointers) == len(checks.NAMES)
    assert (*pointers, "indices_stride", "block_table_stride", "window_size", "index_width",
            "block_size", "num_tokens", "num_slots", "num_lens") == _kernel.RUNTIME_ARGS


def test_interpreter_compiles_nothing_and_warmup_says_so() -> None:
    assert launch.interpreting()
    assert launch.compile_count() == 0
    assert launch.warmup([BASELINE, (1, 16, 1), BASELINE], "cpu") == 0
    check(make_step(31, [4, 8, 12], pad_tokens=1), [(2, 64, 2), (16, 128, 8)])
    assert launch.compile_count() == 0
    assert launch.direct_launches() == 0
    with pytest.raises(ValueError, match="expected \\(tokens_per_program, cols_per_program, "
                                         "num_warps\\)"):
        launch.warmup([(8, 128)], "cpu")  # type: ignore[list-item]
    with pytest.raises(ValueError, match="expected \\(tokens_per_program"):
        launch.warmup([(8, 128, 4, 0)], "cpu")  # type: ignore[list-item]


def test_a_cpu_launch_outside_the_interpreter_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    template = _base()
    call = template.fresh()
    monkeypatch.setattr(launch, "interpreting", lambda: False)
    with pytest.raises(ValueError, match="build_swa_decode: swa_indices: got device cpu"):
        launch.build_swa_decode(*call.args(), **call.kwargs())
    assert_same_buffers(call, template)


def test_the_registry_declares_the_kernel() -> None:
    from dsv4_kernels import registry, swa_decode

    found = registry.get("swa_decode")
    assert found.launch is launch.build_swa_decode
    assert found.reference is reference.build_swa_decode
    assert found.warmup is launch.warmup and found.compile_count is launch.compile_count
    assert swa_decode.warmup is launch.warmup
    assert swa_decode.BASELINE_TILE == (8, 128, 4)
