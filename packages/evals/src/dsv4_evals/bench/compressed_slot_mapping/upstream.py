"""vLLM 0.33.0's own compressed slot mapping kernel, extracted at run time.

The compressed-slot-mapping tests and tuner compare dsv4's kernel with upstream's,
launched exactly as vLLM launches it: ``get_compressed_slot_mapping`` fills the whole
``out`` buffer with -1, then ``CompressedSlotMappingKernel.__call__`` runs one program
per block-table row (``TRITON_BLOCK_SIZE = 1024``, Triton's default 4 warps). vLLM is
not installed where those run, so this script copies only the ``@triton.jit`` function
``CompressedSlotMappingKernel.kernel`` out of
``vllm/v1/attention/backends/mla/compressor_utils.py`` (found with ``ast``), from the
first of:

- ``--zip`` / ``--wheel`` given on the command line;
- the vLLM sources bundle (``$DSV4_VLLM_SOURCES``, else ``.vllm-sources/`` at the
  repository root): its zip's sha256 must equal the bundle manifest's, and the wheel
  the bundle was made from must be the one ``uv.lock`` pins (its sha256 among the
  lock's hashes for vllm 0.33.0);
- an installed vLLM 0.33.0 (found by import; its version checked);

into ``.upstream/compressed_slot_mapping/`` at the repository root, a folder git
ignores, with a ``SOURCE.json`` naming the origin and the sha256 of the origin file and
of the extracted text. A wheel given with ``--wheel`` must carry a sha256 the lock
lists. :func:`load_kernel` re-extracts when the folder is missing or the text no longer
matches ``SOURCE.json``. Nothing from vLLM is committed.

    python -m dsv4_evals.bench.compressed_slot_mapping.upstream [--zip Z | --wheel W]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

from dsv4_evals.bench import paths, vllm_files

REPO = paths.repo_root()
OUT = paths.upstream("compressed_slot_mapping")
MODULE = "vllm/v1/attention/backends/mla/compressor_utils.py"
CLASS = "CompressedSlotMappingKernel"
FUNCTION = "kernel"
VERSION = "0.33.0"
FILE = "upstream_compressed_slot_mapping.py"
RECORD = "SOURCE.json"
HEADER = ('"""Extracted at run time from vLLM {version} ({origin}); not in the repository."""'
          "\n\nimport triton\nimport triton.language as tl\n\n\n")


class UpstreamError(RuntimeError):
    """vLLM's kernel could not be found or its source failed a hash check."""


_sha256 = vllm_files.file_sha256


def locked_wheel_hashes(lock: Path = REPO / "uv.lock") -> set[str]:
    """The sha256 hashes ``uv.lock`` lists for vllm's 0.33.0 wheels."""
    text = lock.read_text(encoding="utf-8")
    found = set()
    for block in text.split("[[package]]"):
        if re.search(r'^name = "vllm"$', block, re.M) and re.search(
                rf'^version = "{re.escape(VERSION)}"$', block, re.M):
            found.update(re.findall(r'vllm-[^"]*\.whl", hash = "sha256:([0-9a-f]{64})"', block))
    if not found:
        raise UpstreamError(f"{lock} lists no vllm {VERSION} wheel")
    return found


def kernel_source(module_text: str) -> tuple[str, int]:
    """The kernel function's source, decorators but ``@staticmethod`` kept, dedented to
    module level; and the class's ``TRITON_BLOCK_SIZE``."""
    tree = ast.parse(module_text)
    lines = module_text.splitlines(keepends=True)
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name == CLASS):
            continue
        block = None
        for item in node.body:
            if (isinstance(item, ast.Assign) and len(item.targets) == 1
                    and isinstance(item.targets[0], ast.Name)
                    and item.targets[0].id == "TRITON_BLOCK_SIZE"
                    and isinstance(item.value, ast.Constant)):
                block = int(item.value.value)
            if isinstance(item, ast.FunctionDef) and item.name == FUNCTION:
                jit = [d for d in item.decorator_list
                       if "triton.jit" in ast.get_source_segment(module_text, d)]
                if not jit or block is None:
                    break
                text = "".join(lines[jit[0].lineno - 1: item.end_lineno])
                return textwrap.dedent(text), block
    raise UpstreamError(f"{MODULE} has no {CLASS}.{FUNCTION} with TRITON_BLOCK_SIZE and a "
                        f"triton.jit decorator: not vLLM {VERSION}?")


def _bundle_dir() -> Path:
    return Path(os.environ.get("DSV4_VLLM_SOURCES") or REPO / ".vllm-sources")


def _from_bundle(folder: Path) -> tuple[str, dict[str, str]] | None:
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        return None
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    if manifest.get("vllm") != VERSION:
        raise UpstreamError(f"{manifest_path}: a bundle of vllm {manifest.get('vllm')}, "
                            f"not {VERSION}")
    if manifest.get("wheel_sha256") not in locked_wheel_hashes():
        raise UpstreamError(f"{manifest_path}: made from a wheel whose sha256 uv.lock does "
                            "not list; make the bundle again")
    sources = manifest["sources"]
    path = folder / sources["file"]
    digest = _sha256(path)
    if digest != sources["sha256"]:
        raise UpstreamError(f"{path}: sha256 {digest} differs from the manifest's "
                            f"{sources['sha256']}; the bundle is damaged, make it again")
    with zipfile.ZipFile(path) as z:
        text = z.read(MODULE).decode("utf-8")
    return text, {"origin": f"sources bundle {path.name}", "origin_sha256": digest}


def _from_zip(path: Path, *, wheel: bool) -> tuple[str, dict[str, str]]:
    digest = _sha256(path)
    if wheel and digest not in locked_wheel_hashes():
        raise UpstreamError(f"{path}: sha256 {digest} is not a vllm {VERSION} wheel hash "
                            "that uv.lock lists")
    with zipfile.ZipFile(path) as z:
        text = z.read(MODULE).decode("utf-8")
    return text, {"origin": f"{'wheel' if wheel else 'zip'} {path.name}",
                  "origin_sha256": digest}


def _from_installed() -> tuple[str, dict[str, str]] | None:
    return vllm_files.installed_vllm_file(MODULE, VERSION, UpstreamError)


def extract(zip_path: Path | None = None, wheel: Path | None = None, out: Path = OUT) -> Path:
    """Write the upstream kernel module and its ``SOURCE.json`` into ``out``."""
    if zip_path is not None:
        found: tuple[str, dict[str, str]] | None = _from_zip(zip_path, wheel=False)
    elif wheel is not None:
        found = _from_zip(wheel, wheel=True)
    else:
        found = _from_bundle(_bundle_dir()) or _from_installed()
    if found is None:
        raise UpstreamError(
            f"no vLLM {VERSION} sources: make the bundle ({_bundle_dir()}, `nox -s wheelhouse "
            "-- --vllm-sources ...`), install vllm, or pass --zip/--wheel")
    text, record = found
    source, block = kernel_source(text)
    body = HEADER.format(version=VERSION, origin=record["origin"]) + source
    out.mkdir(parents=True, exist_ok=True)
    path = out / FILE
    path.write_text(body, encoding="utf-8")
    record.update(vllm=VERSION, module=MODULE, triton_block_size=str(block),
                  sha256=hashlib.sha256(body.encode("utf-8")).hexdigest())
    (out / RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n",
                              encoding="utf-8")
    return path


def _current(out: Path) -> dict[str, str] | None:
    path, record = out / FILE, out / RECORD
    if not (path.is_file() and record.is_file()):
        return None
    found = json.loads(record.read_text(encoding="utf-8"))
    if found.get("sha256") != hashlib.sha256(path.read_bytes()).hexdigest():
        return None
    return found


class Upstream:
    """vLLM's kernel, and the two ways vLLM calls it."""

    def __init__(self, kernel: Any, block: int, record: dict[str, str]) -> None:
        self.kernel = kernel
        self.block = block
        self.record = record

    def kernel_call(self, compressed_slot_mapping: Any, slot_mapping: Any, query_start_loc: Any,
                    seq_lens: Any, block_table: Any, block_size: int, compress_ratio: int,
                    dcp_world_size: int, cp_interleave: int) -> None:
        """``_COMPRESSED_SLOT_MAPPING_KERNEL(...)``: one program per block-table row."""
        self.kernel[(block_table.shape[0],)](
            compressed_slot_mapping, slot_mapping, query_start_loc, seq_lens, block_table,
            block_table.stride(0), block_size, dcp_world_size, cp_interleave,
            COMPRESS_RATIO=compress_ratio, PAD_ID=-1, TRITON_BLOCK_SIZE=self.block)

    def get_compressed_slot_mapping(
        self, num_tokens: int, slot_mapping: Any, query_start_loc: Any, seq_lens: Any,
        block_table: Any, block_size: int, compress_ratio: int, out: Any = None,
        dcp_world_size: int = 1, cp_interleave: int = 1,
    ) -> Any:
        """vLLM's function: the fill (of the whole ``out``, or a new tensor), the kernel."""
        import torch

        if out is not None:
            out.fill_(-1)
            rows = out[:num_tokens]
        else:
            rows = torch.full((num_tokens,), -1, dtype=torch.int64,
                              device=query_start_loc.device)
        self.kernel_call(rows, slot_mapping, query_start_loc, seq_lens, block_table,
                         block_size, compress_ratio, dcp_world_size, cp_interleave)
        return rows


def load(out: Path = OUT) -> Upstream:
    """The extracted upstream kernel, extracting it first when ``out`` does not hold a
    current copy. Raises :class:`UpstreamError` (saying what to do) when it cannot."""
    record = _current(out)
    if record is None:
        extract(out=out)
        record = _current(out)
        assert record is not None
    spec = importlib.util.spec_from_file_location("dsv4_upstream_compressed_slot_mapping",
                                                  out / FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Upstream(getattr(module, FUNCTION), int(record["triton_block_size"]), record)


def load_kernel(out: Path = OUT) -> Upstream:
    """The bench layer's name for :func:`load`: vLLM's kernel and its two call paths."""
    return load(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--zip", type=Path, help="a zip holding vLLM's sources (vllm/...)")
    group.add_argument("--wheel", type=Path, help=f"a vLLM {VERSION} wheel (hash-checked)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    try:
        print(extract(args.zip, args.wheel, args.out))
    except UpstreamError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
