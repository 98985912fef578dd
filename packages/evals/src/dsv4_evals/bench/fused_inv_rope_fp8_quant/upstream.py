"""vLLM 0.33.0's own FusedInvRopeFP8Quant Triton kernel, extracted at run time.

The bench gates, the tuner and the report compare dsv4's kernel with upstream's,
launched as vLLM launches it. vLLM is not installed on the GPU machine, and its kernel
class needs vLLM's JIT-kernel base classes and ``torch.ops.vllm``, so this module copies
only the ``@triton.jit`` function (the static method ``FusedInvRopeFP8QuantKernel.
kernel``, found with ``ast``, ``@staticmethod`` dropped) out of
``vllm/models/deepseek_v4/common/ops/fused_inv_rope_fp8_quant.py``, and reads the launch
facts :class:`Upstream` re-implements (``eps``, ``num_warps``, ``num_stages`` of
``__call__``; the grid of ``_fused_inv_rope_fp8_quant_kernel_impl``; the
``get_tma_aligned_size(num_tokens, 4)`` of the wrapper), refusing a source whose facts
differ. The module comes from the first of:

- ``--zip`` (a zip of vLLM's Python sources) or ``--wheel`` (a vLLM 0.33.0 wheel whose
  sha256 ``uv.lock`` lists);
- the vLLM sources bundle (``$DSV4_VLLM_SOURCES``, else ``.vllm-sources/`` at the
  repository root): its zip's sha256 must equal the bundle manifest's, and the wheel
  the bundle was made from must be one ``uv.lock`` pins;
- an installed vLLM 0.33.0 (found by import; its version checked);

into ``.upstream/fused_inv_rope_fp8_quant/`` at the repository root
(:func:`dsv4_evals.bench.paths.upstream`), a folder git ignores, with a ``SOURCE.json``
naming the origin, the sha256 of the vLLM module and of the extracted text, and the
launch facts. Nothing from vLLM is committed. :func:`load_kernel` re-extracts when the
folder is missing or no longer matches its record; :class:`Upstream` runs the kernel
the way vLLM's function, op implementation and kernel object do, with vLLM's helpers
replaced by the same arithmetic (``get_tma_aligned_size(x, 4)`` is ``align(x, 4)``;
``is_arch_support_pdl()`` is compute capability >= 9, never on the CPU).

The readers below (:func:`read_vllm_module`) take the member to read as an argument:
they are the generic part of every kernel's extraction, kept here because the shared
bench modules have no such helper yet. The lock check is
:func:`dsv4_evals.bench.compressed_slot_mapping.upstream.locked_wheel_hashes`.

    python -m dsv4_evals.bench.fused_inv_rope_fp8_quant.upstream [--zip Z | --wheel W]
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

from dsv4_evals.bench import paths, vllm_files
from dsv4_evals.bench.compressed_slot_mapping.upstream import locked_wheel_hashes

NAME = "fused_inv_rope_fp8_quant"
OUT = paths.upstream(NAME)
MODULE = "vllm/models/deepseek_v4/common/ops/fused_inv_rope_fp8_quant.py"
CLASS = "FusedInvRopeFP8QuantKernel"
METHOD = "kernel"
IMPL = "_fused_inv_rope_fp8_quant_kernel_impl"
WRAPPER = "fused_inv_rope_fp8_quant"
VERSION = "0.33.0"
FILE = f"upstream_{NAME}.py"
RECORD = "SOURCE.json"
EXPECTED: dict[str, Any] = {
    "eps": 1e-10,
    "num_warps": 1,
    "num_stages": 1,
    "grid": "(tma_aligned_T, n_groups * heads_per_group)",
    "tma_aligned_T": "get_tma_aligned_size(num_tokens, 4) if quantize else num_tokens",
}
"""The launch facts :class:`Upstream` implements; a source with others is refused."""
HEADER = ('"""Extracted at run time from vLLM {version} ({origin}: {cls}.{method});\n'
          'not in the repository."""\n\nimport triton\nimport triton.language as tl\n\n'
          "LAUNCH = {facts!r}\n\n\n")


class UpstreamError(RuntimeError):
    """vLLM's kernel could not be found, or its source is not the one expected."""


# --------------------------------------------------------------------------- reading vLLM
def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_file_digest = vllm_files.file_sha256


def sources_folder() -> Path:
    """The vLLM sources bundle's folder: ``$DSV4_VLLM_SOURCES``, else ``.vllm-sources/``."""
    return Path(os.environ.get("DSV4_VLLM_SOURCES") or paths.repo_root() / ".vllm-sources")


def _member(archive: Path, member: str) -> str:
    with zipfile.ZipFile(archive) as z:
        return z.read(member).decode("utf-8")


def _bundle(folder: Path, member: str) -> tuple[str, dict[str, str]] | None:
    """``member`` from the bundle in ``folder``, after its manifest's checks; None when
    there is no bundle."""
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        return None
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    if manifest.get("vllm") != VERSION:
        raise UpstreamError(f"{manifest_path}: a bundle of vllm {manifest.get('vllm')}, "
                            f"not {VERSION}")
    if manifest.get("wheel_sha256") not in locked_wheel_hashes(paths.repo_root() / "uv.lock"):
        raise UpstreamError(f"{manifest_path}: made from a wheel whose sha256 uv.lock does "
                            "not list; make the bundle again")
    archive = folder / manifest["sources"]["file"]
    found = _file_digest(archive)
    if found != manifest["sources"]["sha256"]:
        raise UpstreamError(f"{archive}: sha256 {found} differs from the manifest's "
                            f"{manifest['sources']['sha256']}; the bundle is damaged")
    return _member(archive, member), {"origin": f"sources bundle {archive.name}",
                                      "origin_sha256": found}


def _installed(member: str) -> tuple[str, dict[str, str]] | None:
    return vllm_files.installed_vllm_file(member, VERSION, UpstreamError)


def read_vllm_module(member: str, *, zip_path: Path | None = None,
                     wheel: Path | None = None) -> tuple[str, dict[str, str]]:
    """The text of vLLM's ``member`` (a path inside the wheel) and where it came from.

    ``zip_path`` (any zip of vLLM's sources) or ``wheel`` (hash-checked against
    ``uv.lock``) when given, else the sources bundle, else an installed vLLM 0.33.0.
    Raises :class:`UpstreamError` saying what to do when none is at hand.
    """
    if zip_path is not None or wheel is not None:
        archive = zip_path if zip_path is not None else wheel
        assert archive is not None
        digest = _file_digest(archive)
        if wheel is not None and digest not in locked_wheel_hashes(paths.repo_root()
                                                                   / "uv.lock"):
            raise UpstreamError(f"{wheel}: sha256 {digest} is not a vllm {VERSION} wheel "
                                "hash that uv.lock lists")
        kind = "wheel" if wheel is not None else "zip"
        return _member(archive, member), {"origin": f"{kind} {archive.name}",
                                          "origin_sha256": digest}
    found = _bundle(sources_folder(), member) or _installed(member)
    if found is None:
        raise UpstreamError(
            f"no vLLM {VERSION} sources: make the bundle ({sources_folder()}, `nox -s "
            "wheelhouse -- --vllm-sources ...`), install vllm, or pass --zip/--wheel")
    return found


# --------------------------------------------------------------------------- extraction
def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise UpstreamError(f"{MODULE} has no function {name}: not vLLM {VERSION}?")


def _assigned(function: ast.FunctionDef, name: str) -> str | None:
    """The source of the last value assigned to ``name`` inside ``function``."""
    found = None
    for stmt in ast.walk(function):
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == name):
            found = ast.unparse(stmt.value)
    return found


def extract_source(text: str) -> tuple[str, dict[str, Any]]:
    """The kernel's source (its ``triton.jit`` decorator kept, dedented to module level)
    and the launch facts, found with ``ast``; :class:`UpstreamError` when they are not
    :data:`EXPECTED`."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    source = None
    facts: dict[str, Any] = {}
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name == CLASS):
            continue
        for item in node.body:
            if not isinstance(item, ast.FunctionDef):
                continue
            if item.name == METHOD:
                jit = [d for d in item.decorator_list
                       if "triton.jit" in (ast.get_source_segment(text, d) or "")]
                if jit:
                    source = textwrap.dedent("".join(lines[jit[0].lineno - 1: item.end_lineno]))
            if item.name == "__call__":
                for call in ast.walk(item):
                    if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "dict":
                        facts.update({kw.arg: kw.value.value for kw in call.keywords
                                      if kw.arg in ("eps", "num_warps", "num_stages")
                                      and isinstance(kw.value, ast.Constant)})
    if source is None:
        raise UpstreamError(f"{MODULE} has no {CLASS}.{METHOD} with a triton.jit decorator")
    facts["grid"] = _assigned(_function(tree, IMPL), "grid")
    facts["tma_aligned_T"] = _assigned(_function(tree, WRAPPER), "tma_aligned_T")
    if facts != EXPECTED:
        raise UpstreamError(f"{MODULE}: launch facts {facts} differ from the ones this "
                            f"runner implements {EXPECTED}")
    return source, facts


def extract(zip_path: Path | None = None, wheel: Path | None = None, out: Path = OUT) -> Path:
    """Write the upstream kernel module and its ``SOURCE.json`` into ``out``."""
    text, record = read_vllm_module(MODULE, zip_path=zip_path, wheel=wheel)
    source, facts = extract_source(text)
    body = HEADER.format(version=VERSION, origin=record["origin"], cls=CLASS, method=METHOD,
                         facts=facts) + source
    out.mkdir(parents=True, exist_ok=True)
    path = out / FILE
    path.write_text(body, encoding="utf-8")
    record.update(vllm=VERSION, module=MODULE, module_sha256=_digest(text.encode("utf-8")),
                  sha256=_digest(body.encode("utf-8")))
    (out / RECORD).write_text(json.dumps({**record, "launch": facts}, indent=2,
                                         sort_keys=True) + "\n", encoding="utf-8")
    return path


def current(out: Path = OUT) -> dict[str, Any] | None:
    """``out``'s record when its extracted text still matches it (and the facts are the
    expected ones), else None."""
    path, record = out / FILE, out / RECORD
    if not (path.is_file() and record.is_file()):
        return None
    found = json.loads(record.read_text(encoding="utf-8"))
    if found.get("sha256") != _digest(path.read_bytes()) or found.get("launch") != EXPECTED:
        return None
    return found  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- running it
def _align4(x: int) -> int:
    return -(-x // 4) * 4


class Upstream:
    """vLLM's kernel, and the two ways vLLM calls it (function and kernel object)."""

    def __init__(self, kernel: Any, launch: dict[str, Any], record: dict[str, Any]) -> None:
        self.kernel = kernel
        self.launch = launch
        self.record = record

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
            launch_pdl = (o.device.type == "cuda"
                          and torch.cuda.get_device_capability(o.device)[0] >= 9)
        out_buf, scale_buf = self.op_impl(
            o, positions, cos_sin_cache, heads_per_group, quant_group_size, chunks_per_head,
            nope_dim, rope_dim // 2, tma_aligned_scales, fp8_max, tma_aligned_T, num_tokens,
            n_groups, d, scale_inner, quantize, launch_pdl)
        return out_buf.transpose(0, 1), scale_buf.transpose(0, 1) if quantize else scale_buf


def load_kernel(out: Path = OUT) -> Upstream:
    """The extracted upstream kernel, extracting it first when ``out`` holds no current
    copy. Raises :class:`UpstreamError` (saying what to do) when it cannot."""
    record = current(out)
    if record is None:
        extract(out=out)
        record = current(out)
        assert record is not None
    spec = importlib.util.spec_from_file_location(f"dsv4_upstream_{NAME}", out / FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Upstream(getattr(module, METHOD), dict(module.LAUNCH), record)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--zip", type=Path, help="a zip holding vLLM's sources (vllm/...)")
    group.add_argument("--wheel", type=Path, help=f"a vLLM {VERSION} wheel (hash-checked)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    try:
        print(extract(args.zip, args.wheel, args.out))
    except (UpstreamError, OSError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
