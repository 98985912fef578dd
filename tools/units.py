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
from hermetic import GPU_ALLOWED
from targets import Graph, Target

WORKSPACE = "dsv4-workspace"  # the root project in uv.lock: it holds the repo-wide groups


@dataclass(frozen=True)
class Unit:
    """One cacheable unit of work: what its result depends on and what it leaves.

    The executor keys, runs and replays units; the key, the execution root and the
    outputs a record may restore all come from these fields.

    >>> all_units(graph)["policy"].lock_slices
    (('dsv4-policy', ('test',)),)
    """

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
    # Runs in an execution root of exactly the files its key hashed. Tuning edits the
    # repository's own tables, so it runs in the repository, like `bazel run`.
    sandboxed: bool = True

    @property
    def gpu_environment(self) -> bool:
        """The run gets the CUDA driver variables (and so they are keyed).

        >>> all_units(graph)["c128a-report"].gpu_environment
        True
        """
        return self.gpu_in_key


GPU_KINDS = ("bench", "tune")


def needs_gpu(target: Target) -> bool:
    """The run fails without a CUDA device: gpu-tagged tests, benches and tuning.

    >>> needs_gpu(graph.targets["kernels-gpu"])
    True
    """
    return "gpu" in target.tags or target.kind in GPU_KINDS


def target_unit(graph: Graph, target: Target) -> Unit:
    """The unit of one declared target.

    >>> unit = target_unit(graph, graph.targets["policy"])
    >>> unit.outputs, unit.sandboxed
    (('artifacts/junit/policy.xml',), True)
    """
    outputs = (f"artifacts/junit/{target.name}.xml",) if target.pytest else ()
    gpu = needs_gpu(target)
    gpu_env = gpu or target.kind == "report"
    return Unit(
        name=target.name,
        declaration=target.declaration(),
        packages=tuple(graph.target_packages(target)),
        lock_slices=((target.package.dist, target.groups),),
        # Every variable that reaches the run is keyed: the target's own, and the CUDA
        # driver's (LD_LIBRARY_PATH, CUDA_HOME, TRITON_PTXAS_PATH, …) where it gets them.
        variables=tuple(dict.fromkeys((*target.env, *(GPU_ALLOWED if gpu_env else ())))),
        set_env=target.set_env,
        needs_gpu=gpu,
        gpu_in_key=gpu_env,
        cacheable=target.kind != "tune",
        inputs=target.inputs,
        outputs=(*outputs, *target.outputs),
        sandboxed=target.kind != "tune",
    )


# What `meta`'s tests read beyond tools/ and the policy sources: every package's
# declarations (the target graph, the units' keys), the side environments' requirement
# files the declarations name, and the lock the keys are made of.
META_INPUTS = ("packages/*/pyproject.toml", "uv.lock", "ci/cache-server")


def _declared_files(graph: Graph) -> tuple[str, ...]:
    """Files the target declarations name and ``targets.load`` checks exist, and the
    files a family's ``each`` matched (without them the graph has no such members)."""
    found = {
        (t.package.folder / aux.requirements).relative_to(graph.root).as_posix()
        for t in graph.targets.values() for aux in t.aux_envs.values()
    }
    return tuple(sorted(found | set(graph.family_files)))
# What `lint` checks beyond the packages and the build files.
LINT_INPUTS = ("uv.lock", "ci")


def repo_units(graph: Graph) -> dict[str, Unit]:
    """The checks that belong to the repository rather than to one package.

    >>> sorted(repo_units(graph))
    ['build:dsv4-evals', 'build:dsv4-kernels', 'build:dsv4-policy', 'build:dsv4-vllm',
     'lint', 'meta']
    """
    every = tuple(graph.packages)
    units = {
        "meta": Unit(
            name="meta",
            declaration={"session": "meta", "pytest": ["tools/tests"]},
            packages=("dsv4-policy",),
            lock_slices=(("dsv4-policy", ("test",)), (WORKSPACE, ("meta",))),
            inputs=(*META_INPUTS, *_declared_files(graph)),
            outputs=("artifacts/junit/meta.xml",),
        ),
        "lint": Unit(
            name="lint",
            declaration={"session": "lint", "checks": [
                "uv lock --check", "ruff", "lint-imports", "check-jsonschema"]},
            packages=every,
            lock_slices=((WORKSPACE, ("lint",)),),
            inputs=LINT_INPUTS,
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
    """Every cacheable unit by name: the declared targets and the repository checks.

    >>> "meta" in all_units(graph) and "policy" in all_units(graph)
    True
    """
    return {**{t.name: target_unit(graph, t) for t in graph.targets.values()}, **repo_units(graph)}


def key_for(
    graph: Graph, unit: Unit, arguments: Sequence[str], inputs: cache_key.KeyInputs
) -> cache_key.Key:
    """The unit's cache key for this run.

    >>> key_for(graph, units["policy"], [], key_inputs).digest[:8]
    '577cd300'
    """
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
