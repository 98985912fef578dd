"""C128A's bench machinery, shared by its gates, its tuner and its report section.

Shapes, input construction, the three launches compared at every shape, the write
floor and the probe boxes live here once, so that the gates, the tuner and the report
measure exactly the same thing; the clocks are :mod:`dsv4_evals.bench.timing`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from dsv4_kernels.c128a import build_c128a_topk_metadata
from dsv4_policy.kernels import c128a as policy

from dsv4_evals.bench.timing import graph_us

COMPRESS_RATIO = 128
BLOCK_SIZE = 2  # compressed units per KV page, as DeepSeek-V4 serves (256 // 128)
MILLION = 1 << 20
POISON = -0x2BADBEEF


@dataclass(frozen=True)
class Shape:
    """One benchmarked batch: how many decode and prefill tokens at what context."""

    name: str
    num_decode: int
    num_prefill: int
    context: int
    max_model_len: int = MILLION
    num_reqs: int = 64

    @property
    def num_tokens(self) -> int:
        return self.num_decode + self.num_prefill

    @property
    def phase(self) -> str:
        if self.num_decode and self.num_prefill:
            return "mixed"
        return "decode" if self.num_decode else "prefill"

    @property
    def capacity(self) -> int:
        return policy.capacity(self.max_model_len, COMPRESS_RATIO)

    def key(self, arch: str) -> policy.Key:
        return policy.Key(
            arch=arch,
            compress_ratio=COMPRESS_RATIO,
            max_model_len=self.max_model_len,
            max_seq_len=self.context,
            num_decode_tokens=self.num_decode,
            num_prefill_tokens=self.num_prefill,
            block_size=BLOCK_SIZE,
        )


def anchor_shapes() -> list[Shape]:
    """ANCHORS.md's grid: context 32768, capacity 8192 (a 1M deployment), width 256."""
    shapes = []
    for tokens in (512, 2048, 8192, 32768):
        shapes.append(Shape(f"prefill-T{tokens}-ctx32K", 0, tokens, 32768))
        shapes.append(Shape(f"decode-T{tokens}-ctx32K", tokens, 0, 32768))
    return shapes


def wide_shapes() -> list[Shape]:
    """Long contexts, single-token and few-token decode, mixed batches, small batches."""
    return [
        Shape("decode-T1-ctx1M", 1, 0, MILLION, num_reqs=1),
        Shape("decode-T4-ctx1M", 4, 0, MILLION, num_reqs=4),
        Shape("decode-T64-ctx1M", 64, 0, MILLION),
        Shape("decode-T1-ctx128K", 1, 0, 131072, num_reqs=1),
        Shape("decode-T256-ctx256K", 256, 0, 262144),
        Shape("decode-T1-ctx4K", 1, 0, 4096, num_reqs=1),
        Shape("decode-T32-ctx4K", 32, 0, 4096, num_reqs=32),
        Shape("prefill-T1-ctx4K", 0, 1, 4096, num_reqs=1),
        Shape("prefill-T8192-ctx1M", 0, 8192, MILLION, num_reqs=1),
        Shape("prefill-T2048-ctx128K", 0, 2048, 131072, num_reqs=1),
        Shape("mixed-D64-P4096-ctx128K", 64, 4096, 131072),
        Shape("mixed-D256-P8192-ctx32K", 256, 8192, 32768),
        Shape("mixed-D32-P2048-ctx1M", 32, 2048, MILLION),
    ]


def all_shapes() -> list[Shape]:
    return anchor_shapes() + wide_shapes()


@dataclass
class Inputs:
    """Device tensors for one shape, with output buffers sized like vLLM's."""

    positions: torch.Tensor
    token_to_req: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    decode_buf: torch.Tensor
    lens_buf: torch.Tensor
    prefill_buf: torch.Tensor
    num_decode: int

    def poison(self) -> None:
        for buf in (self.decode_buf, self.lens_buf, self.prefill_buf):
            buf.fill_(POISON)


def make_inputs(shape: Shape, device: torch.device, seed: int = 0) -> Inputs:
    """ANCHORS.md's construction: prefill positions ``arange(ctx - T, ctx)`` (wrapped into
    ``[0, ctx)`` when T > ctx, as several sequences); each decode
    token belongs to one of ``num_reqs`` requests at a random position in
    ``[ctx/2, ctx)``; block tables are random permutations of physical pages."""
    gen = torch.Generator().manual_seed(seed)
    ctx, cap = shape.context, shape.capacity
    dec = torch.randint(ctx // 2, ctx, (shape.num_decode,), generator=gen)
    pre = torch.arange(ctx - shape.num_prefill, ctx)
    if shape.num_prefill > ctx:  # more prefill tokens than one sequence holds: several
        pre = torch.remainder(pre, ctx)
    positions = torch.cat([dec, pre]).to(torch.int64)
    reqs = torch.randint(0, shape.num_reqs, (shape.num_tokens,), generator=gen)
    pages = -(-cap // BLOCK_SIZE)
    table = torch.stack([torch.randperm(pages * 4, generator=gen)[:pages] for _ in
                         range(shape.num_reqs)]).to(torch.int32)
    slots = torch.randint(0, 1 << 30, (shape.num_tokens,), generator=gen, dtype=torch.int64)
    rows = max(shape.num_tokens, 1)
    return Inputs(
        positions=positions.to(device),
        token_to_req=reqs.to(torch.int32).to(device),
        block_table=table.to(device),
        slot_mapping=slots.to(device),
        decode_buf=torch.full((rows, cap), POISON, dtype=torch.int32, device=device),
        lens_buf=torch.full((rows,), POISON, dtype=torch.int32, device=device),
        prefill_buf=torch.full((rows, cap), POISON, dtype=torch.int32, device=device),
        num_decode=shape.num_decode,
    )


@dataclass(frozen=True)
class LaunchSpec:
    """One of the three launches compared at a shape."""

    label: str  # "capacity", "baseline", "table"
    width: int
    tokens_per_program: int
    cols_per_program: int
    num_warps: int
    split_width: bool
    source: str

    @property
    def tile(self) -> tuple[int, int, int, bool]:
        return (self.tokens_per_program, self.cols_per_program, self.num_warps, self.split_width)


def _spec(label: str, launch: policy.Launch, width: int | None = None) -> LaunchSpec:
    return LaunchSpec(
        label=label,
        width=launch.width if width is None else width,
        tokens_per_program=launch.tokens_per_program,
        cols_per_program=launch.cols_per_program,
        num_warps=launch.num_warps,
        split_width=launch.split_width,
        source=launch.source,
    )


def launches(shape: Shape, arch: str, table: object | None = None) -> dict[str, LaunchSpec]:
    """Capacity launch (upstream tiles, every column), baseline (upstream adaptive
    width) and whatever the policy resolves for this GPU."""
    key = shape.key(arch)
    base = policy.baseline(key)
    resolved = policy.resolve(key) if table is None else policy.resolve(key, table)
    return {
        "capacity": _spec("capacity", base, width=base.row_stride),
        "baseline": _spec("baseline", base),
        "table": _spec("table", resolved),
    }


def runner(inputs: Inputs, spec: LaunchSpec) -> Callable[[], object]:
    """A zero-argument callable doing exactly one launch, through the public API."""

    def run() -> object:
        return build_c128a_topk_metadata(
            inputs.positions,
            COMPRESS_RATIO,
            inputs.num_decode,
            inputs.token_to_req,
            inputs.block_table,
            BLOCK_SIZE,
            inputs.slot_mapping,
            inputs.decode_buf,
            inputs.lens_buf,
            inputs.prefill_buf,
            width=spec.width,
            tokens_per_program=spec.tokens_per_program,
            cols_per_program=spec.cols_per_program,
            num_warps=spec.num_warps,
            split_width=spec.split_width,
        )

    return run


def bytes_written(shape: Shape, width: int) -> int:
    """What any correct launch must write: ``T * width`` int32s plus the decode lengths."""
    return 4 * (shape.num_tokens * width + shape.num_decode)


def floor_us(shape: Shape, width: int, bandwidth: float) -> float:
    return bytes_written(shape, width) / bandwidth * 1e6


# ----------------------------------------------------------------------------- checks
def outputs_equal(shape: Shape, device: torch.device, a: LaunchSpec, b: LaunchSpec) -> bool:
    """Both launches leave bit-identical buffers (written and untouched parts alike)."""
    results = []
    for spec in (a, b):
        inputs = make_inputs(shape, device, seed=7)
        runner(inputs, spec)()
        results.append((inputs.decode_buf, inputs.lens_buf, inputs.prefill_buf))
    torch.cuda.synchronize(device)
    return all(torch.equal(x, y) for x, y in zip(results[0], results[1], strict=True))


# ----------------------------------------------------------------------------- probes
MAX_PROBE_TOKENS = 65536
"""The largest token count a tuned entry covers: probes time every corner, and a 1M-token
batch at width 8192 would take minutes to probe. Larger batches keep the baseline."""
MAX_PROBE_MODEL_LEN = MILLION
CORNER_FIELDS = ("max_seq_len", "num_decode_tokens", "num_prefill_tokens")


def seq_len_class(width: int) -> tuple[int, int]:
    """Every max_seq_len whose upstream width is ``width`` (before the capacity clamp)."""
    low = 0 if width == 128 else (width // 2 + 1) * COMPRESS_RATIO
    return low, (width + 1) * COMPRESS_RATIO - 1


def c128a_box(match: dict) -> dict[str, tuple[int, int]]:
    """A table entry's match as a probe box over the fields that move the kernel's cost.

    Unbounded token ranges are cut at ``MAX_PROBE_TOKENS``; ``max_model_len`` runs from
    the largest ``max_seq_len`` of the box (a deployment serves its longest sequence)
    to 1M, and sits at 1M (capacity 8192, the widest row stride) on the corners.
    """
    box: dict[str, tuple[int, int]] = {}
    for name in CORNER_FIELDS:
        cond = match.get(name)
        if cond is None:
            lo, hi = 0, None
        elif isinstance(cond, policy.Range):
            lo, hi = cond.min, cond.max
        else:
            lo, hi = min(cond), max(cond)
        cap = MAX_PROBE_TOKENS if name != "max_seq_len" else MILLION + COMPRESS_RATIO
        box[name] = (lo, cap if hi is None else min(hi, max(cap, lo)))
    msl_hi = box["max_seq_len"][1]
    box["max_model_len"] = (max(msl_hi, 1), max(msl_hi, MAX_PROBE_MODEL_LEN))
    return box


def mixed_extremes(box: dict[str, tuple[int, int]]) -> list[dict[str, int]]:
    """A mixed batch's extreme mixes: 1 decode + the most prefill, the most decode + 1
    prefill, and an equal split (each clamped into the box by the caller)."""
    d_lo, d_hi = box["num_decode_tokens"]
    p_lo, p_hi = box["num_prefill_tokens"]
    if d_hi == 0 or p_hi == 0:
        return []
    half = max(d_lo, p_lo, min(d_hi, p_hi) // 2)
    return [{"num_decode_tokens": 1, "num_prefill_tokens": p_hi},
            {"num_decode_tokens": d_hi, "num_prefill_tokens": 1},
            {"num_decode_tokens": half, "num_prefill_tokens": half}]


def shape_of(point: dict[str, int], name: str = "") -> Shape:
    """The benchmark batch for a probe point (context = its max_seq_len)."""
    d, p = point["num_decode_tokens"], point["num_prefill_tokens"]
    model_len = point.get("max_model_len", MILLION)
    label = name or f"d{d}-p{p}-s{point['max_seq_len']}-m{model_len}"
    return Shape(label, d, p, max(point["max_seq_len"], 1), max_model_len=model_len,
                 num_reqs=max(1, min(64, d)))


class Timer:
    """GPU µs of one launch at a probe point, with the point's inputs built once.

    Graph replay medians, with the number of launches per graph scaled so that one
    replay takes about ``target_us`` (short launches need many for a stable reading).
    """

    def __init__(self, device: torch.device, seed: int = 0, target_us: float = 400.0,
                 reps: int = 5) -> None:
        self.device, self.seed, self.target_us, self.reps = device, seed, target_us, reps
        self._inputs: dict[tuple, tuple[Shape, Inputs]] = {}
        self._est: dict[tuple, float] = {}
        self.measurements = 0

    def inputs(self, point: dict[str, int]) -> tuple[Shape, Inputs]:
        key = tuple(point.items())
        if key not in self._inputs:
            shape = shape_of(point)
            self._inputs[key] = (shape, make_inputs(shape, self.device, seed=self.seed))
        return self._inputs[key]

    def width(self, point: dict[str, int]) -> int:
        return policy.active_width(shape_of(point).key("sm90"))

    def __call__(self, point: dict[str, int], tile: tuple) -> float:
        _, inputs = self.inputs(point)
        spec = LaunchSpec("probe", self.width(point), *tile, source="probe")
        key = tuple(point.items())
        est = self._est.get(key)
        n = 10 if est is None else max(2, min(40, int(self.target_us / max(est, 0.5))))
        us = graph_us(runner(inputs, spec), launches_per_graph=n, reps=self.reps)
        self._est.setdefault(key, us)
        self.measurements += 1
        return us

    def forget(self) -> None:
        """Free the inputs of every point (call between boxes)."""
        self._inputs.clear()
        self._est.clear()
        torch.cuda.empty_cache()
