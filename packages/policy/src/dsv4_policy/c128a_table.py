"""The C128A launch table: its schema, its tile config, and reading and writing it.

An entry may only choose the *tile* of the C128A metadata kernel (tokens per program,
columns per program, warps, whether a row's width is split across programs). The
width, the capacity row stride and the decode view width always follow the
baseline formula, so no table can ever change the row stride that CUDA graphs
captured. The shipped table lives in ``dsv4_policy/tables/c128a.toml``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from itertools import product
from pathlib import Path

from dsv4_policy import toml_out
from dsv4_policy.arch import ARCH_ACCEPTED, ARCH_PATTERN
from dsv4_policy.conditions import INT_MAX, Condition, Range, expand
from dsv4_policy.table import (
    SCHEMA_VERSION,
    Entry,
    KeyField,
    Schema,
    Table,
    load,
    loads,
    what,
)

CompileKey = tuple[int, int, int]
TILE_FIELDS = ("tokens_per_program", "cols_per_program", "num_warps", "split_width")
WARPS = (1, 2, 4, 8, 16)
MAX_ELEMENTS_PER_THREAD = 128
"""The kernel refuses tiles above this many elements per thread: compile time and
register pressure grow past it (measured on an H200: ~8 s to compile at 128, minutes at
2048). Checked here too, so a table can never hold a tile the kernel would reject."""
MAX_BOXES = 1024
"""An entry's sets may expand to at most this many (value-run) boxes in the fast index."""


def _power_of_two_problem(name: str, value: object, low: int, high: int) -> str | None:
    if type(value) is not int:
        return f"{name} must be an integer power of two in {low}..{high}; got {what(value)}"
    if not (low <= value <= high) or value & (value - 1):
        return f"{name} must be a power of two in {low}..{high}; got {value}"
    return None


def tile_problems(
    tokens_per_program: object, cols_per_program: object, num_warps: object, split_width: object,
) -> list[tuple[str, str]]:
    """``(field, message)`` for every invalid tile field; empty when the tile is valid."""
    found = []
    problem = _power_of_two_problem("tokens_per_program", tokens_per_program, 1, 256)
    if problem:
        found.append(("tokens_per_program", problem))
    problem = _power_of_two_problem("cols_per_program", cols_per_program, 128, 8192)
    if problem:
        found.append(("cols_per_program", problem))
    if type(num_warps) is not int or num_warps not in WARPS:
        found.append(("num_warps", f"num_warps must be one of {', '.join(map(str, WARPS))}; "
                                   f"got {what(num_warps)}"))
    if not found and tokens_per_program * cols_per_program > (  # type: ignore[operator]
        MAX_ELEMENTS_PER_THREAD * 32 * num_warps  # type: ignore[operator]
    ):
        found.append(("cols_per_program",
                      f"tokens_per_program * cols_per_program = "
                      f"{tokens_per_program * cols_per_program} exceeds "  # type: ignore[operator]
                      f"{MAX_ELEMENTS_PER_THREAD} elements per thread "
                      f"({MAX_ELEMENTS_PER_THREAD} * 32 * num_warps = "
                      f"{MAX_ELEMENTS_PER_THREAD * 32 * num_warps}); use more warps or a "  # type: ignore[operator]
                      f"smaller tile"))
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


def _boxes(entry: Entry[Tile]) -> list[tuple[tuple[int, int], ...]]:
    spans = [_runs(entry.match.get(f.name), f.minimum) for f in INT_FIELDS]
    return [tuple(choice) for choice in product(*spans)]


def _runs(cond: Condition | None, minimum: int) -> tuple[tuple[int, int], ...]:
    """Like ``expand`` but merges consecutive set members into one span."""
    spans = list(expand(cond, minimum))
    merged: list[tuple[int, int]] = []
    for lo, hi in spans:
        if merged and merged[-1][1] + 1 >= lo:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def _box_count(entry: Entry[Tile]) -> int:
    count = 1
    for f in INT_FIELDS:
        count *= len(_runs(entry.match.get(f.name), f.minimum))
    return count


def _check_entry(entry: Entry[Tile], header: object) -> list[tuple[str, str]]:
    count = _box_count(entry)
    if count > MAX_BOXES:
        return [("match", f"its sets expand to {count} boxes (limit {MAX_BOXES}); "
                          "use ranges instead of long sets of non-consecutive values")]
    return []


class Split:
    """An inner node of the hot-path index: boxes sorted into intervals of one field.

    ``cuts`` starts at the field's smallest value and holds every box edge on that
    field, so each interval ``[cuts[i], cuts[i+1])`` lies wholly inside or wholly
    outside every box's span: ``children[i]`` holds exactly the boxes that can match a
    value there. A lookup is one ``bisect`` per level instead of a scan of all boxes.
    """

    __slots__ = ("children", "cuts", "name")

    def __init__(self, name: str, cuts: list[int], children: list[object]) -> None:
        self.name = name
        self.cuts = cuts
        self.children = children


LEAF_SIZE = 3
MAX_DEPTH = 4


def _split(boxes: list[tuple], depth: int = 0) -> object:
    """Boxes as a tree of :class:`Split` nodes with short tuples of boxes as leaves.

    At each node, the field whose intervals leave the fewest boxes in the worst case
    is chosen; a node stops splitting when it is small or no field helps.
    """
    if len(boxes) <= LEAF_SIZE or depth >= MAX_DEPTH:
        return tuple(boxes)
    best = None
    for i, f in enumerate(INT_FIELDS):
        edges = {f.minimum}
        for box in boxes:
            lo, hi = box[2 * i], box[2 * i + 1]
            edges.add(lo)
            if hi < INT_MAX:
                edges.add(hi + 1)
        cuts = sorted(edges)
        groups = [[b for b in boxes if b[2 * i] <= cut <= b[2 * i + 1]] for cut in cuts]
        score = (max(len(g) for g in groups), sum(len(g) for g in groups))
        if score[0] < len(boxes) and (best is None or score < best[0]):
            best = (score, f.name, cuts, groups)
    if best is None:
        return tuple(boxes)
    _, name, cuts, groups = best
    return Split(name, cuts, [_split(g, depth + 1) for g in groups])


@dataclass(frozen=True)
class Index:
    """Entries laid out for the hot path: per arch, a :class:`Split` tree over the boxes.

    Each box is ``(lo, hi)`` pairs for the six integer key fields in ``INT_FIELDS``
    order, flattened, followed by the hit ``(tile fields..., source, launch cache)``.
    """

    by_arch: Mapping[str, object]
    other: object


def _compile(entries: tuple[Entry[Tile], ...], header: object) -> Index:
    named: set[str] = set()
    for e in entries:
        arch = e.match.get("arch")
        if isinstance(arch, frozenset):
            named.update(arch)  # type: ignore[arg-type]
    by_arch: dict[str, list[tuple]] = {a: [] for a in sorted(named)}
    other: list[tuple] = []
    for e in entries:
        t = e.config
        hit = (t.tokens_per_program, t.cols_per_program, t.num_warps, t.split_width,
               f"table:{e.id}", {})
        boxes = [(*(bound for span in box for bound in span), hit) for box in _boxes(e)]
        arch = e.match.get("arch")
        targets = list(by_arch) if arch is None else [a for a in by_arch if a in arch]
        for a in targets:
            by_arch[a].extend(boxes)
        if arch is None:
            other.extend(boxes)
    return Index({a: _split(b) for a, b in by_arch.items()}, _split(other))


SCHEMA: Schema[Tile] = Schema(
    name="c128a",
    fields=FIELDS,
    config_section="launch",
    parse_config=_parse_tile,
    check_config=_check_tile,
    config_to_toml=_tile_toml,
    check_entry=_check_entry,
    compile=_compile,
)

SHIPPED = "tables/c128a.toml"


def make_table(entries: Iterable[Entry[Tile]] = (), source: str = "<memory>") -> Table[Tile]:
    """A validated C128A table built in code (raises TableError on any problem)."""
    return Table(SCHEMA, entries, source=source)


def load_table(path: str | Path) -> Table[Tile]:
    """Read and validate a C128A table file."""
    return load(path, SCHEMA)


def loads_table(text: str, source: str = "<string>") -> Table[Tile]:
    """Parse and validate C128A table text."""
    return loads(text, SCHEMA, source)


@functools.cache
def shipped_table() -> Table[Tile]:
    """The table shipped inside the package (``dsv4_policy/tables/c128a.toml``), cached."""
    ref = resources.files("dsv4_policy").joinpath(SHIPPED)
    return loads(ref.read_text(encoding="utf-8"), SCHEMA, source=str(ref))


def _condition_toml(cond: Condition) -> object:
    if isinstance(cond, Range):
        bounds: dict[str, int] = {"min": cond.min}
        if cond.max is not None:
            bounds["max"] = cond.max
        return bounds
    values = sorted(cond)
    return values[0] if len(values) == 1 else values


def render_table(entries: Iterable[Entry[Tile]], header_comment: str = "") -> str:
    """C128A table TOML text for ``entries``; it loads back to equal entries.

    The entries are validated first (TableError on any problem), so a tuner can never
    write a table that the loader would refuse.
    """
    table = make_table(entries, source="<render_table>")
    lines = toml_out.comment(header_comment)
    if lines:
        lines.append("")
    lines.append(f"schema = {SCHEMA_VERSION}")
    for e in table.entries:
        lines += ["", "[[entry]]", f"id = {toml_out.string(e.id)}"]
        match = {f.name: _condition_toml(e.match[f.name]) for f in FIELDS if f.name in e.match}
        if match:
            lines += ["", *toml_out.table("[entry.match]", match)]
        lines += ["", *toml_out.table("[entry.launch]", _tile_toml(e.config))]
        if e.provenance:
            lines += ["", *toml_out.table("[entry.provenance]", e.provenance)]
    return "\n".join(lines) + "\n"


__all__ = [
    "BASELINE_TILE", "FIELDS", "INT_FIELDS", "INT_MAX", "SCHEMA", "CompileKey", "Index", "Split",
    "Tile",
    "load_table", "loads_table", "make_table", "render_table", "shipped_table", "tile_problems",
]
