"""Seeded prefill chunks with poisoned buffers, for tests, benchmarks and the tuner.

:func:`make_chunk` lays out one ``combine_topk_swa_indices`` call the way vLLM 0.33.0's
FlashMLA prefill path makes it (``nvidia/flashmla.py``): a chunk of 1 to 4 requests
behind random prefixes, the chunk's slice of the global ``query_start_loc`` (decode
tokens and earlier chunks first, so it does not start at 0), the chunk plan's ``N``
(the longest compressed prefix) and ``M`` (``N`` plus the longest gather), the SWA
gather lengths (``query + min(prefix, window - 1)``, sometimes cut short by a replay
boundary), and the top-k rows of one layer kind:

- ``"c128a"``: ``compress_ratio`` 128, ``topk`` the active width
  (``min(max(next_pow2(max_seq // 128), 128), capacity)``), rows at the capacity stride;
- ``"c4a"``: ``compress_ratio`` 4, ``topk`` the indexer's top-k (512 by default), rows a
  slice of the indexer's buffer at a row offset;
- ``"swa"``: an SWA-only layer, ``compress_ratio`` 1 and ``topk`` 0.

Top-k values are random (not the column index), so a misplaced column shows. Image
visibility (``max_image_tokens > 0``) puts random spans of at most ``max_image_tokens``
tokens into the queries, with ``left``/``right`` each token's distance to its span's
ends, as vLLM's builder sets them. ``pad_rows`` adds rows past the chunk's last token
(the top-k and output buffers both longer), ``extra_rows`` output rows past the top-k
rows, ``row_pad`` output columns past ``combined_topk`` and ``stride_pad`` more row
stride (rounded up to a multiple of 4 elements). Output buffers are fresh allocations
filled with :data:`POISON` before each launch, so a check sees every cell a launch wrote
and every cell it left alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from dsv4_kernels.combine_topk_swa.checks import combined_width

POISON = -123456789
"""What fresh output buffers are filled with: an unlikely value, never 0 or -1."""
KINDS = ("c128a", "c4a", "swa")
WINDOW = 128


@dataclass
class Chunk:
    """All arguments of one ``combine_topk_swa_indices`` call, in vLLM's order, plus the
    whole allocations behind the two output views (compared cell by cell)."""

    topk_indices: torch.Tensor
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    gather_lens: torch.Tensor
    window_size: int
    compress_ratio: int
    topk: int
    M: int
    N: int
    indices_storage: torch.Tensor  # (rows, stride) allocation behind out[0]
    lens_storage: torch.Tensor
    out_rows: int
    out_cols: int
    left_visible: torch.Tensor | None = None
    right_visible: torch.Tensor | None = None
    max_image_tokens: int = 0
    num_tokens: int = 0  # the chunk's tokens (rows past them are padding)
    label: str = field(default="", compare=False)

    @property
    def out(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``out`` pair: views of the poisoned allocations."""
        return (self.indices_storage[: self.out_rows, : self.out_cols],
                self.lens_storage[: self.out_rows])

    def args(self) -> tuple[object, ...]:
        """The 13 arguments, positionally, with ``out`` the views."""
        return (self.topk_indices, self.query_start_loc, self.seq_lens, self.gather_lens,
                self.window_size, self.compress_ratio, self.topk, self.M, self.N, self.out,
                self.left_visible, self.right_visible, self.max_image_tokens)

    def fresh(self) -> Chunk:
        """The same call with newly poisoned copies of both output allocations."""
        return dataclasses.replace(self,
                                   indices_storage=torch.full_like(self.indices_storage, POISON),
                                   lens_storage=torch.full_like(self.lens_storage, POISON))

    def run(self, fn: Callable[..., object], **tile: int) -> Chunk:
        """Run ``fn`` on a fresh copy of this call; return that copy."""
        call = self.fresh()
        result = fn(*call.args(), **tile)
        if result is not None:
            got = tuple(result)  # type: ignore[arg-type]
            want = call.out
            assert len(got) == 2 and all(
                g.data_ptr() == w.data_ptr() and g.shape == w.shape and g.stride() == w.stride()
                for g, w in zip(got, want, strict=True)), "did not return the out views"
        return call


def next_pow2(n: int) -> int:
    return 1 if n < 1 else 1 << (n - 1).bit_length()


def make_chunk(
    seed: int,
    *,
    kind: str = "c4a",
    queries: Sequence[tuple[int, int]] = ((0, 300),),
    window_size: int = WINDOW,
    index_topk: int = 512,
    max_model_len: int = 65536,
    c128a_width: int | None = None,
    max_image_tokens: int = 0,
    image_spans: bool | None = None,
    replay: bool = False,
    pad_rows: int = 0,
    extra_rows: int = 0,
    row_pad: int = 0,
    stride_pad: int = 0,
    qsl_tail: int = 0,
    device: torch.device | str = "cpu",
    label: str = "",
) -> Chunk:
    """A seeded chunk of requests given as ``(prefix_len, query_len)``.

    ``image_spans`` (default: ``max_image_tokens > 0``) passes visibility tensors;
    ``replay`` cuts some gathers short (a replay boundary inside the window);
    ``qsl_tail`` more ``query_start_loc`` entries follow the chunk's (they must not be
    read). ``c128a_width`` sets a C128A chunk's ``topk`` (the active width is the whole
    batch's, so it may exceed what this chunk's own requests need).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
    if not queries or any(p < 0 or q < 0 for p, q in queries):
        raise ValueError("queries must be a non-empty list of (prefix >= 0, query >= 0)")
    g = torch.Generator().manual_seed(seed)

    def randint(low: int, high: int) -> int:  # inclusive
        return int(torch.randint(low, high + 1, (1,), generator=g))

    q_lens = [q for _, q in queries]
    seqs = [p + q for p, q in queries]
    num_tokens = sum(q_lens)
    rows = num_tokens + pad_rows
    w = window_size
    ratio = {"c128a": 128, "c4a": 4, "swa": 1}[kind]
    if kind == "c128a":
        compressed_len = -(-max_model_len // 128)
        capacity = -(-compressed_len // 128) * 128
        topk = min(max(next_pow2(max(seqs) // 128), 128), capacity)
        if c128a_width is not None:
            topk = c128a_width
        topk_cols = max(capacity, topk)
    elif kind == "c4a":
        topk = topk_cols = index_topk
    else:
        topk, topk_cols = 0, index_topk
    gathers = []
    for (prefix, q) in queries:
        full = q + min(prefix, w - 1)
        gathers.append(randint(q, full) if replay and randint(0, 1) else full)
    compressed = [s // ratio for s in seqs] if topk else [0] * len(seqs)
    n_off = max(compressed)
    m_stride = n_off + max(gathers)
    # Top-k: each row's first entries are random workspace indices (and -1 here and there,
    # as the indexer emits); past them, garbage the kernel must not copy.
    offset_rows = randint(0, 7) if kind == "c4a" else 0
    topk_full = torch.randint(-1, max(n_off, 1), (rows + offset_rows, topk_cols), generator=g,
                              dtype=torch.int32)
    topk_full[torch.rand(topk_full.shape, generator=g) < 0.02] = -1
    topk_rows = topk_full[offset_rows:]
    if kind == "c128a":
        topk_rows = topk_rows[:, :topk]
    base = randint(0, 5000)
    qsl = [base]
    for q in q_lens:
        qsl.append(qsl[-1] + q)
    qsl += [qsl[-1] + randint(0, 50) for _ in range(qsl_tail)]
    use_image = max_image_tokens > 0 if image_spans is None else image_spans
    left = torch.zeros(rows, dtype=torch.int32)
    right = torch.zeros(rows, dtype=torch.int32)
    if use_image and max_image_tokens > 0:
        for b, (prefix, q) in enumerate(queries):
            lo = prefix
            while lo < prefix + q and randint(0, 3):
                span_start = randint(max(lo - max_image_tokens // 2, 0), prefix + q - 1)
                span_len = randint(1, max_image_tokens)
                span_end = span_start + span_len - 1
                for pos in range(max(span_start, prefix), min(span_end, prefix + q - 1) + 1):
                    t = qsl[b] - base + pos - prefix
                    left[t] = pos - span_start
                    right[t] = span_end - pos
                lo = span_end + 2
    dev = torch.device(device)
    cols = combined_width(topk, w, max_image_tokens) + row_pad
    # Rows at a 16-byte multiple stride, as vLLM's workspace rows are (the kernel's checks
    # refuse others; the view's own columns may be any number).
    stride = -(-(cols + stride_pad) // 4) * 4
    out_rows = rows + extra_rows
    indices = torch.full((out_rows, stride), POISON, dtype=torch.int32, device=dev)
    lens = torch.full((out_rows,), POISON, dtype=torch.int32, device=dev)
    i32 = dict(dtype=torch.int32, device=dev)
    return Chunk(
        topk_indices=topk_rows.to(dev) if kind != "c4a" else topk_full.to(dev)[offset_rows:],
        query_start_loc=torch.tensor(qsl, **i32), seq_lens=torch.tensor(seqs, **i32),
        gather_lens=torch.tensor(gathers, **i32), window_size=w, compress_ratio=ratio,
        topk=topk, M=m_stride, N=n_off, indices_storage=indices, lens_storage=lens,
        out_rows=out_rows, out_cols=cols,
        left_visible=left.to(dev) if use_image else None,
        right_visible=right.to(dev) if use_image else None,
        max_image_tokens=max_image_tokens, num_tokens=num_tokens,
        label=label or f"{kind}-{'+'.join(f'{p}:{q}' for p, q in queries)}",
    )


def random_queries(g: torch.Generator, total: int, num_reqs: int,
                   max_prefix: int = 65536) -> list[tuple[int, int]]:
    """``num_reqs`` uneven ``(prefix, query)`` pairs whose queries sum to ``total``."""
    if num_reqs < 1 or total < num_reqs:
        raise ValueError("need 1 <= num_reqs <= total")
    cuts = sorted(torch.randperm(total - 1, generator=g)[: num_reqs - 1].add(1).tolist())
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
    prefixes = torch.randint(0, max_prefix + 1, (num_reqs,), generator=g).tolist()
    # About a third of the requests start fresh (no prefix), as most prefills do.
    return [(0 if p % 3 == 0 else p, s) for p, s in zip(prefixes, sizes, strict=True)]


def written_mask(call: Chunk) -> torch.Tensor:
    """Cells of ``indices_storage`` a call may write: the ``out[0]`` view."""
    mask = torch.zeros(call.indices_storage.shape, dtype=torch.bool,
                       device=call.indices_storage.device)
    mask[: call.out_rows, : call.out_cols] = True
    return mask


def assert_same_outputs(got: Chunk, want: Chunk) -> None:
    """Both calls left the same whole allocations: every cell of the index buffer and
    every length; the view is fully written (no poison left in it), nothing outside it
    is, and only the chunk's rows got lengths."""
    assert torch.equal(got.indices_storage, want.indices_storage), first_difference(
        got.indices_storage, want.indices_storage)
    assert torch.equal(got.lens_storage, want.lens_storage), first_difference(
        got.lens_storage[None], want.lens_storage[None])
    mask = written_mask(want)
    cells = want.indices_storage
    assert not bool((cells[mask] == POISON).any()), "a cell of the view was not written"
    assert bool((cells[~mask] == POISON).all()), "a cell outside the view was written"
    n = want.num_tokens
    assert not bool((want.lens_storage[:n] == POISON).any()), "a chunk row has no length"
    assert bool((want.lens_storage[n:] == POISON).all()), "a padding row got a length"


def first_difference(got: torch.Tensor, want: torch.Tensor) -> str:
    """Where two equal-shaped tensors first differ, for assertion messages."""
    if got.shape != want.shape:
        return f"shapes differ: {tuple(got.shape)} vs {tuple(want.shape)}"
    where = (got != want).nonzero()
    if where.numel() == 0:
        return "no cell differs"
    i = tuple(int(v) for v in where[0])
    return f"{where.shape[0]} cells differ; first at {i}: got {int(got[i])}, want {int(want[i])}"
