"""Checks and table strategies shared by the per-kernel policy tests.

A kernel module of ``dsv4_policy.kernels`` whose launch is a flat tile (a ``Launch`` of
the tile's fields then ``source``) states the same promises as every other: resolve is
total, a miss is the baseline object itself, a hit is exactly its entry's tile, warm-up
covers every launch, tables round-trip through TOML, and bad tiles are refused in code
and in files naming the field. Each ``check_*`` here states one of them once, for the
kernel module passed in; a kernel's own test file keeps its strategies and the cases
only it has.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from types import ModuleType

import pytest
from dsv4_policy import launch_table
from dsv4_policy.conditions import Range
from dsv4_policy.table import Entry, Table, TableError
from hypothesis import strategies as st

ARCHES = ["sm80", "sm86", "sm90", "sm90a", "sm100", "sm120"]
"""The archs the per-kernel strategies draw from."""


# --------------------------------------------------------------------------- tables
def range_within(draw: st.DrawFn, low: int, high: int) -> Range:
    """A range inside ``low..high``; open-ended sometimes when it reaches ``high``."""
    a, b = sorted(draw(st.integers(low, high)) for _ in range(2))
    return Range(a, None if draw(st.booleans()) and b == high else b)


@st.composite
def spanning_tables(
    draw: st.DrawFn, policy: ModuleType, *, tiles: Sequence[tuple[int, ...]], span_max: int,
    sets: Mapping[str, tuple[Sequence[object], int]] = {}, flags: Sequence[str] = (),
    ranges: Mapping[str, tuple[int, int]] = {},
) -> Table:
    """Valid tables: entries own disjoint ``num_tokens`` spans (cut in ``0..span_max``),
    so none overlap. Each other field is left open or given a random condition: for
    ``sets`` (``name: (values, most)``) a list of up to ``most`` of its values (``arch``
    always may get up to 3 of :data:`ARCHES`), for ``flags`` 0 or 1, for ``ranges``
    (``name: (low, high)``) a range inside those bounds."""
    cuts = sorted(draw(st.sets(st.integers(0, span_max), min_size=1, max_size=7)))
    entries = []
    for i, (lo, hi) in enumerate(zip(cuts, [*cuts[1:], None], strict=True)):
        match: dict[str, object] = {"num_tokens": Range(lo, None if hi is None else hi - 1)}
        for name, (values, most) in {"arch": (ARCHES, 3), **sets}.items():
            if draw(st.booleans()):
                match[name] = draw(st.lists(st.sampled_from(values), min_size=1,
                                            max_size=most, unique=True))
        for name in flags:
            if draw(st.booleans()):
                match[name] = draw(st.integers(0, 1))
        for name, (low, high) in ranges.items():
            if draw(st.booleans()):
                match[name] = range_within(draw, low, high)
        tile = policy.Tile(*draw(st.sampled_from(tiles)))
        provenance = {"probes": draw(st.integers(1, 99)),
                      "worst_speedup": f"{draw(st.floats(1.0, 9.0)):.3f}x"}
        entries.append(Entry(f"e{i}-{lo}", match, tile, provenance))
    return policy.make_table(entries)


# --------------------------------------------------------------------------- resolving
def tile_launch(policy: ModuleType, entry: Entry) -> object:
    """The launch a hit on ``entry`` must be: its tile's fields, then its source."""
    return policy.Launch(*dataclasses.astuple(entry.config), f"table:{entry.id}")


def check_resolve(policy: ModuleType, table: Table, key: object,
                  deployment: Mapping[str, int]) -> object:
    """``resolve`` is total; a hit gives exactly its entry's tile, a miss the very baseline
    object; ``deployment`` is the key's own, and warm-up for it covers the launch."""
    launch = policy.resolve(key, table)
    assert isinstance(launch, policy.Launch)
    hits = table.matches(key)
    assert len(hits) <= 1
    if hits:
        assert launch == tile_launch(policy, hits[0])
    else:
        assert launch is policy.baseline(key)
    assert policy.KERNEL.deployment_of(key) == deployment
    assert launch.compile_key() in policy.compile_key_sources(table, key.arch, **deployment)
    assert launch.compile_key() in policy.KERNEL.compile_keys(table, key.arch, **deployment)
    return launch


def check_falls_back(policy: ModuleType, table: Table, key: object) -> None:
    """A key no entry of ``table`` matches gets the baseline object, vLLM's launch shape."""
    if not table.matches(key):
        launch = policy.resolve(key, table)
        assert launch is policy.baseline(key)
        assert launch.source == "baseline"
        assert launch.compile_key() == dataclasses.astuple(policy.BASELINE_TILE)


def check_shipped_and_empty(policy: ModuleType, key: object, baseline_tile: tuple) -> None:
    """An empty table and the shipped one (where it has no entry) give the baseline, whose
    tile is ``baseline_tile``, vLLM 0.33.0's."""
    assert policy.resolve(key, policy.make_table([])) is policy.baseline(key)
    if not policy.shipped_table().matches(key):
        assert policy.resolve(key) is policy.baseline(key)
    assert policy.baseline(key).compile_key() == baseline_tile
    assert policy.Tile(*baseline_tile) == policy.BASELINE_TILE


# --------------------------------------------------------------------------- tables as files
def check_round_trip(policy: ModuleType, entries: Sequence[Entry], header: str) -> Table:
    """``render_table`` then ``loads_table`` gives the same entries and the same text."""
    text = policy.render_table(entries, header)
    again = policy.loads_table(text, "<round trip>")
    assert again.entries == tuple(entries)
    assert policy.render_table(again.entries, header) == text
    return again


def check_shipped_evidence(policy: ModuleType) -> Table:
    """The shipped table loads with this kernel's schema from its own file, and every entry
    carries the evidence ``dsv4-policy check`` asks for."""
    table = policy.shipped_table()
    assert table.schema is policy.SCHEMA
    assert str(table.source).endswith(f"tables/{policy.NAME}.toml")
    for entry in table.entries:
        assert launch_table.provenance_problems(entry) == [], entry.id
    return table


def check_spec(policy: ModuleType, *, compile_key_fields: tuple[str, ...],
               deployment: Sequence[str]) -> object:
    """``KERNEL`` describes this module; returns the key of its command-line defaults (on
    sm90), which resolves and falls back through the spec as through the module."""
    spec = policy.KERNEL
    assert isinstance(spec, launch_table.KernelSpec)
    assert spec.name == policy.NAME and spec.table_file == f"tables/{policy.NAME}.toml"
    assert spec.key_type is policy.Key and spec.launch_type is policy.Launch
    assert spec.tile_type is policy.Tile and spec.baseline_tile == policy.BASELINE_TILE
    assert spec.compile_key_fields == compile_key_fields
    assert [p.name for p in spec.deployment] == list(deployment)
    assert set(spec.key_defaults) == set(policy.SCHEMA.field_names)
    assert spec.shipped_table().source.endswith(spec.table_file)
    defaults = {k: v for k, v in spec.key_defaults.items() if v is not None}
    key = policy.Key(**{**defaults, "arch": "sm90"})
    assert spec.resolve(key, None) == policy.resolve(key)
    assert spec.baseline(key) is policy.baseline(key)
    return key


def launch_toml(values: Mapping[str, object], match: str = "") -> str:
    """A one-entry table's text with ``values`` as its launch (and ``match`` lines)."""
    lines = "".join(f"{k} = {json.dumps(v) if isinstance(v, str) else v}\n"
                    for k, v in values.items())
    return (f'schema = 1\n[[entry]]\nid = "a"\n[entry.launch]\n{lines}'
            + (f"[entry.match]\n{match}" if match else ""))


def check_bad_tile(policy: ModuleType, tile: tuple, message: str) -> None:
    """A bad tile is refused with ``message`` built in code and read from a file."""
    with pytest.raises(ValueError, match=message):
        policy.Tile(*tile)
    with pytest.raises(TableError, match=message):
        policy.loads_table(launch_toml(dict(zip(policy.TILE_FIELDS, tile, strict=True))))


def check_files_refuse_unknown_fields_and_overlaps(
    policy: ModuleType, tile: tuple, key: object, *, unknown_launch: str, unknown_match: str,
) -> None:
    """A launch missing a field, an unknown launch field (``unknown_launch``) or match field
    (``unknown_match``), and two overlapping entries are refused, naming what; resolving
    through something that is not this kernel's table is a TypeError."""
    fields = dict(zip(policy.TILE_FIELDS, tile, strict=True))
    *given, last = policy.TILE_FIELDS
    first = policy.TILE_FIELDS[0]
    with pytest.raises(TableError, match=f"missing; a launch gives {', '.join(given)} and "
                                         f"{last}"):
        policy.loads_table(launch_toml({k: v for k, v in fields.items() if k != first}))
    with pytest.raises(TableError, match=f"unknown field '{unknown_launch}'"):
        policy.loads_table(launch_toml({**fields, unknown_launch: 128}))
    with pytest.raises(TableError, match=f"unknown match field '{unknown_match}'"):
        policy.loads_table(launch_toml(fields, f"{unknown_match} = 128\n"))
    two = [Entry(f"e{i}", {"num_tokens": Range(i * 10, 100)}, policy.Tile(*tile))
           for i in range(2)]
    with pytest.raises(TableError, match="overlap"):
        policy.make_table(two)
    with pytest.raises(TypeError, match=f"{policy.NAME} launch table"):
        policy.resolve(key, object())
