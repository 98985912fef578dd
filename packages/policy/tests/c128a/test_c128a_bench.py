"""Hot-path cost of resolve(), next to the bare width formula written inline.

Both are recorded in one pytest-benchmark group; the ratio goes into ``extra_info``.
Nothing here asserts on time: machines differ. Each benchmark still checks its result.
"""

from __future__ import annotations

import random
import timeit

import pytest
from dsv4_policy.kernels.c128a import Key, baseline, resolve, shipped_table

_RNG = random.Random(2024)
KEYS = {
    "miss": Key("sm86", 128, 1 << 20, _RNG.randint(16_384, 32_767), _RNG.randint(1, 64), 0, 2),
    "sm90": Key("sm90", 128, 1 << 20, _RNG.randint(524_416, 1_000_000), _RNG.randint(1, 8), 0, 2),
}
MEDIANS: dict[str, float] = {}


def inline_width(key: Key) -> int:
    """vLLM's width formula and nothing else: the floor any resolver is measured against."""
    ratio = key.compress_ratio
    cap = (-(-key.max_model_len // ratio) + 127) // 128 * 128
    n = key.max_seq_len // ratio
    return min(max(1 << (n - 1).bit_length() if n > 1 else 1, 128), cap)


def _median(benchmark: object) -> float | None:
    stats = getattr(benchmark, "stats", None)
    return getattr(getattr(stats, "stats", None), "median", None)


@pytest.mark.benchmark(group="c128a-resolve")
@pytest.mark.parametrize("case", sorted(KEYS))
def test_bench_inline_width_formula(benchmark, case: str) -> None:  # type: ignore[no-untyped-def]
    key = KEYS[case]
    assert benchmark(inline_width, key) == baseline(key).width
    median = _median(benchmark)
    if median is not None:
        MEDIANS[case] = median


@pytest.mark.benchmark(group="c128a-resolve")
@pytest.mark.parametrize("case", sorted(KEYS))
def test_bench_resolve(benchmark, case: str) -> None:  # type: ignore[no-untyped-def]
    key = KEYS[case]
    table = shipped_table()
    launch = benchmark(resolve, key)
    assert launch == resolve(key, table)
    assert launch.width == inline_width(key) and launch.row_stride == baseline(key).row_stride
    median = _median(benchmark)
    floor = MEDIANS.get(case)
    if floor is None:  # run alone: time the inline formula here instead
        floor = min(timeit.repeat(lambda: inline_width(key), number=2000, repeat=5)) / 2000
    if median is not None:
        benchmark.extra_info["inline_formula_median_s"] = floor
        benchmark.extra_info["ratio_to_inline_formula"] = median / floor
    benchmark.extra_info["source"] = launch.source
