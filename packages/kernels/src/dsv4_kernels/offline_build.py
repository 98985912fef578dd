"""Build a Triton kernel's binary for a GPU architecture offline, with no GPU at hand.

Triton compiles for any NVIDIA target on a machine without a GPU (its wheel carries
``ptxas``), so whether a body, a tile and a call's flags build for an A100 (sm80) or an
H200 (sm90) is a question the CPU runner answers on every CI run, before any GPU time is
spent, and a compiler refusal becomes a test failure instead of an error in the middle
of a launch on someone's runner. A kernel's ``testing`` module says what to build
(signature, constexprs); this module builds it and reports ``ok`` or the compiler's
reason.

The interpreter (``TRITON_INTERPRET``) replaces Triton's compiler, so a CPU test session
(which runs with it on) builds in a child process without it: :func:`run_child`.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_ON = ("1", "true", "on", "yes", "y")


@dataclass(frozen=True)
class Built:
    """What one offline build gave: ``ok``, or the compiler's ``error`` (one line); the
    shared memory it uses, and how often and first where each PTX instruction asked for
    occurs in it."""

    ok: bool
    error: str = ""
    shared_bytes: int = 0
    ptx_counts: dict[str, int] = field(default_factory=dict)
    ptx_first: dict[str, int] = field(default_factory=dict)


def _instruction(name: str) -> str:
    """A pattern for ``name`` as a whole instruction name: ``ld.global.b16`` does not
    match ``ld.global.b16x2``."""
    return rf"(?<![\w.]){re.escape(name)}(?![\w.])"


def count_instructions(ptx: str, instructions: tuple[str, ...]) -> dict[str, int]:
    """How many times each of ``instructions`` (``ld.global.b16``...) occurs in ``ptx``."""
    return {name: len(re.findall(_instruction(name), ptx)) for name in instructions}


def first_lines(ptx: str, instructions: tuple[str, ...]) -> dict[str, int]:
    """The line of ``ptx`` where each of ``instructions`` first occurs (-1 where none does):
    the order in which the compiler left them."""
    lines = ptx.splitlines()
    found = {}
    for name in instructions:
        pattern = re.compile(_instruction(name))
        found[name] = next((i for i, line in enumerate(lines) if pattern.search(line)), -1)
    return found


def reason(message: str) -> str:
    """The line of a compiler error that says why (Triton's messages go on with a
    reproducer and a PTX dump)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for marker in ("not supported", "requires", "error", "Error"):
        found = next((line for line in lines if marker in line), None)
        if found:
            return found[:300]
    return lines[0][:300] if lines else ""


def build(fn: Any, signature: Mapping[str, str], constexprs: Mapping[str, Any],
          capability: tuple[int, int], num_warps: int, aligned: tuple[str, ...] = (),
          count: tuple[str, ...] = ()) -> Built:
    """Compile the ``@triton.jit`` function ``fn`` for ``capability``.

    ``signature`` maps every non-constexpr parameter to its Triton type (``*bf16``,
    ``i32``...), ``constexprs`` gives every constexpr's value, and the parameters named
    in ``aligned`` are 16-byte aligned (as the launcher's pointers are). The PTX
    instructions named in ``count`` are counted in the binary's PTX, and the line of
    each one's first use is kept (:func:`count_instructions`, :func:`first_lines`). A
    compiler refusal is a result, not an exception."""
    if os.environ.get("TRITON_INTERPRET", "").strip().lower() in _ON:
        raise RuntimeError("offline_build: TRITON_INTERPRET is set; the interpreter replaces "
                           "Triton's compiler, so unset it to build binaries")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    full = {**signature, **dict.fromkeys(constexprs, "constexpr")}
    names = list(full)
    missing = [p for p in fn.arg_names if p not in full]
    if missing:
        raise ValueError(f"offline_build: {fn.__name__}: no type or value for {missing}")
    source = ASTSource(fn, full,
                       constexprs={(names.index(k),): v for k, v in constexprs.items()},
                       attrs={(names.index(k),): [["tt.divisibility", 16]] for k in aligned})
    major, minor = capability
    try:
        # Triton prints a failed build's whole PTX to standard output; the reason is in
        # the exception.
        with contextlib.redirect_stdout(io.StringIO()):
            compiled = triton.compile(source, target=GPUTarget("cuda", 10 * major + minor, 32),
                                      options={"num_warps": num_warps, "num_stages": 1})
    except Exception as exc:  # every compiler failure is an answer, not a crash
        return Built(False, f"{type(exc).__name__}: {reason(str(exc))}")
    ptx = compiled.asm["ptx"]
    return Built(True, shared_bytes=int(compiled.metadata.shared),
                 ptx_counts=count_instructions(ptx, count), ptx_first=first_lines(ptx, count))


def run_child(module: str, function: str, payload: str, timeout_s: float = 900.0) -> str:
    """``module.function(payload)`` (str in, str out) in a fresh interpreter without
    ``TRITON_INTERPRET``; raises ``RuntimeError`` with the child's stderr if it fails."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = (f"import sys; from {module} import {function} as f; "
            "sys.stdout.write(f(sys.stdin.read()))")
    run = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True,
                         text=True, env=env, timeout=timeout_s)
    if run.returncode:
        raise RuntimeError(f"offline_build: {module}.{function} failed "
                           f"(exit {run.returncode}):\n{run.stderr[-4000:]}")
    return run.stdout
