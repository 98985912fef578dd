"""FusedInvRopeFP8Quant launches: the baseline and the table-driven resolver.

Inside the FULL decode CUDA graph, once per attention layer (43 per DeepSeek-V4-Flash
step), ``deep_gemm_fp8_o_proj`` runs vLLM 0.33.0's ``fused_inv_rope_fp8_quant``: the
inverse RoPE of the attention output and its block FP8 quantisation (one scale per 128
lanes). vLLM launches one single-warp program per (token, head); dsv4's kernel takes a
tile of tokens x heads per program, chosen here for one call (:class:`Key`):

- :func:`baseline` is vLLM 0.33.0's launch: source ``"baseline"`` tells a caller to run
  vLLM's own kernel object unchanged; its tile ``(1, 1, 1, "head_rows")`` (one token,
  one head, one warp per program, the head-rows body) is what dsv4's kernel uses when
  asked for vLLM's launch shape.
- A tile names its body too (:data:`BODIES`): dsv4's kernel has two bodies that write
  the same bytes, and which one is faster depends on the call (many small programs with
  a short dependent chain at decode sizes, more work per thread at prefill sizes), so
  the table chooses it per entry, as it chooses the tile. A table file may leave
  ``body`` out (tables written before there were two bodies): it is ``"head_rows"``.
- :func:`resolve` returns a table entry's tile on a hit, else the baseline unchanged.
- :func:`compile_key_sources` lists every tile a deployment can need, so a server
  compiles them all before graph capture instead of mid-serving. With the deployment's
  head geometry and the call's flags (which vLLM's own compile key holds too), only
  the tile selects a binary: the token count never does.

Nothing here changes what is written: values, layout, strides and the scale pad rows
always come from the call. Pure Python, standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsv4_policy import launch_table
from dsv4_policy.arch import _MAJOR
from dsv4_policy.conditions import INT_MAX, Range
from dsv4_policy.launch_table import (
    MAX_ELEMENTS_PER_THREAD,
    DeploymentParam,
    KernelSpec,
    power_of_two_problem,
    warps_problem,
)
from dsv4_policy.launch_table import candidates as _candidates
from dsv4_policy.table import Entry, KeyField, Schema, Table, TableError, what

NAME = "fused_inv_rope_fp8_quant"
CompileKey = tuple[int, int, int, str]
"""(tokens_per_program, heads_per_program, num_warps, body): the tile part of a binary's
key."""
TILE_FIELDS = ("tokens_per_program", "heads_per_program", "num_warps", "body")
BODIES = ("head_rows", "block_rows")
"""dsv4's two kernel bodies (``dsv4_kernels.fused_inv_rope_fp8_quant``): ``head_rows``
holds each head as one row of its quantisation blocks with the rope lanes in a strip of
their own; ``block_rows`` holds every quantisation block as a row of the tile and rotates
the rope lanes in (even, odd) register pairs."""
DEFAULT_BODY = "head_rows"
MAX_TOKENS_PER_PROGRAM = 64
MAX_HEADS_PER_PROGRAM = 64
TILE_HEAD_DIM = 512
"""Lanes per head the elements-per-thread limit assumes (DeepSeek-V4's head_dim)."""
_set = object.__setattr__


# --------------------------------------------------------------------------- key
@dataclass(frozen=True, init=False)
class Key:
    """What one ``fused_inv_rope_fp8_quant`` call's launch depends on.

    ``num_tokens`` is the call's T (``o.shape[0]``), ``num_heads`` the local heads
    (``n_groups * heads_per_group``), ``head_dim`` and ``quant_group_size`` the head
    geometry, ``tma_aligned_scales`` 1 for the packed UE8M0 scale layout (sm100) and 0
    for FP32 (sm90), ``quantize`` 1 when the output is FP8. All are known on the host
    without reading device memory. Checked on construction.
    """

    arch: str
    num_tokens: int
    num_heads: int
    head_dim: int
    quant_group_size: int
    tma_aligned_scales: int
    quantize: int

    def __init__(self, arch: str, num_tokens: int, num_heads: int, head_dim: int = 512,
                 quant_group_size: int = 128, tma_aligned_scales: int = 0,
                 quantize: int = 1) -> None:
        _set(self, "__dict__", {
            "arch": arch, "num_tokens": num_tokens, "num_heads": num_heads,
            "head_dim": head_dim, "quant_group_size": quant_group_size,
            "tma_aligned_scales": tma_aligned_scales, "quantize": quantize,
        })
        if not (
            type(num_tokens) is int and 0 <= num_tokens <= INT_MAX
            and type(num_heads) is int and 1 <= num_heads <= INT_MAX
            and type(head_dim) is int and 1 <= head_dim <= INT_MAX
            and type(quant_group_size) is int and 1 <= quant_group_size <= INT_MAX
            and type(tma_aligned_scales) is int and 0 <= tma_aligned_scales <= 1
            and type(quantize) is int and 0 <= quantize <= 1
            and type(arch) is str and arch in _MAJOR
        ):
            flag = {name: (lambda v, n=name: None if v in (0, 1)
                           else f"Key.{n} must be 0 or 1; got {v}")
                    for name in ("tma_aligned_scales", "quantize")}
            launch_table.explain_key(self, FIELDS, flag)


FIELDS = (
    launch_table.ARCH_FIELD,
    KeyField("num_tokens", int, minimum=0),
    KeyField("num_heads", int, minimum=1),
    KeyField("head_dim", int, minimum=1),
    KeyField("quant_group_size", int, minimum=1),
    KeyField("tma_aligned_scales", int, minimum=0),
    KeyField("quantize", int, minimum=0),
)
INT_FIELDS = tuple(f for f in FIELDS if f.type is int)


# --------------------------------------------------------------------------- tile and launch
def tile_problems(tokens_per_program: object, heads_per_program: object,
                  num_warps: object, body: object = DEFAULT_BODY) -> list[tuple[str, str]]:
    """``(field, message)`` for every invalid tile field; empty when the tile is valid:
    powers of two up to 64 tokens and 64 heads, a warp count of ``WARPS``, at most
    ``MAX_ELEMENTS_PER_THREAD`` lanes of 512-lane heads per thread (the limits
    :mod:`dsv4_kernels.fused_inv_rope_fp8_quant.checks` enforces), and a body of
    :data:`BODIES`."""
    found = []
    if type(body) is not str or body not in BODIES:
        found.append(("body", f"body must be one of {', '.join(map(repr, BODIES))}; "
                              f"got {what(body)}"))
    for name, value, high in (("tokens_per_program", tokens_per_program, MAX_TOKENS_PER_PROGRAM),
                              ("heads_per_program", heads_per_program, MAX_HEADS_PER_PROGRAM)):
        problem = power_of_two_problem(name, value, 1, high)
        if problem:
            found.append((name, problem))
    problem = warps_problem(num_warps)
    if problem:
        found.append(("num_warps", problem))
    if not found:
        lanes = tokens_per_program * heads_per_program * TILE_HEAD_DIM  # type: ignore[operator]
        limit = MAX_ELEMENTS_PER_THREAD * 32 * num_warps  # type: ignore[operator]
        if lanes > limit:
            found.append(("heads_per_program",
                          f"tokens_per_program * heads_per_program * {TILE_HEAD_DIM} = {lanes} "
                          f"exceeds {MAX_ELEMENTS_PER_THREAD} elements per thread "
                          f"({limit} over {num_warps} warps); use more warps or a smaller "
                          "tile"))
    return found


@dataclass(frozen=True)
class Tile:
    """The tile an entry chooses: ``tokens_per_program`` x ``heads_per_program`` per
    program (grid ``(cdiv(tma_aligned_T, tpp), cdiv(num_heads, hpp))``), on
    ``num_warps`` warps, with the kernel ``body`` of :data:`BODIES`."""

    tokens_per_program: int
    heads_per_program: int
    num_warps: int
    body: str = DEFAULT_BODY

    def __post_init__(self) -> None:
        launch_table.refuse_tile(tile_problems(self.tokens_per_program, self.heads_per_program,
                                               self.num_warps, self.body))


BASELINE_TILE = Tile(1, 1, 1, DEFAULT_BODY)
"""vLLM 0.33.0's launch shape: one token and one head per program, one warp (on the
head-rows body when dsv4's kernel runs it)."""


@dataclass(frozen=True)
class Launch:
    """How to launch for one call: the tile and where it came from.

    ``source`` is ``"table:<entry id>"`` (run dsv4's kernel with this tile) or
    ``"baseline"`` (run vLLM's own kernel object). Launches are immutable and shared.
    """

    tokens_per_program: int
    heads_per_program: int
    num_warps: int
    body: str
    source: str

    def compile_key(self) -> CompileKey:
        """(tokens_per_program, heads_per_program, num_warps, body)."""
        return (self.tokens_per_program, self.heads_per_program, self.num_warps, self.body)


# --------------------------------------------------------------------------- table schema
class Index(launch_table.Index):
    """The fused_inv_rope_fp8_quant table's index. A box's hit is ``(launch,)``: the
    entry's tile as the one shared :class:`Launch`."""


TILES = launch_table.TileLaunches(
    NAME, FIELDS, tile_type=Tile, tile_fields=TILE_FIELDS, tile_problems=tile_problems,
    launch_type=Launch, baseline_tile=BASELINE_TILE, index_type=Index, label=f"a {NAME}",
    unknown_hint=lambda field: " (an entry sets only its tile; values, layout and strides "
                               "come from the call)",
    tile_defaults={"body": DEFAULT_BODY},
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
        nt, nh, hd, qg = key.num_tokens, key.num_heads, key.head_dim, key.quant_group_size
        tma, qz = key.tma_aligned_scales, key.quantize
        for (t0, t1, h0, h1, d0, d1, g0, g1, s0, s1, q0, q1, hit) in boxes:
            if (t0 <= nt <= t1 and h0 <= nh <= h1 and d0 <= hd <= d1 and g0 <= qg <= g1
                    and s0 <= tma <= s1 and q0 <= qz <= q1):
                return hit[0]  # type: ignore[no-any-return]
    return _BASELINE


def compile_key_sources(
    table: Table[Tile] | None, arch: str, *, num_heads: int, head_dim: int = 512,
    quant_group_size: int = 128,
) -> dict[CompileKey, tuple[str, ...]]:
    """Every tile :func:`resolve` can produce for a deployment, with its sources.

    The baseline's is always there. An entry counts unless its match excludes the arch
    or the deployment's local heads, head_dim or group size: any token count, either
    scale layout and either ``quantize`` count, a superset that is safe for warm-up
    (one binary too many costs start-up time, never correctness).
    """
    return TILES.compile_key_sources(  # type: ignore[return-value]
        table, arch, ("num_heads", num_heads, 1), ("head_dim", head_dim, 1),
        ("quant_group_size", quant_group_size, 1))


def compile_keys(table: Table[Tile] | None, arch: str, *, num_heads: int,
                 head_dim: int = 512, quant_group_size: int = 128) -> frozenset[CompileKey]:
    """The finite set of (tokens_per_program, heads_per_program, num_warps, body) to
    warm."""
    return frozenset(compile_key_sources(table, arch, num_heads=num_heads, head_dim=head_dim,
                                         quant_group_size=quant_group_size))


def deployment_of(key: Key) -> dict[str, int]:
    """The deployment whose compile keys cover ``key``'s launch."""
    return {"num_heads": key.num_heads, "head_dim": key.head_dim,
            "quant_group_size": key.quant_group_size}


def _describe(key: Key) -> list[tuple[str, object]]:
    aligned = -(-key.num_tokens // 4) * 4 if key.quantize else key.num_tokens
    return [("tma_aligned_T", aligned),
            ("bytes_moved", key.num_tokens * key.num_heads * key.head_dim * (
                2 + (1 if key.quantize else 2)) + (
                aligned * key.num_heads * (key.head_dim // key.quant_group_size) * (
                    1 if key.tma_aligned_scales else 4) if key.quantize else 0))]


KERNEL = KernelSpec(
    name=NAME,
    summary="inverse RoPE + block FP8 quant of the attention output "
            "(vLLM 0.33.0 fused_inv_rope_fp8_quant)",
    **TILES.spec_fields(),
    key_type=Key,
    baseline=baseline,
    resolve=resolve,
    compile_key_sources=compile_key_sources,
    deployment=(
        DeploymentParam("num_heads", "local attention heads (num_attention_heads / tp)", 1),
        DeploymentParam("head_dim", "the model's head_dim", 1, 512),
        DeploymentParam("quant_group_size", "FP8 block size of the o_proj input", 1, 128),
    ),
    deployment_of=deployment_of,
    key_defaults={"arch": None, "num_tokens": 1, "num_heads": 64, "head_dim": 512,
                  "quant_group_size": 128, "tma_aligned_scales": 0, "quantize": 1},
    key_help={"num_tokens": "tokens of the call, o.shape[0] (default: 1)",
              "num_heads": "local heads, n_groups * heads_per_group (default: 64)",
              "head_dim": "lanes per head (default: 512)",
              "quant_group_size": "lanes per FP8 scale (default: 128)",
              "tma_aligned_scales": "1: packed UE8M0 scales (sm100), 0: FP32 (sm90) "
                                    "(default: 0)",
              "quantize": "1: FP8 output with scales, 0: rotated output only (default: 1)"},
    describe=_describe,
)

__all__ = [
    "BASELINE_TILE", "BODIES", "DEFAULT_BODY", "FIELDS", "INT_FIELDS", "KERNEL", "NAME",
    "SCHEMA", "CompileKey", "Entry",
    "Index", "Key", "Launch", "Range", "Table", "TableError", "Tile", "baseline",
    "compile_key_sources", "compile_keys", "deployment_of", "load_table", "loads_table",
    "make_table", "render_table", "resolve", "shipped_table", "tile_problems",
]
