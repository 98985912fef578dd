"""FusedInvRopeFP8Quant's binaries built for sm80 to sm120 on the CPU runner, no GPU needed.

Triton compiles for any NVIDIA target offline (:mod:`dsv4_kernels.offline_build`), so
this answers on every CI run questions a GPU run answers only on its own hardware: does
every tile of both bodies build for the H200 (sm90: FP8 output, PDL), for the A100 (sm80:
what vLLM runs there, unquantized and without PDL) and for Blackwell (sm100: FP8 output
with the packed UE8M0 scales vLLM's ``compute_fp8_einsum_recipe`` picks there, PDL), and
are the capability rules :func:`.checks.check_arch` refuses by exactly the ones Triton
has? The builds run in one child process without ``TRITON_INTERPRET`` (the interpreter
replaces the compiler).
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
from dsv4_kernels import offline_build
from dsv4_kernels.fused_inv_rope_fp8_quant import checks, testing

PIN_CAPABILITIES = [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)]
"""A100, SM86 cards, Ada, Hopper, Blackwell data-centre and consumer parts: the two rules
change between the first four, and the last two must keep both."""
PIN_TILES = (((2, 1, 1), "head_rows"), ((2, 1, 4), "block_rows"))


def _pins(capability: tuple[int, int]) -> list[testing.Build]:
    """FP8 output without PDL, and PDL without FP8 output, at one tile of each body."""
    return [testing.Build(*tile, body, capability, quantize=q, launch_pdl=not q)
            for tile, body in PIN_TILES for q in (True, False)]


@pytest.fixture(scope="module")
def built() -> dict[testing.Build, dict]:
    """Every build this module checks, in one child process."""
    specs = []
    for tile in testing.BUILD_TILES:
        specs.append(testing.Build(*tile, (9, 0), quantize=True, launch_pdl=True))
        specs.append(testing.Build(*tile, (8, 0), quantize=False, launch_pdl=False))
        specs.append(testing.Build(*tile, (10, 0), quantize=True, tma_aligned_scales=True,
                                   launch_pdl=True))
    specs += [testing.Build(*tile, (9, 0), quantize=True, tma_aligned_scales=True,
                            launch_pdl=True) for tile in testing.BUILD_TILES[::3]]
    specs += [spec for capability in PIN_CAPABILITIES for spec in _pins(capability)]
    out = offline_build.run_child("dsv4_kernels.fused_inv_rope_fp8_quant.testing",
                                  "builds_json", json.dumps([asdict(s) for s in specs]))
    results = json.loads(out)
    assert [r["build"] for r in results] == json.loads(json.dumps([asdict(s) for s in specs]))
    return dict(zip(specs, results, strict=True))


def test_every_tile_builds_for_the_h200_the_a100_and_blackwell(built: dict) -> None:
    """Both bodies at every tile of :data:`testing.BUILD_TILES`: FP8 output with PDL for
    sm90 (both scale layouts), vLLM's A100 form (no quantize, no PDL) for sm80, and FP8
    output with packed UE8M0 scales and PDL for sm100."""
    wanted = [spec for spec in built if spec not in _pins(spec.capability)]
    assert len(wanted) >= 3 * len(testing.BUILD_TILES)
    assert {spec.capability for spec in wanted} == {(8, 0), (9, 0), (10, 0)}
    assert {spec.body for spec in wanted} == set(checks.BODIES)
    failed = [f"{spec}: {built[spec]['error']}" for spec in wanted if not built[spec]["ok"]]
    assert not failed, failed


def test_block_rows_at_one_vector_per_thread_uses_no_shared_memory(built: dict) -> None:
    """The block-rows body exists for small calls, whose time is the chain each warp runs
    after the PDL wait; a shared-memory round trip there is a barrier every warp of the
    program waits at. At the tiles where a thread holds one 16-byte vector (512 lanes of
    a head, 8 per thread) its sm90 FP8 build with FP32 scales, as the H200 runs it, must
    use none: the scales are stored from the reduction's own layout and the rotation
    needs no partner from another thread. (Two vectors per thread, as at (4, 2, 8), still
    move the cos/sin rows between layouts, before the wait.)"""
    one_vector = [spec for spec in built
                  if spec.body == "block_rows" and spec.capability == (9, 0)
                  and spec.quantize and spec.launch_pdl and not spec.tma_aligned_scales
                  and spec.tokens_per_program * spec.heads_per_program * 512
                  == 8 * 32 * spec.num_warps]
    assert len(one_vector) >= 4, one_vector
    used = {(spec.tokens_per_program, spec.heads_per_program, spec.num_warps):
            built[spec]["shared_bytes"] for spec in one_vector}
    assert all(built[spec]["ok"] for spec in one_vector)
    assert not any(used.values()), f"shared memory bytes per tile: {used}"


def test_block_rows_waits_once_and_moves_whole_vectors(built: dict) -> None:
    """After the PDL wait the block-rows body's time is its instruction count, so its
    FP8 builds with PDL (sm90 with both scale layouts, sm100) must wait exactly once, and
    load ``o`` and store the FP8 bytes as vectors, at every tile built here (a thread holds
    one row at each; one that holds two, as at (4, 4, 8), waits once per row, the second
    time returning at once). The addresses come out
    of the wait's own asm, which the compiler cannot see through: a side-effecting asm
    is copied with its wait into every layout the compiler tries (12 waits at (4, 2,
    16)), and without the restated alignment every bf16 lane is loaded and every FP8
    byte stored on its own."""
    with_pdl = [spec for spec in built if spec.body == "block_rows" and spec.quantize
                and spec.launch_pdl and spec.capability in ((9, 0), (10, 0))]
    assert len(with_pdl) >= 2 * len([t for t in testing.BUILD_TILES if t[3] == "block_rows"])
    assert all(built[spec]["ok"] for spec in with_pdl)
    counts = {spec: built[spec]["ptx_counts"] for spec in with_pdl}
    assert all(set(c) == set(testing.PTX_COUNTED) for c in counts.values())
    wrong = {f"{spec.tokens_per_program, spec.heads_per_program, spec.num_warps} "
             f"sm{spec.capability[0]}{spec.capability[1]} tma={spec.tma_aligned_scales}": c
             for spec, c in counts.items()
             if c["griddepcontrol.wait"] != 1 or c["ld.global.b16"] or c["st.global.b8"]
             or c["st.global.b16"]}
    assert not wrong, wrong


def test_head_rows_keeps_whole_vectors_through_the_wait(built: dict) -> None:
    """The head-rows body hands its row addresses through the PDL wait too, so its FP8
    builds with PDL must still load ``o`` in 16-byte vectors and store no FP8 byte on its
    own (its rope partners are loaded lane by lane by design, so single-lane loads are
    not counted here); without the restated alignment every lane goes alone."""
    with_pdl = [spec for spec in built if spec.body == "head_rows" and spec.quantize
                and spec.launch_pdl and spec.capability in ((9, 0), (10, 0))]
    assert len(with_pdl) >= 2 * len([t for t in testing.BUILD_TILES if t[3] == "head_rows"])
    assert all(built[spec]["ok"] for spec in with_pdl)
    wrong = {f"{spec.tokens_per_program, spec.heads_per_program, spec.num_warps} "
             f"sm{spec.capability[0]}{spec.capability[1]} tma={spec.tma_aligned_scales}":
             built[spec]["ptx_counts"] for spec in with_pdl
             if built[spec]["ptx_counts"]["ld.global.v4.b32"] < 2
             or built[spec]["ptx_counts"]["st.global.b8"]}
    assert not wrong, wrong


def test_dependents_are_released_before_the_wait(built: dict) -> None:
    """The wait is a pure asm (so the compiler may drop its copies), and a pure asm may
    be moved past side effects: every build with PDL must still release its dependents
    before it first waits, or the next kernel's launch would no longer overlap this
    one's wait."""
    with_pdl = [spec for spec in built if spec.launch_pdl and built[spec]["ok"]]
    assert {spec.body for spec in with_pdl} == set(checks.BODIES)
    late = {str(spec): built[spec]["ptx_first"] for spec in with_pdl
            if not 0 <= built[spec]["ptx_first"]["griddepcontrol.launch_dependents"]
            < built[spec]["ptx_first"]["griddepcontrol.wait"]}
    assert not late, late


@pytest.mark.parametrize("capability", PIN_CAPABILITIES, ids=lambda c: f"sm{c[0]}{c[1]}")
def test_the_checks_refuse_exactly_what_triton_cannot_build(built: dict,
                                                            capability: tuple[int, int]) -> None:
    """FP8 output builds exactly where :func:`checks.fp8_supported` says so, and PDL
    exactly where :func:`checks.pdl_supported` does; a refused build fails for that
    reason and no other."""
    for spec in _pins(capability):
        result = built[spec]
        supported = (checks.fp8_supported(capability) if spec.quantize
                     else checks.pdl_supported(capability))
        assert result["ok"] is supported, (spec, result["error"])
        if not supported:
            why = "fp8e4nv not supported" if spec.quantize else "requires .target sm_90"
            assert why in result["error"], result["error"]


def test_the_rules_split_where_triton_does() -> None:
    """The thresholds themselves: sm89 for FP8 e4m3, sm90 for PDL, and both kept after."""
    assert [checks.fp8_supported(c) for c in PIN_CAPABILITIES] == [False, False, True, True,
                                                                  True, True]
    assert [checks.pdl_supported(c) for c in PIN_CAPABILITIES] == [False, False, False, True,
                                                                  True, True]
