"""Cacheable units of work: every declared target, and the repository checks.

A unit says what its result depends on (packages, lock slices, variables, extra
inputs) and which files it leaves behind. The noxfile runs units; the result cache
keys them with :func:`key_for`; ``nox -s cache -- explain`` lists the same components.
Declared targets come from ``targets.py``; the repository checks (``meta``, ``lint``
and one ``build:<dist>`` per package) are declared here, since no package owns them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import cache_key
from targets import Graph, Target

WORKSPACE = "dsv4-workspace"  # the root project in uv.lock: it holds the repo-wide groups


@dataclass(frozen=True)
class Unit:
    name: str
    declaration: Mapping[str, object]
    packages: tuple[str, ...]  # intra-repo distributions whose sources are inputs
    lock_slices: tuple[tuple[str, tuple[str, ...]], ...]
    variables: tuple[str, ...] = ()
    set_env: Mapping[str, str] = field(default_factory=dict)
    needs_gpu: bool = False  # fails without a GPU
    gpu_in_key: bool = False  # its result depends on the GPU there is (or that there is none)
    # Tuning rewrites launch tables in the sources: an action, never replayed.
    cacheable: bool = True
    inputs: tuple[str, ...] = ()  # extra files: repository-relative, or 'artifacts/…' globs
    outputs: tuple[str, ...] = ()  # logical globs: 'artifacts/…' or repository-relative


GPU_KINDS = ("bench", "tune")


def needs_gpu(target: Target) -> bool:
    """The run fails without a CUDA device: gpu-tagged tests, benches and tuning."""
    return "gpu" in target.tags or target.kind in GPU_KINDS


def target_unit(graph: Graph, target: Target) -> Unit:
    outputs = (f"artifacts/junit/{target.name}.xml",) if target.pytest else ()
    gpu = needs_gpu(target)
    return Unit(
        name=target.name,
        declaration=target.declaration(),
        packages=tuple(graph.target_packages(target)),
        lock_slices=((target.package.dist, target.groups),),
        variables=target.env,
        set_env=target.set_env,
        needs_gpu=gpu,
        gpu_in_key=gpu or target.kind == "report",
        cacheable=target.kind != "tune",
        inputs=target.inputs,
        outputs=(*outputs, *target.outputs),
    )


def repo_units(graph: Graph) -> dict[str, Unit]:
    """The checks that belong to the repository rather than to one package."""
    every = tuple(graph.packages)
    units = {
        "meta": Unit(
            name="meta",
            declaration={"session": "meta", "pytest": ["tools/tests"]},
            packages=("dsv4-policy",),
            lock_slices=(("dsv4-policy", ("test",)), (WORKSPACE, ("meta",))),
            outputs=("artifacts/junit/meta.xml",),
        ),
        "lint": Unit(
            name="lint",
            declaration={"session": "lint", "checks": ["uv lock --check", "ruff", "lint-imports"]},
            packages=every,
            lock_slices=((WORKSPACE, ("lint",)),),
            inputs=("uv.lock",),
        ),
    }
    for dist in every:
        units[f"build:{dist}"] = Unit(
            name=f"build:{dist}",
            declaration={"session": "build", "package": dist, "alone": True},
            packages=tuple(graph.closure(dist)),
            lock_slices=((dist, ()), (WORKSPACE, ("backend",))),
        )
    return units


def all_units(graph: Graph) -> dict[str, Unit]:
    return {**{t.name: target_unit(graph, t) for t in graph.targets.values()}, **repo_units(graph)}


def key_for(
    graph: Graph, unit: Unit, arguments: Sequence[str], inputs: cache_key.KeyInputs
) -> cache_key.Key:
    folders: dict[str, Path] = {d: graph.packages[d].folder for d in unit.packages}
    return cache_key.compute(
        name=unit.name,
        declaration=unit.declaration,
        package_folders=folders,
        lock_slices=unit.lock_slices,
        variables=unit.variables,
        set_env=unit.set_env,
        keyed_by_gpu=unit.gpu_in_key,
        extra_paths=unit.inputs,
        arguments=arguments,
        inputs=inputs,
    )
