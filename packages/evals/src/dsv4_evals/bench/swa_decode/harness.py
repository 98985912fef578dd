"""SWA decode steps, the two sides compared, and their equality.

vLLM's side is the work of ``DeepseekSparseSWAMetadataBuilder.build`` (vLLM 0.33.0) that
dsv4 takes over for a decode-only causal step, statement for statement
(:func:`vllm_decode_path`): the ``is_valid_token[:S]`` slice and ``torch.ge(slot_mapping,
0, out=...)`` into it, ``replay_start`` falling back to the builder's ``no_replay_start``,
the decode width, ``decode_swa_lens[T:] = 0``, vLLM's SWA rows kernel over the ``T``
decode tokens launched as vLLM launches it, and the slices the metadata carries
(``decode_swa_indices[:T]``, ``decode_swa_lens[:T]``). dsv4's side is what the plugin
runs instead (:func:`dsv4_decode_path`): the kernel's checks, one launch with the tile,
and the same views made with ``as_strided``. ``token_to_req_indices``, the tile scheduler
and the metadata object are the same calls on both sides and left out. That vLLM's
build and the plugin's give identical metadata is shown through vLLM's real builder by
dsv4-vllm's tests and the step benchmark (``vllm-step``); here the sides are timed and
their buffers compared.

vLLM's rows kernel (:func:`rows_kernel`) is vLLM's own launch object,
``vllm.v1.attention.backends.mla.sparse_swa._COMPUTE_SWA_INDICES_AND_LENS_KERNEL``
(through vLLM's ``kernel_launcher``), where vLLM 0.33.0 imports with a working Triton
on a GPU; else its ``@triton.jit`` function, extracted at run time by
:mod:`dsv4_evals.bench.swa.upstream` into ``.upstream/swa_decode/`` (or found in the SWA
bench's ``.upstream/swa/``; git ignores both), launched with the grid and arguments
``ComputeSWAIndicesAndLensKernel.__call__`` returns. The extracted launch skips vLLM's
launcher layers, so it costs the host less than vLLM's own: a speed-up measured against
it is a lower bound. Every result records which one ran (``RowsKernel.origin``).

Steps come from :func:`dsv4_kernels.swa_decode.testing.make_step`: real requests of one
token at a context, CUDA-graph padding tokens (slot -1), DeepSeek-V4's 128-token window
and 64-token SWA blocks, builder buffers of ``max_num_batched_tokens`` (8192) rows,
poisoned.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from dsv4_kernels.swa_decode import launch
from dsv4_kernels.swa_decode.testing import BUFFERS, SWADecodeCall, make_step
from dsv4_policy.kernels import swa_decode as policy

from dsv4_evals.bench import paths, vllm_files
from dsv4_evals.bench.indexer_decode import harness as _indexer_decode
from dsv4_evals.bench.swa import upstream as swa_upstream

BASELINE = "vllm"
"""The tile name of vLLM's own decode path."""
BUFFER = 8192
"""The builder's buffer rows: DeepSeek-V4's ``max_num_batched_tokens``."""
WINDOW = 128
INDEX_WIDTH = 128
"""DeepSeek-V4's sliding window, and so the columns of the builder's decode rows."""
BLOCK_SIZE = 64
"""The SWA cache's block size (``DeepseekV4SWACache``)."""
KV_TOKENS = 1 << 27
"""Contexts of a generated step hold at most this many tokens in all, as a KV cache
bounds them (and so its block table stays small)."""
VLLM_MODULE = "vllm.v1.attention.backends.mla.sparse_swa"
VLLM_OBJECT = "_COMPUTE_SWA_INDICES_AND_LENS_KERNEL"
UPSTREAM_FILE = "upstream_swa.py"
CAUSAL = True
"""``common_attn_metadata.causal`` of every step here (DSpark's non-causal draft steps are
vLLM's own build)."""
host_us = _indexer_decode.host_us
"""Median host µs per call, the device synchronised around each round (the indexer decode
bench's clock, shared so both benches time the host alike)."""


@dataclass(frozen=True)
class Shape:
    """One anchor step: ``real`` decode requests at ``context``, padded to ``padded``
    tokens (``real`` 0: a step of padding only), followed by ``prefill`` prefill tokens
    (a mixed step: the decode half is what this path builds, the prefill slots widen
    the validity mask)."""

    real: int
    context: int = 1 << 17
    padded: int | None = None
    prefill: int = 0

    @property
    def name(self) -> str:
        if self.prefill:
            return f"mixed-T{self.real}+{self.prefill}"
        if self.padded is not None:
            return f"padded-{self.real}of{self.padded}"
        return f"decode-T{self.real}"

    @property
    def label(self) -> str:
        return f"{self.name}-ctx{self.context // 1024}K"

    @property
    def num_tokens(self) -> int:
        return self.real if self.padded is None else self.padded


def anchor_shapes() -> list[Shape]:
    """The steps the gates quote: decode T = 1..512 at 128K, T = 64 at 4K and 1M,
    CUDA-graph padded ones, a step of padding only and the decode halves of mixed steps
    (8 at 1M + 4,096 prefill tokens, 64 + 2,048, 256 + 4,096)."""
    return ([Shape(t) for t in (1, 8, 64, 256, 512)] + [Shape(64, 4096), Shape(64, 1 << 20)]
            + [Shape(5, padded=8), Shape(60, padded=64), Shape(500, padded=512),
               Shape(0, padded=8)]
            + [Shape(8, 1 << 20, prefill=4096), Shape(64, prefill=2048),
               Shape(256, prefill=4096)])


def make_call(shape: Shape, device: torch.device, seed: int = 0) -> SWADecodeCall:
    g = torch.Generator().manual_seed(seed + shape.real)
    low = max(shape.context - shape.context // 8, 1)
    contexts = torch.randint(low, shape.context + 1, (shape.real,), generator=g).tolist()
    return make_step(seed, contexts, pad_tokens=shape.num_tokens - shape.real, window=WINDOW,
                     block_size=BLOCK_SIZE, buffer_rows=BUFFER, device=device,
                     prefill_slots=shape.prefill)


PADDING_KINDS = (0, 1, 2)
"""A probe's ``padding``: 0 none, 1 a padded tail (a quarter, at least one token), 2 all."""


def padding_tokens(num_tokens: int, kind: int) -> int:
    """CUDA-graph padding tokens of a step of ``num_tokens`` tokens and padding ``kind``."""
    if kind not in PADDING_KINDS:
        raise ValueError(f"padding: got {kind!r}; expected one of {PADDING_KINDS}")
    return (0, max(1, num_tokens // 4), num_tokens)[kind]


def call_of(point: dict[str, int], device: torch.device, seed: int) -> SWADecodeCall:
    """A seeded step for a probe point: ``num_tokens`` tokens, the last
    :func:`padding_tokens` of them CUDA-graph padding (``padding``, default none), the
    real ones one-token requests at contexts up to 300, 4K, 128K or 1M (the seed picks;
    at most :data:`KV_TOKENS` in all), a replaying step for one seed in four; ``mixed`` 1
    makes it a mixed step's decode half (1 to ``BUFFER - num_tokens`` prefill slots
    after the decode tokens, drawn from the seed)."""
    t = point["num_tokens"]
    pads = padding_tokens(t, point.get("padding", 0))
    real = t - pads
    g = torch.Generator().manual_seed(seed)
    top = (300, 4096, 1 << 17, 1 << 20)[int(torch.randint(0, 4, (1,), generator=g))]
    top = max(min(top, KV_TOKENS // max(real, 1)), 2)
    contexts = torch.randint(1, top + 1, (real,), generator=g).tolist()
    replay = int(torch.randint(0, 4, (1,), generator=g)) == 0
    prefill = 0
    if point.get("mixed", 0) and t < BUFFER:
        prefill = int(torch.randint(1, BUFFER - t + 1, (1,), generator=g))
    return make_step(seed, contexts, pad_tokens=pads, window=WINDOW, block_size=BLOCK_SIZE,
                     buffer_rows=max(BUFFER, t), device=device, replay=replay,
                     prefill_slots=prefill)


def key_of(call: SWADecodeCall, arch: str) -> policy.Key:
    return policy.Key(arch, call.swa_indices.shape[-1], call.num_tokens)


def resolved_tile(call: SWADecodeCall, arch: str,
                  table: policy.Table | None = None) -> str | tuple[int, int, int]:
    """The shipped (or given) table's tile for the step, or :data:`BASELINE` on a miss."""
    found = policy.resolve(key_of(call, arch), table)
    return BASELINE if found.source == "baseline" else found.compile_key()


# --------------------------------------------------------------------------- vLLM's rows kernel
@dataclass(frozen=True)
class RowsKernel:
    """vLLM's SWA rows launch, called with ``ComputeSWAIndicesAndLensKernel.__call__``'s
    arguments; ``origin`` says which one it is."""

    launch: Callable[..., object]
    origin: str


def vllm_launch_object() -> tuple[object | None, str]:
    """vLLM 0.33.0's own launch object and ``""``, or ``None`` and why it is not at hand."""
    if importlib.util.find_spec("vllm") is None:
        return None, "vLLM is not installed"
    version = importlib.metadata.version("vllm")
    if version != swa_upstream.VERSION:
        return None, f"the installed vLLM is {version}, not {swa_upstream.VERSION}"
    try:
        if not importlib.import_module("vllm.triton_utils").HAS_TRITON:
            return None, "vLLM found no Triton driver it can use here"
        module = importlib.import_module(VLLM_MODULE)
    except Exception as exc:  # any failure means: use the extracted copy
        return None, f"importing {VLLM_MODULE} failed ({type(exc).__name__}: {exc})"
    return getattr(module, VLLM_OBJECT), ""


def upstream_folders() -> tuple[Path, Path]:
    """Where an extracted copy is looked for: this bench's folder, then the SWA bench's."""
    return (paths.upstream("swa_decode"), paths.upstream("swa"))


def extracted_kernel(folders: Sequence[Path] | None = None, *, download: bool = True
                     ) -> tuple[object, Path]:
    """vLLM's extracted ``@triton.jit`` rows kernel and its folder: the first of
    ``folders`` that holds it, else extracted into the first from an installed vLLM, else
    (``download``) from ``pip download``; ``FileNotFoundError`` when none works."""
    folders = list(upstream_folders() if folders is None else folders)
    for folder in folders:
        if (folder / UPSTREAM_FILE).is_file():
            return swa_upstream.load_kernel(folder), folder
    if not download and vllm_files.installed_vllm_file(swa_upstream.MODULE) is None:
        raise FileNotFoundError(f"no {UPSTREAM_FILE} in {', '.join(map(str, folders))} and no "
                                f"installed vLLM to extract it from: run `python -m "
                                f"dsv4_evals.bench.swa.upstream --out {folders[0]}`")
    return swa_upstream.load_kernel(folders[0]), folders[0]


def rows_kernel(prefer: str = "auto", folders: Sequence[Path] | None = None, *,
                download: bool = True) -> RowsKernel:
    """vLLM's rows launch: ``"vllm"`` its own object (``RuntimeError`` when it is not at
    hand), ``"extracted"`` the extracted copy (:func:`extracted_kernel`), ``"auto"``
    vLLM's object on a GPU when it imports, else the extracted copy."""
    if prefer not in ("auto", "vllm", "extracted"):
        raise ValueError(f"prefer: got {prefer!r}; expected 'auto', 'vllm' or 'extracted'")
    if prefer == "vllm" or (prefer == "auto" and torch.cuda.is_available()
                            and not launch.interpreting()):
        found, why = vllm_launch_object()
        if found is not None:
            return RowsKernel(found, f"vllm {swa_upstream.VERSION} {VLLM_MODULE}.{VLLM_OBJECT}")
        if prefer == "vllm":
            raise RuntimeError(f"vLLM's own rows kernel is not at hand: {why}")
    kernel, folder = extracted_kernel(folders, download=download)
    return RowsKernel(functools.partial(swa_upstream.launch, kernel),
                      f"extracted {swa_upstream.KERNEL} from vLLM {swa_upstream.VERSION} "
                      f"({folder / UPSTREAM_FILE})")


# --------------------------------------------------------------------------- the two sides
def vllm_decode_path(call: SWADecodeCall, rows: RowsKernel,
                     replay_start: torch.Tensor | None = None) -> tuple[object, ...]:
    """vLLM 0.33.0's work for the step that dsv4 takes over (see the module docstring);
    ``replay_start`` None is a step that replays nothing (the builder's
    ``no_replay_start``, here the step's own)."""
    slot_mapping = call.slot_mapping
    num_decode_tokens = call.num_tokens
    is_valid_token = call.is_valid_token[: slot_mapping.shape[0]]
    torch.ge(slot_mapping, 0, out=is_valid_token)
    if replay_start is None:
        replay_start = call.replay_start
    non_causal = not CAUSAL
    decode_swa_width = 0 if non_causal else call.window_size
    decode_swa_indices = call.swa_indices
    if num_decode_tokens > 0:
        call.swa_lens[num_decode_tokens:] = 0
        rows.launch(
            decode_swa_indices,
            call.swa_lens,
            call.window_size,
            decode_swa_indices.shape[-1],
            call.swa_lens,
            call.swa_lens,
            call.query_start_loc,
            call.seq_lens,
            call.token_to_req_indices,
            is_valid_token,
            call.block_table,
            call.block_size,
            replay_start,
            num_tokens=num_decode_tokens,
            token_offset=0,
        )
    return (is_valid_token, decode_swa_indices[:num_decode_tokens],
            call.swa_lens[:num_decode_tokens], decode_swa_width, replay_start)


def dsv4_decode_path(call: SWADecodeCall, tile: tuple[int, int, int],
                     replay_start: torch.Tensor | None = None) -> tuple[object, ...]:
    """What the plugin runs instead: the checks, one launch with ``tile``, the views."""
    t = call.num_tokens
    if replay_start is None:
        replay_start = call.replay_start
    args = (call.swa_indices, call.swa_lens, call.is_valid_token, call.slot_mapping,
            call.query_start_loc, call.seq_lens, call.token_to_req_indices, call.block_table,
            replay_start, call.window_size, call.block_size, t)
    checked = launch.check(*args)
    launch.launch_checked(checked, *args, *tile)
    indices = call.swa_indices
    return (call.is_valid_token.as_strided((checked.num_slots,), (1,)),
            indices.as_strided((t, *indices.shape[1:]), indices.stride()),
            call.swa_lens.as_strided((t,), (1,)), call.window_size, replay_start)


def runner(call: SWADecodeCall, tile: object, rows: RowsKernel) -> Callable[[], object]:
    """A no-argument run of ``call``: vLLM's decode path, or dsv4's at ``tile``."""
    if tile == BASELINE:
        return lambda: vllm_decode_path(call, rows)
    return lambda: dsv4_decode_path(call, tile)  # type: ignore[arg-type]


def _home(call: SWADecodeCall, view: torch.Tensor) -> str | None:
    """The buffer of ``call`` whose memory ``view`` starts in, or None."""
    for name in BUFFERS:
        buffer = getattr(call, name)
        if view.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr():
            return name
    return None


def differences(call: SWADecodeCall, tile: object, rows: RowsKernel) -> list[str]:
    """What differs between vLLM's side and dsv4's at ``tile`` on fresh poisoned copies of
    the step: each whole buffer, and each returned view (shape, stride, offset, buffer,
    values) or value."""
    want, got = call.fresh(), call.fresh()
    a, b = runner(want, BASELINE, rows)(), runner(got, tile, rows)()
    if want.swa_indices.is_cuda:
        torch.cuda.synchronize(want.swa_indices.device)
    found = [name for name in BUFFERS if not torch.equal(getattr(want, name), getattr(got, name))]
    for i, (x, y) in enumerate(zip(a, b, strict=True)):  # type: ignore[arg-type]
        if isinstance(x, torch.Tensor):
            home = _home(want, x)
            if home is None:  # an input handed on: the very same tensor
                same = y is x
            else:
                same = (isinstance(y, torch.Tensor) and _home(got, y) == home
                        and x.dtype == y.dtype and x.shape == y.shape
                        and x.stride() == y.stride()
                        and x.storage_offset() == y.storage_offset() and bool(torch.equal(x, y)))
            if not same:
                found.append(f"returned[{i}]" + (f" (a view of {home})" if home else ""))
        elif x != y:
            found.append(f"returned[{i}]: {x!r} != {y!r}")
    return found


def outputs_equal(call: SWADecodeCall, tile: object, rows: RowsKernel) -> bool:
    """Whether both sides leave the same three whole buffers and return the same views
    and values."""
    return not differences(call, tile, rows)
