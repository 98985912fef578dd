"""How long one step's metadata build takes, and where it goes.

Three measurements of the whole step (every builder of every KV-cache group, through
vLLM's ``build_attn_metadata``), each for the plugin off and on:

- **host µs** (:func:`host_us`): wall time of the build calls, with the GPU synchronised
  before and after each and garbage collection paused; off and on interleaved round by
  round (ABBA order), medians. Per builder (:func:`builder_host_us`): the same, timed
  around each builder's ``build``.
- **GPU µs** (:func:`gpu_us`, CUDA only): the step's launches captured in one CUDA graph
  and replayed (``method: graph``); where capture fails, CUDA events around an eager step
  (``method: events``, which also counts the gaps between launches).
- **profile** (:func:`profile_step`): ATen ops (every dispatch, and the top-level ones),
  kernel launches, and GPU time per builder and per kernel, from ``torch.profiler`` over
  a few steps. Each builder's ``build`` and each vLLM kernel object's ``launch`` (and
  the plugin's dispatchers) are wrapped in ``record_function`` ranges for the profiled
  steps only, to attribute what they launch; the timed steps run unwrapped.

On a CPU only the host and profile parts run (no CUDA activity).
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import torch

from dsv4_evals.bench.step.harness import Builders, Sides, StepInputs, build_step, vllm_shims

BUILDER = "dsv4.builder:"
KERNEL = "dsv4.kernel:"
STEP = "dsv4.step"
LAUNCH_APIS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx",
               "cudaGraphLaunch")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# ----------------------------------------------------------------------------- host
def host_us(sides: Sides, inputs: dict[str, StepInputs], rounds: int, warmup: int = 5,
            block: int = 5) -> dict[str, list[float]]:
    """Per-step host µs of both sides, in interleaved blocks; ``warmup`` blocks are dropped.

    Each block switches the plugin to one side, makes one untimed build (the first call
    after a switch pays for the switch itself, which a serving engine never does), then
    times ``block`` builds. The sides alternate block by block, in a swapped order every
    other round, so that drift in the machine's state falls on both alike.
    """
    device = sides.off.device
    out: dict[str, list[float]] = {"off": [], "on": []}
    with vllm_shims(), _no_gc():
        for i in range(warmup + rounds):
            for side in (("off", "on") if i % 2 == 0 else ("on", "off")):
                sides.switch.set(side)
                builders, step = sides.builders(side), inputs[side]
                sync(device)
                build_step(builders, step)
                for _ in range(block):
                    sync(device)
                    start = time.perf_counter_ns()
                    build_step(builders, step)
                    stop = time.perf_counter_ns()
                    sync(device)
                    if i >= warmup:
                        out[side].append((stop - start) / 1e3)
    return out


@contextlib.contextmanager
def timed_builders(builders: Builders, sink: dict[str, list[float]]) -> Iterator[None]:
    """Record each builder's ``build`` wall time (µs) into ``sink`` while active."""
    wrapped = []
    for label, builder in builders.labelled():
        original = builder.build

        def build(*args: Any, _original: Callable[..., Any] = original, _label: str = label,
                  **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return _original(*args, **kwargs)
            finally:
                sink[_label].append((time.perf_counter_ns() - start) / 1e3)

        builder.build = build
        wrapped.append(builder)
    try:
        yield
    finally:
        for builder in wrapped:
            del builder.build


def builder_host_us(sides: Sides, side: str, step: StepInputs, rounds: int, warmup: int = 3
                    ) -> dict[str, float]:
    """Median host µs of each builder's ``build`` inside the step."""
    device = sides.off.device
    builders = sides.builders(side)
    sink: dict[str, list[float]] = defaultdict(list)
    sides.switch.set(side)
    with vllm_shims(), _no_gc():
        for _ in range(warmup):
            build_step(builders, step)
        sync(device)
        with timed_builders(builders, sink):
            for _ in range(rounds):
                sync(device)
                build_step(builders, step)
                sync(device)
    return {label: median(times) for label, times in sink.items()}


# ----------------------------------------------------------------------------- GPU
def gpu_us(sides: Sides, side: str, step: StepInputs, replays: int = 10, reps: int = 9
           ) -> dict[str, Any]:
    """GPU µs per step: CUDA-graph replay of the step's launches, else CUDA events."""
    device = sides.off.device
    builders = sides.builders(side)
    sides.switch.set(side)

    def run() -> None:
        build_step(builders, step)

    with vllm_shims():
        try:
            return {"us": _graph_us(run, device, replays, reps), "method": "graph"}
        except Exception as exc:  # capture is not possible for every step
            torch.cuda.synchronize(device)
            return {"us": _events_us(run, device, reps), "method": "events",
                    "capture_error": f"{type(exc).__name__}: {exc}"[:300]}


def _graph_us(fn: Callable[[], None], device: torch.device, replays: int, reps: int) -> float:
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        fn()
        fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
        graph.replay()
        torch.cuda.synchronize(device)
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(reps):
            start.record()
            for _ in range(replays):
                graph.replay()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) * 1e3 / replays)
        return median(times)
    finally:
        del graph
        torch.cuda.synchronize(device)


def _events_us(fn: Callable[[], None], device: torch.device, reps: int) -> float:
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps + 2):
        torch.cuda.synchronize(device)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return median(times[2:])


# ----------------------------------------------------------------------------- profile
@contextlib.contextmanager
def annotated(builders: Builders) -> Iterator[None]:
    """``record_function`` ranges around each builder and each kernel call site."""
    from dsv4_vllm import registry
    from torch.profiler import record_function
    from vllm.model_executor.warmup.jit_warmup_triton_helper import VllmTritonJitKernel

    undo: list[Callable[[], None]] = []
    for label, builder in builders.labelled():
        original = builder.build

        def build(*args: Any, _original: Callable[..., Any] = original, _label: str = label,
                  **kwargs: Any) -> Any:
            with record_function(BUILDER + _label):
                return _original(*args, **kwargs)

        builder.build = build
        undo.append(lambda b=builder: delattr(b, "build"))

    def wrap_class(cls: type, attr: str, name: Callable[[Any], str]) -> None:
        # The method may be inherited (stand-ins sharing a base class): wrap it on ``cls``
        # itself and afterwards leave ``cls`` as it was.
        own = attr in cls.__dict__
        original = cls.__dict__[attr] if own else getattr(cls, attr)

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            with record_function(KERNEL + name(self)):
                return original(self, *args, **kwargs)

        setattr(cls, attr, method)
        undo.append(lambda: setattr(cls, attr, original) if own else delattr(cls, attr))

    wrap_class(VllmTritonJitKernel, "launch", lambda k: f"vllm.{type(k).__name__}")
    for target in registry.targets().values():
        wrap_class(target.dispatch, "__call__", lambda d: f"dsv4.{type(d).__name__}")
    for cls in _triton_function_classes():
        wrap_class(cls, "run", lambda f: f"triton.{_jit_name(f)}")
    try:
        yield
    finally:
        for fn in reversed(undo):
            fn()


def _triton_function_classes() -> list[type]:
    """Triton's launchable function classes (``fn[grid](...)`` ends in their ``run``)."""
    from triton.runtime import jit

    classes = [jit.JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except ImportError:
        pass
    return [c for c in classes if "run" in c.__dict__]


def _jit_name(fn: Any) -> str:
    inner = getattr(fn, "fn", None)
    return getattr(inner, "__name__", None) or getattr(fn, "__name__", type(fn).__name__)


def profile_step(sides: Sides, side: str, step: StepInputs, steps: int = 3) -> dict[str, Any]:
    """ATen ops, launches and GPU time per step, per builder and per kernel."""
    from torch.profiler import ProfilerActivity, profile, record_function

    device = sides.off.device
    builders = sides.builders(side)
    sides.switch.set(side)
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with vllm_shims():
        build_step(builders, step)
        sync(device)
        with annotated(builders), profile(activities=activities) as prof:
            for _ in range(steps):
                with record_function(STEP):
                    build_step(builders, step)
            sync(device)
    return analyse(list(prof.events()), steps)


def _chain(event: Any) -> Iterator[Any]:
    while event is not None:
        yield event
        event = event.cpu_parent


def _builder_of(event: Any) -> str:
    for e in _chain(event):
        if e.name.startswith(BUILDER):
            return e.name[len(BUILDER):]
    return "runner"


def _site_of(event: Any) -> str | None:
    """The kernel call site: the outermost annotated kernel call, else the outermost ATen op."""
    kernel = aten = None
    for e in _chain(event):
        if e.name.startswith(BUILDER):
            break
        if e.name.startswith(KERNEL):
            kernel = e.name[len(KERNEL):]
        elif e.name.startswith("aten::"):
            aten = e.name
    return kernel or aten


def _in_kernel_call(event: Any) -> bool:
    return any(e.name.startswith(KERNEL) for e in _chain(event.cpu_parent))


def analyse(events: list[Any], steps: int) -> dict[str, Any]:
    """Per-step counts from profiler events (see the module docstring)."""
    from torch.autograd import DeviceType

    cpu = [e for e in events if e.device_type == DeviceType.CPU]
    device = [e for e in events if e.device_type != DeviceType.CPU]
    in_step = [e for e in cpu if any(a.name == STEP for a in _chain(e))]
    frontend = {e.id: e for e in cpu if getattr(e, "linked_correlation_id", 0) == 0}

    builders: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    aten_all = aten_top = launches = 0
    aten_names: Counter[str] = Counter()
    for e in in_step:
        owner = _builder_of(e)
        if e.name.startswith("aten::"):
            top = not any(a.name.startswith("aten::") for a in _chain(e.cpu_parent))
            inside = _in_kernel_call(e)
            aten_all += 1
            aten_top += top
            builders[owner]["aten_ops"] += 1
            builders[owner]["aten_top"] += top
            builders[owner]["aten_in_kernel_calls"] += inside
            builders[owner]["aten_top_outside_kernel_calls"] += top and not inside
            if top and not inside:
                aten_names[e.name] += 1
        elif any(e.name.startswith(api) for api in LAUNCH_APIS):
            launches += 1
            builders[owner]["launch_calls"] += 1
        elif e.name.startswith(KERNEL) and not _in_kernel_call(e):
            builders[owner]["kernel_calls"] += 1
            builders[owner]["kernel_call_us"] += e.time_range.end - e.time_range.start
        elif e.name.startswith(BUILDER):
            builders[owner]["profiled_us"] += e.time_range.end - e.time_range.start
        elif e.name == STEP:
            builders["runner"]["profiled_step_us"] += e.time_range.end - e.time_range.start
    kernels: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    gpu_total = 0.0
    for k in device:
        launched_by = frontend.get(getattr(k, "linked_correlation_id", -1))
        owner = _builder_of(launched_by) if launched_by is not None else "unattributed"
        site = (_site_of(launched_by) if launched_by is not None else None) or k.name
        duration = k.time_range.end - k.time_range.start
        kind = ("memcpy" if k.name.startswith("Memcpy") else
                "memset" if k.name.startswith("Memset") else "kernel")
        kernels[(site, k.name, owner)].append(duration)
        builders[owner]["gpu_us"] += duration
        builders[owner][f"{kind}s"] += 1
        gpu_total += duration

    def per_step(values: dict[str, float]) -> dict[str, float]:
        return {k: round(v / steps, 3) for k, v in sorted(values.items())}

    return {
        "steps": steps,
        "aten_ops": aten_all / steps,
        "aten_ops_top_level": aten_top / steps,
        "aten_ops_top_level_outside_kernel_calls": sum(aten_names.values()) / steps,
        "aten_ops_in_kernel_calls": sum(b.get("aten_in_kernel_calls", 0)
                                        for b in builders.values()) / steps,
        "launch_calls": launches / steps,
        "device_ops": len(device) / steps,
        "device_kernels": sum(1 for k in device if not k.name.startswith(("Memcpy", "Memset")))
        / steps,
        "gpu_us_profiled": round(gpu_total / steps, 3),
        "builders": {owner: per_step(v) for owner, v in sorted(builders.items())},
        "kernels": sorted(
            ({"site": site, "kernel": name, "builder": owner, "count": len(d) / steps,
              "gpu_us": round(sum(d) / steps, 3)} for (site, name, owner), d in kernels.items()),
            key=lambda r: -r["gpu_us"]),
        "top_aten_ops": [{"op": n, "count": c / steps} for n, c in aten_names.most_common(30)],
    }
