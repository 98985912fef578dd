"""CombineTopkSwaIndices routing inside the real vLLM 0.33.0, in Triton's interpreter.

vLLM's own ``combine_topk_swa_indices`` runs here unchanged (its ``fill_(-1)``, its
kernel object's launch spec and launch); only its ``@triton.jit`` kernel, which vLLM's
placeholder Triton on a CPU leaves as plain Python, is rebuilt from vLLM's installed
source with the real Triton (nothing of vLLM is stored in this repository). Hits run
dsv4's kernel in the interpreter; every comparison is over whole poisoned allocations.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import logging
import textwrap
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch
from dsv4_kernels.combine_topk_swa.testing import (
    POISON,
    Chunk,
    assert_same_outputs,
    make_chunk,
    random_queries,
)
from dsv4_policy.kernels import combine_topk_swa as policy
from dsv4_vllm import plugin
from dsv4_vllm.hook import is_hooked, mark
from dsv4_vllm.kernels import combine_topk_swa as target
from dsv4_vllm.kernels.combine_topk_swa import CombineTopkSwaDispatch

HOLDERS = (target.MODULE, *target.ALIASES)


def _real_kernel(cache_utils: ModuleType, tmp: Path) -> Any:
    """vLLM's ``CombineTopkSwaIndicesKernel.kernel`` built with the real Triton."""
    source = Path(inspect.getsourcefile(cache_utils) or "").read_text()
    lines = source.splitlines(keepends=True)
    cls = next(n for n in ast.parse(source).body
               if isinstance(n, ast.ClassDef) and n.name == "CombineTopkSwaIndicesKernel")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "kernel")
    jit = next(d for d in fn.decorator_list if not isinstance(d, ast.Name))
    path = tmp / "vllm_combine_topk_swa_kernel.py"
    path.write_text("import triton\nimport triton.language as tl\n\n"
                    + textwrap.dedent("".join(lines[jit.lineno - 1: fn.end_lineno])))
    spec = importlib.util.spec_from_file_location("vllm_combine_topk_swa_kernel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernel


@pytest.fixture
def holders(pristine_vllm, tmp_path, monkeypatch) -> dict[str, ModuleType]:
    """The three vLLM modules holding the function, unpatched, with vLLM's kernel object
    runnable in the interpreter."""
    modules = {name: importlib.import_module(name) for name in HOLDERS}
    cache_utils = modules[target.ALIASES[1]]
    monkeypatch.setattr(cache_utils._COMBINE_TOPK_SWA_INDICES_KERNEL, "kernel",
                        _real_kernel(cache_utils, tmp_path), raising=False)
    assert all(getattr(m, target.FUNCTION) is cache_utils.combine_topk_swa_indices
               for m in modules.values())
    return modules


def _vllm(holders: dict[str, ModuleType]) -> Any:
    return getattr(holders[target.ALIASES[1]], target.FUNCTION)


class Spy:
    """vLLM's function with the same signature, recording every call."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        functools.update_wrapper(self, real)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        return self.real(*args, **kwargs)


def _spy(holders: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch) -> Spy:
    spy = Spy(_vllm(holders))
    for module in holders.values():
        monkeypatch.setattr(module, target.FUNCTION, spy)
    return spy


def _table(tile: tuple[int, int, int] = (4, 32, 2), **match: object) -> policy.Table:
    return policy.make_table([policy.Entry("sm90-test", {"arch": "sm90", **match},
                                           policy.Tile(*tile), {"probes": 12})])


def _chunks(seed: int) -> list[Chunk]:
    """Generated chunks: 1-4 uneven requests, each layer kind, image widening, padding."""
    g = torch.Generator().manual_seed(seed)
    found = []
    for i, kind in enumerate(("c128a", "c4a", "swa", "c4a")):
        reqs = 1 + (seed + i) % 4
        image = 12 if i == 3 else 0
        found.append(make_chunk(
            seed * 10 + i, kind=kind, queries=random_queries(g, reqs + 9 * reqs, reqs, 300),
            window_size=16, index_topk=32, max_model_len=16384, max_image_tokens=image,
            replay=bool(i % 2), pad_rows=(seed + i) % 3, extra_rows=i % 2, row_pad=i,
            qsl_tail=i % 2))
    return found


def _call(fn: Any, chunk: Chunk, used: list[tuple[object, ...]] | None = None) -> Chunk:
    """``fn`` called the way flashmla.py calls it on a fresh copy: 9 positional, then
    keywords; ``used`` gets the arguments passed."""
    call = chunk.fresh()
    args = call.args()
    result = fn(*args[:9], out=args[9], left_visible=args[10], right_visible=args[11],
                max_image_tokens=args[12])
    assert all(r is o for r, o in zip(result, args[9], strict=True))  # type: ignore[arg-type]
    if used is not None:
        used.append(args)
    return call


def test_register_rebinds_the_function_in_every_module(holders, dsv4_log) -> None:
    original = _vllm(holders)
    assert plugin.register({}) is True
    stand_in = plugin.active("combine_topk_swa")
    assert isinstance(stand_in, CombineTopkSwaDispatch) and stand_in.original is original
    assert all(getattr(m, target.FUNCTION) is stand_in for m in holders.values())
    assert inspect.signature(stand_in) == inspect.signature(original)
    flashmla = holders[target.MODULE]
    assert is_hooked(flashmla.DeepseekSparseSWAMetadataBuilder.__init__, mark("combine_topk_swa"))
    assert is_hooked(flashmla.DeepseekSparseSWAMetadataBuilder.__init__, mark("swa"))
    lines = [r.getMessage() for r in dsv4_log if r.levelno == logging.INFO]
    assert ("dsv4: CombineTopkSwaIndices launch policy active on vLLM 0.33.0 (vllm.models."
            "deepseek_v4.nvidia.flashmla.combine_topk_swa_indices patched; warm-up at "
            "metadata-builder start-up; DSV4_POLICY=0 turns it off)") in lines, lines
    assert plugin.unregister() is True
    assert all(getattr(m, target.FUNCTION) is original for m in holders.values())
    assert not is_hooked(flashmla.DeepseekSparseSWAMetadataBuilder.__init__,
                         mark("combine_topk_swa"))


@pytest.mark.parametrize("value", ["0", "off", "False"])
def test_the_kill_switch_leaves_the_function_alone(holders, value) -> None:
    original = _vllm(holders)
    assert plugin.register({"DSV4_POLICY": value}) is False
    assert all(getattr(m, target.FUNCTION) is original for m in holders.values())


@pytest.mark.parametrize("seed", range(3))
def test_a_hit_writes_exactly_what_vllms_function_writes(holders, seed) -> None:
    vllm_fn = _vllm(holders)
    plugin.register({})
    stand_in = plugin.active("combine_topk_swa")
    warmed: list[tuple[Any, ...]] = []
    stand_in.configure(arch_of=lambda device: "sm90", table=_table(),
                       warm=lambda *a, table: warmed.append(a[:3]) or 0)
    flashmla_fn = getattr(holders[target.MODULE], target.FUNCTION)
    chunks = _chunks(seed)
    for chunk in chunks:
        assert_same_outputs(_call(flashmla_fn, chunk), _call(vllm_fn, chunk))
    assert stand_in.hits == len(chunks) and stand_in.misses == 0
    assert sorted(set(warmed)) == [("sm90", 16, 0), ("sm90", 16, 12)]


def test_an_allocating_hit_equals_vllms_allocation(holders) -> None:
    vllm_fn = _vllm(holders)
    plugin.register({})
    stand_in = plugin.active("combine_topk_swa")
    stand_in.configure(arch_of=lambda device: "sm90", table=_table(), warm=lambda *a, **k: 0)
    chunk = make_chunk(7, kind="c4a", queries=[(40, 9), (0, 5)], window_size=16,
                       index_topk=32)
    args = chunk.args()[:9]
    got, want = stand_in(*args), vllm_fn(*args)
    assert stand_in.hits == 1
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_a_miss_calls_vllms_function_with_the_same_arguments(holders, monkeypatch) -> None:
    spy = _spy(holders, monkeypatch)
    plugin.register({})
    stand_in = plugin.active("combine_topk_swa")
    assert stand_in.original is spy
    # The shipped table has no entry for this key; an entry for another window neither.
    stand_in.configure(arch_of=lambda device: "sm90", table=_table(window_size=256))
    for chunk in _chunks(5):
        spy.calls.clear()
        used: list[tuple[object, ...]] = []
        got = _call(getattr(holders[target.MODULE], target.FUNCTION), chunk, used)
        args, kwargs = spy.calls[0]
        assert len(spy.calls) == 1
        assert all(a is b for a, b in zip(args, used[0][:9], strict=True))
        assert kwargs == dict(zip(("out", "left_visible", "right_visible", "max_image_tokens"),
                                  used[0][9:], strict=True))
        assert kwargs["out"] is used[0][9]
        spy.calls.clear()
        assert_same_outputs(got, _call(spy.real, chunk))
    assert stand_in.hits == 0 and stand_in.misses == 4


def _shifted(call: Chunk) -> tuple[object, ...]:
    """The call's arguments with ``out[0]`` one element into its allocation: vLLM's
    kernel takes such a view, dsv4's checks refuse it (not 16-byte aligned)."""
    storage = call.indices_storage
    view = storage.view(-1)[1:].as_strided((call.out_rows, call.out_cols), (storage.shape[1], 1))
    args = list(call.args())
    args[9] = (view, call.out[1])
    return tuple(args)


def test_a_call_dsv4s_checks_refuse_goes_to_vllm(holders, monkeypatch, dsv4_log) -> None:
    spy = _spy(holders, monkeypatch)
    plugin.register({})
    stand_in = plugin.active("combine_topk_swa")
    stand_in.configure(arch_of=lambda device: "sm90", table=_table(), warm=lambda *a, **k: 0)
    chunk = make_chunk(9, kind="c4a", queries=[(3, 20)], window_size=16, index_topk=32,
                       stride_pad=4)
    for _ in range(2):
        call = chunk.fresh()
        args = _shifted(call)
        spy.calls.clear()
        stand_in(*args)
        assert len(spy.calls) == 1 and spy.calls[0][0][9] is args[9]
        want = chunk.fresh()
        spy.real(*_shifted(want))
        assert torch.equal(call.indices_storage, want.indices_storage)
        assert torch.equal(call.lens_storage, want.lens_storage)
        assert not bool((call.indices_storage == POISON).all())
    assert stand_in.hits == 0 and stand_in.misses == 2
    assert sum("refused a call" in r.getMessage() for r in dsv4_log) == 1


def test_unusual_calls_and_unknown_arches_are_misses(holders, monkeypatch) -> None:
    spy = _spy(holders, monkeypatch)
    plugin.register({})
    stand_in = plugin.active("combine_topk_swa")
    stand_in.configure(table=_table(), warm=lambda *a, **k: 0)  # real arch: a CPU has none
    chunk = make_chunk(11, kind="swa", queries=[(0, 12)], window_size=16).fresh()
    stand_in(*chunk.args())
    stand_in.configure(arch_of=lambda device: "sm90")
    with pytest.raises(TypeError):
        stand_in(*chunk.args()[:9], out=chunk.out, bogus=1)
    with pytest.raises(TypeError):
        stand_in(*chunk.args()[:8], N=chunk.N, M=chunk.M)
    assert stand_in.hits == 0 and len(spy.calls) == 3


def test_flashmlas_swa_builder_warms_every_compile_key(holders) -> None:
    from vllm.v1.kv_cache_interface import SlidingWindowMLASpec

    plugin.register({})
    stand_in = plugin.active("combine_topk_swa")
    warmed: list[tuple[Any, ...]] = []
    stand_in.configure(arch_of=lambda device: "sm90",
                       warm=lambda *a, table: warmed.append(a) or 0)
    spec = SlidingWindowMLASpec(block_size=64, num_kv_heads=1, head_size=512,
                                dtype=torch.uint8, sliding_window=128)
    config = SimpleNamespace(
        speculative_config=None,
        model_config=SimpleNamespace(max_model_len=4096,
                                     hf_config=SimpleNamespace(sliding_window=128)),
        scheduler_config=SimpleNamespace(max_num_batched_tokens=16, max_num_seqs=4),
    )
    flashmla = holders[target.MODULE]
    swa_warmed = []
    plugin.active("swa").configure(arch_of=lambda device: "sm90",
                                   warm=lambda *a, table: swa_warmed.append(a) or 0)
    flashmla.DeepseekSparseSWAMetadataBuilder(spec, ["layers.0.attn"], config,
                                              torch.device("cpu"))
    assert warmed == [] and len(swa_warmed) == 1  # not FlashMLA's builder: no warm-up here
    built = flashmla.DeepseekSparseSWAFlashMLAMetadataBuilder(spec, ["layers.0.attn"], config,
                                                              torch.device("cpu"))
    assert built.decode_swa_indices.shape == (16, 1, 128)  # vLLM's constructor ran
    assert warmed == [("sm90", 128, 0, torch.device("cpu"))]
    assert len(swa_warmed) == 1  # SWA's own hook still runs on FlashMLA's builder (warm once)


def test_the_real_warm_up_compiles_the_deployments_keys(monkeypatch) -> None:
    from dsv4_kernels import combine_topk_swa as kernels_cts

    seen: list[list[tuple[int, ...]]] = []
    real = kernels_cts.warmup
    monkeypatch.setattr(kernels_cts, "warmup",
                        lambda keys, device: seen.append(keys) or real(keys, device))
    table = _table((4, 64, 2), window_size=128)
    assert target.warm_compile_keys("sm90", 128, 0, "cpu", table=table) == 0
    assert seen == [sorted(policy.compile_keys(table, "sm90", window_size=128))]
    assert set(seen[0]) == {(4, 64, 2), (1, 1024, 4)}
