"""The Triton kernel behind :func:`dsv4_kernels.compressed_slot_mapping.launch.
get_compressed_slot_mapping`.

vLLM 0.33.0 runs one program per request, walking the request's tokens 1024 lanes at a
time, after a separate ``out.fill_(-1)`` over the whole buffer. A long prefill is then
one program looping on one SM, and the fill is a second kernel plus a host op. Here the
grid covers the *output buffer*: program ``p`` owns rows ``[p*TPP, p*TPP + TPP)`` and
writes every one of them, so the -1 fill is part of the same launch. Each row finds its
request from ``query_start_loc`` itself:

- first a guess, ``min(row, num_reqs - 1)``, which is right for every decode row (one
  token per request, decode requests first), for every row of a batch with one
  request, and for the last request's rows;
- only when some row of the program is inside the batch and the guess missed, a
  branch-free binary search over ``query_start_loc[0..num_reqs]`` (``search_steps =
  num_reqs.bit_length()`` halvings, computed on the host from the block table's row
  count). It finds the last request ``r`` with ``query_start_loc[r] <= row``.

A row outside ``[query_start_loc[0], query_start_loc[num_reqs])`` belongs to no
request and gets -1, exactly what vLLM's fill leaves there (with ``fill = 0``, the
kernel object's own semantics, it is not written at all). Everything a request's row
computes is vLLM's arithmetic, in the same integer widths (int32 positions, C
truncating division and remainder, an int64 slot id), so outputs are bit-identical.

The only constexpr is ``TOKENS_PER_PROGRAM``; every pointer and scalar is in
``do_not_specialize``, so the compile key is ``(tokens_per_program, num_warps)`` and a
new batch, block size, compress ratio or buffer reuses the binary already built. Triton
still keys a binary by its pointers' element types: ``slot_mapping`` is int64 or int32
(every other tensor has one dtype), so a tile has two binaries, and
:func:`~dsv4_kernels.compressed_slot_mapping.launch.warmup` builds both.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Every non-constexpr parameter: none of them is part of the compile key. A test checks
# this list is exactly the kernel's non-constexpr parameters, in order.
RUNTIME_ARGS: tuple[str, ...] = (
    "out_ptr",
    "slot_mapping_ptr",
    "query_start_loc_ptr",
    "seq_lens_ptr",
    "block_table_ptr",
    "num_rows",
    "num_slots",
    "num_reqs",
    "search_steps",
    "block_table_stride",
    "block_size",
    "compress_ratio",
    "dcp_world_size",
    "cp_interleave",
    "fill",
)
CONSTEXPRS: tuple[str, ...] = ("TOKENS_PER_PROGRAM",)
PAD_ID = -1
"""The slot id of a token that writes no compressed state (vLLM's ``PAD_ID``). The kernel
writes it as the literal -1: a jitted function may read only constexpr globals."""


@triton.jit(do_not_specialize=RUNTIME_ARGS)
def compressed_slot_mapping_kernel(
    out_ptr,
    slot_mapping_ptr,
    query_start_loc_ptr,
    seq_lens_ptr,
    block_table_ptr,
    num_rows,
    num_slots,
    num_reqs,
    search_steps,
    block_table_stride,
    block_size,
    compress_ratio,
    dcp_world_size,
    cp_interleave,
    fill,
    TOKENS_PER_PROGRAM: tl.constexpr,
):
    rows = tl.program_id(0) * TOKENS_PER_PROGRAM + tl.arange(0, TOKENS_PER_PROGRAM)
    in_buffer = rows < num_rows
    # query_start_loc holds num_reqs + 1 entries (checked by the wrapper).
    first = tl.load(query_start_loc_ptr)
    total = tl.load(query_start_loc_ptr + num_reqs)
    in_batch = in_buffer & (rows >= first) & (rows < total)

    guess = tl.maximum(tl.minimum(rows, num_reqs - 1), 0)
    start = tl.load(query_start_loc_ptr + guess, mask=in_batch, other=0)
    end = tl.load(query_start_loc_ptr + guess + 1, mask=in_batch, other=0)
    # Issued with the guess's loads, not after them: on the common path (the guess is
    # right) nothing else waits for the request's bounds.
    seq_len = tl.load(seq_lens_ptr + guess, mask=in_batch, other=0)
    # A row past slot_mapping's length is never read (vLLM would read past the tensor).
    slot = tl.load(slot_mapping_ptr + rows, mask=in_batch & (rows < num_slots), other=-1)
    req = guess
    missed = in_batch & ((rows < start) | (rows >= end))
    if tl.max(missed.to(tl.int32), axis=0) > 0:
        # The last r in [0, num_reqs] with query_start_loc[r] <= row: since row <
        # query_start_loc[num_reqs], r < num_reqs and row < query_start_loc[r + 1].
        found = tl.zeros_like(rows)
        step = 1 << (search_steps - 1)
        for _ in range(search_steps):
            probe = found + step
            inside = missed & (probe <= num_reqs)
            at = tl.load(query_start_loc_ptr + probe, mask=inside, other=0)
            found = tl.where(inside & (at <= rows), probe, found)
            step = step // 2
        req = tl.where(missed, found, req)
        start = tl.where(missed, tl.load(query_start_loc_ptr + found, mask=missed, other=0),
                         start)
        end = tl.where(missed, tl.load(query_start_loc_ptr + found + 1, mask=missed, other=0),
                       end)
        seq_len = tl.where(missed, tl.load(seq_lens_ptr + found, mask=missed, other=0),
                           seq_len)

    pos = seq_len - (end - start) + (rows - start)
    is_valid = in_batch & ((pos + 1) % compress_ratio == 0) & (slot != -1)
    if dcp_world_size > 1:
        local_pos = (pos // (cp_interleave * dcp_world_size) * cp_interleave
                     + pos % cp_interleave)
    else:
        # pos // k * k + pos % k == pos for every k (truncating division): the identity.
        local_pos = pos
    compressed = local_pos // compress_ratio
    block = compressed // block_size
    physical = tl.load(block_table_ptr + req * block_table_stride + block, mask=is_valid,
                       other=0)
    slot_ids = physical.to(tl.int64) * block_size + (compressed - block * block_size)
    # With ``fill`` every row of the buffer is written (vLLM's fill and kernel in one);
    # without, only the batch's rows, as vLLM's kernel alone does.
    tl.store(out_ptr + rows, tl.where(is_valid, slot_ids, -1),
             mask=in_buffer & (in_batch | (fill != 0)))


def compiled_binaries() -> int:
    """Binaries the JIT holds for this kernel in this process, over all devices.

    Every entry was built (or loaded from Triton's on-disk cache) on first use of its
    specialisation key, so the count grows exactly when a launch needed a new binary.
    Under ``TRITON_INTERPRET=1`` nothing is compiled and this is 0.
    """
    caches = getattr(compressed_slot_mapping_kernel, "device_caches", None)
    if caches is None:
        return 0
    return sum(len(entry[0]) for entry in caches.values())
