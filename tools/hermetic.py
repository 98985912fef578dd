"""The allowlisted environment every test process starts from.

Modelled on Bazel's test environment: nothing from the outer environment gets in
unless it is named here or by the target. HOME, TMPDIR and TRITON_CACHE_DIR are the
session's own directories, so a junk PYTHONPATH, a flipped TRITON_INTERPRET, a set
VLLM_PLUGINS or a read-only Triton cache outside cannot change a result.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Passed through from outside when set, and keyed: CI switches Hypothesis to its
# derandomized profile. Nothing else: tests reach no network, so certificate and proxy
# variables are not theirs.
ALWAYS_ALLOWED = ("CI",)

# What a CUDA process needs to find its driver and devices. Each one can change a GPU
# result, so every unit that gets them is keyed by their values (units.py).
GPU_ALLOWED = (
    "CUDA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "TRITON_LIBCUDA_PATH",
    "TRITON_PTXAS_PATH",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
)

FIXED = {
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONNOUSERSITE": "1",
    "PYTHONUNBUFFERED": "1",
    "MPLBACKEND": "Agg",
    "NO_COLOR": "1",
    "TZ": "UTC",
}


def hermetic_env(
    *,
    outer: Mapping[str, str],
    session_dir: Path,
    bin_dir: str,
    allow: Iterable[str],
    set_env: Mapping[str, str],
    gpu: bool,
    python_path: Iterable[str],
) -> dict[str, str]:
    """Build the complete environment for one test process.

    ``session_dir`` gets fresh ``home``, ``tmp`` and ``triton-cache`` folders (the
    temp folder is emptied on every call; the Triton cache is kept between runs
    of the same session so reruns skip compiles).

    The result is the whole environment, not additions to ``outer``: that is what
    lets the result cache treat a target's result as a function of its key. From
    ``outer`` only ``CI``, the GPU variables (when ``gpu``) and ``allow`` get in;
    ``set_env`` wins over all of them.

    Example::

        >>> env = hermetic_env(
        ...     outer={"CI": "true", "HOME": "/root", "PYTHONPATH": "/junk"},
        ...     session_dir=Path(".nox/.hermetic/policy"), bin_dir="/repo/.nox/policy/bin",
        ...     allow=[], set_env={"TRITON_INTERPRET": "1"}, gpu=False, python_path=[])
        >>> env["PATH"], env["HOME"], env["CI"], env["TRITON_INTERPRET"], "PYTHONPATH" in env
        ('/repo/.nox/policy/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
         '.nox/.hermetic/policy/home', 'true', '1', False)
    """
    session_dir = Path(session_dir)
    home, tmp, triton = (session_dir / "home", session_dir / "tmp", session_dir / "triton-cache")
    shutil.rmtree(tmp, ignore_errors=True)
    for folder in (home, tmp, triton):
        folder.mkdir(parents=True, exist_ok=True)

    env = dict(FIXED)
    env.update(
        PATH=os.pathsep.join([bin_dir, SYSTEM_PATH]),
        HOME=str(home),
        TMPDIR=str(tmp),
        TRITON_CACHE_DIR=str(triton),
        XDG_CACHE_HOME=str(home / ".cache"),
        HYPOTHESIS_STORAGE_DIRECTORY=str(tmp / "hypothesis"),
    )
    names = [*ALWAYS_ALLOWED, *(GPU_ALLOWED if gpu else ()), *allow]
    env.update({name: outer[name] for name in names if name in outer})
    env.update(set_env)
    paths = [p for p in python_path if p]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env
