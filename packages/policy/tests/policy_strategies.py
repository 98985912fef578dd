"""Hypothesis strategies and independent oracles shared by the policy tests.

The oracles restate the specification in the plainest way (fractions, loops,
regular expressions), deliberately not reusing the package's formulas, so that a test
comparing the two can fail.
"""

from __future__ import annotations

import functools
import math
import os
import random
import re
from fractions import Fraction

from dsv4_policy.kernels.c128a import Entry, Key, Range, Tile
from dsv4_policy.launch_table import KernelSpec
from hypothesis import strategies as st

CI = bool(os.environ.get("CI"))
PROPERTY_EXAMPLES = 10_000 if CI else 400
"""Examples for the core fallback properties: 10,000 under the ci profile."""
HEAVY_EXAMPLES = 300 if CI else 60
"""Examples for tests whose single example is expensive (stateful, brute force)."""
KEYS_PER_EXAMPLE = 8
"""Keys one example of a core fallback property checks: those properties check
PROPERTY_EXAMPLES keys in PROPERTY_EXAMPLES // KEYS_PER_EXAMPLE examples, since an
example's fixed cost in Hypothesis is most of what checking one key costs."""

ARCHS = ("sm80", "sm86", "sm89", "sm90", "sm90a", "sm100", "sm103", "sm120", "sm121", "sm121a")
INT_MAX = 2**63 - 1
MINIMUM = {"compress_ratio": 1, "max_model_len": 1, "max_seq_len": 0, "num_decode_tokens": 0,
           "num_prefill_tokens": 0, "block_size": 1}
INT_FIELDS = tuple(MINIMUM)


def key_args(spec: KernelSpec, **values: object) -> dict[str, object]:
    """Keyword arguments for a valid key of ``spec``: its CLI defaults, sm90 for the arch,
    the field's minimum (at least 1) for other required fields, then ``values``."""
    base: dict[str, object] = {}
    for f in spec.schema.fields:
        default = spec.key_defaults.get(f.name)
        base[f.name] = default if default is not None else ("sm90" if f.type is str
                                                            else max(f.minimum, 1))
    base.update(values)
    return base


# --------------------------------------------------------------------------- oracles
def oracle_capacity(max_model_len: int, ratio: int) -> int:
    compressed = math.ceil(Fraction(max_model_len, ratio))
    return 128 * math.ceil(Fraction(compressed, 128))


def oracle_next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def oracle_is_sm12x(arch: str) -> bool:
    return re.fullmatch(r"sm12[0-9][a-z]?", arch) is not None


def oracle_baseline(key: Key) -> dict[str, object]:
    """vLLM 0.33.0's launch, restated field by field."""
    cap = oracle_capacity(key.max_model_len, key.compress_ratio)
    width = min(max(oracle_next_pow2(max(key.max_seq_len // key.compress_ratio, 1)), 128), cap)
    return {
        "width": width,
        "row_stride": cap,
        "decode_view_width": cap if oracle_is_sm12x(key.arch) else width,
        "tokens_per_program": 1,
        "cols_per_program": 1024,
        "num_warps": 4,
        "split_width": False,
        "source": "baseline",
    }


def oracle_match(entry: Entry, key: object) -> bool:
    """Whether ``entry`` matches ``key``, read straight off the conditions."""
    for name, cond in entry.match.items():
        value = getattr(key, name)
        if isinstance(cond, Range):
            if value < cond.min or (cond.max is not None and value > cond.max):
                return False
        elif value not in cond:
            return False
    return True


def oracle_overlap(a: Entry, b: Entry) -> bool:
    """Whether two box entries share a key: every field's conditions must meet."""
    for name in set(a.match) & set(b.match):
        ca, cb = a.match[name], b.match[name]
        if isinstance(ca, Range) and isinstance(cb, Range):
            top_a = math.inf if ca.max is None else ca.max
            top_b = math.inf if cb.max is None else cb.max
            if top_a < cb.min or top_b < ca.min:
                return False
        elif isinstance(ca, Range) or isinstance(cb, Range):
            rng, values = (ca, cb) if isinstance(ca, Range) else (cb, ca)
            if not any(rng.min <= v and (rng.max is None or v <= rng.max) for v in values):
                return False
        elif not (ca & cb):
            return False
    return True


# --------------------------------------------------------------------------- keys
archs = st.one_of(
    st.sampled_from(ARCHS),
    st.builds(lambda major, minor, suffix: f"sm{major}{minor}{suffix}",
              st.integers(1, 15), st.integers(0, 9), st.sampled_from(["", "a", "f"])),
)

FAR = {
    "compress_ratio": st.one_of(st.sampled_from([1, 4, 64, 128, 256]), st.integers(1, 4096)),
    "max_model_len": st.one_of(
        st.sampled_from([1, 127, 128, 129, 16384, 16385, 65536, 262144, 1 << 20, 1 << 21]),
        st.integers(1, 1 << 22), st.integers(1, INT_MAX)),
    "max_seq_len": st.one_of(st.sampled_from([0, 1, 127, 128, 129, 255, 256, 32768, 1 << 20]),
                             st.integers(0, 1 << 22), st.integers(0, INT_MAX)),
    "num_decode_tokens": st.one_of(st.integers(0, 64), st.integers(0, 1 << 16)),
    "num_prefill_tokens": st.one_of(st.just(0), st.integers(0, 1 << 17)),
    "block_size": st.one_of(st.sampled_from([1, 2, 4, 16, 64, 256]), st.integers(1, 4096)),
}


def far_keys() -> st.SearchStrategy[Key]:
    """Keys spread over the whole domain, with the usual C128A values over-weighted."""
    return st.builds(Key, archs, *(FAR[name] for name in INT_FIELDS))


def boundary_values(entries: list[Entry], name: str) -> list[int]:
    """Values on and just off every edge of the entries' conditions on ``name``."""
    found = set()
    for e in entries:
        cond = e.match.get(name)
        if cond is None:
            continue
        points = [cond.min, cond.max] if isinstance(cond, Range) else list(cond)
        for p in points:
            if p is not None:
                found.update((p - 1, p, p + 1))
    return sorted(v for v in found if MINIMUM[name] <= v <= INT_MAX)


_ARCH_CHOICE = st.sampled_from(ARCHS)
_COIN = st.integers(0, 3)


@functools.cache
def ints(low: int, high: int) -> st.SearchStrategy[int]:
    """``st.integers(low, high)``, made once per bounds: the composites below draw from
    the same few ranges thousands of times, and building a strategy costs more than
    drawing from it."""
    return st.integers(low, high)


def _pick(draw: st.DrawFn, values: list) -> object:
    """One of ``values``, drawn by index: far cheaper than building a strategy per draw."""
    return values[draw(ints(0, len(values) - 1))]


def keys_near(entries: list[Entry]) -> st.SearchStrategy[Key]:
    """Keys whose fields sit on or next to the entries' edges (or anywhere, sometimes).

    The edges are found once, here, not on every draw: a table of many entries would
    otherwise pay for them per example."""
    named_archs = sorted({a for e in entries for a in e.match.get("arch", ())})
    edges = {name: boundary_values(entries, name) for name in INT_FIELDS}

    @st.composite
    def draw_key(draw: st.DrawFn) -> Key:
        arch = _pick(draw, named_archs) if named_archs and draw(_COIN) else draw(archs)
        values = []
        for name in INT_FIELDS:
            near = edges[name]
            values.append(_pick(draw, near) if near and draw(_COIN) else draw(FAR[name]))
        return Key(arch, *values)

    return draw_key()


@st.composite
def keys_inside(draw: st.DrawFn, entry: Entry) -> Key:
    """A key that ``entry`` matches: every constrained field drawn from its condition."""
    cond = entry.match.get("arch")
    arch = _pick(draw, sorted(cond)) if cond is not None else draw(archs)
    values = []
    for name in INT_FIELDS:
        cond = entry.match.get(name)
        if cond is None:
            values.append(draw(FAR[name]))
        elif isinstance(cond, Range):
            top = cond.max if cond.max is not None else cond.min + (1 << 22)
            edge = draw(_COIN)
            values.append(cond.min if edge == 0 else top if edge == 1
                          else draw(ints(cond.min, top)))
        else:
            values.append(_pick(draw, sorted(cond)))
    return Key(arch, *values)


# --------------------------------------------------------------------------- entries
@functools.cache
def pow2(low: int, high: int) -> st.SearchStrategy[int]:
    return st.sampled_from([1 << i for i in range(low.bit_length() - 1, high.bit_length())])


@functools.cache
def _tiles_of(warps: int, cols: int) -> st.SearchStrategy[Tile]:
    # The kernel's limit: at most 128 elements per thread, i.e. tpp * cpp <= 4096 * warps.
    return st.builds(Tile, pow2(1, min(256, 4096 * warps // cols)), st.just(cols),
                     st.just(warps), st.booleans())


@functools.cache
def _tiles_on(warps: int) -> st.SearchStrategy[Tile]:
    return pow2(128, min(8192, 4096 * warps)).flatmap(lambda cols: _tiles_of(warps, cols))


tiles = st.sampled_from([1, 2, 4, 8, 16]).flatmap(_tiles_on)
"""Valid C128A tiles: a warp count, then columns, then tokens within the kernel's limit."""


LIMITS = {"max_model_len": (1, 1 << 21), "max_seq_len": (0, 1 << 21),
          "num_decode_tokens": (0, 512), "num_prefill_tokens": (0, 1 << 16), "block_size": (1, 256)}
RATIOS = [4, 64, 128, 256]


def _int_condition(draw: st.DrawFn, low: int, high: int) -> object:
    """Absent (None), an exact value, a set of up to 3, or a (maybe open-ended) range."""
    form = draw(_COIN)
    if form == 0:
        return None
    values = ints(low, high)
    if form == 1:
        return draw(values)
    if form == 2:
        return frozenset(draw(values) for _ in range(draw(ints(1, 3))))
    a, b = draw(values), draw(values)
    return Range(min(a, b), None if draw(_COIN) == 0 else max(a, b))


@st.composite
def match_conditions(draw: st.DrawFn) -> dict[str, object]:
    """A random ``match`` mapping over the C128A key fields, written every way allowed."""
    match: dict[str, object] = {}
    form = draw(_COIN)
    if form == 1:
        match["arch"] = _pick(draw, list(ARCHS[:8]))
    elif form >= 2:
        match["arch"] = [_pick(draw, list(ARCHS[:8])) for _ in range(form - 1)]
    form = draw(_COIN)
    if form == 1:
        match["compress_ratio"] = 128
    elif form >= 2:
        match["compress_ratio"] = {_pick(draw, RATIOS) for _ in range(form - 1)}
    for name, (low, high) in LIMITS.items():
        cond = _int_condition(draw, low, high)
        if cond is not None:
            match[name] = cond
    return match


provenance = st.dictionaries(
    st.text(min_size=1, max_size=12),
    st.one_of(st.text(max_size=30), st.integers(-(2**40), 2**40),
              st.floats(allow_nan=False, allow_infinity=False), st.booleans()),
    max_size=3,
)


def c128a_entries(ids: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[Entry]:
    """Valid single entries; ids from a small pool so duplicates happen."""
    ids = ids or st.sampled_from([f"e{i}" for i in range(12)])
    return st.builds(Entry, ids, match_conditions(), tiles, provenance)


@functools.cache
def _entry_lists(max_size: int) -> st.SearchStrategy[list[Entry]]:
    return st.lists(c128a_entries(), max_size=max_size)


@st.composite
def disjoint_entries(draw: st.DrawFn, max_size: int = 6) -> list[Entry]:
    """A list of entries with unique ids and no two overlapping (by the oracle)."""
    kept: list[Entry] = []
    for candidate in draw(_entry_lists(max_size)):
        if all(candidate.id != e.id and not oracle_overlap(candidate, e) for e in kept):
            kept.append(candidate)
    return kept


# --------------------------------------------------------------------------- seeded tables
def random_match(rng: random.Random) -> dict[str, object]:
    """Like ``match_conditions`` but from a seeded ``random.Random``: cheap to make many."""
    match: dict[str, object] = {}
    form = rng.randint(0, 3)
    if form == 1:
        match["arch"] = rng.choice(ARCHS[:8])
    elif form >= 2:
        match["arch"] = rng.sample(ARCHS[:8], form - 1)
    form = rng.randint(0, 3)
    if form == 1:
        match["compress_ratio"] = 128
    elif form >= 2:
        match["compress_ratio"] = set(rng.sample(RATIOS, form - 1))
    for name, (low, high) in LIMITS.items():
        form = rng.randint(0, 3)
        if form == 1:
            match[name] = rng.randint(low, high)
        elif form == 2:
            match[name] = {rng.randint(low, high) for _ in range(rng.randint(1, 3))}
        elif form == 3:
            a, b = rng.randint(low, high), rng.randint(low, high)
            match[name] = Range(min(a, b), None if rng.random() < 0.25 else max(a, b))
    return match


def random_entries(rng: random.Random, attempts: int = 8) -> list[Entry]:
    """A disjoint list of entries (by the oracle) with unique ids."""
    kept: list[Entry] = []
    for i in range(attempts):
        warps = rng.choice([1, 2, 4, 8, 16])
        cols = 1 << rng.randint(7, min(13, (4096 * warps).bit_length() - 1))
        # The kernel's limit: at most 128 elements per thread (4096 per warp).
        tokens = 1 << rng.randint(0, max(0, min(8, (4096 * warps // cols).bit_length() - 1)))
        tile = Tile(tokens, cols, warps, rng.random() < 0.5)
        candidate = Entry(f"t{i}", random_match(rng), tile, {"seed": "random"})
        if not any(oracle_overlap(candidate, e) for e in kept):
            kept.append(candidate)
    return kept


SEEDED_TABLES = [random_entries(random.Random(1_000 + i)) for i in range(64)]
"""64 synthetic tables, made once from fixed seeds, for the 10,000-example properties."""


def keys_for(entries: list[Entry]) -> st.SearchStrategy[Key]:
    """Keys near the entries' edges, inside some entries, and anywhere."""
    return st.one_of(keys_near(entries), far_keys(), *(keys_inside(e) for e in entries[:3]))


def batches(keys: st.SearchStrategy[object]) -> st.SearchStrategy[list[object]]:
    """Lists of exactly :data:`KEYS_PER_EXAMPLE` draws of ``keys``."""
    return st.lists(keys, min_size=KEYS_PER_EXAMPLE, max_size=KEYS_PER_EXAMPLE)


SEEDED_KEYS = [batches(keys_for(entries)) for entries in SEEDED_TABLES]


@st.composite
def seeded_table_and_keys(draw: st.DrawFn) -> tuple[int, list[Key]]:
    """The index of one of ``SEEDED_TABLES`` and :data:`KEYS_PER_EXAMPLE` keys aimed at it."""
    index = draw(ints(0, len(SEEDED_TABLES) - 1))
    return index, draw(SEEDED_KEYS[index])
