"""Indexer decode metadata launches: whether dsv4 builds a decode-only step, and its tile.

Every DeepSeek-V4 step, vLLM 0.33.0's ``DeepseekV32IndexerMetadataBuilder.build`` (the
C4A layers' lightning indexer) prepares its decode metadata with a chain of small ATen
ops: the device ``torch.diff`` of ``query_start_loc`` into ``decode_lens``, a copy into
``per_req_decode_lens``, a host ``torch.diff`` with ``.max().item()`` / ``.min().item()``
(the minimum twice), ``expanded_seq_lens[:n] = seq_lens // compress_ratio``, a zero fill
up to the decode tokens and an unsqueeze. dsv4 builds a decode-only step itself: one
launch writes every one of those buffers and the host integers come from one pass over
``query_start_loc_cpu``. This module decides, for one step (:class:`Key`), whether that
happens and with which tile:

- :func:`baseline` is vLLM 0.33.0's own build (source ``"baseline"``): a plugin calls
  vLLM's ``build`` unchanged. Its tile, ``(1024, 4)``, is what dsv4's kernel would use
  without an entry, and is always warmed; vLLM itself runs no kernel of this shape.
- :func:`resolve` returns a table entry's tile on a hit, else the baseline unchanged.
- :func:`compile_key_sources` lists every binary a deployment can need, so a server
  compiles them all at start-up instead of mid-serving.

A key holds only what the host knows without reading device memory: the compress ratio,
whether vLLM's build would then plan DeepGEMM's paged MQA logits (``deep_gemm``: CUDA
and DeepGEMM present; dsv4 calls vLLM's own function for that part), the decode
requests and the decode tokens. Which builds can be taken over at all (decode only, no
speculative decoding, no decode or prefill context parallelism, the native decode path)
is the plugin's to check before it asks. Nothing here changes what is written. The
shipped table is ``dsv4_policy/tables/indexer_decode.toml``.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsv4_policy import launch_table
from dsv4_policy.arch import _MAJOR
from dsv4_policy.conditions import INT_MAX, Range
from dsv4_policy.launch_table import KernelSpec
from dsv4_policy.launch_table import candidates as _candidates
from dsv4_policy.table import Entry, KeyField, Schema, Table, TableError

NAME = "indexer_decode"
CompileKey = tuple[int, int]
"""(tokens_per_program, num_warps): what selects a tile (warm-up builds its binary)."""
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
    """The tile an entry chooses: ``tokens_per_program`` rows per program, on
    ``num_warps`` warps. What is written always comes from the step itself."""

    tokens_per_program: int
    num_warps: int

    def __post_init__(self) -> None:
        launch_table.refuse_tile(tile_problems(self.tokens_per_program, self.num_warps))


BASELINE_TILE = Tile(1024, 4)
"""The tile of the baseline launch: dsv4's kernel at 1024 rows per program on 4 warps,
always warmed. The baseline itself is vLLM 0.33.0's build, which runs ATen ops."""

FIELDS = (
    launch_table.ARCH_FIELD,
    KeyField("compress_ratio", int, minimum=1),
    KeyField("deep_gemm", int, minimum=0),
    KeyField("num_reqs", int, minimum=0),
    KeyField("num_tokens", int, minimum=0),
)
INT_FIELDS = tuple(f for f in FIELDS if f.type is int)

_set = object.__setattr__


@dataclass(frozen=True, init=False)
class Key:
    """What one decode-only indexer build depends on.

    ``num_reqs`` is the step's decode requests (vLLM's ``num_decodes``, CUDA-graph
    padding requests included), ``num_tokens`` its decode tokens (``num_decode_tokens``;
    one per request without speculative decoding, fewer when padding requests have no
    token), ``deep_gemm`` 1 when vLLM's build plans DeepGEMM's paged MQA logits after the
    decode tensors. Values are checked on construction, so a bad one fails here with a
    message.
    """

    arch: str
    compress_ratio: int
    deep_gemm: int
    num_reqs: int
    num_tokens: int

    def __init__(self, arch: str, compress_ratio: int, deep_gemm: int, num_reqs: int,
                 num_tokens: int) -> None:
        _set(self, "__dict__", {
            "arch": arch, "compress_ratio": compress_ratio, "deep_gemm": deep_gemm,
            "num_reqs": num_reqs, "num_tokens": num_tokens,
        })
        if not (
            type(compress_ratio) is int and 1 <= compress_ratio <= INT_MAX
            and type(deep_gemm) is int and 0 <= deep_gemm <= 1
            and type(num_reqs) is int and 0 <= num_reqs <= INT_MAX
            and type(num_tokens) is int and 0 <= num_tokens <= INT_MAX
            and type(arch) is str and arch in _MAJOR
        ):
            _explain_key(self)


def _explain_key(key: Key) -> None:
    """Raise ValueError naming the first invalid field of ``key`` and what it accepts."""
    launch_table.explain_key(key, FIELDS, {
        "deep_gemm": lambda v: None if v in (0, 1) else f"Key.deep_gemm must be 0 or 1; got {v}",
    })


@dataclass(frozen=True)
class Launch:
    """How to build one step: the tile and where it came from.

    ``source`` is ``"table:<entry id>"`` (dsv4 builds the step with this tile) or
    ``"baseline"`` (vLLM's own build). Launches are immutable and shared."""

    tokens_per_program: int
    num_warps: int
    source: str

    def compile_key(self) -> CompileKey:
        """(tokens_per_program, num_warps): one tile, one binary."""
        return (self.tokens_per_program, self.num_warps)


# --------------------------------------------------------------------------- the table
class Index(launch_table.Index):
    """The indexer_decode table's index. A box's hit is ``(launch,)``: the entry's tile
    as the one shared :class:`Launch`."""


TILES = launch_table.TileLaunches(
    NAME, FIELDS, tile_type=Tile, tile_fields=TILE_FIELDS, tile_problems=tile_problems,
    launch_type=Launch, baseline_tile=BASELINE_TILE, index_type=Index, label=f"an {NAME}",
    unknown_hint=lambda field: " (an entry sets only its tile; what is written comes from "
                               "the step)",
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
        cr, dg, nr, nt = key.compress_ratio, key.deep_gemm, key.num_reqs, key.num_tokens
        for c0, c1, g0, g1, r0, r1, t0, t1, hit in boxes:
            if c0 <= cr <= c1 and g0 <= dg <= g1 and r0 <= nr <= r1 and t0 <= nt <= t1:
                return hit[0]  # type: ignore[no-any-return]
    return _BASELINE


def compile_key_sources(table: Table[Tile] | None, arch: str
                        ) -> dict[CompileKey, tuple[str, ...]]:
    """Every compile key :func:`resolve` can produce for a deployment, with its sources.

    The baseline tile is always there. An entry counts unless its match excludes the
    arch: every other key field varies from step to step, and a superset is safe for
    warm-up (one binary too many costs start-up time, never correctness).
    """
    return TILES.compile_key_sources(table, arch)  # type: ignore[return-value]


def compile_keys(table: Table[Tile] | None, arch: str) -> frozenset[CompileKey]:
    """The finite set of (tokens_per_program, num_warps) a deployment can launch."""
    return frozenset(compile_key_sources(table, arch))


def deployment_of(key: Key) -> dict[str, int]:
    """A deployment whose compile keys cover ``key``'s launch: every one (the compile keys
    depend on the arch alone)."""
    return {}


KERNEL = KernelSpec(
    name=NAME,
    summary="the indexer builder's decode-only step (vLLM 0.33.0 "
            "DeepseekV32IndexerMetadataBuilder.build, no prefill, no speculative decoding)",
    **TILES.spec_fields(),
    key_type=Key,
    baseline=baseline,
    resolve=resolve,
    compile_key_sources=compile_key_sources,
    deployment=(),
    deployment_of=deployment_of,
    key_defaults={"arch": None, "compress_ratio": 4, "deep_gemm": 0, "num_reqs": 1,
                  "num_tokens": 1},
    key_help={"compress_ratio": "tokens per compressed state: 4 (DeepSeek-V4's C4A "
                                "indexer) (default: 4)",
              "deep_gemm": "1 when vLLM's build then plans DeepGEMM's paged MQA logits "
                           "(CUDA with DeepGEMM), else 0 (default: 0)",
              "num_reqs": "decode requests of the step, CUDA-graph padding included "
                          "(default: 1)",
              "num_tokens": "decode tokens of the step (default: 1)"},
    describe=lambda key: [],
)

__all__ = [
    "BASELINE_TILE", "FIELDS", "INT_FIELDS", "KERNEL", "NAME", "SCHEMA", "CompileKey", "Entry",
    "Index", "Key", "Launch", "Range", "Table", "TableError", "Tile", "baseline",
    "compile_key_sources", "compile_keys", "deployment_of", "load_table", "loads_table",
    "make_table", "render_table", "resolve", "shipped_table", "tile_problems",
]
