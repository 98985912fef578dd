"""vLLM 0.33.0's own SWA indices-and-lens Triton kernel, extracted at benchmark time.

The SWA benchmarks and tuner time dsv4's kernel against upstream's, launched exactly
as ``ComputeSWAIndicesAndLensKernel.__call__`` launches it (one program per token,
``TRITON_BLOCK_SIZE=1024``, 4 warps). vLLM itself is not installed on the GPU machine,
so this script copies only the ``@triton.jit`` function ``_compute_swa_indices_and_lens_kernel``
out of ``vllm/v1/attention/backends/mla/sparse_swa.py`` (found with ``ast``) from:

- a vLLM 0.33.0 wheel (``--wheel``), or
- an installed vLLM 0.33.0 (the ``vllm`` nox session's environment, found by import), or
- ``pip download --no-deps vllm==0.33.0`` when neither is at hand,

into ``.upstream/swa/upstream_swa.py`` at the repository root, a folder git ignores.
Nothing from vLLM is committed. :func:`load_kernel` imports it; :func:`launch` calls it
the way vLLM's wrapper does.

    python -m dsv4_evals.bench.swa.upstream [--wheel vllm-0.33.0-...whl]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from dsv4_evals.bench import paths, vllm_files

OUT = paths.upstream("swa")
MODULE = "vllm/v1/attention/backends/mla/sparse_swa.py"
KERNEL = "_compute_swa_indices_and_lens_kernel"
VERSION = "0.33.0"
HEADER = ('"""Extracted at benchmark time from vLLM {version}; not in the repository."""\n\n'
          "import triton\nimport triton.language as tl\n\n\n")


def kernel_source(module_text: str) -> str:
    """The decorated kernel function's source (decorator included), found with ``ast``."""
    tree = ast.parse(module_text)
    lines = module_text.splitlines(keepends=True)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == KERNEL:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return "".join(lines[first - 1: node.end_lineno])
    raise SystemExit(f"{MODULE} has no function {KERNEL}: not vLLM {VERSION}?")


def _from_wheel(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        return z.read(MODULE).decode("utf-8")


def _from_installed() -> str | None:
    found = vllm_files.installed_vllm_file(MODULE)
    return None if found is None else found[0]


def extract(wheel: Path | None = None, out: Path = OUT) -> Path:
    """Write the upstream kernel module into ``out``; return its path."""
    if wheel is not None:
        text = _from_wheel(wheel)
    else:
        text = _from_installed()
        if text is None:
            with tempfile.TemporaryDirectory() as tmp:
                subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                                f"vllm=={VERSION}", "-d", tmp], check=True)
                text = _from_wheel(next(Path(tmp).glob("vllm-*.whl")))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "upstream_swa.py"
    path.write_text(HEADER.format(version=VERSION) + kernel_source(text), encoding="utf-8")
    return path


def load_kernel(out: Path = OUT) -> Any:
    """The extracted upstream kernel (a ``triton.jit`` function), extracting it first when
    ``out`` does not hold it yet (from an installed vLLM, else ``pip download``)."""
    path = out / "upstream_swa.py"
    if not path.is_file():
        try:
            extract(None, out)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise FileNotFoundError(
                f"{path} is missing and vLLM {VERSION} could not be fetched ({exc}): run "
                "`python -m dsv4_evals.bench.swa.upstream --wheel WHEEL` on a "
                "machine with the wheel, and carry .upstream/ to the GPU machine") from None
    spec = importlib.util.spec_from_file_location("dsv4_upstream_swa", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, KERNEL)


def launch(kernel: Any, swa_indices: Any, swa_lens: Any, window_size: int, index_width: int,
           left_visible: Any, right_visible: Any, query_start_loc: Any, seq_lens: Any,
           token_to_req_indices: Any, is_valid_token: Any, block_table: Any, block_size: int,
           replay_start: Any, *, num_tokens: int, token_offset: int,
           has_image: bool = False) -> None:
    """What vLLM 0.33.0's ``ComputeSWAIndicesAndLensKernel.__call__`` launches."""
    kernel[(num_tokens,)](
        swa_indices, swa_indices.stride(0), swa_lens, window_size, index_width, left_visible,
        right_visible, query_start_loc, seq_lens, token_to_req_indices, is_valid_token,
        block_table, block_table.stride(0), block_size, replay_start, token_offset,
        HAS_IMAGE=has_image, TRITON_BLOCK_SIZE=1024)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, help="a vLLM 0.33.0 wheel to read")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    print(extract(args.wheel, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
