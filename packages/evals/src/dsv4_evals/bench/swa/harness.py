"""Shared machinery for the SWA benchmarks, the SWA tuner and the report.

Shapes, input construction, the two launches compared (vLLM 0.33.0's own kernel,
extracted by :mod:`swa_upstream`, and dsv4's kernel with the tile the policy resolves),
and a CUDA-graph-replay timer live here once, so the bench gates and the tuner measure
the same thing: GPU time per launch, as a model step under FULL CUDA graphs sees it.

The deployment is DeepSeek-V4's: a 128-token window, text-only rows (``index_width =
128``, no image widening) and the SWA cache's 64-token blocks unless a probe says
otherwise. Decode steps have one token per request at a random context in
``[ctx/2, ctx)``; prefill steps split their tokens into requests of at most 8192 query
tokens behind random prefixes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from dsv4_kernels import swa
from dsv4_kernels.swa.testing import POISON, SwaCall
from dsv4_policy.kernels import swa as policy

from dsv4_evals.bench import timing
from dsv4_evals.bench.swa import upstream as swa_upstream

WINDOW = 128
INDEX_WIDTH = 128
BLOCK_SIZE = 64
CONTEXT = 32768
"""ANCHORS.md's context; decode rows sit at random positions in [CONTEXT/2, CONTEXT)."""
MAX_QUERY = 8192
REPORTED = (1, 2048, 8192, 32768)


@dataclass(frozen=True)
class SwaShape:
    """One SWA kernel call: ``num_tokens`` decode rows or prefill rows."""

    num_tokens: int
    prefill: bool
    block_size: int = BLOCK_SIZE
    context: int = CONTEXT
    padding: int = 0
    """Trailing padding tokens, as CUDA-graph padding makes them (all: ``num_tokens``)."""

    @property
    def name(self) -> str:
        phase = "prefill" if self.prefill else "decode"
        extra = "" if self.block_size == BLOCK_SIZE else f"-bs{self.block_size}"
        if self.padding:
            extra += f"-pad{self.padding}"
        return f"{phase}-T{self.num_tokens}{extra}"

    def key(self, arch: str) -> policy.Key:
        return policy.Key(arch, WINDOW, INDEX_WIDTH, self.block_size, 0, self.num_tokens)


def anchor_shapes() -> list[SwaShape]:
    """Decode and prefill at the token counts the closing note quotes (T=1 is decode)."""
    shapes = [SwaShape(t, False) for t in REPORTED]
    shapes += [SwaShape(t, True) for t in REPORTED if t > 1]
    return shapes


PADDING_KINDS = (0, 1, 2)
"""A probe's ``padding``: 0 none, 1 a padded tail (a quarter, at least one token), 2 all."""


def padding_tokens(num_tokens: int, kind: int) -> int:
    """Trailing padding tokens of a probe of ``num_tokens`` tokens and padding ``kind``."""
    if kind not in PADDING_KINDS:
        raise ValueError(f"padding: got {kind!r}; expected one of {PADDING_KINDS}")
    return (0, max(1, num_tokens // 4), num_tokens)[kind]


def shape_of(point: dict[str, int]) -> SwaShape:
    """A probe point (``num_tokens``, ``prefill``, ``block_size``, ``padding``) as a shape."""
    t = point["num_tokens"]
    return SwaShape(t, bool(point.get("prefill", 0)), point.get("block_size", BLOCK_SIZE),
                    padding=padding_tokens(t, point.get("padding", 0)))


def make_call(shape: SwaShape, device: torch.device, seed: int = 0) -> SwaCall:
    """Device tensors for ``shape`` laid out as vLLM's SWA builder lays them out."""
    g = torch.Generator(device=device).manual_seed(seed)
    ints = dict(dtype=torch.int32, device=device)
    t, bs = shape.num_tokens, shape.block_size
    if shape.prefill:
        queries = [MAX_QUERY] * (t // MAX_QUERY) + ([t % MAX_QUERY] if t % MAX_QUERY else [])
        q = torch.tensor(queries, **ints)
        prefix = torch.randint(0, shape.context, (len(queries),), generator=g, **ints)
        seq = prefix + q
        req = torch.repeat_interleave(torch.arange(len(queries), **ints), q)
    else:
        q = torch.ones(t, **ints)
        seq = torch.randint(shape.context // 2, shape.context, (t,), generator=g, **ints)
        req = torch.arange(t, **ints)
    starts = torch.zeros(q.shape[0] + 1, **ints)
    starts[1:] = torch.cumsum(q, 0)
    blocks = -(-int(seq.max()) // bs) + 1
    table = torch.randint(0, 1 << 20, (q.shape[0], blocks), generator=g, **ints)
    lens = torch.full((t,), POISON, **ints)
    valid = torch.ones(t, dtype=torch.bool, device=device)
    if shape.padding:
        # Padding tokens carry request index 0, as vLLM's padded batches do.
        valid[t - shape.padding:] = False
        req[t - shape.padding:] = 0
    return SwaCall(
        swa_indices=torch.full((t, 1, INDEX_WIDTH), POISON, **ints), swa_lens=lens,
        window_size=WINDOW, index_width=INDEX_WIDTH, left_visible=lens, right_visible=lens,
        query_start_loc=starts, seq_lens=seq, token_to_req_indices=req,
        is_valid_token=valid, block_table=table,
        block_size=bs, replay_start=torch.zeros(q.shape[0], **ints), num_tokens=t,
        token_offset=0, label=shape.name)


BASELINE = "upstream"
"""The tile label of vLLM 0.33.0's own launch in measurements and tuner candidates."""


def graph_us(fn: Callable[[], object], launches: int = 20, reps: int = 15) -> float:
    """:func:`timing.graph_us` with the SWA benchmarks' defaults (20 launches, 15 replays)."""
    return timing.graph_us(fn, launches_per_graph=launches, reps=reps)


def runner(call: SwaCall, tile: object, upstream_kernel: object) -> Callable[[], None]:
    """One launch: vLLM's own (``tile == BASELINE``) or dsv4's kernel with ``tile``."""
    args, kwargs = call.args(), call.kwargs()
    if tile == BASELINE:
        return lambda: swa_upstream.launch(upstream_kernel, *args, **kwargs)
    tpp, cpp, warps = tile  # type: ignore[misc]
    return lambda: swa.compute_swa_indices_and_lens(
        *args, **kwargs, tokens_per_program=tpp, cols_per_program=cpp, num_warps=warps)




def outputs_equal(call: SwaCall, tile: object, upstream_kernel: object) -> bool:
    """Whether ``tile`` writes exactly what vLLM's launch writes (whole buffers)."""
    want, got = call.fresh(), call.fresh()
    runner(want, BASELINE, upstream_kernel)()
    runner(got, tile, upstream_kernel)()
    return bool(torch.equal(want.swa_indices, got.swa_indices)
                and torch.equal(want.swa_lens, got.swa_lens))


class Measure:
    """``measure(point, tile) -> µs`` for the probe rules: inputs cached per point,
    launches per graph scaled so a graph runs about ``target_us``."""

    def __init__(self, device: torch.device, upstream_kernel: object, seed: int = 0,
                 target_us: float = 300.0) -> None:
        self.device = device
        self.upstream = upstream_kernel
        self.seed = seed
        self.target_us = target_us
        self._calls: dict[tuple, SwaCall] = {}
        self._scale: dict[tuple, int] = {}

    def call(self, point: dict[str, int]) -> SwaCall:
        key = tuple(sorted(point.items()))
        found = self._calls.get(key)
        if found is None:
            if len(self._calls) >= 24:
                self._calls.clear()
            found = self._calls[key] = make_call(shape_of(point), self.device, self.seed)
        return found

    def __call__(self, point: dict[str, int], tile: object) -> float:
        call = self.call(point)
        key = tuple(sorted(point.items()))
        n = self._scale.get(key)
        if n is None:
            one = timing.graph_us(runner(call, BASELINE, self.upstream), launches_per_graph=4,
                                 reps=3)
            n = self._scale[key] = max(4, min(50, int(self.target_us / max(one, 1.0))))
        return timing.graph_us(runner(call, tile, self.upstream), launches_per_graph=n, reps=15)


def resolved_tile(shape: SwaShape, arch: str, table: object | None = None) -> object:
    """The tile the policy picks for ``shape`` (``BASELINE`` when it falls back)."""
    launch = policy.resolve(shape.key(arch), table)  # type: ignore[arg-type]
    if launch.source == "baseline":
        return BASELINE
    return (launch.tokens_per_program, launch.cols_per_program, launch.num_warps)


def floor_us(num_tokens: int, bandwidth: float) -> float:
    """Bytes that must be written (rows and lengths) over the copy bandwidth, in µs."""
    return num_tokens * (INDEX_WIDTH + 1) * 4 / bandwidth * 1e6
