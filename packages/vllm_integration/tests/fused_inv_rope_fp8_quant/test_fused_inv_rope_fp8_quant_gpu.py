"""On the GPU: the plugin's stand-in inside vLLM 0.33.0's real ``fused_inv_rope_fp8_quant``.

Everything runs through vLLM's own wrapper, custom op and op implementation (which
allocates the buffers, poisoned here, and launches the module global), with vLLM's
kernel object behind the global (plugin off) or the stand-in (on):

- over 500 generated calls, the FP8 (or bf16) bytes and the whole scale buffer (pad
  rows included) are bitwise equal, on and off;
- vLLM's own JIT warm-up registry, fed by ``register_warmup()`` as each attention
  layer's ``__init__`` calls it, warms dsv4's tiles for the deployment;
- after that warm-up, graphs captured with the plugin on at every capture size compile
  nothing, replay dsv4's kernel (the profiler's kernel names on replay, against a graph
  captured with the plugin off, which replays vLLM's) and equal vLLM's eager result on
  new data.

Two things vLLM's CUDA platform would provide are provided here, because with vLLM from
its Python sources (``DSV4_VLLM_SOURCES``) the process-wide platform is
``UnspecifiedPlatform`` (see ``sources_platform.py``): the op's CUDA kernel (vLLM
registers its implementation under the platform's dispatch key, which is then ``CPU``;
:func:`op_on_cuda` registers the same implementation function for ``CUDA``, as vLLM's
CUDA platform does), and the two questions the op module asks its ``current_platform``
(``is_arch_support_pdl()`` and ``get_device_capability()``), answered by
:class:`OpPlatform` as vLLM's ``CudaPlatform`` answers them (PDL from compute
capability 9) or with PDL forced off. With vLLM installed, the op already has its CUDA
kernel and only the platform answers are substituted.

What the GPU can build decides what runs. vLLM quantizes only when ``wo_a``'s weights are
FP8 and launches with PDL by ``is_arch_support_pdl()``; Triton builds FP8 e4m3 output
from sm89 and PDL from sm90, and dsv4 refuses the rest with a ``ValueError``. So on an
A100 the bitwise test's calls are unquantized and without PDL (what vLLM runs there), the
graph test captures the unquantized deployment, and the warm-up test checks that
vLLM's own warm-up keys (FP8 only: ``get_warmup_keys`` passes ``quantize=True``) are
refused by dsv4 before anything launches.

The scale layout: vLLM's ``compute_fp8_einsum_recipe`` picks packed UE8M0
(``tma_aligned_scales=True``) only from compute capability 10, so on an H200 a served
layer always passes ``False``; vLLM's kernel computes both layouts on any arch, so the
bitwise test covers both, and the graph tests use the one vLLM's rule picks here.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from dsv4_kernels.fused_inv_rope_fp8_quant import launch, testing
from dsv4_policy.kernels import fused_inv_rope_fp8_quant as policy
from dsv4_vllm import plugin
from dsv4_vllm.kernels.fused_inv_rope_fp8_quant import TARGET, Deployment
from firq_vllm_check import POISON_BYTE, PoisonedTorch

pytestmark = pytest.mark.gpu

OP = "vllm::fused_inv_rope_fp8_quant_kernel"
OUR_KERNELS = {"head_rows": "fused_inv_rope_fp8_quant_kernel",
               "block_rows": "fused_inv_rope_fp8_quant_block_rows_kernel"}
"""dsv4's two bodies as the profiler names them."""
PROVENANCE = 'provenance = { gpu = "test", date = "2026-12-02", probes = 12, ' \
             'worst_speedup = "1.000x" }'
TABLE = policy.loads_table(f"""schema = 1

[[entry]]
id = "decode"
match = {{ num_tokens = {{ min = 0, max = 64 }} }}
launch = {{ tokens_per_program = 1, heads_per_program = 8, num_warps = 4 }}
{PROVENANCE}

[[entry]]
id = "prefill"
match = {{ num_tokens = {{ min = 65, max = 2147483647 }} }}
launch = {{ tokens_per_program = 4, heads_per_program = 2, num_warps = 4, body = "block_rows" }}
{PROVENANCE}
""")
"""Every key hits (no arch in the match: the GPU's own arch resolves), two tiles, one of
each body."""
CAPTURE_SIZES = (1, 2, 3, 4, 8, 16, 64, 65, 256, 512)
"""FULL-graph decode batch sizes (vLLM captures 1, 2, 4, then steps of 8 and 16; 3 and
65 stand for sizes a speculative or custom capture list adds), across both tiles."""


class OpPlatform:
    """What the op module asks vLLM's platform, answered as vLLM's ``CudaPlatform`` does
    (``pdl`` None: compute capability 9 or newer), or with PDL forced."""

    def __init__(self) -> None:
        self.pdl: bool | None = None

    def is_arch_support_pdl(self) -> bool:
        if self.pdl is not None:
            return self.pdl
        return torch.cuda.get_device_capability(torch.cuda.current_device())[0] >= 9

    def get_device_capability(self, device_id: int = 0) -> Any:
        from vllm.platforms.interface import DeviceCapability

        major, minor = torch.cuda.get_device_capability(device_id)
        return DeviceCapability(major=major, minor=minor)


@pytest.fixture(scope="module")
def cuda() -> torch.device:
    """The current CUDA device (the conftest's gate fails a gpu test without one)."""
    if launch.interpreting():
        raise RuntimeError("GPU tests need TRITON_INTERPRET unset")
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="module")
def ops(cuda: torch.device) -> Any:
    return importlib.import_module(TARGET.module)


@pytest.fixture(scope="module")
def op_on_cuda(ops: Any) -> Iterator[None]:
    """vLLM's op with its implementation registered for CUDA, as vLLM's CUDA platform
    registers it at import (already so with vLLM installed)."""
    if torch._C._dispatch_has_kernel_for_dispatch_key(OP, "CUDA"):
        yield
        return
    library = torch.library.Library("vllm", "IMPL")
    library.impl("fused_inv_rope_fp8_quant_kernel", ops._fused_inv_rope_fp8_quant_kernel_impl,
                 "CUDA")
    yield
    library._destroy()


@pytest.fixture
def platform(ops: Any, op_on_cuda: None, monkeypatch: pytest.MonkeyPatch) -> OpPlatform:
    answers = OpPlatform()
    monkeypatch.setattr(ops, "current_platform", answers)
    return answers


@pytest.fixture(scope="module")
def tables(cuda: torch.device) -> dict[str, torch.Tensor]:
    """DeepSeek-V4-Flash's real ``cos_sin_cache`` tables (1M rows) on the GPU."""
    return {kind: testing.rope_table(kind, str(cuda)) for kind in testing.ROPE_KINDS}


@pytest.fixture
def stand_in(pristine_vllm: Any, ops: Any, platform: OpPlatform) -> Iterator[Any]:
    original = getattr(ops, TARGET.attribute)
    assert plugin.register({}) is True
    dispatch = plugin.active(TARGET.name)
    dispatch.configure(table=TABLE)  # the GPU's own arch (DeviceArch)
    yield dispatch, original
    plugin.unregister()


def _set(ops: Any, obj: Any) -> None:
    setattr(ops, TARGET.attribute, obj)


def _no_poison_left(result: tuple[torch.Tensor, torch.Tensor]) -> bool:
    out, scales = result
    word = POISON_BYTE if out.element_size() == 1 else -1
    if bool((testing.bits(out) == word).any()):
        return False
    return not scales.numel() or not bool(
        (testing.scale_storage(scales).view(torch.int32) == -1).any())


def _cases(count: int, seed: int, fp8: bool = True, pdl_ok: bool = True
           ) -> list[tuple[testing.Case, bool | None]]:
    """Seeded calls with their PDL answer: T 1..8,192 (non-multiples of 4, and the
    ends), local heads 8..128 (DeepSeek-V4's 8 heads per group at TP 8..1, 128 heads,
    and other groupings), both scale layouts, quantize on and off, both rope tables.
    T x heads stays within 8,192 x 64 (memory); the rarer groupings take quantize and
    PDL on only and T up to 64 (one tile), which bounds the binaries the run compiles
    (about 18 of dsv4's and as many of vLLM's). On a GPU without FP8 output (``fp8``
    false) or PDL (``pdl_ok`` false) the same draws are made and those flags turned off,
    as vLLM turns them off there."""
    rng = random.Random(seed)
    dsv4 = [(1, 8), (2, 8), (4, 8), (8, 8), (16, 8)]
    other = [(1, 16), (2, 4), (8, 1)]
    ends = [1, 2, 3, 4, 5, 7, 63, 64, 65, 66, 511, 512, 513, 2047, 4095, 4097, 8191, 8192]
    found = []
    for i in range(count):
        common = rng.random() < 0.85
        groups, hpg = rng.choice(dsv4 if common else other)
        t = rng.choice([rng.choice(ends), rng.randint(1, 600), rng.randint(1, 8192)])
        t = max(1, min(t, 8192 * 64 // (groups * hpg) if common else 64))
        quantize = rng.random() < 0.75 if common else True
        pdl = (rng.random() < 0.5 if quantize else None) if common else None
        quantize = quantize and fp8
        pdl = pdl and pdl_ok if pdl is not None else None
        found.append((testing.Case(t, groups, hpg, rng.random() < 0.5, quantize,
                                   seed=seed * 10_000 + i,
                                   rope_kind=rng.choice(testing.ROPE_KINDS)), pdl))
    return found


def test_vllms_wrapper_is_bitwise_equal_plugin_on_and_off(stand_in, ops, platform, tables,
                                                          cuda, monkeypatch) -> None:
    dispatch, original = stand_in
    dispatch.lazy_warmup = False  # compile only what the calls use (the next tests warm)
    monkeypatch.setattr(ops, "torch", PoisonedTorch())
    fp8, pdl_ok = launch.quantize_supported(cuda), launch.default_launch_pdl(cuda)
    cases = _cases(520, seed=3, fp8=fp8, pdl_ok=pdl_ok)
    for case, pdl in cases:
        platform.pdl = pdl
        o, pos, cache = case.tensors(cuda, tables[case.rope_kind])
        _set(ops, original)
        want = ops.fused_inv_rope_fp8_quant(o, pos, cache, *case.args())
        _set(ops, dispatch)
        got = ops.fused_inv_rope_fp8_quant(o, pos, cache, *case.args())
        testing.assert_same(got, want, f"{case} pdl={platform.is_arch_support_pdl()}")
        assert _no_poison_left(got) and _no_poison_left(want), case
    assert dispatch.hits == len(cases) and dispatch.misses == 0
    # What the calls covered.
    seen = [(c.num_tokens, c.num_heads, c.tma_aligned_scales, c.quantize) for c, _ in cases]
    assert {(tma, q) for _, _, tma, q in seen} == {(a, b) for a in (0, 1)
                                                   for b in ((0, 1) if fp8 else (0,))}
    assert {t for t, *_ in seen} >= {1, 3, 8192} and any(t % 4 for t, *_ in seen)
    assert {h for _, h, *_ in seen} == {8, 16, 32, 64, 128}
    assert {p for _, p in cases} == ({True, False, None} if pdl_ok else {False, None})


def _vllm_config(tp: int) -> SimpleNamespace:
    """What vLLM's ``get_warmup_keys`` reads: DeepSeek-V4-Flash's head geometry and TP."""
    hf = SimpleNamespace(num_attention_heads=64, o_groups=8, head_dim=512, qk_rope_head_dim=64)
    return SimpleNamespace(model_config=SimpleNamespace(hf_config=hf),
                           parallel_config=SimpleNamespace(tensor_parallel_size=tp))


def _served_tma() -> bool:
    """``compute_fp8_einsum_recipe``'s scale layout for this GPU (packed from SM 10)."""
    return torch.cuda.get_device_capability()[0] >= 10


@pytest.mark.parametrize("tp", [1, 8])
def test_vllms_jit_warm_up_registry_warms_dsv4s_tiles(stand_in, ops, cuda, tp) -> None:
    """As vLLM starts: every attention layer's ``__init__`` calls
    ``_FUSED_INV_ROPE_FP8_QUANT_KERNEL.register_warmup()`` (the stand-in, read from the
    module global), and the worker's ``kernel_warmup`` runs the registry: vLLM's kernel
    and dsv4's tiles for the layer's deployment are built, and later calls of every T
    compile nothing."""
    from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry

    dispatch, _ = stand_in
    config = _vllm_config(tp)
    if not launch.quantize_supported(cuda):
        # vLLM names only the FP8 output, which this GPU cannot build: dsv4 refuses
        # every binary of it up front (vLLM's own warm-up of its kernel fails here too).
        deployments = dispatch.start_up.get_warmup_keys(config)
        assert deployments and all(d.quantize for d in deployments), deployments
        for d in deployments:
            key = launch.CompileKey(*launch.BASELINE_TILE, d.heads_per_group, d.nope_dim,
                                    d.rope_dim, d.quant_group_size, d.tma_aligned_scales,
                                    d.quantize, d.launch_pdl)
            with pytest.raises(ValueError, match=r"^warmup: quantize: got True on a compute"):
                launch.warmup([key], cuda)
        return
    registry = JitWarmupRegistry(config)
    with registry.activate():
        for _ in range(43):
            getattr(ops, TARGET.attribute).register_warmup()
    assert len(registry) == 2
    registry.warmup()
    pdl = OpPlatform().is_arch_support_pdl()
    deployment = Deployment(64 // tp, 8, 448, 64, 128, _served_tma(), True, pdl)
    assert dispatch.warmed(dispatch.arch_of(cuda), deployment, cuda)
    compiled = launch.compile_count()
    for t in (1, 3, 64, 65, 4097):
        case = testing.Case(t, 8 // tp, 8, _served_tma(), True, seed=t)
        o, pos, cache = case.tensors(cuda)
        ops.fused_inv_rope_fp8_quant(o, pos, cache, *case.args())
    torch.cuda.synchronize(cuda)
    assert launch.compile_count() == compiled and dispatch.hits == 5


def _kernel_names(graph: torch.cuda.CUDAGraph, cuda: torch.device) -> set[str]:
    """The GPU kernels one replay of ``graph`` runs, by the profiler's names."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize(cuda)
    return {e.name for e in prof.events() if e.device_type == DeviceType.CUDA
            and not e.name.startswith(("Memcpy", "Memset"))}


def _capture(ops: Any, case: testing.Case, tensors: tuple[torch.Tensor, ...]) -> tuple[
        torch.cuda.CUDAGraph, tuple[torch.Tensor, torch.Tensor]]:
    """vLLM's way: one eager run on a side stream, then the capture."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        ops.fused_inv_rope_fp8_quant(*tensors, *case.args())
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = ops.fused_inv_rope_fp8_quant(*tensors, *case.args())
    return graph, result


def _poison(result: tuple[torch.Tensor, torch.Tensor]) -> None:
    out, scales = result
    testing.bits(out).fill_(POISON_BYTE if out.element_size() == 1 else -1)
    if scales.numel():
        testing.scale_storage(scales).view(torch.int32).fill_(-1)


@pytest.mark.parametrize("tp", [1, 8])
def test_graphs_captured_with_the_plugin_replay_dsv4s_kernel_and_compile_nothing(
        stand_in, ops, tables, cuda, tp) -> None:
    """After the start-up warm-up (the stand-in's part of vLLM's registry, for this
    deployment), graphs captured at every capture size compile nothing; each capture is
    one hit; replays run no Python (the hit counter stays) and, on new attention outputs
    and positions copied into the captured inputs, equal vLLM's eager result bit for
    bit. The profiler sees dsv4's kernel on replay, and vLLM's on a graph captured with
    the plugin off. On a GPU without FP8 output the unquantized deployment (what vLLM
    runs there) is warmed and captured instead of vLLM's FP8 warm-up keys."""
    dispatch, original = stand_in
    start_up = dispatch.start_up
    fp8 = launch.quantize_supported(cuda)
    if fp8:
        start_up.compile_many(start_up.get_warmup_keys(_vllm_config(tp)))
    else:
        unquantized = Deployment(64 // tp, 8, 448, 64, 128, _served_tma(), False,
                                 OpPlatform().is_arch_support_pdl())
        assert dispatch.warm_once(dispatch.arch_of(cuda), unquantized, cuda)
    compiled = launch.compile_count()
    groups, tma = 8 // tp, _served_tma()
    cache = tables["compress"]
    for t in CAPTURE_SIZES:
        case = testing.Case(t, groups, 8, tma, fp8, seed=t, rope_kind="compress")
        o, pos, _ = case.tensors(cuda, cache)
        before = dispatch.hits
        graph, result = _capture(ops, case, (o, pos, cache))
        assert dispatch.hits == before + 2  # the eager run and the capture
        for step in range(3):
            new = testing.Case(t, groups, 8, tma, fp8, seed=1000 * (step + 1) + t)
            new_o, new_pos, _ = new.tensors(cuda, cache)
            o.copy_(new_o)
            pos.copy_(new_pos)
            _poison(result)
            graph.replay()
            torch.cuda.synchronize(cuda)
            _set(ops, original)
            want = ops.fused_inv_rope_fp8_quant(o, pos, cache, *case.args())
            _set(ops, dispatch)
            testing.assert_same(result, want, f"replay {step} of {case}")
        assert dispatch.hits == before + 2  # replays ran the captured launch, no Python
        if t in (64, 65):  # the last T of the head-rows entry, the first of the block-rows one
            body = "head_rows" if t == 64 else "block_rows"
            ours = _kernel_names(graph, cuda)
            _set(ops, original)
            vllm_graph, _ = _capture(ops, case, (o, pos, cache))
            _set(ops, dispatch)
            theirs = _kernel_names(vllm_graph, cuda)
            assert ours and all(OUR_KERNELS[body] in name for name in ours), ours
            assert theirs and not any(mine in name for name in theirs
                                      for mine in OUR_KERNELS.values()), theirs
            del vllm_graph
        del graph
    assert launch.compile_count() == compiled
