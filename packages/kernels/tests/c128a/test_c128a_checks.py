"""Bad arguments raise ValueError naming the argument and what is accepted, writing nothing.

Each case starts from a valid seeded batch, breaks one argument, and checks the
message and that all three buffers still hold their poison. The same checks guard
the reference and the kernel wrapper.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch
from dsv4_kernels import c128a
from dsv4_kernels.c128a import reference
from dsv4_kernels.c128a.testing import Batch, assert_untouched, make_batch


def valid_batch() -> Batch:
    return make_batch(num_decode=5, num_prefill=4, context=30_000, capacity=512, seed=11)


def _int32(batch: Batch, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.full(shape, batch.poison, dtype=torch.int32)


def _misaligned(batch: Batch) -> torch.Tensor:
    storage = _int32(batch, (batch.prefill_buffer.numel() + 1,))
    return storage[1:].view(batch.prefill_buffer.shape)


# (case id, how to break the batch, argument named in the message, accepted values)
CASES: list[tuple[str, Callable[[Batch], Batch], str, str]] = [
    ("positions-int32", lambda b: dataclasses.replace(b, positions=b.positions.int()),
     "positions", "torch.int64"),
    ("positions-2d", lambda b: dataclasses.replace(b, positions=b.positions[None]),
     "positions", "expected 1"),
    ("positions-list", lambda b: dataclasses.replace(b, positions=b.positions.tolist()),
     "positions", "torch.Tensor"),
    ("positions-strided", lambda b: dataclasses.replace(
        b, positions=b.positions.repeat_interleave(2)[::2]), "positions", "stride 1"),
    ("ratio-zero", lambda b: dataclasses.replace(b, compress_ratio=0),
     "compress_ratio", "positive int"),
    ("ratio-float", lambda b: dataclasses.replace(b, compress_ratio=128.0),
     "compress_ratio", "positive int"),
    ("num-decode-negative", lambda b: dataclasses.replace(b, num_decode_tokens=-1),
     "num_decode_tokens", "[0, 9]"),
    ("num-decode-too-many", lambda b: dataclasses.replace(b, num_decode_tokens=10),
     "num_decode_tokens", "[0, 9]"),
    ("num-decode-bool", lambda b: dataclasses.replace(b, num_decode_tokens=True),
     "num_decode_tokens", "an int"),
    ("req-int64", lambda b: dataclasses.replace(
        b, token_to_req_indices=b.token_to_req_indices.long()),
     "token_to_req_indices", "torch.int32"),
    ("req-too-short", lambda b: dataclasses.replace(
        b, token_to_req_indices=b.token_to_req_indices[:4]),
     "token_to_req_indices", "at least num_decode_tokens = 5"),
    ("table-int64", lambda b: dataclasses.replace(b, block_table=b.block_table.long()),
     "block_table", "torch.int32"),
    ("table-1d", lambda b: dataclasses.replace(b, block_table=b.block_table[0]),
     "block_table", "expected 2"),
    ("table-transposed", lambda b: dataclasses.replace(b, block_table=b.block_table.t()),
     "block_table", "stride 1"),
    ("table-empty", lambda b: dataclasses.replace(b, block_table=b.block_table[:0]),
     "block_table", "at least one row"),
    ("block-size-zero", lambda b: dataclasses.replace(b, block_size=0),
     "block_size", "positive int"),
    ("slots-int32", lambda b: dataclasses.replace(b, slot_mapping=b.slot_mapping.int()),
     "slot_mapping", "torch.int64"),
    ("slots-too-short", lambda b: dataclasses.replace(b, slot_mapping=b.slot_mapping[:2]),
     "slot_mapping", "at least num_decode_tokens"),
    ("decode-buffer-int64", lambda b: dataclasses.replace(
        b, global_decode_buffer=b.global_decode_buffer.long()),
     "global_decode_buffer", "torch.int32"),
    ("decode-buffer-column-major", lambda b: dataclasses.replace(
        b, global_decode_buffer=_int32(b, (512, 6)).t()),
     "global_decode_buffer", "stride 1"),
    ("decode-buffer-odd-stride", lambda b: dataclasses.replace(
        b, global_decode_buffer=_int32(b, (6, 520))[:, :512]),
     "global_decode_buffer", "multiple of 16"),
    ("decode-buffer-few-rows", lambda b: dataclasses.replace(
        b, global_decode_buffer=b.global_decode_buffer[:4]),
     "global_decode_buffer", "at least num_decode_tokens = 5"),
    ("lens-few-rows", lambda b: dataclasses.replace(
        b, decode_lens_buffer=b.decode_lens_buffer[:3]),
     "decode_lens_buffer", "at least num_decode_tokens = 5"),
    ("lens-2d", lambda b: dataclasses.replace(
        b, decode_lens_buffer=b.decode_lens_buffer[:, None]),
     "decode_lens_buffer", "expected 1"),
    ("prefill-buffer-few-rows", lambda b: dataclasses.replace(
        b, prefill_buffer=b.prefill_buffer[:3]),
     "prefill_buffer", "= 4 rows"),
    ("prefill-buffer-misaligned", lambda b: dataclasses.replace(
        b, prefill_buffer=_misaligned(b)), "prefill_buffer", "16-byte aligned"),
    ("width-not-multiple", lambda b: dataclasses.replace(b, width=200),
     "width", "multiple of 128"),
    ("width-zero", lambda b: dataclasses.replace(b, width=0), "width", "multiple of 128"),
    ("width-past-capacity", lambda b: dataclasses.replace(b, width=640),
     "width", "no larger than both buffers' widths"),
    ("width-past-prefill-buffer", lambda b: dataclasses.replace(
        b, width=512, prefill_buffer=_int32(b, (5, 384))),
     "width", "prefill_buffer 384"),
    ("view-narrower-than-width", lambda b: dataclasses.replace(b, decode_view_width=128),
     "decode_view_width", "[256, 512]"),
    ("view-past-capacity", lambda b: dataclasses.replace(b, decode_view_width=640),
     "decode_view_width", "[256, 512]"),
]


@pytest.mark.parametrize("fn", [reference.build_c128a_topk_metadata,
                                c128a.build_c128a_topk_metadata], ids=["reference", "kernel"])
@pytest.mark.parametrize(("case", "breaker", "name", "accepted"), CASES,
                         ids=[c[0] for c in CASES])
def test_bad_argument_is_named_and_nothing_is_written(
    fn: Callable, case: str, breaker: Callable[[Batch], Batch], name: str, accepted: str,
) -> None:
    good = valid_batch()
    assert good.width == 256  # the cases above are written for this batch
    bad = breaker(good)
    with pytest.raises(ValueError) as info:
        bad.call(fn)
    message = str(info.value)
    assert f"{name}:" in message, message
    assert accepted in message, message
    assert "got" in message, message
    assert_untouched(good)
    for buf in bad.buffers:
        if buf.dtype == torch.int32:
            assert bool((buf == good.poison).all())


def test_wrong_device_is_named() -> None:
    good = valid_batch()
    bad = dataclasses.replace(good, block_table=good.block_table.to("meta"))
    with pytest.raises(ValueError, match=r"block_table: got device meta; expected the device"):
        bad.call(reference.build_c128a_topk_metadata)
    assert_untouched(good)


@pytest.mark.parametrize(
    ("tile", "name", "accepted"),
    [
        (dict(tokens_per_program=3), "tokens_per_program", "power of two in [1, 256]"),
        (dict(tokens_per_program=512), "tokens_per_program", "power of two in [1, 256]"),
        (dict(tokens_per_program=0), "tokens_per_program", "power of two in [1, 256]"),
        (dict(cols_per_program=64), "cols_per_program", "power of two in [128, 8192]"),
        (dict(cols_per_program=16384), "cols_per_program", "power of two in [128, 8192]"),
        (dict(cols_per_program=384), "cols_per_program", "power of two in [128, 8192]"),
        (dict(tokens_per_program=256, cols_per_program=512),
         "tokens_per_program * cols_per_program", "4096 * num_warps = 16384"),
        (dict(tokens_per_program=1, cols_per_program=8192, num_warps=1),
         "tokens_per_program * cols_per_program", "at most 128 elements per thread"),
        (dict(num_warps=3), "num_warps", "one of (1, 2, 4, 8, 16)"),
        (dict(num_warps=32), "num_warps", "one of (1, 2, 4, 8, 16)"),
        (dict(split_width=1), "split_width", "a bool"),
    ],
)
def test_bad_tile_is_named_and_nothing_is_written(
    tile: dict, name: str, accepted: str
) -> None:
    batch = valid_batch()
    with pytest.raises(ValueError) as info:
        batch.call(c128a.build_c128a_topk_metadata, **tile)
    assert f"{name}:" in str(info.value) and accepted in str(info.value), str(info.value)
    assert_untouched(batch)


def test_cpu_tensors_need_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(c128a.launch, "interpreting", lambda: False)
    batch = valid_batch()
    with pytest.raises(ValueError, match=r"positions: got device cpu; expected a GPU device"):
        batch.call(c128a.build_c128a_topk_metadata)
    assert_untouched(batch)


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ([(1, 1024, 4), (3, 128, 4)], "tokens_per_program: got 3"),
        ([(1, 1024)], "expected (tokens_per_program, cols_per_program, num_warps)"),
        ([(1, 1024, 6)], "num_warps: got 6"),
    ],
)
def test_warmup_rejects_bad_tiles_before_launching(configs: list, message: str) -> None:
    before = c128a.compile_count()
    with pytest.raises(ValueError) as info:
        c128a.warmup(configs, "cpu")
    assert message in str(info.value)
    assert c128a.compile_count() == before
