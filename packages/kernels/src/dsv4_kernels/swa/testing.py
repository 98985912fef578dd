"""Seeded SWA batches with poisoned buffers, for tests, benchmarks and reports.

:func:`make_swa_step` lays out one model step the way vLLM 0.33.0's SWA metadata
builder does (decode requests first, then prefill requests; a token-to-request map,
a validity mask, paged block tables, optional image spans and replay starts) and
returns the two kernel calls it makes: decode rows (``token_offset = 0``, the plain
window) and prefill rows (``token_offset = num_decode_tokens``, the window widened by
``max_image_tokens`` columns). Inputs are generated on the CPU from the seed and
then moved, so a seed gives the same step on every device. Fresh output buffers are
poisoned, with a row stride larger than ``index_width`` when asked, so a check can
see what a launch wrote and what it must have left alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

POISON = -123456789
"""What fresh buffers are filled with: an unlikely value, never 0 or -1."""


@dataclass
class SwaCall:
    """All arguments of one ``compute_swa_indices_and_lens`` call, in vLLM's order."""

    swa_indices: torch.Tensor
    swa_lens: torch.Tensor
    window_size: int
    index_width: int
    left_visible: torch.Tensor
    right_visible: torch.Tensor
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    token_to_req_indices: torch.Tensor
    is_valid_token: torch.Tensor
    block_table: torch.Tensor
    block_size: int
    replay_start: torch.Tensor
    num_tokens: int
    token_offset: int
    has_image: bool = False
    label: str = field(default="", compare=False)

    def args(self) -> tuple[object, ...]:
        """The 13 positional arguments."""
        return (self.swa_indices, self.swa_lens, self.window_size, self.index_width,
                self.left_visible, self.right_visible, self.query_start_loc, self.seq_lens,
                self.token_to_req_indices, self.is_valid_token, self.block_table,
                self.block_size, self.replay_start)

    def kwargs(self) -> dict[str, object]:
        """The keyword arguments vLLM passes."""
        return {"num_tokens": self.num_tokens, "token_offset": self.token_offset,
                "has_image": self.has_image}

    def fresh(self) -> SwaCall:
        """The same call with newly poisoned copies of both output buffers."""
        return dataclasses.replace(self, swa_indices=torch.full_like(self.swa_indices, POISON),
                                   swa_lens=torch.full_like(self.swa_lens, POISON))

    def run(self, fn: Callable[..., object], **tile: int) -> SwaCall:
        """Run ``fn`` on a fresh copy of this call; return that copy."""
        call = self.fresh()
        fn(*call.args(), **call.kwargs(), **tile)
        return call


@dataclass
class SwaStep:
    """One model step: its decode call and its prefill call (either may be None)."""

    decode: SwaCall | None
    prefill: SwaCall | None
    num_decode_tokens: int
    num_prefill_tokens: int

    def calls(self) -> list[SwaCall]:
        return [c for c in (self.decode, self.prefill) if c is not None]


def make_swa_step(
    seed: int,
    *,
    decode_contexts: Sequence[int] = (),
    prefill_queries: Sequence[tuple[int, int]] = (),
    window_size: int = 128,
    block_size: int = 64,
    max_image_tokens: int = 0,
    image_spans: bool = False,
    replay: bool = False,
    pad_tokens: int = 0,
    invalid_fraction: float = 0.0,
    row_pad: int = 0,
    device: torch.device | str = "cpu",
) -> SwaStep:
    """A seeded step: decode requests with the given context lengths (one token each)
    and prefill requests given as ``(prefix_len, query_len)``.

    ``replay`` gives each request a random replay start (sometimes past some of its
    tokens, so negative lengths occur too); ``image_spans`` puts random image spans in
    the prefill queries (needs ``max_image_tokens > 0``); ``pad_tokens`` padding tokens
    follow the real ones (invalid, with garbage request indices) and
    ``invalid_fraction`` of the real tokens are marked invalid too; ``row_pad`` extra
    columns per buffer row are never written.
    """
    g = torch.Generator().manual_seed(seed)

    def randint(low: int, high: int) -> int:  # inclusive
        return int(torch.randint(low, high + 1, (1,), generator=g))

    q_lens = [1] * len(decode_contexts) + [q for _, q in prefill_queries]
    seq_lens = list(decode_contexts) + [p + q for p, q in prefill_queries]
    if any(s < 1 for s in seq_lens) or any(q < 1 for q in q_lens):
        raise ValueError("every request needs a context >= 1 and a query >= 1")
    num_reqs = len(q_lens)
    num_decode = len(decode_contexts)
    num_prefill = sum(q_lens) - num_decode
    num_tokens = num_decode + num_prefill + pad_tokens
    qsl = [0]
    for q in q_lens:
        qsl.append(qsl[-1] + q)
    t2r = torch.repeat_interleave(torch.arange(num_reqs), torch.tensor(q_lens, dtype=torch.long)
                                  ) if num_reqs else torch.zeros(0, dtype=torch.long)
    # Padding tokens point anywhere, even outside the batch: nothing may read through them.
    t2r = torch.cat([t2r, torch.randint(-5, num_reqs + 1000, (pad_tokens,), generator=g)])
    valid = torch.ones(num_tokens, dtype=torch.bool)
    valid[num_tokens - pad_tokens:] = False
    if invalid_fraction > 0 and num_tokens > pad_tokens:
        real = valid[: num_tokens - pad_tokens]
        real &= torch.rand(real.shape[0], generator=g) >= invalid_fraction
    max_seq = max(seq_lens, default=1)
    blocks_per_req = -(-max_seq // block_size) + 1
    physical = torch.randperm(max(num_reqs * blocks_per_req, 1) * 3, generator=g)
    block_table = physical[: max(num_reqs, 1) * blocks_per_req].reshape(max(num_reqs, 1), -1)
    # Entries past each request's last block are garbage no window may reach.
    for r, s in enumerate(seq_lens):
        used = -(-s // block_size)
        block_table[r, used:] = torch.randint(-(2**20), 2**20, (blocks_per_req - used,),
                                              generator=g)
    replay_start = torch.zeros(max(num_reqs, 1), dtype=torch.long)
    if replay:
        for r, s in enumerate(seq_lens):
            if randint(0, 2):
                replay_start[r] = randint(0, s)
    left = torch.zeros(num_tokens, dtype=torch.long)
    right = torch.zeros(num_tokens, dtype=torch.long)
    has_image = False
    if image_spans:
        if max_image_tokens <= 0:
            raise ValueError("image_spans needs max_image_tokens > 0")
        for r in range(num_decode, num_reqs):
            prefix, q = prefill_queries[r - num_decode]
            lo = prefix
            while lo < prefix + q and (lo == prefix or randint(0, 3)):
                span_start = randint(lo, prefix + q - 1)
                span_end = min(prefix + q - 1, span_start + randint(0, 2 * max_image_tokens))
                for t in range(qsl[r], qsl[r + 1]):
                    pos = prefix + t - qsl[r]
                    if span_start <= pos <= span_end:
                        left[t] = min(pos - span_start, max_image_tokens - 1)
                        right[t] = min(span_end - pos, max_image_tokens)
                        has_image = True
                lo = span_end + 2
    dev = torch.device(device)

    def i32(t: torch.Tensor) -> torch.Tensor:
        return t.to(torch.int32).to(dev)

    shared = dict(
        window_size=window_size, query_start_loc=i32(torch.tensor(qsl)),
        seq_lens=i32(torch.tensor(seq_lens or [1])), token_to_req_indices=i32(t2r),
        is_valid_token=valid.to(dev), block_table=i32(block_table), block_size=block_size,
        replay_start=i32(replay_start),
    )
    left_d, right_d = i32(left), i32(right)

    def call(rows: int, offset: int, width: int, image: bool, label: str) -> SwaCall:
        indices = torch.full((max(rows, 1), 1, width + row_pad), POISON, dtype=torch.int32,
                             device=dev)
        lens = torch.full((max(rows, 1),), POISON, dtype=torch.int32, device=dev)
        return SwaCall(indices, lens, index_width=width, num_tokens=rows, token_offset=offset,
                       has_image=image, left_visible=left_d if image else lens,
                       right_visible=right_d if image else lens, label=label, **shared)

    decode = call(num_decode, 0, window_size, False, "decode") if num_decode else None
    prefill_rows = num_tokens - num_decode
    prefill = (call(prefill_rows, num_decode, window_size + max_image_tokens, has_image,
                    "prefill") if prefill_rows else None)
    return SwaStep(decode, prefill, num_decode, num_prefill)


def written_mask(call: SwaCall) -> torch.Tensor:
    """Which cells of ``call.swa_indices`` (as a 2-D view) a call may write."""
    rows = call.swa_indices.select(1, 0)
    mask = torch.zeros(rows.shape, dtype=torch.bool, device=rows.device)
    mask[: call.num_tokens, : call.index_width] = True
    return mask


def assert_same_outputs(got: SwaCall, want: SwaCall) -> None:
    """Both calls wrote the same cells, and left every other cell poisoned."""
    g_rows, w_rows = got.swa_indices.select(1, 0), want.swa_indices.select(1, 0)
    mask = written_mask(want)
    assert torch.equal(g_rows, w_rows), _first_difference(g_rows, w_rows)
    assert bool((w_rows[~mask] == POISON).all()), "the reference wrote outside its rows"
    n = want.num_tokens
    assert torch.equal(got.swa_lens, want.swa_lens), _first_difference(
        got.swa_lens[None], want.swa_lens[None])
    assert bool((want.swa_lens[n:] == POISON).all()), "lens written past num_tokens"


def _first_difference(got: torch.Tensor, want: torch.Tensor) -> str:
    where = (got != want).nonzero()
    if where.numel() == 0:
        return "tensors differ in shape"
    i = tuple(int(v) for v in where[0])
    return f"{where.shape[0]} cells differ; first at {i}: got {int(got[i])}, want {int(want[i])}"
