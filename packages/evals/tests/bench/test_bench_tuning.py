"""The two-clock tuner's run (``dsv4_evals.bench.tuning``) on made-up clocks: a box no
tile wins is split (its tied fields following), a won half gets its entry, and the
command line writes the JSON file and the table with every other arch's entries kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from dsv4_evals.bench import probes, tuning

CANDIDATES = [(16,), (4,)]
BASELINE = "baseline"


class Run:
    def __init__(self, call: object, tile: object) -> None:
        self.call, self.tile = call, tile


def clock(run: Run, device: torch.device, calls: int = 0, rounds: int = 0) -> float:
    """The baseline takes 10 µs; tile ``(n,)`` takes 5 µs at up to ``n`` tokens, else 20."""
    if run.tile == BASELINE:
        return 10.0
    tokens = run.call[0]  # type: ignore[index]
    return 5.0 if tokens <= run.tile[0] else 20.0  # type: ignore[index]


class Measure(tuning.Measure):
    def __init__(self, device: torch.device) -> None:
        super().__init__(device, BASELINE, lambda p, d, seed: (p["num_tokens"], seed), clock)

    def runner(self, call: object, tile: object) -> Run:  # type: ignore[override]
        return Run(call, tile)

    def problem(self, point: dict[str, int], call: object, tile: object) -> str | None:
        return None


def tuner(**changes: object) -> tuning.Tuner:
    fields: dict[str, object] = dict(
        kernel="made_up", description="a made-up kernel", candidates=CANDIDATES,
        baseline=BASELINE, boxes=[{"num_tokens": (1, 256), "num_reqs": (1, 256)}],
        box_points=lambda box, seed, n: [p.point for p in probes.box_probes(
            box, seed=seed, random_points=n)],
        prepare=lambda device: (Measure(device), {"facts": "kept"}),
        anchors=lambda device: [(f"T{t}", {"num_tokens": t, "num_reqs": t}, (t, 0))
                                for t in (8, 200)],
        reference=(4,), reference_label="4", resolve=lambda call, arch, table: (16,),
        entry=lambda arch, box, tile, worst, n, machine, command:
            f"{arch} {box['num_tokens']} {tile} {worst:.1f} {n} {command}",
        render=lambda entries, header: "\n".join([header, *map(str, entries)]) + "\n",
        load=lambda text, source: text, header="# made-up table",
        interpreting=lambda: False, tied=("num_reqs",))
    fields.update(changes)
    return tuning.Tuner(**fields)  # type: ignore[arg-type]


@pytest.fixture
def graph_clock(monkeypatch) -> None:
    monkeypatch.setattr(tuning.timing, "graph_us", lambda run, n, reps: clock(run, None))


def test_a_lost_box_is_split_with_its_tied_fields_and_a_won_half_kept(graph_clock) -> None:
    log: list[dict] = []
    box = {"num_tokens": (1, 256), "num_reqs": (1, 256)}
    accepted = tuning.tune_box(tuner(), box, Measure(torch.device("cpu")), 0, 2, 1.02, 1, log)
    assert [(b, tile, worst) for b, tile, worst, _ in accepted] == [
        ({"num_tokens": (1, 16), "num_reqs": (1, 16)}, (16,), 2.0)]
    assert [entry["box"]["num_tokens"] for entry in log] == [[1, 256], [1, 16], [17, 256]]
    assert all(entry["box"]["num_reqs"] == entry["box"]["num_tokens"] for entry in log)
    assert [entry["tile"] for entry in log] == [None, (16,), None]
    assert tuning.tune_box(tuner(), box, Measure(torch.device("cpu")), 0, 2, 1.02, 0, []) == []


def test_the_worse_clock_decides_and_a_lost_confirmation_is_no_win() -> None:
    assert tuning.ratio((10.0, 4.0), (2.0, 5.0)) == 0.8
    seen: dict[int, int] = {}

    def measure(point: dict[str, int], tile: object) -> tuple[float, float]:
        if tile == BASELINE:
            seen[point["n"]] = seen.get(point["n"], 0) + 1
            return (10.0, 10.0)
        return (5.0, 5.0) if seen[point["n"]] == 1 else (11.0, 5.0)  # the first pass only

    points = [{"n": i} for i in range(4)]
    tile, worst, screened = tuning.choose(points, measure, CANDIDATES, BASELINE, 1.02)
    assert tile is None and worst == 2.0 and screened == {"16": 2.0, "4": 2.0}


def test_the_command_line_writes_the_json_and_the_table(graph_clock, monkeypatch,
                                                        tmp_path: Path, capsys) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Made-up GPU")
    monkeypatch.setattr(tuning.tables, "other_arch_entries", lambda kernel, arch: ["kept"])
    monkeypatch.setattr(tuning.paths, "table", lambda kernel: tmp_path / f"{kernel}.toml")
    out = tmp_path / "tune.json"
    assert tuning.main(tuner(), ["--json", str(out), "--write", "--random-points", "2"]) == 0
    text = (tmp_path / "made_up.toml").read_text()
    command = "python -m dsv4_evals.bench.made_up.tune --write"
    assert text == f"# made-up table\nkept\nsm90 (1, 16) (16,) 2.0 6 {command}\n"
    data = json.loads(out.read_text())
    assert list(data) == ["arch", "gpu", "date", "versions", "facts", "seed", "margin",
                          "candidates", "seconds", "measurements", "ladder",
                          "ladder_with_table", "boxes", "table"]
    assert (data["arch"], data["gpu"], data["table"]) == ("sm90", "Made-up GPU", text)
    assert [r["tile"] for r in data["ladder"]] == ["(4,)", "(4,)"]
    assert [r["tile"] for r in data["ladder_with_table"]] == ["(16,)", "(16,)"]
    assert data["ladder"][0]["gpu_speedup"] == 0.5 and data["ladder"][1]["host_speedup"] == 0.5
    said = capsys.readouterr().out
    assert "vLLM 0.33.0 against dsv4 at 4):" in said
    assert f"wrote {tmp_path / 'made_up.toml'} (2 entries)" in said
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match=r"dsv4_evals\.bench\.made_up\.tune needs a CUDA GPU"):
        tuning.main(tuner(), [])
