"""What a GPU session checks before it runs anything, and what it records after.

A GPU session must fail, never skip, on a machine without a GPU; its key needs the
GPU's identity (read with ``nvidia-smi``, no torch, before any environment exists);
and its results need the full fingerprint (torch, triton, CUDA, read in the run's own
interpreter). A ``--no-venv`` run also prints every installed version that is not the
lock's, since it is not hermetic. With vLLM from its Python sources
(``DSV4_VLLM_SOURCES``), the fingerprint says so: ``"vllm": "0.33.0 (python sources, no
compiled extensions)"`` and the bundle's wheel and manifest digests.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import cache_key
import gpu_fingerprint
import vllm_sources
from hermetic import hermetic_env
from lockfile import Lock
from targets import Target

PROBE = Path(__file__).resolve().parent / "gpu_fingerprint.py"


def identity(session) -> dict:
    """Fail unless a CUDA device is visible; return what the key needs.

    >>> identity(session)["name"]
    'NVIDIA H200'
    """
    data = gpu_fingerprint.smi()
    if "error" in data:
        session.error(
            f"no CUDA device visible: {data['error']}. The gpu and bench sessions need an "
            "NVIDIA GPU; on a CPU machine run `nox` (the CPU sessions) instead"
        )
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        data["visible_devices"] = visible
        data["device_count"] = len([d for d in visible.split(",") if d.strip()])
    return data


def drift(session, lock: Lock, chosen: Sequence[Target], *, why: str = "--no-venv",
          overrides: Mapping[str, str] | None = None) -> tuple[dict, list[str]]:
    """Every installed version beside the lock's, for a non-hermetic run; the
    differences are printed as one warning. ``overrides`` are versions the run imports
    ahead of the interpreter's own (the vLLM sources bundle's).

    >>> versions, lines = drift(session, lock, [graph.targets["kernels-gpu"]])
    >>> lines[0]
    'torch: locked 2.14.0, installed 2.11.0'
    """
    locked = {d.name: d for t in chosen for d in lock.closure(t.package.dist, t.groups)}
    pinned = sorted(locked.values(), key=lambda d: d.name)
    installed = cache_key.installed_versions(pinned)
    installed.update({n: v for n, v in (overrides or {}).items() if n in installed})
    lines = cache_key.version_drift(pinned, installed)
    if lines:
        session.warn(
            f"non-hermetic run ({why}): the interpreter's packages differ from uv.lock; "
            "results are cached under their own key:\n  " + "\n  ".join(lines)
        )
    versions = {d.name: {"locked": d.version, "installed": installed[d.name]}
                for d in pinned if d.name in installed}
    return versions, lines


def full_fingerprint(session, *, python: str, artifacts: Path, hermetic: bool,
                     lock: Lock, chosen: Sequence[Target],
                     sources: vllm_sources.Bundle | None = None) -> dict:
    """The torch-side fingerprint, read in the run's interpreter after install: GPU,
    CUDA, torch, triton and whether the run is hermetic. Written to
    ``artifacts/<session>-fingerprint.json`` and summarised in one log line. With
    ``sources`` (vLLM from its Python sources for targets that hold it), ``"vllm"``
    says that mode and ``"vllm_sources"`` the bundle's digests.

    >>> full_fingerprint(session, python=".nox/kernels-gpu/bin/python",
    ...                  artifacts=Path("artifacts"), hermetic=True, lock=lock, chosen=[])
    {'gpu': 'NVIDIA H200', 'capability': '9.0', 'torch': '2.11.0+cu130', …}
    >>> full_fingerprint(…, hermetic=False, sources=bundle)["vllm"]
    '0.33.0 (python sources, no compiled extensions)'
    """
    env = hermetic_env(
        outer=os.environ, session_dir=artifacts / session.name / "probe",
        bin_dir=str(Path(python).parent), allow=(), set_env={}, gpu=True, python_path=[],
    )
    out = session.run(python, str(PROBE), env=env, include_outer_env=False,
                      external=True, silent=True, success_codes=[0, 3])
    data = json.loads(str(out).strip().splitlines()[-1])
    if "error" in data:
        session.error(f"no CUDA device visible: {data['error']}")
    data["hermetic"] = hermetic
    if sources is not None:
        data["vllm"] = sources.describe()
        data["vllm_sources"] = sources.fingerprint()
    if not hermetic:
        data["versions"], data["version_drift"] = drift(
            session, lock, chosen, overrides=sources.versions() if sources else None)
    artifacts.mkdir(parents=True, exist_ok=True)
    path = artifacts / f"{session.name}-fingerprint.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    shown = {k: v for k, v in data.items() if k not in ("versions", "vllm_sources")}
    shown["version_drift"] = len(data.get("version_drift", []))
    session.log(f"GPU fingerprint: {json.dumps(shown)} (in full: {path})")
    return data


def pytest_args(gpu: dict | None, target: Target) -> list[str]:
    """One pytest-xdist worker per visible GPU; each worker pins its own device.

    Benchmarks stay in one process: pytest-benchmark turns itself off under xdist, and
    timings taken while another GPU test runs on the host would not be worth keeping.

    >>> pytest_args({"device_count": 2}, graph.targets["kernels-gpu"])
    ['-n', '2', '--dist', 'load']
    """
    count = int((gpu or {}).get("device_count", 1))
    if count > 1 and target.pytest and target.kind == "test":
        return ["-n", str(count), "--dist", "load"]
    return []
