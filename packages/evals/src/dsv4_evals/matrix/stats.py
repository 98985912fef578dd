"""Judge the matrix: medians, run-to-run spread, ratio to the control, and the winner.

A variant's rate is the median of its runs (robust to one disturbed run); its
*spread* is max - min of the same runs, the run-to-run noise of that setup. A variant
beats the control only when its median exceeds the control's by more than the larger
of the two spreads: a gain the runs themselves cannot produce by chance ordering. The
winner is the fastest variant that beats the control; when none does, there is no
winner, whatever the medians say. A variant with a failed run, too few runs, or runs
whose streams arrived in read bursts (not decode rates; see ``ladder.measure``) is
shown but cannot win.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MIN_REPEATS = 3


@dataclass(frozen=True)
class Summary:
    name: str
    control: bool
    rates: tuple[float, ...]
    errors: tuple[str, ...]
    median: float | None = None
    low: float | None = None
    high: float | None = None
    ratio: float | None = None  # median / control median
    gain: float | None = None  # median - control median, tok/s
    noise: float | None = None  # the spread the gain must exceed
    verdict: str = "not measured"

    @property
    def spread(self) -> float | None:
        return None if self.low is None or self.high is None else self.high - self.low


@dataclass(frozen=True)
class Judgement:
    summaries: tuple[Summary, ...]
    winner: str | None
    reason: str


def _base(name: str, control: bool, rates: Sequence[float | None], errors: Sequence[str],
          min_repeats: int, bunched: int) -> Summary:
    good = tuple(r for r in rates if r is not None)
    if errors or len(good) < min_repeats:
        why = "error" if errors else "too few runs"
        return Summary(name, control, good, tuple(errors), verdict=why)
    if bunched:  # measured, but not decode rates: shown, never compared
        return Summary(name, control, good, (), statistics.median(good), min(good), max(good),
                       verdict="bunched")
    return Summary(name, control, good, (), statistics.median(good), min(good), max(good),
                   verdict="control" if control else "measured")


def judge(
    runs: Mapping[str, Sequence[float | None]],
    errors: Mapping[str, Sequence[str]],
    control: str,
    min_repeats: int = MIN_REPEATS,
    bunched: Mapping[str, int] | None = None,
) -> Judgement:
    """Summaries in ``runs`` order, and the winner (see the module docstring).

    ``bunched`` counts, per variant, the runs whose streams arrived in read bursts: their
    rates are not decode rates, so such a variant is shown but never compared, and when
    the control is one of them nothing is.
    """
    if control not in runs:
        raise ValueError(f"the control {control!r} has no runs")
    bunched = bunched or {}
    base = {n: _base(n, n == control, r, errors.get(n, ()), min_repeats, bunched.get(n, 0))
            for n, r in runs.items()}
    ctl = base[control]
    if ctl.median is None:
        return Judgement(tuple(base.values()), None,
                         f"no verdict: the control was not measured ({ctl.verdict})")
    if ctl.verdict == "bunched":
        return Judgement(tuple(base.values()), None,
                         "no winner: the control's streams arrived in read bursts, so its "
                         "rate is not a decode rate and no variant can be compared with it")
    judged: dict[str, Summary] = {}
    for name, s in base.items():
        if s.verdict == "bunched" or s.median is None or s.spread is None or ctl.spread is None:
            judged[name] = s
            continue
        gain = s.median - ctl.median
        noise = max(s.spread, ctl.spread)
        if name == control:
            verdict = "control"
        elif gain > noise:
            verdict = "beats control"
        elif -gain > noise:
            verdict = "slower"
        else:
            verdict = "within spread"
        judged[name] = Summary(s.name, s.control, s.rates, s.errors, s.median, s.low, s.high,
                               s.median / ctl.median if ctl.median > 0 else None, gain, noise,
                               verdict)
    beating = [s for s in judged.values() if s.verdict == "beats control"]
    if not beating:
        return Judgement(tuple(judged.values()), None,
                         "no winner: no variant beats the control by more than the "
                         "run-to-run spread")
    best = max(beating, key=lambda s: s.median or 0.0)
    judged[best.name] = Summary(best.name, False, best.rates, best.errors, best.median, best.low,
                                best.high, best.ratio, best.gain, best.noise, "winner")
    return Judgement(
        tuple(judged.values()), best.name,
        f"winner: {best.name}, median {best.median:,.1f} tok/s, {best.gain:+,.1f} tok/s over "
        f"the control (ratio {best.ratio:.3f}), more than the spread {best.noise:,.1f} tok/s",
    )
