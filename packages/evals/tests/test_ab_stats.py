"""The gate's statistics against hand-computed values and an independent enumeration."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from dsv4_evals.ab.stats import (
    binom_two_sided_half,
    holm,
    mcnemar_exact,
    paired_bootstrap,
    z_test_unpaired,
)
from hypothesis import given
from hypothesis import strategies as st

# Hand-computed: p = min(1, 2 * sum_{i<=min(k,n-k)} C(n,i) / 2^n)
HAND = [
    (0, 0, Fraction(1)),
    (0, 5, Fraction(2, 32)),  # 2 * 1/32
    (5, 5, Fraction(2, 32)),
    (2, 10, Fraction(2 * (1 + 10 + 45), 1024)),  # 0.109375
    (5, 10, Fraction(1)),  # 2 * 638/1024 > 1
    # the seed's gpqa strict-match fixture: 12 lost, 7 won
    (7, 19, Fraction(2 * (1 + 19 + 171 + 969 + 3876 + 11628 + 27132 + 50388), 2**19)),
    (1, 12, Fraction(2 * (1 + 12), 4096)),
]


@pytest.mark.parametrize(("k", "n", "expected"), HAND)
def test_binomial_matches_hand_values(k: int, n: int, expected: Fraction) -> None:
    assert binom_two_sided_half(k, n) == pytest.approx(float(expected), rel=1e-15, abs=0)


def _minlike_p(k: int, n: int) -> Fraction:
    """Independent two-sided p: total probability of outcomes no likelier than k."""
    pmf = [Fraction(math.comb(n, i), 2**n) for i in range(n + 1)]
    return min(Fraction(1), sum((q for q in pmf if q <= pmf[k]), Fraction(0)))


@given(st.integers(min_value=0, max_value=80).flatmap(
    lambda n: st.tuples(st.integers(min_value=0, max_value=n), st.just(n))))  # fmt: skip
def test_binomial_equals_enumeration(kn: tuple[int, int]) -> None:
    k, n = kn
    assert binom_two_sided_half(k, n) == pytest.approx(float(_minlike_p(k, n)), rel=1e-12)
    assert binom_two_sided_half(k, n) == binom_two_sided_half(n - k, n)


def test_binomial_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError, match="0 <= k <= n"):
        binom_two_sided_half(6, 5)


@given(st.integers(min_value=1, max_value=300), st.integers(min_value=0, max_value=2**32))
def test_mcnemar_counts_discordant_pairs(n: int, seed: int) -> None:
    rng = random.Random(seed)
    base = [float(rng.random() < 0.7) for _ in range(n)]
    cand = [b if rng.random() < 0.8 else 1.0 - b for b in base]
    lost = sum(1 for b, c in zip(base, cand, strict=True) if (b, c) == (1.0, 0.0))
    won = sum(1 for b, c in zip(base, cand, strict=True) if (b, c) == (0.0, 1.0))
    m = mcnemar_exact(base, cand)
    assert (m.lost, m.won) == (lost, won)
    assert m.p_value == pytest.approx(float(_minlike_p(won, lost + won)), rel=1e-12)


def test_mcnemar_rejects_non_binary_scores() -> None:
    with pytest.raises(ValueError, match="0/1"):
        mcnemar_exact([1.0, 0.5], [1.0, 0.0])
    with pytest.raises(ValueError, match="length"):
        mcnemar_exact([1.0], [1.0, 0.0])


def test_z_test_hand_value() -> None:
    # z = (0.45 - 0.50) / hypot(0.03, 0.04) = -1; two-sided p = 2 * (1 - Phi(1))
    assert z_test_unpaired(0.50, 0.03, 0.45, 0.04) == pytest.approx(0.3173105078629141, rel=1e-12)
    # z = 1.96 gives the textbook 0.05
    assert z_test_unpaired(0.0, 0.6, 1.96, 0.8) == pytest.approx(0.04999579, rel=1e-6)
    assert z_test_unpaired(0.5, 0.0, 0.6, 0.0) is None


def test_holm_hand_example() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005, 3*0.01, 2*0.03, max(0.06, 1*0.04)
    got = holm([0.01, 0.04, 0.03, 0.005])
    assert got == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # None is left out of the family: m = 2, so 2*0.5 = 1.0, then max(1.0, 0.9)
    assert holm([0.5, None, 0.9]) == [1.0, None, 1.0]


@given(st.lists(st.floats(min_value=0, max_value=1), min_size=1, max_size=30))
def test_holm_is_monotone_and_not_below_raw(ps: list[float]) -> None:
    adj = holm(ps)
    for p, a in zip(ps, adj, strict=True):
        assert a is not None and p <= a <= 1.0
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    assert all(adj[order[i]] <= adj[order[i + 1]] for i in range(len(order) - 1))


def test_bootstrap_is_seeded_and_detects_a_constant_shift() -> None:
    rng = random.Random(9)
    base = [rng.uniform(10, 60) for _ in range(150)]
    shifted = [b + 5.0 for b in base]
    bt = paired_bootstrap(base, shifted, iterations=2000, seed=3)
    # every resampled mean equals the observed 5.0, so no resample is as extreme as 0
    assert bt.mean_delta == pytest.approx(5.0)
    assert bt.p_value == pytest.approx(1 / 2001)
    assert bt.ci_low == pytest.approx(5.0) and bt.ci_high == pytest.approx(5.0)
    again = paired_bootstrap(base, shifted, iterations=2000, seed=3)
    assert again == bt


def test_bootstrap_zero_mean_difference_is_not_significant() -> None:
    rng = random.Random(12)
    base = [rng.uniform(0, 1) for _ in range(200)]
    noise = [rng.uniform(-1, 1) for _ in range(100)]
    cand = [b + d for b, d in zip(base, noise + [-x for x in noise], strict=True)]
    bt = paired_bootstrap(base, cand, iterations=500, seed=1)
    assert abs(bt.mean_delta) < 1e-12
    assert bt.p_value > 0.9
    assert bt.ci_low < 0 < bt.ci_high


def test_bootstrap_p_shrinks_as_the_shift_grows() -> None:
    rng = random.Random(4)
    base = [rng.gauss(0, 1) for _ in range(120)]
    raw = [rng.gauss(0, 1) for _ in range(120)]
    noise = [x - sum(raw) / len(raw) for x in raw]  # mean 0: the observed delta is the shift
    ps = [
        paired_bootstrap(base, [b + n + s for b, n in zip(base, noise, strict=True)],
                         iterations=1000, seed=0).p_value
        for s in (0.02, 0.15, 1.0)
    ]  # fmt: skip
    assert ps[0] > ps[1] > ps[2]
