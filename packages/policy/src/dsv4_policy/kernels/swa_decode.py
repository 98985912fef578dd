"""SWA decode metadata launches: whether dsv4 builds a decode-only step, and its tile.

Every DeepSeek-V4 step, vLLM 0.33.0's ``DeepseekSparseSWAMetadataBuilder.build`` (the
sliding-window layers' metadata) fills its decode buffers in three device passes: a
``torch.ge`` of ``slot_mapping`` into ``is_valid_token``, a zero fill of
``decode_swa_lens`` past the step's tokens, and the SWA rows kernel over the decode
tokens (one program per token, 1024 lanes), plus the ATen slicing of the results. dsv4
builds a decode-only step with one launch that writes all three and hands out views of
the builder's own buffers. This module decides, for one step (:class:`Key`), whether
that happens and with which tile:

- :func:`baseline` is vLLM 0.33.0's own build (source ``"baseline"``): a plugin calls
  vLLM's ``build`` unchanged. Its tile, ``(8, 128, 4)``, is what dsv4's kernel would use
  without an entry, and is always warmed; vLLM itself runs no launch of this shape.
- :func:`resolve` returns a table entry's tile on a hit, else the baseline unchanged.
- :func:`compile_key_sources` lists every binary a deployment can need, so a server
  compiles them all at start-up instead of mid-serving.

A key holds only what the host knows without reading device memory: the columns of the
builder's decode rows (``index_width``, 128 for DeepSeek-V4) and the step's decode
tokens. Which builds can be taken over at all (decode only, causal, no speculative
decoding, vLLM's base builder or a subclass that changes none of its build) is the
plugin's to check before it asks. Nothing here changes what is written: the window,
the row stride and the validity of each token always come from the step. The shipped
table is ``dsv4_policy/tables/swa_decode.toml``.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsv4_policy import launch_table
from dsv4_policy.arch import _MAJOR
from dsv4_policy.conditions import INT_MAX, Range
from dsv4_policy.launch_table import KernelSpec
from dsv4_policy.launch_table import candidates as _candidates
from dsv4_policy.table import Entry, KeyField, Schema, Table, TableError

NAME = "swa_decode"
CompileKey = tuple[int, int, int]
"""(tokens_per_program, cols_per_program, num_warps): what selects a tile (warm-up builds
its binary)."""
TILE_FIELDS = ("tokens_per_program", "cols_per_program", "num_warps")
MIN_TOKENS = 1
MAX_TOKENS = 1024
MIN_COLS = 16
MAX_COLS = 1024


def tile_problems(tokens_per_program: object, cols_per_program: object, num_warps: object
                  ) -> list[tuple[str, str]]:
    """``(field, message)`` for every invalid tile field; empty when the tile is valid.

    The same limits as the kernel's own checks: a power of two in 1..1024 rows and one
    in 16..1024 columns per program, a warp count Triton accepts, at most 128 elements
    per thread."""
    return launch_table.tile_shape_problems(tokens_per_program, cols_per_program, num_warps,
                                            min_cols=MIN_COLS, max_cols=MAX_COLS,
                                            max_tokens=MAX_TOKENS)


@dataclass(frozen=True)
class Tile:
    """The tile an entry chooses: a ``tokens_per_program x cols_per_program`` block of
    rows per step of a program's loop over the row, on ``num_warps`` warps. What is
    written always comes from the step itself."""

    tokens_per_program: int
    cols_per_program: int
    num_warps: int

    def __post_init__(self) -> None:
        launch_table.refuse_tile(tile_problems(self.tokens_per_program, self.cols_per_program,
                                               self.num_warps))


BASELINE_TILE = Tile(8, 128, 4)
"""The tile of the baseline launch: dsv4's kernel at 8 rows of 128 columns per program on
4 warps, always warmed. The baseline itself is vLLM 0.33.0's build, which runs ATen ops
and vLLM's rows kernel."""

FIELDS = (
    launch_table.ARCH_FIELD,
    KeyField("index_width", int, minimum=1),
    KeyField("num_tokens", int, minimum=0),
)
INT_FIELDS = tuple(f for f in FIELDS if f.type is int)

_set = object.__setattr__


@dataclass(frozen=True, init=False)
class Key:
    """What one decode-only SWA build depends on.

    ``index_width`` is the columns of the builder's decode rows (the last dimension of
    ``decode_swa_indices``: 128 for DeepSeek-V4), ``num_tokens`` the step's decode
    tokens (vLLM's ``num_actual_tokens``, CUDA-graph padding tokens included). Values
    are checked on construction, so a bad one fails here with a message.
    """

    arch: str
    index_width: int
    num_tokens: int

    def __init__(self, arch: str, index_width: int, num_tokens: int) -> None:
        _set(self, "__dict__", {"arch": arch, "index_width": index_width,
                                "num_tokens": num_tokens})
        if not (
            type(index_width) is int and 1 <= index_width <= INT_MAX
            and type(num_tokens) is int and 0 <= num_tokens <= INT_MAX
            and type(arch) is str and arch in _MAJOR
        ):
            _explain_key(self)


def _explain_key(key: Key) -> None:
    """Raise ValueError naming the first invalid field of ``key`` and what it accepts."""
    launch_table.explain_key(key, FIELDS, {})


@dataclass(frozen=True)
class Launch:
    """How to build one step: the tile and where it came from.

    ``source`` is ``"table:<entry id>"`` (dsv4 builds the step with this tile) or
    ``"baseline"`` (vLLM's own build). Launches are immutable and shared."""

    tokens_per_program: int
    cols_per_program: int
    num_warps: int
    source: str

    def compile_key(self) -> CompileKey:
        """(tokens_per_program, cols_per_program, num_warps): one tile, one binary."""
        return (self.tokens_per_program, self.cols_per_program, self.num_warps)


# --------------------------------------------------------------------------- the table
class Index(launch_table.Index):
    """The swa_decode table's index. A box's hit is ``(launch,)``: the entry's tile as
    the one shared :class:`Launch`."""


TILES = launch_table.TileLaunches(
    NAME, FIELDS, tile_type=Tile, tile_fields=TILE_FIELDS, tile_problems=tile_problems,
    launch_type=Launch, baseline_tile=BASELINE_TILE, index_type=Index, label=f"a {NAME}",
    unknown_hint=lambda field: " (an entry sets only its tile; the window, the row stride "
                               "and what is written come from the step)",
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


# --------------------------------------------------------------------------- resolving
def baseline(key: Key) -> Launch:
    """vLLM 0.33.0's build for ``key`` (source ``"baseline"``): the same object always."""
    return _BASELINE


def resolve(key: Key, table: Table[Tile] | None = None) -> Launch:
    """The launch for ``key``: the matching entry's tile, or the baseline unchanged.

    ``table`` None means the shipped table. A valid table has no overlapping entries,
    so the first candidate box that matches is the only entry that matches.
    """
    boxes = _candidates(_index(shipped_table() if table is None else table), key)
    if boxes:
        iw, nt = key.index_width, key.num_tokens
        for i0, i1, t0, t1, hit in boxes:
            if i0 <= iw <= i1 and t0 <= nt <= t1:
                return hit[0]  # type: ignore[no-any-return]
    return _BASELINE


def compile_key_sources(table: Table[Tile] | None, arch: str
                        ) -> dict[CompileKey, tuple[str, ...]]:
    """Every compile key :func:`resolve` can produce for a deployment, with its sources.

    The baseline tile is always there. An entry counts unless its match excludes the
    arch: the row width is the builder's and the tokens vary from step to step, and a
    superset is safe for warm-up (one binary too many costs start-up time, never
    correctness).
    """
    return TILES.compile_key_sources(table, arch)  # type: ignore[return-value]


def compile_keys(table: Table[Tile] | None, arch: str) -> frozenset[CompileKey]:
    """The finite set of (tokens_per_program, cols_per_program, num_warps) a deployment
    can launch."""
    return frozenset(compile_key_sources(table, arch))


def deployment_of(key: Key) -> dict[str, int]:
    """A deployment whose compile keys cover ``key``'s launch: every one (the compile keys
    depend on the arch alone)."""
    return {}


KERNEL = KernelSpec(
    name=NAME,
    summary="the SWA builder's decode-only step (vLLM 0.33.0 "
            "DeepseekSparseSWAMetadataBuilder.build, no prefill, no speculative decoding)",
    **TILES.spec_fields(),
    key_type=Key,
    baseline=baseline,
    resolve=resolve,
    compile_key_sources=compile_key_sources,
    deployment=(),
    deployment_of=deployment_of,
    key_defaults={"arch": None, "index_width": 128, "num_tokens": 1},
    key_help={"index_width": "columns of the builder's decode rows: 128 for DeepSeek-V4 "
                             "(default: 128)",
              "num_tokens": "decode tokens of the step, CUDA-graph padding included "
                            "(default: 1)"},
    describe=lambda key: [],
)

__all__ = [
    "BASELINE_TILE", "FIELDS", "INT_FIELDS", "KERNEL", "NAME", "SCHEMA", "CompileKey", "Entry",
    "Index", "Key", "Launch", "Range", "Table", "TableError", "Tile", "baseline",
    "compile_key_sources", "compile_keys", "deployment_of", "load_table", "loads_table",
    "make_table", "render_table", "resolve", "shipped_table", "tile_problems",
]
