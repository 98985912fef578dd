"""The Triton kernel behind :func:`dsv4_kernels.indexer_decode.launch.indexer_decode_metadata`.

vLLM 0.33.0 prepares a decode-only indexer step with five ATen ops on the device (a
``diff`` of ``query_start_loc`` into ``decode_lens``, a copy of it into
``per_req_decode_lens``, a ``floor_divide`` and a copy into ``expanded_seq_lens``, a zero
fill behind it), each its own host dispatch and, but for the empty fill, its own
kernel. Here one grid covers the rows ``[0, max(num_reqs, num_tokens))``: program ``p``
owns rows ``[p*TPP, p*TPP + TPP)``, and a row ``r`` writes

- below ``num_reqs``: ``decode_lens[r] = per_req_decode_lens[r] =
  query_start_loc[r + 1] - query_start_loc[r]`` (int32, wrapping as torch's does) and
  ``expanded_seq_lens[r] = floor(seq_lens[r] / compress_ratio)``: torch's ``//`` on an
  int32 tensor rounds toward minus infinity, Triton's ``//`` toward zero, so a nonzero
  negative remainder takes one off;
- in ``[num_reqs, num_tokens)``: ``expanded_seq_lens[r] = 0``;

and nothing else. The only constexpr is ``TOKENS_PER_PROGRAM``; every pointer and
scalar is in ``do_not_specialize``, so the compile key is ``(tokens_per_program,
num_warps)`` and a new batch, compress ratio or buffer reuses the binary already built
(every tensor is int32, so a tile is one binary).
"""

from __future__ import annotations

import triton
import triton.language as tl

# Every non-constexpr parameter: none of them is part of the compile key. A test checks
# this list is exactly the kernel's non-constexpr parameters, in order.
RUNTIME_ARGS: tuple[str, ...] = (
    "query_start_loc_ptr",
    "seq_lens_ptr",
    "decode_lens_ptr",
    "per_req_decode_lens_ptr",
    "expanded_seq_lens_ptr",
    "num_reqs",
    "num_tokens",
    "compress_ratio",
)
CONSTEXPRS: tuple[str, ...] = ("TOKENS_PER_PROGRAM",)


@triton.jit(do_not_specialize=RUNTIME_ARGS)
def indexer_decode_kernel(
    query_start_loc_ptr,
    seq_lens_ptr,
    decode_lens_ptr,
    per_req_decode_lens_ptr,
    expanded_seq_lens_ptr,
    num_reqs,
    num_tokens,
    compress_ratio,
    TOKENS_PER_PROGRAM: tl.constexpr,
):
    rows = tl.program_id(0) * TOKENS_PER_PROGRAM + tl.arange(0, TOKENS_PER_PROGRAM)
    is_req = rows < num_reqs
    start = tl.load(query_start_loc_ptr + rows, mask=is_req, other=0)
    end = tl.load(query_start_loc_ptr + rows + 1, mask=is_req, other=0)
    seq = tl.load(seq_lens_ptr + rows, mask=is_req, other=0)
    lens = end - start
    tl.store(decode_lens_ptr + rows, lens, mask=is_req)
    tl.store(per_req_decode_lens_ptr + rows, lens, mask=is_req)
    quotient = seq // compress_ratio
    # compress_ratio > 0 (checked on the host): C's remainder has the dividend's sign.
    floor = quotient - ((seq % compress_ratio) < 0).to(tl.int32)
    is_pad = (rows >= num_reqs) & (rows < num_tokens)
    tl.store(expanded_seq_lens_ptr + rows, tl.where(is_req, floor, 0), mask=is_req | is_pad)


def compiled_binaries() -> int:
    """Binaries the JIT holds for this kernel in this process, over all devices.

    Every entry was built (or loaded from Triton's on-disk cache) on first use of its
    specialisation key, so the count grows exactly when a launch needed a new binary.
    Under ``TRITON_INTERPRET=1`` nothing is compiled and this is 0.
    """
    caches = getattr(indexer_decode_kernel, "device_caches", None)
    if caches is None:
        return 0
    return sum(len(entry[0]) for entry in caches.values())
