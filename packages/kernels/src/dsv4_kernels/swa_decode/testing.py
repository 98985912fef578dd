"""Seeded SWA decode steps with poisoned buffers, for tests and benchmarks.

:func:`make_step` lays out one decode-only causal step the way vLLM 0.33.0's model
runner hands it to ``DeepseekSparseSWAMetadataBuilder.build``: one token per real
request, then CUDA-graph padding tokens (slot -1), each of a padding request of query
length 0 and context 0 at the end of the batch; ``slot_mapping`` int64 with the real
tokens' slots; a block table whose blocks under each window are distinct shuffled
physical blocks (every other entry is garbage no window reaches); the token-to-request
map as vLLM builds it (padding tokens map to request 0); the builder's replay starts
(zeros, or random ones). The builder's three output buffers (``max_num_batched_tokens``
rows) are poisoned with seeded random values (random bools in ``is_valid_token``,
random values other than 0 and -1 in the others), and :meth:`SWADecodeCall.fresh`
copies exactly that poison, so two runs compare over whole buffers and a check sees
both what a launch wrote and what it left alone. Inputs are generated on the CPU from
the seed and then moved, so a seed gives the same step on every device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

BUFFERS = ("swa_indices", "swa_lens", "is_valid_token")
"""The buffers a call writes (in part)."""


@dataclass
class SWADecodeCall:
    """All arguments of one :func:`~dsv4_kernels.swa_decode.launch.build_swa_decode` call,
    and the step's host facts."""

    swa_indices: torch.Tensor
    swa_lens: torch.Tensor
    is_valid_token: torch.Tensor
    slot_mapping: torch.Tensor
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    token_to_req_indices: torch.Tensor
    block_table: torch.Tensor
    replay_start: torch.Tensor
    window_size: int
    block_size: int
    num_tokens: int
    num_reqs: int = 0
    """Requests of the step, padding requests included (``query_start_loc`` holds
    ``num_reqs + 1`` entries, then garbage)."""
    query_start_loc_cpu: torch.Tensor = field(default_factory=lambda: torch.zeros(1))
    label: str = field(default="", compare=False)

    def args(self) -> tuple[torch.Tensor, ...]:
        """The nine tensor arguments, in call order."""
        return (self.swa_indices, self.swa_lens, self.is_valid_token, self.slot_mapping,
                self.query_start_loc, self.seq_lens, self.token_to_req_indices,
                self.block_table, self.replay_start)

    def kwargs(self) -> dict[str, int]:
        """``window_size``, ``block_size`` and ``num_tokens``."""
        return {"window_size": self.window_size, "block_size": self.block_size,
                "num_tokens": self.num_tokens}

    def check_args(self) -> tuple[object, ...]:
        """The arguments of ``check`` / ``launch_checked`` (after ``checked``), in order."""
        return (*self.args(), self.window_size, self.block_size, self.num_tokens)

    def fresh(self) -> SWADecodeCall:
        """The same call with copies of the three buffers, holding this call's poison."""
        return dataclasses.replace(self, **{name: getattr(self, name).clone()
                                            for name in BUFFERS})

    def run(self, fn: Callable[..., object], **tile: int) -> SWADecodeCall:
        """Run ``fn`` on a fresh copy of this call; return that copy."""
        call = self.fresh()
        fn(*call.args(), **call.kwargs(), **tile)
        return call


def poison(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Seeded poison: random bools, or random int32 values other than 0 and -1."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    values = torch.randint(-(2**31), 2**31 - 1, shape, generator=g, dtype=torch.int64)
    values[(values == 0) | (values == -1)] = 0x5EED
    return values.to(dtype)


def make_step(
    seed: int,
    contexts: Sequence[int],
    *,
    pad_tokens: int = 0,
    window: int = 128,
    block_size: int = 64,
    buffer_rows: int = 8192,
    device: torch.device | str = "cpu",
    replay: bool = False,
    prefill_slots: int = 0,
) -> SWADecodeCall:
    """A seeded decode step: one token per context (the request's ``seq_lens``, the
    token at position ``context - 1``), then ``pad_tokens`` padding tokens.

    The buffers hold ``max(buffer_rows, num_tokens)`` rows of ``window`` columns.
    ``replay`` gives about two in three real requests a random replay start in
    ``[0, context + 2]`` (so windows shorten, vanish, or get negative lengths, which
    vLLM stores as they are); otherwise ``replay_start`` is zeros, as the builder's
    ``no_replay_start``.

    ``prefill_slots`` appends that many prefill tokens' slots after the decode tokens, as
    a mixed step's slot mapping holds them (random slots, one in five -1): they only
    widen the validity mask, so ``is_valid_token`` holds at least all of them.
    """
    if any(c < 1 for c in contexts):
        raise ValueError("every real request needs a context >= 1")
    real = len(contexts)
    num_tokens = real + pad_tokens
    if num_tokens < 1 or pad_tokens < 0:
        raise ValueError("a step needs at least one token, and pad_tokens >= 0")
    g = torch.Generator().manual_seed(seed)
    num_reqs = num_tokens  # every padding token has a padding request of query length 0
    qsl = list(range(real + 1)) + [real] * pad_tokens
    qsl_tail = torch.randint(-1000, 1 << 20, (3,), generator=g).tolist()
    seq = [*contexts, *[0] * pad_tokens, *torch.randint(1, 1 << 20, (2,), generator=g).tolist()]
    max_ctx = max(contexts, default=1)
    cols = -(-max_ctx // block_size) + 1
    # Garbage everywhere, then distinct shuffled physical blocks under every window.
    table = torch.randint(-(2**20), 2**20, (num_reqs, cols), generator=g)
    firsts = [max(c - window, 0) // block_size for c in contexts]
    lasts = [(c - 1) // block_size for c in contexts]
    needed = sum(last - first + 1 for first, last in zip(firsts, lasts, strict=True))
    pool = max(2 * needed, 16)
    if pool * block_size > 2**31 - 1:
        raise ValueError("the step's slot ids would not fit in int32")
    physical = torch.randperm(pool, generator=g)[:needed]
    at = 0
    for r, (first, last) in enumerate(zip(firsts, lasts, strict=True)):
        count = last - first + 1
        table[r, first:last + 1] = physical[at:at + count]
        at += count
    ctx = torch.tensor(contexts, dtype=torch.int64)
    rows = torch.arange(real)
    slots = (table[rows, (ctx - 1) // block_size] * block_size + (ctx - 1) % block_size
             if real else torch.zeros(0, dtype=torch.int64))
    if prefill_slots < 0:
        raise ValueError("prefill_slots must be >= 0")
    prefill = torch.zeros(0, dtype=torch.int64)
    if prefill_slots:  # drawn only then: a decode step's seed gives the same step as before
        prefill = torch.randint(0, 1 << 30, (prefill_slots,), generator=g)
        prefill[torch.rand(prefill_slots, generator=g) < 0.2] = -1
    slot_mapping = torch.cat([slots, torch.full((pad_tokens,), -1, dtype=torch.int64),
                              prefill])
    # vLLM's map: token t of a one-token request t; tokens past the mapped ones map to 0.
    t2r = torch.cat([torch.arange(real), torch.zeros(pad_tokens, dtype=torch.int64)])
    replay_start = torch.zeros(num_reqs + 1, dtype=torch.int64)
    if replay:
        for r, c in enumerate(contexts):
            if int(torch.randint(0, 3, (1,), generator=g)):
                replay_start[r] = int(torch.randint(0, c + 3, (1,), generator=g))
    buffer = max(buffer_rows, num_tokens)
    indices = poison(g, (buffer, 1, window), torch.int32)
    lens = poison(g, (buffer,), torch.int32)
    valid = poison(g, (max(buffer, num_tokens + prefill_slots),), torch.bool)
    dev = torch.device(device)

    def i32(values: object) -> torch.Tensor:
        return torch.as_tensor(values).to(torch.int32).to(dev)

    return SWADecodeCall(
        swa_indices=indices.to(dev), swa_lens=lens.to(dev), is_valid_token=valid.to(dev),
        slot_mapping=slot_mapping.to(dev), query_start_loc=i32(qsl + qsl_tail),
        seq_lens=i32(seq), token_to_req_indices=i32(t2r), block_table=i32(table),
        replay_start=i32(replay_start), window_size=window, block_size=block_size,
        num_tokens=num_tokens, num_reqs=num_reqs,
        query_start_loc_cpu=torch.tensor(qsl + qsl_tail, dtype=torch.int32),
        label=f"t{num_tokens}-pad{pad_tokens}-w{window}-bs{block_size}"
              f"{'-replay' if replay else ''}"
              f"{f'-prefill{prefill_slots}' if prefill_slots else ''}")


def random_step(seed: int, device: torch.device | str = "cpu", *,
                max_tokens: int = 300) -> SWADecodeCall:
    """A seeded decode step of a random kind: plain decode, CUDA-graph padded (to a
    power of two, or by a few tokens), all padding; contexts from 1 to 1M; windows,
    block sizes and buffer lengths of several sizes; replay starts or none."""
    g = torch.Generator().manual_seed(30_000 + seed)

    def pick(n: int) -> int:
        return int(torch.randint(0, n, (1,), generator=g))

    real = pick(max_tokens) + 1 if pick(8) else 0
    kind = pick(3)
    if kind == 0:
        pads = 0
    elif kind == 1:
        pads = (1 << max(real, 1).bit_length()) - real if real else 1 + pick(64)
    else:
        pads = pick(6)
    if real + pads == 0:
        pads = 1
    window = [128, 128, 16, 1, 3, 64][pick(6)]
    block_size = [64, 64, 16, 1, 256][pick(5)]
    top = [1 << 20, 200_000, 5000, 300][pick(4)]
    # The block table holds a row of cdiv(top, block_size) + 1 entries per request:
    # at most about 8M entries in all.
    top = min(top, max(300, (8 << 20) // max(real, 1) * block_size))
    contexts = [pick(top) + 1 for _ in range(real)]
    rows = [8192, real + pads, real + pads + 37][pick(3)]
    return make_step(seed, contexts, pad_tokens=pads, window=window, block_size=block_size,
                     buffer_rows=rows, device=device, replay=bool(pick(2)))


def first_difference(got: torch.Tensor, want: torch.Tensor) -> str:
    """Where two tensors first differ, for an assertion message."""
    if got.shape != want.shape:
        return f"shapes differ: got {tuple(got.shape)}, want {tuple(want.shape)}"
    where = (got != want).nonzero()
    if where.numel() == 0:
        return "no difference"
    i = tuple(int(v) for v in where[0])
    return (f"{where.shape[0]} elements differ; first at {i}: got {int(got[i])}, "
            f"want {int(want[i])}")


def assert_same_buffers(got: SWADecodeCall, want: SWADecodeCall,
                        template: SWADecodeCall | None = None) -> None:
    """Both calls left the same value in every element of the three whole buffers; with
    ``template`` (the call both ran fresh copies of), also that nothing outside what a
    step writes changed: ``is_valid_token`` past ``S`` and ``swa_indices`` rows past
    ``num_tokens`` still hold the template's poison."""
    for name in BUFFERS:
        a, b = getattr(got, name), getattr(want, name)
        assert torch.equal(a, b), f"{name}: {first_difference(a, b)}"
    if template is not None:
        assert_untouched(got, template)


def assert_untouched(call: SWADecodeCall, template: SWADecodeCall) -> None:
    """What a step must leave alone still holds the template's poison, and ``swa_lens``
    is zero past ``num_tokens``."""
    s, n = call.slot_mapping.shape[0], call.num_tokens
    valid, was = call.is_valid_token[s:], template.is_valid_token[s:]
    assert torch.equal(valid, was), f"is_valid_token[{s}:]: {first_difference(valid, was)}"
    rows, was = call.swa_indices[n:], template.swa_indices[n:]
    assert torch.equal(rows, was), f"swa_indices[{n}:]: {first_difference(rows, was)}"
    tail = call.swa_lens[n:]
    assert bool((tail == 0).all()), f"swa_lens[{n}:]: {first_difference(tail, 0 * tail)}"
