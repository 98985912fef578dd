"""What the CombineTopkSwaIndices gates, tuner and report measure, defined once.

A probe point is ``{compress_ratio, top_k, num_reqs, num_tokens}`` (DeepSeek-V4's
128-token window, text-only rows): the policy key fields that vary in serving. Its
chunk is laid out as vLLM 0.33.0's FlashMLA prefill lays it out
(:func:`dsv4_kernels.combine_topk_swa.testing.make_chunk`: uneven requests behind random
prefixes, seeded). The two launches compared are vLLM's whole
``combine_topk_swa_indices`` (the ``fill_(-1)`` and its kernel on its ``(num_reqs,
256)`` grid, extracted by :mod:`.upstream`) and dsv4's one launch with a tile. Timing is
GPU time per call by CUDA-graph replay (:func:`dsv4_evals.bench.timing.graph_us`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from dsv4_kernels.combine_topk_swa import launch
from dsv4_kernels.combine_topk_swa.testing import Chunk, make_chunk, random_queries
from dsv4_policy.kernels import combine_topk_swa as policy

from dsv4_evals.bench import timing
from dsv4_evals.bench.combine_topk_swa import upstream

WINDOW = 128
INDEX_TOPK = 512
MAX_MODEL_LEN = 1 << 17
"""C128A capacity 1024: the active widths probed go up to it."""
KINDS = {"c128a": 128, "c4a": 4, "swa": 1}
MAX_REQS = 8
BASELINE = "upstream"
"""The tile label of vLLM 0.33.0's own function in measurements and tuner candidates."""
REPORTED = (512, 2048, 8192, 32768)


def kind_of(compress_ratio: int) -> str:
    return next(k for k, r in KINDS.items() if r == compress_ratio)


def c128a_width(tokens: int) -> int:
    """vLLM's C128A active width for one request of ``tokens`` (next pow2 of the
    compressed length, at least 128, at most the capacity)."""
    return min(max(1 << max(tokens // 128 - 1, 0).bit_length(), 128), 1024)


def top_k(kind: str, tokens: int) -> int:
    return {"c128a": c128a_width(tokens), "c4a": INDEX_TOPK, "swa": 0}[kind]


@dataclass(frozen=True)
class Anchor:
    """One fresh request of ``tokens`` tokens in a layer of ``kind``: the targets' shape."""

    kind: str
    tokens: int

    @property
    def name(self) -> str:
        return f"{self.kind}-T{self.tokens}"

    def point(self) -> dict[str, int]:
        return {"compress_ratio": KINDS[self.kind], "top_k": top_k(self.kind, self.tokens),
                "num_reqs": 1, "num_tokens": self.tokens, "fresh": 1}


def anchors() -> list[Anchor]:
    return [Anchor(kind, t) for kind in KINDS for t in REPORTED]


def key_of(point: dict[str, int], arch: str) -> policy.Key:
    return policy.Key(arch, point["compress_ratio"], point["top_k"], WINDOW, 0, 0,
                      point["num_reqs"], point["num_tokens"])


def resolved_tile(point: dict[str, int], arch: str, table: object | None = None) -> object:
    """The tile the policy picks for ``point`` (``BASELINE`` when it falls back)."""
    found = policy.resolve(key_of(point, arch), table)  # type: ignore[arg-type]
    return BASELINE if found.source == "baseline" else found.compile_key()


def make_call(point: dict[str, int], device: torch.device, seed: int = 0) -> Chunk:
    """The seeded chunk of ``point`` on ``device`` (``fresh``: requests with no prefix)."""
    key = tuple(sorted(point.items()))
    g = torch.Generator().manual_seed(seed * 7919 + zlib.crc32(repr(key).encode()))
    kind = kind_of(point["compress_ratio"])
    total, reqs = point["num_tokens"], point["num_reqs"]
    queries = random_queries(g, total, reqs, 0 if point.get("fresh") else 65536)
    if point.get("fresh") and reqs == 1:
        queries = [(0, total)]
    return make_chunk(seed, kind=kind, queries=queries, window_size=WINDOW,
                      index_topk=INDEX_TOPK, max_model_len=MAX_MODEL_LEN,
                      c128a_width=point["top_k"] if kind == "c128a" else None, device=device,
                      label=label(point))


def label(point: dict[str, int]) -> str:
    kind = kind_of(point["compress_ratio"])
    extra = f"-k{point['top_k']}" if kind == "c128a" else ""
    return f"{kind}{extra}-r{point['num_reqs']}-t{point['num_tokens']}"


def runner(call: Chunk, tile: object, up: upstream.Upstream) -> Callable[[], object]:
    """One call: vLLM's own function (``tile == BASELINE``) or dsv4's launch with ``tile``."""
    args = call.args()
    if tile == BASELINE:
        return lambda: upstream.combine_topk_swa_indices(up, *args)
    prepared = launch.prepare(*tile)  # type: ignore[misc]
    return lambda: prepared(*args)


def outputs_equal(call: Chunk, tile: object, up: upstream.Upstream) -> bool:
    """Whether ``tile`` leaves exactly vLLM's whole buffers (every cell, every length)."""
    want, got = call.fresh(), call.fresh()
    runner(want, BASELINE, up)()
    runner(got, tile, up)()
    return bool(torch.equal(want.indices_storage, got.indices_storage)
                and torch.equal(want.lens_storage, got.lens_storage))


def bytes_moved(call: Chunk) -> int:
    """Bytes any correct call moves: the index view and lengths written, the top-k
    columns and the per-request tensors read."""
    rows, cols = call.out_rows, call.out_cols
    read = call.num_tokens * call.topk * 4 + 4 * 4 * call.seq_lens.shape[0]
    return rows * cols * 4 + call.num_tokens * 4 + read


def floor_us(call: Chunk, bandwidth: float) -> float:
    """:func:`bytes_moved` over the copy bandwidth (bytes read + written per second), µs."""
    return bytes_moved(call) / bandwidth * 1e6


class Measure:
    """``measure(point, tile) -> µs`` for the probe rules: chunks cached per point,
    outputs checked equal to vLLM's once per (point, tile), launches per graph scaled so
    a graph runs about ``target_us``."""

    def __init__(self, device: torch.device, up: upstream.Upstream, seed: int = 0,
                 target_us: float = 300.0) -> None:
        self.device = device
        self.upstream = up
        self.seed = seed
        self.target_us = target_us
        self._calls: dict[tuple, Chunk] = {}
        self._scale: dict[tuple, int] = {}
        self._checked: set[tuple] = set()

    def call(self, point: dict[str, int]) -> Chunk:
        key = tuple(sorted(point.items()))
        found = self._calls.get(key)
        if found is None:
            if len(self._calls) >= 16:
                self._calls.clear()
            found = self._calls[key] = make_call(point, self.device, self.seed)
        return found

    def __call__(self, point: dict[str, int], tile: object) -> float:
        call = self.call(point)
        key = tuple(sorted(point.items()))
        if tile != BASELINE and (key, tile) not in self._checked:
            if not outputs_equal(call, tile, self.upstream):
                raise SystemExit(f"tile {tile}: outputs differ from vLLM's at {label(point)}")
            self._checked.add((key, tile))
        n = self._scale.get(key)
        if n is None:
            one = timing.graph_us(runner(call, BASELINE, self.upstream), launches_per_graph=3,
                                  reps=3)
            n = self._scale[key] = max(5, min(50, int(self.target_us / max(one, 1.0))))
        return timing.graph_us(runner(call, tile, self.upstream), launches_per_graph=n,
                               reps=15)

    def forget(self) -> None:
        """Free the cached chunks (long sweeps hold many large buffers otherwise)."""
        self._calls.clear()


def entry_box(entry: policy.Entry) -> dict[str, tuple[int, int]]:
    """An entry's match as the probe rules' box over the fields that vary in serving."""
    def span(name: str, default: tuple[int, int]) -> tuple[int, int]:
        cond = entry.match.get(name)
        if cond is None:
            return default
        if isinstance(cond, policy.Range):
            return (cond.min, cond.top)
        if isinstance(cond, int):
            return (cond, cond)
        return (min(cond), max(cond))  # type: ignore[type-var]

    return {"compress_ratio": span("compress_ratio", (1, 128)),
            "top_k": span("top_k", (0, 1024)), "num_reqs": span("num_reqs", (1, MAX_REQS)),
            "num_tokens": span("num_tokens", (1, 65536))}


def valid_point(point: dict[str, int]) -> dict[str, int]:
    """A drawn point made a call vLLM makes: the ratio a layer kind's, ``top_k`` that
    kind's (C128A: its width, a power of two), at most one request per token."""
    ratio = min(KINDS.values(), key=lambda r: abs(r - point["compress_ratio"]))
    kind = kind_of(ratio)
    width = min(max(1 << max(point["top_k"] - 1, 0).bit_length(), 128), 1024)
    k = width if kind == "c128a" else top_k(kind, 0)
    tokens = point["num_tokens"]
    return {"compress_ratio": ratio, "top_k": k, "num_reqs": min(point["num_reqs"], tokens),
            "num_tokens": tokens}
