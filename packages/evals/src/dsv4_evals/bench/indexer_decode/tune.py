"""Time dsv4's indexer decode path against vLLM 0.33.0's on this GPU; tune its table.

vLLM's side is its decode path's work for a decode-only step
(:func:`~dsv4_evals.bench.indexer_decode.harness.vllm_decode_path`: five device ops, the
host ``diff`` with its ``.item()`` calls, slices and an unsqueeze); dsv4's side is one host
pass, the kernel's checks and one launch per tile (``tokens_per_program``, ``num_warps``).
Each probe is timed on both clocks, host µs (wall time of back-to-back calls) and GPU µs
(CUDA-graph replay), and a tile's ratio at a probe is the worse of the two; before a
tile is timed at a step, its buffers and views are checked equal to vLLM's there.

The table: boxes of decode tokens (1, 2-64, 65-512, 513-8192) with as many decode
requests (CUDA-graph padding and tokens past the requests included), compress ratio 4,
both values of ``deep_gemm`` (the DeepGEMM schedule is the same call on both sides, so
a ratio above 1 without it stays above 1 with it). A box's probes are its corners and
seeded random keys (:func:`dsv4_evals.bench.probes.box_probes`), at least
:data:`MIN_PROBES`; a box with fewer keys than that (the one-token box holds one: a single
request of one token) is probed at :data:`MIN_PROBES` steps instead, each key's steps told
apart by a ``variant`` and built with seeds of their own. The tile with the best
worst ratio is accepted if an independent second pass confirms it beats vLLM by
``--margin`` at every probe on both clocks; a box no tile wins is split in two along the
tokens once; a box still lost gets no entry (vLLM's build runs there).

    python -m dsv4_evals.bench.indexer_decode.tune [--json OUT.json] [--write]

``--write`` replaces ``packages/policy/src/dsv4_policy/tables/indexer_decode.toml``
(validated first), keeping every other arch's entries as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from dsv4_kernels.indexer_decode import launch
from dsv4_policy.kernels import indexer_decode as policy

from dsv4_evals.bench import probes, tuning
from dsv4_evals.bench.indexer_decode import harness as h

CANDIDATES: list[tuple[int, int]] = [
    (16, 1), (32, 1), (64, 1), (128, 1), (128, 2), (256, 2), (256, 4), (512, 4), (1024, 4),
    (2048, 8), (4096, 16), (8192, 16),
]
TOKEN_BOXES = [(1, 1), (2, 64), (65, 512), (513, 8192)]
MIN_PROBES = 12
"""Steps a box is timed at, at least: what ``tests/test_provenance.py`` asks of every
shipped entry. A box holding fewer keys (the one-token box holds one: a single request of
one token) is timed at that many steps of its keys, told apart by a ``variant``."""
VARIANTS = 1 << 16
"""Values a probe's ``variant`` takes: two variants of one key are two steps, each built
with its own seed (the step cache is keyed by the whole point)."""
HEADER = ("Indexer decode metadata launch table. Entries are written by the tuner "
          "(python -m dsv4_evals.bench.indexer_decode.tune --write) from measurements: a "
          "tile is kept only where dsv4's decode-only build (one launch and one host pass "
          "over query_start_loc) beat vLLM 0.33.0's decode-path ops in both host and GPU "
          "time at every probe of the entry's box, twice; a key no entry matches gets "
          "vLLM's own build unchanged.")
REFERENCE = (1024, 4)
"""The tile the first ladder times against vLLM."""
ratio = tuning.ratio


class Measure(tuning.Measure):
    """``measure(point, tile) -> (host µs, GPU µs)``, each step made once per point (a
    ``variant`` makes another step of the same key, with another seed) and checked
    against vLLM's side before a tile is timed there."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(device, h.BASELINE, h.call_of, h.host_us)

    def runner(self, call: object, tile: object) -> Callable[[], object]:
        return h.runner(call, tile)  # type: ignore[arg-type]

    def problem(self, point: dict[str, int], call: object, tile: object) -> str | None:
        if h.outputs_equal(call, tile):  # type: ignore[arg-type]
            return None
        return f"tile {tile}: output differs from vLLM's at {point}"


def choose(points: list[dict[str, int]], measure: tuning.Measure, margin: float, keep: int = 3
           ) -> tuple[tuple[int, int] | None, float, dict[str, float]]:
    """The tile with the best worst ratio over ``points``, confirmed by a second pass."""
    return tuning.choose(points, measure, CANDIDATES, h.BASELINE, margin, keep)


def box_points(box: dict[str, tuple[int, int]], seed: int, random_points: int
               ) -> list[dict[str, int]]:
    """The box's probes: its corners and ``random_points`` seeded random keys, topped up
    to :data:`MIN_PROBES` keys where it holds that many; where it holds fewer (the
    one-token box), its corners and seeded random keys each with a ``variant``, at
    least :data:`MIN_PROBES` steps in all."""
    found = tuning.topped_up(box, seed, random_points, MIN_PROBES)
    if len(found) < MIN_PROBES:
        varied = {**box, "variant": (0, VARIANTS - 1)}
        corners = len(probes.corners(varied, box))
        found = [p.point for p in probes.box_probes(
            varied, seed=seed, random_points=max(random_points, MIN_PROBES - corners),
            corner_fields=box)]
    return found


def entry(arch: str, box: dict[str, tuple[int, int]], tile: tuple[int, int], worst: float,
          probes_count: int, machine: dict[str, str], command: str) -> policy.Entry:
    (t0, t1), (r0, r1) = box["num_tokens"], box["num_reqs"]
    return policy.Entry(
        f"{arch}-t{t0}-{t1}",
        {"arch": arch, "compress_ratio": h.RATIO, "num_reqs": policy.Range(r0, r1),
         "num_tokens": policy.Range(t0, t1)},
        policy.Tile(*tile),
        {**machine, "probes": probes_count, "worst_speedup": f"{worst:.3f}x",
         "command": command},
    )


def anchors(device: torch.device) -> Iterator[tuple[str, dict[str, int], object]]:
    """The ladder's steps: each anchor shape, at its padded (else real) request count."""
    for shape in h.anchor_shapes():
        size = shape.padded or shape.real
        yield shape.label, {"num_reqs": size, "num_tokens": size}, h.make_call(shape, device)


def prepare(device: torch.device) -> tuple[Measure, dict[str, object]]:
    launch.warmup(CANDIDATES, device)
    return Measure(device), {}


TUNER = tuning.Tuner(
    kernel="indexer_decode", description=__doc__.split("\n\n")[0], candidates=CANDIDATES,
    baseline=h.BASELINE, boxes=[{"num_tokens": t, "num_reqs": t} for t in TOKEN_BOXES],
    box_points=box_points, prepare=prepare, anchors=anchors, reference=REFERENCE,
    reference_label="x".join(map(str, REFERENCE)), resolve=h.resolved_tile, entry=entry,
    render=policy.render_table, load=policy.loads_table, header=HEADER,
    interpreting=launch.interpreting, tied=("num_reqs",))


def main(argv: list[str] | None = None) -> int:
    return tuning.main(TUNER, argv)


if __name__ == "__main__":
    raise SystemExit(main())
