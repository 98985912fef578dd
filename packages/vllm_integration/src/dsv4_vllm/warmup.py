"""Compile every C128A binary a deployment's launch table can ask for, up front.

A Triton compile in the middle of serving, on one tensor-parallel rank, can stall
the whole engine. The table is static, so the set of tiles it can pick for one
(arch, max_model_len) is known before the first request: compiling them while vLLM
starts, before CUDA-graph capture, leaves nothing to compile later.
"""

from __future__ import annotations

import time

import torch
from dsv4_kernels import c128a as kernels_c128a
from dsv4_policy import c128a as policy_c128a
from dsv4_policy.c128a import Table

from dsv4_vllm._log import logger


def warm_compile_keys(
    arch: str,
    max_model_len: int,
    device: torch.device | str,
    *,
    table: Table | None = None,
) -> int:
    """Compile each tile of ``compile_keys(table, arch, max_model_len)`` on ``device``.

    ``table=None`` means the shipped table. Returns how many binaries were new to
    this process (tiles compiled earlier count 0; so does everything under
    ``TRITON_INTERPRET=1``) and logs the key count, the compile count and the time.
    """
    if not isinstance(max_model_len, int) or max_model_len <= 0:
        raise ValueError(
            f"warm_compile_keys: max_model_len: got {max_model_len!r}; expected a "
            "positive int (vLLM's resolved --max-model-len)"
        )
    keys = sorted(policy_c128a.compile_keys(table, arch, max_model_len))
    started = time.perf_counter()
    compiled = kernels_c128a.warmup(keys, device) if keys else 0
    seconds = time.perf_counter() - started
    logger.info(
        "dsv4 warm-up: %d C128A compile key(s) for %s, max_model_len=%d on %s; "
        "%d compiled in %.2f s",
        len(keys),
        arch,
        max_model_len,
        device,
        compiled,
        seconds,
    )
    return compiled
