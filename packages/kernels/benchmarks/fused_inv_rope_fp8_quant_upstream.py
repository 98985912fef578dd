"""vLLM 0.33.0's own FusedInvRopeFP8Quant Triton kernel, extracted at run time.

The fused_inv_rope_fp8_quant GPU tests and tuner compare dsv4's kernel with upstream's,
launched as vLLM launches it. vLLM is not installed on the GPU machine, and its kernel
class needs vLLM's JIT-kernel base classes and ``torch.ops.vllm``, so this script copies
only the ``@triton.jit`` function (the static method ``FusedInvRopeFP8QuantKernel.
kernel``, found with ``ast``, ``@staticmethod`` dropped) out of
``vllm/models/deepseek_v4/common/ops/fused_inv_rope_fp8_quant.py``, and reads the launch
facts the runner below re-implements (``eps``, ``num_warps``, ``num_stages`` of
``__call__``; the grid of ``_fused_inv_rope_fp8_quant_kernel_impl``; the
``get_tma_aligned_size(num_tokens, 4)`` of the wrapper), refusing a source whose facts
differ. Sources, the first found of:

- ``--sources`` (a zip of vLLM's Python sources) or ``--wheel`` (a vLLM 0.33.0 wheel);
- the vLLM sources bundle ``.vllm-sources/vllm-0.33.0-sources.zip`` at the repository
  root (``$DSV4_VLLM_SOURCES`` names another folder), its sha256 checked against the
  bundle's ``manifest.json``;
- an installed vLLM 0.33.0 (found by import, its version checked);

into ``.upstream/fused_inv_rope_fp8_quant/`` at the repository root, a folder git
ignores. Nothing from vLLM is committed. :func:`load` imports it; :class:`Upstream`
runs it the way vLLM's function, op implementation and kernel object do, with vLLM's
helpers replaced by the same arithmetic (``get_tma_aligned_size(x, 4)`` is ``align(x,
4)``; ``is_arch_support_pdl()`` is compute capability >= 9).

    python packages/kernels/benchmarks/fused_inv_rope_fp8_quant_upstream.py \
        [--sources ZIP | --wheel WHL]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
OUT = REPO / ".upstream" / "fused_inv_rope_fp8_quant"
MODULE = "vllm/models/deepseek_v4/common/ops/fused_inv_rope_fp8_quant.py"
CLASS = "FusedInvRopeFP8QuantKernel"
METHOD = "kernel"
IMPL = "_fused_inv_rope_fp8_quant_kernel_impl"
WRAPPER = "fused_inv_rope_fp8_quant"
VERSION = "0.33.0"
FILE = "upstream_fused_inv_rope_fp8_quant.py"
RECORD = "SOURCE.json"
EXPECTED = {
    "eps": 1e-10,
    "num_warps": 1,
    "num_stages": 1,
    "grid": "(tma_aligned_T, n_groups * heads_per_group)",
    "tma_aligned_T": "get_tma_aligned_size(num_tokens, 4) if quantize else num_tokens",
}
"""The launch facts :class:`Upstream` implements; a source with others is refused."""
HEADER = ('"""Extracted at run time from vLLM {version} ({module}: {cls}.{method});\n'
          'not in the repository."""\n\nimport triton\nimport triton.language as tl\n\n'
          "LAUNCH = {facts!r}\n\n\n")


class UpstreamError(RuntimeError):
    """vLLM's kernel could not be found, or its source is not the one expected."""


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise UpstreamError(f"{MODULE} has no function {name}: not vLLM {VERSION}?")


def extract_source(text: str) -> tuple[str, dict[str, Any]]:
    """The kernel's source (decorated with ``triton.jit``, dedented to module level) and
    the launch facts, found with ``ast``."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    source = None
    facts: dict[str, Any] = {}
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name == CLASS):
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == METHOD:
                jit = [d for d in item.decorator_list
                       if "triton.jit" in (ast.get_source_segment(text, d) or "")]
                if jit:
                    source = textwrap.dedent("".join(lines[jit[0].lineno - 1: item.end_lineno]))
            if isinstance(item, ast.FunctionDef) and item.name == "__call__":
                for call in ast.walk(item):
                    if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "dict":
                        for kw in call.keywords:
                            if kw.arg in ("eps", "num_warps", "num_stages") and isinstance(
                                    kw.value, ast.Constant):
                                facts[kw.arg] = kw.value.value
    if source is None:
        raise UpstreamError(f"{MODULE} has no {CLASS}.{METHOD} with a triton.jit decorator")
    for stmt in ast.walk(_function(tree, IMPL)):
        if isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], "id", None) == "grid":
            facts["grid"] = ast.unparse(stmt.value)
    for stmt in ast.walk(_function(tree, WRAPPER)):
        if isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], "id", None) == (
                "tma_aligned_T"):
            facts["tma_aligned_T"] = ast.unparse(stmt.value)
    if facts != EXPECTED:
        raise UpstreamError(f"{MODULE}: launch facts {facts} differ from the ones this "
                            f"runner implements {EXPECTED}")
    return source, facts


def _bundle() -> Path:
    folder = Path(os.environ.get("DSV4_VLLM_SOURCES") or REPO / ".vllm-sources")
    return folder / f"vllm-{VERSION}-sources.zip"


def _read_zip(path: Path, member: str) -> str:
    with zipfile.ZipFile(path) as z:
        return z.read(member).decode("utf-8")


def _from_bundle(path: Path) -> tuple[str, str] | None:
    if not path.is_file():
        return None
    manifest = path.parent / "manifest.json"
    if manifest.is_file():
        want = json.loads(manifest.read_text(encoding="utf-8")).get("sources", {}).get("sha256")
        got = _sha256_bytes(path.read_bytes())
        if want and got != want:
            raise UpstreamError(f"{path}: sha256 {got} differs from {manifest}'s {want}")
    return _read_zip(path, MODULE), f"sources {path.name}"


def _from_installed() -> tuple[str, str] | None:
    found = importlib.util.find_spec("vllm")
    if found is None or not found.submodule_search_locations:
        return None
    version = importlib.metadata.version("vllm")
    if version != VERSION:
        raise UpstreamError(f"the installed vllm is {version}, not {VERSION}")
    path = Path(next(iter(found.submodule_search_locations))).parent / MODULE
    if not path.is_file():
        return None
    return path.read_text(encoding="utf-8"), f"installed vllm {version}"


def extract(sources: Path | None = None, wheel: Path | None = None, out: Path = OUT) -> Path:
    """Write the upstream kernel module (and ``SOURCE.json``) into ``out``."""
    if sources is not None:
        found: tuple[str, str] | None = (_read_zip(sources, MODULE), f"sources {sources.name}")
    elif wheel is not None:
        found = (_read_zip(wheel, MODULE), f"wheel {wheel.name}")
    else:
        found = _from_bundle(_bundle()) or _from_installed()
    if found is None:
        raise UpstreamError(f"no vLLM {VERSION} sources: put the bundle at {_bundle()}, "
                            "install vllm, or pass --sources/--wheel")
    text, origin = found
    source, facts = extract_source(text)
    body = HEADER.format(version=VERSION, module=MODULE, cls=CLASS, method=METHOD,
                         facts=facts) + source
    out.mkdir(parents=True, exist_ok=True)
    path = out / FILE
    path.write_text(body, encoding="utf-8")
    record = {"origin": origin, "vllm": VERSION, "module": MODULE,
              "module_sha256": _sha256_bytes(text.encode("utf-8")),
              "sha256": _sha256_bytes(body.encode("utf-8"))}
    (out / RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n",
                              encoding="utf-8")
    return path


def _current(out: Path) -> bool:
    path, record = out / FILE, out / RECORD
    if not (path.is_file() and record.is_file()):
        return False
    found = json.loads(record.read_text(encoding="utf-8"))
    return found.get("sha256") == _sha256_bytes(path.read_bytes())


def _align4(x: int) -> int:
    return -(-x // 4) * 4


class Upstream:
    """vLLM's kernel, and the two ways vLLM calls it (function and kernel object)."""

    def __init__(self, kernel: Any, launch: dict[str, Any]) -> None:
        self.kernel = kernel
        self.launch = launch

    def kernel_call(self, o: Any, positions: Any, cos_sin_cache: Any, out_buf: Any,
                    scale_buf: Any, num_tokens: int, *, heads_per_group: int,
                    quant_group_size: int, chunks_per_head: int, nope_dim: int,
                    half_rope: int, tma_aligned_scales: bool, quantize: bool, fp8_max: float,
                    launch_pdl: bool, grid: tuple[int, int]) -> None:
        """``FusedInvRopeFP8QuantKernel.__call__``: the launch its ``LaunchSpec`` makes."""
        self.kernel[grid](
            o_ptr=o, positions_ptr=positions, cos_sin_cache_ptr=cos_sin_cache,
            out_ptr=out_buf, scale_ptr=scale_buf, num_tokens=num_tokens,
            heads_per_group=heads_per_group, o_stride_token=o.stride(0),
            o_stride_head=o.stride(1), cache_stride_pos=cos_sin_cache.stride(0),
            out_stride_group=out_buf.stride(0), out_stride_token=out_buf.stride(1),
            scale_stride_group=scale_buf.stride(0) if quantize else 0,
            scale_stride_k=scale_buf.stride(2) if quantize else 0,
            fp8_max=fp8_max, eps=self.launch["eps"], QUANT_GROUP_SIZE=quant_group_size,
            CHUNKS_PER_HEAD=chunks_per_head, NOPE_DIM=nope_dim, HALF_ROPE=half_rope,
            QUANTIZE=quantize, TMA_ALIGNED_SCALES=tma_aligned_scales, launch_pdl=launch_pdl,
            num_stages=self.launch["num_stages"], num_warps=self.launch["num_warps"])

    def op_impl(self, o: Any, positions: Any, cos_sin_cache: Any, heads_per_group: int,
                quant_group_size: int, chunks_per_head: int, nope_dim: int, half_rope: int,
                tma_aligned_scales: bool, fp8_max: float, tma_aligned_T: int,
                num_tokens: int, n_groups: int, d: int, scale_inner: int, quantize: bool,
                launch_pdl: bool) -> tuple[Any, Any]:
        """``_fused_inv_rope_fp8_quant_kernel_impl``: allocation, then the kernel object."""
        import torch

        scale_dtype = torch.int32 if tma_aligned_scales else torch.float32
        out_buf = torch.empty((n_groups, num_tokens, d),
                              dtype=torch.float8_e4m3fn if quantize else o.dtype,
                              device=o.device)
        if quantize:
            scale_buf = torch.empty(n_groups * scale_inner * tma_aligned_T, dtype=scale_dtype,
                                    device=o.device).as_strided(
                (n_groups, num_tokens, scale_inner), (scale_inner * tma_aligned_T, 1,
                                                      tma_aligned_T))
        else:
            scale_buf = torch.empty(0, dtype=scale_dtype, device=o.device)
        grid = (tma_aligned_T, n_groups * heads_per_group)
        self.kernel_call(o, positions, cos_sin_cache, out_buf, scale_buf, num_tokens,
                         heads_per_group=heads_per_group, quant_group_size=quant_group_size,
                         chunks_per_head=chunks_per_head, nope_dim=nope_dim,
                         half_rope=half_rope, tma_aligned_scales=tma_aligned_scales,
                         quantize=quantize, fp8_max=fp8_max, launch_pdl=launch_pdl, grid=grid)
        return out_buf, scale_buf

    def fused_inv_rope_fp8_quant(
        self, o: Any, positions: Any, cos_sin_cache: Any, n_groups: int, heads_per_group: int,
        nope_dim: int = 448, rope_dim: int = 64, quant_group_size: int = 128,
        tma_aligned_scales: bool = False, quantize: bool = True, *,
        launch_pdl: bool | None = None,
    ) -> tuple[Any, Any]:
        """vLLM's function (its asserts, derived sizes and returned views), with the op
        called directly instead of through ``torch.ops.vllm``."""
        import torch

        num_tokens, num_heads, head_dim = o.shape
        assert num_heads == n_groups * heads_per_group
        assert head_dim == nope_dim + rope_dim
        assert head_dim % quant_group_size == 0
        assert rope_dim % 2 == 0
        assert cos_sin_cache.shape[-1] == rope_dim
        assert cos_sin_cache.dtype == torch.float32
        d = heads_per_group * head_dim
        num_scale_blocks = d // quant_group_size
        chunks_per_head = head_dim // quant_group_size
        fp8_max = torch.finfo(torch.float8_e4m3fn).max
        tma_aligned_T = _align4(num_tokens) if quantize else num_tokens
        if quantize and tma_aligned_scales:
            assert chunks_per_head % 4 == 0
            scale_inner = (num_scale_blocks + 3) // 4
        elif quantize:
            scale_inner = num_scale_blocks
        else:
            scale_inner = 0
        if launch_pdl is None:
            launch_pdl = torch.cuda.get_device_capability(o.device)[0] >= 9
        out_buf, scale_buf = self.op_impl(
            o, positions, cos_sin_cache, heads_per_group, quant_group_size, chunks_per_head,
            nope_dim, rope_dim // 2, tma_aligned_scales, fp8_max, tma_aligned_T, num_tokens,
            n_groups, d, scale_inner, quantize, launch_pdl)
        return out_buf.transpose(0, 1), scale_buf.transpose(0, 1) if quantize else scale_buf


def load(out: Path = OUT) -> Upstream:
    """The extracted upstream kernel, extracting it first when ``out`` holds no current
    copy. Raises :class:`UpstreamError` (saying what to do) when it cannot."""
    if not _current(out):
        extract(out=out)
    spec = importlib.util.spec_from_file_location("dsv4_upstream_fused_inv_rope_fp8_quant",
                                                  out / FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Upstream(getattr(module, METHOD), dict(module.LAUNCH))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--sources", type=Path, help="a zip holding vLLM's sources (vllm/...)")
    group.add_argument("--wheel", type=Path, help=f"a vLLM {VERSION} wheel")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    try:
        print(extract(args.sources, args.wheel, args.out))
    except (UpstreamError, OSError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
