"""FusedInvRopeFP8Quant in Triton's CPU interpreter, against the plain-torch reference.

What the interpreter can check bit for bit, and what it cannot: every float32 step of
the kernel (bf16 widening, the rotation, block amax, ``eps``, the power-of-two scale,
the division, the clamp) runs in numpy with IEEE float32 roundings, and the scale
tensors (FP32 and packed UE8M0, pad rows included) are compared bit for bit with the
reference's. Two things differ from the GPU: numpy rounds ``x * cos + x_partner * sin``
in three steps where the GPU build fuses a multiply-add (the reference's ``rotation=
"separate"`` is the interpreter's form, ``"fma_cos"`` the GPU's), and the interpreter's
own float casts on store (``triton.runtime.interpreter._convert_float``) are not the
GPU's round-to-nearest-even (to e4m3 it rounds half away on the cut bit, to bf16 it
truncates). So the FP8 and bf16 bytes here are compared with the reference's pre-cast
values passed through that same cast function; the GPU tests carry the bitwise check of
the real casts against vLLM's kernel.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import triton
import triton.language as tl
from dsv4_kernels.fused_inv_rope_fp8_quant import checks, kernel, launch, reference, testing

Tile = tuple  # (tokens_per_program, heads_per_program, num_warps[, body])
BODIES = checks.BODIES


@pytest.fixture(scope="module", autouse=True)
def interpreter() -> None:
    """Every test here runs kernels in Triton's interpreter; refuse to run without it."""
    if not launch.interpreting():
        raise RuntimeError("run these tests with TRITON_INTERPRET=1 (Triton's interpreter)")


def _ours(case: testing.Case, tile: Tile, tensors: tuple | None = None
          ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple]:
    o, pos, cache = tensors if tensors is not None else case.tensors("cpu")
    out = launch.fused_inv_rope_fp8_quant(o, pos, cache, *case.args(),
                                          tokens_per_program=tile[0],
                                          heads_per_program=tile[1], num_warps=tile[2],
                                          body=tile[3] if len(tile) > 3 else "head_rows")
    return out, (o, pos, cache)


def _check(case: testing.Case, tile: Tile, tensors: tuple | None = None) -> None:
    (out, scales), (o, pos, cache) = _ours(case, tile, tensors)
    ref_out, _ = reference.fused_inv_rope_fp8_quant(o, pos, cache, *case.args(),
                                                    rotation="separate")
    assert out.shape == ref_out.shape and out.stride() == ref_out.stride()
    assert out.dtype == ref_out.dtype
    want_bits, want_scales = testing.interpreter_expected(case, o, pos, cache)
    got = testing.bits(out)
    bad = got != want_bits
    assert not bad.any(), f"{case} {tile}: {int(bad.sum())} output bytes differ, first at " \
                          f"{bad.nonzero()[:3].tolist()}"
    assert scales.shape == want_scales.shape and scales.stride() == want_scales.stride()
    assert scales.dtype == want_scales.dtype
    if case.quantize:
        full, want = testing.scale_storage(scales), testing.scale_storage(want_scales)
        assert testing.mismatches(full, want) == 0, f"{case} {tile}: scales differ"
    else:
        assert scales.numel() == 0


CASES = [
    # (T, n_groups, heads_per_group, tma_aligned_scales, quantize, tile, rope kind)
    (1, 1, 8, False, True, (1, 1, 1), "compress"),
    (2, 1, 8, True, True, (1, 2, 1), "swa"),
    (3, 8, 8, False, True, (2, 4, 4), "compress"),
    (4, 2, 8, True, True, (1, 1, 1), "compress"),
    (5, 2, 8, False, False, (2, 2, 2), "swa"),
    (6, 1, 8, True, False, (4, 2, 4), "compress"),
    (7, 1, 8, True, True, (4, 2, 4), "compress"),
    (9, 4, 8, False, True, (8, 8, 8), "swa"),
    (64, 1, 8, False, True, (8, 8, 8), "compress"),
    (130, 1, 8, True, True, (8, 8, 8), "compress"),
    (257, 1, 8, False, True, (8, 8, 8), "swa"),
    (301, 2, 4, False, False, (8, 8, 8), "compress"),
    (2, 16, 8, False, True, (1, 8, 4), "compress"),
    (3, 16, 8, True, True, (2, 8, 8), "swa"),
    (1, 8, 16, False, False, (1, 4, 2), "compress"),
]


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("t,groups,hpg,tma,quantize,tile,kind", CASES)
def test_matches_reference(t: int, groups: int, hpg: int, tma: bool, quantize: bool,
                           tile: Tile, kind: str, body: str) -> None:
    """T from 1 to 301 (non-multiples of 4 included), 8 to 128 heads, both scale layouts,
    quantize on and off, both DeepSeek-V4 rope tables (positions up to 1M - 1), each
    body."""
    _check(testing.Case(t, groups, hpg, tma, quantize, seed=100 + t * 7 + groups,
                        rope_kind=kind), (*tile, body))


TILES: list[Tile] = [(1, 1, 1), (1, 2, 1), (2, 2, 2), (4, 2, 4), (2, 4, 4), (1, 8, 4),
                     (8, 4, 4), (2, 1, 4), (4, 1, 8), (1, 1, 2)]


@pytest.mark.parametrize("index,case", list(enumerate(testing.random_cases(
    16, seed=21, max_tokens=24, max_heads=64))))
def test_generated_calls(index: int, case: testing.Case) -> None:
    """Seeded calls over every argument, each with a tile and a body of its own."""
    _check(case, (*TILES[index % len(TILES)], BODIES[index % len(BODIES)]))


def test_other_head_geometry() -> None:
    """A 128-lane head (64 nope + 64 rope, one block), 64-lane blocks (the rope lanes a
    block of their own), 256-lane blocks (192 nope lanes before the rope lanes in the
    last one), and 32-lane blocks with the rope lanes over two of them (the body's
    general path; the others take its one-rope-block path): the geometry is run-time
    data to the reference and constexpr to the kernel, for each body."""
    table = testing.rope_table("compress")
    for nope, qg, tma in ((64, 128, False), (192, 64, True), (448, 256, False),
                          (64, 32, True), (64, 32, False)):
        case = testing.Case(6, 2, 4, tma, True, seed=5 + nope, nope_dim=nope,
                            quant_group_size=qg)
        for body in BODIES:
            _check(case, (2, 4, 4, body), case.tensors("cpu", table))


def test_positions_reach_the_last_table_row() -> None:
    """Positions 0 and 1,048,575 (the 1M-row table's ends) and random ones between."""
    case = testing.Case(11, 1, 8, False, True, seed=77)
    o, pos, cache = case.tensors("cpu")
    assert cache.shape == (1 << 20, 64)
    assert int(pos.max()) == (1 << 20) - 1 and int(pos.min()) == 0
    for body in BODIES:
        _check(case, (4, 4, 4, body), (o, pos, cache))


@pytest.mark.parametrize("body", BODIES)
def test_all_zero_blocks_take_the_eps_scale(body: str) -> None:
    """A block of zeros has amax 0: its scale is exp2(ceil(log2(1e-10 / 448))) = 2**-42
    (UE8M0 byte 85), its FP8 values are zero (-0 in rope lanes, as the rotation of zeros
    by a negative sine gives); a block with one outlier keeps its own."""
    case = testing.Case(5, 1, 8, False, True, seed=9)
    o, pos, cache = case.tensors("cpu")
    o[1, 2].zero_()
    o[3, 0, 384:].zero_()  # the block that holds the rope lanes
    o[4, 5, 10] = 3000.0
    (out, scales), _ = _ours(case, (2, 4, 4, body), (o, pos, cache))
    assert torch.all(out[1, 0, 2 * 512: 3 * 512].float() == 0)  # +0 and -0 (rope lanes)
    assert torch.all(scales[1, 0, 8:12] == 2.0 ** -42)
    assert scales[3, 0, 3].item() == 2.0 ** -42 and scales[3, 0, 2].item() != 2.0 ** -42
    assert scales[4, 0, 5 * 4].item() == 2.0 ** 3  # 3000 / 448 = 6.7 -> 8
    _check(case, (2, 4, 4, body), (o, pos, cache))
    packed = testing.Case(5, 1, 8, True, True, seed=9)
    (_, pscales), _ = _ours(packed, (1, 2, 1, body), (o, pos, cache))
    assert pscales[1, 0, 2].item() == 0x55555555


@pytest.mark.parametrize("body", BODIES)
def test_pad_rows_zero_in_poisoned_buffers(body: str) -> None:
    """Through the kernel object's entry, on poisoned vLLM-shaped buffers: every output
    byte and every scale row (T=6 padded to 8) is written, the pad rows with zeros."""
    for tma in (False, True):
        case = testing.Case(6, 2, 8, tma, True, seed=31)
        o, pos, cache = case.tensors("cpu")
        checked = checks.check_inputs(o, pos, cache, *case.args())
        out_buf, scale_buf = launch.allocate(checked, o.dtype, 2, tma, True)
        testing.poison_like_vllm(out_buf, scale_buf)
        launch.kernel_call(o, pos, cache, out_buf, scale_buf, 6, heads_per_group=8,
                           quant_group_size=128, chunks_per_head=4, nope_dim=448, half_rope=32,
                           tma_aligned_scales=tma, quantize=True, fp8_max=448.0,
                           launch_pdl=False, grid=(8, 16), tokens_per_program=4,
                           heads_per_program=2, num_warps=2, body=body)
        want_bits, want_scales = testing.interpreter_expected(case, o, pos, cache)
        assert torch.equal(testing.bits(out_buf.transpose(0, 1)), want_bits)
        storage = testing.scale_storage(scale_buf.transpose(0, 1))
        assert testing.mismatches(storage, testing.scale_storage(want_scales)) == 0
        pad = storage.view(torch.int32).view(2, -1, 8)[:, :, 6:]
        assert torch.all(pad == 0)


def test_vllm_shapes_strides_and_empty_scales() -> None:
    """``(T, G, d)`` output with strides ``(d, T*d, 1)``, ``(T, G, inner)`` scales with
    ``(1, inner*tma_T, tma_T)``; without ``quantize`` an empty scale tensor of the
    layout's dtype; T = 0 gives empty views without a launch."""
    case = testing.Case(3, 2, 8, False, True, seed=3)
    (out, scales), _ = _ours(case, (1, 1, 1))
    assert out.shape == (3, 2, 4096) and out.stride() == (4096, 3 * 4096, 1)
    assert out.dtype == torch.float8_e4m3fn
    assert scales.shape == (3, 2, 32) and scales.stride() == (1, 32 * 4, 4)
    for tma, dtype in ((False, torch.float32), (True, torch.int32)):
        (out, scales), _ = _ours(testing.Case(3, 2, 8, tma, False, seed=3), (1, 1, 1))
        assert out.dtype == torch.bfloat16 and scales.shape == (0,) and scales.dtype == dtype
    o, pos, cache = testing.Case(1, 2, 8, True, True, seed=3).tensors("cpu")
    out, scales = launch.fused_inv_rope_fp8_quant(o[:0], pos, cache, 2, 8,
                                                  tma_aligned_scales=True)
    ref_out, ref_scales = reference.fused_inv_rope_fp8_quant(o[:0], pos, cache, 2, 8,
                                                             tma_aligned_scales=True)
    assert out.shape == ref_out.shape == (0, 2, 4096)
    assert scales.shape == ref_scales.shape == (0, 2, 8)


def _valid() -> dict:
    case = testing.Case(3, 2, 8, False, True, seed=1)
    o, pos, cache = case.tensors("cpu", testing.rope_table("compress"))
    return dict(o=o, positions=pos, cos_sin_cache=cache, n_groups=2, heads_per_group=8,
                nope_dim=448, rope_dim=64, quant_group_size=128, tma_aligned_scales=False,
                quantize=True)


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    flat = torch.empty(t.numel() + 1, dtype=t.dtype)
    view = flat[1:].view(t.shape)
    view.copy_(t)
    return view


BAD = [
    ("n_groups", lambda a: a.update(n_groups=3), "o"),
    ("heads_per_group", lambda a: a.update(heads_per_group=4), "o"),
    ("head_dim", lambda a: a.update(nope_dim=440), "o"),
    ("group size", lambda a: a.update(quant_group_size=96), "quant_group_size"),
    ("odd rope", lambda a: a.update(nope_dim=449, rope_dim=63), "rope_dim"),
    ("cache width", lambda a: a.update(cos_sin_cache=a["cos_sin_cache"][:, :32]),
     "cos_sin_cache"),
    ("cache dtype", lambda a: a.update(cos_sin_cache=a["cos_sin_cache"][:8].double()),
     "cos_sin_cache"),
    ("packed chunks", lambda a: a.update(o=a["o"][..., :128].contiguous(), nope_dim=64,
                                         quant_group_size=64, tma_aligned_scales=True),
     "quant_group_size"),
    ("o 2-D", lambda a: a.update(o=a["o"][0]), "o"),
    ("o dtype", lambda a: a.update(o=a["o"].to(torch.int16)), "o"),
    ("o lane stride", lambda a: a.update(o=a["o"].transpose(1, 2).contiguous().transpose(
        1, 2)), "o"),
    ("o misaligned", lambda a: a.update(o=_misaligned(a["o"])), "o"),
    ("positions dtype", lambda a: a.update(positions=a["positions"].float()), "positions"),
    ("positions short", lambda a: a.update(positions=a["positions"][:2]), "positions"),
    ("positions stride", lambda a: a.update(positions=torch.arange(6)[::2]), "positions"),
    ("bool dim", lambda a: a.update(n_groups=True), "n_groups"),
    ("flag type", lambda a: a.update(quantize=1), "quantize"),
    ("odd nope", lambda a: a.update(nope_dim=447, rope_dim=65), "rope_dim"),
    ("2**31 - 3 tokens", lambda a: a.update(o=a["o"][:1].expand(2**31 - 3, 16, 512)), "o"),
]


def test_the_largest_token_count_is_accepted() -> None:
    """2**31 - 4 tokens (2**31 - 4 scale rows) pass the checks, so the bound above is
    exactly CUDA's grid; one more token is refused (the table above)."""
    args = _valid()
    o = args["o"][:1].expand(2**31 - 4, 16, 512)
    positions = args["positions"][:1].expand(2**31 - 4)
    with pytest.raises(ValueError, match="fused_inv_rope_fp8_quant: positions: got stride"):
        checks.check_inputs(o, positions, args["cos_sin_cache"], 2, 8, 448, 64, 128, False,
                            True)


@pytest.mark.parametrize("label,mutate,arg", BAD, ids=[b[0] for b in BAD])
def test_bad_inputs_raise_before_allocating(label: str, mutate, arg: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Every vLLM assert (and every input the kernel cannot take) is a ValueError naming
    the function and the argument, raised before anything is allocated or launched."""
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("allocated or launched before the checks finished")

    monkeypatch.setattr(launch, "allocate", refuse)
    monkeypatch.setattr(launch, "_launch", refuse)
    args = _valid()
    mutate(args)
    with pytest.raises(ValueError, match=rf"^fused_inv_rope_fp8_quant: {arg}: got "):
        launch.fused_inv_rope_fp8_quant(**args)


@pytest.mark.parametrize("tile", [(3, 1, 1, "head_rows"), (1, 128, 4, "block_rows"),
                                  (8, 8, 1, "block_rows"), (1, 1, 32, "head_rows"),
                                  (0, 1, 1, "head_rows"), (1, 1, 1, "strip"),
                                  (1, 1, 1, None)])
def test_bad_tiles(tile: Tile) -> None:
    """Tiles outside powers of two, 1..64 tokens/heads, 1..16 warps, 128 lanes per thread,
    and bodies other than the two there are."""
    with pytest.raises(ValueError, match=r"^fused_inv_rope_fp8_quant: "):
        launch.fused_inv_rope_fp8_quant(**_valid(), tokens_per_program=tile[0],
                                        heads_per_program=tile[1], num_warps=tile[2],
                                        body=tile[3])


def test_kernel_call_refusals_leave_buffers_untouched() -> None:
    """A kernel-object call whose buffers, grid or constants are not what vLLM's op
    allocates and passes is refused (so the plugin can run vLLM's object instead), and
    nothing is written."""
    args = _valid()
    o, pos, cache = args["o"], args["positions"], args["cos_sin_cache"]
    checked = checks.check_inputs(o, pos, cache, 2, 8, 448, 64, 128, False, True)
    good = dict(heads_per_group=8, quant_group_size=128, chunks_per_head=4, nope_dim=448,
                half_rope=32, tma_aligned_scales=False, quantize=True, fp8_max=448.0,
                launch_pdl=False, grid=(4, 16))
    bad_kw = [("grid", dict(grid=(3, 16))), ("fp8_max", dict(fp8_max=240.0)),
              ("chunks_per_head", dict(chunks_per_head=2)), ("launch_pdl", dict(launch_pdl=1)),
              ("scale_buf", dict(tma_aligned_scales=True))]
    for arg, change in bad_kw:
        out_buf, scale_buf = launch.allocate(checked, o.dtype, 2, False, True)
        testing.poison_like_vllm(out_buf, scale_buf)
        with pytest.raises(ValueError, match=rf"^kernel_call: {arg}: got "):
            launch.kernel_call(o, pos, cache, out_buf, scale_buf, 3, **{**good, **change})
        assert torch.all(testing.bits(out_buf) == 0x7F)
        assert torch.all(testing.scale_storage(scale_buf.transpose(0, 1)).view(torch.int32)
                         == testing.POISON_WORD)
    out_buf, scale_buf = launch.allocate(checked, o.dtype, 2, False, True)
    with pytest.raises(ValueError, match=r"^kernel_call: out_buf: got "):
        launch.kernel_call(o, pos, cache, out_buf[:, :2], scale_buf, 3, **good)
    wrong = torch.empty(2 * 32 * 3, dtype=torch.float32).as_strided((2, 3, 32), (96, 1, 3))
    with pytest.raises(ValueError, match=r"^kernel_call: scale_buf: got "):
        launch.kernel_call(o, pos, cache, out_buf, wrong, 3, **good)


ARCH_RULES = [((8, 0), True, False, "quantize"), ((8, 6), True, False, "quantize"),
              ((8, 0), True, True, "quantize"), ((8, 9), False, True, "launch_pdl"),
              ((8, 0), False, True, "launch_pdl"), ((8, 0), False, False, None),
              ((8, 6), False, False, None), ((8, 9), True, False, None),
              ((9, 0), True, True, None), ((10, 0), True, True, None)]
"""(compute capability, quantize, launch_pdl, the argument refused or None): FP8 output
from sm89, PDL from sm90, as Triton builds them."""


@pytest.mark.parametrize(("capability", "quantize", "pdl", "refused"), ARCH_RULES)
def test_what_the_gpu_cannot_build_is_refused_before_anything_is_written(
        monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], quantize: bool,
        pdl: bool, refused: str | None) -> None:
    """On a GPU that cannot build the binary (an A100 asked for FP8 output or PDL) the
    function, the kernel-object entry and the warm-up raise a ValueError naming the
    argument and the GPU, and leave poisoned buffers as they were; what it can build
    runs and writes the specification's bytes. The interpreter stands in for the GPU:
    only the capability the launcher reads is replaced."""
    monkeypatch.setattr(launch, "device_capability", lambda device: capability)
    assert checks.fp8_supported(capability) == (capability >= (8, 9))
    assert checks.pdl_supported(capability) == (capability >= (9, 0))
    case = testing.Case(5, 2, 8, False, quantize, seed=sum(capability) + 2 * quantize + pdl)
    o, pos, cache = case.tensors("cpu")
    checked = checks.check_inputs(o, pos, cache, *case.args())
    out_buf, scale_buf = launch.allocate(checked, o.dtype, 2, False, quantize)
    testing.poison_like_vllm(out_buf, scale_buf)
    poisoned = testing.bits(out_buf).clone()
    call = dict(heads_per_group=8, quant_group_size=128, chunks_per_head=4, nope_dim=448,
                half_rope=32, tma_aligned_scales=False, quantize=quantize, fp8_max=448.0,
                launch_pdl=pdl, grid=(checked.tma_aligned_T, 16), body="block_rows",
                tokens_per_program=2, num_warps=4)
    key = launch.CompileKey(2, 1, 4, "block_rows", 8, 448, 64, 128, False, quantize, pdl)
    gpu = rf"got True on a compute capability {capability[0]}\.{capability[1]} GPU"
    if refused is None:
        _check(case, (2, 1, 4, "block_rows"), (o, pos, cache))
        launch.kernel_call(o, pos, cache, out_buf, scale_buf, 5, **call)
        want_bits, _ = testing.interpreter_expected(case, o, pos, cache)
        assert torch.equal(testing.bits(out_buf.transpose(0, 1)), want_bits)
        assert launch.warmup([key], "cpu") == 0
        return
    with pytest.raises(ValueError, match=rf"^fused_inv_rope_fp8_quant: {refused}: {gpu}; "
                                         rf"expected False there"):
        launch.fused_inv_rope_fp8_quant(o, pos, cache, *case.args(), launch_pdl=pdl)
    with pytest.raises(ValueError, match=rf"^kernel_call: {refused}: {gpu}"):
        launch.kernel_call(o, pos, cache, out_buf, scale_buf, 5, **call)
    assert torch.equal(testing.bits(out_buf), poisoned)
    if quantize:
        assert torch.all(testing.scale_storage(scale_buf.transpose(0, 1)).view(torch.int32)
                         == testing.POISON_WORD)
    good = key._replace(quantize=False, launch_pdl=False)
    with pytest.raises(ValueError, match=rf"^warmup: {refused}: {gpu}"):
        launch.warmup([good, key], "cpu")


def test_vllms_default_pdl_rule_is_never_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """``launch_pdl=None`` (vLLM's rule) on an A100 launches without PDL and runs."""
    monkeypatch.setattr(launch, "device_capability", lambda device: (8, 0))
    case = testing.Case(3, 1, 8, False, False, seed=9)
    o, pos, cache = case.tensors("cpu")
    got = launch.fused_inv_rope_fp8_quant(o, pos, cache, *case.args(), launch_pdl=None)
    assert torch.equal(testing.bits(got[0]), testing.interpreter_expected(case, o, pos, cache)[0])


@pytest.mark.parametrize("jit", [kernel.fused_inv_rope_fp8_quant_kernel,
                                 kernel.fused_inv_rope_fp8_quant_block_rows_kernel],
                         ids=BODIES)
def test_compile_key_is_the_constexprs(jit) -> None:
    """Every scalar that changes with T (and the head count) is unspecialised, the
    constexpr list is the kernel's constexprs in signature order after every run-time
    parameter, and the launcher passes one value per parameter; both bodies have the
    one signature, so one launch serves either."""
    params = list(inspect.signature(jit.fn).parameters.values())
    assert params == list(inspect.signature(
        kernel.fused_inv_rope_fp8_quant_kernel.fn).parameters.values())
    constexprs = [p.name for p in params if "constexpr" in str(p.annotation)]
    assert tuple(constexprs) == kernel.CONSTEXPRS
    assert [p.name for p in params][-len(constexprs):] == constexprs
    runtime = [p.name for p in params if p.name not in constexprs]
    assert set(kernel.RUNTIME_ARGS) <= set(runtime)
    assert set(kernel.RUNTIME_ARGS) == set(runtime[5:])  # no scalar is specialised
    dns = jit.kwargs.get("do_not_specialize")
    assert list(dns) == list(kernel.RUNTIME_ARGS)
    assert len(runtime) == 5 + 8  # five tensors, the launch's eight scalars


@triton.jit
def _exp2_ceil_log2_of(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n, other=1.0)
    tl.store(out_ptr + i, kernel._exp2_ceil_log2(x), mask=i < n)


def test_exp2_ceil_log2_thresholds() -> None:
    """The body's scale from the bits of ``x`` against ``exp2(ceil(log2(x)))`` with
    torch's float32 ``log2``, at every binade from 2**-43 up: its first 4,096 and last 64
    mantissas (every threshold lies in the first 23), 2**16 random floats of the range,
    and +inf. The cases are checked to hold, at every binade whose threshold is above 1,
    a mantissa that stays at 2**e as well as one that goes up."""
    exps = torch.arange(-43, 128, dtype=torch.int64)
    mantissas = torch.cat([torch.arange(0, 4096), torch.arange(2 ** 23 - 64, 2 ** 23)])
    bits = (((exps[:, None] + 127) << 23) | mantissas[None, :]).flatten()
    gen = torch.Generator().manual_seed(7)
    drawn = torch.randint(int(bits.min()), 0x7F800000, (1 << 16,), generator=gen)
    bits = torch.cat([bits, drawn, torch.tensor([0x7F800000])]).to(torch.int32)
    x = bits.view(torch.float32)
    exponent = torch.ceil(torch.log2(x))
    want = torch.where(exponent >= 128, torch.tensor(float("inf")),
                       torch.ldexp(torch.ones_like(x), exponent))
    got = torch.full_like(x, float("nan"))
    _exp2_ceil_log2_of[(1,)](x, got, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    bad = (got.view(torch.int32) != want.view(torch.int32)).nonzero().flatten()
    assert bad.numel() == 0, (f"{bad.numel()} of {x.numel()} scales differ, first x = "
                              f"{x[bad[:3]].tolist()}: got {got[bad[:3]].tolist()}, "
                              f"want {want[bad[:3]].tolist()}")
    binade = (bits[: exps.numel() * mantissas.numel()].view(exps.numel(), -1) >> 23) - 127
    stays = (want[: binade.numel()].view_as(binade) == torch.ldexp(
        torch.ones(binade.shape), binade.float())) & (mantissas[None, :] > 0)
    held = stays.any(dim=1)
    assert held.sum() >= 150, f"only {int(held.sum())} binades probe a rounding-down mantissa"


def test_interpreter_casts_are_not_round_to_nearest_even() -> None:
    """The gap the FP8 comparison above works around: 1.0625 lies halfway between the
    e4m3 values 1.0 and 1.125; IEEE rounding (torch, the GPU) picks the even 1.0, the
    interpreter 1.125; 1.00390625 truncates to bf16 1.0 in the interpreter, while RNE
    rounds 1.005859375 up."""
    x = torch.tensor([1.0625])
    assert testing.interpreter_cast(x, torch.float8_e4m3fn).item() != x.to(
        torch.float8_e4m3fn).view(torch.uint8).item()
    y = torch.tensor([1.005859375])
    assert testing.interpreter_cast(y, torch.bfloat16).item() != y.to(torch.bfloat16).view(
        torch.int16).item()


def test_fma32_rounds_once() -> None:
    """(1 + 2**-12)**2 - (1 + 2**-11) is 2**-24 exactly; two roundings give 0."""
    a = torch.tensor([1 + 2.0 ** -12])
    c = torch.tensor([-(1 + 2.0 ** -11)])
    assert reference.fma32(a, a, c).item() == 2.0 ** -24
    assert (a * a + c).item() == 0.0


def test_reference_undoes_the_forward_rotation() -> None:
    """The reference's rotation is the inverse of the interleaved forward RoPE (checked
    in float64 against the real table): its output of a rotated vector is the vector."""
    table = testing.rope_table("compress")
    g = torch.Generator().manual_seed(4)
    x = torch.randn((5, 3, 128), generator=g, dtype=torch.float64)
    pos = torch.tensor([0, 1, 4097, 65535, (1 << 20) - 1])
    cos, sin = table[pos, :32].double(), table[pos, 32:].double()
    fwd = x.clone()
    e, od = x[..., 64::2], x[..., 65::2]
    fwd[..., 64::2] = e * cos[:, None] - od * sin[:, None]
    fwd[..., 65::2] = od * cos[:, None] + e * sin[:, None]
    back = reference.rotate(fwd.float(), pos, table, 64, 64, "fma_cos").double()
    assert torch.allclose(back, x, atol=1e-5)
    assert not torch.allclose(fwd[..., 64:], x[..., 64:], atol=1e-2)


def test_rope_table_is_vllms_yarn_table() -> None:
    """Row p is cos || sin of p * inv_freq with DeepSeek-V4's YaRN inv_freq: full speed
    (1.0) in the fastest dimension, 1/16 of the base frequency in the slowest."""
    for kind, base, factor in (("compress", 160000.0, 16.0), ("swa", 10000.0, 1.0)):
        table = testing.rope_table(kind)
        assert table.shape == (1 << 20, 64) and table.dtype == torch.float32
        assert torch.equal(table[0], torch.cat((torch.ones(32), torch.zeros(32))))
        assert table[1, 0].item() == torch.tensor(1.0).cos().item()
        slowest = 1.0 / (factor * base ** (62 / 64))
        got = torch.atan2(table[1, 63], table[1, 31]).item()
        assert got == pytest.approx(slowest, rel=1e-4)


def test_warmup_and_counters_under_the_interpreter() -> None:
    """Nothing compiles under the interpreter; the warm-up still runs each key once."""
    key = launch.CompileKey(2, 4, 4, "head_rows", 8, 448, 64, 128, True, True, False)
    rows = launch.CompileKey(2, 1, 4, "block_rows", 8, 448, 64, 128, True, True, False)
    assert launch.warmup([key, tuple(key), rows], "cpu") == 0
    assert launch.compile_count() == 0
    assert launch.interpreting()
    assert launch.default_launch_pdl(torch.device("cpu")) is False
    with pytest.raises(ValueError, match=r"^warmup: "):
        launch.warmup([launch.CompileKey(3, 4, 4, "head_rows", 8, 448, 64, 128, True, True,
                                         False)], "cpu")
    with pytest.raises(ValueError, match=r"^warmup: body: got 'rows'"):
        launch.warmup([launch.CompileKey(2, 4, 4, "rows", 8, 448, 64, 128, True, True,
                                         False)], "cpu")
