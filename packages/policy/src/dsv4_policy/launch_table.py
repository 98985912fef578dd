"""The generic half of every kernel launch table: tiles, entry checks, the fast index.

A kernel's launch table (``tables/<kernel>.toml``) is a :class:`~dsv4_policy.table.Table`
whose entries choose a *tile* for a box of launch keys. Everything that does not depend
on which kernel it is lives here, once:

- the tile-value checks (powers of two, warp counts, the elements-per-thread limit);
- :func:`entry_problems`, the table-level rules every kernel entry must meet (run by
  each kernel schema's ``check_entry`` hook, so a new rule here applies to every
  registered kernel at once);
- the hot-path index (:class:`Split` trees of integer boxes, per arch);
- a flat tile as table data (:func:`tile_schema`: parsing ``[entry.launch]``, its
  errors, writing it back, building the index);
- rendering entries back to TOML, and reading and writing a kernel's tables
  (:class:`TableFiles`);
- a deployment's compile keys: the entries it cannot exclude (:func:`deployment_sources`),
  after its facts are checked (:func:`check_ints`);
- :class:`TileLaunches`, all of the above bound once for a kernel whose launch is its
  tile and a source, with one baseline launch;
- :class:`KernelSpec`, what a kernel hands to :mod:`dsv4_policy.registry`.

A kernel module (``dsv4_policy/kernels/<name>.py``) then only states its key fields,
its tile, its baseline, its resolver and its compile keys.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from itertools import product
from pathlib import Path
from typing import Any

from dsv4_policy import toml_out
from dsv4_policy.arch import ARCH_ACCEPTED, ARCH_PATTERN, arch_major
from dsv4_policy.conditions import INT_MAX, Condition, Range, contains, expand
from dsv4_policy.table import SCHEMA_VERSION, Entry, KeyField, Schema, Table, load, loads, what

WARPS = (1, 2, 4, 8, 16)
MAX_ELEMENTS_PER_THREAD = 128
"""Kernels refuse tiles above this many elements per thread: compile time and register
pressure grow past it (measured on an H200: ~8 s to compile at 128, minutes at 2048).
Checked here too, so a table can never hold a tile its kernel would reject."""
MAX_BOXES = 1024
"""An entry's sets may expand to at most this many (value-run) boxes in the fast index."""
LEAF_SIZE = 3
MAX_DEPTH = 4

ARCH_FIELD = KeyField("arch", str, pattern=ARCH_PATTERN, accepted=ARCH_ACCEPTED)
"""Every launch key's first field: the GPU's SM architecture name."""


# --------------------------------------------------------------------------- keys
def explain_key(
    key: object,
    fields: Iterable[KeyField],
    checks: Mapping[str, Callable[[int], str | None]] | None = None,
) -> None:
    """Raise ValueError naming the first invalid field of ``key`` and what it accepts.

    The slow path of every kernel's key constructor: the fast path is one expression,
    and only a failure pays for the explanation. ``checks`` adds a kernel's own rule
    for a field (a full message, or None when the value is fine)."""
    for f in fields:
        value = getattr(key, f.name)
        if f.type is str:
            try:
                arch_major(value)
            except ValueError as exc:
                raise ValueError(f"Key.{f.name}: {exc}") from None
        elif type(value) is not int:
            raise ValueError(f"Key.{f.name} must be an integer >= {f.minimum}; got {what(value)}")
        else:
            special = (checks or {}).get(f.name)
            problem = special(value) if special is not None else None
            if problem:
                raise ValueError(problem)
            problem = f.value_problem(value)
            if problem:
                raise ValueError(f"Key.{f.name}: {problem}")


# --------------------------------------------------------------------------- tile values
def power_of_two_problem(name: str, value: object, low: int, high: int) -> str | None:
    """Why ``value`` is not an integer power of two in ``low..high``, or None."""
    if type(value) is not int:
        return f"{name} must be an integer power of two in {low}..{high}; got {what(value)}"
    if not (low <= value <= high) or value & (value - 1):
        return f"{name} must be a power of two in {low}..{high}; got {value}"
    return None


def warps_problem(num_warps: object) -> str | None:
    """Why ``num_warps`` is not a warp count a tile may use, or None."""
    if type(num_warps) is not int or num_warps not in WARPS:
        return f"num_warps must be one of {', '.join(map(str, WARPS))}; got {what(num_warps)}"
    return None


def elements_problem(tokens_per_program: int, cols_per_program: int, num_warps: int) -> str | None:
    """Why a ``tokens x cols`` tile over ``num_warps`` warps is too large, or None."""
    limit = MAX_ELEMENTS_PER_THREAD * 32 * num_warps
    if tokens_per_program * cols_per_program <= limit:
        return None
    return (f"tokens_per_program * cols_per_program = {tokens_per_program * cols_per_program} "
            f"exceeds {MAX_ELEMENTS_PER_THREAD} elements per thread "
            f"({MAX_ELEMENTS_PER_THREAD} * 32 * num_warps = {limit}); use more warps or a "
            f"smaller tile")


def tile_shape_problems(
    tokens_per_program: object, cols_per_program: object, num_warps: object,
    *, min_cols: int, max_cols: int, max_tokens: int = 256,
) -> list[tuple[str, str]]:
    """``(field, message)`` for the tile fields every kernel shares: tokens (in
    1..``max_tokens``) and columns per program (powers of two), warps, and the
    elements-per-thread limit."""
    found = []
    problem = power_of_two_problem("tokens_per_program", tokens_per_program, 1, max_tokens)
    if problem:
        found.append(("tokens_per_program", problem))
    problem = power_of_two_problem("cols_per_program", cols_per_program, min_cols, max_cols)
    if problem:
        found.append(("cols_per_program", problem))
    problem = warps_problem(num_warps)
    if problem:
        found.append(("num_warps", problem))
    if not found:
        problem = elements_problem(tokens_per_program, cols_per_program,  # type: ignore[arg-type]
                                   num_warps)  # type: ignore[arg-type]
        if problem:
            found.append(("cols_per_program", problem))
    return found


# --------------------------------------------------------------------------- boxes
def runs(cond: Condition | None, minimum: int) -> tuple[tuple[int, int], ...]:
    """Like ``expand`` but merges consecutive set members into one span."""
    spans = list(expand(cond, minimum))
    merged: list[tuple[int, int]] = []
    for lo, hi in spans:
        if merged and merged[-1][1] + 1 >= lo:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def boxes(entry: Entry[Any], int_fields: tuple[KeyField, ...]) -> list[tuple[tuple[int, int], ...]]:
    """The entry's integer conditions as a list of boxes: one ``(lo, hi)`` per field."""
    spans = [runs(entry.match.get(f.name), f.minimum) for f in int_fields]
    return [tuple(choice) for choice in product(*spans)]


def box_count(entry: Entry[Any], int_fields: tuple[KeyField, ...]) -> int:
    count = 1
    for f in int_fields:
        count *= len(runs(entry.match.get(f.name), f.minimum))
    return count


def entry_problems(entry: Entry[Any], int_fields: tuple[KeyField, ...]) -> list[tuple[str, str]]:
    """``(field, message)`` for every table-level rule a kernel entry breaks.

    These rules hold for every registered kernel's table; a kernel schema's
    ``check_entry`` runs them (see :func:`kernel_schema`).
    """
    count = box_count(entry, int_fields)
    if count > MAX_BOXES:
        return [("match", f"its sets expand to {count} boxes (limit {MAX_BOXES}); "
                          "use ranges instead of long sets of non-consecutive values")]
    return []


MIN_WORST_SPEEDUP = 1.0
"""``dsv4-policy check`` refuses an entry whose measured worst ratio is below this."""


def provenance_problems(entry: Entry[Any]) -> list[tuple[str, str]]:
    """``(field, message)`` for every way an entry's evidence falls short.

    Every kernel entry must say how it was measured: ``probes``, the number of keys of
    its box that were timed against the baseline launch (a positive integer), and
    ``worst_speedup``, the smallest baseline/tile ratio among them, written like
    ``"1.04x"`` and at least ``MIN_WORST_SPEEDUP``. ``dsv4-policy check`` runs this for
    every registered kernel's table; loading does not, so that hand-made tables in tests
    and tools still load.
    """
    found = []
    probes = entry.provenance.get("probes")
    if type(probes) is not int or probes < 1:
        found.append(("provenance.probes",
                      f"expected the number of keys timed against the baseline (a positive "
                      f"integer); got {what(probes)}"))
    worst = entry.provenance.get("worst_speedup")
    ratio = None
    if isinstance(worst, str) and worst.endswith("x"):
        try:
            ratio = float(worst[:-1])
        except ValueError:
            ratio = None
    if ratio is None or ratio != ratio:
        found.append(("provenance.worst_speedup",
                      f"expected the worst measured ratio over the baseline, like \"1.04x\"; "
                      f"got {what(worst)}"))
    elif ratio < MIN_WORST_SPEEDUP:
        found.append(("provenance.worst_speedup",
                      f"{worst} is below {MIN_WORST_SPEEDUP}x: the entry is slower than the "
                      "baseline launch at some key of its box; drop it or re-tune"))
    return found


# --------------------------------------------------------------------------- the index
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


def split(found: list[tuple], int_fields: tuple[KeyField, ...], depth: int = 0) -> object:
    """Boxes as a tree of :class:`Split` nodes with short tuples of boxes as leaves.

    Each box is ``(lo, hi)`` pairs for ``int_fields`` flattened, then anything. At each
    node, the field whose intervals leave the fewest boxes in the worst case is chosen;
    a node stops splitting when it is small or no field helps.
    """
    if len(found) <= LEAF_SIZE or depth >= MAX_DEPTH:
        return tuple(found)
    best = None
    for i, f in enumerate(int_fields):
        edges = {f.minimum}
        for box in found:
            lo, hi = box[2 * i], box[2 * i + 1]
            edges.add(lo)
            if hi < INT_MAX:
                edges.add(hi + 1)
        cuts = sorted(edges)
        groups = [[b for b in found if b[2 * i] <= cut <= b[2 * i + 1]] for cut in cuts]
        score = (max(len(g) for g in groups), sum(len(g) for g in groups))
        if score[0] < len(found) and (best is None or score < best[0]):
            best = (score, f.name, cuts, groups)
    if best is None:
        return tuple(found)
    _, name, cuts, groups = best
    return Split(name, cuts, [split(g, int_fields, depth + 1) for g in groups])


def arch_trees(
    entries: Iterable[Entry[Any]], int_fields: tuple[KeyField, ...],
    hit_of: Callable[[Entry[Any]], tuple],
) -> tuple[dict[str, object], object]:
    """Per named arch (and for every other arch) the :class:`Split` tree of boxes.

    Each box is the flattened ``(lo, hi)`` pairs followed by ``hit_of(entry)``.
    """
    entries = tuple(entries)
    named: set[str] = set()
    for e in entries:
        arch = e.match.get("arch")
        if isinstance(arch, frozenset):
            named.update(arch)  # type: ignore[arg-type]
    by_arch: dict[str, list[tuple]] = {a: [] for a in sorted(named)}
    other: list[tuple] = []
    for e in entries:
        hit = hit_of(e)
        found = [(*(bound for span in box for bound in span), hit)
                 for box in boxes(e, int_fields)]
        arch = e.match.get("arch")
        targets = list(by_arch) if arch is None else [a for a in by_arch if a in arch]
        for a in targets:
            by_arch[a].extend(found)
        if arch is None:
            other.extend(found)
    return {a: split(b, int_fields) for a, b in by_arch.items()}, split(other, int_fields)


# --------------------------------------------------------------------------- schema and I/O
def kernel_schema(
    name: str, fields: tuple[KeyField, ...], *, parse_config: Callable[..., Any],
    check_config: Callable[[object], list[tuple[str, str]]],
    config_to_toml: Callable[[Any], dict[str, object]],
    compile: Callable[[tuple[Entry[Any], ...], object], object],
) -> Schema[Any]:
    """The :class:`Schema` of a kernel launch table: a ``[entry.launch]`` tile section,
    and the generic :func:`entry_problems` as its entry check."""
    int_fields = tuple(f for f in fields if f.type is int)

    def check_entry(entry: Entry[Any], header: object) -> list[tuple[str, str]]:
        return entry_problems(entry, int_fields)

    return Schema(name=name, fields=fields, config_section="launch", parse_config=parse_config,
                  check_config=check_config, config_to_toml=config_to_toml,
                  check_entry=check_entry, compile=compile)


def condition_toml(cond: Condition) -> object:
    """A normalized condition as the TOML value that loads back to it."""
    if isinstance(cond, Range):
        bounds: dict[str, int] = {"min": cond.min}
        if cond.max is not None:
            bounds["max"] = cond.max
        return bounds
    values = sorted(cond)
    return values[0] if len(values) == 1 else values


def render(table: Table[Any], header_comment: str = "") -> str:
    """TOML text for a validated kernel table; it loads back to equal entries."""
    schema = table.schema
    assert schema.config_to_toml is not None
    lines = toml_out.comment(header_comment)
    if lines:
        lines.append("")
    lines.append(f"schema = {SCHEMA_VERSION}")
    for e in table.entries:
        lines += ["", "[[entry]]", f"id = {toml_out.string(e.id)}"]
        match = {f.name: condition_toml(e.match[f.name]) for f in schema.fields
                 if f.name in e.match}
        if match:
            lines += ["", *toml_out.table("[entry.match]", match)]
        lines += ["", *toml_out.table("[entry.launch]", schema.config_to_toml(e.config))]
        if e.provenance:
            lines += ["", *toml_out.table("[entry.provenance]", e.provenance)]
    return "\n".join(lines) + "\n"


def load_shipped(path: str, schema: Schema[Any]) -> Table[Any]:
    """The table file ``path`` (relative to the ``dsv4_policy`` package), validated."""
    ref = resources.files("dsv4_policy").joinpath(path)
    return loads(ref.read_text(encoding="utf-8"), schema, source=str(ref))


class TableFiles:
    """Reading and writing one kernel's tables: bound once to its schema and shipped file,
    so that each kernel module exposes ``make_table``, ``load_table``, ``loads_table``,
    ``shipped_table`` and ``render_table`` without writing them again."""

    def __init__(self, schema: Schema[Any], shipped: str) -> None:
        self.schema = schema
        self.shipped = shipped
        self._shipped: Table[Any] | None = None

    def make_table(self, entries: Iterable[Entry[Any]] = (),
                   source: str = "<memory>") -> Table[Any]:
        """A validated table built in code (raises TableError on any problem)."""
        return Table(self.schema, entries, source=source)

    def load_table(self, path: str | Path) -> Table[Any]:
        """Read and validate a table file."""
        return load(path, self.schema)

    def loads_table(self, text: str, source: str = "<string>") -> Table[Any]:
        """Parse and validate table text."""
        return loads(text, self.schema, source)

    def shipped_table(self) -> Table[Any]:
        """The table shipped inside the package, read once and kept."""
        if self._shipped is None:
            self._shipped = load_shipped(self.shipped, self.schema)
        return self._shipped

    def render_table(self, entries: Iterable[Entry[Any]], header_comment: str = "") -> str:
        """Table TOML text for ``entries``; it loads back to equal entries. The entries are
        validated first (TableError on any problem), so a tuner can never write a table
        that the loader would refuse."""
        return render(self.make_table(entries, source="<render_table>"), header_comment)

    def spec_fields(self) -> dict[str, Any]:
        """The :class:`KernelSpec` fields these files answer: ``KernelSpec(**files.spec_fields(),
        name=..., ...)`` states a kernel's table once."""
        return {"schema": self.schema, "table_file": self.shipped,
                "shipped_table": self.shipped_table, "load_table": self.load_table,
                "loads_table": self.loads_table, "make_table": self.make_table,
                "render_table": self.render_table}


# --------------------------------------------------------------------------- tiles as table data
@dataclass(frozen=True)
class Index:
    """Entries laid out for the hot path: per arch, a :class:`Split` tree over the boxes.

    Each box is ``(lo, hi)`` pairs for the kernel's integer key fields, flattened,
    followed by its hit (whatever the kernel's ``hit`` function made of the entry).
    Each kernel subclasses it, so that its ``resolve`` tells its own tables from
    another kernel's by one type check.
    """

    by_arch: Mapping[str, object]
    other: object


def candidates(index: Index, key: Any) -> tuple:
    """The boxes of ``index`` that can match ``key``: its arch's tree (or the one for every
    other arch), walked down by one ``bisect`` per level. Each kernel's ``resolve`` then
    checks these few boxes field by field."""
    boxes = index.by_arch.get(key.arch, index.other)
    while type(boxes) is Split:
        boxes = boxes.children[bisect_right(boxes.cuts, getattr(key, boxes.name)) - 1]
    return boxes  # type: ignore[return-value]


def index_of(table: object, index_type: type[Index], label: str) -> Index:
    """``table``'s compiled index, or TypeError when it is not a ``label`` launch table."""
    index = getattr(table, "compiled", None)
    if type(index) is not index_type:
        raise TypeError(f"expected {label} launch table, got {table!r}")
    return index


def refuse_tile(found: list[tuple[str, str]]) -> None:
    """Raise ValueError listing every problem of a tile built in code (none: return)."""
    if found:
        raise ValueError("invalid Tile: " + "; ".join(message for _, message in found))


def tile_schema(
    name: str, fields: tuple[KeyField, ...], *, tile_type: type, tile_fields: tuple[str, ...],
    tile_problems: Callable[..., list[tuple[str, str]]], index_type: type[Index],
    hit: Callable[[Entry[Any]], tuple], unknown_hint: Callable[[str], str] = lambda field: "",
    tile_defaults: Mapping[str, object] | None = None,
) -> Schema[Any]:
    """The :func:`kernel_schema` of a kernel whose ``[entry.launch]`` is a flat tile.

    ``tile_fields`` are the tile's TOML keys, in ``tile_type``'s argument order;
    ``tile_problems(*values)`` checks them; ``hit(entry)`` is what a box of the index
    carries, and ``unknown_hint(field)`` what an unknown launch field's message adds.
    A field of ``tile_defaults`` may be left out of a file and takes its default there
    (a field added to a tile later, so that tables written before it still load); a
    written table always spells every field.
    """
    defaults = dict(tile_defaults or {})
    int_fields = tuple(f for f in fields if f.type is int)
    given = (", ".join(tile_fields[:-1]) + " and " + tile_fields[-1] if len(tile_fields) > 1
             else tile_fields[0])

    def parse(raw: Mapping[str, object], report: Callable[[str, str], None]) -> Any:
        extra = [k for k in raw if k not in tile_fields]
        for field in extra:
            report(field, f"unknown field {field!r}; accepted: {', '.join(tile_fields)}"
                          f"{unknown_hint(field)}")
        missing = [k for k in tile_fields if k not in raw and k not in defaults]
        for field in missing:
            report(field, f"missing; a launch gives {given}")
        if extra or missing:
            return None
        values = [raw[k] if k in raw else defaults[k] for k in tile_fields]
        found = tile_problems(*values)
        for field, message in found:
            report(field, message)
        return None if found else tile_type(*values)

    def check(config: object) -> list[tuple[str, str]]:
        if not isinstance(config, tile_type):
            return [("tile", f"a {name} entry's config must be a {name} Tile; "
                             f"got {what(config)}")]
        return []

    def to_toml(tile: Any) -> dict[str, object]:
        return {field: getattr(tile, field) for field in tile_fields}

    def compile_index(entries: tuple[Entry[Any], ...], header: object) -> Index:
        return index_type(*arch_trees(entries, int_fields, hit))

    return kernel_schema(name, fields, parse_config=parse, check_config=check,
                         config_to_toml=to_toml, compile=compile_index)


# --------------------------------------------------------------------------- deployments
def check_ints(*values: tuple[str, object, int]) -> None:
    """Raise ValueError for the first ``(name, value, low)`` whose value is not an integer
    in ``low..2**63-1``: the check of every deployment fact a kernel's warm-up takes."""
    for name, value, low in values:
        if type(value) is not int or not low <= value <= INT_MAX:
            raise ValueError(f"{name} must be an integer >= {low}; got {what(value)}")


def deployment_sources(
    baseline: Iterable[tuple], entries: Iterable[Entry[Any]],
    given: Iterable[tuple[str, object]], compile_key: Callable[[Any], tuple],
) -> dict[tuple, tuple[str, ...]]:
    """The compile keys a deployment can use, each with its sources, in order found.

    Every key of ``baseline`` comes from ``"baseline"``; then ``compile_key(entry.config)``
    of each entry comes from ``"table:<id>"`` unless the entry's match excludes one of the
    deployment's ``given`` ``(field, value)`` pairs. Every other key field varies from
    call to call, so the result may be a superset, which is safe for warm-up (one binary
    too many costs start-up time, never correctness).
    """
    given = tuple(given)
    found: dict[tuple, list[str]] = {key: ["baseline"] for key in baseline}
    for e in entries:
        m = e.match
        if any(m.get(name) is not None and not contains(m[name], value)
               for name, value in given):
            continue
        sources = found.setdefault(compile_key(e.config), [])
        if f"table:{e.id}" not in sources:
            sources.append(f"table:{e.id}")
    return {k: tuple(v) for k, v in found.items()}


# --------------------------------------------------------------------------- flat-tile kernels
class TileLaunches:
    """The table machinery of a kernel whose launch is its tile and a source.

    For a kernel whose ``launch_type`` takes the ``tile_fields`` of its tile, in order,
    then a ``source`` string, and whose baseline is one shared launch of
    ``baseline_tile``: its :func:`tile_schema` (each box's hit is ``(launch,)``, the
    entry's tile as one shared ``launch_type`` of source ``"table:<entry id>"``), its
    :class:`TableFiles` (``tables/<name>.toml``), the check that a table is one of its
    own (:meth:`index`), and the compile keys a deployment can use
    (:meth:`compile_key_sources`). ``baseline`` is the baseline's launch (source
    ``"baseline"``), the same object always. The kernel module keeps its key, its tile,
    its launch, its index type and its ``resolve``.
    """

    def __init__(
        self, name: str, fields: tuple[KeyField, ...], *, tile_type: type,
        tile_fields: tuple[str, ...], tile_problems: Callable[..., list[tuple[str, str]]],
        launch_type: type, baseline_tile: Any, index_type: type[Index], label: str,
        unknown_hint: Callable[[str], str] = lambda field: "",
        tile_defaults: Mapping[str, object] | None = None,
    ) -> None:
        self.tile_type = tile_type
        self.tile_fields = tile_fields
        self.launch_type = launch_type
        self.baseline_tile = baseline_tile
        self.index_type = index_type
        self.label = label
        self.baseline = launch_type(*self.tile_key(baseline_tile), "baseline")

        def hit(e: Entry[Any]) -> tuple:
            return (launch_type(*self.tile_key(e.config), f"table:{e.id}"),)

        self.schema = tile_schema(
            name, fields, tile_type=tile_type, tile_fields=tile_fields,
            tile_problems=tile_problems, index_type=index_type, hit=hit,
            unknown_hint=unknown_hint, tile_defaults=tile_defaults)
        self.files = TableFiles(self.schema, f"tables/{name}.toml")

    def tile_key(self, tile: Any) -> tuple:
        """A tile's compile key: its ``tile_fields``, in order."""
        return tuple(getattr(tile, field) for field in self.tile_fields)

    def index(self, table: object) -> Index:
        """``table``'s compiled index, or TypeError when it is not one of this kernel's
        launch tables."""
        return index_of(table, self.index_type, self.label)

    def compile_key_sources(
        self, table: Table[Any] | None, arch: str, *facts: tuple[str, object, int],
    ) -> dict[tuple, tuple[str, ...]]:
        """Every compile key the kernel's ``resolve`` can produce for a deployment, with
        its sources.

        ``table`` None means the shipped table. The baseline tile's key is always there;
        an entry's tile counts unless its match excludes ``arch`` or one of the
        deployment's ``facts``, ``(field, value, low)`` each, whose values are checked
        first (:func:`check_ints`). See :func:`deployment_sources`.
        """
        table = self.files.shipped_table() if table is None else table
        self.index(table)
        arch_major(arch)
        check_ints(*facts)
        return deployment_sources(
            [self.tile_key(self.baseline_tile)], table.entries,
            (("arch", arch), *((name, value) for name, value, _ in facts)), self.tile_key)

    def spec_fields(self) -> dict[str, Any]:
        """The :class:`KernelSpec` fields this machinery answers: the table's
        (:meth:`TableFiles.spec_fields`), the launch and tile types, the baseline tile
        and the compile key's fields."""
        return {**self.files.spec_fields(), "launch_type": self.launch_type,
                "tile_type": self.tile_type, "baseline_tile": self.baseline_tile,
                "compile_key_fields": self.tile_fields}


# --------------------------------------------------------------------------- registration
@dataclass(frozen=True)
class DeploymentParam:
    """One fact about a deployment that narrows the compile keys it can need."""

    name: str
    help: str
    minimum: int
    default: int | None = None  # None: required


@dataclass(frozen=True)
class KernelSpec:
    """Everything the generic machinery needs to know about one kernel's launches.

    ``resolve(key, table)`` and ``baseline(key)`` return the kernel's ``launch_type``;
    ``compile_key_sources(table, arch, **deployment)`` maps each compile key a
    deployment can use to the sources (``"baseline"``, ``"table:<id>"``) behind it.
    ``deployment_of(key)`` is a deployment whose compile keys cover ``key``'s launch
    (None when no deployment makes that call). ``key_defaults`` gives the command
    line's default per key field (None: required); ``describe(key)`` the extra
    ``(name, value)`` rows the command line prints.
    """

    name: str
    summary: str
    schema: Schema[Any]
    key_type: type
    launch_type: type
    tile_type: type
    baseline_tile: Any
    baseline: Callable[[Any], Any]
    resolve: Callable[[Any, Any], Any]
    table_file: str
    shipped_table: Callable[[], Table[Any]]
    load_table: Callable[[Any], Table[Any]]
    loads_table: Callable[..., Table[Any]]
    make_table: Callable[..., Table[Any]]
    render_table: Callable[..., str]
    compile_key_fields: tuple[str, ...]
    compile_key_sources: Callable[..., dict[tuple[int, ...], tuple[str, ...]]]
    deployment: tuple[DeploymentParam, ...]
    deployment_of: Callable[[Any], dict[str, int] | None]
    key_defaults: Mapping[str, int | str | None]
    key_help: Mapping[str, str]
    describe: Callable[[Any], list[tuple[str, object]]]

    def compile_keys(self, table: Table[Any] | None, arch: str, **deployment: int
                     ) -> frozenset[tuple[int, ...]]:
        """The finite set of compile keys to warm for a deployment."""
        return frozenset(self.compile_key_sources(table, arch, **deployment))


__all__ = [
    "ARCH_FIELD", "LEAF_SIZE", "MAX_BOXES", "MAX_DEPTH", "MAX_ELEMENTS_PER_THREAD", "WARPS",
    "DeploymentParam", "Index", "KernelSpec", "Split", "TableFiles", "TileLaunches", "arch_trees",
    "box_count", "boxes", "candidates", "check_ints", "condition_toml", "deployment_sources",
    "elements_problem", "entry_problems", "index_of",
    "kernel_schema", "load_shipped", "power_of_two_problem", "refuse_tile", "render", "runs",
    "split", "tile_schema", "warps_problem",
]
