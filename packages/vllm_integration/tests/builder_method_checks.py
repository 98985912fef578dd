"""What the CPU tests of a builder-method target (``indexer_decode``, ``swa_decode``) share.

Such a target's stand-in is vLLM's ``<Builder>.build`` class attribute
(``dsv4_vllm/builder_method.py``). :class:`Sides` switches that attribute between vLLM's
method and the stand-in, :class:`Spy` records what reaches vLLM's method, and the
``assert_*`` helpers are the checks both targets make of binding, patching, hand-overs and
unreadable calls. :func:`run_check` runs a target's child-process comparison with vLLM's
own Triton.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch
from dsv4_vllm import plugin
from dsv4_vllm.hook import is_hooked, mark

VLLMS_BUILD = "vllm's build"
"""What :class:`Spy` answers in place of vLLM's build."""


@dataclasses.dataclass
class Sides:
    """vLLM's builder class ``cls`` with its ``build`` either vLLM's (``"off"``) or the
    plugin's stand-in (``"on"``, what it is left as)."""

    module: Any
    cls: type
    dispatch: Any
    vllm_build: Any
    warmed: list[Any]

    def build(self, side: str, builder: Any, cam: Any, *args: Any, **kwargs: Any) -> Any:
        """``builder.build(0, cam)`` (or ``*args``) with the plugin ``side`` ("off":
        vLLM's method)."""
        self.cls.build = self.dispatch if side == "on" else self.vllm_build
        try:
            return builder.build(*(args or (0, cam)), **kwargs)
        finally:
            self.cls.build = self.dispatch

    def switch(self, side: str) -> None:
        self.cls.build = self.dispatch if side == "on" else self.vllm_build


def registered(name: str, dispatch_type: type, cls: type, table: Any,
               ) -> tuple[Any, Any, list[Any]]:
    """The plugin registered: ``(stand-in, vLLM's build, warm-ups)``, the stand-in on
    ``table`` for an sm90 device, each warm-up's arguments recorded instead of compiled."""
    vllm_build = cls.__dict__["build"]
    assert plugin.register({}) is True
    dispatch = plugin.active(name)
    assert isinstance(dispatch, dispatch_type)
    warmed: list[Any] = []
    dispatch.configure(table=table, arch_of=lambda device: "sm90",
                       warm=lambda *a, table=None: warmed.append(a) or 0)
    return dispatch, vllm_build, warmed


@contextlib.contextmanager
def expect_hit(sides: Sides, hit: bool) -> Iterator[None]:
    """The stand-in took over exactly one build inside the block when ``hit``, and handed
    exactly one to vLLM's otherwise."""
    hits, misses = sides.dispatch.hits, sides.dispatch.misses
    yield
    assert sides.dispatch.hits - hits == int(hit), "hit expected" if hit else "miss expected"
    assert sides.dispatch.misses - misses == int(not hit)


def generated_sizes(gen: torch.Generator,
                    ) -> tuple[Callable[[int], int], int, int | None, int | None]:
    """A generated decode step's ``(pick, real, padded, num_tokens)``: up to 47 real
    requests, CUDA-graph padding (to at most 48, or 1 to 47 padding requests alone) or
    None, and more tokens than requests or None; ``pick(n)`` draws from ``gen`` below
    ``n``."""
    pick = lambda n: int(torch.randint(0, n, (1,), generator=gen))  # noqa: E731
    real = pick(48)
    padded = [None, min(48, real + pick(10) + 1)][pick(2)] if real else 1 + pick(47)
    tokens = [None, None, (padded or real) + pick(3)][pick(3)]
    return pick, real, padded, tokens


def assert_sm90_alone_is_covered(sides: Sides, compare: Callable[..., Any], cam: Any,
                                 table: Any) -> None:
    """On ``table``, ``compare(sides, cam, hit=...)`` is vLLM's build on a device of no
    known arch and on sm80, and taken over on sm90 (where it is left)."""
    sides.dispatch.configure(table=table, arch_of=lambda device: None)
    compare(sides, cam, hit=False)
    sides.dispatch.configure(arch_of=lambda device: "sm80")
    compare(sides, cam, hit=False)
    sides.dispatch.configure(arch_of=lambda device: "sm90")
    compare(sides, cam, hit=True)


def recorded_keys(sides: Sides, policy: ModuleType, table: Any) -> list[Any]:
    """Every key the stand-in resolves from now on (on ``table``), in order."""
    keys: list[Any] = []
    sides.dispatch.configure(resolve=lambda key: keys.append(key) or policy.resolve(key, table))
    return keys


# --------------------------------------------------------------------------- misses
class Spy:
    """vLLM's build as the stand-in's ``original``: records each call (vLLM's own Triton
    kernels, which prefill steps launch, cannot run in this process)."""

    def __init__(self, sides: Sides) -> None:
        self.sides = sides
        self.calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def __enter__(self) -> Spy:
        self.sides.dispatch.original = self
        return self

    def __exit__(self, *exc: object) -> None:
        self.sides.dispatch.original = self.sides.vllm_build

    def __call__(self, builder: Any, *args: Any, **kwargs: Any) -> str:
        self.calls.append((builder, args, kwargs))
        return VLLMS_BUILD


def assert_handed_over(sides: Sides, steps: ModuleType, builder: Any, cam: Any,
                       forms: Iterable[tuple[tuple[Any, ...], dict[str, Any]]]) -> Spy:
    """The stand-in hands each ``builder.build(*args, **kwargs)`` of ``forms`` to vLLM's
    with the very same arguments, taking nothing over and writing nothing to the builder
    (``steps.buffers``, compared with ``steps.differences``)."""
    forms = list(forms)
    before = steps.buffers(builder)
    hits = sides.dispatch.hits
    with Spy(sides) as spy:
        for args, kwargs in forms:
            assert sides.build("on", builder, cam, *args, **kwargs) == VLLMS_BUILD
    assert spy.calls == [(builder, args, kwargs) for args, kwargs in forms]
    assert all(a is b for a, b in zip(spy.calls[0][1], forms[0][0], strict=True))
    assert sides.dispatch.hits == hits
    assert steps.differences(before, steps.buffers(builder)) == []
    return spy


def assert_unreadable_calls_reach_vllms_build(
        sides: Sides, builder: Any, cam: Any,
        *more: tuple[tuple[Any, ...], dict[str, Any]]) -> None:
    """Calls the stand-in cannot read for sure get vLLM's own error: no common attention
    metadata, a parameter given twice, ``more`` (``(args, kwargs)``, each a TypeError of
    vLLM's) and a step that is not a CommonAttentionMetadata."""
    sides.switch("on")
    calls = [((cam,), {}), ((0, cam), {"common_prefix_len": 0}), *more]
    for args, kwargs in calls:
        with pytest.raises(TypeError):
            builder.build(*args, **kwargs)
    with pytest.raises(AttributeError):
        builder.build(0, SimpleNamespace(num_reqs=2))  # not a CommonAttentionMetadata
    assert sides.dispatch.hits == 0 and sides.dispatch.misses == len(calls) + 1


# --------------------------------------------------------------------------- binding
def assert_patches_and_restores(target_module: ModuleType, cls: type, hooks: tuple[str, ...],
                                while_on: Callable[[Any], None] | None = None) -> None:
    """The target module answers vLLM's class and its ``build``; the plugin (unless
    switched off) sets the class attribute to its stand-in, with vLLM's signature and the
    builder hooks ``hooks``, and ``unregister`` puts vLLM's back. ``while_on`` checks the
    stand-in further while it is installed."""
    target = target_module.TARGET
    vllm_build = cls.__dict__["build"]
    assert importlib.import_module(target.module) is target_module
    assert getattr(target_module, target.attribute) is vllm_build
    assert getattr(target_module, target.builder.cls) is cls
    assert plugin.register({"DSV4_POLICY": "0"}) is False
    assert cls.__dict__["build"] is vllm_build
    assert plugin.register({}) is True
    stand_in = plugin.active(target.name)
    assert cls.__dict__["build"] is stand_in and stand_in.original is vllm_build
    if while_on is not None:
        while_on(stand_in)
    assert getattr(target_module, target.attribute) is stand_in
    assert inspect.signature(stand_in) == inspect.signature(vllm_build)
    for name in hooks:
        assert is_hooked(cls.__init__, mark(name))
    assert plugin.unregister() is True
    assert cls.__dict__["build"] is vllm_build and plugin.active(target.name) is None
    assert not is_hooked(cls.__init__, mark(target.name))
    with pytest.raises(AttributeError, match="cannot be deleted"):
        delattr(target_module, target.attribute)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        target_module.nothing  # noqa: B018


def assert_binds_as_a_method(sides: Sides, builders: Iterable[Any],
                             step: Callable[[], Any]) -> None:
    """On each of ``builders`` the stand-in binds as vLLM's method, with vLLM's bound
    signature; on the last one an instance attribute ``build`` wins over it (what the
    step benchmark's timers do) until it is deleted. Both of those builds of ``step()``
    are taken over."""
    for on in builders:
        bound = on.build
        assert bound.__self__ is on and bound.__func__ is sides.dispatch
        assert inspect.signature(bound) == inspect.signature(sides.vllm_build.__get__(on))
    timed: list[int] = []

    def timer(*args: Any, **kwargs: Any) -> Any:
        timed.append(1)
        return bound(*args, **kwargs)

    on.build = timer  # what the step benchmark's timers do
    on.build(0, step())
    del on.build
    on.build(0, step())
    assert timed == [1] and sides.dispatch.hits == 2


def imported_alone(module: str) -> list[str]:
    """A fresh interpreter's ``TARGET.attribute``, ``TARGET.name`` and whether vLLM was
    imported, after importing ``module`` alone."""
    code = (f"import sys; import {module} as m; "
            "print(m.TARGET.attribute, m.TARGET.name, 'vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return out.stdout.split()


# --------------------------------------------------------------------------- warm-up
def counted_warm_ups(monkeypatch: pytest.MonkeyPatch, kernels: ModuleType,
                     compiled: int = 2) -> list[tuple[Any, Any]]:
    """Each ``kernels.warmup(keys, device)`` call from now on, recorded (each answers
    ``compiled``) instead of compiling."""
    seen: list[tuple[Any, Any]] = []
    monkeypatch.setattr(kernels, "warmup",
                        lambda keys, device: seen.append((keys, device)) or compiled)
    return seen


# --------------------------------------------------------------------------- host work
def annotate_launch(monkeypatch: pytest.MonkeyPatch, kernels: ModuleType, name: str) -> None:
    """``kernels.launch_checked`` inside a profiler range ``name`` from now on."""
    launch = kernels.launch_checked

    @functools.wraps(launch)
    def annotated(*args: Any) -> None:
        with torch.profiler.record_function(name):
            launch(*args)

    monkeypatch.setattr(kernels, "launch_checked", annotated)


def aten_ops(fn: Callable[[], Any], *ranges: str) -> list[str]:
    """The ATen ops ``fn`` dispatches, without those inside a profiler range of ``ranges``:
    dsv4's launch (Triton's interpreter runs the kernel with ATen ops; a GPU launch
    dispatches none) and any call that is the same on both sides."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()

    def inside(event: Any) -> bool:
        while event is not None:
            if event.name in ranges:
                return True
            event = event.cpu_parent
        return False

    return [e.name for e in prof.events() if e.name.startswith("aten::") and not inside(e)]


# --------------------------------------------------------------------------- vLLM's Triton
def run_check(check: Path, out: Path) -> dict[str, Any]:
    """``check`` run in a child process where vLLM keeps its real Triton (no visible CUDA
    device, Triton's interpreter on) with a fresh seed; its JSON report, with the seed."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1",
           "VLLM_TARGET_DEVICE": "cpu"}
    seed = str(int(torch.randint(0, 1 << 30, (1,))))
    proc = subprocess.run([sys.executable, str(check), str(out), seed], env=env,
                          capture_output=True, text=True, timeout=1500)
    if proc.returncode != 0 or not out.exists():
        pytest.fail(f"{check.name} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-6000:]}", pytrace=False)
    data: dict[str, Any] = json.loads(out.read_text())
    data["seed"] = seed
    return data
