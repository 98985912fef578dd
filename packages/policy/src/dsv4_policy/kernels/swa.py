"""SWA indices-and-lens launches: the baseline and the table-driven resolver.

Every model step, DeepSeek-V4's sliding-window (SWA) metadata builder writes, for each
decode token and again for each prefill token, the paged slot ids of the token's
window (``index_width`` columns per row) and the window's length. vLLM 0.33.0 runs one
program per token with 1024 lanes, however narrow the window (128 for DeepSeek-V4).
This module decides how the kernel is launched for one call (:class:`Key`):

- :func:`baseline` is exactly vLLM 0.33.0's launch: 1 token per program, 1024 lanes,
  4 warps.
- :func:`resolve` returns a table entry's tile on a hit, else the baseline unchanged.
- :func:`compile_key_sources` lists every binary a deployment can need, so a server
  compiles them all at start-up instead of mid-serving.

Nothing here changes what is written: the window, ``index_width`` and the buffer's row
stride always come from the call. The shipped table is ``dsv4_policy/tables/swa.toml``.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsv4_policy import launch_table
from dsv4_policy.arch import _MAJOR, arch_major
from dsv4_policy.conditions import INT_MAX, Range, contains
from dsv4_policy.launch_table import DeploymentParam, KernelSpec, tile_shape_problems
from dsv4_policy.launch_table import candidates as _candidates
from dsv4_policy.table import Entry, KeyField, Schema, Table, TableError

CompileKey = tuple[int, int, int, int]
"""(tokens_per_program, cols_per_program, num_warps, has_image): what selects one binary."""
TILE_FIELDS = ("tokens_per_program", "cols_per_program", "num_warps")
MIN_COLS = 16
MAX_COLS = 8192


def tile_problems(
    tokens_per_program: object, cols_per_program: object, num_warps: object,
) -> list[tuple[str, str]]:
    """``(field, message)`` for every invalid tile field; empty when the tile is valid."""
    return tile_shape_problems(tokens_per_program, cols_per_program, num_warps,
                               min_cols=MIN_COLS, max_cols=MAX_COLS)


@dataclass(frozen=True)
class Tile:
    """The tile an entry chooses: a ``tokens_per_program x cols_per_program`` block of
    output per step of a program's loop over the row, on ``num_warps`` warps. What the
    kernel writes (the window, the row stride, ``index_width``) always comes from the
    call itself, so no table can change an output."""

    tokens_per_program: int
    cols_per_program: int
    num_warps: int

    def __post_init__(self) -> None:
        launch_table.refuse_tile(tile_problems(self.tokens_per_program, self.cols_per_program,
                                               self.num_warps))


BASELINE_TILE = Tile(1, 1024, 4)
"""vLLM 0.33.0's launch: one token per program, 1024 lanes, 4 warps."""

FIELDS = (
    launch_table.ARCH_FIELD,
    KeyField("window_size", int, minimum=1),
    KeyField("index_width", int, minimum=1),
    KeyField("block_size", int, minimum=1),
    KeyField("has_image", int, minimum=0),
    KeyField("num_tokens", int, minimum=0),
)
INT_FIELDS = tuple(f for f in FIELDS if f.type is int)

_set = object.__setattr__


@dataclass(frozen=True, init=False)
class Key:
    """What one SWA kernel call's launch depends on.

    ``index_width`` is the columns written per row (the window for decode rows,
    window + image tokens for a vision model's prefill rows), ``has_image`` 1 when the
    call widens windows by in-image visibility, ``num_tokens`` the rows of the call.
    Values are checked on construction, so a bad one fails here with a message.
    """

    arch: str
    window_size: int
    index_width: int
    block_size: int
    has_image: int
    num_tokens: int

    def __init__(self, arch: str, window_size: int, index_width: int, block_size: int,
                 has_image: int, num_tokens: int) -> None:
        _set(self, "__dict__", {
            "arch": arch, "window_size": window_size, "index_width": index_width,
            "block_size": block_size, "has_image": has_image, "num_tokens": num_tokens,
        })
        if not (
            type(window_size) is int and 1 <= window_size <= INT_MAX
            and type(index_width) is int and 1 <= index_width <= INT_MAX
            and type(block_size) is int and 1 <= block_size <= INT_MAX
            and type(has_image) is int and 0 <= has_image <= 1
            and type(num_tokens) is int and 0 <= num_tokens <= INT_MAX
            and type(arch) is str and arch in _MAJOR
        ):
            _explain_key(self)


def _explain_key(key: Key) -> None:
    """Raise ValueError naming the first invalid field of ``key`` and what it accepts."""
    launch_table.explain_key(key, FIELDS, {
        "has_image": lambda v: None if v in (0, 1) else f"Key.has_image must be 0 or 1; got {v}",
    })


@dataclass(frozen=True)
class Launch:
    """How to launch the SWA kernel for one call: the tile, ``has_image`` and the source.

    ``source`` is ``"table:<entry id>"`` or ``"baseline"``. Launches are immutable and
    shared: a deployment only ever sees a handful of distinct ones.
    """

    tokens_per_program: int
    cols_per_program: int
    num_warps: int
    has_image: bool
    source: str

    def compile_key(self) -> CompileKey:
        """(tokens_per_program, cols_per_program, num_warps, has_image): one binary."""
        return (self.tokens_per_program, self.cols_per_program, self.num_warps,
                int(self.has_image))


_BASELINE = tuple(Launch(*BASELINE_TILE.__dict__.values(), image, "baseline")
                  for image in (False, True))


class Index(launch_table.Index):
    """The SWA table's index. A box's hit is the entry's two launches, without and with
    ``has_image``, so a hit costs one tuple index."""


def _hit(e: Entry[Tile]) -> tuple:
    t = e.config
    return tuple(Launch(t.tokens_per_program, t.cols_per_program, t.num_warps, image,
                        f"table:{e.id}") for image in (False, True))


SCHEMA: Schema[Tile] = launch_table.tile_schema(
    "swa", FIELDS, tile_type=Tile, tile_fields=TILE_FIELDS, tile_problems=tile_problems,
    index_type=Index, hit=_hit,
    unknown_hint=lambda field: " (an SWA entry sets only its tile; the window and row stride "
                               "come from the call)",
)
FILES = launch_table.TableFiles(SCHEMA, "tables/swa.toml")
SHIPPED = FILES.shipped
make_table = FILES.make_table
load_table = FILES.load_table
loads_table = FILES.loads_table
shipped_table = FILES.shipped_table
render_table = FILES.render_table


def baseline(key: Key) -> Launch:
    """Exactly vLLM 0.33.0's launch for ``key`` (source ``"baseline"``)."""
    return _BASELINE[key.has_image]


def resolve(key: Key, table: Table[Tile] | None = None) -> Launch:
    """The launch for ``key``: the matching entry's tile, or the baseline unchanged.

    ``table`` None means the shipped table. A valid table has no overlapping entries,
    so the first candidate box that matches is the only entry that matches.
    """
    index = getattr(shipped_table() if table is None else table, "compiled", None)
    if type(index) is not Index:
        _index(table)  # type: ignore[arg-type]
    boxes = _candidates(index, key)
    if boxes:
        ws = key.window_size
        iw = key.index_width
        bs = key.block_size
        hi = key.has_image
        nt = key.num_tokens
        for w0, w1, i0, i1, b0, b1, h0, h1, n0, n1, hit in boxes:
            if (w0 <= ws <= w1 and i0 <= iw <= i1 and b0 <= bs <= b1 and h0 <= hi <= h1
                    and n0 <= nt <= n1):
                return hit[hi]  # type: ignore[no-any-return]
    return _BASELINE[key.has_image]


def _index(table: Table[Tile]) -> Index:
    return launch_table.index_of(table, Index, "an SWA")  # type: ignore[return-value]


def deployment_calls(window_size: int, max_image_tokens: int = 0) -> tuple[tuple[int, int], ...]:
    """The ``(index_width, has_image)`` pairs vLLM 0.33.0's SWA builder can launch.

    Decode rows use the plain window; a vision model's prefill rows use
    ``window_size + max_image_tokens`` columns, without and with image widening.
    """
    launch_table.check_ints(("window_size", window_size, 1),
                            ("max_image_tokens", max_image_tokens, 0))
    calls = [(window_size, 0)]
    if max_image_tokens > 0:
        calls += [(window_size + max_image_tokens, 0), (window_size + max_image_tokens, 1)]
    return tuple(calls)


def compile_key_sources(
    table: Table[Tile] | None, arch: str, *, window_size: int, block_size: int,
    max_image_tokens: int = 0,
) -> dict[CompileKey, tuple[str, ...]]:
    """Every compile key :func:`resolve` can produce for a deployment, with its sources.

    The baseline's keys are always there (one per ``has_image`` the deployment uses).
    An entry counts unless its match excludes the arch, the window, the block size or
    every ``(index_width, has_image)`` call of the deployment: a superset is safe for
    warm-up (one binary too many costs start-up time, never correctness).
    """
    table = shipped_table() if table is None else table
    _index(table)
    arch_major(arch)
    launch_table.check_ints(("block_size", block_size, 1))
    calls = deployment_calls(window_size, max_image_tokens)
    found: dict[CompileKey, list[str]] = {}
    for image in sorted({h for _, h in calls}):
        found[_BASELINE[image].compile_key()] = ["baseline"]
    for e in table.entries:
        m = e.match
        if any(m.get(name) is not None and not contains(m[name], value)
               for name, value in (("arch", arch), ("window_size", window_size),
                                   ("block_size", block_size))):
            continue
        for width, image in calls:
            if ((m.get("index_width") is None or contains(m["index_width"], width))
                    and (m.get("has_image") is None or contains(m["has_image"], image))):
                t = e.config
                key = (t.tokens_per_program, t.cols_per_program, t.num_warps, image)
                sources = found.setdefault(key, [])
                if f"table:{e.id}" not in sources:
                    sources.append(f"table:{e.id}")
    return {k: tuple(v) for k, v in found.items()}


def compile_keys(
    table: Table[Tile] | None, arch: str, *, window_size: int, block_size: int,
    max_image_tokens: int = 0,
) -> frozenset[CompileKey]:
    """The finite set of (tokens_per_program, cols_per_program, num_warps, has_image)."""
    return frozenset(compile_key_sources(table, arch, window_size=window_size,
                                         block_size=block_size,
                                         max_image_tokens=max_image_tokens))


def deployment_of(key: Key) -> dict[str, int] | None:
    """A deployment whose compile keys cover ``key``'s launch, or None if no vLLM 0.33.0
    deployment makes this call (image widening on a row no wider than the window)."""
    extra = key.index_width - key.window_size
    if extra < 0 or (extra == 0 and key.has_image):
        return None
    return {"window_size": key.window_size, "block_size": key.block_size,
            "max_image_tokens": extra}


KERNEL = KernelSpec(
    name="swa",
    summary="SWA indices and lens (vLLM 0.33.0 _compute_swa_indices_and_lens_kernel)",
    **FILES.spec_fields(),
    key_type=Key,
    launch_type=Launch,
    tile_type=Tile,
    baseline_tile=BASELINE_TILE,
    baseline=baseline,
    resolve=resolve,
    compile_key_fields=("tokens_per_program", "cols_per_program", "num_warps", "has_image"),
    compile_key_sources=compile_key_sources,
    deployment=(
        DeploymentParam("window_size", "the model's sliding window (hf sliding_window)", 1),
        DeploymentParam("block_size", "the SWA KV cache block size, in tokens", 1),
        DeploymentParam("max_image_tokens", "image tokens a prefill row may add "
                        "(vision_max_n_token; 0 for text-only models)", 0, 0),
    ),
    deployment_of=deployment_of,
    key_defaults={"arch": None, "window_size": 128, "index_width": 128, "block_size": 64,
                  "has_image": 0, "num_tokens": 1},
    key_help={"index_width": "columns written per row (default: 128)",
              "num_tokens": "rows of this call (default: 1)",
              "has_image": "1 when in-image visibility widens the windows (default: 0)"},
    describe=lambda key: [],
)

__all__ = [
    "BASELINE_TILE", "FIELDS", "INT_FIELDS", "KERNEL", "SCHEMA", "SHIPPED", "CompileKey", "Entry",
    "Index", "Key", "Launch", "Range", "Table", "TableError", "Tile", "baseline",
    "compile_key_sources", "compile_keys", "deployment_calls", "deployment_of", "load_table",
    "loads_table", "make_table", "render_table", "resolve", "shipped_table", "tile_problems",
]
