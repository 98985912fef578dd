"""vLLM's CUDA platform for the code under test, when vLLM runs from its Python sources.

From its ``.py`` files alone (``DSV4_VLLM_SOURCES``) vLLM cannot have its CUDA platform:
without ``vllm/third_party/`` it has no NVML binding and resolves
``UnspecifiedPlatform``; its CUDA platform module imports the compiled
``vllm._C_stable_libtorch``; and a process-wide CUDA platform cannot even import the
DeepSeek-V4 package, since ``w8a8_utils`` calls the compiled
``cutlass_scaled_mm_supports_block_fp8`` at import when ``is_cuda()``. So vLLM keeps
``UnspecifiedPlatform`` in this mode, and the modules under test (:data:`UNDER_TEST`)
see :class:`SourcesCudaPlatform` instead, through their own ``current_platform``
global: the branches they take at run time are then the CUDA ones, with the device's
capability. They are:

- ``build_c128a_topk_metadata`` asks ``get_device_capability()`` (SM120 keeps a
  full-width decode view);
- the SWA backend and builder ask ``is_rocm()``, ``is_cpu()``, ``is_xpu()`` and
  ``is_device_capability_family(120)``;
- vLLM's Triton JIT helper asks ``device_type`` and ``is_cuda()`` when it warms up.

The stand-in answers as vLLM's own ``NonNvmlCudaPlatform`` does (its class attributes,
torch's CUDA queries for the device) and records every attribute it is asked for, so
that ``conftest.py`` fails a test whose code asked it something it would answer with a
generic default. Ops that vLLM registers with ``direct_register_custom_op`` still bind
at import under ``UnspecifiedPlatform``; ``test_sources_mode.py`` shows that the code
under test calls none.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

VARIABLE = "DSV4_VLLM_SOURCES"

# Answered by ``Platform`` itself from ``_enum`` and ``get_device_capability``, the same
# way for the stand-in as for vLLM's CUDA platform.
DERIVED = frozenset({
    "is_cuda", "is_rocm", "is_tpu", "is_xpu", "is_cpu", "is_cuda_alike", "is_out_of_tree",
    "is_unspecified", "is_zen_cpu", "has_device_capability", "is_device_capability",
    "is_device_capability_family", "uses_host_device_handling",
})


def sources_mode() -> bool:
    """Whether this run imports vLLM from its Python sources with a CUDA device in mind
    (an explicit ``VLLM_TARGET_DEVICE=cpu`` is vLLM's own CPU choice, left alone)."""
    return bool(os.environ.get(VARIABLE)) and os.environ.get(
        "VLLM_TARGET_DEVICE", "cuda") in ("", "cuda")


def make_class() -> type:
    """The stand-in class, built on vLLM's own ``Platform`` (so vLLM is imported here)."""
    import torch
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

    class SourcesCudaPlatform(Platform):
        """CUDA as vLLM's ``NonNvmlCudaPlatform`` answers it, without compiled code."""

        _enum = PlatformEnum.CUDA
        device_name = "cuda"
        device_type = "cuda"
        dispatch_key = "CUDA"
        ray_device_key = "GPU"
        dist_backend = "nccl"
        device_control_env_var = "CUDA_VISIBLE_DEVICES"
        asked: ClassVar[set[str]] = set()  # every attribute read through the instance

        def __getattribute__(self, name: str) -> Any:
            if not name.startswith("__"):
                type(self).asked.add(name)
            return super().__getattribute__(name)

        @property
        def supported_dtypes(self) -> list[torch.dtype]:
            if self.has_device_capability(80):
                return [torch.bfloat16, torch.float16, torch.float32]
            if self.has_device_capability(60):
                return [torch.float16, torch.float32]
            return [torch.float32]

        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            major, minor = torch.cuda.get_device_capability(device_id)
            return DeviceCapability(major=major, minor=minor)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return torch.cuda.get_device_name(device_id)

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return torch.cuda.get_device_properties(device_id).total_memory

        @classmethod
        def get_cuda_runtime_major(cls) -> int:
            major = (torch.version.cuda or "0").split(".", 1)[0]
            return int(major) if major.isdigit() else 0

        @classmethod
        def device_count(cls) -> int:
            return torch.cuda.device_count()

        @classmethod
        def set_device(cls, device: torch.device) -> None:
            torch.cuda.set_device(device)
            _ = torch.zeros(1, device=device)

        @classmethod
        def manual_seed_all(cls, seed: int) -> None:
            torch.cuda.manual_seed_all(seed)

        @classmethod
        def is_pin_memory_available(cls) -> bool:
            return True

        @classmethod
        def supports_fp8(cls) -> bool:
            return cls.has_device_capability(89)

    return SourcesCudaPlatform


def answered(cls: type) -> frozenset[str]:
    """Everything the stand-in answers as vLLM's CUDA platform would: its own members
    and what ``Platform`` derives from them."""
    return frozenset(n for n in vars(cls) if not n.startswith("__")) | DERIVED


UNDER_TEST = (
    "vllm.models.deepseek_v4.sparse_mla",
    "vllm.v1.attention.backends.mla.sparse_swa",
    "vllm.model_executor.warmup.jit_warmup_triton_helper",
)


def patch_modules(names: tuple[str, ...] = UNDER_TEST) -> tuple[Any, dict[str, Any]]:
    """Give each module under test the stand-in as its ``current_platform``; return the
    stand-in and what each module had (vLLM's own, ``UnspecifiedPlatform`` here)."""
    import importlib

    stand_in = make_class()()
    before = {}
    for name in names:
        module = importlib.import_module(name)
        before[name] = module.current_platform
        module.current_platform = stand_in
    return stand_in, before


def restore(before: dict[str, Any]) -> None:
    """Give each patched module its own platform back."""
    import importlib

    for name, platform in before.items():
        importlib.import_module(name).current_platform = platform
