"""The run directory: results.jsonl written as results arrive, and the run's identity.

Each result is appended and flushed on arrival so an interrupted run loses nothing
it had already received. ``--resume`` reads the file back and skips the request
indices it holds; a last line cut short by a hard kill is dropped (that request is
simply sent again). ``run.json`` records what defines the run, so resuming with a
different payload or shape is refused instead of silently mixing two runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TextIO

RESULTS = "results.jsonl"
RUN = "run.json"
# The settings that must match for a resumed run to be the same run.
IDENTITY_KEYS = (
    "base_url",
    "model",
    "payload_sha256",
    "concurrency",
    "warmup_waves",
    "waves",
    "max_tokens",
    "temperature",
)


class StoreError(ValueError):
    """The output directory cannot be used as asked."""


class ResultStore:
    """Append-only results.jsonl plus run.json in one output directory."""

    def __init__(self, out_dir: str | Path) -> None:
        self.dir = Path(out_dir)
        self.results_path = self.dir / RESULTS
        self.run_path = self.dir / RUN
        self._fh: TextIO | None = None

    def open(self, identity: dict[str, Any], *, resume: bool) -> dict[int, dict]:
        """Prepare for appending; returns the records already there (empty unless resuming)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        existing: dict[int, dict] = {}
        if resume:
            existing = self._check_and_load(identity)
        elif self.results_path.exists() and self.results_path.stat().st_size > 0:
            raise StoreError(
                f"{self.results_path} already holds results; pass --resume to continue "
                "that run, or choose another --out"
            )
        else:
            self.run_path.write_text(json.dumps(identity, indent=2, sort_keys=True) + "\n")
        self._fh = self.results_path.open("a", encoding="utf-8")
        return existing

    def append(self, record: dict[str, Any]) -> None:
        """Write one record as one line and push it to the OS before returning."""
        if self._fh is None:
            raise RuntimeError("ResultStore.append before open")
        self._fh.write(json.dumps(record, sort_keys=True) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def run_identity(self) -> dict[str, Any]:
        return json.loads(self.run_path.read_text())

    def _check_and_load(self, identity: dict[str, Any]) -> dict[int, dict]:
        if not self.run_path.exists():
            self.run_path.write_text(json.dumps(identity, indent=2, sort_keys=True) + "\n")
            return load_results(self.results_path, repair=True)
        recorded = self.run_identity()
        diffs = [
            f"{k}: recorded {recorded.get(k)!r}, now {identity.get(k)!r}"
            for k in IDENTITY_KEYS
            if recorded.get(k) != identity.get(k)
        ]
        if diffs:
            raise StoreError(
                f"--resume: {self.run_path} describes a different run ("
                + "; ".join(diffs)
                + "); use the same options or another --out"
            )
        identity["run_id"] = recorded.get("run_id", identity.get("run_id"))
        return load_results(self.results_path, repair=True)


def load_results(path: str | Path, *, repair: bool = False) -> dict[int, dict]:
    """Records by request index. A torn last line is dropped (and cut off if ``repair``)."""
    p = Path(path)
    if not p.exists():
        return {}
    data = p.read_bytes()
    keep = len(data)
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
    records: dict[int, dict] = {}
    for lineno, line in enumerate(data[:keep].splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            index = rec["index"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise StoreError(
                f"{p}:{lineno}: not a result record ({exc}); the file was edited or "
                "belongs to something else"
            ) from exc
        if index in records:
            raise StoreError(f"{p}:{lineno}: request index {index} is recorded twice")
        records[index] = rec
    if repair and keep != len(data):
        with p.open("r+b") as fh:
            fh.truncate(keep)
            fh.flush()
            os.fsync(fh.fileno())
    return records
