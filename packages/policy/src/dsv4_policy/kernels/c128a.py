"""C128A top-k metadata launches: the baseline formula and the table-driven resolver.

Before each model step, DeepSeek-V4's C128A layers need per-token metadata written by
one kernel into buffers whose row stride is the *capacity* (fixed at start-up, and
captured by CUDA graphs). This module decides how that kernel is launched for a
given step (:class:`Key`):

- :func:`baseline` is exactly what vLLM 0.33.0 does: the adaptive active width, the
  capacity row stride, a full-width decode view on SM 12.x, and the tile
  (1 token per program, 1024 lanes, 4 warps, no width split).
- :func:`resolve` returns a table entry's tile on a hit, with the geometry computed
  exactly as the baseline does, and otherwise the baseline, unchanged.
- :func:`compile_keys` lists every tile the resolver can pick for a deployment, so a
  server can compile them all at start-up instead of mid-serving.

``resolve`` runs on every model step, so it avoids allocation beyond the returned
:class:`Launch` and indexes the table by arch ahead of time. The shipped table is
``dsv4_policy/tables/c128a.toml``; an entry there chooses only a :class:`Tile`.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsv4_policy import launch_table
from dsv4_policy.arch import _MAJOR, arch_major
from dsv4_policy.conditions import INT_MAX, Range, contains
from dsv4_policy.launch_table import DeploymentParam, KernelSpec, tile_shape_problems
from dsv4_policy.launch_table import candidates as _candidates
from dsv4_policy.table import Entry, KeyField, Schema, Table, TableError, what

CompileKey = tuple[int, int, int]
"""(tokens_per_program, cols_per_program, num_warps): what selects one binary."""
TILE_FIELDS = ("tokens_per_program", "cols_per_program", "num_warps", "split_width")


def tile_problems(
    tokens_per_program: object, cols_per_program: object, num_warps: object, split_width: object,
) -> list[tuple[str, str]]:
    """``(field, message)`` for every invalid tile field; empty when the tile is valid."""
    found = tile_shape_problems(tokens_per_program, cols_per_program, num_warps,
                                min_cols=128, max_cols=8192)
    if type(split_width) is not bool:
        found.append(("split_width", f"split_width must be a boolean (true or false); "
                                     f"got {what(split_width)}"))
    return found


@dataclass(frozen=True)
class Tile:
    """The kernel tile an entry chooses; together with nothing else, it selects a binary.

    An entry may only choose the tile: the width, the capacity row stride and the
    decode view width always follow the baseline formula, so no table can ever change
    the row stride that CUDA graphs captured. ``split_width`` False means one program
    walks a row's whole width (as the baseline does); True lets several programs share
    one row's columns.
    """

    tokens_per_program: int
    cols_per_program: int
    num_warps: int
    split_width: bool = False

    def __post_init__(self) -> None:
        launch_table.refuse_tile(tile_problems(self.tokens_per_program, self.cols_per_program,
                                               self.num_warps, self.split_width))

    def compile_key(self) -> CompileKey:
        """The (tokens_per_program, cols_per_program, num_warps) that selects one binary."""
        return (self.tokens_per_program, self.cols_per_program, self.num_warps)


BASELINE_TILE = Tile(1, 1024, 4, False)
"""vLLM 0.33.0's launch: one token per program, 1024 lanes, 4 warps, no width split."""

FIELDS = (
    launch_table.ARCH_FIELD,
    KeyField("compress_ratio", int, minimum=1),
    KeyField("max_model_len", int, minimum=1),
    KeyField("max_seq_len", int, minimum=0),
    KeyField("num_decode_tokens", int, minimum=0),
    KeyField("num_prefill_tokens", int, minimum=0),
    KeyField("block_size", int, minimum=1),
)
INT_FIELDS = tuple(f for f in FIELDS if f.type is int)

_GEOMETRY = ("width", "row_stride", "decode_view_width")
_GEOMETRY_HINT = (" (an entry sets only tile fields; width, row_stride and decode_view_width "
                  "always follow the baseline formula, so the row stride stays the capacity)")


class Index(launch_table.Index):
    """The C128A table's index. A box's hit is ``(tile fields..., source, launch cache)``."""


def _hit(e: Entry[Tile]) -> tuple:
    t = e.config
    return (t.tokens_per_program, t.cols_per_program, t.num_warps, t.split_width,
            f"table:{e.id}", {})


SCHEMA: Schema[Tile] = launch_table.tile_schema(
    "c128a", FIELDS, tile_type=Tile, tile_fields=TILE_FIELDS, tile_problems=tile_problems,
    index_type=Index, hit=_hit,
    unknown_hint=lambda field: _GEOMETRY_HINT if field in _GEOMETRY else "",
)
FILES = launch_table.TableFiles(SCHEMA, "tables/c128a.toml")
SHIPPED = FILES.shipped
make_table = FILES.make_table
load_table = FILES.load_table
loads_table = FILES.loads_table
shipped_table = FILES.shipped_table
render_table = FILES.render_table

_set = object.__setattr__


@dataclass(frozen=True, init=False)
class Key:
    """What one model step's C128A launch depends on.

    ``block_size`` is in compressed units. Values are checked on construction (ints,
    not bools, within their domain and at most 2**63-1; ``arch`` an SM name) so that a
    bad value fails here, with a message, rather than deep inside a formula.

    A key is built on every model step, so ``__init__`` is written by hand: it stores
    the fields in one step and checks them in one expression, about half the cost of
    the generated frozen-dataclass initializer. Fields, equality, hashing, ``repr``
    and ``dataclasses.replace`` behave as for any frozen dataclass.
    """

    arch: str
    compress_ratio: int
    max_model_len: int
    max_seq_len: int
    num_decode_tokens: int
    num_prefill_tokens: int
    block_size: int

    def __init__(
        self, arch: str, compress_ratio: int, max_model_len: int, max_seq_len: int,
        num_decode_tokens: int, num_prefill_tokens: int, block_size: int,
    ) -> None:
        _set(self, "__dict__", {
            "arch": arch, "compress_ratio": compress_ratio, "max_model_len": max_model_len,
            "max_seq_len": max_seq_len, "num_decode_tokens": num_decode_tokens,
            "num_prefill_tokens": num_prefill_tokens, "block_size": block_size,
        })
        # One cheap expression on the happy path; the slow path explains the failure.
        if not (
            type(compress_ratio) is int and 1 <= compress_ratio <= INT_MAX
            and type(max_model_len) is int and 1 <= max_model_len <= INT_MAX
            and type(max_seq_len) is int and 0 <= max_seq_len <= INT_MAX
            and type(num_decode_tokens) is int and 0 <= num_decode_tokens <= INT_MAX
            and type(num_prefill_tokens) is int and 0 <= num_prefill_tokens <= INT_MAX
            and type(block_size) is int and 1 <= block_size <= INT_MAX
            and type(arch) is str and arch in _MAJOR
        ):
            _explain_key(self)


def _explain_key(key: Key) -> None:
    """Raise ValueError naming the first invalid field of ``key`` and what it accepts."""
    launch_table.explain_key(key, FIELDS)


@dataclass(frozen=True)
class Launch:
    """How to launch the C128A metadata kernel for one step.

    ``width`` is the active width (a multiple of 128, at most the capacity),
    ``row_stride`` always the capacity, ``decode_view_width`` the capacity on SM 12.x
    and the width elsewhere. The tile fields select the binary; ``source`` says where
    the launch came from: ``"table:<entry id>"`` or ``"baseline"``.

    Launches are immutable, and :func:`resolve` hands out shared instances: a
    deployment only ever sees a handful of distinct launches.
    """

    width: int
    row_stride: int
    decode_view_width: int
    tokens_per_program: int
    cols_per_program: int
    num_warps: int
    split_width: bool
    source: str

    def compile_key(self) -> CompileKey:
        """(tokens_per_program, cols_per_program, num_warps): what selects one binary."""
        return (self.tokens_per_program, self.cols_per_program, self.num_warps)


def capacity(max_model_len: int, compress_ratio: int) -> int:
    """Buffer columns (and row stride): ceil(max_model_len / ratio), rounded up to 128."""
    for name, value in (("max_model_len", max_model_len), ("compress_ratio", compress_ratio)):
        if type(value) is not int or value < 1:
            raise ValueError(f"{name} must be a positive integer; got {value!r}")
    return (-(-max_model_len // compress_ratio) + 127) & -128


def active_width(key: Key) -> int:
    """vLLM 0.33.0's active width: min(max(next_pow2(max(len // ratio, 1)), 128), capacity)."""
    return _launch(key, _BASELINE_HIT).width


_BASELINE_HIT = (
    BASELINE_TILE.tokens_per_program, BASELINE_TILE.cols_per_program, BASELINE_TILE.num_warps,
    BASELINE_TILE.split_width, "baseline", {},
)
CACHE_LIMIT = 1024
"""Distinct launches remembered per tile before that tile's cache starts over."""


def _launch(key: Key, hit: tuple) -> Launch:
    """The one place the geometry formula lives; baseline and table hits both use it.

    ``hit`` is ``(tokens_per_program, cols_per_program, num_warps, split_width, source,
    cache)``; ``cache`` maps ``(width, capacity, decode_view_width)`` to the one shared
    :class:`Launch`, since building a frozen dataclass costs more than the formula.
    """
    ratio = key.compress_ratio
    cap = (-(-key.max_model_len // ratio) + 127) & -128
    n = key.max_seq_len // ratio
    width = 1 << (n - 1).bit_length() if n > 1 else 1
    if width < 128:
        width = 128
    if width > cap:
        width = cap
    major = _MAJOR.get(key.arch)
    if major is None:
        major = arch_major(key.arch)
    view = cap if major == 12 else width
    cache = hit[5]
    found = cache.get((width, cap, view))
    if found is None:
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
        found = cache[width, cap, view] = Launch(width, cap, view, *hit[:5])
    return found


def baseline(key: Key) -> Launch:
    """Exactly vLLM 0.33.0's launch for ``key`` (source ``"baseline"``)."""
    return _launch(key, _BASELINE_HIT)


def _index(table: Table[Tile]) -> Index:
    return launch_table.index_of(table, Index, "a C128A")  # type: ignore[return-value]


def resolve(key: Key, table: Table[Tile] | None = None) -> Launch:
    """The launch for ``key``: the matching entry's tile, or the baseline unchanged.

    ``table`` None means the shipped table. The table's index narrows the candidates
    (by arch, then by bisecting field intervals); since a valid table has no
    overlapping entries, the first candidate box that matches is the only entry that
    matches.
    """
    index = getattr(shipped_table() if table is None else table, "compiled", None)
    if type(index) is not Index:
        _index(table)  # type: ignore[arg-type]
    boxes = _candidates(index, key)
    if boxes:
        cr = key.compress_ratio
        mml = key.max_model_len
        msl = key.max_seq_len
        nd = key.num_decode_tokens
        npf = key.num_prefill_tokens
        bs = key.block_size
        for c0, c1, m0, m1, s0, s1, d0, d1, p0, p1, b0, b1, hit in boxes:
            if (c0 <= cr <= c1 and m0 <= mml <= m1 and s0 <= msl <= s1 and d0 <= nd <= d1
                    and p0 <= npf <= p1 and b0 <= bs <= b1):
                return _launch(key, hit)
    return _launch(key, _BASELINE_HIT)


def compile_key_sources(
    table: Table[Tile] | None, arch: str, max_model_len: int,
) -> dict[CompileKey, tuple[str, ...]]:
    """Every compile key :func:`resolve` can produce for a deployment, with its sources.

    The baseline's key is always there. An entry counts unless its match excludes
    ``arch`` or ``max_model_len``; the result may be a superset, which is safe for
    warm-up (compiling one binary too many costs start-up time, never correctness).
    """
    table = shipped_table() if table is None else table
    _index(table)
    arch_major(arch)
    problem = FIELDS[2].value_problem(max_model_len)
    if problem:
        raise ValueError(f"max_model_len: {problem}")
    found: dict[CompileKey, list[str]] = {BASELINE_TILE.compile_key(): ["baseline"]}
    for e in table.entries:
        arch_cond = e.match.get("arch")
        mml_cond = e.match.get("max_model_len")
        if arch_cond is not None and not contains(arch_cond, arch):
            continue
        if mml_cond is not None and not contains(mml_cond, max_model_len):
            continue
        found.setdefault(e.config.compile_key(), []).append(f"table:{e.id}")
    return {k: tuple(v) for k, v in found.items()}


def compile_keys(table: Table[Tile] | None, arch: str, max_model_len: int) -> frozenset[CompileKey]:
    """The finite set of (tokens_per_program, cols_per_program, num_warps) to warm up."""
    return frozenset(compile_key_sources(table, arch, max_model_len))


KERNEL = KernelSpec(
    name="c128a",
    summary="C128A top-k metadata (vLLM 0.33.0 build_c128a_topk_metadata)",
    **FILES.spec_fields(),
    key_type=Key,
    launch_type=Launch,
    tile_type=Tile,
    baseline_tile=BASELINE_TILE,
    baseline=baseline,
    resolve=resolve,
    compile_key_fields=("tokens_per_program", "cols_per_program", "num_warps"),
    compile_key_sources=compile_key_sources,
    deployment=(DeploymentParam("max_model_len", "the deployment's max model length", 1),),
    deployment_of=lambda key: {"max_model_len": key.max_model_len},
    key_defaults={"arch": None, "compress_ratio": 128, "max_model_len": None,
                  "max_seq_len": None, "num_decode_tokens": 1, "num_prefill_tokens": 0,
                  "block_size": 2},
    key_help={"compress_ratio": "default: 128",
              "max_seq_len": "longest sequence in the batch, in tokens",
              "num_decode_tokens": "default: 1", "num_prefill_tokens": "default: 0",
              "block_size": "KV block size in compressed units (default: 2)"},
    describe=lambda key: [("capacity", capacity(key.max_model_len, key.compress_ratio))],
)
"""C128A's entry in :mod:`dsv4_policy.registry`."""

__all__ = [
    "BASELINE_TILE", "FIELDS", "INT_FIELDS", "KERNEL", "SCHEMA", "SHIPPED", "CompileKey", "Entry",
    "Index", "Key", "Launch", "Range", "Table", "TableError", "Tile", "active_width", "baseline",
    "capacity", "compile_key_sources", "compile_keys", "load_table", "loads_table", "make_table",
    "render_table", "resolve", "shipped_table", "tile_problems",
]
