"""The compressed slot mapping kernel, run by Triton's CPU interpreter, against the
plain-torch reference.

Every check compares whole output buffers: the rows of the step's requests, the -1 fill
of every other row (past ``num_tokens`` too), and, for the kernel object's call, the
poison left in every row no request owns.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from dsv4_kernels.compressed_slot_mapping import checks, launch, reference
from dsv4_kernels.compressed_slot_mapping import kernel as _kernel
from dsv4_kernels.compressed_slot_mapping.testing import (
    POISON,
    SlotMappingCall,
    assert_same_buffers,
    assert_same_result,
    make_step,
    random_step,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from triton.runtime.jit import JITFunction

pytestmark = pytest.mark.usefixtures("interpreter")

BASELINE = launch.BASELINE_TILE
TILES = [BASELINE, (16, 1), (64, 2), (128, 4), (256, 1), (32, 8), (2048, 16)]


def check(call: SlotMappingCall, tiles: list[tuple[int, int]] = TILES) -> SlotMappingCall:
    """Every tile leaves exactly the reference's buffer and returns its result."""
    want, want_result = call.run(reference.get_compressed_slot_mapping)
    for tpp, warps in tiles:
        got, result = call.run(launch.get_compressed_slot_mapping, tokens_per_program=tpp,
                               num_warps=warps)
        if call.out is not None:
            assert_same_buffers(got, want)
            # A view of out's first rows, as vLLM returns.
            assert result.untyped_storage().data_ptr() == got.out.untyped_storage().data_ptr()
            assert result.storage_offset() == got.out.storage_offset()
        assert_same_result(result, want_result)
    return want


def test_hand_computed_slots() -> None:
    # Ratio 4, blocks of 2 compressed entries. Request 0: one decode token at position 7
    # (completes state 1: block 0, offset 1). Request 1: 6 prefill tokens at positions
    # 2..7 in rows 1..6: position 3 (row 2) completes state 0 (block 0, offset 0),
    # position 7 (row 6) state 1, but its slot is PAD, so only row 2 writes.
    call = SlotMappingCall(
        num_tokens=7,
        slot_mapping=torch.tensor([11, 12, 13, 14, 15, 16, -1]),
        query_start_loc=torch.tensor([0, 1, 7], dtype=torch.int32),
        seq_lens=torch.tensor([8, 8], dtype=torch.int32),
        block_table=torch.tensor([[5, 9], [30, 31]], dtype=torch.int32),
        block_size=2, compress_ratio=4, out=torch.full((10,), POISON))
    want = check(call)
    assert want.out is not None
    assert want.out.tolist() == [5 * 2 + 1, -1, 30 * 2 + 0, -1, -1, -1, -1, -1, -1, -1]


def test_decode_context_parallel_positions_are_rank_local() -> None:
    # Two ranks, interleave 4: positions 0-3 on rank 0, 4-7 on rank 1, 8-11 on rank 0.
    # Position 11 is rank 0's local position 7: state 1 of ratio 4, block 0 offset 1.
    call = SlotMappingCall(
        num_tokens=1, slot_mapping=torch.tensor([3]),
        query_start_loc=torch.tensor([0, 1], dtype=torch.int32),
        seq_lens=torch.tensor([12], dtype=torch.int32),
        block_table=torch.tensor([[40, 41]], dtype=torch.int32), block_size=2,
        compress_ratio=4, out=torch.full((3,), POISON), dcp_world_size=2, cp_interleave=4)
    want = check(call)
    assert want.out is not None and want.out.tolist() == [81, -1, -1]


def test_decode_steps() -> None:
    check(make_step(1, decode_contexts=[4, 8, 3, 128, 129, 1000, 4096, 12], block_size=16))


def test_one_long_prefill_spans_many_programs() -> None:
    check(make_step(2, prefill_queries=[(123, 3000)], compress_ratio=4, block_size=64,
                    extra_rows=500))


def test_c128a_ratio_and_two_entry_blocks() -> None:
    check(make_step(3, decode_contexts=[127, 128, 256, 5000], prefill_queries=[(0, 700)],
                    compress_ratio=128, block_size=2))


def test_uneven_prefills_after_decodes_need_the_search() -> None:
    check(make_step(4, decode_contexts=list(range(100, 140)),
                    prefill_queries=[(7, 300), (0, 1), (900, 65), (40, 517)]))


def test_pad_slots_and_bounded_replay_write_minus_one() -> None:
    call = make_step(5, decode_contexts=[8, 16, 24], prefill_queries=[(0, 200), (64, 90)],
                     pad_fraction=0.3, replay=True)
    want = check(call)
    assert want.out is not None
    pad = call.slot_mapping[: call.num_tokens] == -1
    assert bool(pad.any())
    assert bool((want.out[: call.num_tokens][pad] == -1).all())


def test_graph_padding_requests_and_rows_past_the_step_hold_minus_one() -> None:
    call = make_step(6, decode_contexts=[4, 40], prefill_queries=[(3, 50)], pad_requests=6,
                     extra_rows=333)
    want = check(call)
    assert want.out is not None
    assert bool((want.out[call.num_tokens:] == -1).all())
    assert call.block_table.shape[0] == 9


@pytest.mark.parametrize(("dcp", "interleave", "ratio"), [(2, 4, 4), (4, 8, 4), (2, 128, 128)])
def test_decode_context_parallel(dcp: int, interleave: int, ratio: int) -> None:
    call = make_step(7, decode_contexts=[1000, 4096, 37, 999], prefill_queries=[(100, 400)],
                     compress_ratio=ratio, dcp_world_size=dcp, cp_interleave=interleave,
                     block_size=8)
    want = check(call)
    assert want.out is not None and bool((want.out[: call.num_tokens] >= 0).any())


def test_interleave_without_dcp_changes_nothing() -> None:
    plain = make_step(8, prefill_queries=[(5, 300)])
    interleaved = make_step(8, prefill_queries=[(5, 300)], cp_interleave=64)
    a, _ = plain.run(reference.get_compressed_slot_mapping)
    b, _ = interleaved.run(launch.get_compressed_slot_mapping, tokens_per_program=64,
                           num_warps=2)
    assert a.out is not None and b.out is not None and torch.equal(a.out, b.out)


def test_first_request_starting_past_row_zero() -> None:
    call = make_step(9, decode_contexts=[9, 10], prefill_queries=[(2, 30)], first_row=5)
    want = check(call)
    assert want.out is not None and want.out[:5].tolist() == [-1] * 5


def test_int32_slots_and_negative_positions() -> None:
    check(make_step(10, decode_contexts=[4, 5], prefill_queries=[(0, 20), (0, 9), (3, 40)],
                    int32_slots=True, short_positions=True, compress_ratio=2, block_size=4))


def test_without_out_a_new_tensor_of_num_tokens_rows() -> None:
    call = make_step(11, decode_contexts=[4, 8], prefill_queries=[(0, 33)], with_out=False)
    _, want = call.run(reference.get_compressed_slot_mapping)
    _, got = call.run(launch.get_compressed_slot_mapping, tokens_per_program=16, num_warps=1)
    assert got.shape == (call.num_tokens,)
    assert_same_result(got, want)


def test_empty_steps() -> None:
    # No tokens; and no requests at all (a zero-row block table): the buffer is all -1.
    empty = make_step(12, decode_contexts=[5], extra_rows=20)
    empty.num_tokens = 0
    empty.query_start_loc = torch.zeros(2, dtype=torch.int32)
    want = check(empty)
    assert want.out is not None and want.out.tolist() == [-1] * 21
    none = make_step(13, extra_rows=17)
    assert none.block_table.shape[0] == 0
    want = check(none)
    assert want.out is not None and want.out.tolist() == [-1] * 17


@pytest.mark.parametrize("seed", range(16))
def test_random_steps(seed: int) -> None:
    check(random_step(seed), [BASELINE, (64, 2), (16, 1), (512, 4)])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(100, 10**6), tile=st.sampled_from(TILES))
def test_generated_steps(seed: int, tile: tuple[int, int]) -> None:
    check(random_step(seed, max_tokens=300), [tile])


def test_a_prepared_tile_launches_like_the_function() -> None:
    call = make_step(14, decode_contexts=[7, 8, 400], prefill_queries=[(60, 90), (0, 5)],
                     pad_requests=2, pad_fraction=0.2)
    want, want_result = call.run(launch.get_compressed_slot_mapping, tokens_per_program=32,
                                 num_warps=1)
    prepared = launch.prepare(32, 1)
    got, result = call.run(prepared)
    assert_same_buffers(got, want)
    assert_same_result(result, want_result)
    # vLLM's positional order, out and the DCP arguments included.
    fresh = call.fresh()
    assert fresh.out is not None
    positional = prepared(*fresh.args(), fresh.out, 1, 1)
    assert torch.equal(fresh.out, want.out)
    assert_same_result(positional, want_result)
    with pytest.raises(ValueError, match=f"^{checks.FN}: tokens_per_program: got 24"):
        launch.prepare(24, 1)
    bad = call.fresh()
    bad.block_size = 0
    with pytest.raises(ValueError, match="block_size: got 0"):
        prepared(*bad.args(), **bad.kwargs())
    assert bad.out is not None and bool((bad.out == POISON).all())


@pytest.mark.parametrize("seed", range(6))
def test_kernel_object_call_writes_request_rows_only(seed: int) -> None:
    call = random_step(50 + seed)
    assert call.out is not None
    want = torch.full_like(call.out, POISON)
    reference.compressed_slot_mapping_kernel(*call.kernel_args(want))
    for tpp, warps in (BASELINE, (32, 1), (128, 4)):
        got = torch.full_like(call.out, POISON)
        assert launch.compressed_slot_mapping_kernel(
            *call.kernel_args(got), tokens_per_program=tpp, num_warps=warps) is None
        assert torch.equal(got, want)
    # The rows no request owns still hold the poison; the filled call is the same call
    # after vLLM's fill.
    filled, _ = call.run(reference.get_compressed_slot_mapping)
    assert filled.out is not None
    owned = want != POISON
    assert bool((filled.out[~owned] == -1).all())
    assert torch.equal(filled.out[owned], want[owned])


# --------------------------------------------------------------------------- bad arguments
def _base() -> SlotMappingCall:
    return make_step(21, decode_contexts=[10, 20], prefill_queries=[(4, 30)], extra_rows=9)


def _i32(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


BAD = [
    ("num_tokens", lambda c: setattr(c, "num_tokens", -1), "num_tokens: got -1"),
    ("num_tokens", lambda c: setattr(c, "num_tokens", 2.0), "num_tokens: got 2.0"),
    ("num_tokens", lambda c: setattr(c, "num_tokens", True), "num_tokens: got True"),
    ("num_tokens", lambda c: setattr(c, "num_tokens", 10_000), "out: got 41 rows"),
    ("slot_mapping", lambda c: setattr(c, "slot_mapping", c.slot_mapping.float()),
     "slot_mapping: got dtype torch.float32"),
    ("slot_mapping", lambda c: setattr(c, "slot_mapping", c.slot_mapping[::2]),
     "slot_mapping: got stride 2"),
    ("slot_mapping", lambda c: setattr(c, "slot_mapping", c.slot_mapping.reshape(1, -1)),
     "slot_mapping: got 2 dimensions"),
    ("slot_mapping", lambda c: setattr(c, "slot_mapping", c.slot_mapping.tolist()),
     "slot_mapping: got list"),
    ("query_start_loc", lambda c: setattr(c, "query_start_loc", c.query_start_loc.long()),
     "query_start_loc: got dtype torch.int64"),
    ("query_start_loc", lambda c: setattr(c, "query_start_loc", c.query_start_loc[:3]),
     "query_start_loc: got 3 entries"),
    ("seq_lens", lambda c: setattr(c, "seq_lens", c.seq_lens[:2]), "seq_lens: got 2 entries"),
    ("seq_lens", lambda c: setattr(c, "seq_lens", c.seq_lens.long()),
     "seq_lens: got dtype torch.int64"),
    ("block_table", lambda c: setattr(c, "block_table", c.block_table[0]),
     "block_table: got 1 dimensions"),
    ("block_table", lambda c: setattr(c, "block_table", c.block_table.t()),
     "block_table: got stride"),
    ("block_table", lambda c: setattr(c, "block_table", c.block_table.long()),
     "block_table: got dtype torch.int64"),
    ("block_size", lambda c: setattr(c, "block_size", 0), "block_size: got 0"),
    ("block_size", lambda c: setattr(c, "block_size", 2**31), "block_size: got 2147483648"),
    ("compress_ratio", lambda c: setattr(c, "compress_ratio", 0), "compress_ratio: got 0"),
    ("compress_ratio", lambda c: setattr(c, "compress_ratio", 4.0), "compress_ratio: got 4.0"),
    ("out", lambda c: setattr(c, "out", c.out.int()), "out: got dtype torch.int32"),
    ("out", lambda c: setattr(c, "out", c.out.reshape(1, -1)), "out: got 2 dimensions"),
    ("out", lambda c: setattr(c, "out", c.out[::2]), "out: got stride 2"),
    ("dcp_world_size", lambda c: setattr(c, "dcp_world_size", 0), "dcp_world_size: got 0"),
    ("cp_interleave", lambda c: setattr(c, "cp_interleave", -4), "cp_interleave: got -4"),
    ("dcp_world_size * cp_interleave",
     lambda c: (setattr(c, "dcp_world_size", 2**16), setattr(c, "cp_interleave", 2**16)),
     "dcp_world_size * cp_interleave: got 4294967296"),
    ("device", lambda c: setattr(c, "seq_lens", c.seq_lens.to("meta")),
     "seq_lens: got device meta"),
]


@pytest.mark.parametrize(("name", "mutate", "message"), BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("fn", [launch.get_compressed_slot_mapping,
                                reference.get_compressed_slot_mapping],
                         ids=["kernel", "reference"])
def test_bad_arguments_raise_before_writing(name: str, mutate, message: str, fn) -> None:
    call = _base().fresh()
    mutate(call)
    buffer = call.out
    before = None if buffer is None else buffer.clone()
    with pytest.raises(ValueError) as info:
        fn(*call.args(), **call.kwargs())
    text = str(info.value)
    assert text.startswith(f"{checks.FN}: "), text
    assert message in text, text
    assert "expected" in text, text
    if buffer is not None and buffer.device.type == "cpu" and buffer.dtype == torch.int64:
        assert torch.equal(buffer, before)
        assert bool((buffer == POISON).all())


@pytest.mark.parametrize(("tile", "message"), [
    ((1000, 4), "tokens_per_program: got 1000"),
    ((8, 4), "tokens_per_program: got 8"),
    ((16384, 16), "tokens_per_program: got 16384"),
    ((8192, 1), "tokens_per_program: got 8192 with num_warps=1"),
    ((1024, 3), "num_warps: got 3"),
    ((1024, 32), "num_warps: got 32"),
    (("64", 4), "tokens_per_program: got '64'"),
])
def test_bad_tiles_raise_before_writing(tile: tuple[object, object], message: str) -> None:
    call = _base().fresh()
    assert call.out is not None
    with pytest.raises(ValueError, match=f"^{checks.FN}: ") as info:
        launch.get_compressed_slot_mapping(*call.args(), **call.kwargs(),
                                           tokens_per_program=tile[0], num_warps=tile[1])
    assert message in str(info.value)
    assert bool((call.out == POISON).all())
    with pytest.raises(ValueError, match=message):
        launch.warmup([tile], "cpu")  # type: ignore[list-item]


def test_kernel_object_call_names_its_own_buffer() -> None:
    call = _base()
    assert call.out is not None
    rows = torch.full(call.out.shape, -7, dtype=torch.int32)
    with pytest.raises(ValueError, match=f"^{checks.KERNEL_FN}: compressed_slot_mapping: got "
                                         "dtype torch.int32"):
        launch.compressed_slot_mapping_kernel(*call.kernel_args(rows))
    assert bool((rows == -7).all())


@pytest.mark.parametrize("seed", range(24))
def test_the_fast_path_accepts_only_what_the_detailed_checks_accept(seed: int) -> None:
    call = random_step(300 + seed, max_tokens=64)
    g = torch.Generator().manual_seed(seed)
    # Sometimes an argument the fast path must hand over to the detailed checks.
    choice = int(torch.randint(0, 4, (1,), generator=g))
    if choice == 1:
        call.slot_mapping = call.slot_mapping.int()
    elif choice == 2:
        call.block_table = torch.empty((call.block_table.shape[0], 1), dtype=torch.int32)
    elif choice == 3:
        call.out = None
    args = (call.num_tokens, call.slot_mapping, call.query_start_loc, call.seq_lens,
            call.block_table, call.block_size, call.compress_ratio, call.out,
            call.dcp_world_size, call.cp_interleave)
    fast = checks._accept_fast(*args)
    detailed = checks.explain_inputs(*args)
    if fast is not None:
        assert fast == detailed
    assert checks.check_inputs(*args) == detailed
    if choice == 0:
        assert fast is not None, "a plain valid call should take the fast path"


# --------------------------------------------------------------------------- compile key
def test_only_the_tile_is_constexpr_and_everything_else_is_unspecialised() -> None:
    fn = _kernel.compressed_slot_mapping_kernel.fn
    params = list(inspect.signature(fn).parameters.values())
    assert [p.name for p in params if "constexpr" in str(p.annotation)] == list(
        _kernel.CONSTEXPRS)
    assert [p.name for p in params if "constexpr" not in str(p.annotation)] == list(
        _kernel.RUNTIME_ARGS)
    kernel = _kernel.compressed_slot_mapping_kernel
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
    source = inspect.getsource(launch._launch)
    assert "tensors = (rows_buffer, slot_mapping, query_start_loc, seq_lens, block_table)" in (
        source)
    assert _kernel.RUNTIME_ARGS[:5] == ("out_ptr", "slot_mapping_ptr", "query_start_loc_ptr",
                                        "seq_lens_ptr", "block_table_ptr")
    assert _kernel.RUNTIME_ARGS[5:] == ("num_rows", "num_slots", "num_reqs", "search_steps",
                                        "block_table_stride", "block_size", "compress_ratio",
                                        "dcp_world_size", "cp_interleave", "fill")


def test_interpreter_compiles_nothing_and_warmup_says_so() -> None:
    assert launch.interpreting()
    assert launch.compile_count() == 0
    assert launch.warmup([(1024, 4), (64, 2), (1024, 4)], "cpu") == 0
    check(make_step(31, decode_contexts=[4, 8, 12], prefill_queries=[(1, 100)]),
          [(64, 2), (256, 8)])
    assert launch.compile_count() == 0
    with pytest.raises(ValueError, match="expected \\(tokens_per_program, num_warps\\)"):
        launch.warmup([(1024, 4, 1)], "cpu")  # type: ignore[list-item]
