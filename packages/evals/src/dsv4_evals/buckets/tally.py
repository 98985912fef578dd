"""Sum kernel time per bucket, the way the seed-004 "Trace Result" reports it.

For each bucket: total time, call count, time per graph launch (total divided by the
number of ``cudaGraphLaunch`` events, or a count the caller supplies), and the share
of all counted GPU time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from dsv4_evals.buckets.rules import BucketRules
from dsv4_evals.buckets.trace import TimedEvent


@dataclass
class BucketTotal:
    name: str
    total_us: float = 0.0
    calls: int = 0
    kernels: dict[str, list[float]] = field(default_factory=dict)  # name -> [us, calls]

    def add(self, kernel: str, dur_us: float) -> None:
        self.total_us += dur_us
        self.calls += 1
        entry = self.kernels.setdefault(kernel, [0.0, 0])
        entry[0] += dur_us
        entry[1] += 1

    def top_kernels(self, n: int) -> list[tuple[str, float, int]]:
        """The ``n`` kernels with the most time: (name, total µs, calls)."""
        ranked = sorted(self.kernels.items(), key=lambda kv: (-kv[1][0], kv[0]))
        return [(k, v[0], int(v[1])) for k, v in ranked[:n]]


@dataclass
class Tally:
    buckets: list[BucketTotal]
    graph_launches: int
    graph_launch_source: str  # "trace" or "override"
    categories_seen: frozenset[str] = frozenset()  # every category in the trace

    @property
    def total_us(self) -> float:
        return sum(b.total_us for b in self.buckets)

    @property
    def calls(self) -> int:
        return sum(b.calls for b in self.buckets)

    def per_graph_ms(self, us: float) -> float | None:
        return us / 1000.0 / self.graph_launches if self.graph_launches > 0 else None

    def percent(self, us: float) -> float | None:
        total = self.total_us
        return 100.0 * us / total if total > 0 else None


def tally(
    events: Iterable[TimedEvent],
    rules: BucketRules,
    graph_launches: int,
    graph_launch_source: str = "trace",
    categories_seen: frozenset[str] = frozenset(),
) -> Tally:
    """Bucket every event by name (first matching rule wins)."""
    totals = {name: BucketTotal(name) for name in rules.names()}
    cache: dict[str, str] = {}  # kernel names repeat thousands of times per trace
    for ev in events:
        bucket = cache.get(ev.name)
        if bucket is None:
            bucket = cache[ev.name] = rules.classify(ev.name)
        totals[bucket].add(ev.name, ev.dur_us)
    return Tally(list(totals.values()), graph_launches, graph_launch_source, categories_seen)
