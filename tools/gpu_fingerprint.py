"""Print one JSON line describing the visible GPU, or an error; exit 3 without one.

The gpu and bench sessions record this beside their results so that a number is
never read without the GPU, driver, CUDA, torch and triton it came from.

:func:`smi` is the part that needs no torch: it asks ``nvidia-smi``, so the result
cache can key a GPU target before any environment exists.
"""

from __future__ import annotations

import json
import subprocess
import sys


def fingerprint() -> dict:
    """The visible GPU and the software stack above it, as torch sees it, or an error.

    Recorded beside every GPU and bench result, so that a number is always read with
    the device, driver, CUDA, torch and triton it came from. It runs inside the
    session's environment (that is where torch is); never raises.

    Example::

        >>> fingerprint()
        {'gpu': 'NVIDIA H200', 'compute_capability': '9.0', 'arch': 'sm90',
         'device_count': 1, 'multiprocessors': 132, 'memory_gib': 139.8,
         'driver': '580.159.04', 'cuda': '13.0', 'torch': '2.11.0+cu130', 'triton': '3.6.0',
         'python': '3.12.3'}
        >>> fingerprint()  # on a machine without torch
        {'error': "torch is not importable here (No module named 'torch')"}
    """
    try:
        import torch
    except ImportError as exc:
        return {"error": f"torch is not importable here ({exc})"}
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return {"error": "torch.cuda.is_available() is False: no CUDA device visible"}
    props = torch.cuda.get_device_properties(0)
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "gpu": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "arch": f"sm{props.major}{props.minor}",
        "device_count": torch.cuda.device_count(),
        "multiprocessors": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "driver": _driver_version(),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton_version,
        "python": sys.version.split()[0],
    }


def smi() -> dict:
    """GPU names, compute capability, driver and count from nvidia-smi, or an error.

    It needs no torch, so the result cache can key a GPU target, and the gpu session
    can refuse early, before any environment is built. Never raises.

    Example::

        >>> smi()
        {'gpus': ['NVIDIA H200'], 'compute_capability': ['9.0'], 'driver': '580.159.04',
         'device_count': 1}
        >>> smi()  # on a machine with no NVIDIA driver
        {'error': 'nvidia-smi is not installed: no NVIDIA driver on this machine'}
    """
    try:
        run = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,compute_cap,driver_version",
             "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        )
    except FileNotFoundError:
        return {"error": "nvidia-smi is not installed: no NVIDIA driver on this machine"}
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": f"nvidia-smi failed: {exc}"}
    rows = [[c.strip() for c in line.split(",")] for line in run.stdout.splitlines() if line]
    if run.returncode != 0 or not rows or any(len(r) != 3 for r in rows):
        detail = (run.stderr or run.stdout).strip().splitlines()[:1]
        return {"error": f"nvidia-smi found no GPU ({detail[0] if detail else 'no output'})"}
    return {
        "gpus": sorted({r[0] for r in rows}),
        "compute_capability": sorted({r[1] for r in rows}),
        "driver": rows[0][2],
        "device_count": len(rows),
    }


NO_GPU = {"gpus": [], "device_count": 0}


def identity_or_none() -> dict:
    """:func:`smi`, or the identity of a machine with no GPU (for keys of targets whose
    result depends on whether one is there, such as the report).

    Such a target runs anywhere, so a missing GPU is a value to key by, not an error.

    Example::

        >>> identity_or_none()  # on a CPU machine
        {'gpus': [], 'device_count': 0}
    """
    data = smi()
    return dict(NO_GPU) if "error" in data else data


def _driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.strip().splitlines()
    return lines[0] if lines else None


if __name__ == "__main__":
    data = fingerprint()
    print(json.dumps(data))
    sys.exit(3 if "error" in data else 0)
