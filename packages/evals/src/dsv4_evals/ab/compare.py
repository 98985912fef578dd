"""Pairing two lm-eval runs and judging every (task, filter, metric) difference.

For each comparison the gate picks the strongest honest test the data allows: the
exact McNemar test when both runs logged 0/1 per-document scores, a seeded paired
bootstrap when the per-document scores are continuous, and a two-sample z-test from
the reported stderrs when there are no samples to pair. All p-values of one report
form one family and are Holm-adjusted; the verdict uses the adjusted p.

Verdict, with ``d`` the paired mean difference oriented so that positive is better
(``candidate - base``, negated for lower-is-better metrics):

* significant regression: adjusted p < alpha and d < -margin
* significant improvement: adjusted p < alpha and d > 0
* no significant change: everything else (including a significant drop that is
  within the margin, which the row's detail says)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from .lmeval_io import Key, Run, Summary
from .stats import holm, mcnemar_exact, paired_bootstrap, z_test_unpaired

REGRESSION = "significant regression"
NO_CHANGE = "no significant change"
IMPROVEMENT = "significant improvement"
UNTESTED = "untested"

MCNEMAR = "exact McNemar"
BOOTSTRAP = "paired bootstrap"
Z_TEST = "z-test (unpaired)"


@dataclass
class Comparison:
    """One row of the A/B table."""

    task: str
    filter: str
    metric: str
    n_shot: int | None
    higher_is_better: bool
    base: float
    base_stderr: float | None
    candidate: float
    candidate_stderr: float | None
    delta: float
    test: str
    n_paired: int | None = None
    paired_delta: float | None = None
    lost: int | None = None
    won: int | None = None
    ci: tuple[float, float] | None = None
    p: float | None = None
    p_adjusted: float | None = None
    verdict: str = UNTESTED
    detail: str = ""


@dataclass
class Options:
    alpha: float = 0.05
    margin: float = 0.0
    correction: str = "holm"
    bootstrap_iters: int = 10_000
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"--alpha must be in (0, 1), got {self.alpha}")
        if self.margin < 0:
            raise ValueError(
                f"--margin must be >= 0 (a size of drop to tolerate), got {self.margin}"
            )
        if self.correction not in ("holm", "none"):
            raise ValueError(f"--correction must be 'holm' or 'none', got {self.correction!r}")


@dataclass
class Report:
    comparisons: list[Comparison]
    options: Options
    notes: list[str] = field(default_factory=list)

    @property
    def regression(self) -> bool:
        return any(c.verdict == REGRESSION for c in self.comparisons)

    def to_dict(self) -> dict[str, Any]:
        return {
            "options": asdict(self.options),
            "comparisons": [asdict(c) for c in self.comparisons],
            "notes": list(self.notes),
            "regression": self.regression,
        }


def compare(base: Run, candidate: Run, options: Options | None = None) -> Report:
    """All comparisons between two runs, tested, Holm-adjusted and judged."""
    options = options or Options()
    notes = [f"base: {n}" for n in base.notes] + [f"candidate: {n}" for n in candidate.notes]
    only_base = sorted(set(base.summaries) - set(candidate.summaries))
    only_cand = sorted(set(candidate.summaries) - set(base.summaries))
    if only_base:
        notes.append("only in base, not compared: " + ", ".join(",".join(k) for k in only_base))
    if only_cand:
        notes.append(
            "only in candidate, not compared: " + ", ".join(",".join(k) for k in only_cand)
        )
    keys = sorted(set(base.summaries) & set(candidate.summaries))
    if not keys:
        raise ValueError(
            f"{base.root} and {candidate.root} share no (task, filter, metric); "
            "were they run on the same tasks?"
        )
    rows = [_compare_one(k, base, candidate, options, notes) for k in keys]
    raw = [r.p for r in rows]
    adjusted = holm(raw) if options.correction == "holm" else raw
    for row, p_adj in zip(rows, adjusted, strict=True):
        row.p_adjusted = p_adj
        _judge(row, options)
    return Report(comparisons=rows, options=options, notes=notes)


def _compare_one(key: Key, base: Run, cand: Run, options: Options, notes: list[str]) -> Comparison:
    b: Summary = base.summaries[key]
    c: Summary = cand.summaries[key]
    row = Comparison(
        task=key[0],
        filter=key[1],
        metric=key[2],
        n_shot=b.n_shot,
        higher_is_better=b.higher_is_better,
        base=b.value,
        base_stderr=b.stderr,
        candidate=c.value,
        candidate_stderr=c.stderr,
        delta=c.value - b.value,
        test=Z_TEST,
    )
    label = ",".join(key)
    if b.n_shot != c.n_shot:
        notes.append(f"{label}: n-shot differs (base {b.n_shot}, candidate {c.n_shot})")
    bs, cs = base.samples.get(key), cand.samples.get(key)
    if bs and cs:
        common = sorted(set(bs) & set(cs), key=_sort_key)
        if common:
            _paired(row, [bs[d] for d in common], [cs[d] for d in common], options)
            _pairing_notes(label, key, common, bs, cs, base, cand, b, c, notes)
            return row
        notes.append(f"{label}: no doc_id in common; falling back to the unpaired z-test")
    else:
        side = "candidate" if bs else "base" if cs else "either run"
        notes.append(
            f"{label}: no per-sample scores in {side}; unpaired two-sample z-test from the "
            "reported stderrs (it ignores the pairing: conservative when runs mostly agree)"
        )
    if b.stderr is None or c.stderr is None:
        row.test = "none"
        row.detail = "no stderr reported and no samples to pair"
        return row
    row.p = z_test_unpaired(b.value, b.stderr, c.value, c.stderr)
    if row.p is None:
        row.test = "none"
        row.detail = "both stderrs are zero"
    return row


def _paired(row: Comparison, bv: list[float], cv: list[float], options: Options) -> None:
    row.n_paired = len(bv)
    row.paired_delta = (math.fsum(cv) - math.fsum(bv)) / len(bv)
    if all(v in (0.0, 1.0) for v in bv) and all(v in (0.0, 1.0) for v in cv):
        m = mcnemar_exact(bv, cv)
        row.test, row.lost, row.won, row.p = MCNEMAR, m.lost, m.won, m.p_value
    else:
        bt = paired_bootstrap(bv, cv, iterations=options.bootstrap_iters, seed=options.seed)
        row.test, row.ci, row.p = BOOTSTRAP, (bt.ci_low, bt.ci_high), bt.p_value


def _pairing_notes(
    label: str, key: Key, common: list, bs: dict, cs: dict,
    base: Run, cand: Run, b: Summary, c: Summary, notes: list[str],
) -> None:  # fmt: skip
    unpaired = len(set(bs) ^ set(cs))
    if unpaired:
        notes.append(f"{label}: {unpaired} doc_ids present in one run only, left out of the test")
    bh = base.doc_hashes.get(key[:2], {})
    ch = cand.doc_hashes.get(key[:2], {})
    differ = sum(1 for d in common if bh.get(d) and ch.get(d) and bh[d] != ch[d])
    if differ:
        notes.append(
            f"{label}: {differ} paired doc_ids have different doc_hash; the runs may "
            "not have scored the same documents"
        )
    for side, summary, scores in (("base", b, bs), ("candidate", c, cs)):
        mean = math.fsum(scores.values()) / len(scores)
        if abs(mean - summary.value) > 1e-6:
            notes.append(
                f"{label}: {side} samples average {mean:.6f}, but its results file says "
                f"{summary.value:.6f}"
            )


def _judge(row: Comparison, options: Options) -> None:
    if row.p_adjusted is None:
        row.verdict = UNTESTED
        return
    delta = row.paired_delta if row.paired_delta is not None else row.delta
    oriented = delta if row.higher_is_better else -delta
    significant = row.p_adjusted < options.alpha
    if significant and oriented < -options.margin:
        row.verdict = REGRESSION
    elif significant and oriented > 0:
        row.verdict = IMPROVEMENT
    else:
        row.verdict = NO_CHANGE
        if significant and oriented < 0:
            row.detail = f"significant drop {oriented:+.4f} within the margin {options.margin}"


def _sort_key(doc_id: Any) -> tuple[int, Any]:
    return (0, doc_id) if isinstance(doc_id, int | float) else (1, str(doc_id))
