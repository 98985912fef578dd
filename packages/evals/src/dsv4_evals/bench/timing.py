"""GPU timers and machine facts that every kernel's bench, tuner and report share.

Two clocks: ``triton.testing.do_bench`` medians (CUDA events; warm-up 100 ms, 500 ms of
repeats), the method ``ANCHORS.md`` used, which includes the host's launch cost; and
CUDA-graph replay medians (a graph of many launches, timed with events), which is the
GPU time alone, as a model step under FULL CUDA graphs sees it. Gates compare the
second: do_bench medians of few-µs launches swing with the host.

Also the floors every kernel is measured against (an empty launch, a store-only launch
of the same bytes, the copy bandwidth) and the JSON writer of every results file.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.language as tl

MIN_RATIO = 0.97
"""Every gate fails a table launch below this fraction of the baseline launch's speed."""


def do_bench_us(fn: Callable[[], object], warmup_ms: int = 100, rep_ms: int = 500) -> float:
    """Median µs per call with ``triton.testing.do_bench`` (ANCHORS.md's method).

    One call and a sync first, so that a compile never lands in do_bench's own
    estimate of how many repeats to run."""
    fn()
    torch.cuda.synchronize()
    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms,
                                         return_mode="median")) * 1000.0


def graph_us(fn: Callable[[], object], launches_per_graph: int = 20, reps: int = 30) -> float:
    """Median µs per launch over replays of a CUDA graph of back-to-back launches."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches_per_graph):
            fn()
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / launches_per_graph)
    del graph
    return statistics.median(times)


@triton.jit
def _empty_kernel(ptr, FLAG: tl.constexpr):
    if FLAG:
        tl.store(ptr, 1)


def empty_launch_us(device: torch.device) -> float:
    """An empty Triton launch under do_bench: the time floor of any launch."""
    dummy = torch.empty(1, dtype=torch.int32, device=device)
    return do_bench_us(lambda: _empty_kernel[(1,)](dummy, FLAG=False))


def empty_launch_graph_us(device: torch.device, launches_per_graph: int = 20) -> float:
    """An empty Triton launch inside a CUDA graph: the floor under graph replay. A bench
    whose calls are timed in larger graphs passes its own graph size, so that the floor
    and the calls pay the same per-replay overhead."""
    dummy = torch.empty(1, dtype=torch.int32, device=device)
    return graph_us(lambda: _empty_kernel[(1,)](dummy, FLAG=False), launches_per_graph)


@triton.jit
def _store_rows_kernel(out_ptr, row_stride, num_rows, WIDTH: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, WIDTH)
    ptrs = out_ptr + rows.to(tl.int64)[:, None] * row_stride + cols[None, :]
    tl.store(ptrs, tl.full((ROWS, WIDTH), -1, tl.int32), mask=(rows < num_rows)[:, None])


def store_only_runner(view: torch.Tensor) -> Callable[[], object]:
    """A launch that writes every element of a strided 2-D int32 view and reads nothing.

    The lower bound of any launch that writes these bytes in this pattern (rows of
    ``width * 4`` bytes, ``stride(0)`` apart) on this GPU: our kernel writes the same
    bytes but must first read each row's position.
    """
    rows, width = view.shape
    per_program = max(1, 2048 // width)
    grid = (triton.cdiv(rows, per_program),)

    def run() -> None:
        _store_rows_kernel[grid](view, view.stride(0), rows, WIDTH=width, ROWS=per_program,
                                 num_warps=4)

    return run


def copy_bandwidth_bytes_per_s(device: torch.device, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 4, dtype=torch.int32, device=device).random_()
    dst = torch.empty_like(src)
    us = do_bench_us(lambda: dst.copy_(src), warmup_ms=50, rep_ms=300)
    return 2 * nbytes / (us * 1e-6)



def gpu_info(device: torch.device) -> dict[str, object]:
    props = torch.cuda.get_device_properties(device)
    return {
        "gpu": props.name,
        "arch": f"sm{props.major}{props.minor}",
        "compute_capability": f"{props.major}.{props.minor}",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
    }


def gpu_slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=_jsonable) + "\n")


def _jsonable(value: object) -> object:
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)  # type: ignore[arg-type]
    raise TypeError(f"not JSON-serialisable: {value!r}")




def machine(device: torch.device) -> dict[str, object]:
    """:func:`gpu_info` plus the floors every kernel is measured against: an empty launch
    (under do_bench and in a graph) and the copy bandwidth."""
    info = gpu_info(device)
    info["empty_launch_us"] = empty_launch_us(device)
    info["empty_launch_graph_us"] = empty_launch_graph_us(device)
    info["copy_bandwidth_tb_s"] = copy_bandwidth_bytes_per_s(device) / 1e12
    return info
