"""resolve(): the baseline, unchanged, for every key no entry matches; safe launches on hits."""

from __future__ import annotations

import dataclasses

import pytest
from dsv4_policy import table as generic
from dsv4_policy.kernels.c128a import (
    Entry,
    Key,
    Launch,
    Range,
    TableError,
    Tile,
    baseline,
    compile_keys,
    make_table,
    resolve,
    shipped_table,
)
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from policy_strategies import (
    HEAVY_EXAMPLES,
    KEYS_PER_EXAMPLE,
    PROPERTY_EXAMPLES,
    SEEDED_TABLES,
    batches,
    c128a_entries,
    disjoint_entries,
    far_keys,
    keys_for,
    keys_inside,
    keys_near,
    oracle_baseline,
    oracle_match,
    oracle_overlap,
    seeded_table_and_keys,
)


def assert_is_baseline(launch: Launch, key: Key) -> None:
    """Equal to baseline(key) and, field by field, to the plain restatement of it."""
    assert launch == baseline(key)
    assert dataclasses.asdict(launch) == oracle_baseline(key)


def assert_safe_hit(launch: Launch, key: Key, entry: Entry, table: object) -> None:
    """A table hit keeps the baseline geometry and only swaps the tile."""
    expected = oracle_baseline(key)
    tile = entry.config
    expected.update(tokens_per_program=tile.tokens_per_program,
                    cols_per_program=tile.cols_per_program, num_warps=tile.num_warps,
                    split_width=tile.split_width, source=f"table:{entry.id}")
    assert dataclasses.asdict(launch) == expected
    cap = launch.row_stride
    assert launch.width % 128 == 0
    assert launch.width <= cap
    if key.max_seq_len <= key.max_model_len:  # every key a server can produce
        assert launch.width >= key.max_seq_len // key.compress_ratio
    assert launch.row_stride == baseline(key).row_stride
    assert launch.compile_key() in compile_keys(table, key.arch, key.max_model_len)


# --------------------------------------------------------------------------- shipped table
@settings(max_examples=PROPERTY_EXAMPLES // KEYS_PER_EXAMPLE)
@given(batches(st.one_of(far_keys(), keys_near(list(shipped_table().entries)))))
def test_shipped_table_falls_back_to_the_baseline_unchanged(keys: list[Key]) -> None:
    table = shipped_table()
    for key in keys:
        hits = [e for e in table.entries if oracle_match(e, key)]
        launch = resolve(key)
        assert resolve(key, table) == launch
        if hits:
            event("shipped table hit")
            assert_safe_hit(launch, key, hits[0], table)
        else:
            assert_is_baseline(launch, key)


def test_shipped_table_is_valid_and_has_only_justified_entries() -> None:
    table = shipped_table()
    for entry in table.entries:
        assert entry.provenance, f"entry {entry.id} ships without provenance"
    assert compile_keys(None, "sm90", 1 << 20) >= {(1, 1024, 4)}


# --------------------------------------------------------------------------- synthetic tables
SEEDED = [make_table(entries) for entries in SEEDED_TABLES]


def check_table_key(entries: list[Entry], table: object, key: Key) -> None:
    """The core property for one table and key: a miss is the baseline; a hit is safe."""
    hits = [e for e in entries if oracle_match(e, key)]
    assert len(hits) <= 1, "disjoint entries cannot both match"
    launch = resolve(key, table)  # type: ignore[arg-type]
    if hits:
        event("hit")
        assert_safe_hit(launch, key, hits[0], table)
    else:
        event("miss")
        assert_is_baseline(launch, key)
        sentinel = object()
        assert generic.resolve(table, key, sentinel) is sentinel  # type: ignore[arg-type]


@settings(max_examples=PROPERTY_EXAMPLES // KEYS_PER_EXAMPLE)
@given(seeded_table_and_keys())
def test_synthetic_tables_fall_back_unchanged_and_hit_safely(case: tuple[int, list[Key]]
                                                             ) -> None:
    index, keys = case
    for key in keys:
        check_table_key(SEEDED_TABLES[index], SEEDED[index], key)


@settings(max_examples=HEAVY_EXAMPLES * 3, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generated_tables_fall_back_unchanged_and_hit_safely(data: st.DataObject) -> None:
    entries = data.draw(disjoint_entries())
    key = data.draw(keys_for(entries))
    check_table_key(entries, make_table(entries), key)


@settings(max_examples=HEAVY_EXAMPLES * 3, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_key_inside_an_entry_hits_that_entry(data: st.DataObject) -> None:
    entries = data.draw(disjoint_entries().filter(bool))
    entry = data.draw(st.sampled_from(entries))
    key = data.draw(keys_inside(entry))
    table = make_table(entries)
    launch = resolve(key, table)
    assert launch.source == f"table:{entry.id}"
    assert_safe_hit(launch, key, entry, table)
    assert generic.resolve(table, key, None) == entry.config


# --------------------------------------------------------------------------- compile keys
@settings(max_examples=HEAVY_EXAMPLES * 3, suppress_health_check=[HealthCheck.too_slow])
@given(disjoint_entries(), st.data())
def test_compile_keys_cover_every_launch_of_a_deployment(entries: list[Entry],
                                                          data: st.DataObject) -> None:
    table = make_table(entries)
    key = data.draw(st.one_of(keys_near(entries), *(keys_inside(e) for e in entries[:2])))
    keys = compile_keys(table, key.arch, key.max_model_len)
    assert (1, 1024, 4) in keys
    assert resolve(key, table).compile_key() in keys
    # Exactly the baseline plus the tiles of entries this deployment can reach.
    reachable = {(1, 1024, 4)}
    for e in entries:
        arch, mml = e.match.get("arch"), e.match.get("max_model_len")
        if arch is not None and key.arch not in arch:
            continue
        if isinstance(mml, Range) and not (mml.min <= key.max_model_len
                                           and (mml.max is None or key.max_model_len <= mml.max)):
            continue
        if isinstance(mml, frozenset) and key.max_model_len not in mml:
            continue
        reachable.add(e.config.compile_key())
    assert keys == reachable


def test_compile_keys_skip_other_archs_and_model_lengths() -> None:
    table = make_table([
        Entry("sm90-long", {"arch": "sm90", "compress_ratio": 128,
                            "max_model_len": Range(1 << 19)}, Tile(1, 2048, 8)),
        Entry("sm90-short", {"arch": ["sm90"], "compress_ratio": [128],
                             "max_model_len": Range(1, (1 << 19) - 1)}, Tile(4, 256, 4)),
        Entry("any-arch", {"compress_ratio": 4}, Tile(8, 128, 2, True)),
        Entry("sm100", {"arch": "sm100", "compress_ratio": 128}, Tile(2, 512, 4)),
    ])
    assert compile_keys(table, "sm90", 1 << 20) == {(1, 1024, 4), (1, 2048, 8), (8, 128, 2)}
    assert compile_keys(table, "sm90", 4096) == {(1, 1024, 4), (4, 256, 4), (8, 128, 2)}
    assert compile_keys(table, "sm86", 4096) == {(1, 1024, 4), (8, 128, 2)}
    with pytest.raises(ValueError, match="arch 'nine' is not"):
        compile_keys(table, "nine", 4096)
    with pytest.raises(ValueError, match="max_model_len"):
        compile_keys(table, "sm90", 0)


def test_resolve_refuses_a_table_of_another_kind() -> None:
    from dsv4_policy import serve

    with pytest.raises(TypeError, match="expected a C128A launch table"):
        resolve(Key("sm90", 128, 4096, 1, 1, 0, 2), serve.shipped_table())  # type: ignore[arg-type]


def test_resolve_shares_launches_without_mixing_them_up() -> None:
    """Cached launches: the same key gives an equal launch; different keys never alias."""
    table = make_table([Entry("a", {"arch": "sm90", "num_decode_tokens": Range(1, 4)},
                              Tile(4, 256, 4))])
    seen: dict[Launch, Key] = {}
    for msl in range(0, 300_000, 997):
        for nd in (0, 1, 5):
            key = Key("sm90", 128, 1 << 18, msl, nd, 0, 2)
            launch = resolve(key, table)
            assert launch == resolve(key, table)
            expected = dict(oracle_baseline(key))
            if 1 <= nd <= 4:
                expected.update(tokens_per_program=4, cols_per_program=256, source="table:a")
            assert dataclasses.asdict(launch) == expected
            seen.setdefault(launch, key)
    assert len(seen) > 3


# --------------------------------------------------------------------------- stateful
class TableModel(RuleBasedStateMachine):
    """Add and remove entries; the table must agree with a plain dict of entries."""

    def __init__(self) -> None:
        super().__init__()
        self.table = make_table([])
        self.model: dict[str, Entry] = {}

    @rule(entry=c128a_entries())
    def add(self, entry: Entry) -> None:
        clash = [e for e in self.model.values() if e.id == entry.id or oracle_overlap(e, entry)]
        if clash:
            with pytest.raises(TableError) as info:
                self.table.with_entry(entry)
            message = str(info.value)
            assert all(repr(e.id) in message for e in clash), message
            return
        self.table = self.table.with_entry(entry)
        self.model[entry.id] = entry

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        entry_id = data.draw(st.sampled_from(sorted(self.model)))
        self.table = self.table.without_entry(entry_id)
        del self.model[entry_id]
        with pytest.raises(KeyError, match=entry_id):
            self.table.without_entry(entry_id)

    @rule(data=st.data())
    def check_a_key(self, data: st.DataObject) -> None:
        entries = list(self.model.values())
        key = data.draw(st.one_of(keys_near(entries), far_keys(),
                                  *(keys_inside(e) for e in entries[:2])))
        hits = [e for e in entries if oracle_match(e, key)]
        note(f"key={key} hits={[e.id for e in hits]}")
        launch = resolve(key, self.table)
        if hits:
            assert_safe_hit(launch, key, hits[0], self.table)
        else:
            assert_is_baseline(launch, key)

    @invariant()
    def same_entries(self) -> None:
        assert {e.id: e for e in self.table.entries} == self.model


TableModel.TestCase.settings = settings(
    max_examples=HEAVY_EXAMPLES, stateful_step_count=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_table_model = TableModel.TestCase


def test_entries_must_not_be_anything_but_entries() -> None:
    with pytest.raises(TypeError, match="entry #1 must be an Entry"):
        make_table([{"id": "x"}])  # type: ignore[list-item]
