"""dsv4's SWA reference and kernel against vLLM 0.33.0's own Triton kernel, bit for bit.

vLLM's placeholder Triton on a CPU cannot run its kernel, so the test reads the kernel's
source out of the installed vLLM package at run time (nothing of it is stored in this
repository), builds it with the real Triton, and runs it in Triton's interpreter on the
same seeded steps as the reference and dsv4's kernel.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from dsv4_kernels import swa
from dsv4_kernels.swa import reference as swa_reference
from dsv4_kernels.swa.testing import assert_same_outputs, make_swa_step

START = '@triton.jit(\n    do_not_specialize=[\n        "swa_indices_stride",'
END = "class ComputeSWAIndicesAndLensKernel"


@pytest.fixture(scope="module")
def upstream_kernel(tmp_path_factory: pytest.TempPathFactory) -> Any:
    found = importlib.util.find_spec("vllm.v1.attention.backends.mla.sparse_swa")
    assert found is not None and found.origin is not None
    source = Path(found.origin).read_text()
    start, end = source.index(START), source.index(END)
    path = tmp_path_factory.mktemp("upstream") / "upstream_swa.py"
    path.write_text("import triton\nimport triton.language as tl\n\n" + source[start:end])
    spec = importlib.util.spec_from_file_location("upstream_swa", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._compute_swa_indices_and_lens_kernel


def _upstream(kernel: Any) -> Any:
    """vLLM 0.33.0's launch of its kernel (grid, strides and constexprs as its wrapper)."""
    def launch(swa_indices, swa_lens, window_size, index_width, left, right, query_start_loc,
               seq_lens, token_to_req, is_valid, block_table, block_size, replay_start, *,
               num_tokens, token_offset, has_image=False) -> None:
        kernel[(num_tokens,)](
            swa_indices, swa_indices.stride(0), swa_lens, window_size, index_width, left,
            right, query_start_loc, seq_lens, token_to_req, is_valid, block_table,
            block_table.stride(0), block_size, replay_start, token_offset,
            HAS_IMAGE=has_image, TRITON_BLOCK_SIZE=1024)
    return launch


@pytest.mark.parametrize("seed", range(10))
def test_swa_reference_and_kernel_equal_vllms_kernel(upstream_kernel: Any, seed: int) -> None:
    shape = [(128, 64, 0), (16, 8, 12), (4, 2, 3), (64, 16, 0), (8, 256, 40)][seed % 5]
    window, block, image = shape
    step = make_swa_step(
        seed, decode_contexts=[1, 2 + seed * 13, 700, 90][: 1 + seed % 4],
        prefill_queries=[(seed * 7, 30), (0, 17), (300, 9)][: seed % 3 + (seed % 2)],
        window_size=window, block_size=block, max_image_tokens=image,
        image_spans=bool(image), replay=seed % 2 == 0, pad_tokens=seed % 3,
        invalid_fraction=0.1, row_pad=seed % 4,
    )
    upstream = _upstream(upstream_kernel)
    for call in step.calls():
        want = call.run(upstream)
        assert_same_outputs(call.run(swa_reference.compute_swa_indices_and_lens), want)
        assert_same_outputs(call.run(swa.compute_swa_indices_and_lens, tokens_per_program=8,
                                     cols_per_program=32, num_warps=2), want)
