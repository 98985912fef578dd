"""vLLM 0.33.0's own CombineTopkSwaIndices Triton kernel, extracted at run time.

The combine_topk_swa bench gates, tuner and report compare dsv4's kernel with upstream's, launched
exactly as vLLM's ``combine_topk_swa_indices`` does it: the ``fill_(-1)`` of the whole
output (or a ``torch.full`` allocation), then the kernel on a ``(num_reqs, 256)`` grid
with the constexprs ``CombineTopkSwaIndicesKernel.__call__`` derives. vLLM is not
installed on the GPU machine and its kernel class needs vLLM's JIT-kernel base classes,
so this script copies only the ``@triton.jit`` function (the class's static method
``kernel``, found with ``ast``) and reads the launch facts (``NUM_WORKERS``, the width
alignment) from ``vllm/models/deepseek_v4/common/ops/cache_utils.py``, taken from:

- the vLLM sources bundle (``--sources``, default ``.vllm-sources/vllm-0.33.0-sources.zip``
  at the repository root, when it is there), or
- a vLLM 0.33.0 wheel (``--wheel``), or
- an installed vLLM 0.33.0 (found by import), or
- ``pip download --no-deps vllm==0.33.0`` when none is at hand,

into ``.upstream/combine_topk_swa/upstream_combine_topk_swa.py`` at the repository root
(:func:`dsv4_evals.bench.paths.upstream`), a folder git ignores. Nothing from vLLM is
committed. :func:`load_kernel` imports it; :func:`combine_topk_swa_indices` runs it the
way vLLM's function does, and :func:`runner` binds it with dsv4's argument order.

    python -m dsv4_evals.bench.combine_topk_swa.upstream [--sources ZIP | --wheel WHL]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsv4_evals.bench import paths, vllm_files

OUT = paths.upstream("combine_topk_swa")
SOURCES = paths.repo_root() / ".vllm-sources" / "vllm-0.33.0-sources.zip"
MODULE = "vllm/models/deepseek_v4/common/ops/cache_utils.py"
CLASS = "CombineTopkSwaIndicesKernel"
METHOD = "kernel"
ALIGNMENT = "_SPARSE_PREFILL_TOPK_ALIGNMENT"
VERSION = "0.33.0"
FILE = "upstream_combine_topk_swa.py"
HEADER = ('"""Extracted at run time from vLLM {version} ({module}: {cls}.{method});\n'
          'not in the repository."""\n\nimport triton\nimport triton.language as tl\n\n'
          "LAUNCH = {facts}\n\n\n")


def extract_source(module_text: str) -> tuple[str, dict[str, int]]:
    """The kernel's source (its ``triton.jit`` decorator included, ``staticmethod``
    dropped, dedented to module level) and the launch facts, found with ``ast``."""
    tree = ast.parse(module_text)
    lines = module_text.splitlines(keepends=True)
    facts: dict[str, int] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == ALIGNMENT
                and isinstance(node.value, ast.Constant)):
            facts["alignment"] = int(node.value.value)
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name == CLASS):
            continue
        for item in node.body:
            if (isinstance(item, ast.Assign) and len(item.targets) == 1
                    and isinstance(item.targets[0], ast.Name)
                    and item.targets[0].id == "NUM_WORKERS"
                    and isinstance(item.value, ast.Constant)):
                facts["num_workers"] = int(item.value.value)
            if isinstance(item, ast.FunctionDef) and item.name == METHOD:
                jit = [d for d in item.decorator_list
                       if not (isinstance(d, ast.Name) and d.id == "staticmethod")]
                if len(jit) != 1:
                    break
                text = "".join(lines[jit[0].lineno - 1: item.end_lineno])
                if set(facts) != {"alignment", "num_workers"}:
                    break
                return textwrap.dedent(text), facts
    raise SystemExit(f"{MODULE} has no {CLASS}.{METHOD} with NUM_WORKERS and {ALIGNMENT}: "
                     f"not vLLM {VERSION}?")


def _from_zip(path: Path) -> str:
    with zipfile.ZipFile(path) as z:
        return z.read(MODULE).decode("utf-8")


def _from_installed() -> str | None:
    found = vllm_files.installed_vllm_file(MODULE)
    return None if found is None else found[0]


def extract(sources: Path | None = None, wheel: Path | None = None, out: Path = OUT) -> Path:
    """Write the upstream kernel module into ``out``; return its path."""
    if sources is not None or wheel is not None:
        text = _from_zip(sources if sources is not None else wheel)  # type: ignore[arg-type]
    elif SOURCES.is_file():
        text = _from_zip(SOURCES)
    else:
        text = _from_installed()
        if text is None:
            with tempfile.TemporaryDirectory() as tmp:
                subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                                f"vllm=={VERSION}", "-d", tmp], check=True)
                text = _from_zip(next(Path(tmp).glob("vllm-*.whl")))
    source, facts = extract_source(text)
    out.mkdir(parents=True, exist_ok=True)
    path = out / FILE
    path.write_text(HEADER.format(version=VERSION, module=MODULE, cls=CLASS, method=METHOD,
                                  facts=json.dumps(facts, sort_keys=True)) + source,
                    encoding="utf-8")
    return path


@dataclass(frozen=True)
class Upstream:
    """The extracted kernel and the launch facts read with it."""

    kernel: Any
    num_workers: int
    alignment: int


def load_kernel(out: Path = OUT) -> Upstream:
    """The extracted upstream kernel, extracting it first when ``out`` lacks it."""
    path = out / FILE
    if not path.is_file():
        try:
            extract(None, None, out)
        except (OSError, KeyError, subprocess.CalledProcessError) as exc:
            raise FileNotFoundError(
                f"{path} is missing and vLLM {VERSION}'s sources could not be read ({exc}): "
                "run `python -m dsv4_evals.bench.combine_topk_swa.upstream` on a "
                "machine with .vllm-sources/ or the wheel, and carry .upstream/ to the GPU "
                "machine") from None
    spec = importlib.util.spec_from_file_location("dsv4_upstream_combine_topk_swa", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Upstream(getattr(module, METHOD), module.LAUNCH["num_workers"],
                    module.LAUNCH["alignment"])


def _next_pow2(n: int) -> int:
    return 1 if n < 1 else 1 << (n - 1).bit_length()


def combine_topk_swa_indices(
    upstream: Upstream, topk_indices: Any, query_start_loc: Any, seq_lens: Any,
    gather_lens: Any, window_size: int, compress_ratio: int, topk: int, M: int, N: int,
    out: tuple[Any, Any] | None = None, left_visible: Any = None, right_visible: Any = None,
    max_image_tokens: int = 0,
) -> tuple[Any, Any]:
    """What vLLM 0.33.0's ``combine_topk_swa_indices`` does, with the extracted kernel:
    allocate (``torch.full(-1)``) or ``fill_(-1)`` the output, then launch."""
    import torch

    rows = topk_indices.shape[0]
    a = upstream.alignment
    width = (topk + window_size + max_image_tokens + a - 1) // a * a
    if out is None:
        indices = torch.full((rows, width), -1, dtype=torch.int32, device=topk_indices.device)
        lens = torch.empty(rows, dtype=torch.int32, device=topk_indices.device)
    else:
        indices, lens = out
        indices.fill_(-1)
    has_image = left_visible is not None
    upstream.kernel[(seq_lens.shape[0], upstream.num_workers)](
        indices, indices.stride(0), lens, topk_indices, topk_indices.stride(0), query_start_loc,
        seq_lens, gather_lens, left_visible if has_image else topk_indices,
        right_visible if has_image else topk_indices, M, N, TOP_K=topk,
        COMPRESS_RATIO=compress_ratio, WINDOW_SIZE=window_size,
        IMAGE_WIDTH=max_image_tokens if has_image else 0,
        PADDED_TOP_K=_next_pow2(topk_indices.shape[-1]))
    return indices, lens


def runner(upstream: Upstream) -> Any:
    """``combine_topk_swa_indices`` bound to ``upstream``: same arguments as dsv4's."""
    def run(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        return combine_topk_swa_indices(upstream, *args, **kwargs)
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=Path, help="the vLLM sources bundle (zip) to read")
    parser.add_argument("--wheel", type=Path, help="a vLLM 0.33.0 wheel to read")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    print(extract(args.sources, args.wheel, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
