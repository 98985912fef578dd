"""Reading one of vLLM's source files for a bench's ``upstream.py``, with its provenance.

Each kernel's ``upstream.py`` copies vLLM's own kernel out of vLLM's sources at run time
(never committed). Where those sources come from (a hash-checked bundle, a wheel, or an
installed vLLM) differs per kernel; finding the file in an installed vLLM and hashing a
file are the same for all, and live here.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path

Found = tuple[str, dict[str, str]]
"""A file's text and its record: ``origin`` (where it came from) and ``origin_sha256``."""


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in blocks (a vLLM wheel is hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def installed_vllm_file(member: str, version: str | None = None,
                        error: type[Exception] = RuntimeError) -> Found | None:
    """``member`` (a path inside vLLM's wheel, ``vllm/...``) of the vLLM this interpreter
    imports, or None when there is none or it lacks the file. With ``version``, another
    installed version raises ``error`` naming both: its kernel is not the baseline."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    installed = importlib.metadata.version("vllm")
    if version is not None and installed != version:
        raise error(f"the installed vllm is {installed}, not {version}")
    path = Path(next(iter(spec.submodule_search_locations))).parent / member
    if not path.is_file():
        return None
    return path.read_text(encoding="utf-8"), {"origin": f"installed vllm {installed}",
                                               "origin_sha256": file_sha256(path)}
