"""Writing tables: render_table output loads back to equal entries, byte-stable."""

from __future__ import annotations

import math

import pytest
from dsv4_policy import toml_out
from dsv4_policy.kernels.c128a import (
    SHIPPED,
    Entry,
    Key,
    Range,
    TableError,
    Tile,
    loads_table,
    render_table,
    resolve,
    shipped_table,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_strategies import HEAVY_EXAMPLES, SEEDED_TABLES, disjoint_entries


@settings(max_examples=HEAVY_EXAMPLES * 3, suppress_health_check=[HealthCheck.too_slow])
@given(disjoint_entries(), st.text(max_size=80))
def test_render_then_load_gives_equal_entries(entries: list[Entry], header: str) -> None:
    bad = [ch for ch in header if (ord(ch) < 0x20 and ch not in "\t\n") or ord(ch) == 0x7F]
    if bad:
        with pytest.raises(ValueError, match="control character"):
            render_table(entries, header)
        return
    text = render_table(entries, header)
    table = loads_table(text)
    assert list(table.entries) == entries
    assert render_table(table.entries, header) == text  # a second pass changes nothing
    for line in header.split("\n") if header else ():
        assert ("# " + line).rstrip() + "\n" in text


def test_seeded_tables_round_trip() -> None:
    for entries in SEEDED_TABLES:
        assert list(loads_table(render_table(entries)).entries) == entries


def test_rendered_shape_is_the_documented_one() -> None:
    entry = Entry("sm90-decode", {"arch": ["sm90"], "compress_ratio": 128,
                                  "max_seq_len": Range(0, 65535), "num_decode_tokens": {1, 2, 4},
                                  "max_model_len": Range(1 << 20)},
                  Tile(4, 256, 4), {"gpu": "H200", "speedup": 1.75, "date": "2025-01-01",
                                    "command": 'nox -s tune -- --arch "sm90"'})
    text = render_table([entry], "tuned on one GPU\nsecond line")
    assert text.startswith("# tuned on one GPU\n# second line\n\nschema = 1\n")
    assert '[[entry]]\nid = "sm90-decode"\n' in text
    assert 'arch = "sm90"\ncompress_ratio = 128\nmax_model_len = { min = 1048576 }\n' in text
    assert "max_seq_len = { min = 0, max = 65535 }\nnum_decode_tokens = [1, 2, 4]\n" in text
    assert ("[entry.launch]\ntokens_per_program = 4\ncols_per_program = 256\nnum_warps = 4\n"
            "split_width = false\n") in text
    assert 'command = "nox -s tune -- --arch \\"sm90\\""' in text
    assert loads_table(text).entries == (entry,)


def test_render_refuses_what_load_would_refuse() -> None:
    a = Entry("a", {"max_seq_len": Range(0, 100)}, Tile(1, 1024, 4))
    b = Entry("b", {"max_seq_len": Range(100)}, Tile(2, 1024, 4))
    with pytest.raises(TableError, match="entries 'a' \\(#1\\) and 'b' \\(#2\\)"):
        render_table([a, b])
    with pytest.raises(ValueError, match="non-finite"):
        toml_out.value(math.inf)


def test_the_shipped_table_round_trips_and_every_entry_says_where_it_came_from() -> None:
    table = shipped_table()
    assert table.source.endswith(SHIPPED)
    assert loads_table(render_table(table.entries)).entries == table.entries
    for entry in table.entries:
        assert {"gpu", "date", "command"} <= set(entry.provenance), entry.id
    assert render_table([]) == "schema = 1\n"


def test_resolve_reads_a_rendered_table() -> None:
    entry = Entry("t", {"arch": "sm90", "max_seq_len": Range(0, 8191)}, Tile(8, 128, 2, True))
    table = loads_table(render_table([entry]))
    launch = resolve(Key("sm90", 128, 1 << 20, 5000, 3, 0, 2), table)
    assert (launch.source, launch.compile_key(), launch.split_width) == ("table:t", (8, 128, 2),
                                                                          True)
