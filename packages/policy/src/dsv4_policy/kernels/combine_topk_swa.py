"""CombineTopkSwaIndices launches: the baseline and the table-driven resolver.

In every layer's prefill, DeepSeek-V4's FlashMLA path builds, per chunk of prefill
requests, each token's sparse-attention indices into the gathered KV: its top-k
compressed entries followed by its sliding window (vLLM 0.33.0's
``combine_topk_swa_indices``). vLLM fills the whole output with ``-1`` and then runs a
fixed ``(num_reqs, 256)`` grid whatever the chunk's length; dsv4's kernel writes the
buffer once, on a grid that grows with the chunk, with a tile this module chooses
for one call (:class:`Key`):

- :func:`baseline` is vLLM 0.33.0's launch: source ``"baseline"`` tells a caller to run
  vLLM's own function unchanged; its tile ``(1, 1024, 4)`` (one token per step, 1024
  lanes, 4 warps) is the one dsv4's kernel uses when asked for vLLM's launch shape.
- :func:`resolve` returns a table entry's tile on a hit, else the baseline unchanged.
- :func:`compile_key_sources` lists every binary a deployment can need, so a server
  compiles them all at start-up instead of mid-serving. Only the tile selects a binary.

Nothing here changes what is written: the widths, window, offsets and strides always
come from the call. Pure Python, standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsv4_policy import launch_table
from dsv4_policy.arch import _MAJOR
from dsv4_policy.conditions import INT_MAX, Range
from dsv4_policy.launch_table import DeploymentParam, KernelSpec, tile_shape_problems
from dsv4_policy.launch_table import candidates as _candidates
from dsv4_policy.table import Entry, KeyField, Schema, Table, TableError

NAME = "combine_topk_swa"
CompileKey = tuple[int, int, int]
"""(tokens_per_program, cols_per_program, num_warps): what selects one binary."""
TILE_FIELDS = ("tokens_per_program", "cols_per_program", "num_warps")
MIN_COLS = 16
MAX_COLS = 8192
_set = object.__setattr__


# --------------------------------------------------------------------------- key
@dataclass(frozen=True, init=False)
class Key:
    """What one ``combine_topk_swa_indices`` call's launch depends on.

    ``compress_ratio`` is the layer's (128 for C128A, 4 for C4A, 1 for SWA-only),
    ``top_k`` the call's ``topk`` (C128A: the active width; C4A: the indexer's top-k;
    SWA-only: 0), ``max_image_tokens`` the columns image visibility may add,
    ``has_image`` 1 when the call passes visibility tensors, ``num_reqs`` the chunk's
    requests and ``num_tokens`` its rows (``topk_indices.shape[0]``). All are known on
    the host without reading device memory. Checked on construction.
    """

    arch: str
    compress_ratio: int
    top_k: int
    window_size: int
    max_image_tokens: int
    has_image: int
    num_reqs: int
    num_tokens: int

    def __init__(self, arch: str, compress_ratio: int, top_k: int, window_size: int,
                 max_image_tokens: int, has_image: int, num_reqs: int, num_tokens: int) -> None:
        _set(self, "__dict__", {
            "arch": arch, "compress_ratio": compress_ratio, "top_k": top_k,
            "window_size": window_size, "max_image_tokens": max_image_tokens,
            "has_image": has_image, "num_reqs": num_reqs, "num_tokens": num_tokens,
        })
        if not (
            type(compress_ratio) is int and 1 <= compress_ratio <= INT_MAX
            and type(top_k) is int and 0 <= top_k <= INT_MAX
            and type(window_size) is int and 1 <= window_size <= INT_MAX
            and type(max_image_tokens) is int and 0 <= max_image_tokens <= INT_MAX
            and type(has_image) is int and 0 <= has_image <= 1
            and type(num_reqs) is int and 0 <= num_reqs <= INT_MAX
            and type(num_tokens) is int and 0 <= num_tokens <= INT_MAX
            and type(arch) is str and arch in _MAJOR
        ):
            launch_table.explain_key(self, FIELDS, {
                "has_image": lambda v: (None if v in (0, 1)
                                        else f"Key.has_image must be 0 or 1; got {v}"),
            })


FIELDS = (
    launch_table.ARCH_FIELD,
    KeyField("compress_ratio", int, minimum=1),
    KeyField("top_k", int, minimum=0),
    KeyField("window_size", int, minimum=1),
    KeyField("max_image_tokens", int, minimum=0),
    KeyField("has_image", int, minimum=0),
    KeyField("num_reqs", int, minimum=0),
    KeyField("num_tokens", int, minimum=0),
)
INT_FIELDS = tuple(f for f in FIELDS if f.type is int)


# --------------------------------------------------------------------------- tile and launch
def tile_problems(tokens_per_program: object, cols_per_program: object,
                  num_warps: object) -> list[tuple[str, str]]:
    """``(field, message)`` for every invalid tile field; empty when the tile is valid
    (the limits are those :mod:`dsv4_kernels.combine_topk_swa.checks` enforces)."""
    return tile_shape_problems(tokens_per_program, cols_per_program, num_warps,
                               min_cols=MIN_COLS, max_cols=MAX_COLS)


@dataclass(frozen=True)
class Tile:
    """The tile an entry chooses: ``tokens_per_program`` rows per program (the grid is
    ``cdiv(num_tokens, tokens_per_program)``), ``cols_per_program`` columns per step of
    a row, on ``num_warps`` warps."""

    tokens_per_program: int
    cols_per_program: int
    num_warps: int

    def __post_init__(self) -> None:
        launch_table.refuse_tile(tile_problems(self.tokens_per_program, self.cols_per_program,
                                               self.num_warps))


BASELINE_TILE = Tile(1, 1024, 4)
"""vLLM 0.33.0's launch shape: one token per step, 1024 lanes, 4 warps."""


@dataclass(frozen=True)
class Launch:
    """How to launch for one call: the tile and where it came from.

    ``source`` is ``"table:<entry id>"`` (run dsv4's kernel with this tile) or
    ``"baseline"`` (run vLLM's own function). Launches are immutable and shared.
    """

    tokens_per_program: int
    cols_per_program: int
    num_warps: int
    source: str

    def compile_key(self) -> CompileKey:
        """(tokens_per_program, cols_per_program, num_warps): one binary."""
        return (self.tokens_per_program, self.cols_per_program, self.num_warps)


# --------------------------------------------------------------------------- table schema
class Index(launch_table.Index):
    """The combine_topk_swa table's index. A box's hit is ``(launch,)``: the entry's tile
    as the one shared :class:`Launch`."""


TILES = launch_table.TileLaunches(
    NAME, FIELDS, tile_type=Tile, tile_fields=TILE_FIELDS, tile_problems=tile_problems,
    launch_type=Launch, baseline_tile=BASELINE_TILE, index_type=Index, label=f"a {NAME}",
    unknown_hint=lambda field: " (an entry sets only its tile; widths, window and strides "
                               "come from the call)",
)
_BASELINE: Launch = TILES.baseline
SCHEMA: Schema[Tile] = TILES.schema
FILES = TILES.files
SHIPPED = FILES.shipped
make_table = FILES.make_table
load_table = FILES.load_table
loads_table = FILES.loads_table
shipped_table = FILES.shipped_table
render_table = FILES.render_table
_index = TILES.index


# --------------------------------------------------------------------------- resolve
def baseline(key: Key) -> Launch:
    """vLLM 0.33.0's launch for ``key`` (source ``"baseline"``), the same object always."""
    return _BASELINE


def resolve(key: Key, table: Table[Tile] | None = None) -> Launch:
    """The launch for ``key``: the matching entry's tile, or the baseline unchanged.

    ``table`` None means the shipped table. A valid table has no overlapping entries,
    so the first candidate box that matches is the only entry that matches.
    """
    boxes = _candidates(_index(shipped_table() if table is None else table), key)
    if boxes:
        cr, tk, ws = key.compress_ratio, key.top_k, key.window_size
        mi, hi_, nr, nt = key.max_image_tokens, key.has_image, key.num_reqs, key.num_tokens
        for (c0, c1, k0, k1, w0, w1, m0, m1, h0, h1, r0, r1, n0, n1, hit) in boxes:
            if (c0 <= cr <= c1 and k0 <= tk <= k1 and w0 <= ws <= w1 and m0 <= mi <= m1
                    and h0 <= hi_ <= h1 and r0 <= nr <= r1 and n0 <= nt <= n1):
                return hit[0]  # type: ignore[no-any-return]
    return _BASELINE


def compile_key_sources(
    table: Table[Tile] | None, arch: str, *, window_size: int, max_image_tokens: int = 0,
) -> dict[CompileKey, tuple[str, ...]]:
    """Every compile key :func:`resolve` can produce for a deployment, with its sources.

    The baseline's key is always there. An entry counts unless its match excludes the
    arch, the window or the deployment's ``max_image_tokens``: a superset is safe for
    warm-up (one binary too many costs start-up time, never correctness).
    """
    return TILES.compile_key_sources(  # type: ignore[return-value]
        table, arch, ("window_size", window_size, 1), ("max_image_tokens", max_image_tokens, 0))


def compile_keys(table: Table[Tile] | None, arch: str, *, window_size: int,
                 max_image_tokens: int = 0) -> frozenset[CompileKey]:
    """The finite set of (tokens_per_program, cols_per_program, num_warps) to warm."""
    return frozenset(compile_key_sources(table, arch, window_size=window_size,
                                         max_image_tokens=max_image_tokens))


def deployment_of(key: Key) -> dict[str, int] | None:
    """A deployment whose compile keys cover ``key``'s launch, or None when no vLLM
    0.33.0 deployment makes this call (visibility tensors without image tokens)."""
    if key.has_image and not key.max_image_tokens:
        return None
    return {"window_size": key.window_size, "max_image_tokens": key.max_image_tokens}


def _describe(key: Key) -> list[tuple[str, object]]:
    a = 128
    width = (key.top_k + key.window_size + key.max_image_tokens + a - 1) // a * a
    return [("combined_topk", width)]


KERNEL = KernelSpec(
    name=NAME,
    summary="top-k + SWA indices for sparse prefill (vLLM 0.33.0 combine_topk_swa_indices)",
    **TILES.spec_fields(),
    key_type=Key,
    baseline=baseline,
    resolve=resolve,
    compile_key_sources=compile_key_sources,
    deployment=(
        DeploymentParam("window_size", "the model's sliding window (hf sliding_window)", 1),
        DeploymentParam("max_image_tokens", "image tokens a prefill row may add "
                        "(vision_max_n_token; 0 for text-only models)", 0, 0),
    ),
    deployment_of=deployment_of,
    key_defaults={"arch": None, "compress_ratio": 4, "top_k": 512, "window_size": 128,
                  "max_image_tokens": 0, "has_image": 0, "num_reqs": 1, "num_tokens": 1},
    key_help={"compress_ratio": "the layer's: 128 (C128A), 4 (C4A), 1 (SWA-only) (default: 4)",
              "top_k": "the call's topk: C128A active width, C4A index_topk, 0 for SWA-only "
                       "(default: 512)",
              "max_image_tokens": "columns image visibility may add (default: 0)",
              "has_image": "1 when the call passes visibility tensors (default: 0)",
              "num_reqs": "requests in the chunk (default: 1)",
              "num_tokens": "rows of the call, topk_indices.shape[0] (default: 1)"},
    describe=_describe,
)

__all__ = [
    "BASELINE_TILE", "FIELDS", "INT_FIELDS", "KERNEL", "NAME", "SCHEMA", "CompileKey", "Entry",
    "Index", "Key", "Launch", "Range", "Table", "TableError", "Tile", "baseline",
    "compile_key_sources", "compile_keys", "deployment_of", "load_table", "loads_table",
    "make_table", "render_table", "resolve", "shipped_table", "tile_problems",
]
