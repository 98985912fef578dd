"""Compressed slot mapping launches: the baseline and the table-driven resolver.

Every DeepSeek-V4 step, the C4A, C128A and indexer metadata builders each call vLLM
0.33.0's ``get_compressed_slot_mapping``: it fills the whole pre-allocated output with
-1, then runs one program per request that walks the request's tokens 1024 lanes at a
time, so a long prefill is one program looping on one SM. dsv4's kernel writes the
whole buffer in one launch, ``tokens_per_program`` rows per program; this module
decides that tile for one call (:class:`Key`):

- :func:`baseline` is vLLM 0.33.0's own launch (1024 lanes, 4 warps, after its fill);
  a plugin runs vLLM's own function for it.
- :func:`resolve` returns a table entry's tile on a hit, else the baseline unchanged.
- :func:`compile_key_sources` lists every binary a deployment can need, so a server
  compiles them all at start-up instead of mid-serving.

A key holds only what the host knows without reading device memory: the token count,
the request count (the block table's rows), the output buffer's rows, block size,
compress ratio and DCP world size. Nothing here changes what is written. The shipped
table is ``dsv4_policy/tables/compressed_slot_mapping.toml``.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsv4_policy import launch_table
from dsv4_policy.arch import _MAJOR, arch_major
from dsv4_policy.conditions import INT_MAX, Range
from dsv4_policy.launch_table import DeploymentParam, KernelSpec
from dsv4_policy.launch_table import candidates as _candidates
from dsv4_policy.table import Entry, KeyField, Schema, Table, TableError

NAME = "compressed_slot_mapping"
CompileKey = tuple[int, int]
"""(tokens_per_program, num_warps): what selects a tile (warm-up builds its binaries)."""
TILE_FIELDS = ("tokens_per_program", "num_warps")
MIN_TOKENS = 16
MAX_TOKENS = 8192


def tile_problems(tokens_per_program: object, num_warps: object) -> list[tuple[str, str]]:
    """``(field, message)`` for every invalid tile field; empty when the tile is valid.

    The same limits as the kernel's own checks: a power of two in 16..8192 rows per
    program, a warp count Triton accepts, at most 128 rows per thread."""
    found = []
    problem = launch_table.power_of_two_problem("tokens_per_program", tokens_per_program,
                                                MIN_TOKENS, MAX_TOKENS)
    if problem:
        found.append(("tokens_per_program", problem))
    problem = launch_table.warps_problem(num_warps)
    if problem:
        found.append(("num_warps", problem))
    if not found:
        problem = launch_table.elements_problem(tokens_per_program, 1,  # type: ignore[arg-type]
                                                num_warps)  # type: ignore[arg-type]
        if problem:
            found.append(("tokens_per_program", problem))
    return found


@dataclass(frozen=True)
class Tile:
    """The tile an entry chooses: ``tokens_per_program`` output rows per program, on
    ``num_warps`` warps. What is written always comes from the call itself."""

    tokens_per_program: int
    num_warps: int

    def __post_init__(self) -> None:
        launch_table.refuse_tile(tile_problems(self.tokens_per_program, self.num_warps))


BASELINE_TILE = Tile(1024, 4)
"""vLLM 0.33.0's launch shape: 1024 lanes per program, 4 warps."""

FIELDS = (
    launch_table.ARCH_FIELD,
    KeyField("compress_ratio", int, minimum=1),
    KeyField("block_size", int, minimum=1),
    KeyField("dcp_world_size", int, minimum=1),
    KeyField("num_reqs", int, minimum=0),
    KeyField("num_tokens", int, minimum=0),
    KeyField("num_rows", int, minimum=0),
)
INT_FIELDS = tuple(f for f in FIELDS if f.type is int)

_set = object.__setattr__


@dataclass(frozen=True, init=False)
class Key:
    """What one ``get_compressed_slot_mapping`` call's launch depends on.

    ``num_reqs`` is ``block_table.shape[0]`` (vLLM's grid), ``num_tokens`` the step's
    tokens, ``num_rows`` the output rows written: ``out.shape[0]`` (the whole buffer,
    which vLLM fills), or ``num_tokens`` without ``out``; never fewer than
    ``num_tokens``. ``block_size`` is in compressed entries per cache block. Values are
    checked on construction, so a bad one fails here with a message.
    """

    arch: str
    compress_ratio: int
    block_size: int
    dcp_world_size: int
    num_reqs: int
    num_tokens: int
    num_rows: int

    def __init__(self, arch: str, compress_ratio: int, block_size: int, dcp_world_size: int,
                 num_reqs: int, num_tokens: int, num_rows: int) -> None:
        _set(self, "__dict__", {
            "arch": arch, "compress_ratio": compress_ratio, "block_size": block_size,
            "dcp_world_size": dcp_world_size, "num_reqs": num_reqs, "num_tokens": num_tokens,
            "num_rows": num_rows,
        })
        if not (
            type(compress_ratio) is int and 1 <= compress_ratio <= INT_MAX
            and type(block_size) is int and 1 <= block_size <= INT_MAX
            and type(dcp_world_size) is int and 1 <= dcp_world_size <= INT_MAX
            and type(num_reqs) is int and 0 <= num_reqs <= INT_MAX
            and type(num_tokens) is int and 0 <= num_tokens <= INT_MAX
            and type(num_rows) is int and num_tokens <= num_rows <= INT_MAX
            and type(arch) is str and arch in _MAJOR
        ):
            _explain_key(self)


def _explain_key(key: Key) -> None:
    """Raise ValueError naming the first invalid field of ``key`` and what it accepts."""
    if type(key.arch) is str:
        try:
            arch_major(key.arch)  # caches a valid name, so the fast path accepts it next
        except ValueError as exc:
            raise ValueError(f"Key.arch: {exc}") from None
    launch_table.explain_key(key, FIELDS)
    if key.num_rows < key.num_tokens:
        raise ValueError(f"Key.num_rows must be at least num_tokens = {key.num_tokens} (the "
                         f"output holds every token's row); got {key.num_rows}")


@dataclass(frozen=True)
class Launch:
    """How to launch the kernel for one call: the tile and where it came from.

    ``source`` is ``"table:<entry id>"`` or ``"baseline"`` (vLLM's own launch, fill
    and all). Launches are immutable and shared."""

    tokens_per_program: int
    num_warps: int
    source: str

    def compile_key(self) -> CompileKey:
        """(tokens_per_program, num_warps): one tile, warmed as a unit (the kernel builds
        one binary per slot_mapping dtype for it)."""
        return (self.tokens_per_program, self.num_warps)


# --------------------------------------------------------------------------- the table
class Index(launch_table.Index):
    """The compressed_slot_mapping table's index. A box's hit is ``(launch,)``: the
    entry's tile as the one shared :class:`Launch`."""


TILES = launch_table.TileLaunches(
    NAME, FIELDS, tile_type=Tile, tile_fields=TILE_FIELDS, tile_problems=tile_problems,
    launch_type=Launch, baseline_tile=BASELINE_TILE, index_type=Index, label=f"a {NAME}",
    unknown_hint=lambda field: " (an entry sets only its tile; what is written comes from "
                               "the call)",
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
    """vLLM 0.33.0's launch for ``key`` (source ``"baseline"``): the same object always."""
    return _BASELINE


def resolve(key: Key, table: Table[Tile] | None = None) -> Launch:
    """The launch for ``key``: the matching entry's tile, or the baseline unchanged.

    ``table`` None means the shipped table. A valid table has no overlapping entries,
    so the first candidate box that matches is the only entry that matches.
    """
    boxes = _candidates(_index(shipped_table() if table is None else table), key)
    if boxes:
        cr, bs, dcp = key.compress_ratio, key.block_size, key.dcp_world_size
        nr, nt, rows = key.num_reqs, key.num_tokens, key.num_rows
        for c0, c1, b0, b1, d0, d1, r0, r1, t0, t1, w0, w1, hit in boxes:
            if (c0 <= cr <= c1 and b0 <= bs <= b1 and d0 <= dcp <= d1 and r0 <= nr <= r1
                    and t0 <= nt <= t1 and w0 <= rows <= w1):
                return hit[0]  # type: ignore[no-any-return]
    return _BASELINE


def compile_key_sources(
    table: Table[Tile] | None, arch: str, *, dcp_world_size: int = 1,
) -> dict[CompileKey, tuple[str, ...]]:
    """Every compile key :func:`resolve` can produce for a deployment, with its sources.

    The baseline tile is always there (dsv4's kernel at vLLM's launch shape, what a
    plugin may fall back to). An entry counts unless its match excludes the arch or the
    DCP world size: a superset is safe for warm-up (one binary too many costs start-up
    time, never correctness), and every other key field varies from step to step.
    """
    return TILES.compile_key_sources(  # type: ignore[return-value]
        table, arch, ("dcp_world_size", dcp_world_size, 1))


def compile_keys(table: Table[Tile] | None, arch: str, *, dcp_world_size: int = 1,
                 ) -> frozenset[CompileKey]:
    """The finite set of (tokens_per_program, num_warps) a deployment can launch."""
    return frozenset(compile_key_sources(table, arch, dcp_world_size=dcp_world_size))


def deployment_of(key: Key) -> dict[str, int]:
    """A deployment whose compile keys cover ``key``'s launch: its DCP world size."""
    return {"dcp_world_size": key.dcp_world_size}


KERNEL = KernelSpec(
    name=NAME,
    summary="compressed KV slot mapping (vLLM 0.33.0 get_compressed_slot_mapping, fill "
            "included)",
    **TILES.spec_fields(),
    key_type=Key,
    baseline=baseline,
    resolve=resolve,
    compile_key_sources=compile_key_sources,
    deployment=(
        DeploymentParam("dcp_world_size", "decode context parallel ranks "
                        "(--decode-context-parallel-size; 1 without DCP)", 1, 1),
    ),
    deployment_of=deployment_of,
    key_defaults={"arch": None, "compress_ratio": 4, "block_size": 64, "dcp_world_size": 1,
                  "num_reqs": 1, "num_tokens": 1, "num_rows": 8192},
    key_help={"compress_ratio": "tokens per compressed state: 4 (C4A, indexer) or 128 "
                                "(C128A) (default: 4)",
              "block_size": "compressed entries per cache block (default: 64)",
              "num_reqs": "requests of the step: block_table.shape[0] (default: 1)",
              "num_tokens": "tokens of the step (default: 1)",
              "num_rows": "rows of the output buffer, all written (default: 8192)"},
    describe=lambda key: [],
)

__all__ = [
    "BASELINE_TILE", "FIELDS", "INT_FIELDS", "KERNEL", "NAME", "SCHEMA", "CompileKey", "Entry",
    "Index", "Key", "Launch", "Range", "Table", "TableError", "Tile", "baseline",
    "compile_key_sources", "compile_keys", "deployment_of", "load_table", "loads_table",
    "make_table", "render_table", "resolve", "shipped_table", "tile_problems",
]
