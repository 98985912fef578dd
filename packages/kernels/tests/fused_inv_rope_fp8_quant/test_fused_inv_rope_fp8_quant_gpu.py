"""FusedInvRopeFP8Quant on the GPU: bit for bit against the plain-torch specification.

:mod:`dsv4_kernels.fused_inv_rope_fp8_quant.reference` rounds exactly as vLLM 0.33.0's
kernel does (the rotation as one fused multiply-add, ``fma(x, cos, x_partner * sin)``,
IEEE round-to-nearest-even casts), so it is the oracle here; this package never loads
vLLM. That vLLM's own kernel writes the same bytes is checked where vLLM is at hand: the
vllm-gpu tests through vLLM's real wrapper and custom op, and the bench gates against
the kernel extracted from the locked wheel, in the same run as the timings.

Every comparison covers the FP8 (or bf16) bytes, the scale buffer as a whole (pad rows
included), shapes, strides and dtypes. Graph tests capture the kernel, then replay it on
new data written into the captured inputs; no compile happens after warm-up.

The GPU decides what runs (:func:`.checks.check_arch`): on an H200 everything; on an
A100 (sm80, no FP8 e4m3 in Triton, no PDL) every test runs the unquantized output vLLM
runs there, and each FP8 or PDL call is checked to be refused with a ``ValueError``
that names the argument, with nothing written.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from dsv4_kernels.fused_inv_rope_fp8_quant import checks, kernel, launch, reference, testing

pytestmark = pytest.mark.gpu
HEAD_ROWS = [(1, 1, 1), (1, 2, 1), (1, 4, 1), (2, 2, 1), (2, 2, 2), (2, 4, 4), (4, 2, 4),
             (1, 8, 8), (8, 1, 4), (4, 4, 8)]
BLOCK_ROWS = [(1, 1, 1), (1, 1, 2), (2, 1, 4), (4, 1, 8), (4, 2, 8), (2, 2, 4), (8, 1, 16)]
TILES = ([(*tile, "head_rows") for tile in HEAD_ROWS]
         + [(*tile, "block_rows") for tile in BLOCK_ROWS])
"""(tokens_per_program, heads_per_program, num_warps, body): both bodies, each at the
tiles that matter for it."""


@pytest.fixture(scope="module")
def dev() -> str:
    if not torch.cuda.is_available() or launch.interpreting():
        raise RuntimeError("GPU tests need a CUDA device and TRITON_INTERPRET unset")
    return "cuda"


@pytest.fixture(scope="module")
def fp8(dev: str) -> bool:
    """Whether this GPU builds the FP8 output (sm89 and newer)."""
    return launch.quantize_supported(torch.device(dev))


@pytest.fixture(scope="module")
def pdl(dev: str) -> bool:
    """Whether this GPU launches with PDL (sm90 and newer; vLLM's rule)."""
    return launch.default_launch_pdl(torch.device(dev))


def _refused(arg: str, fn: Any, *args: Any, **kwargs: Any) -> None:
    """``fn(*args, **kwargs)`` is refused for ``arg`` on this GPU
    (:func:`checks.check_arch`)."""
    with pytest.raises(ValueError, match=rf": {arg}: got True on a compute capability "
                                         r"\d+\.\d+ GPU; expected False there"):
        fn(*args, **kwargs)


def _spec(o: torch.Tensor, pos: torch.Tensor, cache: torch.Tensor, *args: Any) -> Any:
    """What vLLM's kernel writes, from the specification (allocated as vLLM does)."""
    return reference.fused_inv_rope_fp8_quant(o, pos, cache, *args)


@pytest.fixture(scope="module")
def tables(dev: str) -> dict[str, torch.Tensor]:
    return {kind: testing.rope_table(kind, dev) for kind in testing.ROPE_KINDS}


def _ours(case: testing.Case, tensors: tuple, tile: tuple, **kw: Any) -> Any:
    o, pos, cache = tensors
    return launch.fused_inv_rope_fp8_quant(o, pos, cache, *case.args(),
                                           tokens_per_program=tile[0],
                                           heads_per_program=tile[1], num_warps=tile[2],
                                           body=tile[3], **kw)


def _cases(count: int, seed: int) -> list[testing.Case]:
    """Seeded calls: T up to 8,192, local heads 8..128 (T x heads bounded for memory)."""
    rng = random.Random(seed)
    out = []
    for i, case in enumerate(testing.random_cases(count, seed=seed, max_tokens=8192)):
        t = case.num_tokens
        if rng.random() < 0.3:
            t = rng.choice([1, 2, 3, 4, 63, 64, 65, 511, 512, 513, 2048, 8191, 8192])
        t = max(1, min(t, (8192 * 64) // case.num_heads))
        out.append(testing.Case(t, case.n_groups, case.heads_per_group,
                                case.tma_aligned_scales, case.quantize, seed + i,
                                rope_kind=case.rope_kind))
    return out


def test_bitwise_equal_to_the_specification_over_generated_calls(tables: dict,
                                                                 fp8: bool) -> None:
    """520 generated calls, each with a tile: FP8 bytes, scales and pad rows equal (on a
    GPU without FP8, the quantized calls are refused and the others compared)."""
    cases = _cases(520, seed=2024)
    assert len(cases) >= 500
    compared = 0
    for i, case in enumerate(cases):
        tensors = case.tensors("cuda", tables[case.rope_kind])
        if case.quantize and not fp8:
            _refused("quantize", _ours, case, tensors, TILES[i % len(TILES)])
            continue
        theirs = _spec(*tensors, *case.args())
        ours = _ours(case, tensors, TILES[i % len(TILES)])
        testing.assert_same(ours, theirs, f"{case} tile {TILES[i % len(TILES)]}")
        compared += 1
    assert compared == len(cases) if fp8 else compared >= 100


@pytest.mark.parametrize("heads", [(1, 8), (2, 8), (4, 8), (8, 8), (16, 8)])
@pytest.mark.parametrize("t", [1, 3, 64, 513, 8192])
def test_head_counts_and_token_counts(tables: dict, heads: tuple[int, int], t: int,
                                      fp8: bool) -> None:
    """8/16/32/64/128 local heads, T up to 8,192, both scale layouts, every tile."""
    for tma in (False, True):
        case = testing.Case(t, heads[0], heads[1], tma, fp8, seed=t + heads[0])
        tensors = case.tensors("cuda", tables["compress"])
        theirs = _spec(*tensors, *case.args())
        for tile in TILES:
            testing.assert_same(_ours(case, tensors, tile), theirs, f"{case} {tile}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_other_o_dtypes_are_refused_before_anything_is_written(tables: dict,
                                                               dtype: torch.dtype) -> None:
    """Only bf16 ``o`` is taken (:data:`checks.O_DTYPES`): with fp32 the compiler fuses
    the rotation's other product, so those bytes would not be vLLM's. The function and
    the kernel-object entry raise a ValueError naming ``o`` and leave poisoned buffers
    as they were (the plugin then runs vLLM's kernel)."""
    case = testing.Case(64, 8, 8, False, True, seed=11)
    o, pos, cache = case.tensors("cuda", tables["compress"])
    wide = o.to(dtype)
    with pytest.raises(ValueError, match=r"o: got dtype torch\.float.*expected torch\.bfloat16"):
        launch.fused_inv_rope_fp8_quant(wide, pos, cache, *case.args())
    checked = checks.check_inputs(o, pos, cache, *case.args())
    out_buf, scale_buf = launch.allocate(checked, o.dtype, case.n_groups, False, True)
    testing.poison_like_vllm(out_buf, scale_buf)
    before = (testing.bits(out_buf).clone(),
              testing.bits(testing.scale_storage(scale_buf.transpose(0, 1))).clone())
    with pytest.raises(ValueError, match="o: got dtype"):
        launch.kernel_call(wide, pos, cache, out_buf, scale_buf, case.num_tokens,
                           **_kernel_kwargs(case, True))
    torch.cuda.synchronize()
    assert torch.equal(testing.bits(out_buf), before[0])
    assert torch.equal(testing.bits(testing.scale_storage(scale_buf.transpose(0, 1))), before[1])


def _kernel_kwargs(case: testing.Case, pdl: bool) -> dict:
    aligned = -(-case.num_tokens // 4) * 4 if case.quantize else case.num_tokens
    return dict(heads_per_group=case.heads_per_group, quant_group_size=case.quant_group_size,
                chunks_per_head=(case.nope_dim + case.rope_dim) // case.quant_group_size,
                nope_dim=case.nope_dim, half_rope=case.rope_dim // 2,
                tma_aligned_scales=case.tma_aligned_scales, quantize=case.quantize,
                fp8_max=448.0, launch_pdl=pdl, grid=(aligned, case.num_heads))


@pytest.mark.parametrize("with_pdl", [True, False])
def test_kernel_object_entry_on_poisoned_buffers(tables: dict, with_pdl: bool, fp8: bool,
                                                 pdl: bool) -> None:
    """The entry a plugin uses in place of vLLM's kernel object writes poisoned vLLM
    buffers completely (pad rows zero), as the specification says, PDL on or off, at
    vLLM's launch shape and at a wide tile of each body; a call this GPU cannot build
    (FP8 output or PDL) is refused and leaves them poisoned."""
    for case in _cases(30, seed=5):
        o, pos, cache = case.tensors("cuda", tables[case.rope_kind])
        checked = checks.check_inputs(o, pos, cache, *case.args())
        refused = ("quantize" if case.quantize and not fp8
                   else "launch_pdl" if with_pdl and not pdl else None)
        bufs = []
        for tile in (launch.BASELINE_TILE, (2, 4, 4, "head_rows"), (2, 1, 4, "block_rows")):
            out_buf, scale_buf = launch.allocate(checked, o.dtype, case.n_groups,
                                                 case.tma_aligned_scales, case.quantize)
            testing.poison_like_vllm(out_buf, scale_buf)
            poisoned = testing.bits(out_buf).clone()
            args = (o, pos, cache, out_buf, scale_buf, case.num_tokens)
            kwargs = dict(_kernel_kwargs(case, with_pdl), tokens_per_program=tile[0],
                          heads_per_program=tile[1], num_warps=tile[2], body=tile[3])
            if refused:
                _refused(refused, launch.kernel_call, *args, **kwargs)
                torch.cuda.synchronize()
                assert torch.equal(testing.bits(out_buf), poisoned), case
                continue
            launch.kernel_call(*args, **kwargs)
            bufs.append((out_buf.transpose(0, 1), scale_buf.transpose(0, 1)
                         if case.quantize else scale_buf))
        if refused:
            continue
        want = _spec(o, pos, cache, *case.args())
        for got in bufs:
            testing.assert_same(got, want, f"{case} pdl={with_pdl}")
        for out, scales in bufs[1:] if case.quantize else ():
            assert not torch.any(testing.bits(out) == 0x7F)
            storage = testing.scale_storage(scales).view(torch.int32)
            assert not torch.any(storage == testing.POISON_WORD)


def test_cuda_graph_replay_with_new_data(tables: dict, fp8: bool, pdl: bool) -> None:
    """Captured once per shape, replayed on new attention outputs and positions copied
    into the captured inputs: every replay writes what the specification says of the new
    data, and nothing compiles after the warm-up."""
    shapes = [(1, 8), (3, 8), (64, 8), (130, 1), (512, 8), (512, 1), (2048, 8)]
    tiles = {"small": (2, 1, 4, "block_rows"), "mid": (2, 2, 2, "head_rows"),
             "large": (1, 2, 1, "head_rows")}
    keys = [launch.CompileKey(*t, 8, 448, 64, 128, tma, fp8, pdl)
            for t in tiles.values() for tma in (False, True)]
    launch.warmup(keys, "cuda")
    for tma in (False, True):
        for t, groups in shapes:
            case = testing.Case(t, groups, 8, tma, fp8, seed=t)
            o, pos, cache = case.tensors("cuda", tables["compress"])
            before = launch.compile_count()
            tile = tiles["large" if t >= 256 else "mid" if t >= 64 else "small"]
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                res = _ours(case, (o, pos, cache), tile)
            for step in range(3):
                new = testing.Case(t, groups, 8, tma, fp8, seed=1000 * step + t)
                new_o, new_pos, _ = new.tensors("cuda", tables["compress"])
                o.copy_(new_o)
                pos.copy_(new_pos)
                graph.replay()
                torch.cuda.synchronize()
                testing.assert_same(res, _spec(o, pos, cache, *case.args()),
                                    f"replay {step} {case}")
            assert launch.compile_count() == before


def test_no_compile_after_warmup_for_any_token_count(tables: dict, fp8: bool,
                                                      pdl: bool) -> None:
    """One warm-up per key covers every T (1..8,192) and every head count at the same
    heads per group: the count of binaries does not move. (Keys take the FP8 output and
    PDL where this GPU has them.)"""
    keys = [launch.CompileKey(1, 2, 1, "head_rows", 8, 448, 64, 128, False, fp8, pdl),
            launch.CompileKey(4, 2, 4, "head_rows", 8, 448, 64, 128, True, fp8, pdl),
            launch.CompileKey(2, 2, 2, "head_rows", 8, 448, 64, 128, False, False, pdl),
            launch.CompileKey(4, 1, 8, "block_rows", 8, 448, 64, 128, False, fp8, pdl),
            launch.CompileKey(2, 1, 4, "block_rows", 8, 448, 64, 128, True, fp8, pdl),
            launch.CompileKey(1, 1, 2, "block_rows", 8, 448, 64, 128, False, False, pdl)]
    launch.warmup(keys, "cuda")
    before = launch.compile_count()
    assert launch.warmup(keys, "cuda") == 0
    for t in (1, 2, 3, 4, 5, 17, 64, 100, 513, 4096, 8192):
        for groups in (1, 2, 8):
            for key in keys:
                case = testing.Case(t, groups, 8, key.tma_aligned_scales, key.quantize, seed=t)
                tensors = case.tensors("cuda", tables["compress"])
                _ours(case, tensors, key[:4])
    torch.cuda.synchronize()
    assert launch.compile_count() == before


@pytest.mark.parametrize("tma", [False, True])
def test_special_values_bitwise(tables: dict, tma: bool, fp8: bool) -> None:
    """The extremes, subnormals and signed zeros of :func:`testing.add_special_values`:
    every tile writes the specification's bytes (which divides each lane by its scale)
    and scales. (Infinities and NaN are compared with vLLM's own kernel in the bench's
    bitwise sweep: what Triton's clamp does with a NaN is the kernel's, not torch's.)"""
    case = testing.Case(64, 8, 8, tma, fp8, seed=31)
    o, pos, cache = case.tensors("cuda", tables["compress"])
    testing.add_special_values(o)
    want = _spec(o, pos, cache, *case.args())
    if fp8 and not tma:
        assert (want[1] == 2.0 ** 120).any() and (want[1] == 2.0 ** -42).any()
    for tile in TILES:
        testing.assert_same(_ours(case, (o, pos, cache), tile), want, f"special values {tile}")


def _blocks_at_every_scale(case: testing.Case, o: torch.Tensor, seed: int) -> None:
    """Give the 128-lane blocks of ``o`` amaxes ``448 * 2**k * m``, ``m`` in (0.5, 0.75]
    and ``k`` cycling over -44..120, so the blocks' scales reach every power of two the
    kernel can write, ``2**-42`` (the eps floor, which k = -44 and -43 land on) to
    ``2**120`` (the last below bf16's largest value over 448). Every value is finite:
    infinities are the bench's sweep against vLLM's kernel."""
    blocks = o.view(-1, case.quant_group_size)
    g = torch.Generator(device=o.device).manual_seed(seed)
    k = torch.arange(blocks.shape[0], device=o.device) % 165 - 44
    m = 0.5 + 0.25 * torch.rand(blocks.shape[0], generator=g, device=o.device)
    shape = torch.rand(blocks.shape, generator=g, device=o.device) * 2 - 1
    shape = shape / shape.abs().amax(dim=1, keepdim=True)
    # Below bf16's largest value (3.39e38), and in the block that holds the rope lanes
    # low enough that the rotation (up to sqrt(2) larger) stays finite in fp32: that
    # block's exponents stop at 119, the others reach 120.
    rope_block = torch.arange(blocks.shape[0], device=o.device) % (
        o.shape[-1] // case.quant_group_size) == case.nope_dim // case.quant_group_size
    cap = torch.where(rope_block, 2.3e38, 3.3e38).double()
    amax = torch.minimum(448.0 * torch.ldexp(m.double(), k.double()), cap)
    blocks.copy_((shape.double() * amax[:, None]).to(o.dtype))
    assert torch.isfinite(o).all()


@pytest.mark.parametrize("tma", [False, True])
def test_every_scale_exponent_bitwise(tables: dict, tma: bool, fp8: bool) -> None:
    """Every scale the body can write, ``2**-42`` to ``2**120``, against the
    specification: the body's reciprocal is made from the scale's exponent bits, so each
    exponent is its own case. (The rotation moves the rope block's amax by up to a
    factor of sqrt(2), which only shifts which block lands on which exponent.) A GPU
    without FP8 output refuses these calls, every tile of both bodies."""
    case = testing.Case(83, 1, 8, tma, True, seed=43)
    o, pos, cache = case.tensors("cuda", tables["compress"])
    _blocks_at_every_scale(case, o, seed=5)
    if not fp8:
        for tile in TILES:
            _refused("quantize", _ours, case, (o, pos, cache), tile)
        return
    want = _spec(o, pos, cache, *case.args())
    if not tma:
        found = {int(e) for e in torch.log2(want[1][want[1] > 0]).tolist()}
        assert set(range(-42, 121)) <= found, sorted(set(range(-42, 121)) - found)
    for tile in TILES:
        testing.assert_same(_ours(case, (o, pos, cache), tile), want, f"every scale {tile}")


@pytest.mark.parametrize(("nope", "group"),
                         [(448, 128), (448, 256), (448, 32), (64, 32), (192, 64), (64, 8)])
def test_head_geometries(dev: str, nope: int, group: int, fp8: bool) -> None:
    """Rope lanes inside one quantisation block (DeepSeek-V4's 448 + 64 in 128-lane
    blocks, and 256-lane blocks with 192 nope lanes before them: the body's one-block
    path) and over two or more (32- and 8-lane blocks, the general path; 8-lane blocks
    start 16 bytes apart, so no 32-byte vector may be assumed), bitwise against the
    specification at every tile; packed UE8M0 scales wherever the block count is a
    multiple of 4."""
    table = testing.rope_table("compress", dev)
    for tma in (False, True) if (nope + 64) // group % 4 == 0 else (False,):
        case = testing.Case(37, 2, 4, tma, fp8, seed=nope + group, nope_dim=nope,
                            quant_group_size=group)
        tensors = case.tensors(dev, table)
        want = _spec(*tensors, *case.args())
        for tile in TILES:
            testing.assert_same(_ours(case, tensors, tile), want,
                                f"nope {nope}, blocks of {group}, tile {tile}")


@triton.jit
def _exp2_ceil_log2_mismatches(count_ptr, first_bits, last_bits, BLOCK: tl.constexpr):
    bits = tl.minimum(first_bits.to(tl.int64) + tl.program_id(0) * BLOCK
                      + tl.arange(0, BLOCK), last_bits).to(tl.int32)
    x = bits.to(tl.float32, bitcast=True)
    want = tl.math.exp2(tl.ceil(tl.log2(x))).to(tl.int32, bitcast=True)
    got = kernel._exp2_ceil_log2(x).to(tl.int32, bitcast=True)
    tl.store(count_ptr + tl.program_id(0), tl.sum((want != got).to(tl.int32), axis=0))


def test_exp2_ceil_log2_every_float(dev: str) -> None:
    """The scale made from the bits of ``x`` equals vLLM's ``tl.math.exp2(tl.ceil(
    tl.log2(x)))``, compiled for this GPU, at every float32 ``x`` the body can meet: from
    2**-43 (below the smallest, ``eps / 448``) to 2**121 (above the largest finite one,
    float32's largest over 448, about 2**119.2), about 1.4 billion values, and at +inf and
    the NaN the GPU's arithmetic produces. (Above 2**121 ``exp2`` of an integer need not
    be exact on every GPU, and no block reaches it.)"""
    block = 1 << 12
    for lo, hi in ((84 << 23, 248 << 23), (0x7F800000, 0x7F800000), (0x7FFFFFFF, 0x7FFFFFFF)):
        programs = (hi - lo) // block + 1
        counts = torch.full((programs,), -1, dtype=torch.int32, device=dev)
        _exp2_ceil_log2_mismatches[(programs,)](counts, lo, hi, BLOCK=block)
        assert int(counts.min()) >= 0, "a program did not run"
        bad = counts.nonzero().flatten()
        assert bad.numel() == 0, (f"{int(counts.sum())} scales differ, the first in bits "
                                  f"{hex(lo + int(bad[0]) * block)} + [0, {block})")


@triton.jit(do_not_specialize=["n", "spin"])
def _late_copy(src_ptr, dst_ptr, sink_ptr, n, spin, BLOCK: tl.constexpr,
               launch_pdl: tl.constexpr):
    """Copy ``src`` to ``dst`` after ``spin`` dependent volatile loads (each a round trip
    to memory, which no compiler may drop); with ``launch_pdl`` it first lets its
    dependents launch and never waits on its own predecessor, so a dependent that does
    not wait runs during the spin, and this kernel itself, as a reader, can copy before
    its predecessor has written (the control below)."""
    if launch_pdl:
        tl.extra.cuda.gdc_launch_dependents()
    acc = tl.zeros((), dtype=tl.int32)
    i = 0
    while i < spin:
        acc += tl.load(sink_ptr + (acc & 1), volatile=True)
        i += 1
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)
    tl.store(sink_ptr + 2 + tl.program_id(0), acc)


def _copy_late(src: torch.Tensor, dst: torch.Tensor, spin: int, sink: torch.Tensor) -> None:
    """One launch and nothing else (``sink`` is allocated by the caller, so no other
    kernel comes between two of these)."""
    n = src.numel()
    grid = triton.cdiv(n, 1024)
    assert sink.numel() >= grid + 2
    _late_copy[(grid,)](src, dst, sink, n, spin, BLOCK=1024, launch_pdl=True)


SPIN = 4000
"""Dependent loads the late writer makes before it writes ``o``: well over 100 µs on a
current GPU, far longer than a launch takes to follow it."""


@pytest.mark.parametrize("tile", [(1, 2, 1, "head_rows"), (2, 1, 4, "block_rows")],
                         ids=["head_rows", "block_rows"])
@pytest.mark.parametrize("graph", [False, True])
def test_pdl_wait_guards_o(tables: dict, graph: bool, tile: tuple, fp8: bool,
                          pdl: bool) -> None:
    """The body reads the positions and their cos/sin rows before its PDL wait and ``o``
    after it. Here the kernel just before it releases its dependents at once, spins
    through thousands of dependent loads and only then writes ``o``; the positions were
    written by an ordinary copy before that, as vLLM's step writes them before the
    forward. The output must be the
    specification of the new ``o`` and positions, eagerly and replayed from a graph.

    The control shows that the setup really overlaps the two kernels: a reader launched
    the same way that does not wait copies out the old ``o``. A GPU without PDL refuses
    ``launch_pdl=True`` instead (vLLM never asks it there)."""
    case = testing.Case(64, 8, 8, False, fp8, seed=41)
    o, pos, cache = case.tensors("cuda", tables["compress"])
    if not pdl:
        _refused("launch_pdl", _ours, case, (o, pos, cache), tile, launch_pdl=True)
        return
    new_o, new_pos, _ = testing.Case(64, 8, 8, False, fp8, seed=42).tensors(
        "cuda", tables["compress"])
    old_o, old_pos, seen = o.clone(), pos.clone(), torch.empty_like(o)
    sink = torch.zeros(triton.cdiv(o.numel(), 1024) + 2, dtype=torch.int32, device="cuda")

    def step() -> Any:
        pos.copy_(new_pos)
        _copy_late(new_o, o, SPIN, sink)
        return _ours(case, (o, pos, cache), tile, launch_pdl=True)

    def control() -> None:
        _copy_late(new_o, o, SPIN, sink)
        _copy_late(o, seen, 0, sink)

    def reset() -> None:
        o.copy_(old_o)
        pos.copy_(old_pos)
        seen.fill_(0)
        torch.cuda.synchronize()

    want = _spec(new_o, new_pos, cache, *case.args())
    step()  # builds every binary, so nothing compiles between the two launches
    control()
    reset()
    if graph:
        captured, checked = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            res = step()
        with torch.cuda.graph(checked):
            control()
        reset()
        captured.replay()
        torch.cuda.synchronize()
        testing.assert_same(res, want, "pdl wait, graph replay")
        reset()
        checked.replay()
    else:
        res = step()
        torch.cuda.synchronize()
        testing.assert_same(res, want, "pdl wait, eager")
        reset()
        control()
    torch.cuda.synchronize()
    assert torch.equal(seen, old_o), "the control reader did not overlap the late writer"
