"""The kernel's compile key is its tile: (tokens_per_program, cols_per_program, num_warps).

Each tile has two binaries, with and without the decode rows' code (``HAS_DECODE``,
chosen by whether the batch has decode tokens); warm-up builds both.

Triton builds one binary per distinct specialisation of the constexprs and of the
non-constexpr arguments it is allowed to specialise. These checks read the kernel's
own parameter list, so adding a parameter without deciding how it specialises fails
here. The GPU tests check the counted compiles on a real device.
"""

from __future__ import annotations

import inspect

import pytest
from dsv4_kernels import c128a
from dsv4_kernels.c128a import kernel as _c128a_kernel
from triton.runtime.jit import JITFunction


def kernel_parameters() -> tuple[list[str], list[str]]:
    fn = _c128a_kernel.c128a_topk_metadata_kernel.fn
    params = inspect.signature(fn).parameters.values()
    constexprs = [p.name for p in params if "constexpr" in str(p.annotation)]
    runtime = [p.name for p in params if "constexpr" not in str(p.annotation)]
    return constexprs, runtime


def test_only_the_tile_and_has_decode_are_constexpr() -> None:
    constexprs, _ = kernel_parameters()
    assert constexprs == ["TOKENS_PER_PROGRAM", "COLS_PER_PROGRAM", "HAS_DECODE"]


def test_every_other_argument_is_unspecialised_or_alignment_checked() -> None:
    _, runtime = kernel_parameters()
    assert set(_c128a_kernel.RUNTIME_ARGS).isdisjoint(_c128a_kernel.ALIGNED_ARGS)
    assert sorted(runtime) == sorted(_c128a_kernel.RUNTIME_ARGS + _c128a_kernel.ALIGNED_ARGS)
    kernel = _c128a_kernel.c128a_topk_metadata_kernel
    # The decorator's arguments: a JITFunction keeps them as an attribute, the
    # interpreter's stand-in in its keyword arguments.
    declared = getattr(kernel, "do_not_specialize", None)
    if declared is None:
        declared = kernel.kwargs["do_not_specialize"]
    assert list(declared) == list(_c128a_kernel.RUNTIME_ARGS)
    # And Triton itself reads them as intended: build the compiled-mode wrapper
    # (no device needed) and ask each parameter how it specialises.
    jit = JITFunction(kernel.fn, do_not_specialize=declared)
    unspecialised = [p.name for p in jit.params if p.do_not_specialize]
    assert unspecialised == list(_c128a_kernel.RUNTIME_ARGS)
    assert [p.name for p in jit.params if p.is_constexpr] == [
        "TOKENS_PER_PROGRAM", "COLS_PER_PROGRAM", "HAS_DECODE",
    ]


def test_the_wrapper_checks_what_the_kernel_assumes() -> None:
    from dsv4_kernels.c128a import checks as _validation

    assert _c128a_kernel.WIDTH_MULTIPLE == _validation.WIDTH_MULTIPLE
    assert _c128a_kernel.STRIDE_MULTIPLE == _validation.ROW_STRIDE_MULTIPLE
    source = inspect.getsource(_c128a_kernel.c128a_topk_metadata_kernel.fn)
    assert f"width // {_validation.WIDTH_MULTIPLE} * {_validation.WIDTH_MULTIPLE}" in source
    assert f"stride // {_validation.ROW_STRIDE_MULTIPLE} * " in source


@pytest.mark.usefixtures("interpreter")
def test_interpreter_compiles_nothing_and_warmup_says_so() -> None:
    assert c128a.compile_count() == 0
    assert c128a.warmup([(1, 1024, 4), (16, 256, 4), (1, 1024, 4)], "cpu") == 0
    assert c128a.compile_count() == 0
