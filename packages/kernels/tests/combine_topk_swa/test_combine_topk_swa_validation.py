"""Bad arguments raise a ValueError naming the function and the argument, before anything
is written; and the kernel's compile key is its tile alone.

Each bad call starts from a valid chunk whose output buffers are poisoned, changes one
argument, and checks the message and that both output buffers still hold only poison,
for the kernel's entry point and for the reference (they share the checks).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest
import torch
from dsv4_kernels.combine_topk_swa import kernel as _k
from dsv4_kernels.combine_topk_swa import launch, reference
from dsv4_kernels.combine_topk_swa.testing import POISON, Chunk, make_chunk
from triton.runtime.jit import JITFunction

pytestmark = pytest.mark.usefixtures("interpreter")

FN = "combine_topk_swa_indices"
ARGS = ["topk_indices", "query_start_loc", "seq_lens", "gather_lens", "window_size",
        "compress_ratio", "topk", "M", "N", "out", "left_visible", "right_visible",
        "max_image_tokens"]


def _chunk(**extra: object) -> Chunk:
    shape: dict[str, object] = dict(kind="c4a", queries=[(40, 6), (0, 5)], window_size=8,
                                    index_topk=16, max_image_tokens=4)
    shape.update(extra)
    return make_chunk(11, **shape).fresh()  # type: ignore[arg-type]


def _offset(t: torch.Tensor) -> torch.Tensor:
    """A poisoned view of ``t``'s shape 4 bytes off 16-byte alignment."""
    wide = torch.full((t.shape[0], t.shape[1] + 4), POISON, dtype=t.dtype)
    return wide[:, 1: t.shape[1] + 1]


def _odd_stride(t: torch.Tensor) -> torch.Tensor:
    """A poisoned view of ``t``'s shape whose row stride is one element longer."""
    return torch.full((t.shape[0], t.shape[1] + 1), POISON, dtype=t.dtype)[:, : t.shape[1]]


Change = Callable[[dict[str, object]], None]


def _set(name: str, value: Callable[[dict[str, object]], object]) -> Change:
    def change(args: dict[str, object]) -> None:
        args[name] = value(args)
    return change


def _out(index: int, value: Callable[[torch.Tensor], torch.Tensor]) -> Change:
    def change(args: dict[str, object]) -> None:
        pair = list(args["out"])  # type: ignore[call-overload]
        pair[index] = value(pair[index])
        args["out"] = tuple(pair)
    return change


T = torch.Tensor
BAD: list[tuple[str, Change, str]] = [
    ("topk int64", _set("topk_indices", lambda a: a["topk_indices"].long()),  # type: ignore[union-attr]
     "topk_indices: got dtype torch.int64; expected dtype torch.int32"),
    ("topk 1-D", _set("topk_indices", lambda a: a["topk_indices"][:, 0]),  # type: ignore[index]
     "topk_indices: got 1 dimensions"),
    ("topk transposed", _set("topk_indices", lambda a: a["topk_indices"].t().contiguous().t()),  # type: ignore[union-attr]
     "topk_indices: got stride"),
    ("topk not a tensor", _set("topk_indices", lambda a: [[1, 2]]), "topk_indices: got list"),
    ("topk too wide", _set("topk", lambda a: 17), "topk: got 17; expected at most"),
    ("topk negative", _set("topk", lambda a: -1), "topk: got -1"),
    ("topk a bool", _set("topk", lambda a: True), "topk: got True"),
    ("window 0", _set("window_size", lambda a: 0), "window_size: got 0"),
    ("ratio 0", _set("compress_ratio", lambda a: 0), "compress_ratio: got 0"),
    ("M past int32", _set("M", lambda a: 2**31), "M: got 2147483648"),
    ("N a float", _set("N", lambda a: 3.0), "N: got 3.0"),
    ("image negative", _set("max_image_tokens", lambda a: -2), "max_image_tokens: got -2"),
    ("seq_lens int64", _set("seq_lens", lambda a: a["seq_lens"].long()),  # type: ignore[union-attr]
     "seq_lens: got dtype torch.int64"),
    ("qsl too short", _set("query_start_loc", lambda a: a["query_start_loc"][:2]),  # type: ignore[index]
     "query_start_loc: got 2 entries; expected at least 3"),
    ("gather too short", _set("gather_lens", lambda a: a["gather_lens"][:1]),  # type: ignore[index]
     "gather_lens: got 1 entries; expected at least 2"),
    ("seq_lens on meta", _set("seq_lens", lambda a: torch.empty(2, dtype=torch.int32,
                                                               device="meta")),
     "seq_lens: got device meta; expected the device of topk_indices"),
    ("left without right", _set("right_visible", lambda a: None),
     "right_visible: got None; expected a tensor when the other"),
    ("right without left", _set("left_visible", lambda a: None),
     "left_visible: got None; expected a tensor when the other"),
    ("left too short", _set("left_visible", lambda a: a["left_visible"][:3]),  # type: ignore[index]
     "left_visible: got 3 entries; expected at least 11"),
    ("right int16", _set("right_visible", lambda a: a["right_visible"].short()),  # type: ignore[union-attr]
     "right_visible: got dtype torch.int16"),
    ("out a tensor", _set("out", lambda a: a["out"][0]),  # type: ignore[index]
     "out: got Tensor; expected None or a (combined_indices, combined_lens) pair"),
    ("out of three", _set("out", lambda a: (*a["out"], a["out"][1])),  # type: ignore[misc,index]
     "out: got 3 items"),
    ("indices too few rows", _out(0, lambda t: t[:5]), "out[0] (combined_indices): got 5 rows"),
    ("indices too narrow", _out(0, lambda t: t[:, :20]),
     "out[0] (combined_indices): got 20 columns; expected at least topk + window_size + "
     "image width = 28"),
    ("indices misaligned", _out(0, _offset), "out[0] (combined_indices): got data pointer"),
    ("indices odd stride", _out(0, _odd_stride),
     "out[0] (combined_indices): got row stride 129; expected a row stride that is a "
     "multiple of 4"),
    ("indices int64", _out(0, lambda t: t.long()), "out[0] (combined_indices): got dtype"),
    ("lens strided", _out(1, lambda t: torch.full((2 * t.shape[0],), POISON,
                                                  dtype=t.dtype)[::2]),
     "out[1] (combined_lens): got stride 2"),
    ("lens too short", _out(1, lambda t: t[:4]), "out[1] (combined_lens): got 4 entries"),
    ("topk misaligned", _set("topk_indices", lambda a: _offset(a["topk_indices"])),  # type: ignore[arg-type]
     "topk_indices: got data pointer"),
    ("topk odd stride", _set("topk_indices", lambda a: _odd_stride(a["topk_indices"])),  # type: ignore[arg-type]
     "topk_indices: got row stride 17"),
]


def _call_args(chunk: Chunk) -> dict[str, object]:
    return dict(zip(ARGS, chunk.args(), strict=True))


@pytest.mark.parametrize("fn", [launch.combine_topk_swa_indices,
                                reference.combine_topk_swa_indices], ids=["kernel", "reference"])
@pytest.mark.parametrize(("what", "change", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_arguments_raise_before_writing(fn: Callable[..., object], what: str,
                                            change: Change, message: str) -> None:
    chunk = _chunk()
    args = _call_args(chunk)
    change(args)
    with pytest.raises(ValueError) as info:
        fn(**args)
    text = str(info.value)
    assert text.startswith(f"{FN}: "), text
    assert message in text, text
    assert bool((chunk.indices_storage == POISON).all()), f"{what}: the buffer was written"
    assert bool((chunk.lens_storage == POISON).all()), f"{what}: the lengths were written"
    out = args["out"]
    if isinstance(out, tuple):  # a replaced output buffer is poisoned too, and stays so
        for t in out:
            assert bool((t == POISON).all()), f"{what}: a replaced output was written"


def test_the_unread_top_k_of_an_swa_only_layer_may_be_anything_aligned_or_not() -> None:
    chunk = make_chunk(12, kind="swa", queries=[(5, 9)], window_size=8, index_topk=16)
    args = _call_args(chunk.fresh())
    args["topk_indices"] = _offset(chunk.topk_indices)
    launch.combine_topk_swa_indices(**args)
    want = chunk.run(reference.combine_topk_swa_indices)
    got_indices, got_lens = args["out"]  # type: ignore[misc]
    assert torch.equal(got_indices, want.out[0]) and torch.equal(got_lens, want.out[1])


@pytest.mark.parametrize(("tile", "message"), [
    ((3, 128, 4), "tokens_per_program: got 3; expected a power of two in [1, 256]"),
    ((512, 16, 4), "tokens_per_program: got 512"),
    ((1, 8, 4), "cols_per_program: got 8; expected a power of two in [16, 8192]"),
    ((1, 96, 4), "cols_per_program: got 96"),
    ((1, 128, 3), "num_warps: got 3; expected one of (1, 2, 4, 8, 16)"),
    ((256, 8192, 4), "tokens_per_program * cols_per_program: got 2097152"),
    ((True, 128, 4), "tokens_per_program: got True"),
])
def test_bad_tiles_raise_before_writing(tile: tuple[int, int, int], message: str) -> None:
    chunk = _chunk()
    tpp, cpp, warps = tile
    with pytest.raises(ValueError) as info:
        launch.combine_topk_swa_indices(*chunk.args(), tokens_per_program=tpp,
                                        cols_per_program=cpp, num_warps=warps)
    assert str(info.value).startswith(f"{FN}: ") and message in str(info.value)
    assert bool((chunk.indices_storage == POISON).all())
    with pytest.raises(ValueError, match="warmup: "):
        launch.warmup([tile], "cpu")


def test_warmup_refuses_bad_configs_and_builds_nothing_here() -> None:
    with pytest.raises(ValueError, match=r"expected \(tokens_per_program"):
        launch.warmup([(1, 128)], "cpu")
    assert launch.compile_count() == 0
    assert launch.warmup([(1, 128, 4), (4, 64, 2), (1, 128, 4)], "cpu") == 0
    assert launch.compile_count() == 0


# --------------------------------------------------------------------------- compile key
def _parameters() -> tuple[list[str], list[str]]:
    params = inspect.signature(_k.combine_topk_swa_kernel.fn).parameters.values()
    constexprs = [p.name for p in params if "constexpr" in str(p.annotation)]
    runtime = [p.name for p in params if "constexpr" not in str(p.annotation)]
    return constexprs, runtime


def test_only_the_tile_is_constexpr() -> None:
    constexprs, _ = _parameters()
    assert constexprs == list(_k.CONSTEXPRS) == ["TOKENS_PER_PROGRAM", "COLS_PER_PROGRAM"]


def test_every_other_argument_is_unspecialised_or_alignment_checked() -> None:
    _, runtime = _parameters()
    assert set(_k.RUNTIME_ARGS).isdisjoint(_k.ALIGNED_ARGS)
    # Tensors first, then scalars: the order the host launch passes them in.
    assert runtime[:8] == [*_k.ALIGNED_ARGS, *_k.RUNTIME_ARGS[:6]]
    assert sorted(runtime) == sorted(_k.RUNTIME_ARGS + _k.ALIGNED_ARGS)
    kernel = _k.combine_topk_swa_kernel
    declared = getattr(kernel, "do_not_specialize", None)
    if declared is None:
        declared = kernel.kwargs["do_not_specialize"]
    assert list(declared) == list(_k.RUNTIME_ARGS)
    # Triton reads them as intended: build the compiled-mode wrapper and ask it.
    jit = JITFunction(kernel.fn, do_not_specialize=declared)
    assert [p.name for p in jit.params if p.do_not_specialize] == list(_k.RUNTIME_ARGS)
    assert [p.name for p in jit.params if p.is_constexpr] == list(_k.CONSTEXPRS)
    aligned = [p.name for p in jit.params if not p.do_not_specialize and not p.is_constexpr]
    assert aligned == list(_k.ALIGNED_ARGS)


def test_the_checks_guarantee_what_the_kernel_assumes() -> None:
    from dsv4_kernels.combine_topk_swa import checks

    assert checks.STRIDE_MULTIPLE == _k.STRIDE_MULTIPLE == 4
    assert checks.ALIGN_BYTES == 16
    source = inspect.getsource(_k.combine_topk_swa_kernel.fn)
    assert f"out_stride // {_k.STRIDE_MULTIPLE} * {_k.STRIDE_MULTIPLE}" in source
    assert f"topk_stride // {_k.STRIDE_MULTIPLE} * {_k.STRIDE_MULTIPLE}" in source
