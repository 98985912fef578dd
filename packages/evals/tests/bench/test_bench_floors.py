"""The bench gates' summaries (:mod:`dsv4_evals.bench.floors`) from recorded results.

Uses the numbers of a real bench run's shape (made up here, seeded), so the min, p5,
median and worst-five keys and the floor table can be checked against a direct
computation.
"""

from __future__ import annotations

import random
import statistics

import pytest
from dsv4_evals.bench import floors


def _rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"entry": f"sm90-e{i % 7}", "tile": [1, 512, 4, True], "ratio": rng.uniform(0.9, 3),
             "key": {"num_decode_tokens": rng.randint(0, 99), "num_prefill_tokens": i,
                     "max_seq_len": 1000 + i, "max_model_len": 1 << 20}} for i in range(n)]


def test_key_summary_matches_a_direct_computation() -> None:
    rows = _rows(200, 3)
    got = floors.key_summary(rows, seed=77)
    ratios = sorted(r["ratio"] for r in rows)
    assert got["seed"] == 77 and got["count"] == 200
    assert got["min"] == ratios[0] and got["p5"] == ratios[9]
    assert got["median"] == statistics.median(ratios)
    assert [r["ratio"] for r in got["worst"]] == ratios[:5]
    text = floors.key_markdown(got)
    assert "seed 77" in text and f"min **{ratios[0]:.3f}x**" in text
    assert text.count("| sm90-e") == 5


def test_key_summary_refuses_no_keys() -> None:
    with pytest.raises(ValueError, match="no keys"):
        floors.key_summary([], seed=1)


def test_floor_table_has_one_cell_per_shape() -> None:
    floor = {f"prefill-T{t}-w{w}": {"width": w, "tokens": t, "pct_of_ideal": 100 + w / 128 + t / 8192,
                                    "baseline_us": 2.0, "ideal_us": 1.0, "fill_us": 3.0}
             for w in (128, 8192) for t in (8192, 65536)}
    text = floors.floor_markdown(floor)
    assert "| T \\ width | 128 | 8192 |" in text
    assert "| 8192 | 102% (200%, fill 300%) | 165% (200%, fill 300%) |" in text
    assert "| 65536 | 109% (200%, fill 300%) | 172% (200%, fill 300%) |" in text


def _floor_row(rng: random.Random, pct: float, fill_pct: float) -> dict:
    ideal = rng.uniform(4.0, 20.0)
    return {"pct_of_ideal": pct, "table_us": ideal * pct / 100, "fill_us": ideal * fill_pct / 100,
            "ideal_us": ideal, "source": "table:sm90-x", "width": 128, "tokens": 8192}


def test_floor_cells_and_misses_show_the_store_only_bound() -> None:
    row = {"width": 128, "tokens": 8192, "pct_of_ideal": 160.0, "baseline_us": 5.0,
           "ideal_us": 2.0, "fill_us": 5.0, "store_only_us": 2.7, "table_us": 3.2}
    text = floors.floor_markdown({"p": row})
    assert "| 8192 | 160% (250%, fill 250%, store-only 135%) |" in text
    failures, misses = floors.floor_verdicts({"p": row}, 150.0)
    assert failures == []
    assert misses == ["p: 160% of (empty launch + write floor); torch's fill_ of the same "
                      "view 250%, a store-only launch 135%"]


def test_floor_verdicts_fail_only_where_the_vendor_fill_does_better() -> None:
    rng = random.Random(5)
    floor = {
        "within": _floor_row(rng, rng.uniform(100, 149), rng.uniform(150, 300)),
        "pattern-bound": _floor_row(rng, 206.0, 250.0),  # above target, fill_ slower still
        "launch-bound": _floor_row(rng, 180.0, 140.0),  # above target, fill_ faster
    }
    failures, misses = floors.floor_verdicts(floor, 150.0)
    assert [f.split(":")[0] for f in failures] == ["launch-bound"]
    assert "slower than torch's fill_" in failures[0]
    assert [m.split(":")[0] for m in misses] == ["pattern-bound"]
    assert "206% of (empty launch + write floor); torch's fill_ of the same view 250%" in misses[0]
    assert floors.floor_verdicts({"within": floor["within"]}, 150.0) == ([], [])


def test_md_table_has_one_line_per_row() -> None:
    text = floors.md_table(["call", "µs"], [["decode", "1.50"], ["prefill", "2.25"]])
    assert text.splitlines() == ["| call | µs |", "|---|---|", "| decode | 1.50 |",
                                 "| prefill | 2.25 |"]
