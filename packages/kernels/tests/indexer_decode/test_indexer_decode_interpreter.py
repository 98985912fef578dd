"""The indexer decode kernel, run by Triton's CPU interpreter, against the torch reference.

Every check compares the three whole buffers, poisoned before each launch: what the step
writes (each request's query length twice, its compressed context, zeros for the decode
tokens past the requests) and every element it must leave alone (past
``max(num_reqs, num_tokens)``, and ``decode_lens`` / ``per_req_decode_lens`` past the
requests).
"""

from __future__ import annotations

import inspect

import pytest
import torch
from dsv4_kernels.indexer_decode import checks, launch, reference
from dsv4_kernels.indexer_decode import kernel as _kernel
from dsv4_kernels.indexer_decode.testing import (
    POISON,
    DecodeCall,
    assert_same_buffers,
    make_step,
    random_step,
    written,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from triton.runtime.jit import JITFunction

pytestmark = pytest.mark.usefixtures("interpreter")

BASELINE = launch.BASELINE_TILE
TILES = [BASELINE, (16, 1), (64, 2), (128, 4), (256, 1), (32, 8), (2048, 16)]


def check(call: DecodeCall, tiles: list[tuple[int, int]] = TILES) -> DecodeCall:
    """Every tile leaves exactly the reference's three buffers."""
    want = call.run(reference.indexer_decode_metadata)
    for tpp, warps in tiles:
        got = call.run(launch.indexer_decode_metadata, tokens_per_program=tpp,
                       num_warps=warps)
        assert_same_buffers(got, want)
    return want


def test_hand_computed_step() -> None:
    # Three requests of one token at contexts 9, 4 and 0 (a padding request has query
    # length 0 and context 0), ratio 4, and two decode tokens past the requests.
    call = DecodeCall(
        query_start_loc=torch.tensor([0, 1, 2, 2, 99], dtype=torch.int32),
        seq_lens=torch.tensor([9, 4, 0, 55], dtype=torch.int32),
        decode_lens=torch.full((7,), POISON, dtype=torch.int32),
        per_req_decode_lens=torch.full((7,), POISON, dtype=torch.int32),
        expanded_seq_lens=torch.full((7,), POISON, dtype=torch.int32),
        num_reqs=3, num_tokens=5, compress_ratio=4)
    want = check(call)
    p = POISON
    assert want.decode_lens.tolist() == [1, 1, 0, p, p, p, p]
    assert want.per_req_decode_lens.tolist() == [1, 1, 0, p, p, p, p]
    assert want.expanded_seq_lens.tolist() == [2, 1, 0, 0, 0, p, p]


def test_negative_contexts_round_toward_minus_infinity_as_torch_does() -> None:
    call = make_step(1, [-1, -4, -5, -8, -9, 3, 4, 5, -2**31, 2**31 - 1], compress_ratio=4)
    want = check(call)
    assert want.expanded_seq_lens[:10].tolist() == [-1, -1, -2, -2, -3, 0, 1, 1, -2**29,
                                                    2**29 - 1]
    check(make_step(2, [-7, -1, 7, 0], compress_ratio=3))


def test_plain_decode_steps_at_deepseek_v4s_ratio() -> None:
    for seed, reqs in enumerate((1, 8, 64, 257, 512)):
        g = torch.Generator().manual_seed(seed)
        contexts = torch.randint(1, 1 << 20, (reqs,), generator=g).tolist()
        want = check(make_step(seed, contexts, buffer_rows=8192), [BASELINE, (64, 1)])
        assert written(want) == dict.fromkeys(written(want), reqs)


def test_cuda_graph_padding_requests_and_tokens() -> None:
    # FULL-graph padding: 5 requests padded to 8 (query length 0, context 0), 8 tokens.
    want = check(make_step(3, [100, 4096, 7, 3, 131072], pad_requests=3))
    assert want.decode_lens[:8].tolist() == [1] * 5 + [0] * 3
    assert want.expanded_seq_lens[:8].tolist() == [25, 1024, 1, 0, 32768, 0, 0, 0]
    assert bool((want.expanded_seq_lens[8:] == POISON).all())


def test_an_all_padding_step() -> None:
    want = check(make_step(4, [], pad_requests=6))
    assert want.decode_lens[:6].tolist() == [0] * 6
    assert want.expanded_seq_lens[:6].tolist() == [0] * 6


def test_decode_tokens_past_and_short_of_the_requests() -> None:
    # Tokens past the requests get zeros; fewer tokens than requests write no zeros.
    more = make_step(5, [40, 80])
    more.num_tokens = 6
    more = check(more)
    assert more.expanded_seq_lens[:7].tolist() == [10, 20, 0, 0, 0, 0, POISON]
    fewer = check(make_step(6, [40, 80, 120], pad_requests=4, pad_tokens=1))
    assert fewer.num_tokens == 4 and fewer.num_reqs == 7
    assert written(fewer) == {"decode_lens": 7, "per_req_decode_lens": 7,
                              "expanded_seq_lens": 7}


def test_a_step_of_more_than_one_program() -> None:
    call = make_step(7, list(range(3000)), pad_requests=100, buffer_rows=4000)
    check(call, [(16, 1), (128, 4), (1024, 4), (4096, 16)])


def test_other_ratios() -> None:
    for ratio in (1, 2, 3, 128, 2**31 - 1):
        check(make_step(8 + ratio % 7, [0, 1, 127, 128, 129, 2**30, 5000], compress_ratio=ratio),
              [BASELINE, (32, 1)])


@pytest.mark.parametrize("seed", range(16))
def test_random_steps(seed: int) -> None:
    check(random_step(seed), [BASELINE, (64, 2), (16, 1), (512, 4)])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(100, 10**6), tile=st.sampled_from(TILES))
def test_generated_steps(seed: int, tile: tuple[int, int]) -> None:
    check(random_step(seed, max_reqs=200), [tile])


def test_checked_then_launched_equals_the_function() -> None:
    call = make_step(9, [5, 6, 700], pad_requests=2)
    want = call.run(launch.indexer_decode_metadata, tokens_per_program=32, num_warps=1)
    got = call.fresh()
    checked = launch.check(*got.args())
    assert checked == checks.Checked(5, -1)
    launch.launch_checked(checked, *got.args(), 32, 1)
    assert_same_buffers(got, want)


def test_host_facts_are_the_largest_and_smallest_query_lengths() -> None:
    call = make_step(10, [5, 6, 7], pad_requests=2)
    assert reference.host_facts(call.query_start_loc_cpu, call.num_reqs) == (1, 0)
    assert reference.host_facts(call.query_start_loc_cpu, 3) == (1, 1)


def test_empty_steps_write_nothing() -> None:
    call = make_step(11, [9])
    call.num_reqs = call.num_tokens = 0
    want = check(call)
    assert written(want) == dict.fromkeys(written(want), 0)


# --------------------------------------------------------------------------- bad arguments
def _base() -> DecodeCall:
    return make_step(21, [10, 20, 30], pad_requests=2, buffer_rows=9)


BAD = [
    ("num_reqs", lambda c: setattr(c, "num_reqs", -1), "num_reqs: got -1"),
    ("num_reqs", lambda c: setattr(c, "num_reqs", 2.0), "num_reqs: got 2.0"),
    ("num_reqs", lambda c: setattr(c, "num_reqs", True), "num_reqs: got True"),
    ("num_reqs", lambda c: setattr(c, "num_reqs", 9), "query_start_loc: got 9 entries"),
    ("num_tokens", lambda c: setattr(c, "num_tokens", -3), "num_tokens: got -3"),
    ("num_tokens", lambda c: setattr(c, "num_tokens", 10), "expanded_seq_lens: got 9 entries"),
    ("compress_ratio", lambda c: setattr(c, "compress_ratio", 0), "compress_ratio: got 0"),
    ("compress_ratio", lambda c: setattr(c, "compress_ratio", 4.0), "compress_ratio: got 4.0"),
    ("compress_ratio", lambda c: setattr(c, "compress_ratio", 2**31), "compress_ratio: got"),
    ("query_start_loc", lambda c: setattr(c, "query_start_loc", c.query_start_loc.long()),
     "query_start_loc: got dtype torch.int64"),
    ("query_start_loc", lambda c: setattr(c, "query_start_loc", c.query_start_loc[:5]),
     "query_start_loc: got 5 entries"),
    ("query_start_loc", lambda c: setattr(c, "query_start_loc", c.query_start_loc.tolist()),
     "query_start_loc: got list"),
    ("seq_lens", lambda c: setattr(c, "seq_lens", c.seq_lens[:4]), "seq_lens: got 4 entries"),
    ("seq_lens", lambda c: setattr(c, "seq_lens", c.seq_lens.float()),
     "seq_lens: got dtype torch.float32"),
    ("seq_lens", lambda c: setattr(c, "seq_lens", c.seq_lens.reshape(1, -1)),
     "seq_lens: got 2 dimensions"),
    ("decode_lens", lambda c: setattr(c, "decode_lens", c.decode_lens[:4]),
     "decode_lens: got 4 entries"),
    ("decode_lens", lambda c: setattr(c, "decode_lens", torch.full((18,), POISON,
                                                                   dtype=torch.int32)[::2]),
     "decode_lens: got stride 2"),
    ("per_req_decode_lens", lambda c: setattr(c, "per_req_decode_lens",
                                              c.per_req_decode_lens.long()),
     "per_req_decode_lens: got dtype torch.int64"),
    ("expanded_seq_lens", lambda c: setattr(c, "expanded_seq_lens",
                                            c.expanded_seq_lens.reshape(3, 3)),
     "expanded_seq_lens: got 2 dimensions"),
    ("device", lambda c: setattr(c, "seq_lens", c.seq_lens.to("meta")),
     "seq_lens: got device meta"),
]


@pytest.mark.parametrize(("name", "mutate", "message"), BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("fn", [launch.indexer_decode_metadata,
                                reference.indexer_decode_metadata],
                         ids=["kernel", "reference"])
def test_bad_arguments_raise_before_writing(name: str, mutate, message: str, fn) -> None:
    call = _base().fresh()
    mutate(call)
    buffers = [b for b in (call.decode_lens, call.per_req_decode_lens, call.expanded_seq_lens)
               if isinstance(b, torch.Tensor) and b.device.type == "cpu"]
    with pytest.raises(ValueError) as info:
        fn(*call.args())
    text = str(info.value)
    assert text.startswith(f"{checks.FN}: "), text
    assert message in text, text
    assert "expected" in text, text
    for buffer in buffers:
        if buffer.dtype == torch.int32:
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
    with pytest.raises(ValueError, match=f"^{checks.FN}: ") as info:
        launch.indexer_decode_metadata(*call.args(), tokens_per_program=tile[0],
                                       num_warps=tile[1])
    assert message in str(info.value)
    assert written(call) == dict.fromkeys(written(call), 0)
    with pytest.raises(ValueError, match=message):
        launch.warmup([tile], "cpu")  # type: ignore[list-item]


@pytest.mark.parametrize("seed", range(24))
def test_the_fast_path_accepts_only_what_the_detailed_checks_accept(seed: int) -> None:
    call = random_step(300 + seed, max_reqs=64)
    g = torch.Generator().manual_seed(seed)
    # Sometimes an argument the fast path must hand over to the detailed checks.
    choice = int(torch.randint(0, 4, (1,), generator=g))
    if choice == 1:
        call.seq_lens = torch.zeros((call.seq_lens.shape[0], 1), dtype=torch.int32)[:, 0]
    elif choice == 2:
        call.decode_lens = call.decode_lens[:1]
    elif choice == 3:
        call.num_tokens = call.expanded_seq_lens.shape[0] + 1
    args = call.args()
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
    if choice == 0:
        assert fast is not None, "a plain valid call should take the fast path"


# --------------------------------------------------------------------------- compile key
def test_only_the_tile_is_constexpr_and_everything_else_is_unspecialised() -> None:
    fn = _kernel.indexer_decode_kernel.fn
    params = list(inspect.signature(fn).parameters.values())
    assert [p.name for p in params if "constexpr" in str(p.annotation)] == list(
        _kernel.CONSTEXPRS)
    assert [p.name for p in params if "constexpr" not in str(p.annotation)] == list(
        _kernel.RUNTIME_ARGS)
    kernel = _kernel.indexer_decode_kernel
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
    assert ("tensors = (query_start_loc, seq_lens, decode_lens, per_req_decode_lens, "
            "expanded_seq_lens)") in source
    assert "(num_reqs, num_tokens, compress_ratio)" in source
    pointers = tuple(f"{n}_ptr" for n in checks.NAMES)
    assert (*pointers, "num_reqs", "num_tokens", "compress_ratio") == _kernel.RUNTIME_ARGS


def test_interpreter_compiles_nothing_and_warmup_says_so() -> None:
    assert launch.interpreting()
    assert launch.compile_count() == 0
    assert launch.warmup([(1024, 4), (64, 2), (1024, 4)], "cpu") == 0
    check(make_step(31, [4, 8, 12], pad_requests=1), [(64, 2), (256, 8)])
    assert launch.compile_count() == 0
    with pytest.raises(ValueError, match="expected \\(tokens_per_program, num_warps\\)"):
        launch.warmup([(1024, 4, 1)], "cpu")  # type: ignore[list-item]


def test_the_registry_declares_the_kernel() -> None:
    from dsv4_kernels import indexer_decode, registry

    found = registry.get("indexer_decode")
    assert found.launch is launch.indexer_decode_metadata
    assert found.reference is reference.indexer_decode_metadata
    assert found.warmup is launch.warmup and found.compile_count is launch.compile_count
    assert indexer_decode.warmup is launch.warmup
