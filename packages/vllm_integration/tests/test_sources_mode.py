"""On a CUDA GPU: vLLM is the locked 0.33.0 and the code under test sees CUDA.

With vLLM from its Python sources (``DSV4_VLLM_SOURCES``, ``nox -s wheelhouse --
--vllm-sources``), these check the mode itself: vLLM comes from the bundle, without
``vllm/third_party/`` and without one compiled extension; vLLM's own platform is
``UnspecifiedPlatform`` while the modules under test see the CUDA stand-in with this
device's capability; and the DeepSeek-V4 metadata path calls no op that vLLM registers
through the dispatcher (those bind to the wrong key in this mode). With vLLM installed,
the same checks hold for vLLM's own CUDA platform.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from pathlib import Path

import pytest
import torch
from c128a_batches import vllm_width
from dsv4_kernels.swa.testing import make_swa_step
from torch.utils._python_dispatch import TorchDispatchMode

pytestmark = pytest.mark.gpu

SOURCES = os.environ.get("DSV4_VLLM_SOURCES", "")
SWA_MODULE = "vllm.v1.attention.backends.mla.sparse_swa"


def test_vllm_is_the_locked_release_from_where_the_run_says() -> None:
    import vllm

    assert importlib.metadata.version("vllm") == "0.33.0"
    package = Path(vllm.__file__).parent
    if SOURCES:
        assert package.is_relative_to(Path(SOURCES))
        assert not (package / "third_party").exists()
        compiled = [p.name for p in package.rglob("*") if p.suffix in (".so", ".pyd")]
        assert compiled == []
    else:
        assert any(package.glob("_C*.so"))  # vLLM as installed, with its extensions


def test_the_code_under_test_sees_cuda_with_this_devices_capability(sparse_mla) -> None:
    import vllm.platforms

    swa = importlib.import_module(SWA_MODULE)
    major, minor = torch.cuda.get_device_capability()
    for platform in (sparse_mla.current_platform, swa.current_platform):
        assert platform.is_cuda() and not platform.is_rocm() and not platform.is_cpu()
        capability = platform.get_device_capability()
        assert (capability.major, capability.minor) == (major, minor)
        assert platform.is_device_capability_family(major * 10)
        assert platform.device_type == "cuda" and platform.dispatch_key == "CUDA"
    assert swa.DeepseekSparseSWABackend.get_builder_cls() is swa.DeepseekSparseSWAMetadataBuilder
    process_wide = type(vllm.platforms.current_platform).__name__
    if SOURCES:
        assert process_wide == "UnspecifiedPlatform"
        assert type(sparse_mla.current_platform).__name__ == "SourcesCudaPlatform"
    else:
        assert sparse_mla.current_platform is vllm.platforms.current_platform


class _Ops(TorchDispatchMode):
    """Every operator that goes through torch's dispatcher, by namespace."""

    def __init__(self) -> None:
        super().__init__()
        self.namespaces: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.namespaces.add(func.namespace)
        return func(*args, **(kwargs or {}))


def test_the_metadata_path_calls_no_op_vllm_registers(pristine) -> None:
    """vLLM's own C128A build through its builder and its own SWA kernel, as shipped:
    only ATen operators (Triton launches do not go through the dispatcher), so the
    dispatch key that vLLM's custom ops got at import cannot matter here."""
    from vllm_steps import builder as make_builder
    from vllm_steps import step

    swa = importlib.import_module(SWA_MODULE)
    mml = 100_000
    gen = torch.Generator().manual_seed(3)
    with _Ops() as ops:
        builder = make_builder(pristine, mml, "cuda")
        cm, req_ids = step(gen, mml, 20_000, 3, [4], "cuda")
        out = builder._build_c128a_metadata(cm, req_ids)
        for call in make_swa_step(7, decode_contexts=[3, 900], prefill_queries=[(10, 30)],
                                  window_size=128, block_size=64, max_image_tokens=0,
                                  pad_tokens=2, device="cuda").calls():
            swa._COMPUTE_SWA_INDICES_AND_LENS_KERNEL(*call.args(), **call.kwargs())
        torch.cuda.synchronize()
    assert out["c128a_global_decode_topk_indices"].shape == (3, 1, vllm_width(20_000, 896))
    assert "aten" in ops.namespaces
    assert ops.namespaces <= {"aten", "prim", "prims"}, ops.namespaces
    if SOURCES:  # the C128A build asked the stand-in for this device's capability
        assert "get_device_capability" in type(pristine.current_platform).asked
