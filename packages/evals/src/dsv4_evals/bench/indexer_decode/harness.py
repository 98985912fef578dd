"""Indexer decode steps, the two sides compared, and their equality.

vLLM's side is its decode path's work as ``DeepseekV32IndexerMetadataBuilder.build`` does
it for a decode-only step (vLLM 0.33.0, native decode, compress ratio 4), statement for
statement: the device ``torch.diff`` into ``decode_lens``, the copy into
``per_req_decode_lens``, the host ``torch.diff`` of ``query_start_loc_cpu`` with its
``.max().item()`` and two ``.min().item()``, the slices of ``seq_lens`` and the block
table, ``expanded_seq_lens[:n] = seq_lens // ratio``, the zero fill and the unsqueeze
(:func:`vllm_decode_path`). dsv4's side is what the plugin runs instead
(:func:`dsv4_decode_path`): one pass over ``query_start_loc_cpu``, the kernel's checks,
one launch with the tile, and the same views. The compressed slot mapping, the DeepGEMM
schedule and the metadata objects are the same calls on both sides and left out. That
vLLM's build and the plugin's give identical metadata is shown through vLLM's real
builder by dsv4-vllm's tests and the step benchmark (``vllm-step``); here the sides are
timed and their buffers compared.

Steps come from :func:`dsv4_kernels.indexer_decode.testing.make_step`: real requests of
one token at a context, CUDA-graph padding requests, buffers of
``max_num_batched_tokens`` (8192) rows, poisoned.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from dsv4_kernels.indexer_decode import launch
from dsv4_kernels.indexer_decode.testing import DecodeCall, make_step
from dsv4_policy.kernels import indexer_decode as policy

BASELINE = "vllm"
"""The tile name of vLLM's own decode path."""
BUFFER = 8192
RATIO = 4
"""DeepSeek-V4's indexer compress ratio."""


@dataclass(frozen=True)
class Shape:
    """One anchor step: ``real`` decode requests at ``context``, padded to ``padded``."""

    real: int
    context: int = 1 << 17
    padded: int | None = None

    @property
    def name(self) -> str:
        if self.padded is not None:
            return f"padded-{self.real}of{self.padded}"
        return f"decode-T{self.real}"

    @property
    def label(self) -> str:
        return f"{self.name}-ctx{self.context // 1024}K"


def anchor_shapes() -> list[Shape]:
    """The steps the gates quote: decode T = 1..512 at 128K, CUDA-graph padded ones."""
    return ([Shape(t) for t in (1, 8, 64, 256, 512)] + [Shape(64, 1 << 20), Shape(64, 4096)]
            + [Shape(5, padded=8), Shape(60, padded=64), Shape(500, padded=512)])


def make_call(shape: Shape, device: torch.device, seed: int = 0) -> DecodeCall:
    g = torch.Generator().manual_seed(seed + shape.real)
    low = max(shape.context - shape.context // 8, 1)
    contexts = torch.randint(low, shape.context + 1, (shape.real,), generator=g).tolist()
    pads = 0 if shape.padded is None else shape.padded - shape.real
    return make_step(seed, contexts, pad_requests=pads, compress_ratio=RATIO,
                     buffer_rows=BUFFER, device=device)


def call_of(point: dict[str, int], device: torch.device, seed: int) -> DecodeCall:
    """A step for a key: ``num_reqs`` requests and ``num_tokens`` tokens (the first
    ``min`` of them real one-token requests, the other requests CUDA-graph padding, the
    other tokens past the requests)."""
    n, m = point["num_reqs"], point["num_tokens"]
    real = min(n, m)
    g = torch.Generator().manual_seed(seed)
    contexts = torch.randint(1, 1 << 20, (real,), generator=g).tolist()
    return make_step(seed, contexts, pad_requests=n - real, pad_tokens=m - real,
                     compress_ratio=point.get("compress_ratio", RATIO),
                     buffer_rows=max(BUFFER, n, m), device=device)


def key_of(call: DecodeCall, arch: str, deep_gemm: int = 0) -> policy.Key:
    return policy.Key(arch, call.compress_ratio, deep_gemm, call.num_reqs, call.num_tokens)


def resolved_tile(call: DecodeCall, arch: str,
                  table: policy.Table | None = None) -> str | tuple[int, int]:
    """The shipped (or given) table's tile for the step, or :data:`BASELINE` on a miss."""
    found = policy.resolve(key_of(call, arch), table)
    return BASELINE if found.source == "baseline" else found.compile_key()


def vllm_decode_path(call: DecodeCall) -> tuple[object, ...]:
    """vLLM 0.33.0's decode-path work for the step (see the module docstring)."""
    n, m = call.num_reqs, call.num_tokens
    torch.diff(call.query_start_loc[: n + 1], out=call.decode_lens[:n])
    call.per_req_decode_lens[:n].copy_(call.decode_lens[:n])
    decode_lens = call.decode_lens[:n]
    lens_cpu = torch.diff(call.query_start_loc_cpu[: n + 1])
    seq_lens = call.seq_lens[:n]
    longest = int(lens_cpu.max().item())
    shortest = int(lens_cpu.min().item())
    padding = int(lens_cpu.min().item()) != longest
    call.expanded_seq_lens[:n] = seq_lens // call.compress_ratio
    call.expanded_seq_lens[n:m] = 0
    view = call.expanded_seq_lens[:m]
    view = view.unsqueeze(-1)
    return (view, decode_lens, call.per_req_decode_lens[:n], padding, shortest == longest,
            longest)


def dsv4_decode_path(call: DecodeCall, tile: tuple[int, int]) -> tuple[object, ...]:
    """What the plugin runs instead: one host pass, the checks, one launch, the views."""
    n, m = call.num_reqs, call.num_tokens
    values = call.query_start_loc_cpu.numpy()
    lens = values[1:n + 1] - values[:n]
    longest, shortest = int(lens.max()), int(lens.min())
    checked = launch.check(*call.args())
    launch.launch_checked(checked, *call.args(), *tile)
    view = call.expanded_seq_lens.as_strided((m, 1), (1, 1))
    return (view, call.decode_lens.as_strided((n,), (1,)),
            call.per_req_decode_lens.as_strided((n,), (1,)), shortest != longest,
            shortest == longest, longest)


def runner(call: DecodeCall, tile: object) -> Callable[[], object]:
    """A no-argument run of ``call``: vLLM's decode path, or dsv4's at ``tile``."""
    if tile == BASELINE:
        return lambda: vllm_decode_path(call)
    return lambda: dsv4_decode_path(call, tile)  # type: ignore[arg-type]


def outputs_equal(call: DecodeCall, tile: object) -> bool:
    """Whether both sides leave the same three whole buffers and return the same views
    and host facts."""
    want, got = call.fresh(), call.fresh()
    a, b = runner(want, BASELINE)(), runner(got, tile)()
    if want.query_start_loc.is_cuda:
        torch.cuda.synchronize(want.query_start_loc.device)
    same = all(torch.equal(getattr(want, name), getattr(got, name))
               for name in ("decode_lens", "per_req_decode_lens", "expanded_seq_lens"))
    for x, y in zip(a, b, strict=True):  # type: ignore[arg-type]
        if isinstance(x, torch.Tensor):
            same = same and x.shape == y.shape and x.stride() == y.stride() and bool(
                torch.equal(x, y))
        else:
            same = same and x == y
    return same


def host_us(fn: Callable[[], object], device: torch.device, calls: int = 200,
            rounds: int = 7) -> float:
    """Median host µs per call: wall time of ``calls`` back-to-back calls, the device
    synchronised before and after each round (so the host never waits on a full queue)."""
    for _ in range(10):
        fn()
    times = []
    for _ in range(rounds):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        stop = time.perf_counter_ns()
        times.append((stop - start) / 1e3 / calls)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    times.sort()
    return times[len(times) // 2]
