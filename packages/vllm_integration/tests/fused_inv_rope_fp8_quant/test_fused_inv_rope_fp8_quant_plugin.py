"""The FusedInvRopeFP8Quant stand-in in vLLM's process: routing, refusals, warm-up.

vLLM's Triton is its CPU placeholder in this process, so vLLM's kernel object is a spy
that records its arguments; dsv4's kernel runs in Triton's interpreter and is checked
against the kernel package's specification (the plain-torch reference with the
interpreter's own casts). The equality with vLLM's own kernel inside vLLM's real op runs
in ``test_fused_inv_rope_fp8_quant_vllm.py``; the GPU's in ``..._gpu.py``.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import random
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from dsv4_kernels.fused_inv_rope_fp8_quant import checks, launch, testing
from dsv4_policy.kernels import fused_inv_rope_fp8_quant as policy
from dsv4_vllm import guard, plugin
from dsv4_vllm.kernels import fused_inv_rope_fp8_quant as target_module
from dsv4_vllm.kernels.fused_inv_rope_fp8_quant import (
    SIGNATURE,
    TARGET,
    Deployment,
    FusedInvRopeFP8QuantDispatch,
    kernel_compile_keys,
    warm_compile_keys,
)

PROVENANCE = 'provenance = { gpu = "test", date = "2026-12-02", probes = 12, ' \
             'worst_speedup = "1.000x" }'
TABLE = policy.loads_table(f"""schema = 1

[[entry]]
id = "decode"
match = {{ arch = "sm90", num_tokens = {{ min = 0, max = 4 }} }}
launch = {{ tokens_per_program = 1, heads_per_program = 8, num_warps = 4, body = "block_rows" }}
{PROVENANCE}

[[entry]]
id = "prefill"
match = {{ arch = "sm90", num_tokens = {{ min = 5, max = 2147483647 }} }}
launch = {{ tokens_per_program = 2, heads_per_program = 4, num_warps = 2 }}
{PROVENANCE}
""")
EMPTY = policy.loads_table("schema = 1\n")
CAPTURE_SIZES = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]
"""CUDA-graph batch sizes of the kind vLLM captures (1, 2, 4, then steps of 8 and 16)."""


class Spy:
    """vLLM's kernel object stand-in: records each call and returns what vLLM's does."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.registered: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.kernel = object()

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append((args, kwargs))

    def register_warmup(self, *args: Any, **kwargs: Any) -> None:
        self.registered.append((args, kwargs))

    def get_warmup_keys(self, vllm_config: Any) -> list[Any]:
        return []


class Call:
    """One kernel-object call as vLLM's op implementation makes it, on poisoned buffers."""

    def __init__(self, case: testing.Case, *, pdl: bool = False) -> None:
        self.case = case
        self.o, self.positions, self.cache = case.tensors("cpu")
        checked = checks.check_inputs(self.o, self.positions, self.cache, *case.args())
        self.out_buf, self.scale_buf = launch.allocate(
            checked, self.o.dtype, case.n_groups, case.tma_aligned_scales, case.quantize)
        testing.poison_like_vllm(self.out_buf, self.scale_buf)
        self.kwargs = dict(
            heads_per_group=case.heads_per_group, quant_group_size=case.quant_group_size,
            chunks_per_head=(case.nope_dim + case.rope_dim) // case.quant_group_size,
            nope_dim=case.nope_dim, half_rope=case.rope_dim // 2,
            tma_aligned_scales=case.tma_aligned_scales, quantize=case.quantize,
            fp8_max=448.0, launch_pdl=pdl, grid=(checked.tma_aligned_T, case.num_heads))

    def args(self) -> tuple[Any, ...]:
        return (self.o, self.positions, self.cache, self.out_buf, self.scale_buf,
                self.case.num_tokens)

    def run(self, obj: Any) -> Any:
        return obj(*self.args(), **self.kwargs)

    def outputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        scales = self.scale_buf.transpose(0, 1) if self.case.quantize else self.scale_buf
        return self.out_buf.transpose(0, 1), scales

    def assert_as_specified(self) -> None:
        """The buffers hold what the kernel package's specification says, bit for bit
        (the output in the interpreter's casts; the whole scale buffer, pad rows too)."""
        out, scales = self.outputs()
        want_bits, want_scales = testing.interpreter_expected(self.case, self.o,
                                                              self.positions, self.cache)
        assert torch.equal(testing.bits(out), want_bits), self.case
        if self.case.quantize:
            assert testing.mismatches(testing.scale_storage(scales),
                                      testing.scale_storage(want_scales)) == 0, self.case

    def untouched(self) -> bool:
        """Whether the buffers still hold nothing but the poison."""
        out_poisoned = bool((testing.bits(self.out_buf) == 0x7F).all()) if (
            self.case.quantize) else bool(self.out_buf.isnan().all())
        if not self.case.quantize:
            return out_poisoned
        storage = testing.scale_storage(self.scale_buf.transpose(0, 1)).view(torch.int32)
        return out_poisoned and bool((storage == testing.POISON_WORD).all())


def _dispatch(spy: Any, table: Any = TABLE, arch: str | None = "sm90",
              warm: Any = None) -> FusedInvRopeFP8QuantDispatch:
    warmed: list[tuple[Any, ...]] = []

    def record(*args: Any, table: Any = None) -> int:
        warmed.append(args)
        return 0

    dispatch = FusedInvRopeFP8QuantDispatch(spy, table=table, arch_of=lambda device: arch,
                                            warm=warm or record)
    dispatch.warmed_calls = warmed  # type: ignore[attr-defined]
    return dispatch


def _random_cases(count: int, seed: int) -> list[testing.Case]:
    return list(testing.random_cases(count, seed=seed, max_tokens=9, max_heads=16))


@pytest.fixture(scope="module", autouse=True)
def interpreter() -> None:
    """dsv4's kernel runs here on CPU tensors: only in Triton's interpreter."""
    if not launch.interpreting():
        raise RuntimeError("run these tests with TRITON_INTERPRET=1 (the `vllm` target does)")


# -- the decision ---------------------------------------------------------------------

@pytest.mark.parametrize("case", _random_cases(6, seed=11), ids=repr)
def test_a_hit_writes_vllms_buffers_as_specified(case: testing.Case) -> None:
    spy = Spy()
    dispatch = _dispatch(spy)
    call = Call(case, pdl=random.Random(case.seed).random() < 0.5)
    assert call.run(dispatch) is None
    call.assert_as_specified()
    assert dispatch.hits == 1 and dispatch.misses == 0 and spy.calls == []


def test_the_policys_bodies_are_the_kernels_bodies() -> None:
    """The policy (stdlib only) and the kernels each name the bodies; the plugin joins
    them, so a body one side adds without the other would be a table entry the kernel
    refuses (and vLLM's kernel would run): the two lists and defaults must agree."""
    assert policy.BODIES == checks.BODIES
    assert policy.DEFAULT_BODY == checks.DEFAULT_BODY == launch.BASELINE_TILE[3]
    assert policy.BASELINE_TILE.body == policy.DEFAULT_BODY


@pytest.mark.parametrize(("t", "tile"), [(3, (1, 8, 4, "block_rows")),
                                         (7, (2, 4, 2, "head_rows"))])
def test_a_hit_runs_its_entrys_tile_and_body(monkeypatch, t: int, tile: tuple) -> None:
    """The entry's whole tile, its body included, reaches dsv4's kernel entry: T=3 hits
    the block-rows entry, T=7 the head-rows one, and each writes the specification."""
    seen: list[tuple] = []
    real = launch.kernel_call

    def record(*args: Any, **kwargs: Any) -> None:
        seen.append((kwargs["tokens_per_program"], kwargs["heads_per_program"],
                     kwargs["num_warps"], kwargs["body"]))
        real(*args, **kwargs)

    monkeypatch.setattr(target_module.kernels_firq, "kernel_call", record)
    call = Call(testing.Case(t, 2, 8, False, True, seed=t))
    assert call.run(_dispatch(Spy())) is None
    assert seen == [tile]
    call.assert_as_specified()


@pytest.mark.parametrize("label,table,arch", [
    ("no entry", EMPTY, "sm90"),
    ("another arch's entry", TABLE, "sm100"),
    ("no arch (a CPU tensor)", TABLE, None),
])
def test_a_miss_calls_vllms_object_with_the_same_arguments(label: str, table: Any,
                                                           arch: str | None) -> None:
    spy = Spy()
    dispatch = _dispatch(spy, table=table, arch=arch)
    call = Call(testing.Case(3, 2, 8, False, True, seed=3))
    assert call.run(dispatch) is None
    ((args, kwargs),) = spy.calls
    assert len(args) == 6 and all(a is b for a, b in zip(args, call.args(), strict=True))
    assert list(kwargs) == list(call.kwargs)
    assert all(kwargs[k] is call.kwargs[k] for k in kwargs)
    assert dispatch.misses == 1 and dispatch.hits == 0 and call.untouched(), label


def test_unusual_calls_reach_vllms_object_unchanged() -> None:
    """Anything the stand-in cannot read for sure is vLLM's to run (or to refuse)."""
    spy = Spy()
    dispatch = _dispatch(spy)
    call = Call(testing.Case(3, 1, 8, False, True, seed=4))
    args, kwargs = call.args(), call.kwargs
    odd = [
        (args[:5], {**kwargs, "num_tokens": 3}),                 # num_tokens by keyword
        (args, {k: v for k, v in kwargs.items() if k != "grid"}),  # a missing keyword
        (args, {**kwargs, "extra": 1}),                          # an unknown keyword
        (args, {**kwargs, "grid": [4, 8]}),                      # an unhashable grid
        (args, {**kwargs, "quantize": 1}),                       # a flag that is no bool
    ]
    for a, kw in odd:
        dispatch(*a, **kw)
    half = call.o.float().to(torch.float16)
    dispatch(half, *args[1:], **kwargs)                          # a dtype no warm-up builds
    assert len(spy.calls) == len(odd) + 1 and dispatch.hits == 0
    assert [kw for _, kw in spy.calls[:len(odd)]] == [kw for _, kw in odd]
    assert spy.calls[-1][0][0] is half and call.untouched()


@pytest.mark.parametrize("change", [{"fp8_max": 240.0}, {"grid": (3, 8)},
                                    {"chunks_per_head": 2}])
def test_a_refused_call_falls_back_and_its_shape_stays_vllms(dsv4_log, change) -> None:
    spy = Spy()
    dispatch = _dispatch(spy)
    call = Call(testing.Case(3, 1, 8, False, True, seed=5))
    kwargs = {**call.kwargs, **change}
    for _ in range(2):
        assert dispatch(*call.args(), **kwargs) is None
    assert call.untouched()  # dsv4's checks refused before writing anything
    assert len(spy.calls) == 2 and all(kw == kwargs for _, kw in spy.calls)
    assert dispatch.hits == 0 and dispatch.misses == 2
    assert sum("refused" in r.getMessage() for r in dsv4_log) == 1  # then remembered


def test_the_key_comes_from_host_known_arguments_and_is_cached() -> None:
    keys: list[policy.Key] = []

    def resolve(key: policy.Key) -> policy.Launch:
        keys.append(key)
        return policy.resolve(key, TABLE)

    dispatch = _dispatch(Spy())
    dispatch.configure(resolve=resolve)
    case = testing.Case(5, 2, 8, True, True, seed=6)
    for _ in range(3):
        call = Call(case)
        call.run(dispatch)
        call.assert_as_specified()
    assert keys == [policy.Key("sm90", 5, 16, 512, 128, 1, 1)] and dispatch.hits == 3
    Call(testing.Case(6, 2, 8, True, False, seed=6)).run(dispatch)
    assert keys[-1] == policy.Key("sm90", 6, 16, 512, 128, 1, 0)


# -- vLLM's object: its attributes, its signature, the plugin -----------------------------

def test_every_other_attribute_is_vllms(pristine_vllm) -> None:
    ops = pristine_vllm[TARGET.name]
    original = getattr(ops, TARGET.attribute)
    dispatch = FusedInvRopeFP8QuantDispatch(original)
    assert inspect.signature(dispatch) == inspect.signature(original)
    for name in ("kernel", "CompileKey", "get_warmup_keys", "compile", "compile_many",
                 "warmup", "dispatch", "compile_key", "launch", "warmup_inputs"):
        assert getattr(dispatch, name) == getattr(original, name), name
    assert dispatch.kernel is original.kernel and dispatch.CompileKey is original.CompileKey
    with pytest.raises(AttributeError):
        dispatch.no_such_attribute  # noqa: B018


def test_vllms_object_matches_the_signature_and_a_drifted_one_does_not(pristine_vllm) -> None:
    original = getattr(pristine_vllm[TARGET.name], TARGET.attribute)
    assert SIGNATURE.reason(original, TARGET.where) is None

    class Drifted:
        def __call__(self, o, positions, cos_sin_cache, out_buf, scale_buf, num_tokens, *,
                     heads_per_group, quant_group_size, chunks_per_head, nope_dim, half_rope,
                     tma_aligned_scales, quantize, fp8_max, launch_pdl, grid=None):
            return None

        register_warmup = get_warmup_keys = original.register_warmup

    reason = SIGNATURE.reason(Drifted(), TARGET.where)
    assert reason is not None and "grid=None" in reason and TARGET.where in reason
    no_warmup = SimpleNamespace(__call__=original.__call__)
    assert "with register_warmup, get_warmup_keys" in SIGNATURE.reason(no_warmup, "x")


def test_register_patches_unregister_restores_and_the_kill_switch(pristine_vllm,
                                                                   dsv4_log) -> None:
    ops = pristine_vllm[TARGET.name]
    original = getattr(ops, TARGET.attribute)
    assert plugin.register({"DSV4_POLICY": "0"}) is False
    assert getattr(ops, TARGET.attribute) is original
    assert plugin.register({}) is True
    stand_in = getattr(ops, TARGET.attribute)
    assert isinstance(stand_in, FusedInvRopeFP8QuantDispatch) and stand_in.original is original
    assert plugin.active(TARGET.name) is stand_in
    line = next(r.getMessage() for r in dsv4_log if "FusedInvRopeFP8Quant launch" in r.getMessage())
    assert line == (f"dsv4: FusedInvRopeFP8Quant launch policy active on vLLM 0.33.0 "
                    f"({TARGET.where} patched; {target_module.WARM_UP}; DSV4_POLICY=0 turns "
                    "it off)")
    assert plugin.unregister() is True
    assert getattr(ops, TARGET.attribute) is original and plugin.active(TARGET.name) is None


def test_a_drifted_object_is_left_as_vllms(pristine_vllm, dsv4_log, monkeypatch) -> None:
    ops = pristine_vllm[TARGET.name]
    drifted = SimpleNamespace(__call__=lambda *a, **k: None)
    monkeypatch.setattr(ops, TARGET.attribute, drifted)
    assert plugin.register({}) is False
    assert getattr(ops, TARGET.attribute) is drifted and plugin.active(TARGET.name) is None
    warnings = [r.getMessage() for r in dsv4_log if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "vLLM's FusedInvRopeFP8Quant kernel runs unchanged" in (
        warnings[0])
    assert all(plugin.active(name) is not None for name in ("c128a", "swa"))


# -- warm-up --------------------------------------------------------------------------

def _table(*entries: str) -> Any:
    return policy.loads_table("schema = 1\n" + "".join(
        f"\n[[entry]]\nid = \"e{i}\"\n{body}\n{PROVENANCE}\n" for i, body in enumerate(entries)))


def test_the_warm_up_keys_are_the_deployments_table_tiles() -> None:
    table = _table(
        'match = { arch = "sm90", num_tokens = { min = 0, max = 64 } }\n'
        'launch = { tokens_per_program = 1, heads_per_program = 8, num_warps = 4, '
        'body = "block_rows" }',
        'match = { arch = "sm90", num_tokens = { min = 65, max = 9000 }, num_heads = 64 }\n'
        'launch = { tokens_per_program = 2, heads_per_program = 4, num_warps = 4 }',
        'match = { arch = "sm90", num_tokens = { min = 9001, max = 100000 } }\n'
        'launch = { tokens_per_program = 1, heads_per_program = 1, num_warps = 1 }',
        'match = { arch = "sm100", num_tokens = { min = 0, max = 100000 } }\n'
        'launch = { tokens_per_program = 4, heads_per_program = 2, num_warps = 8 }',
    )
    tp1 = Deployment(64, 8, 448, 64, 128, False, True, True)
    tp8 = Deployment(8, 8, 448, 64, 128, False, True, True)
    flags = (8, 448, 64, 128, False, True, True)
    # The baseline's (1, 1, 1) counts because an entry names it; the sm100 tile never.
    # Each key names its body: the two bodies are two binaries.
    assert kernel_compile_keys(table, "sm90", tp1) == [
        launch.CompileKey(1, 1, 1, "head_rows", *flags),
        launch.CompileKey(1, 8, 4, "block_rows", *flags),
        launch.CompileKey(2, 4, 4, "head_rows", *flags)]
    assert kernel_compile_keys(table, "sm90", tp8) == [
        launch.CompileKey(1, 1, 1, "head_rows", *flags),
        launch.CompileKey(1, 8, 4, "block_rows", *flags)]
    assert kernel_compile_keys(EMPTY, "sm90", tp1) == []  # a baseline launch is vLLM's
    pdl_off = tp8._replace(launch_pdl=False, tma_aligned_scales=True)
    assert kernel_compile_keys(table, "sm100", pdl_off) == [
        launch.CompileKey(4, 2, 8, "head_rows", 8, 448, 64, 128, True, True, False)]


@pytest.mark.parametrize("seed", range(4))
def test_every_capture_size_hit_is_warmed(seed: int) -> None:
    """For every T the capture sizes produce (and prefill T), a hit's binary is among
    the deployment's warm-up keys: the warm-up before capture covers every replay."""
    rng = random.Random(seed)
    tiles = [(1, 8, 4, "head_rows"), (2, 4, 4, "block_rows"), (4, 2, 4, "head_rows"),
             (1, 4, 2, "block_rows"), (2, 2, 2, "head_rows"), (8, 1, 4, "block_rows")]
    cuts = sorted(rng.sample(range(1, 8192), 4))
    bounds = [0, *cuts, 2**31 - 1]
    entries = [f'match = {{ arch = "sm90", num_tokens = {{ min = {lo if i == 0 else lo + 1}, '
               f'max = {hi} }}{", quantize = 1" if rng.random() < 0.3 else ""} }}\n'
               f'launch = {{ tokens_per_program = {t[0]}, heads_per_program = {t[1]}, '
               f'num_warps = {t[2]}, body = "{t[3]}" }}'
               for i, (lo, hi, t) in enumerate(zip(bounds[:-1], bounds[1:],
                                                  rng.sample(tiles, len(bounds) - 1),
                                                  strict=True))]
    table = _table(*entries)
    for heads, quantize in ((64, True), (8, True), (8, False)):
        deployment = Deployment(heads, 8, 448, 64, 128, False, quantize, True)
        warmed = {key[:4] for key in kernel_compile_keys(table, "sm90", deployment)}
        for t in [*CAPTURE_SIZES, *(rng.randint(513, 8192) for _ in range(50))]:
            found = policy.resolve(policy.Key("sm90", t, heads, 512, 128, 0, int(quantize)),
                                   table)
            assert found.source == "baseline" or found.compile_key() in warmed, (t, found)


def test_warm_compile_keys_builds_exactly_those_keys(monkeypatch, dsv4_log) -> None:
    built: list[Any] = []
    monkeypatch.setattr(target_module.kernels_firq, "warmup",
                        lambda keys, device: built.append((list(keys), device)) or 2)
    deployment = Deployment(64, 8, 448, 64, 128, False, True, True)
    assert warm_compile_keys("sm90", *deployment, "cuda:0", table=TABLE) == 2
    assert built == [(kernel_compile_keys(TABLE, "sm90", deployment), "cuda:0")]
    assert warm_compile_keys("sm90", *deployment, "cuda:0", table=EMPTY) == 0
    assert len(built) == 1  # nothing to build: no launch call
    lines = [r.getMessage() for r in dsv4_log if r.getMessage().startswith("dsv4 warm-up")]
    assert lines[0].startswith("dsv4 warm-up: 2 FusedInvRopeFP8Quant compile key(s) for sm90, "
                               "num_heads=64, heads_per_group=8, head_dim=512")


def test_the_first_call_of_a_deployment_warms_it_hit_or_miss() -> None:
    dispatch = _dispatch(Spy())
    miss = Call(testing.Case(3, 1, 8, False, True, seed=7))
    empty = _dispatch(Spy(), table=EMPTY)
    miss.run(empty)
    miss.run(empty)
    cpu = torch.device("cpu")
    assert empty.warmed_calls == [("sm90", *Deployment(8, 8, 448, 64, 128, False, True,
                                                        False), cpu)]
    for t in (1, 2, 6, 9):
        Call(testing.Case(t, 2, 8, True, True, seed=t)).run(dispatch)
    Call(testing.Case(2, 2, 8, True, False, seed=1)).run(dispatch)
    assert dispatch.warmed_calls == [
        ("sm90", *Deployment(16, 8, 448, 64, 128, True, True, False), cpu),
        ("sm90", *Deployment(16, 8, 448, 64, 128, True, False, False), cpu)]
    assert dispatch.hits == 5


def test_a_failed_warm_up_hands_every_call_to_vllm(dsv4_log) -> None:
    def broken(*args: Any, table: Any = None) -> int:
        raise RuntimeError("no compiler")

    spy = Spy()
    dispatch = _dispatch(spy, warm=broken)
    for seed in range(3):
        Call(testing.Case(2, 1, 8, False, True, seed=seed)).run(dispatch)
    assert dispatch.enabled is False and dispatch.hits == 0 and len(spy.calls) == 3
    assert sum("warm-up failed" in r.getMessage() for r in dsv4_log) == 1


# -- start-up: vLLM's own JIT warm-up registry ----------------------------------------

def _vllm_config(tp: int) -> SimpleNamespace:
    hf = SimpleNamespace(num_attention_heads=64, o_groups=8, head_dim=512, qk_rope_head_dim=64)
    return SimpleNamespace(model_config=SimpleNamespace(hf_config=hf),
                           parallel_config=SimpleNamespace(tensor_parallel_size=tp))


class _CudaLike:
    """What vLLM's ``get_warmup_keys`` asks its platform, answered as vLLM's CUDA platform
    answers on an H200 (this CPU process has vLLM's CPU platform)."""

    def get_device_capability(self, device_id: int = 0) -> Any:
        from vllm.platforms.interface import DeviceCapability

        return DeviceCapability(major=9, minor=0)

    def is_arch_support_pdl(self) -> bool:
        return True


@pytest.mark.parametrize("tp,heads", [(1, 64), (8, 8)])
def test_vllms_jit_registry_warms_ours_next_to_vllms(pristine_vllm, monkeypatch, tp: int,
                                                     heads: int) -> None:
    """Every layer's ``register_warmup()`` registers vLLM's object (once, deduplicated by
    vLLM) and dsv4's warm-up; the registry's warm-up compiles vLLM's keys with vLLM's
    object and hands ours the deployment vLLM's keys imply, on the current device."""
    from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry

    ops = pristine_vllm[TARGET.name]
    original = getattr(ops, TARGET.attribute)
    monkeypatch.setattr(ops, "current_platform", _CudaLike())
    vllm_compiled: list[Any] = []
    monkeypatch.setattr(type(original), "compile_many",
                        lambda self, keys: vllm_compiled.extend(keys))
    dispatch = _dispatch(original, table=TABLE)
    dispatch.start_up.current_device = lambda: torch.device("cpu")
    config = _vllm_config(tp)
    registry = JitWarmupRegistry(config)
    with registry.activate():
        for _ in range(43):
            dispatch.register_warmup()
    assert len(registry) == 2
    assert original in registry._registrations and dispatch.start_up in registry._registrations
    registry.warmup()
    assert vllm_compiled == original.get_warmup_keys(config)
    assert dispatch.warmed_calls == [
        ("sm90", *Deployment(heads, 8, 448, 64, 128, False, True, True), torch.device("cpu"))]


def test_a_broken_start_up_never_breaks_vllms(pristine_vllm, monkeypatch, dsv4_log) -> None:
    spy = Spy()
    dispatch = _dispatch(spy)
    monkeypatch.setattr(target_module, "JIT_WARMUP_MODULE", "vllm.no_such_module")
    for _ in range(3):
        dispatch.register_warmup()
    assert len(spy.registered) == 3  # vLLM's own registration always happens
    assert sum("could not register" in r.getMessage() for r in dsv4_log) == 1
    assert dispatch.start_up.get_warmup_keys(SimpleNamespace()) == []  # no model config
    dispatch.start_up.current_device = lambda: None  # no GPU: nothing to warm
    dispatch.start_up.compile_many([Deployment(8, 8, 448, 64, 128, False, True, True)])
    assert dispatch.warmed_calls == []


def test_the_target_is_declared_for_the_registry() -> None:
    assert TARGET.name == "fused_inv_rope_fp8_quant" == policy.NAME
    assert TARGET.builder is None and TARGET.aliases == ()
    assert importlib.import_module("dsv4_vllm.registry").get(TARGET.name) is TARGET
    assert [p[0] for p in SIGNATURE.parameters] == [
        *target_module.POSITIONAL_NAMES, *target_module.KEYWORD_NAMES]
    assert {p[2] for p in SIGNATURE.parameters[6:]} == {guard.KEYWORD}
