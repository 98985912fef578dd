"""The C128A launch table: its schema, its tile config, and reading and writing it.

An entry may only choose the *tile* of the C128A metadata kernel (tokens per program,
columns per program, warps, whether a row's width is split across programs). The
width, the capacity row stride and the decode view width always follow the
baseline formula, so no table can ever change the row stride that CUDA graphs
captured. The shipped table lives in ``dsv4_policy/tables/c128a.toml``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dsv4_policy import launch_table
from dsv4_policy.arch import ARCH_ACCEPTED, ARCH_PATTERN
from dsv4_policy.conditions import INT_MAX
from dsv4_policy.launch_table import (
    LEAF_SIZE,
    MAX_BOXES,
    MAX_DEPTH,
    MAX_ELEMENTS_PER_THREAD,
    WARPS,
    Split,
    tile_shape_problems,
)
from dsv4_policy.table import (
    Entry,
    KeyField,
    Schema,
    what,
)

CompileKey = tuple[int, int, int]
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

    ``split_width`` False means one program walks a row's whole width (as the baseline
    does); True lets several programs share one row's columns.
    """

    tokens_per_program: int
    cols_per_program: int
    num_warps: int
    split_width: bool = False

    def __post_init__(self) -> None:
        found = tile_problems(self.tokens_per_program, self.cols_per_program, self.num_warps,
                              self.split_width)
        if found:
            raise ValueError("invalid Tile: " + "; ".join(message for _, message in found))

    def compile_key(self) -> CompileKey:
        """The (tokens_per_program, cols_per_program, num_warps) that selects one binary."""
        return (self.tokens_per_program, self.cols_per_program, self.num_warps)


BASELINE_TILE = Tile(1, 1024, 4, False)
"""vLLM 0.33.0's launch: one token per program, 1024 lanes, 4 warps, no width split."""

FIELDS = (
    KeyField("arch", str, pattern=ARCH_PATTERN, accepted=ARCH_ACCEPTED),
    KeyField("compress_ratio", int, minimum=1),
    KeyField("max_model_len", int, minimum=1),
    KeyField("max_seq_len", int, minimum=0),
    KeyField("num_decode_tokens", int, minimum=0),
    KeyField("num_prefill_tokens", int, minimum=0),
    KeyField("block_size", int, minimum=1),
)
INT_FIELDS = tuple(f for f in FIELDS if f.type is int)

_GEOMETRY_HINT = ("an entry sets only tile fields; width, row_stride and decode_view_width "
                  "always follow the baseline formula, so the row stride stays the capacity")


def _parse_tile(raw: Mapping[str, object], report: Callable[[str, str], None]) -> Tile | None:
    extra = [k for k in raw if k not in TILE_FIELDS]
    for name in extra:
        geometry = name in ("width", "row_stride", "decode_view_width")
        hint = f" ({_GEOMETRY_HINT})" if geometry else ""
        report(name, f"unknown field {name!r}; accepted: {', '.join(TILE_FIELDS)}{hint}")
    missing = [k for k in TILE_FIELDS if k not in raw]
    for name in missing:
        report(name, "missing; a launch gives tokens_per_program, cols_per_program, num_warps "
                     "and split_width")
    if extra or missing:
        return None
    found = tile_problems(*(raw[k] for k in TILE_FIELDS))
    for name, message in found:
        report(name, message)
    return None if found else Tile(*(raw[k] for k in TILE_FIELDS))  # type: ignore[arg-type]


def _check_tile(config: object) -> list[tuple[str, str]]:
    if not isinstance(config, Tile):
        return [("tile", f"an entry's config must be a Tile; got {what(config)}")]
    return []


def _tile_toml(tile: Tile) -> dict[str, object]:
    return {name: getattr(tile, name) for name in TILE_FIELDS}


@dataclass(frozen=True)
class Index:
    """Entries laid out for the hot path: per arch, a :class:`Split` tree over the boxes.

    Each box is ``(lo, hi)`` pairs for the six integer key fields in ``INT_FIELDS``
    order, flattened, followed by the hit ``(tile fields..., source, launch cache)``.
    """

    by_arch: Mapping[str, object]
    other: object


def _hit(e: Entry[Tile]) -> tuple:
    t = e.config
    return (t.tokens_per_program, t.cols_per_program, t.num_warps, t.split_width,
            f"table:{e.id}", {})


def _compile(entries: tuple[Entry[Tile], ...], header: object) -> Index:
    return Index(*launch_table.arch_trees(entries, INT_FIELDS, _hit))


SCHEMA: Schema[Tile] = launch_table.kernel_schema(
    "c128a", FIELDS, parse_config=_parse_tile, check_config=_check_tile,
    config_to_toml=_tile_toml, compile=_compile,
)

FILES = launch_table.TableFiles(SCHEMA, "tables/c128a.toml")
SHIPPED = FILES.shipped
make_table = FILES.make_table
load_table = FILES.load_table
loads_table = FILES.loads_table
shipped_table = FILES.shipped_table
render_table = FILES.render_table


__all__ = [
    "BASELINE_TILE", "FIELDS", "INT_FIELDS", "INT_MAX", "LEAF_SIZE", "MAX_BOXES", "MAX_DEPTH",
    "MAX_ELEMENTS_PER_THREAD", "SCHEMA", "WARPS", "CompileKey", "Index", "Split", "Tile",
    "load_table", "loads_table", "make_table", "render_table", "shipped_table", "tile_problems",
]
