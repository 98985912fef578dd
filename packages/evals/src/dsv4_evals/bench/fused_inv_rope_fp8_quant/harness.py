"""What the FusedInvRopeFP8Quant gates, tuner and report measure, defined once.

A call is DeepSeek-V4's ``fused_inv_rope_fp8_quant`` as ``deep_gemm_fp8_o_proj`` makes
it once per attention layer: ``o`` bf16 ``(T, heads, 512)`` (448 nope + 64 rope lanes),
8 heads per output group (DeepSeek-V4-Flash's 64 heads in 8 ``o_groups``, so 8 local
heads at TP8 and 64 at TP1), FP8 output with one FP32 scale per 128 lanes (sm90's
layout) unless a shape says otherwise. Its inputs are seeded
(:class:`dsv4_kernels.fused_inv_rope_fp8_quant.testing.Case`: magnitudes over decades,
outliers, all-zero blocks, positions up to 1M) and its ``cos_sin_cache`` is the real
DeepSeek-V4 table (:func:`~dsv4_kernels.fused_inv_rope_fp8_quant.testing.rope_table`,
1,048,576 x 64, built as vLLM builds it), not random cos/sin.

The two launches compared are vLLM 0.33.0's whole function with its own kernel
(:mod:`.upstream`, label :data:`BASELINE`) and the same function with dsv4's kernel and
a tile. Both allocate their outputs inside the call, as vLLM's custom op does; under
CUDA-graph replay (:func:`dsv4_evals.bench.timing.graph_us`, as the FULL decode graph
runs them) the allocations cost nothing, so the times are the kernels'.

The floor of a call is what it must move (:func:`bytes_moved`) over the copy
bandwidth measured in the same run, plus an empty launch timed in graphs as large as a
small call's (:func:`empty_launch_us`).
"""

from __future__ import annotations

import statistics
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from dsv4_kernels.fused_inv_rope_fp8_quant import checks, launch, testing
from dsv4_policy.kernels import fused_inv_rope_fp8_quant as policy

from dsv4_evals.bench import timing
from dsv4_evals.bench.fused_inv_rope_fp8_quant import upstream

NAME = "fused_inv_rope_fp8_quant"
BASELINE = "upstream"
"""The tile label of vLLM 0.33.0's own kernel in measurements and tuner candidates."""
HEAD_DIM, NOPE_DIM, ROPE_DIM, GROUP = 512, 448, 64, 128
HEADS_PER_GROUP = 8
"""DeepSeek-V4-Flash: 64 attention heads in 8 output groups."""
HEADS = (8, 16, 32, 64, 128)
"""Local head counts: 64 heads over TP 8..1, and 128."""
MAX_TOKENS = 16384
"""The largest T a random key inside an open-ended entry is drawn at."""
NOMINAL_BYTES_PER_S = 4.2e12
"""The H200's nominal HBM bandwidth (the issue's floor); recorded beside the measured one."""
CHECK_TILES = ((1, 1, 1, "head_rows"), (2, 1, 4, "block_rows"), (1, 2, 1, "head_rows"),
               (4, 1, 8, "block_rows"), (1, 4, 1, "head_rows"), (1, 1, 2, "block_rows"),
               (2, 2, 1, "head_rows"), (4, 2, 8, "block_rows"), (2, 2, 2, "head_rows"),
               (2, 2, 4, "block_rows"), (1, 8, 2, "head_rows"), (4, 4, 4, "head_rows"))
"""Tiles (both bodies) the bitwise sweep runs where the table has no entry, so it never
compares vLLM with itself."""


@dataclass(frozen=True)
class Shape:
    """One call: T tokens of ``num_heads`` local heads, its flags, and which seeded inputs."""

    num_tokens: int
    num_heads: int
    tma_aligned_scales: bool = False
    quantize: bool = True
    variant: int = 0
    """Selects the seeded values and positions: two variants are two calls of one key."""
    rope_kind: str = "compress"

    @property
    def heads_per_group(self) -> int:
        return HEADS_PER_GROUP if self.num_heads % HEADS_PER_GROUP == 0 else 1

    @property
    def name(self) -> str:
        extra = ("-ue8m0" if self.tma_aligned_scales else "") + (
            "" if self.quantize else "-noquant")
        return f"T{self.num_tokens}-h{self.num_heads}{extra}"

    def key(self, arch: str) -> policy.Key:
        return policy.Key(arch, self.num_tokens, self.num_heads, HEAD_DIM, GROUP,
                          int(self.tma_aligned_scales), int(self.quantize))

    def case(self, seed: int = 0) -> testing.Case:
        hpg = self.heads_per_group
        mixed = zlib.crc32(repr((self.num_tokens, self.num_heads, self.variant,
                                 self.tma_aligned_scales, self.quantize)).encode())
        return testing.Case(self.num_tokens, self.num_heads // hpg, hpg,
                            self.tma_aligned_scales, self.quantize,
                            seed=(seed * 1_000_003 + mixed) % (1 << 31),
                            rope_kind=self.rope_kind)


def shape_of(point: Mapping[str, int]) -> Shape:
    """A probe point (``num_tokens``, ``num_heads``, optional flags and ``variant``)."""
    return Shape(point["num_tokens"], point["num_heads"],
                 bool(point.get("tma_aligned_scales", 0)), bool(point.get("quantize", 1)),
                 point.get("variant", 0))


@dataclass
class Call:
    """A shape's arguments on a device: the case and its ``(o, positions, cos_sin_cache)``."""

    shape: Shape
    case: testing.Case
    tensors: tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def make_call(shape: Shape, device: torch.device | str, seed: int = 0) -> Call:
    """The seeded call of ``shape`` on ``device`` (the real rope table of its layer kind)."""
    case = shape.case(seed)
    where = str(device)
    return Call(shape, case, case.tensors(where, testing.rope_table(shape.rope_kind, where)))


def call_of(case: testing.Case, device: torch.device | str) -> Call:
    """A :class:`Call` of a generated case (:func:`testing.random_cases`), as it is."""
    where = str(device)
    shape = Shape(case.num_tokens, case.num_heads, case.tma_aligned_scales, case.quantize,
                  rope_kind=case.rope_kind)
    return Call(shape, case, case.tensors(where, testing.rope_table(case.rope_kind, where)))


# --------------------------------------------------------------------------- the launches
def resolved(shape: Shape, arch: str, table: object | None = None) -> policy.Launch:
    return policy.resolve(shape.key(arch), table)  # type: ignore[arg-type]


def resolved_tile(shape: Shape, arch: str, table: object | None = None) -> object:
    """The tile the policy picks for ``shape``, or :data:`BASELINE` when it falls back."""
    found = resolved(shape, arch, table)
    return BASELINE if found.source == "baseline" else found.compile_key()


def baseline_unchanged(shape: Shape, arch: str, table: object | None = None) -> bool:
    """Whether a miss is vLLM's launch untouched: source ``baseline``, the policy's one
    baseline object, vLLM's launch shape ``(1, 1, 1)``."""
    found = resolved(shape, arch, table)
    return (found.source == "baseline" and found is policy.baseline(shape.key(arch))
            and found.compile_key() == launch.BASELINE_TILE)


def runner(call: Call, tile: object, up: upstream.Upstream) -> Callable[[], object]:
    """One call: vLLM's function with its kernel (``tile == BASELINE``), or with dsv4's
    kernel and ``tile``, ``(tokens_per_program, heads_per_program, num_warps, body)``."""
    args = (*call.tensors, *call.case.args())
    if tile == BASELINE:
        return lambda: up.fused_inv_rope_fp8_quant(*args)
    tpp, hpp, warps, body = tile  # type: ignore[misc]
    return lambda: launch.fused_inv_rope_fp8_quant(
        *args, tokens_per_program=tpp, heads_per_program=hpp, num_warps=warps, body=body)


def _kernel_object_outputs(call: Call, tile: object, up: upstream.Upstream) -> tuple:
    """Both kernels through the kernel object's entry (what the plugin replaces), each on
    vLLM-shaped buffers poisoned first, so a byte either leaves unwritten shows."""
    o, pos, cache = call.tensors
    case = call.case
    checked = checks.check_inputs(o, pos, cache, *case.args())
    out_buf, scale_buf = launch.allocate(checked, o.dtype, case.n_groups,
                                         case.tma_aligned_scales, case.quantize)
    testing.poison_like_vllm(out_buf, scale_buf)
    kwargs = dict(heads_per_group=case.heads_per_group, quant_group_size=case.quant_group_size,
                  chunks_per_head=checked.chunks_per_head, nope_dim=case.nope_dim,
                  half_rope=case.rope_dim // 2, tma_aligned_scales=case.tma_aligned_scales,
                  quantize=case.quantize, fp8_max=float(checks.FP8_MAX),
                  launch_pdl=launch.default_launch_pdl(o.device),
                  grid=(checked.tma_aligned_T, checked.num_heads))
    if tile == BASELINE:
        up.kernel_call(o, pos, cache, out_buf, scale_buf, case.num_tokens, **kwargs)
    else:
        tpp, hpp, warps, body = tile  # type: ignore[misc]
        launch.kernel_call(o, pos, cache, out_buf, scale_buf, case.num_tokens, **kwargs,
                           tokens_per_program=tpp, heads_per_program=hpp, num_warps=warps,
                           body=body)
    return out_buf.transpose(0, 1), (scale_buf.transpose(0, 1) if case.quantize
                                     else scale_buf)


def mismatch(call: Call, tile: object, up: upstream.Upstream) -> str | None:
    """None when ``tile`` writes exactly vLLM's bytes (FP8 or bf16 output, the whole scale
    buffer with its pad rows, shapes, strides, dtypes), through vLLM's function and through
    the kernel object on poisoned buffers; else what differs."""
    what = f"{call.shape.name} seed {call.case.seed} tile {tile}"
    try:
        testing.assert_same(runner(call, tile, up)(), runner(call, BASELINE, up)(),  # type: ignore[arg-type]
                            f"{what} (function)")
        testing.assert_same(_kernel_object_outputs(call, tile, up),
                            _kernel_object_outputs(call, BASELINE, up),
                            f"{what} (kernel object, poisoned buffers)")
    except AssertionError as exc:
        return str(exc)[:500]
    return None


def outputs_equal(call: Call, tile: object, up: upstream.Upstream) -> bool:
    return mismatch(call, tile, up) is None


# --------------------------------------------------------------------------- bytes and floors
class Bytes(NamedTuple):
    """What a call must move at the least, in bytes."""

    read_o: int
    """``o``: T x heads x head_dim, 2 bytes each (bf16)."""
    positions: int
    """One int64 position per token."""
    cos_sin: int
    """The cos/sin rows touched: one row of ``rope_dim`` fp32 per token."""
    write_out: int
    """The output: T x heads x head_dim, FP8 (1 byte) or ``o``'s dtype without quantize."""
    scales: int
    """The scale buffer, pad rows included: align(T, 4) x heads x head_dim / 128, FP32
    (4 bytes) or packed UE8M0 (1 byte); none without quantize."""

    @property
    def total(self) -> int:
        return sum(self)


def bytes_moved(num_tokens: int, num_heads: int, *, tma_aligned_scales: bool = False,
                quantize: bool = True, head_dim: int = HEAD_DIM, rope_dim: int = ROPE_DIM,
                quant_group_size: int = GROUP, o_bytes: int = 2) -> Bytes:
    """The least a call reads and writes (see :class:`Bytes`)."""
    lanes = num_tokens * num_heads * head_dim
    aligned = -(-num_tokens // 4) * 4
    chunks = num_heads * (head_dim // quant_group_size)
    return Bytes(read_o=lanes * o_bytes, positions=num_tokens * 8,
                 cos_sin=num_tokens * rope_dim * 4,
                 write_out=lanes * (1 if quantize else o_bytes),
                 scales=aligned * chunks * (1 if tma_aligned_scales else 4) if quantize else 0)


def shape_bytes(shape: Shape) -> Bytes:
    return bytes_moved(shape.num_tokens, shape.num_heads,
                       tma_aligned_scales=shape.tma_aligned_scales, quantize=shape.quantize)


def floor_us(nbytes: int, bytes_per_s: float) -> float:
    """``nbytes`` over a bandwidth counting bytes read plus bytes written, in µs."""
    return nbytes / bytes_per_s * 1e6


# --------------------------------------------------------------------------- measuring
class Measure:
    """``measure(point, tile) -> µs`` for the probe rules: calls cached per point, each
    tile checked bitwise against vLLM's kernel once per point before it is timed there (a
    difference stops the run), launches per graph scaled so a graph runs about
    ``target_us``."""

    def __init__(self, device: torch.device, up: upstream.Upstream, seed: int = 0,
                 target_us: float = 200.0, reps: int = 15) -> None:
        self.device = device
        self.upstream = up
        self.seed = seed
        self.target_us = target_us
        self.reps = reps
        self.count = 0
        self._calls: dict[tuple, Call] = {}
        self._scale: dict[tuple, int] = {}
        self._checked: set[tuple] = set()

    def call(self, point: Mapping[str, int]) -> Call:
        key = tuple(sorted(point.items()))
        found = self._calls.get(key)
        if found is None:
            if len(self._calls) >= 8:
                self._calls.clear()
            found = self._calls[key] = make_call(shape_of(point), self.device, self.seed)
        return found

    def __call__(self, point: Mapping[str, int], tile: Any) -> float:
        call = self.call(point)
        key = tuple(sorted(point.items()))
        if tile != BASELINE and (key, tile) not in self._checked:
            problem = mismatch(call, tile, self.upstream)
            if problem:
                raise SystemExit(f"tile {tile}: outputs differ from vLLM's: {problem}")
            self._checked.add((key, tile))
        n = self._scale.get(key)
        if n is None:
            n = self._scale[key] = launches_for(call, self.upstream, self.target_us)
        self.count += 1
        return timing.graph_us(runner(call, tile, self.upstream), n, reps=self.reps)

    def forget(self) -> None:
        """Free the cached calls (T=8192 with 128 heads holds 1 GiB of ``o``)."""
        self._calls.clear()


def paired_us(call: Call, tile: object, up: upstream.Upstream, launches: int | None = None,
              reps: int = 15) -> tuple[float, float]:
    """(vLLM µs, tile µs): CUDA-graph replay medians of the same inputs, interleaved, each
    the better of two readings; ``launches`` per graph from :func:`launches_for` unless
    given."""
    launches = launches or launches_for(call, up)
    base = timing.graph_us(runner(call, BASELINE, up), launches, reps)
    ours = timing.graph_us(runner(call, tile, up), launches, reps)
    base = min(base, timing.graph_us(runner(call, BASELINE, up), launches, reps))
    ours = min(ours, timing.graph_us(runner(call, tile, up), launches, reps))
    return base, ours


SIZING_LAUNCHES = 40
"""Launches in the graph that sizes the timed graphs. A 2-launch graph read the replay's
own overhead as call time (H200, 2026-12-03: about 10 µs "per call" for a 2 µs call), so
small calls got graphs of 17-30 launches instead of 100, and the replay's jitter landed in
every per-call figure (see ``benchmarks/RESULTS.md``)."""


MAX_LAUNCHES = 100
"""The most launches in one timed graph: every call under about 3 µs gets this many."""

EMPTY_READINGS = 3
"""Readings of the empty launch whose median is the floor's launch term."""


def launches_for(call: Call, up: upstream.Upstream, target_us: float = 300.0) -> int:
    """Launches per graph so that one replay runs about ``target_us`` (4 to
    :data:`MAX_LAUNCHES`), sized from a graph of :data:`SIZING_LAUNCHES` of vLLM's
    launches."""
    one = timing.graph_us(runner(call, BASELINE, up), SIZING_LAUNCHES, reps=5)
    return max(4, min(MAX_LAUNCHES, int(target_us / max(one, 0.5))))


def empty_launch_us(device: torch.device) -> float:
    """The empty launch of the floor, timed as the small calls it is compared with are:
    graphs of :data:`MAX_LAUNCHES` launches, the median of :data:`EMPTY_READINGS`
    readings. The shared 20-launch reading carries a 20th of each replay's overhead per
    launch and moves from run to run (H200, 2026-12-03: 0.68 to 1.15 µs in 20-launch
    graphs, 0.716 to 0.723 µs in 100-launch graphs); a high reading raises the floor and
    would let the floor target pass on noise."""
    return statistics.median(timing.empty_launch_graph_us(device, MAX_LAUNCHES)
                             for _ in range(EMPTY_READINGS))


# --------------------------------------------------------------------------- table boxes
def _span(entry: policy.Entry, name: str, default: tuple[int, int]) -> tuple[int, int]:
    cond = entry.match.get(name)
    if cond is None:
        return default
    if isinstance(cond, policy.Range):
        return (cond.min, cond.top)
    if isinstance(cond, int):
        return (cond, cond)
    return (min(cond), max(cond))  # type: ignore[type-var, arg-type]


def entry_box(entry: policy.Entry) -> dict[str, tuple[int, int]]:
    """An entry's match as the probe rules' box over the key fields this harness varies
    (T at most :data:`MAX_TOKENS`; heads 1..128 when the entry leaves them open)."""
    tokens = _span(entry, "num_tokens", (0, MAX_TOKENS))
    return {"num_tokens": (max(tokens[0], 1), min(tokens[1], MAX_TOKENS)),
            "num_heads": _span(entry, "num_heads", (1, max(HEADS))),
            "tma_aligned_scales": _span(entry, "tma_aligned_scales", (0, 1)),
            "quantize": _span(entry, "quantize", (0, 1))}


def entries_for(arch: str, table: object | None = None) -> list[policy.Entry]:
    """The entries of ``table`` (default: the shipped one) that can match ``arch``."""
    found = policy.shipped_table() if table is None else table
    return [e for e in found.entries  # type: ignore[attr-defined]
            if "arch" not in e.match or arch in e.match["arch"]]


def entry_ends(box: Mapping[str, tuple[int, int]]) -> list[dict[str, int]]:
    """The box's smallest and largest T (at its smallest heads and flags; the smallest is
    T=1 when the box holds it): keys the never-slower gate times besides the random ones."""
    ends = {box["num_tokens"][0], box["num_tokens"][1]}
    base = {name: span[0] for name, span in box.items()}
    return [{**base, "num_tokens": t} for t in sorted(ends)]
