"""vLLM 0.33.0's own C128A metadata function, extracted from its wheel for timing.

vLLM 0.33.0 needs a newer torch than some GPU machines hold, so the host-cost benchmark
does not install it. Instead this script takes, at benchmark time, from the downloaded
wheel:

- ``build_c128a_topk_metadata``, ``BuildC128ATopkMetadataKernel`` and its instance, and
  the ``_C128A_TOPK_ALIGNMENT`` constant, from ``vllm/models/deepseek_v4/sparse_mla.py``
  (only those definitions, found with ``ast``);
- ``vllm/model_executor/warmup/jit_warmup.py`` and ``jit_warmup_triton_helper.py``
  whole: the ``kernel_launcher`` / ``VllmTritonJitKernel`` path every call goes through;

and writes them, with small stand-ins for ``vllm.envs``, ``vllm.platforms``,
``vllm.triton_utils`` and ``vllm.utils.math_utils``, into a folder that git ignores
(default ``.upstream/c128a/`` at the repository root). Nothing from vLLM is committed. Put
the folder on ``sys.path`` and ``import vllm.models.deepseek_v4.sparse_mla``.

The platform stand-in caches the device capability, as vLLM's CUDA platform does, so
the upstream timing is not charged for a query vLLM would not make.

    python -m dsv4_evals.bench.c128a.upstream --wheel vllm-0.33.0-....whl
    python -m dsv4_evals.bench.c128a.upstream            # pip download first
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from dsv4_evals.bench import paths

DEFAULT_OUT = paths.upstream("c128a")
VERSION = "0.33.0"
SPARSE_MLA = "vllm/models/deepseek_v4/sparse_mla.py"
WHOLE = ("vllm/model_executor/warmup/jit_warmup.py",
         "vllm/model_executor/warmup/jit_warmup_triton_helper.py")
KEEP = ("_C128A_TOPK_ALIGNMENT", "build_c128a_topk_metadata", "BuildC128ATopkMetadataKernel",
        "_BUILD_C128A_TOPK_METADATA_KERNEL")

HEADER = '''"""Extracted at benchmark time from the vLLM {version} wheel; not in the repository."""

from dataclasses import dataclass
from typing import Any

import torch

from vllm.model_executor.warmup.jit_warmup import kernel_launcher
from vllm.model_executor.warmup.jit_warmup_triton_helper import (
    LaunchSpec,
    TritonWarmupTensor,
    VllmTritonJitKernel,
)
from vllm.platforms import current_platform
from vllm.triton_utils import tl, triton
from vllm.utils.math_utils import cdiv

'''

STAND_INS = {
    "vllm/__init__.py": '"""Stand-in package root for the extracted vLLM modules."""\n',
    "vllm/envs.py": ('"""Stand-in for vllm.envs: the one setting the warm-up helper reads."""\n\n'
                     "VLLM_TRITON_JIT_WARMUP_NUM_THREADS = 1\n"),
    "vllm/platforms/__init__.py": '''"""Stand-in: CUDA, with a cached capability."""

import functools
from typing import NamedTuple

import torch


class DeviceCapability(NamedTuple):
    major: int
    minor: int


class _Platform:
    device_type = "cuda"

    @staticmethod
    def is_cuda() -> bool:
        return True

    @staticmethod
    @functools.cache
    def get_device_capability(device_id: int = 0) -> DeviceCapability:
        return DeviceCapability(*torch.cuda.get_device_capability(device_id))


current_platform = _Platform()
''',
    "vllm/triton_utils/__init__.py": ('"""Stand-in for vllm.triton_utils."""\n\n'
                                      "import triton\nimport triton.language as tl\n\n"
                                      "HAS_TRITON = True\n"),
    "vllm/utils/__init__.py": '"""Stand-in package."""\n',
    "vllm/utils/math_utils.py": ('"""Stand-in for vllm.utils.math_utils."""\n\n\n'
                                 "def cdiv(a: int, b: int) -> int:\n    return -(a // -b)\n"),
    "vllm/model_executor/__init__.py": '"""Stand-in package."""\n',
    "vllm/model_executor/warmup/__init__.py": '"""Stand-in package."""\n',
    "vllm/models/__init__.py": '"""Stand-in package."""\n',
    "vllm/models/deepseek_v4/__init__.py": '"""Stand-in package."""\n',
}


def _definitions(source: str) -> str:
    """The source of the top-level definitions named in ``KEEP``, in file order."""
    tree = ast.parse(source)
    found = {}
    for node in tree.body:
        names = []
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        for name in names:
            if name in KEEP:
                found[name] = ast.get_source_segment(source, node, padded=True)
                if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.decorator_list:
                    first = node.decorator_list[0].lineno
                    lines = source.splitlines()
                    found[name] = "\n".join(lines[first - 1:node.end_lineno])
    missing = [k for k in KEEP if k not in found]
    if missing:
        raise SystemExit(f"error: {SPARSE_MLA} in the wheel has no {missing}; is it {VERSION}?")
    return "\n\n\n".join(found[k] for k in KEEP) + "\n"


def extract(wheel: Path, out: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        sparse = zf.read(SPARSE_MLA).decode()
        whole = {name: zf.read(name).decode() for name in WHOLE}
    for rel, text in {**STAND_INS, **whole}.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (out / SPARSE_MLA).write_text(HEADER.format(version=VERSION) + _definitions(sparse))
    (out / "SOURCE").write_text(f"{wheel.name}\n")
    return out


def download(into: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", f"vllm=={VERSION}",
                    "-d", str(into)], check=True)
    return next(into.glob(f"vllm-{VERSION}-*.whl"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, help=f"the vllm {VERSION} wheel (default: download)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.wheel is None:
        with tempfile.TemporaryDirectory() as tmp:
            extract(download(Path(tmp)), args.out)
    else:
        extract(args.wheel, args.out)
    print(f"extracted vLLM {VERSION}'s C128A metadata path into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
