"""Measure the matrix's variants with the ladder's decode-rate measurement.

Two ways to get a server per variant:

* **running servers** (``--server NAME=URL``, or ``--base-url`` with ``--label``): the
  runs are interleaved, one per variant in turn, repeat after repeat, so a slow drift
  of the machine (another job starting, thermal throttling) lands on every variant
  alike instead of on whichever was measured last;
* **launched** (``--launch``): each variant's server is started through the launcher
  (``dsv4-serve``) with the variant's environment added, measured ``repeats`` times,
  and stopped before the next one starts (one server holds the GPUs at a time).

Each run is one ladder measurement of the matrix's envelope; its aggregate decode
rate (time to first token excluded) is the run's rate. A failed run is kept with its
error, never dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dsv4_evals.ladder.envelopes import EnvelopeLike
from dsv4_evals.ladder.run import LadderOptions, LaunchOptions, run_ladder
from dsv4_evals.ladder.server import LaunchedServer, LaunchError, serve_command
from dsv4_evals.matrix.variants import Variant


@dataclass(frozen=True)
class Measurement:
    variant: str
    repeat: int
    base_url: str
    tok_s: float | None
    error: str | None
    at: str  # UTC time the run ended
    bunched: bool = False  # the ladder's warning: chunks read in bursts (see measure)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Measurement:
        return cls(str(doc["variant"]), int(doc["repeat"]), str(doc["base_url"]),
                   None if doc.get("tok_s") is None else float(doc["tok_s"]),
                   doc.get("error"), str(doc.get("at", "")), bool(doc.get("bunched", False)))


OnMeasure = Callable[[Measurement], None]


def measure_once(envelope: EnvelopeLike, options: LadderOptions, variant: str,
                 repeat: int) -> Measurement:
    """One ladder run of ``envelope`` at ``options.base_url``."""
    (result,) = run_ladder([envelope], options).results
    rate = result.aggregate_tok_s if not result.errors else None
    error = "; ".join(result.errors) or (None if rate is not None else "no decode rate")
    return Measurement(variant, repeat, options.base_url, rate, error, _now(),
                       bool(result.warnings))


def measure_running(
    servers: Sequence[tuple[Variant, str]],
    envelope: EnvelopeLike,
    options: LadderOptions,
    repeats: int,
    on_measure: OnMeasure,
    first_repeat: int = 0,
) -> None:
    """Interleaved runs on already running servers: repeat by repeat, variant by variant."""
    for repeat in range(first_repeat, first_repeat + repeats):
        for variant, url in servers:
            opts = dataclasses.replace(options, base_url=url, launch=None)
            on_measure(measure_once(envelope, opts, variant.name, repeat))


def measure_launched(
    variants: Sequence[Variant],
    envelope: EnvelopeLike,
    options: LadderOptions,
    launch: LaunchOptions,
    repeats: int,
    on_measure: OnMeasure,
    first_repeat: int = 0,
) -> None:
    """Start each variant's server with its environment, run it ``repeats`` times, stop it."""
    for variant in variants:
        argv = serve_command(launch.launcher, envelope.gpu, envelope.tp, envelope.context,
                             envelope.seqs, launch.model_args)
        log = launch.log_dir / f"server-{variant.name}.log"
        opts = dataclasses.replace(options, launch=None)
        try:
            with LaunchedServer(argv, options.base_url, log, launch.ready_timeout_s,
                                launch.stop_grace_s, env=variant.env,
                                use_proxy_env=options.use_proxy_env):
                for repeat in range(first_repeat, first_repeat + repeats):
                    on_measure(measure_once(envelope, opts, variant.name, repeat))
        except LaunchError as exc:
            for repeat in range(first_repeat, first_repeat + repeats):
                on_measure(Measurement(variant.name, repeat, options.base_url, None,
                                       f"LaunchError: {exc}", _now()))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
