"""The statistics of the A/B gate, exact where it can be and seeded where it cannot.

Both runs answer the same documents, so the honest comparison is paired: for a 0/1
metric only the documents on which the runs disagree carry information, and under
"no change" each disagreement is equally likely to go either way. That is the exact
McNemar test, a two-sided binomial test on the discordant pairs, computed here with
integer arithmetic (``math.comb``) so small counts get exact p-values. Continuous
per-document metrics use a seeded paired bootstrap of the mean difference. Without
per-document samples only the two stderrs are left, and the fallback is a two-sample
z-test, which ignores the pairing and is therefore conservative when runs agree on
most documents. Holm's step-down procedure controls the family-wise error across
all comparisons of one report.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class McNemar:
    """Discordant counts: ``lost`` = base right, candidate wrong; ``won`` the reverse."""

    lost: int
    won: int
    p_value: float


def binom_two_sided_half(k: int, n: int) -> float:
    """Two-sided p of the exact binomial test of ``k`` successes in ``n`` at p=1/2.

    The distribution is symmetric, so the two-sided p doubles the smaller tail:
    ``min(1, 2 * sum_{i <= min(k, n-k)} C(n, i) / 2**n)``. The sum and the power
    are exact integers; only the final division rounds.
    """
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1))
    return min(1.0, (2 * tail) / (1 << n))


def mcnemar_exact(base: Sequence[float], candidate: Sequence[float]) -> McNemar:
    """Exact McNemar test on paired 0/1 outcomes."""
    if len(base) != len(candidate):
        raise ValueError(f"paired samples differ in length: {len(base)} vs {len(candidate)}")
    lost = won = 0
    for b, c in zip(base, candidate, strict=True):
        if b not in (0, 1) or c not in (0, 1):
            raise ValueError(f"McNemar needs 0/1 outcomes, got {b!r} and {c!r}")
        lost += b == 1 and c == 0
        won += b == 0 and c == 1
    return McNemar(lost=lost, won=won, p_value=binom_two_sided_half(won, lost + won))


@dataclass(frozen=True)
class Bootstrap:
    """Observed mean paired difference, its percentile interval, and a two-sided p."""

    mean_delta: float
    ci_low: float
    ci_high: float
    p_value: float
    iterations: int
    seed: int


def paired_bootstrap(
    base: Sequence[float],
    candidate: Sequence[float],
    *,
    iterations: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> Bootstrap:
    """Seeded paired bootstrap of the mean difference ``candidate - base``.

    The p-value comes from the bootstrap distribution shifted to the null (mean 0):
    ``(1 + #{|mean* - observed| >= |observed|}) / (iterations + 1)``.
    """
    if len(base) != len(candidate):
        raise ValueError(f"paired samples differ in length: {len(base)} vs {len(candidate)}")
    if not base:
        raise ValueError("paired bootstrap needs at least one pair")
    if iterations < 1:
        raise ValueError(f"bootstrap iterations must be >= 1, got {iterations}")
    diffs = [float(c) - float(b) for b, c in zip(base, candidate, strict=True)]
    n = len(diffs)
    observed = math.fsum(diffs) / n
    rng = random.Random(seed)
    means = sorted(math.fsum(rng.choices(diffs, k=n)) / n for _ in range(iterations))
    extreme = sum(1 for m in means if abs(m - observed) >= abs(observed) - 1e-15)
    tail = (1.0 - confidence) / 2.0
    lo = means[min(iterations - 1, max(0, math.floor(tail * iterations)))]
    hi = means[min(iterations - 1, max(0, math.ceil((1.0 - tail) * iterations) - 1))]
    return Bootstrap(
        mean_delta=observed,
        ci_low=lo,
        ci_high=hi,
        p_value=(1 + extreme) / (iterations + 1) if observed != 0 else 1.0,
        iterations=iterations,
        seed=seed,
    )


def z_test_unpaired(
    base: float, base_se: float, candidate: float, candidate_se: float
) -> float | None:
    """Two-sided p of the two-sample z-test from the reported stderrs (None if untestable)."""
    se = math.hypot(base_se, candidate_se)
    if se == 0 or math.isnan(se):
        return None
    z = (candidate - base) / se
    return math.erfc(abs(z) / math.sqrt(2.0))


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values, in the input order; None entries are left out of the family."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(tested)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted
