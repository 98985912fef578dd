"""The SWA launch table: its schema, its tile config, and reading and writing it.

An entry chooses only the *tile* of the SWA indices-and-lens kernel (tokens per
program, index columns per program, warps). What the kernel writes (the window, the
row stride, ``index_width``) always comes from the call itself, so no table can change
an output. The shipped table lives in ``dsv4_policy/tables/swa.toml``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dsv4_policy import launch_table
from dsv4_policy.arch import ARCH_ACCEPTED, ARCH_PATTERN
from dsv4_policy.launch_table import tile_shape_problems
from dsv4_policy.table import Entry, KeyField, Schema, what

CompileKey = tuple[int, int, int, int]
"""(tokens_per_program, cols_per_program, num_warps, has_image): what selects one binary."""
TILE_FIELDS = ("tokens_per_program", "cols_per_program", "num_warps")
MIN_COLS = 16
MAX_COLS = 8192


def tile_problems(
    tokens_per_program: object, cols_per_program: object, num_warps: object,
) -> list[tuple[str, str]]:
    """``(field, message)`` for every invalid tile field; empty when the tile is valid."""
    found = tile_shape_problems(tokens_per_program, cols_per_program, num_warps,
                                min_cols=MIN_COLS, max_cols=MAX_COLS)
    return found


@dataclass(frozen=True)
class Tile:
    """The tile an entry chooses: a ``tokens_per_program x cols_per_program`` block of
    output per step of a program's loop over the row, on ``num_warps`` warps."""

    tokens_per_program: int
    cols_per_program: int
    num_warps: int

    def __post_init__(self) -> None:
        found = tile_problems(self.tokens_per_program, self.cols_per_program, self.num_warps)
        if found:
            raise ValueError("invalid Tile: " + "; ".join(message for _, message in found))


BASELINE_TILE = Tile(1, 1024, 4)
"""vLLM 0.33.0's launch: one token per program, 1024 lanes, 4 warps."""

FIELDS = (
    KeyField("arch", str, pattern=ARCH_PATTERN, accepted=ARCH_ACCEPTED),
    KeyField("window_size", int, minimum=1),
    KeyField("index_width", int, minimum=1),
    KeyField("block_size", int, minimum=1),
    KeyField("has_image", int, minimum=0),
    KeyField("num_tokens", int, minimum=0),
)
INT_FIELDS = tuple(f for f in FIELDS if f.type is int)


def _parse_tile(raw: Mapping[str, object], report: Callable[[str, str], None]) -> Tile | None:
    extra = [k for k in raw if k not in TILE_FIELDS]
    for name in extra:
        report(name, f"unknown field {name!r}; accepted: {', '.join(TILE_FIELDS)} (an SWA "
                     "entry sets only its tile; the window and row stride come from the call)")
    missing = [k for k in TILE_FIELDS if k not in raw]
    for name in missing:
        report(name, "missing; a launch gives tokens_per_program, cols_per_program and num_warps")
    if extra or missing:
        return None
    found = tile_problems(*(raw[k] for k in TILE_FIELDS))
    for name, message in found:
        report(name, message)
    return None if found else Tile(*(raw[k] for k in TILE_FIELDS))  # type: ignore[arg-type]


def _check_tile(config: object) -> list[tuple[str, str]]:
    if not isinstance(config, Tile):
        return [("tile", f"an SWA entry's config must be an swa.Tile; got {what(config)}")]
    return []


def _tile_toml(tile: Tile) -> dict[str, object]:
    return {name: getattr(tile, name) for name in TILE_FIELDS}


@dataclass(frozen=True)
class Index:
    """Entries laid out for the hot path: per arch, a Split tree over the boxes.

    Each box is ``(lo, hi)`` pairs for ``INT_FIELDS`` flattened, followed by the hit:
    the entry's two launches, without and with ``has_image``.
    """

    by_arch: Mapping[str, object]
    other: object


def _compile(entries: tuple[Entry[Tile], ...], header: object) -> Index:
    from dsv4_policy.swa import Launch

    def hit(e: Entry[Tile]) -> tuple:
        t = e.config
        return tuple(Launch(t.tokens_per_program, t.cols_per_program, t.num_warps, image,
                            f"table:{e.id}") for image in (False, True))

    return Index(*launch_table.arch_trees(entries, INT_FIELDS, hit))


SCHEMA: Schema[Tile] = launch_table.kernel_schema(
    "swa", FIELDS, parse_config=_parse_tile, check_config=_check_tile,
    config_to_toml=_tile_toml, compile=_compile,
)
FILES = launch_table.TableFiles(SCHEMA, "tables/swa.toml")
SHIPPED = FILES.shipped
make_table = FILES.make_table
load_table = FILES.load_table
loads_table = FILES.loads_table
shipped_table = FILES.shipped_table
render_table = FILES.render_table


__all__ = [
    "BASELINE_TILE", "FIELDS", "INT_FIELDS", "SCHEMA", "SHIPPED", "CompileKey", "Index", "Tile",
    "load_table", "loads_table", "make_table", "render_table", "shipped_table", "tile_problems",
]
