"""Seeded indexer decode steps with poisoned buffers, for tests and benchmarks.

:func:`make_step` lays out one decode-only step the way vLLM 0.33.0's model runner hands
it to the indexer builder: ``query_start_loc`` (int32) with one token per real request
and repeated ends for CUDA-graph padding requests (query length 0), ``seq_lens`` with 0
for padding requests, and the builder's persistent buffers (``max_num_batched_tokens``
rows each), all poisoned before each launch so that a check sees every element a launch
wrote and every element it must have left alone. Inputs are generated on the CPU from
the seed and then moved, so a seed gives the same step on every device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

POISON = -0x5EED_BAD
"""What fresh buffers hold: an unlikely int32 value, never a length."""
BUFFERS = ("decode_lens", "per_req_decode_lens", "expanded_seq_lens")


@dataclass
class DecodeCall:
    """All arguments of one :func:`~dsv4_kernels.indexer_decode.launch.indexer_decode_metadata`
    call, and the step's host copy of ``query_start_loc``."""

    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    decode_lens: torch.Tensor
    per_req_decode_lens: torch.Tensor
    expanded_seq_lens: torch.Tensor
    num_reqs: int
    num_tokens: int
    compress_ratio: int
    query_start_loc_cpu: torch.Tensor = field(default_factory=lambda: torch.zeros(1))
    label: str = field(default="", compare=False)

    def args(self) -> tuple[object, ...]:
        return (self.query_start_loc, self.seq_lens, self.decode_lens,
                self.per_req_decode_lens, self.expanded_seq_lens, self.num_reqs,
                self.num_tokens, self.compress_ratio)

    def fresh(self) -> DecodeCall:
        """The same call with newly poisoned copies of the three buffers."""
        return dataclasses.replace(self, **{name: torch.full_like(getattr(self, name), POISON)
                                            for name in BUFFERS})

    def run(self, fn: Callable[..., object], **tile: int) -> DecodeCall:
        """Run ``fn`` on a fresh copy of this call; return that copy."""
        call = self.fresh()
        fn(*call.args(), **tile)
        return call


def make_step(
    seed: int,
    contexts: Sequence[int],
    *,
    pad_requests: int = 0,
    pad_tokens: int | None = None,
    compress_ratio: int = 4,
    buffer_rows: int = 160,
    query_lens: Sequence[int] | None = None,
    device: torch.device | str = "cpu",
) -> DecodeCall:
    """A seeded decode step: one request per context (``seq_lens``), then
    ``pad_requests`` CUDA-graph padding requests (query length 0, ``seq_lens`` 0).

    ``num_tokens`` is the real tokens plus ``pad_tokens`` (default: one per padding
    request, as FULL-graph padding makes a batch of ``num_reqs`` tokens); ``query_lens``
    replaces the one token per real request. The buffers hold ``buffer_rows`` rows (at
    least what the step needs), poisoned. ``query_start_loc`` gets garbage entries past
    its end, as vLLM's persistent buffer holds.
    """
    g = torch.Generator().manual_seed(seed)
    lens = list(query_lens) if query_lens is not None else [1] * len(contexts)
    lens += [0] * pad_requests
    num_reqs = len(lens)
    qsl = [0]
    for q in lens:
        qsl.append(qsl[-1] + q)
    real_tokens = qsl[-1]
    num_tokens = real_tokens + (pad_requests if pad_tokens is None else pad_tokens)
    tail = torch.randint(-1000, 1 << 20, (3,), generator=g).tolist()
    seq = list(contexts) + [0] * pad_requests
    rows = max(buffer_rows, num_reqs, num_tokens)
    dev = torch.device(device)

    def i32(values: object) -> torch.Tensor:
        return torch.as_tensor(values).to(torch.int32).to(dev)

    qsl_cpu = torch.tensor(qsl + tail, dtype=torch.int32)
    return DecodeCall(
        query_start_loc=i32(qsl + tail), seq_lens=i32([*seq, 7, 8]),
        decode_lens=torch.full((rows,), POISON, dtype=torch.int32, device=dev),
        per_req_decode_lens=torch.full((rows,), POISON, dtype=torch.int32, device=dev),
        expanded_seq_lens=torch.full((rows,), POISON, dtype=torch.int32, device=dev),
        num_reqs=num_reqs, num_tokens=num_tokens, compress_ratio=compress_ratio,
        query_start_loc_cpu=qsl_cpu,
        label=f"r{num_reqs}-t{num_tokens}-pad{pad_requests}-cr{compress_ratio}")


def random_step(seed: int, device: torch.device | str = "cpu", *,
                max_reqs: int = 300) -> DecodeCall:
    """A seeded decode step of a random kind: plain decode, CUDA-graph padded, all
    padding, padding requests without tokens, contexts from 0 to 1M (and negative ones,
    which no valid step has), at DeepSeek-V4's ratio 4 and others."""
    g = torch.Generator().manual_seed(20_000 + seed)

    def pick(n: int) -> int:
        return int(torch.randint(0, n, (1,), generator=g))

    real = pick(max_reqs) + (pick(2) if pick(8) else 0)
    pads = [0, 0, pick(8), pick(64)][pick(4)]
    if real == 0 and pads == 0:
        real = 1
    top = [1 << 20, 200_000, 5000, 64][pick(4)]
    contexts = [pick(top) for _ in range(real)]
    if real and pick(6) == 0:
        contexts[pick(real)] = -pick(9) - 1
    pad_tokens = [None, None, 0, pick(5)][pick(4)]
    ratio = [4, 4, 128, 1, 2, 3][pick(6)]
    rows = [8192, 160, 1024][pick(3)]
    return make_step(seed, contexts, pad_requests=pads, pad_tokens=pad_tokens,
                     compress_ratio=ratio, buffer_rows=rows, device=device)


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


def assert_same_buffers(got: DecodeCall, want: DecodeCall) -> None:
    """Both calls left the same value in every element of the three whole buffers."""
    for name in BUFFERS:
        a, b = getattr(got, name), getattr(want, name)
        assert torch.equal(a, b), f"{name}: {first_difference(a, b)}"


def written(call: DecodeCall) -> dict[str, int]:
    """How many elements of each buffer no longer hold the poison (what was written)."""
    return {name: int((getattr(call, name) != POISON).sum()) for name in BUFFERS}
