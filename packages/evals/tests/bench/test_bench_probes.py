"""The probe machinery of :mod:`dsv4_evals.bench.probes`: points, splits and the acceptance rule.

Timings are synthetic functions here, so each rule (every probe, both passes) is
checked against a case built to break it.
"""

from __future__ import annotations

import random

import pytest
from dsv4_evals.bench import probes
from hypothesis import given
from hypothesis import strategies as st

BOX = {"max_seq_len": (16512, 32895), "num_decode_tokens": (1, 4096),
       "num_prefill_tokens": (129, 1024)}

spans = st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)).map(lambda t: (min(t), max(t)))
boxes = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), spans, min_size=1, max_size=4)


@given(box=boxes, seed=st.integers(0, 2**32))
def test_probes_lie_in_the_box_and_cover_its_corners(box, seed) -> None:
    found = probes.box_probes(box, seed=seed)
    for p in found:
        assert set(p.point) == set(box)
        assert all(box[k][0] <= v <= box[k][1] for k, v in p.point.items())
    got = {probes.key_of(p.point) for p in found if p.kind == "corner"}
    for corner in probes.corners(box):
        assert probes.key_of(corner) in got
    assert len({probes.key_of(p.point) for p in found}) == len(found)


def test_a_box_gets_its_corners_extremes_and_eight_random_points() -> None:
    def extremes(box):
        return [{"max_seq_len": 20000, "num_decode_tokens": 10**9, "num_prefill_tokens": 0},
                {"num_decode_tokens": 1, "num_prefill_tokens": 10**9},  # a corner: dropped
                {"num_decode_tokens": 100, "num_prefill_tokens": 100}]

    found = probes.box_probes(BOX, seed=3, extremes=extremes)
    kinds = [p.kind for p in found]
    assert kinds.count("corner") == 8
    assert kinds.count("random") == 8
    ext = [p.point for p in found if p.kind == "extreme"]
    assert ext == [{"max_seq_len": 20000, "num_decode_tokens": 4096, "num_prefill_tokens": 129},
                   {"max_seq_len": 32895, "num_decode_tokens": 100, "num_prefill_tokens": 129}]


def test_corner_fields_limit_the_corners_and_the_rest_sit_at_their_maximum() -> None:
    box = {**BOX, "max_model_len": (40000, 1 << 20)}
    found = probes.box_probes(box, seed=1, corner_fields=["num_decode_tokens"])
    got = [p.point for p in found if p.kind == "corner"]
    assert got == [{"max_seq_len": 32895, "num_decode_tokens": d, "num_prefill_tokens": 1024,
                    "max_model_len": 1 << 20} for d in (1, 4096)]
    assert any(p.point["max_model_len"] < 1 << 20 for p in found if p.kind == "random")


def test_the_seed_reproduces_the_points_and_another_seed_changes_them() -> None:
    a = probes.box_probes(BOX, seed=11)
    b = probes.box_probes(BOX, seed=11)
    c = probes.box_probes(BOX, seed=12)
    assert [p.point for p in a] == [p.point for p in b]
    assert [p.point for p in a] != [p.point for p in c]


def test_bad_boxes_are_refused() -> None:
    with pytest.raises(ValueError, match="lo <= hi"):
        probes.box_probes({"a": (5, 1)}, seed=0)
    with pytest.raises(ValueError, match="single value"):
        probes.split_box({"a": (3, 3)}, "a")
    with pytest.raises(ValueError, match="no probes"):
        probes.choose_tile([], ["x"], "base", lambda p, t: 1.0)


@given(lo=st.integers(0, 10**6), width=st.integers(1, 10**6))
def test_split_halves_partition_the_range(lo, width) -> None:
    hi = lo + width
    low, high = probes.split_box({"t": (lo, hi), "w": (1, 2)}, "t")
    assert low["t"][0] == lo and high["t"][1] == hi and low["t"][1] + 1 == high["t"][0]
    assert low["t"][0] <= low["t"][1] and high["t"][0] <= high["t"][1]
    assert low["w"] == high["w"] == (1, 2)


def _timer(table, noise=0.0, seed=0):
    rng = random.Random(seed)
    calls = []

    def measure(point, tile):
        calls.append((tuple(point.items()), tile))
        return table(point, tile) * (1 + rng.uniform(-noise, noise))

    return measure, calls


def test_a_tile_that_loses_at_one_corner_is_refused() -> None:
    found = probes.box_probes(BOX, seed=1)
    corner = found[3].point

    def cost(point, tile):
        if tile == "base":
            return 10.0
        return 12.0 if point == corner else 5.0

    measure, _ = _timer(cost)
    verdict = probes.choose_tile(found, ["fast", "base"], "base", measure)
    assert verdict.tile is None
    assert [p.point for p in verdict.losing_probes] == [corner]


def test_a_tile_that_loses_only_at_a_random_point_is_refused() -> None:
    found = probes.box_probes(BOX, seed=1)
    rand = [p.point for p in found if p.kind == "random"][-1]

    def cost(point, tile):
        return 10.0 if tile == "base" else (10.5 if point == rand else 4.0)

    measure, _ = _timer(cost)
    assert probes.choose_tile(found, ["fast"], "base", measure).tile is None


def test_a_win_that_does_not_survive_the_confirmation_pass_is_refused() -> None:
    found = probes.box_probes(BOX, seed=1)
    seen: dict[tuple, int] = {}

    def measure(point, tile):
        k = (tuple(point.items()), tile)
        seen[k] = seen.get(k, 0) + 1
        if tile == "base":
            return 10.0
        return 9.0 if seen[k] == 1 else 11.0  # fast the first time only

    assert probes.choose_tile(found, ["lucky"], "base", measure).tile is None


def test_the_best_tile_that_wins_everywhere_is_chosen_with_its_worst_ratio() -> None:
    found = probes.box_probes(BOX, seed=2)

    def cost(point, tile):
        t = point["num_prefill_tokens"]
        return {"base": 10.0, "a": 8.0, "b": 5.0 if t < 1000 else 10.5,
                "c": 9.0 - t / 1024}[tile]

    measure, calls = _timer(cost)
    verdict = probes.choose_tile(found, ["a", "b", "c"], "base", measure)
    assert verdict.tile in ("a", "c")
    want = min(10.0 / cost(p.point, verdict.tile) for p in found)
    assert verdict.worst_ratio == pytest.approx(want)
    assert verdict.probes == len(found) and len(verdict.ratios) == len(found)
    # The baseline is timed once per probe in the first pass, once more when confirming.
    assert sum(1 for _, t in calls if t == "base") == 2 * len(found)


def test_the_time_objective_prefers_the_tile_that_costs_the_box_least() -> None:
    """A box whose small calls want one tile and whose large calls want another: the
    worst-ratio rule keeps the small calls' tile, the time rule the one that saves the
    most time, and both still refuse a tile that loses anywhere."""
    found = probes.box_probes({"t": (16, 64)}, seed=3, random_points=8)

    def cost(point, tile):
        t = point["t"]
        base = 1.0 + t / 16
        return {"base": base, "small": base / 1.6, "large": base / (1.15 + t / 40),
                "loser": base * (1.01 if t == 16 else 0.3)}[tile]

    measure, _ = _timer(cost)
    worst = probes.choose_tile(found, ["small", "large", "loser"], "base", measure,
                               margin=1.05)
    timed = probes.choose_tile(found, ["small", "large", "loser"], "base", measure,
                               margin=1.05, objective="time")
    assert worst.tile == "small" and timed.tile == "large"
    spent = {tile: sum(cost(p.point, tile) for p in found) for tile in ("small", "large")}
    assert spent["large"] < spent["small"]
    assert timed.worst_ratio == pytest.approx(min(cost(p.point, "base") / cost(p.point, "large")
                                                  for p in found))


def test_an_unknown_objective_is_refused_before_anything_is_timed() -> None:
    found = probes.box_probes({"t": (1, 10)}, seed=0, random_points=2)
    measure, calls = _timer(lambda p, t: 1.0)
    with pytest.raises(ValueError, match="objective 'fastest' is not one of worst, time"):
        probes.choose_tile(found, ["x"], "base", measure, objective="fastest")
    assert calls == []


def test_a_margin_above_one_demands_more_than_a_tie() -> None:
    found = probes.box_probes({"t": (1, 10)}, seed=0, random_points=2)
    measure, _ = _timer(lambda p, t: 10.0 if t == "base" else 9.8)
    assert probes.choose_tile(found, ["x"], "base", measure, margin=1.0).tile == "x"
    assert probes.choose_tile(found, ["x"], "base", measure, margin=1.05).tile is None


def test_a_tile_the_kernel_refuses_is_skipped() -> None:
    found = probes.box_probes({"t": (1, 10)}, seed=0, random_points=2)

    def measure(point, tile):
        if tile == "bad":
            raise ValueError("refused")
        return 10.0 if tile == "base" else 9.0

    verdict = probes.choose_tile(found, ["bad", "ok"], "base", measure)
    assert verdict.tile == "ok" and verdict.screened["bad"] == float("-inf")


def test_keys_cover_every_box_and_stay_inside() -> None:
    boxes = [{"t": (1, 8)}, {"t": (9, 1 << 20)}, {"t": (5, 5), "w": (1, 3)}]
    keys = probes.keys_in_boxes(boxes, 200, seed=5)
    assert len(keys) == 200
    assert {i for i, _ in keys} == {0, 1, 2}
    for i, point in keys:
        assert all(boxes[i][k][0] <= v <= boxes[i][k][1] for k, v in point.items())
    assert keys == probes.keys_in_boxes(boxes, 200, seed=5)
    small = [p["t"] for i, p in keys if i == 1]
    assert min(small) < 1024 < max(small)  # log-uniform reaches both ends
