"""The plugin's FusedInvRopeFP8Quant stand-in inside vLLM 0.33.0's real op, in the interpreter.

Run as a child process by ``test_fused_inv_rope_fp8_quant_vllm.py``: vLLM decides at
import whether its Triton is real, and on a machine without a GPU it keeps it only with
``CUDA_VISIBLE_DEVICES`` empty. Then vLLM's own wrapper ``fused_inv_rope_fp8_quant``
runs its own custom op ``torch.ops.vllm.fused_inv_rope_fp8_quant_kernel`` (bound to the
CPU key by vLLM's CPU platform), whose implementation allocates the buffers and launches
the module global, vLLM's kernel object or the plugin's stand-in, in Triton's interpreter.

Every buffer the op allocates is poisoned first (the module's ``torch.empty`` fills its
result with 0xFF bytes: an FP8, bf16 and FP32 NaN and an impossible UE8M0 byte), so
the comparison covers every byte written, the scale pad rows included. Writes one JSON
result: per seeded case, plugin off (vLLM's kernel) against on (dsv4's kernel at the
test table's tile), bit for bit; what vLLM's object returns; and a ``torch.compile`` of
the wrapper (fullgraph), whose graph must hold vLLM's op and nothing else that computes.

    CUDA_VISIBLE_DEVICES= TRITON_INTERPRET=1 VLLM_TARGET_DEVICE=cpu python firq_vllm_check.py OUT.json
"""

from __future__ import annotations

import importlib
import json
import sys
from types import ModuleType
from typing import Any

import torch

TABLE = """schema = 1

[[entry]]
id = "few"
match = { arch = "sm90", num_tokens = { min = 0, max = 4 } }
launch = { tokens_per_program = 1, heads_per_program = 8, num_warps = 4 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }

[[entry]]
id = "more"
match = { arch = "sm90", num_tokens = { min = 5, max = 2147483647 } }
launch = { tokens_per_program = 2, heads_per_program = 4, num_warps = 2 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }
"""
POISON_BYTE = 0xFF


class PoisonedTorch(ModuleType):
    """``torch`` for vLLM's op module, except that ``empty`` returns poisoned memory."""

    def __init__(self) -> None:
        super().__init__("torch")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def empty(*args: Any, **kwargs: Any) -> torch.Tensor:
        tensor = torch.empty(*args, **kwargs)
        if tensor.numel():
            tensor.view(torch.uint8).fill_(POISON_BYTE)
        return tensor


def cases() -> list[Any]:
    from dsv4_kernels.fused_inv_rope_fp8_quant import testing

    fixed = [  # T, n_groups, heads_per_group, tma_aligned_scales, quantize, rope kind
        (1, 1, 8, False, True, "compress"), (2, 2, 8, True, True, "swa"),
        (3, 1, 8, False, False, "compress"), (5, 2, 8, True, True, "compress"),
        (6, 1, 16, False, True, "swa"), (7, 2, 4, True, False, "compress"),
        (4, 8, 1, False, True, "compress"), (9, 1, 8, True, True, "swa"),
    ]
    found = [testing.Case(t, g, h, tma, q, seed=500 + i, rope_kind=kind)
             for i, (t, g, h, tma, q, kind) in enumerate(fixed)]
    found += list(testing.random_cases(6, seed=77, max_tokens=9, max_heads=16))
    return found


def poison_left(result: tuple[torch.Tensor, torch.Tensor]) -> bool:
    from dsv4_kernels.fused_inv_rope_fp8_quant import testing

    out, scales = result
    word = POISON_BYTE if out.element_size() == 1 else -1  # all-ones, as bits() reads it
    left = bool((testing.bits(out) == word).any())
    if scales.numel():
        words = testing.scale_storage(scales).view(torch.int32)
        left = left or bool((words == -1).any())
    return left


def same(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> bool:
    from dsv4_kernels.fused_inv_rope_fp8_quant import testing

    try:
        testing.assert_same(a, b, "plugin on vs off")
    except AssertionError:
        return False
    return True


def compare(ops: Any, original: Any, stand_in: Any) -> list[dict[str, Any]]:
    rows = []
    for case in cases():
        o, pos, cache = case.tensors("cpu")
        sides = {}
        hits = {}
        for side, obj in (("off", original), ("on", stand_in)):
            ops._FUSED_INV_ROPE_FP8_QUANT_KERNEL = obj
            before = stand_in.hits
            sides[side] = ops.fused_inv_rope_fp8_quant(o, pos, cache, *case.args())
            hits[side] = stand_in.hits - before
        rows.append({"case": repr(case), "num_tokens": case.num_tokens,
                     "quantize": case.quantize, "tma": case.tma_aligned_scales,
                     "same": same(sides["on"], sides["off"]),
                     "poison_left_off": poison_left(sides["off"]),
                     "poison_left_on": poison_left(sides["on"]),
                     "hits_off": hits["off"], "hits_on": hits["on"]})
    ops._FUSED_INV_ROPE_FP8_QUANT_KERNEL = stand_in
    return rows


def object_returns(original: Any, stand_in: Any) -> dict[str, Any]:
    """What vLLM's object and the stand-in return for the same kernel-object call."""
    from dsv4_kernels.fused_inv_rope_fp8_quant import checks, launch, testing

    case = testing.Case(3, 2, 8, False, True, seed=9)
    o, pos, cache = case.tensors("cpu")
    checked = checks.check_inputs(o, pos, cache, *case.args())
    found = {}
    for side, obj in (("vllm", original), ("stand_in", stand_in)):
        out_buf, scale_buf = launch.allocate(checked, o.dtype, 2, False, True)
        found[side] = repr(obj(o, pos, cache, out_buf, scale_buf, 3, heads_per_group=8,
                               quant_group_size=128, chunks_per_head=4, nope_dim=448,
                               half_rope=32, tma_aligned_scales=False, quantize=True,
                               fp8_max=448.0, launch_pdl=False, grid=(4, 16)))
    return found


def compiled(ops: Any, stand_in: Any) -> dict[str, Any]:
    """``torch.compile`` of vLLM's wrapper: the traced graph, and its result plugin on."""
    from dsv4_kernels.fused_inv_rope_fp8_quant import testing

    targets: list[str] = []

    def backend(gm: torch.fx.GraphModule, inputs: Any) -> Any:
        targets.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    case = testing.Case(5, 2, 8, False, True, seed=31)
    o, pos, cache = case.tensors("cpu")
    fn = torch.compile(lambda a, b, c: ops.fused_inv_rope_fp8_quant(a, b, c, *case.args()),
                       backend=backend, fullgraph=True)
    before = stand_in.hits
    got = fn(o, pos, cache)
    hits = stand_in.hits - before
    ops._FUSED_INV_ROPE_FP8_QUANT_KERNEL = stand_in.original
    want = ops.fused_inv_rope_fp8_quant(o, pos, cache, *case.args())
    ops._FUSED_INV_ROPE_FP8_QUANT_KERNEL = stand_in
    return {"targets": targets, "hits": hits, "same": same(got, want)}


def main(out_path: str) -> int:
    from dsv4_policy.kernels import fused_inv_rope_fp8_quant as policy
    from dsv4_vllm import plugin
    from dsv4_vllm.kernels.fused_inv_rope_fp8_quant import TARGET
    from vllm.triton_utils import HAS_TRITON

    ops = importlib.import_module(TARGET.module)
    original = getattr(ops, TARGET.attribute)
    impl = ops._fused_inv_rope_fp8_quant_kernel_impl
    result: dict[str, Any] = {"has_triton": bool(HAS_TRITON)}
    assert plugin.register({}) is True
    stand_in = plugin.active(TARGET.name)
    result["patched"] = getattr(ops, TARGET.attribute) is stand_in and (
        stand_in.original is original)
    stand_in.configure(table=policy.loads_table(TABLE), arch_of=lambda device: "sm90")
    stand_in.lazy_warmup = False  # nothing to warm in the interpreter
    ops.torch = PoisonedTorch()
    try:
        result["cases"] = compare(ops, original, stand_in)
        result["returns"] = object_returns(original, stand_in)
    finally:
        ops.torch = torch
    result["compiled"] = compiled(ops, stand_in)
    result["impl_unchanged"] = ops._fused_inv_rope_fp8_quant_kernel_impl is impl
    result["misses"] = stand_in.misses
    plugin.unregister()
    result["restored"] = getattr(ops, TARGET.attribute) is original
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
