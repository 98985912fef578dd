"""Seeded C128A batches with poisoned buffers, for tests, benchmarks and reports.

:func:`make_batch` builds every input of ``build_c128a_topk_metadata`` the way vLLM
lays them out (the benchmark shape of the anchors by default) plus freshly poisoned
output buffers, so a caller can check both what a launch wrote and what it must
have left alone. Inputs are generated on the CPU from the seed and then moved, so a
seed gives the same batch on every device.

Default shape: prefill tokens sit at positions ``arange(context - P, context)``;
decode tokens each belong to one of ``num_reqs`` requests and sit at a random
position in ``[context // 2, context)``; the block table's rows are a random
permutation of physical block ids, and every entry no token may read holds garbage
(random values, negative ones included), as does the padding of its row stride.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

POISON = -123456789
"""What fresh buffers are filled with: an unlikely value, never 0 or -1."""

WIDTH_ALIGNMENT = 128


def next_power_of_2(value: int) -> int:
    """The smallest power of two >= ``value`` (1 for values <= 1)."""
    return 1 if value <= 1 else 1 << (value - 1).bit_length()


def capacity_for(max_model_len: int, compress_ratio: int = 128) -> int:
    """vLLM's buffer width: ``align_up(cdiv(max_model_len, ratio), 128)``."""
    compressed = -(-max_model_len // compress_ratio)
    return -(-compressed // WIDTH_ALIGNMENT) * WIDTH_ALIGNMENT


def active_width(max_seq_len: int, capacity: int, compress_ratio: int = 128) -> int:
    """vLLM 0.33.0's active width for a batch whose longest sequence is ``max_seq_len``."""
    compressed = max(max_seq_len // compress_ratio, 1)
    return min(max(next_power_of_2(compressed), WIDTH_ALIGNMENT), capacity)


@dataclass
class Batch:
    """All arguments of one ``build_c128a_topk_metadata`` call."""

    positions: torch.Tensor
    compress_ratio: int
    num_decode_tokens: int
    token_to_req_indices: torch.Tensor
    block_table: torch.Tensor
    block_size: int
    slot_mapping: torch.Tensor
    global_decode_buffer: torch.Tensor
    decode_lens_buffer: torch.Tensor
    prefill_buffer: torch.Tensor
    width: int
    capacity: int
    decode_view_width: int | None = None
    poison: int = POISON

    @property
    def num_tokens(self) -> int:
        return self.positions.shape[0]

    @property
    def num_prefill_tokens(self) -> int:
        return self.num_tokens - self.num_decode_tokens

    @property
    def buffers(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.global_decode_buffer, self.decode_lens_buffer, self.prefill_buffer

    def args(self) -> tuple:
        """The ten positional arguments, in the function's order."""
        return (
            self.positions,
            self.compress_ratio,
            self.num_decode_tokens,
            self.token_to_req_indices,
            self.block_table,
            self.block_size,
            self.slot_mapping,
            self.global_decode_buffer,
            self.decode_lens_buffer,
            self.prefill_buffer,
        )

    def call(self, fn: Callable[..., tuple], **tile: object) -> tuple:
        """``fn(*args, width=..., decode_view_width=..., **tile)``: kernel or reference."""
        return fn(*self.args(), width=self.width, decode_view_width=self.decode_view_width, **tile)

    def fresh(self, poison: int | None = None) -> Batch:
        """The same inputs with new buffers of the same shapes, filled with ``poison``."""
        value = self.poison if poison is None else poison
        new = [torch.full_like(b, value) for b in self.buffers]
        return dataclasses.replace(
            self,
            global_decode_buffer=new[0],
            decode_lens_buffer=new[1],
            prefill_buffer=new[2],
            poison=value,
        )

    def written_masks(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Boolean masks of the elements a call may write, one per buffer."""
        masks = [torch.zeros(b.shape, dtype=torch.bool, device=b.device) for b in self.buffers]
        masks[0][: self.num_decode_tokens, : self.width] = True
        masks[1][: self.num_decode_tokens] = True
        masks[2][: self.num_prefill_tokens, : self.width] = True
        return masks[0], masks[1], masks[2]


def assert_untouched(batch: Batch) -> None:
    """Every element outside the region a call may write still holds the poison."""
    names = ("global_decode_buffer", "decode_lens_buffer", "prefill_buffer")
    for name, buf, written in zip(names, batch.buffers, batch.written_masks(), strict=True):
        outside = buf[~written]
        bad = outside != batch.poison
        if bool(bad.any()):
            where = (~written).nonzero()[bad.nonzero().flatten()[:5]].tolist()
            raise AssertionError(
                f"{name}: {int(bad.sum())} elements outside the written region changed, "
                f"first at {where}"
            )


def assert_same_buffers(actual: Batch, expected: Batch) -> None:
    """Both batches' buffers are equal element for element (written and untouched)."""
    names = ("global_decode_buffer", "decode_lens_buffer", "prefill_buffer")
    for name, got, want in zip(names, actual.buffers, expected.buffers, strict=True):
        if got.shape != want.shape:
            raise AssertionError(f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}")
        diff = got != want
        if bool(diff.any()):
            first = diff.nonzero()[:5].tolist()
            sample = [(i, int(got[tuple(i)]), int(want[tuple(i)])) for i in first]
            raise AssertionError(
                f"{name}: {int(diff.sum())} elements differ; first (index, got, expected): "
                f"{sample}"
            )


def assert_views(views: tuple, batch: Batch) -> None:
    """The returned views alias the buffers, keep their row stride and have the right shape."""
    decode, lens, prefill = views
    view_width = batch.width if batch.decode_view_width is None else batch.decode_view_width
    expected = (
        (decode, batch.global_decode_buffer, (batch.num_decode_tokens, view_width)),
        (lens, batch.decode_lens_buffer, (batch.num_decode_tokens,)),
        (prefill, batch.prefill_buffer, (batch.num_prefill_tokens, batch.width)),
    )
    for view, buf, shape in expected:
        if tuple(view.shape) != shape:
            raise AssertionError(f"view shape {tuple(view.shape)} != {shape}")
        # Compare storage and offset: an empty view's data_ptr() reads 0.
        same_start = (
            view.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()
            and view.storage_offset() == buf.storage_offset()
        )
        if not same_start or view.stride() != buf.stride():
            raise AssertionError(
                f"view (offset {view.storage_offset()}, strides {view.stride()}) does not "
                f"alias its buffer (offset {buf.storage_offset()}, strides {buf.stride()})"
            )


def _garbage(generator: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randint(-(2**31), 2**31 - 1, shape, generator=generator, dtype=torch.int64).to(
        torch.int32
    )


def make_batch(
    *,
    num_decode: int,
    num_prefill: int,
    context: int,
    capacity: int | None = None,
    block_size: int = 2,
    num_reqs: int | None = None,
    compress_ratio: int = 128,
    device: torch.device | str = "cpu",
    seed: int = 0,
    generator: torch.Generator | None = None,
    decode_positions: Sequence[int] | None = None,
    prefill_positions: Sequence[int] | None = None,
    decode_requests: Sequence[int] | None = None,
    padding: Sequence[bool] | None = None,
    width: int | None = None,
    decode_view_width: int | None = None,
    spare_rows: int = 1,
    table_spare_cols: int = 3,
    table_stride_pad: int = 5,
    poison: int = POISON,
) -> Batch:
    """A seeded batch of ``num_decode`` decode then ``num_prefill`` prefill tokens.

    ``context`` bounds the default positions (see the module doc) and, when
    ``capacity`` is None, sets it as ``capacity_for(context)``. ``width`` defaults to
    :func:`active_width` of the longest sequence (max position + 1). The optional
    sequences override the generated positions, request of each decode token and
    padding flags (a padding token gets ``slot_mapping < 0``). The buffers have
    ``spare_rows`` rows beyond the tokens; the block table's row stride exceeds its
    width by ``table_stride_pad`` and it has ``table_spare_cols`` columns more than
    the longest request needs. ``num_reqs`` defaults to ``min(num_decode, 64)``
    (at least 1). ``generator`` takes precedence over ``seed``.
    """
    if num_decode < 0 or num_prefill < 0 or context < 1:
        raise ValueError(
            f"make_batch: got num_decode={num_decode}, num_prefill={num_prefill}, "
            f"context={context}; expected non-negative token counts and context >= 1"
        )
    gen = generator if generator is not None else torch.Generator().manual_seed(seed)
    num_reqs = min(max(num_decode, 1), 64) if num_reqs is None else num_reqs
    if num_reqs < 1:
        raise ValueError(f"make_batch: num_reqs: got {num_reqs}; expected >= 1")

    if decode_positions is None:
        low = context // 2
        dec_pos = torch.randint(low, max(context, low + 1), (num_decode,), generator=gen)
    else:
        dec_pos = torch.tensor(list(decode_positions), dtype=torch.int64)
    if prefill_positions is None:
        pre_pos = torch.arange(context - num_prefill, context, dtype=torch.int64)
    else:
        pre_pos = torch.tensor(list(prefill_positions), dtype=torch.int64)
    if dec_pos.shape[0] != num_decode or pre_pos.shape[0] != num_prefill:
        raise ValueError(
            f"make_batch: got {dec_pos.shape[0]} decode and {pre_pos.shape[0]} prefill "
            f"positions; expected {num_decode} and {num_prefill}"
        )
    positions = torch.cat([dec_pos, pre_pos]).to(torch.int64)

    if decode_requests is None:
        req = torch.randint(0, num_reqs, (num_decode,), generator=gen, dtype=torch.int64)
    else:
        req = torch.tensor(list(decode_requests), dtype=torch.int64)
    if req.shape[0] != num_decode or (num_decode and not 0 <= int(req.min()) <= int(req.max())
                                      < num_reqs):
        raise ValueError(
            f"make_batch: decode_requests: expected {num_decode} ints in [0, {num_reqs})"
        )

    slots = torch.randint(0, 1 << 40, (num_decode,), generator=gen, dtype=torch.int64)
    if padding is not None:
        pad = torch.tensor(list(padding), dtype=torch.bool)
        if pad.shape[0] != num_decode:
            raise ValueError(f"make_batch: padding: expected {num_decode} flags")
        slots = torch.where(pad, -1 - slots % 7, slots)

    if capacity is None:
        capacity = capacity_for(context, compress_ratio)
    if width is None:
        max_seq_len = int(positions.max()) + 1 if positions.numel() else 1
        width = active_width(max_seq_len, capacity, compress_ratio)

    # Blocks each request's tokens may read: those of its longest sequence, up to the
    # width (a row never reads past it).
    visible = torch.div(dec_pos + 1, compress_ratio, rounding_mode="trunc").clamp(0, width)
    needed_blocks = torch.zeros(num_reqs, dtype=torch.int64)
    if num_decode:
        blocks = -(-visible // block_size)
        needed_blocks.scatter_reduce_(0, req, blocks, reduce="amax")
    table_cols = max(int(needed_blocks.max()), 1) + table_spare_cols
    ids = torch.randperm(num_reqs * table_cols, generator=gen).to(torch.int32)
    storage = _garbage(gen, (num_reqs, table_cols + table_stride_pad))
    table = storage[:, :table_cols]
    table.copy_(ids.reshape(num_reqs, table_cols))
    unread = torch.arange(table_cols)[None, :] >= needed_blocks[:, None]
    table[unread] = _garbage(gen, (int(unread.sum()),))

    rows_d, rows_p = num_decode + spare_rows, num_prefill + spare_rows
    filler_req = torch.randint(0, num_reqs, (spare_rows,), generator=gen, dtype=torch.int64)
    filler_slots = torch.randint(-5, 1 << 20, (spare_rows,), generator=gen, dtype=torch.int64)
    dev = torch.device(device)

    def full(shape: tuple[int, ...]) -> torch.Tensor:
        return torch.full(shape, poison, dtype=torch.int32, device=dev)

    return Batch(
        positions=positions.to(dev),
        compress_ratio=compress_ratio,
        num_decode_tokens=num_decode,
        token_to_req_indices=torch.cat([req, filler_req]).to(torch.int32).to(dev),
        block_table=storage.to(dev)[:, :table_cols],
        block_size=block_size,
        slot_mapping=torch.cat([slots, filler_slots]).to(dev),
        global_decode_buffer=full((rows_d, capacity)),
        decode_lens_buffer=full((rows_d,)),
        prefill_buffer=full((rows_p, capacity)),
        width=width,
        capacity=capacity,
        decode_view_width=decode_view_width,
        poison=poison,
    )
