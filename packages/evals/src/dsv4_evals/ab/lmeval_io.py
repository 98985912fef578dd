"""Reading lm-eval output directories: ``results_*.json`` and ``samples_*.jsonl``.

lm-eval writes, under ``--output_path/<model>/``, one ``results_<date>.json`` per run
and, with ``--log_samples``, one ``samples_<task>_<date>.jsonl`` per task and run.
In the results file, ``results[task]`` maps ``"<metric>,<filter>"`` to the value and
``"<metric>_stderr,<filter>"`` to its stderr; ``n-samples``, ``n-shot`` and
``higher_is_better`` are keyed by task. Each samples line is one document under one
filter: ``doc_id``, ``filter``, ``metrics`` (the metric names) and one field per
metric holding that document's score, plus ``doc_hash`` to identify the document.

A directory may hold several runs (tasks run one at a time, or a rerun). Every
results file is read; when two hold the same task, the newest (by the date in its
name) wins and a note says so. Samples are taken from the same folder and date as
the results file they belong to.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_RESULTS = re.compile(r"^results_(?P<date>.+)\.json$")


class LmEvalFormatError(ValueError):
    """An lm-eval output directory or file that cannot be read as such."""


@dataclass(frozen=True)
class Summary:
    """One (task, filter, metric) value as lm-eval reported it."""

    task: str
    filter: str
    metric: str
    value: float
    stderr: float | None
    n: int | None
    n_shot: int | None
    higher_is_better: bool


Key = tuple[str, str, str]  # (task, filter, metric)


@dataclass
class Run:
    """Everything the gate needs from one lm-eval output directory."""

    root: Path
    summaries: dict[Key, Summary] = field(default_factory=dict)
    # (task, filter, metric) -> {doc_id: score}; only for tasks with samples
    samples: dict[Key, dict[Any, float]] = field(default_factory=dict)
    # (task, filter) -> {doc_id: doc_hash}
    doc_hashes: dict[tuple[str, str], dict[Any, str]] = field(default_factory=dict)
    sample_files: dict[str, Path] = field(default_factory=dict)
    results_files: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def load_run(root: str | Path) -> Run:
    """Read every results file (and matching samples) under ``root``."""
    root = Path(root)
    if not root.is_dir():
        raise LmEvalFormatError(f"{root}: not a directory (expected an lm-eval --output_path)")
    files = sorted(
        (p for p in root.rglob("results_*.json") if _RESULTS.match(p.name)),
        key=lambda p: (_RESULTS.match(p.name)["date"], str(p)),  # type: ignore[index]
    )
    if not files:
        raise LmEvalFormatError(
            f"{root}: no results_*.json found (lm-eval writes them under "
            "--output_path/<model>/); pass the directory given to --output_path"
        )
    run = Run(root=root)
    for path in files:  # oldest first, so newer files overwrite
        _read_results(path, run)
    for task, path in run.results_files.items():
        _attach_samples(task, path, run)
    return run


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LmEvalFormatError(f"{path}: cannot read it as JSON ({exc})") from exc


def _read_results(path: Path, run: Run) -> None:
    data = _load_json(path)
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, dict):
        raise LmEvalFormatError(
            f"{path}: no 'results' object; expected lm-eval's results file with "
            '"results": {task: {"<metric>,<filter>": value, ...}}'
        )
    n_samples = data.get("n-samples") or {}
    n_shot = data.get("n-shot") or {}
    hib = data.get("higher_is_better") or {}
    for task, metrics in results.items():
        if not isinstance(metrics, dict):
            raise LmEvalFormatError(f"{path}: results[{task!r}] is not an object")
        found = _task_summaries(task, metrics, n_samples, n_shot, hib, path)
        if not found:
            continue  # a group row or a task with no numeric metric
        if task in run.results_files:
            run.notes.append(
                f"{task}: several results files; using {path.name}, "
                f"not {run.results_files[task].name}"
            )
            for key in [k for k in run.summaries if k[0] == task]:
                del run.summaries[key]
        run.results_files[task] = path
        run.summaries.update(found)


def _task_summaries(
    task: str, metrics: dict, n_samples: Any, n_shot: Any, hib: Any, path: Path
) -> dict[Key, Summary]:
    n = None
    ns = n_samples.get(task) if isinstance(n_samples, dict) else None
    if isinstance(ns, dict) and isinstance(ns.get("effective"), int):
        n = ns["effective"]
    shots = n_shot.get(task) if isinstance(n_shot, dict) else None
    task_hib = hib.get(task) if isinstance(hib, dict) else None
    out: dict[Key, Summary] = {}
    for name, value in metrics.items():
        if "," not in name or "_stderr," in name:
            continue
        metric, filt = name.split(",", 1)
        if not _is_number(value):
            continue
        se = metrics.get(f"{metric}_stderr,{filt}")
        higher = task_hib.get(metric, True) if isinstance(task_hib, dict) else True
        out[(task, filt, metric)] = Summary(
            task=task,
            filter=filt,
            metric=metric,
            value=float(value),
            stderr=float(se) if _is_number(se) else None,
            n=n,
            n_shot=shots if isinstance(shots, int) else None,
            higher_is_better=bool(higher),
        )
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _attach_samples(task: str, results_path: Path, run: Run) -> None:
    date = _RESULTS.match(results_path.name)["date"]  # type: ignore[index]
    path = results_path.parent / f"samples_{task}_{date}.jsonl"
    if not path.exists():
        others = sorted(results_path.parent.glob(f"samples_{task}_*.jsonl"))
        if not others:
            return  # the comparison notes the unpaired fallback
        path = others[-1]
        run.notes.append(f"{task}: no samples file dated {date}; using {path.name}")
    filters = sorted({k[1] for k in run.summaries if k[0] == task})
    metrics = sorted({k[2] for k in run.summaries if k[0] == task})
    run.sample_files[task] = path
    _read_samples(task, path, filters, metrics, run)


def _read_samples(task: str, path: Path, filters: list[str], metrics: list[str], run: Run) -> None:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise LmEvalFormatError(f"{path}: cannot read it ({exc})") from exc
    skipped: set[str] = set()
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LmEvalFormatError(f"{where}: not JSON ({exc.msg})") from exc
        if not isinstance(rec, dict) or "doc_id" not in rec:
            raise LmEvalFormatError(f"{where}: a samples line needs a 'doc_id'")
        doc_id = rec["doc_id"]
        filt = rec.get("filter")
        if filt is None:
            if len(filters) != 1:
                raise LmEvalFormatError(
                    f"{where}: no 'filter' field, and {task} reports filters {filters}; "
                    "cannot tell which filter this line scores (use lm-eval >= 0.4.3 samples)"
                )
            filt = filters[0]
        names = rec.get("metrics")
        if not isinstance(names, list):
            names = [m for m in metrics if m in rec]
        hashes = run.doc_hashes.setdefault((task, filt), {})
        if doc_id in hashes:
            raise LmEvalFormatError(f"{where}: doc_id {doc_id!r} appears twice for filter {filt!r}")
        hashes[doc_id] = str(rec.get("doc_hash", ""))
        for name in names:
            value = rec.get(name)
            if isinstance(value, bool):
                value = int(value)
            if not _is_number(value):
                skipped.add(name)
                continue
            run.samples.setdefault((task, filt, name), {})[doc_id] = float(value)
    if skipped:
        run.notes.append(
            f"{task}: per-sample {sorted(skipped)} are not single numbers (corpus-level "
            "metrics); those are compared from the summary stderrs only"
        )
