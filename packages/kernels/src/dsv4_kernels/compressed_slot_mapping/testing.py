"""Seeded compressed-slot-mapping steps with poisoned buffers, for tests and benchmarks.

:func:`make_step` lays out one model step the way vLLM 0.33.0's DeepSeek-V4 builders
call ``get_compressed_slot_mapping``: decode requests first (one token each), then
prefill requests behind random prefixes; ``query_start_loc`` / ``seq_lens`` as int32,
``slot_mapping`` as int64 slots with PAD (-1) entries where asked (SWA bounded replay,
or under decode context parallelism the tokens other ranks own), a paged block table in
compressed units with garbage past each request's last block, CUDA-graph padding
requests of zero tokens, and a pre-allocated output buffer longer than the step.
Inputs are generated on the CPU from the seed and then moved, so a seed gives the same
step on every device. Output buffers are poisoned before each launch, so a check sees
every row a launch wrote and every row it must have left alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

POISON = -0x5EED_BAD_CAFE
"""What fresh output buffers hold: an unlikely value, never -1 and never a slot id."""


@dataclass
class SlotMappingCall:
    """All arguments of one ``get_compressed_slot_mapping`` call, in vLLM's order."""

    num_tokens: int
    slot_mapping: torch.Tensor
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    block_size: int
    compress_ratio: int
    out: torch.Tensor | None
    dcp_world_size: int = 1
    cp_interleave: int = 1
    label: str = field(default="", compare=False)

    def args(self) -> tuple[object, ...]:
        """The seven positional arguments of ``get_compressed_slot_mapping``."""
        return (self.num_tokens, self.slot_mapping, self.query_start_loc, self.seq_lens,
                self.block_table, self.block_size, self.compress_ratio)

    def kwargs(self) -> dict[str, object]:
        """The keyword arguments vLLM's builders pass."""
        return {"out": self.out, "dcp_world_size": self.dcp_world_size,
                "cp_interleave": self.cp_interleave}

    def kernel_args(self, rows: torch.Tensor) -> tuple[object, ...]:
        """The kernel object's nine arguments, writing into ``rows``."""
        return (rows, self.slot_mapping, self.query_start_loc, self.seq_lens,
                self.block_table, self.block_size, self.compress_ratio,
                self.dcp_world_size, self.cp_interleave)

    def fresh(self) -> SlotMappingCall:
        """The same call with a newly poisoned copy of the output buffer."""
        out = None if self.out is None else torch.full_like(self.out, POISON)
        return dataclasses.replace(self, out=out)

    def run(self, fn: Callable[..., torch.Tensor], **tile: int) -> tuple[SlotMappingCall,
                                                                          torch.Tensor]:
        """Run ``fn`` on a fresh copy of this call; return that copy and the result."""
        call = self.fresh()
        result = fn(*call.args(), **call.kwargs(), **tile)
        return call, result


def make_step(
    seed: int,
    *,
    decode_contexts: Sequence[int] = (),
    prefill_queries: Sequence[tuple[int, int]] = (),
    compress_ratio: int = 4,
    block_size: int = 64,
    extra_rows: int = 37,
    pad_requests: int = 0,
    pad_fraction: float = 0.0,
    replay: bool = False,
    dcp_world_size: int = 1,
    cp_interleave: int = 1,
    first_row: int = 0,
    int32_slots: bool = False,
    short_positions: bool = False,
    with_out: bool = True,
    device: torch.device | str = "cpu",
) -> SlotMappingCall:
    """A seeded step: decode requests with the given context lengths (one token each) and
    prefill requests given as ``(prefix_len, query_len)``.

    ``extra_rows`` rows of the output buffer follow the step's tokens (vLLM's buffer has
    ``max_num_batched_tokens`` rows); ``pad_requests`` zero-token requests follow the
    real ones (a CUDA-graph-padded batch: ``query_start_loc`` repeats its end,
    ``seq_lens`` 0, garbage block-table rows). ``pad_fraction`` of the tokens get a PAD
    slot at random; ``replay`` gives each prefill a PAD run at its start (bounded
    replay). ``dcp_world_size > 1`` makes this rank 0 of that many: tokens the other
    ranks own (``pos // cp_interleave % dcp_world_size != 0``) get a PAD slot.
    ``first_row`` makes ``query_start_loc`` start there instead of 0 (rows before it
    belong to no request). ``short_positions`` gives some requests a sequence shorter
    than their query (negative positions, vLLM's padded or invalid sequences).
    """
    g = torch.Generator().manual_seed(seed)
    q_lens = [1] * len(decode_contexts) + [q for _, q in prefill_queries]
    seq = list(decode_contexts) + [p + q for p, q in prefill_queries]
    if any(s < 1 for s in seq) or any(q < 1 for q in q_lens):
        raise ValueError("every request needs a context >= 1 and a query >= 1")
    if short_positions:
        # Every other multi-token request gets a sequence one or two tokens shorter than
        # its query: its first positions are -2 and -1 (position -1 completes a state).
        seq = [max(q - 1 - int(torch.randint(0, 2, (1,), generator=g)), 0)
               if q > 1 and r % 2 == 0 else s
               for r, (s, q) in enumerate(zip(seq, q_lens, strict=True))]
    num_real = len(q_lens)
    num_reqs = num_real + pad_requests
    qsl = [first_row]
    for q in q_lens:
        qsl.append(qsl[-1] + q)
    qsl += [qsl[-1]] * pad_requests
    num_tokens = qsl[-1]
    seq += [0] * pad_requests
    # The compressed position of the last token decides how many blocks a row needs;
    # DCP-local positions are smaller, so the plain bound covers them too.
    blocks = max((s // compress_ratio) // block_size + 1 for s in seq) + 1 if seq else 1
    table = torch.randint(0, 2**30, (num_reqs, blocks), generator=g)
    # Entries past each request's last block are garbage (negative too) nothing may read.
    used = torch.tensor([(max(s, 1) // compress_ratio) // block_size + 1 for s in seq],
                        dtype=torch.long).reshape(num_reqs, 1)
    past = torch.arange(blocks).reshape(1, blocks) >= used
    table[past] = torch.randint(-(2**30), 2**30, (int(past.sum()),), generator=g)
    top = 2**30 if int32_slots else 2**40
    slots = torch.randint(0, top, (num_tokens + 5,), generator=g)
    # Rows before the first request belong to none: their slots are never looked at.
    slots[:first_row] = torch.randint(-top, top, (first_row,), generator=g)
    if pad_fraction > 0:
        slots[torch.rand(slots.shape[0], generator=g) < pad_fraction] = -1
    for r in range(num_real):
        start, end = qsl[r], qsl[r + 1]
        if replay and r >= len(decode_contexts) and end - start > 1:
            slots[start: start + int(torch.randint(0, end - start, (1,), generator=g))] = -1
        if dcp_world_size > 1:
            for t in range(start, end):
                pos = seq[r] - (end - start) + t - start
                if pos >= 0 and pos // cp_interleave % dcp_world_size != 0:
                    slots[t] = -1
    dev = torch.device(device)

    def i32(values: object) -> torch.Tensor:
        return torch.as_tensor(values).to(torch.int32).to(dev)

    out = (torch.full((num_tokens + extra_rows,), POISON, dtype=torch.int64, device=dev)
           if with_out else None)
    label = (f"d{len(decode_contexts)}-p{len(prefill_queries)}-t{num_tokens}"
             f"-cr{compress_ratio}-bs{block_size}")
    return SlotMappingCall(
        num_tokens=num_tokens,
        slot_mapping=(slots.to(torch.int32) if int32_slots else slots).to(dev),
        query_start_loc=i32(qsl), seq_lens=i32(seq if seq else [0]),
        block_table=i32(table), block_size=block_size,
        compress_ratio=compress_ratio, out=out, dcp_world_size=dcp_world_size,
        cp_interleave=cp_interleave, label=label)


def random_step(seed: int, device: torch.device | str = "cpu", *,
                max_tokens: int = 600) -> SlotMappingCall:
    """A seeded step of a random kind: decode, prefill, mixed, padded, PAD slots, DCP,
    uneven request lengths, at DeepSeek-V4's compress ratios (4, 128) and others."""
    g = torch.Generator().manual_seed(10_000 + seed)

    def pick(n: int) -> int:
        return int(torch.randint(0, n, (1,), generator=g))

    ratio = [4, 128, 4, 2, 8][pick(5)]
    block_size = [64, 2, 16, 1, 32][pick(5)]
    kind = pick(4)
    decodes = [1 + pick(40_000) for _ in range(pick(60) if kind != 1 else 0)]
    prefills = []
    if kind != 0:
        budget = max(max_tokens - len(decodes), 1)
        for _ in range(1 + pick(4)):
            prefills.append((pick(20_000) if pick(2) else 0, 1 + pick(max(budget // 2, 1))))
    if not decodes and not prefills:
        decodes = [5]
    dcp = [1, 1, 1, 2, 4][pick(5)]
    interleave = ratio * [1, 2][pick(2)] if dcp > 1 else [1, 1, 64][pick(3)]
    return make_step(seed, decode_contexts=decodes, prefill_queries=prefills,
                     compress_ratio=ratio, block_size=block_size, extra_rows=pick(300),
                     pad_requests=pick(3) * pick(5), pad_fraction=[0.0, 0.1, 0.5][pick(3)],
                     replay=bool(pick(2)), dcp_world_size=dcp, cp_interleave=interleave,
                     first_row=[0, 0, 0, 3][pick(4)], int32_slots=pick(4) == 0,
                     short_positions=pick(5) == 0, device=device)


def first_difference(got: torch.Tensor, want: torch.Tensor) -> str:
    """Where two tensors first differ, for an assertion message."""
    if got.shape != want.shape:
        return f"shapes differ: got {tuple(got.shape)}, want {tuple(want.shape)}"
    where = (got != want).nonzero()
    if where.numel() == 0:
        return "no difference"
    i = tuple(int(v) for v in where[0])
    return (f"{where.shape[0]} rows differ; first at {i}: got {int(got[i])}, "
            f"want {int(want[i])}")


def assert_same_buffers(got: SlotMappingCall, want: SlotMappingCall) -> None:
    """Both calls left the same value in every row of their whole output buffers."""
    assert got.out is not None and want.out is not None
    assert torch.equal(got.out, want.out), first_difference(got.out, want.out)
    assert not bool((want.out == POISON).any()), "the reference left a poisoned row"


def assert_same_result(got: torch.Tensor, want: torch.Tensor) -> None:
    """The returned tensors agree in shape, dtype, device and every value."""
    assert got.dtype == want.dtype == torch.int64, (got.dtype, want.dtype)
    assert got.device == want.device, (got.device, want.device)
    assert torch.equal(got, want), first_difference(got, want)
