"""Properties every registered kernel's launches and table must have, parametrized over
the registry: a key no entry matches gets the baseline unchanged, a hit gets exactly its
entry's tile, warm-up covers it, and a bad table is refused naming entry and field."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import itertools
import json
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TypeVar

import pytest
from dsv4_policy import kernels, registry
from dsv4_policy import table as generic
from dsv4_policy.cli import main
from dsv4_policy.conditions import Range
from dsv4_policy.detect import load_any
from dsv4_policy.launch_table import MAX_BOXES, KernelSpec
from dsv4_policy.registry import KERNELS, get, names
from dsv4_policy.table import Entry, TableError
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from policy_strategies import (
    ARCHS,
    HEAVY_EXAMPLES,
    KEYS_PER_EXAMPLE,
    PROPERTY_EXAMPLES,
    batches,
    oracle_match,
)
from policy_strategies import key_args as _filled

SPECS = list(KERNELS.values())
T = TypeVar("T")
POOL = (0, 1, 2, 3, 7, 64, 127, 128, 129, 256, 640, 1024, 4096, 65536, 1 << 20)


def _valid_values(spec: KernelSpec, name: str) -> list[int]:
    """The pool values a key accepts for ``name``, found by constructing keys."""
    found = []
    for value in POOL:
        try:
            spec.key_type(**_filled(spec, **{name: value}))
        except ValueError:
            continue
        found.append(value)
    return found


def per_kernel(build: Callable[[KernelSpec], T]) -> Callable[[KernelSpec], T]:
    """``build(spec)`` made once per registered kernel (a KernelSpec is not hashable)."""
    made: dict[str, T] = {}

    @functools.wraps(build)
    def cached(spec: KernelSpec) -> T:
        if spec.name not in made:
            made[spec.name] = build(spec)
        return made[spec.name]

    return cached


VALUES = {spec.name: {f.name: _valid_values(spec, f.name) for f in spec.schema.fields
                      if f.type is int} for spec in SPECS}


@per_kernel
def keys(spec: KernelSpec) -> st.SearchStrategy[object]:
    """Valid keys of ``spec`` from the pool (one strategy per kernel, built once)."""
    fields = {f.name: (st.sampled_from(ARCHS) if f.type is str
                       else st.sampled_from(VALUES[spec.name][f.name]))
              for f in spec.schema.fields}

    values = st.fixed_dictionaries(fields)

    @st.composite
    def draw_key(draw: st.DrawFn) -> object:
        for _ in range(8):  # a kernel may relate fields (e.g. rows >= tokens): draw again
            try:
                return spec.key_type(**draw(values))
            except ValueError:
                continue
        assume(False)

    return draw_key()


def _around(value: object) -> list[object]:
    """Tile values near the baseline's: powers of two from 1/16x to 16x, or either bool."""
    if type(value) is bool:
        return [False, True]
    if type(value) is int:
        return sorted({value << k for k in range(5)} | {value >> k for k in range(1, 5)} - {0})
    return [value]


@per_kernel
def tiles(spec: KernelSpec) -> st.SearchStrategy[object]:
    """Every valid tile whose fields are each near the baseline tile's, equally likely
    (listed once per kernel, so no draw is ever refused)."""
    names_ = spec.schema.config_to_toml(spec.baseline_tile)  # type: ignore[misc]
    valid = []
    for values in itertools.product(*(_around(getattr(spec.baseline_tile, name))
                                      for name in names_)):
        try:
            valid.append(spec.tile_type(**dict(zip(names_, values, strict=True))))
        except ValueError:
            continue
    return st.sampled_from(valid)


_ARCH_SETS = st.lists(st.sampled_from(ARCHS), min_size=1, max_size=3, unique=True).map(frozenset)
_FORMS = st.sampled_from(("one", "closed", "open"))


@per_kernel
def conditions(spec: KernelSpec) -> st.SearchStrategy[dict[str, object]]:
    """A match over some of ``spec``'s fields: an arch set, or a pool value as one value,
    a closed range or an open-ended one (one strategy per kernel, built once)."""
    pairs = {f.name: st.lists(st.sampled_from(VALUES[spec.name][f.name]), min_size=2,
                              max_size=2).map(sorted)
             for f in spec.schema.fields if f.type is int}

    @st.composite
    def draw_match(draw: st.DrawFn) -> dict[str, object]:
        match: dict[str, object] = {}
        for f in spec.schema.fields:
            if draw(st.booleans()):
                continue
            if f.type is str:
                match[f.name] = draw(_ARCH_SETS)
                continue
            lo, hi = draw(pairs[f.name])
            form = draw(_FORMS)
            match[f.name] = (frozenset({lo}) if form == "one" else Range(lo, hi)
                             if form == "closed" else Range(lo))
        return match

    return draw_match()


@per_kernel
def tables(spec: KernelSpec) -> st.SearchStrategy[list[Entry]]:
    """Up to 5 entries of ``spec`` with no two overlapping (one strategy per kernel)."""
    entry_parts = st.tuples(conditions(spec), tiles(spec))

    @st.composite
    def draw_entries(draw: st.DrawFn) -> list[Entry]:
        entries: list[Entry] = []
        for i in range(draw(st.integers(1, 5))):
            match, tile = draw(entry_parts)
            candidate = Entry(f"e{i}", match, tile)
            if all(generic.overlap(spec.schema, candidate, e) is None for e in entries):
                entries.append(candidate)
        return entries

    return draw_entries()


def assert_launch(spec: KernelSpec, table: object, entries: list[Entry], key: object) -> None:
    hits = [e for e in entries if oracle_match(e, key)]
    assert len(hits) <= 1
    launch = spec.resolve(key, table)
    if not hits:
        event("miss")
        assert launch == spec.baseline(key)
        assert launch.source == "baseline"
        assert generic.resolve(table, key, None) is None  # type: ignore[arg-type]
        return
    event("hit")
    tile = hits[0].config
    assert launch.source == f"table:{hits[0].id}"
    for name, value in dataclasses.asdict(tile).items():
        assert getattr(launch, name) == value, name
    baseline = spec.baseline(key)
    for f in dataclasses.fields(launch):
        if f.name not in dataclasses.asdict(tile) and f.name != "source":
            assert getattr(launch, f.name) == getattr(baseline, f.name), f.name
    deployment = spec.deployment_of(key)
    if deployment is not None:
        assert launch.compile_key() in spec.compile_keys(table, key.arch, **deployment)


@pytest.mark.parametrize("spec", SPECS, ids=names())
@settings(max_examples=HEAVY_EXAMPLES * 3,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_generated_tables_fall_back_unchanged_and_hit_exactly(spec: KernelSpec,
                                                              data: st.DataObject) -> None:
    entries = data.draw(tables(spec))
    table = spec.make_table(entries)
    for _ in range(4):
        assert_launch(spec, table, entries, data.draw(keys(spec)))


@per_kernel
def key_batches(spec: KernelSpec) -> st.SearchStrategy[list[object]]:
    return batches(keys(spec))


@pytest.mark.parametrize("spec", SPECS, ids=names())
@settings(max_examples=PROPERTY_EXAMPLES // KEYS_PER_EXAMPLE,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_shipped_table_falls_back_unchanged(spec: KernelSpec, data: st.DataObject) -> None:
    table = spec.shipped_table()
    entries = list(table.entries)
    for key in data.draw(key_batches(spec)):
        assert spec.resolve(key, None) == spec.resolve(key, table)
        assert_launch(spec, table, entries, key)


@pytest.mark.parametrize("spec", SPECS, ids=names())
def test_the_baseline_tile_is_vllms_own_launch(spec: KernelSpec) -> None:
    key = spec.key_type(**_filled(spec))
    launch = spec.baseline(key)
    # Each kernel's own tests pin its baseline tile to vLLM 0.33.0's launch; here, the
    # baseline launch carries exactly that tile.
    for name, value in dataclasses.asdict(spec.baseline_tile).items():
        assert getattr(launch, name) == value, name
    assert launch.source == "baseline"
    assert spec.shipped_table().source.endswith(spec.table_file)


@pytest.mark.parametrize("spec", SPECS, ids=names())
def test_shipped_table_entries_say_where_they_came_from(spec: KernelSpec) -> None:
    table = spec.shipped_table()
    for entry in table.entries:
        assert entry.provenance, f"{spec.name} entry {entry.id} ships without provenance"
    assert spec.loads_table(spec.render_table(table.entries)).entries == table.entries


@pytest.mark.parametrize("spec", SPECS, ids=names())
@settings(max_examples=HEAVY_EXAMPLES, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_rendered_tables_load_back_equal(spec: KernelSpec, data: st.DataObject) -> None:
    entries = data.draw(tables(spec))
    assume(entries)
    text = spec.render_table(entries, "a header")
    assert spec.loads_table(text).entries == tuple(entries)


def _bad_entries(spec: KernelSpec) -> list[tuple[list[Entry], str, str]]:
    """(entries, field, message fragment) for each class of mistake, for any kernel."""
    tile = spec.baseline_tile
    first_int = next(f for f in spec.schema.fields if f.type is int)
    many = {f.name: frozenset(range(0, 40, 2)) for f in spec.schema.fields
            if f.type is int and f.minimum == 0}
    if len(many) < 3:
        ints = [f.name for f in spec.schema.fields if f.type is int]
        per = 20  # odd values per field, each its own span: enough boxes to pass the limit
        while per ** len(ints) <= MAX_BOXES:
            per *= 2
        many = {name: frozenset(range(1, 2 * per, 2)) for name in ints}
    return [
        ([Entry("a", {"no_such_field": 1}, tile)], "match.no_such_field", "unknown match field"),
        ([Entry("a", {"arch": "hopper"}, tile)], "match.arch", "not an SM architecture"),
        ([Entry("a", {first_int.name: first_int.minimum - 1}, tile)],
         f"match.{first_int.name}", "below the smallest valid"),
        ([Entry("a", {}, "not a tile")], "launch.tile", "got string"),
        ([Entry("a", {}, tile, {"runs": [1, 2]})], "provenance.runs", "strings, numbers"),
        ([Entry("a", {first_int.name: Range(first_int.minimum, 10)}, tile),
          Entry("b", {first_int.name: Range(10)}, tile)], "match", "overlap"),
        ([Entry("a", many, tile)], "match", f"(limit {MAX_BOXES})"),
        ([Entry("bad id", {}, tile)], "id", "id must be"),
    ]


@pytest.mark.parametrize("spec", SPECS, ids=names())
def test_bad_tables_are_refused_naming_entry_and_field(spec: KernelSpec) -> None:
    for entries, field, fragment in _bad_entries(spec):
        with pytest.raises(TableError) as info:
            spec.make_table(entries)
        found = [p for p in info.value.problems if p.field == field]
        assert found, f"{spec.name}: no problem on {field}: {info.value}"
        assert any(fragment in p.message for p in found), str(info.value)


@pytest.mark.parametrize("spec", SPECS, ids=names())
def test_tables_refuse_bad_tiles_in_toml(spec: KernelSpec, tmp_path: Path) -> None:
    raw = spec.schema.config_to_toml(spec.baseline_tile)  # type: ignore[misc]
    launch = "\n".join(f"{k} = {json.dumps(v)}" for k, v in raw.items() if k != "num_warps")
    path = tmp_path / "t.toml"
    for extra, expected in (("", {"launch.num_warps"}),
                            ("row_stride = 5\n", {"launch.row_stride"})):
        path.write_text(f'schema = 1\n[[entry]]\nid = "a"\n[entry.launch]\n{launch}\n'
                        f"num_warps = 3\n{extra}")
        with pytest.raises(TableError) as info:
            spec.load_table(path)
        assert {p.field for p in info.value.problems} == expected
        with pytest.raises(TableError):
            load_any(path, spec.name)


# --------------------------------------------------------------------------- command line
def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


@pytest.mark.parametrize("spec", SPECS, ids=names())
def test_the_kernel_command_matches_resolve(spec: KernelSpec,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    values = _filled(spec)
    for f in spec.schema.fields:
        if f.type is int and values[f.name] == 1 and 64 in VALUES[spec.name][f.name]:
            values[f.name] = 64
    argv = [spec.name, "--json"] + [x for k, v in values.items()
                                    for x in ("--" + k.replace("_", "-"), str(v))]
    code, out = run(capsys, *argv)
    data = json.loads(out)
    key = spec.key_type(**data["key"])
    assert code == 0 and data["key"] == values
    assert data["launch"] == json.loads(json.dumps(dataclasses.asdict(spec.resolve(key, None))))
    assert data["compile_key"] == list(spec.resolve(key, None).compile_key())


@pytest.mark.parametrize("spec", SPECS, ids=names())
def test_keys_lists_the_kernels_compile_keys(spec: KernelSpec,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    deployment = {d.name: 128 if d.default is None else d.default for d in spec.deployment}
    argv = ["keys", "--kernel", spec.name, "--arch", "sm90", "--json"]
    argv += [x for k, v in deployment.items() for x in ("--" + k.replace("_", "-"), str(v))]
    code, out = run(capsys, *argv)
    assert code == 0
    listed = {tuple(k[n] for n in spec.compile_key_fields) for k in
              json.loads(out)["compile_keys"]}
    assert listed == spec.compile_keys(None, "sm90", **deployment)
    assert spec.baseline(spec.key_type(**_filled(spec))).compile_key() in listed


def test_keys_refuses_flags_of_another_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["keys", "--kernel", "swa", "--arch", "sm90", "--window-size", "128",
                 "--block-size", "64", "--max-model-len", "4096"])
    assert code == 2
    assert "--max-model-len do(es) not apply to --kernel swa" in capsys.readouterr().err
    assert main(["keys", "--kernel", "swa", "--arch", "sm90"]) == 2
    assert "swa needs --window-size" in capsys.readouterr().err


def test_check_detects_every_registered_kernels_table(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    for spec in SPECS:
        kind, _ = load_any(spec.shipped_table().source)
        assert kind == spec.name
    code, out = run(capsys, "check", *(s.shipped_table().source for s in SPECS))
    assert code == 0 and out.count("ok   ") == len(SPECS)


def test_the_registry_refuses_unknown_names() -> None:
    assert get("swa") is KERNELS["swa"]
    with pytest.raises(ValueError, match="registered: " + ", ".join(names())):
        get("c4a")


# --------------------------------------------------------------------------- discovery
def _package(tmp_path: Path, name: str, modules: dict[str, str]) -> ModuleType:
    """A throwaway package ``name`` under ``tmp_path`` holding ``modules`` (name -> source)."""
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(source)
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))


def test_every_module_of_the_kernels_package_is_registered_c128a_first() -> None:
    found = [m.name for m in pkgutil.iter_modules(kernels.__path__) if not m.name.startswith("_")]
    assert sorted(names()) == sorted(found)
    assert names()[0] == "c128a" and list(names()[1:]) == sorted(names()[1:])
    for name, spec in KERNELS.items():
        assert importlib.import_module(f"dsv4_policy.kernels.{name}").KERNEL is spec


def test_a_module_without_its_kernel_spec_is_an_error_naming_it(tmp_path: Path) -> None:
    spec_source = ("from dsv4_policy.kernels.c128a import KERNEL as _C\n"
                   "import dataclasses\nKERNEL = dataclasses.replace(_C, name={!r})\n")
    package = _package(tmp_path, "fake_kernels_a", {
        "zeta": spec_source.format("zeta"), "alpha": spec_source.format("alpha"),
        "c128a": spec_source.format("c128a"), "_helpers": "X = 1\n"})
    assert list(registry.discover(package)) == ["c128a", "alpha", "zeta"]
    broken = _package(tmp_path, "fake_kernels_b", {"half_done": "KERNEL = None\n"})
    with pytest.raises(registry.RegistryError,
                       match=r"fake_kernels_b\.half_done .*does not define KERNEL = KernelSpec"):
        registry.discover(broken)
    misnamed = _package(tmp_path, "fake_kernels_c", {"one": spec_source.format("two")})
    with pytest.raises(registry.RegistryError,
                       match=r"fake_kernels_c\.one: KERNEL\.name is 'two'; it must be"):
        registry.discover(misnamed)
