"""Time dsv4's SWA decode path against vLLM 0.33.0's on this GPU; tune its table.

vLLM's side is the work of ``DeepseekSparseSWAMetadataBuilder.build`` that dsv4 takes
over for a decode-only step
(:func:`~dsv4_evals.bench.swa_decode.harness.vllm_decode_path`: the ``torch.ge`` into
``is_valid_token``, the zero fill of ``decode_swa_lens``, vLLM's rows kernel, the
slices); dsv4's side is the kernel's checks and one launch per tile
(``tokens_per_program``, ``cols_per_program``, ``num_warps``). Each probe is timed on both
clocks, host µs (wall time of back-to-back calls) and GPU µs (CUDA-graph replay), and a
tile's ratio at a probe is the worse of the two; before a tile is timed at a step, its
buffers and views are checked equal to vLLM's there.

The table: boxes of decode tokens (1, 2-64, 65-512, 513-8192) at DeepSeek-V4's row
width (128), each probed over every padding kind (none, a padded tail, padding only).
A box's probes are its corners and seeded random keys
(:func:`dsv4_evals.bench.probes.box_probes`), at least :data:`MIN_PROBES`, each a step of
its own seed: a box with fewer distinct keys (T = 1) has its keys repeated with other
seeds (other contexts, replaying or not). The tile with the best worst ratio is
accepted if an independent second pass confirms it beats vLLM by ``--margin`` at every
probe on both clocks; a box no tile wins is split in two along the tokens once; a box
still lost gets no entry (vLLM's build runs there).

    python -m dsv4_evals.bench.swa_decode.tune [--json OUT.json] [--write]

``--write`` replaces ``packages/policy/src/dsv4_policy/tables/swa_decode.toml``
(validated first), keeping every other arch's entries as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from dsv4_kernels.swa_decode import launch
from dsv4_policy.kernels import swa_decode as policy

from dsv4_evals.bench import tuning
from dsv4_evals.bench.swa_decode import harness as h

CANDIDATES: list[tuple[int, int, int]] = [
    (1, 128, 1), (2, 128, 1), (4, 128, 1), (4, 128, 2), (8, 128, 2), (8, 128, 4),
    (16, 128, 4), (16, 128, 8), (32, 128, 4), (32, 128, 8), (64, 128, 8), (2, 64, 1),
    (8, 64, 2), (16, 64, 4),
]
TOKEN_BOXES = [(1, 1), (2, 64), (65, 512), (513, 8192)]
PADDING = (min(h.PADDING_KINDS), max(h.PADDING_KINDS))
MIN_PROBES = 12
"""Steps a box is timed at, at least: a box of fewer keys (the one-token box holds three,
one per padding kind) repeats them with other seeds."""
HEADER = ("SWA decode metadata launch table. Entries are written by the tuner "
          "(python -m dsv4_evals.bench.swa_decode.tune --write) from measurements: a "
          "tile is kept only where dsv4's decode-only build (one launch writing "
          "is_valid_token, the tail of decode_swa_lens and the decode rows) beat vLLM "
          "0.33.0's decode-path ops in both host and GPU time at every probe of the "
          "entry's box, twice; a key no entry matches gets vLLM's own build unchanged.")
ratio = tuning.ratio


class Measure(tuning.Measure):
    """``measure(point, tile) -> (host µs, GPU µs)``, each step made once per point (its
    ``seed`` field is the step's seed) and checked against vLLM's side before a tile is
    timed there."""

    def __init__(self, device: torch.device, rows: h.RowsKernel) -> None:
        super().__init__(device, h.BASELINE, h.call_of, h.host_us)
        self.rows = rows

    def runner(self, call: object, tile: object) -> Callable[[], object]:
        return h.runner(call, tile, self.rows)  # type: ignore[arg-type]

    def problem(self, point: dict[str, int], call: object, tile: object) -> str | None:
        found = h.differences(call, tile, self.rows)  # type: ignore[arg-type]
        return f"tile {tile}: differs from vLLM's side at {point}: {found}" if found else None


def choose(points: list[dict[str, int]], measure: tuning.Measure, margin: float, keep: int = 3
           ) -> tuple[tuple[int, int, int] | None, float, dict[str, float]]:
    """The tile with the best worst ratio over ``points``, confirmed by a second pass."""
    return tuning.choose(points, measure, CANDIDATES, h.BASELINE, margin, keep)


def box_points(box: dict[str, tuple[int, int]], seed: int, random_points: int
               ) -> list[dict[str, int]]:
    """The box's probe points, at least :data:`MIN_PROBES`, each with its own ``seed``:
    corners and seeded random keys, more random keys while the box has them, then the
    keys again with other seeds."""
    found = tuning.topped_up(box, seed, random_points, MIN_PROBES)
    keys = list(found)
    while len(found) < MIN_PROBES:
        found.append(keys[len(found) % len(keys)])
    return [{**p, "seed": seed * 1000 + i} for i, p in enumerate(found)]


def entry(arch: str, box: dict[str, tuple[int, int]], tile: tuple[int, int, int], worst: float,
          probes_count: int, machine: dict[str, str], command: str) -> policy.Entry:
    t0, t1 = box["num_tokens"]
    return policy.Entry(
        f"{arch}-w{h.INDEX_WIDTH}-t{t0}-{t1}",
        {"arch": arch, "index_width": h.INDEX_WIDTH, "num_tokens": policy.Range(t0, t1)},
        policy.Tile(*tile),
        {**machine, "probes": probes_count, "worst_speedup": f"{worst:.3f}x",
         "command": command},
    )


def anchors(device: torch.device) -> Iterator[tuple[str, dict[str, int], object]]:
    """The ladder's steps: each anchor shape, its point numbered."""
    for i, shape in enumerate(h.anchor_shapes()):
        point = {"num_tokens": shape.num_tokens, "anchor": i}
        yield shape.label, point, h.make_call(shape, device)


def prepare(device: torch.device) -> tuple[Measure, dict[str, object]]:
    rows = h.rows_kernel()
    print(f"vLLM's rows kernel: {rows.origin}", flush=True)
    launch.warmup(CANDIDATES, device)
    return Measure(device, rows), {"rows_kernel": rows.origin}


TUNER = tuning.Tuner(
    kernel="swa_decode", description=__doc__.split("\n\n")[0], candidates=CANDIDATES,
    baseline=h.BASELINE, boxes=[{"num_tokens": t, "padding": PADDING} for t in TOKEN_BOXES],
    box_points=box_points, prepare=prepare, anchors=anchors, reference=launch.BASELINE_TILE,
    reference_label=str(launch.BASELINE_TILE), resolve=h.resolved_tile, entry=entry,
    render=policy.render_table, load=policy.loads_table, header=HEADER,
    interpreting=launch.interpreting)


def main(argv: list[str] | None = None) -> int:
    return tuning.main(TUNER, argv)


if __name__ == "__main__":
    raise SystemExit(main())
