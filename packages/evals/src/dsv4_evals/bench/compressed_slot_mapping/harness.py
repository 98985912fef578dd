"""Compressed slot mapping steps, the two launches compared, and their equality.

vLLM's side is :mod:`.upstream`'s ``get_compressed_slot_mapping`` (the fill of the whole
buffer, then vLLM's extracted kernel on its one-program-per-request grid); dsv4's side is
the launch the policy resolves for the step's key. Steps come from
:func:`dsv4_kernels.compressed_slot_mapping.testing.make_step`: the buffer has
``max_num_batched_tokens`` (8192) rows, or the step's tokens when more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from dsv4_kernels.compressed_slot_mapping import launch
from dsv4_kernels.compressed_slot_mapping.testing import POISON, SlotMappingCall, make_step
from dsv4_policy.kernels import compressed_slot_mapping as policy

BASELINE = "vllm"
"""The tile name of vLLM's own function (fill + kernel)."""
BUFFER = 8192
RATIOS = {4: 64, 128: 2}
"""DeepSeek-V4's compress ratios and their compressed entries per 256-token block."""


@dataclass(frozen=True)
class Shape:
    """One anchor step: ``decode`` requests of one token, or one prefill of ``tokens``."""

    phase: str
    tokens: int
    compress_ratio: int = 4

    @property
    def name(self) -> str:
        kind = f"decode-R{self.tokens}" if self.phase == "decode" else f"prefill-T{self.tokens}"
        return kind

    @property
    def label(self) -> str:
        return f"{self.name}-cr{self.compress_ratio}"


def anchor_shapes() -> list[Shape]:
    """The steps the gates quote, at both ratios."""
    return [Shape(phase, tokens, ratio) for ratio in RATIOS
            for phase, tokens in (("decode", 1), ("decode", 64), ("decode", 512),
                                  ("prefill", 2048), ("prefill", 8192), ("prefill", 32768))]


def make_call(shape: Shape, device: torch.device, seed: int = 0) -> SlotMappingCall:
    block = RATIOS[shape.compress_ratio]
    g = torch.Generator().manual_seed(seed + shape.tokens)
    if shape.phase == "decode":
        contexts = torch.randint(1, 200_000, (shape.tokens,), generator=g).tolist()
        return make_step(seed, decode_contexts=contexts, compress_ratio=shape.compress_ratio,
                         block_size=block, extra_rows=BUFFER - shape.tokens, device=device)
    return make_step(seed, prefill_queries=[(int(torch.randint(0, 50_000, (1,), generator=g)),
                                             shape.tokens)],
                     compress_ratio=shape.compress_ratio, block_size=block,
                     extra_rows=max(BUFFER - shape.tokens, 0), device=device)


def key_of(call: SlotMappingCall, arch: str) -> policy.Key:
    rows = call.num_tokens if call.out is None else call.out.shape[0]
    return policy.Key(arch, call.compress_ratio, call.block_size, call.dcp_world_size,
                      call.block_table.shape[0], call.num_tokens, rows)


def resolved_tile(call: SlotMappingCall, arch: str,
                  table: policy.Table | None = None) -> str | tuple[int, int]:
    """The shipped (or given) table's tile for the call, or :data:`BASELINE` on a miss."""
    found = policy.resolve(key_of(call, arch), table)
    return BASELINE if found.source == "baseline" else found.compile_key()


def runner(call: SlotMappingCall, tile: object, upstream: object) -> Callable[[], object]:
    """A no-argument launch of ``call``: vLLM's function, or dsv4's at ``tile``."""
    args, kwargs = call.args(), call.kwargs()
    if tile == BASELINE:
        return lambda: upstream.get_compressed_slot_mapping(*args, **kwargs)  # type: ignore[attr-defined]
    run = launch.prepare(*tile)  # type: ignore[misc]
    return lambda: run(*args, **kwargs)


def outputs_equal(call: SlotMappingCall, tile: object, upstream: object) -> bool:
    """Whether both launches leave the same whole buffer (no poison) and result."""
    want, got = call.fresh(), call.fresh()
    want_result = runner(want, BASELINE, upstream)()
    result = runner(got, tile, upstream)()
    if want.out is None or got.out is None:
        return bool(torch.equal(want_result, result))  # type: ignore[arg-type]
    return (bool(torch.equal(want.out, got.out)) and not bool((got.out == POISON).any())
            and bool(torch.equal(want_result, result)))  # type: ignore[arg-type]


def floor_us(rows: int, bandwidth: float) -> float:
    """The write floor of one call: every output row (int64) written once."""
    return rows * 8 / bandwidth * 1e6
