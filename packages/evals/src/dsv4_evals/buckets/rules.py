"""Bucket rules of ``dsv4-evals buckets``, read from a pattern file.

Kernel names are data, not logic: they change with every library release, so the
ordered list of (bucket, regex) pairs lives in ``data/buckets_patterns.toml`` and a
user file can replace it. The first bucket whose regex matches a kernel's name wins.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from dsv4_evals._patterns import (
    PatternError,
    compile_regex,
    field,
    load_pattern_file,
    reject_unknown,
    table_list,
)

DEFAULT_FILE = "buckets_patterns.toml"


@dataclass(frozen=True)
class Bucket:
    name: str
    regex: re.Pattern[str]


@dataclass(frozen=True)
class BucketRules:
    source: str
    categories: tuple[str, ...]
    graph_launch: re.Pattern[str]
    other: str
    buckets: tuple[Bucket, ...]

    def names(self) -> tuple[str, ...]:
        """Bucket names in report order: the declared ones, then the catch-all."""
        return (*(b.name for b in self.buckets), self.other)

    def classify(self, kernel: str) -> str:
        """The first bucket whose regex finds a match in ``kernel``, else ``other``."""
        for bucket in self.buckets:
            if bucket.regex.search(kernel):
                return bucket.name
        return self.other


def load_rules(path: str | Path | None = None) -> BucketRules:
    """Read and validate a bucket file; ``None`` reads the shipped defaults."""
    data, label = load_pattern_file(path, DEFAULT_FILE)
    reject_unknown(
        data, {"schema", "categories", "graph_launch", "ignore_case", "other", "bucket"}, label
    )
    schema = field(data, "schema", int, label, "schema = 1")
    if schema != 1:
        raise PatternError(f"{label}.schema: got {schema}, this reader understands schema = 1")
    categories = field(data, "categories", list, label, 'a list such as ["kernel", "gpu_memcpy"]')
    if not categories or not all(isinstance(c, str) and c for c in categories):
        raise PatternError(f"{label}.categories: expected a non-empty list of category names")
    graph_launch = compile_regex(
        field(data, "graph_launch", str, label, 'a regex such as "^cudaGraphLaunch$"'),
        f"{label}.graph_launch",
    )
    flags = re.IGNORECASE if field(data, "ignore_case", bool, label, "true or false") else 0
    other = field(data, "other", str, label, 'a bucket name such as "other"', default="other")
    buckets: list[Bucket] = []
    for i, table in enumerate(table_list(data, "bucket", label)):
        where = f"{label}.bucket[{i}]"
        reject_unknown(table, {"name", "regex"}, where)
        name = field(table, "name", str, where, "a string")
        regex = compile_regex(field(table, "regex", str, where, "a regex"), f"{where}.regex", flags)
        buckets.append(Bucket(name, regex))
    names = [b.name for b in buckets] + [other]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PatternError(
            f"{label}: bucket names must be unique (including other = {other!r}); "
            f"repeated: {', '.join(dupes)}"
        )
    return BucketRules(label, tuple(categories), graph_launch, other, tuple(buckets))


def with_categories(rules: BucketRules, categories: list[str]) -> BucketRules:
    """A copy of ``rules`` counting events of ``categories`` instead."""
    if not categories or not all(categories):
        raise PatternError("--category needs a non-empty category name, e.g. kernel or cpu_op")
    return dataclasses.replace(rules, categories=tuple(categories))
