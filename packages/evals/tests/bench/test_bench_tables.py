"""A tuner keeps other arches' entries: ``dsv4_evals.bench.tables`` on the shipped tables."""

from __future__ import annotations

import pytest
from dsv4_evals.bench import tables
from dsv4_policy import registry
from dsv4_policy.conditions import contains


@pytest.mark.parametrize("kernel", ["c128a", "swa"])
def test_a_tune_on_another_arch_keeps_every_shipped_entry(kernel: str) -> None:
    shipped = registry.get(kernel).shipped_table().entries
    assert shipped, f"the {kernel} table ships entries to keep"
    named = {a for e in shipped for a in e.match["arch"]}
    kept = tables.other_arch_entries(kernel, "sm80")
    assert "sm80" not in named
    assert [e.id for e in kept] == [e.id for e in shipped]


@pytest.mark.parametrize("kernel", ["c128a", "swa"])
def test_a_tune_on_the_tables_arch_replaces_its_entries(kernel: str) -> None:
    shipped = registry.get(kernel).shipped_table().entries
    arch = sorted({a for e in shipped for a in e.match["arch"]})[0]
    kept = tables.other_arch_entries(kernel, arch)
    assert all(not contains(e.match["arch"], arch) for e in kept)
    assert len(kept) < len(shipped)
