"""Read the events of a torch profiler trace (chrome-trace JSON, optionally gzipped).

``torch.profiler`` writes ``{"traceEvents": [...], ...}``: complete events have
``"ph": "X"``, a category in ``"cat"`` (``"kernel"``, ``"gpu_memcpy"``,
``"cuda_runtime"``, ``"cpu_op"``...), a ``"name"`` and a duration ``"dur"`` in
microseconds. The bare-array form of the chrome-trace format is accepted too.
Compression is detected from the gzip magic bytes, not the file name.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_GZIP_MAGIC = b"\x1f\x8b"


class TraceError(ValueError):
    """A trace that cannot be read: the message names the file and the problem."""


@dataclass(frozen=True)
class TimedEvent:
    name: str
    cat: str
    dur_us: float


@dataclass(frozen=True)
class TraceEvents:
    """What the bucketing needs from a trace: timed events and the graph-launch count."""

    events: tuple[TimedEvent, ...]
    graph_launches: int
    categories_seen: frozenset[str]


def load_trace_json(path: str | Path) -> Any:
    """Parse the trace at ``path``, gunzipping it first when it is gzip data."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror}") from exc
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise TraceError(f"{path}: gzip data is corrupt or truncated: {exc}") from exc
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(
            f"{path}: not chrome-trace JSON ({exc}); expected the file torch.profiler's "
            "export_chrome_trace writes, optionally gzipped"
        ) from exc


def trace_event_list(doc: Any, where: str) -> list[Any]:
    """The event array of a parsed trace document, in either chrome-trace form."""
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        if isinstance(events, list):
            return events
        raise TraceError(
            f"{where}: top-level object has no 'traceEvents' array "
            f"(keys: {', '.join(sorted(map(str, doc))[:8]) or 'none'})"
        )
    raise TraceError(f"{where}: expected a JSON object or array, got {type(doc).__name__}")


def select_events(
    events: Iterable[Any], categories: Iterable[str], graph_launch: re.Pattern[str], where: str
) -> TraceEvents:
    """Timed ``X`` events in ``categories`` and the count of graph-launch events."""
    wanted = frozenset(categories)
    selected: list[TimedEvent] = []
    launches = 0
    seen: set[str] = set()
    for index, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        name = ev.get("name")
        cat = ev.get("cat")
        if not isinstance(name, str):
            continue
        if isinstance(cat, str):
            seen.add(cat)
        if graph_launch.search(name):
            launches += 1
        if cat not in wanted:
            continue
        selected.append(TimedEvent(name, cat, _duration(ev, index, where)))
    return TraceEvents(tuple(selected), launches, frozenset(seen))


def read_trace(
    path: str | Path, categories: Iterable[str], graph_launch: re.Pattern[str]
) -> TraceEvents:
    """Load ``path`` and select its timed events; see ``select_events``."""
    doc = load_trace_json(path)
    return select_events(trace_event_list(doc, str(path)), categories, graph_launch, str(path))


def _duration(ev: dict[str, Any], index: int, where: str) -> float:
    dur = ev.get("dur")
    if isinstance(dur, bool) or not isinstance(dur, int | float) or dur < 0:
        raise TraceError(
            f"{where}: traceEvents[{index}] ({ev.get('name')!r}, cat {ev.get('cat')!r}) "
            f"has dur {dur!r}; a complete ('X') event needs a non-negative number of µs"
        )
    return float(dur)

