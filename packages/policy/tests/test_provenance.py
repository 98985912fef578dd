"""``dsv4-policy check`` refuses kernel entries without their measurements.

Every registered kernel's entries must say how many keys of their box were timed
(``probes``) and the worst ratio over the baseline among them (``worst_speedup``, at
least 1.0): an entry slower than the baseline somewhere in its box is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dsv4_policy.cli import main
from dsv4_policy.launch_table import provenance_problems
from dsv4_policy.registry import KERNELS

DATA = Path(__file__).parent / "data"
GOOD = DATA / "good" / "c128a_example.toml"


def _with(tmp_path: Path, old: str, new: str) -> Path:
    text = GOOD.read_text()
    assert old in text
    path = tmp_path / "c128a.toml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(("old", "new", "fragment"), [
    ("probes = 8\n", "", "provenance.probes: expected the number of keys timed"),
    ("probes = 8\n", "probes = 0\n", "got integer 0"),
    ("probes = 8\n", 'probes = "8"\n', "got string '8'"),
    ('worst_speedup = "1.03x"\n', "", "provenance.worst_speedup: expected the worst"),
    ('worst_speedup = "1.03x"\n', 'worst_speedup = "0.97x"\n', "0.97x is below 1.0x"),
    ('worst_speedup = "1.03x"\n', "worst_speedup = 1.03\n", "like \"1.04x\"; got float 1.03"),
    ('worst_speedup = "1.03x"\n', 'worst_speedup = "fast"\n', "got string 'fast'"),
])
def test_check_refuses_entries_without_their_evidence(capsys, tmp_path, old, new,
                                                      fragment) -> None:
    path = _with(tmp_path, old, new)
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL {path}: 1 problem(s)" in out
    assert "'sm90-decode-short' (#1)" in out and fragment in out, out


def test_check_accepts_entries_with_their_evidence(capsys) -> None:
    assert main(["check", str(GOOD)]) == 0
    assert "ok   " in capsys.readouterr().out


def test_every_shipped_kernel_table_carries_its_evidence() -> None:
    for spec in KERNELS.values():
        for entry in spec.shipped_table().entries:
            assert provenance_problems(entry) == [], entry.id
            assert float(entry.provenance["worst_speedup"][:-1]) >= 1.0
            assert entry.provenance["probes"] >= 12
